"""The README's quickstart runs as written, against the local S3 (sync and async snippets)."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path

import s3log
from s3log.testing import LocalS3

README = Path(__file__).resolve().parent.parent / "README.md"


def _quickstart_blocks() -> list[str]:
    text = README.read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_quickstart_runs_as_written(s3log_server: LocalS3) -> None:
    # The snippets name "my-bucket" and take the endpoint from AWS_ENDPOINT_URL, which
    # the s3log_server fixture points at the local server.
    s3log_server.client().create_bucket(Bucket="my-bucket")
    sync_block, async_block = _quickstart_blocks()[:2]
    scope: dict[str, object] = {}
    exec(compile(sync_block, "README.md (quickstart)", "exec"), scope)
    child = scope["child"]
    assert isinstance(child, str) and s3log.Log(s3log.S3Store("my-bucket")).read(child).seed is not None
    body = "async def _main():\n" + textwrap.indent(async_block, "    ") + "    return entries\n"
    ascope: dict[str, object] = {"s3log": s3log, "asyncio": asyncio}
    exec(compile(body, "README.md (async)", "exec"), ascope)
    entries = asyncio.run(ascope["_main"]())  # type: ignore[operator]
    assert [e.data for e in entries] == list(range(100))
