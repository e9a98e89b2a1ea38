"""s3log tells operators what it did: forks, retries, repairs and gc deletions are logged
under the ``s3log`` logger, and results print readably."""

from __future__ import annotations

import logging
import re

import pytest

import s3log
from s3log.faults import FaultyStore
from s3log.protocol import LogConfig, RetryPolicy

FAST = LogConfig(retry=RetryPolicy(attempts=6, initial=0.0001, max_backoff=0.0005))


def test_a_fork_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    log = s3log.Log(s3log.MemoryStore())
    a = log.create()
    b = log.open(a.session_id)
    a.append("k", 1)
    a.commit()
    b.append("k", 2)
    with caplog.at_level(logging.INFO, logger="s3log"):
        result = b.commit()
    assert result.fork is not None
    assert any(r.levelno == logging.WARNING and "forking" in r.getMessage() for r in caplog.records)
    text = repr(result)
    # No bytes reprs (hashes are hex) and no writer cache: an id may end in "b" before
    # its closing quote, so look for a bytes literal, not for "b'" anywhere.
    assert "ForkInfo(parent=" in text and "cache" not in text and not re.search(r"[(=, ]b'", text)


def test_retries_and_gc_deletions_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = s3log.MemoryStore()
    calls = {"n": 0}

    def plan(method: str, key: str) -> str | None:
        calls["n"] += 1
        return "503" if method == "get" and calls["n"] < 4 else None

    log = s3log.Log(store)
    sid = log.create().session_id
    store.put_raw(f"s3log/sessions/{sid}/seg/000000000000-" + "0" * 64 + ".cbor", b"x", mtime_ms=1)
    with caplog.at_level(logging.DEBUG, logger="s3log"):
        s3log.Log(FaultyStore(store, plan), config=FAST).read(sid)  # type: ignore[arg-type]
        log.gc(older_than_ms=0)
    messages = [r.getMessage() for r in caplog.records]
    assert any("retrying" in m for m in messages)
    assert any(m.startswith("gc deleted") for m in messages)


def test_commit_result_repr_is_readable() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    w.append("k", 1)
    text = repr(w.commit())
    assert text.startswith("CommitResult(session=") and "acked=1" in text and "WriterState" not in text
