"""s3log tells operators what it did: forks, retries, repairs and gc deletions are logged
under the ``s3log`` logger, and results print readably."""

from __future__ import annotations

import logging
import re

import pytest

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.testing.faults import FaultyStore
from tests.helpers import stale_writer

FAST = LogConfig(retry=RetryPolicy(attempts=6, initial=0.0001, max_backoff=0.0005))


def test_a_fork_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    _, b = stale_writer(s3log.Log(s3log.MemoryStore()))
    with caplog.at_level(logging.INFO, logger="s3log"):
        result = b.commit()
    assert result.fork is not None
    assert any(r.levelno == logging.WARNING and "forked into" in r.getMessage() for r in caplog.records)
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


def _conflict_fork(caplog: pytest.LogCaptureFixture) -> tuple[s3log.CommitResult, list[logging.LogRecord]]:
    _, b = stale_writer(s3log.Log(s3log.MemoryStore()))
    with caplog.at_level(logging.INFO, logger="s3log"):
        result = b.commit()
    return result, [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_fork_record_names_both_sessions_and_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    result, records = _conflict_fork(caplog)
    assert result.fork is not None
    parent, child = result.fork.parent.session, result.fork.child
    (record,) = records
    message = record.getMessage()
    # Both ids in the text, and as attributes a handler (or a JSON formatter) can use.
    assert parent in message and child in message and "reason: conflict" in message
    assert (record.s3log_session, record.s3log_fork, record.s3log_fork_reason) == (  # type: ignore[attr-defined]
        parent, child, "conflict")


def test_the_library_prints_nothing_when_logging_is_not_configured() -> None:
    import subprocess
    import sys

    # A fresh interpreter: no handler configured anywhere, as in an application that
    # never set up logging (pytest's own capture would hide the last-resort handler).
    code = (
        "import s3log\n"
        "log = s3log.Log(s3log.MemoryStore())\n"
        "a = log.create(); b = log.open(a.session_id)\n"
        "a.append('k', 1); a.commit(); b.append('k', 2)\n"
        "assert b.commit().fork is not None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_s3log_logger_has_a_null_handler_and_still_propagates() -> None:
    logger = logging.getLogger("s3log")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.propagate  # an application's root handler still receives the records
