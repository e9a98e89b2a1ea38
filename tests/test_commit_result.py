"""A commit result says where each acknowledged entry is stored.

One commit can store its batch in two sessions: after a head PUT whose reply was lost,
the next commit finds a prefix of the batch landed in the parent (someone built on it)
and forks the rest. Every acknowledged entry names its own session, and reading that
session at the entry's seq gives exactly that entry.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.errors import StoreError
from s3log.testing.faults import AsyncFaultyStore, FaultyStore


def _fast() -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=2, initial=0.0001, max_backoff=0.0002, max_time=1.0))


class _LoseOneReply:
    """The next head PUT of the armed session lands and its reply is lost; the GETs that
    would settle it fail, so the commit ends undecided (its entries stay "uncertain")."""

    def __init__(self) -> None:
        self.session = ""
        self.state = "off"

    def __call__(self, method: str, key: str) -> Any:
        if self.state == "put" and method == "put_if_match" and key.endswith(f"{self.session}/head"):
            self.state = "reads"
            return "timeout-landed"
        if self.state == "reads" and method == "get" and key.endswith(f"{self.session}/head"):
            return "503"
        return None


def _check_positions(read: Any, result: s3log.CommitResult) -> None:
    assert result.acked, "the commit acknowledged nothing"
    for e in result.acked:
        assert isinstance(e, s3log.AckedEntry)
        stored = read(e.session_id).entries[e.seq]
        assert stored == e, f"({e.session_id}, {e.seq}) holds {stored}, not {e}"
        assert stored.hash == e.hash and e.position == (e.session_id, e.seq, e.hash)
    for e in result.entries:
        assert read(e.session_id).entries[e.seq] == e


def test_a_batch_split_between_parent_and_fork_says_where_each_entry_is() -> None:
    inner = s3log.MemoryStore()
    plan = _LoseOneReply()
    log_a = s3log.Log(FaultyStore(inner, plan), config=_fast())
    log_b = s3log.Log(inner, config=_fast())
    w_a = log_a.create()
    plan.session = parent = w_a.session_id
    w_a.append_durable("k", "a0")
    plan.state = "put"
    w_a.append("k", "x")
    with pytest.raises(StoreError):
        w_a.commit()  # x landed in the parent; A cannot tell
    plan.state = "off"
    log_b.open(parent).append_durable("k", "b0")  # B builds on x
    w_a.append("k", "y")
    result = w_a.commit()  # x found landed in the parent, y forked
    assert result.fork is not None and result.session_id != parent
    assert [(e.data, e.session_id) for e in result.acked] == [("x", parent), ("y", result.session_id)]
    _check_positions(log_b.read, result)


def test_append_durable_says_the_session_of_an_entry_that_landed_in_the_parent() -> None:
    async def main() -> None:
        inner = s3log.AsyncMemoryStore()
        plan = _LoseOneReply()
        log_a = s3log.AsyncLog(AsyncFaultyStore(inner, plan), config=_fast())
        log_b = s3log.AsyncLog(inner, config=_fast())
        w_a = await log_a.create()
        plan.session = parent = w_a.session_id
        await w_a.append_durable("k", "a0")
        plan.state = "put"
        t = w_a.submit("k", "x")
        with pytest.raises(StoreError):
            await w_a.wait(t)
        plan.state = "off"
        await (await log_b.open(parent)).append_durable("k", "b0")
        later = w_a.submit("k", "y")
        x = await w_a.wait(t)
        y = await w_a.wait(later)
        assert (x.session_id, y.session_id) == (parent, w_a.session_id) and parent != w_a.session_id
        for e in (x, y):
            assert (await log_b.read(e.session_id)).entries[e.seq] == e

    asyncio.run(main())


def test_an_acked_entry_equals_the_entry_as_read() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    e = w.append_durable("k", {"a": 1})
    assert e.session_id == w.session_id
    assert log.read(w.session_id).entries[e.seq] == e == log.read(w.session_id).entries[e.seq]
    assert e != log.read(w.session_id).entries[0] or e.seq == 0


def test_reprs_show_short_hex_hashes_bounded_data_and_no_caches() -> None:
    """A result or entry printed in a log line or a REPL is readable: hashes as 16 hex
    digits, never a bytes literal; a fork entry's seed cut; the cached record left out."""
    import logging

    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create("s")
    for i in range(30):
        w.append("k", {"i": i, "blob": b"\x00\xff" * 40, "text": "x" * 500})
    first = w.commit()
    other = log.open("s")
    w.append("k", 1)
    w.commit()
    other.append("k", 2)
    logging.disable(logging.WARNING)
    try:
        forked = other.commit()  # a conflict: a fork whose first entry carries the 30 as its seed
    finally:
        logging.disable(logging.NOTSET)
    entry = log.read("s").entries[0]
    texts = [repr(first), repr(forked), repr(forked.fork), repr(entry), repr(forked.entries[0]), repr(forked.acked[0])]
    for text in texts:
        assert not re.search(r"(?<!\w)b'", text) and "\\x" not in text, text  # no bytes literal
        assert "raw=" not in text and "ws=" not in text, text  # no cache
        assert len(text) < 1200, text
    assert repr(entry).startswith(f"Entry(seq=0, kind='k', ts={entry.ts}, hash={entry.hash.hex()[:16]}, prev=None, ")
    assert "<80 bytes 00ff00ff00ff00ff…>" in repr(entry)
    assert repr(forked.acked[0]).startswith(f"AckedEntry(session_id={forked.session_id!r}, seq=1, kind='k', ")
    assert f"prev={forked.entries[0].hash.hex()[:16]}" in repr(forked.acked[0])
    assert forked.fork is not None and forked.fork.parent.hash is not None
    assert forked.fork.parent.hash.hex()[:16] in repr(forked.fork)


def test_a_commit_result_exposes_its_outcome_and_no_writer_internals() -> None:
    """The writer's chain position stays private: what a caller reads is the outcome and
    where the writer now stands (its session, head and ETag)."""
    w = s3log.Log(s3log.MemoryStore()).create("s1")
    w.append("k", 1)
    result = w.commit()
    public = {n for n in dir(result) if not n.startswith("_")}
    assert public == {"acked", "entries", "etag", "fork", "forks", "head", "session_id"}
    assert result.session_id == "s1" and result.head.seq == 0 and result.etag is not None
