"""Review s9b: defects the simulator's retention actor found (s3log.sim, ``retention=``).

``append_latest(..., create_meta=...)`` promises to create the session when it does
not exist. Racing ``Log.delete`` of a *live* session (not a tombstone: that case was
fixed in review s9), it raised ``SessionNotFound`` ("it was deleted while this writer
held it") instead: it read the head, the delete removed it, and its If-Match PUT met
404. Nothing of the call can land there after that 404, so creating at the free id
is safe. Found by simulator seed 24 (creator actor, ``retention=both``).

A writer holding a session that ``Log.delete`` removed, whose next commit merges
segments it does not hold in memory, raised ``SegmentMissing`` (a CorruptionError:
"segment listed in the head ... is missing") instead of the documented
``SessionNotFound``: the merge's GET met the deleted segment before the head PUT could
meet 404, and the re-read found no head at all. Found by simulator seeds 281 and 1753
(writers), 1721 and 41091 (the creator's append_latest).
"""

from __future__ import annotations

from typing import Any

import pytest

import s3log
from s3log.config import LogConfig
from tests.tombstones import tombstone_proc

from .test_review_s9 import SID, _HookedMatch


def _live_session() -> tuple[_HookedMatch, s3log.Log, s3log.CommitResult]:
    store = _HookedMatch()
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=1024))
    first = log.append_latest(SID, [("k", {"old": 0})], create_meta={})
    return store, log, first


def test_append_latest_with_create_meta_racing_a_delete_creates_the_session() -> None:
    """The head is read (live), Log.delete removes the session, then the If-Match PUT
    meets 404: with create_meta the session is created at the free id."""
    store, log, _ = _live_session()
    store.hook = lambda: log.delete(SID)
    acked = log.append_latest(SID, [("k", {"new": 0})], create_meta={}).acked
    entries = log.read(SID).entries
    assert [e.data for e in entries] == [{"new": 0}]
    assert [e.hash for e in entries] == [e.hash for e in acked]
    assert log.verify(SID).ok


def test_append_latest_with_create_meta_after_a_deleted_session_creates_it() -> None:
    """The same with ``after=`` (the previous result as a hint: no head GET): the hint's
    session was deleted since, the PUT meets 404, and the session is created anew."""
    _, log, first = _live_session()
    log.delete(SID)
    acked = log.append_latest(SID, [("k", {"new": 0})], create_meta={}, after=first).acked
    assert [e.data for e in log.read(SID).entries] == [{"new": 0}]
    assert [e.hash for e in log.read(SID).entries] == [e.hash for e in acked]


def test_append_latest_without_create_meta_racing_a_delete_is_session_not_found() -> None:
    """Without create_meta a missing session stays SessionNotFound (documented)."""
    store, log, _ = _live_session()
    store.hook = lambda: log.delete(SID)
    with pytest.raises(s3log.SessionNotFound):
        log.append_latest(SID, [("k", {"new": 0})])
    with pytest.raises(s3log.SessionNotFound):
        log.read(SID)


