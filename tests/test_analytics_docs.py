"""Every Python snippet of docs/analytics.md runs, in order, against the local S3."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from s3log.testing.plugin import LocalS3

DOC = Path(__file__).resolve().parent.parent / "docs" / "analytics.md"


def test_analytics_doc_snippets_run(s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3log_server.endpoint_url)
    client = s3log_server.client()
    if "agents" not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket="agents")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    scope: dict[str, object] = {"__name__": "analytics_doc"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), scope)
