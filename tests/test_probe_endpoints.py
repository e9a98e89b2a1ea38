"""The precondition probe's scope is the endpoint a store's client uses, chosen by profile or not.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import s3log
from s3log.testing.plugin import LocalS3
from tests.fault_proxy import FaultProxy


@pytest.mark.parametrize("kind", ["boto3", "aioboto3"])
def test_a_store_of_another_endpoint_chosen_by_profile_is_probed(
    kind: str, s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # Two profiles, one endpoint each (the server, and a proxy in front of it standing for
    # another S3-compatible service): the same bucket name on both.
    with FaultProxy(s3log_server.host, s3log_server.port) as proxy:
        config = tmp_path / "config"
        config.write_text(f"[profile here]\nendpoint_url = {s3log_server.endpoint_url}\nregion = us-east-1\n"
                          f"[profile there]\nendpoint_url = {proxy.endpoint_url}\nregion = us-east-1\n")
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        bucket = s3log_server.create_bucket()
        cfg = s3log.LogConfig(activity_index=False)

        def probed(profile: str, sid: str) -> bool:
            monkeypatch.setenv("AWS_PROFILE", profile)
            if kind == "boto3":
                store: Any = s3log.S3Store(bucket)
                s3log.Log(store, config=cfg).create(sid)
            else:
                store = s3log.AsyncS3Store(bucket)

                async def go() -> None:
                    await s3log.AsyncLog(store, config=cfg).create(sid)
                    await store.aclose()

                asyncio.run(go())
            return int(store.requests["PUT"]) > 1

        assert probed("here", f"a-{kind}")
        assert not probed("here", f"b-{kind}")  # the same endpoint: remembered
        before = len(proxy.plan.kinds())
        assert probed("there", f"c-{kind}")  # was: not probed, though another endpoint
        assert len(proxy.plan.kinds()) > before  # (the store did use the other endpoint)