@pytest.mark.parametrize("commits", [1, 3, 5])
def test_writer_merging_segments_of_a_deleted_session_gets_session_not_found(commits: int) -> None:
    """Sequential flushes, no segment cache: the commit after the delete plans a merge
    and GETs a segment the delete removed. The session is gone, not corrupt."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=300, fanout=2, cache_levels=0, pending_max_bytes=0))
    w = log.create(SID)
    for i in range(commits):
        w.append("k", {"i": i, "pad": "x" * 100})
        w.commit()
    held = log.open(SID)  # holds the head, none of its segments
    log.delete(SID)
    held.append("k", {"new": 1, "pad": "y" * 400})
    with pytest.raises(s3log.SessionNotFound) as caught:
        held.commit()
    assert not isinstance(caught.value, s3log.CorruptionError)
    # With create_meta, append_latest creates the session at the free id.
    log2 = s3log.Log(store, config=LogConfig(tail_max_bytes=300, fanout=2, cache_levels=0, pending_max_bytes=0))
    assert log2.append_latest(SID, [("k", {"again": 1})], create_meta={}).acked
    assert [e.data for e in log2.read(SID).entries] == [{"again": 1}]


# ---------------------------------------------------------------- a fork's doubt, expired

def _drive(store: s3log.MemoryStore, proc: Any, stop: Any = None) -> Any:
    """Run a procedure on ``store``; ``stop(op)`` true after performing ``op`` abandons
    it there (an async commit cancelled once that request landed). Returns the result."""
    from s3log.ops import Parallel, Sleep, call_store

    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = proc.throw(error) if error is not None else proc.send(value)
        except StopIteration as done:
            return done.value
        value, error = None, None
        if isinstance(op, Sleep):
            continue
        ops = op.ops if isinstance(op, Parallel) else (op,)
        results: list[Any] = []
        for o in ops:
            try:
                results.append(call_store(store, o))
            except s3log.StoreError as exc:
                results.append(exc)
        if stop is not None and any(stop(o) for o in ops):
            proc.close()
            return None
        if isinstance(op, Parallel):
            value = results
        elif isinstance(results[0], BaseException):
            error = results[0]
        else:
            value = results[0]


@pytest.mark.parametrize("end", ["expire", "delete-and-recreate"])
def test_fork_left_undecided_is_continued_after_the_parent_expired(end: str) -> None:
    """A writer's commit finds part of its batch landed (an earlier, abandoned commit's
    head), forks from there and is abandoned once the child's head landed (the fork's
    doubt). The parent then expires (or is deleted and its id created again). The next
    commit meets a head with none of its entries: it forked again from its own older
    position, into a new child, and the rest of the batch was stored twice (the first
    child holds it too). Found by simulator seeds 40358 (expire) and 40848 (delete, then
    the creator took the id over)."""
    from s3log import protocol
    from s3log.core import LogCore
    from s3log.env import Env
    from s3log.ops import PutIfAbsent, PutIfMatch

    clock = [1_700_000_000_000]
    cfg = LogConfig(env=Env.deterministic(5, lambda: clock[0]))
    store = s3log.MemoryStore()
    core = LogCore(store, "p", cfg, None)
    head_key = core.layout.head(SID)
    w = core.writer(_drive(store, core.create(core.new_session(SID, {}, None))), None, "fork", None)
    w.add("k", {"p": "a"}, None)
    _drive(store, w.commit())  # a@0, acknowledged
    w.add("k", {"p": "b"}, None)
    # b's head lands; the commit is abandoned before its reply: b@1 stored, unacknowledged.
    _drive(store, w.commit(), stop=lambda o: isinstance(o, PutIfMatch) and o.key == head_key)
    other = core.writer(_drive(store, core.open(SID, None)), None, "fork", None)
    other.add("k", {"p": "x"}, None)
    _drive(store, other.commit())  # x@2 on top of b
    clock[0] += 10_000  # SID idle from here on; the child below is young
    w.add("k", {"p": "c"}, None)
    # Lost race: b found landed, the rest (c) forked from SID@1; abandoned once the
    # child's head landed.
    _drive(store, w.commit(), stop=lambda o: isinstance(o, (PutIfAbsent, PutIfMatch)) and o.key.endswith("/head")
           and o.key != head_key)
    clock[0] += 1_000
    if end == "expire":
        # A tombstone (what a sweep with write access stores): Log.expire deletes the
        # head instead, and the writer then meets 404 as after Log.delete.
        assert _drive(store, tombstone_proc(core.layout, cfg, 5_000)).expired == [SID]
    else:
        _drive(store, core.delete(SID))
        _drive(store, core.create(core.new_session(SID, {}, None)))
    result = _drive(store, w.commit())
    assert [e.data["p"] for e in result.acked] == ["b", "c"]
    stored: dict[str, list[str]] = {}
    for sid in _drive(store, protocol.list_session_ids(core.layout)):
        try:
            data = _drive(store, protocol.load(core.layout, sid))
        except s3log.SessionNotFound:
            continue  # expired
        for e in data.entries:
            if isinstance(e.data, dict) and "p" in e.data:
                stored.setdefault(e.data["p"], []).append(sid)
    assert stored["c"] == [result.session_id], stored
