"""AsyncS3Store over aiobotocore, and over the aioboto3 session or client a caller passes.

The ``async`` extra brings aiobotocore only (aioboto3 pins one exact aiobotocore, so it
could not be installed beside an application's boto3 pin); an application that uses
aioboto3 hands the store its session or a client it opened, and both work as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import s3log
from s3log.store.aio_s3 import client_config
from s3log.testing.localserver import LocalS3


async def _round_trip(store: s3log.AsyncS3Store) -> list[Any]:
    log = s3log.AsyncLog(store, config=s3log.LogConfig(activity_index=False))
    w = await log.create("s")
    w.append("k", {"n": 1})
    await w.commit()
    return [e.data for e in (await log.read("s")).entries]


def test_the_default_client_is_aiobotocore_s(s3log_server: LocalS3) -> None:
    async def main() -> list[Any]:
        async with s3log.AsyncS3Store(s3log_server.create_bucket(), endpoint_url=s3log_server.endpoint_url) as store:
            got = await _round_trip(store)
            client = await store._c()
            assert type(client).__module__.startswith("aiobotocore")
            return got

    assert asyncio.run(main()) == [{"n": 1}]


def test_an_aiobotocore_session_of_the_callers(s3log_server: LocalS3) -> None:
    from aiobotocore.session import get_session

    async def main() -> list[Any]:
        store = s3log.AsyncS3Store(s3log_server.create_bucket(), session=get_session(),
                                   endpoint_url=s3log_server.endpoint_url)
        assert store.precondition_scope is None  # the caller's session: probed on its own
        async with store:
            return await _round_trip(store)

    assert asyncio.run(main()) == [{"n": 1}]


def test_an_aioboto3_session_or_client_of_the_callers(s3log_server: LocalS3) -> None:
    aioboto3 = pytest.importorskip("aioboto3")
    bucket = s3log_server.create_bucket()

    async def main() -> tuple[list[Any], list[Any]]:
        session = aioboto3.Session()
        store = s3log.AsyncS3Store(bucket, session=session, endpoint_url=s3log_server.endpoint_url)
        async with store:
            via_session = await _round_trip(store)
        async with contextlib.AsyncExitStack() as stack:
            client = await stack.enter_async_context(session.client(
                "s3", endpoint_url=s3log_server.endpoint_url, config=client_config()))
            other = s3log.AsyncLog(s3log.AsyncS3Store(bucket, client=client))
            via_client = [e.data for e in (await other.read("s")).entries]
        return via_session, via_client

    assert asyncio.run(main()) == ([{"n": 1}], [{"n": 1}])
