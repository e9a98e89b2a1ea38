"""One round trip per commit: a segment written beside the head, pending until confirmed.

A commit whose head would overflow writes its segment and its head in the same round
trip; the head keeps the entries inline and names the segment as *pending*; the
writer's next commit, having seen the segment stored, moves it into the manifest.
These tests count round trips exactly, break the parallel pair each way (crash
between the PUTs), race a reader against a commit in flight, and check that no head
ever references a segment that was not confirmed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace
from typing import Any

import pytest

import s3log
from s3log._format.codec import decode_head, encode_head
from s3log._format.values import Pending
from s3log._protocol import read
from s3log._protocol.ops import Op, Parallel, PutIfAbsent, PutIfMatch
from s3log.env import Env
from s3log.errors import CorruptionError, StoreError
from tests.delete_hooks import Clock
from tests.scripted import recorded

TAIL = 1024


class BreakingStore(s3log.MemoryStore):
    """A MemoryStore whose create-only PUTs of matching keys fail, before or after landing."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: Callable[[str], str | None] = lambda key: None  # None | "before" | "after"

    def put_if_absent(self, key: str, body: bytes) -> str:
        how = self.fail(key)
        if how == "before":
            raise StoreError("injected: request failed before it reached the store", key=key)
        etag = super().put_if_absent(key, body)
        if how == "after":
            raise StoreError("injected: the response was lost", key=key)
        return etag


def _log(store: s3log.MemoryStore, clock: Clock | None = None, **kw: Any) -> s3log.Log:
    kw.setdefault("tail_per_commit", 0)  # the strict bound these sizes are counted against
    cfg = s3log.LogConfig(env=Env.deterministic(7, clock or Clock()), tail_max_bytes=TAIL, activity_index=False,
                          **kw)
    return s3log.Log(store, config=cfg)


def _commit(log: s3log.Log, w: s3log.Writer[Any]) -> list[Op]:
    """Commit ``w``'s queue; the ops it yielded, one per round trip."""
    seen: list[Op] = []
    log._run(recorded(w._core.commit(), seen))
    return seen


def _head(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> s3log.Head:
    key = log.layout.head(sid)
    return decode_head(store.get(key).body, key)


def _kinds(ops: list[Op]) -> list[Any]:
    return [sorted(type(o).__name__ for o in op.ops) if isinstance(op, Parallel) else type(op).__name__
            for op in ops]


def _fill(w: s3log.Writer[Any], n: int = 1, size: int = 300) -> None:
    for i in range(n):
        w.append("msg", {"i": i, "text": "x" * size})


def _until_pending(store: s3log.MemoryStore, log: s3log.Log, w: s3log.Writer[Any]) -> s3log.Head:
    """Commit one small entry at a time until the head names a pending segment; that head."""
    while _head(store, log, "s1").pending is None:
        _fill(w)
        w.commit()
    return _head(store, log, "s1")


# ------------------------------------------------------------------ round trips


def test_every_commit_of_small_batches_is_one_round_trip() -> None:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    shapes = []
    for _ in range(40):
        _fill(w)
        shapes.append(_kinds(_commit(log, w)))
    assert all(len(s) == 1 for s in shapes), shapes
    assert [["PutIfAbsent", "PutIfMatch"]] in shapes, "some commits wrote a segment beside the head"
    # Every stored head is readable alone and the chain verifies.
    assert [e.data["i"] for e in log.read("s1").entries] == [0] * 40
    head = _head(store, log, "s1")
    assert head.segments, "pending segments were promoted into the manifest"
    for key in head.segments:
        assert key in store.all_keys()


def test_the_next_commit_promotes_the_pending_segment_in_one_put() -> None:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    while _head(store, log, "s1").pending is None:
        _fill(w)
        _commit(log, w)
    h1 = _head(store, log, "s1")
    assert h1.pending is not None and h1.pending.key in store.all_keys()
    assert not h1.segments and h1.tail[-1].seq == h1.seq, "the head still holds every entry inline"
    _fill(w)
    assert _kinds(_commit(log, w)) == ["PutIfMatch"]
    h2 = _head(store, log, "s1")
    assert h2.pending is None and h2.segments == (h1.pending.key,)
    assert [e.seq for e in h2.tail] == [h2.seq], "the tail holds only what follows the promoted segment"


def test_the_head_stays_within_its_bound_and_a_bigger_batch_goes_sequentially() -> None:
    store = s3log.MemoryStore()
    log = _log(store, pending_max_bytes=2 * TAIL)
    w = log.create("s1")
    for n in (1, 2, 3, 1, 1, 4, 2, 1, 1, 3):
        _fill(w, n)
        _commit(log, w)
        assert len(store.get(log.layout.head("s1")).body) <= 2 * TAIL
    _fill(w, 12)  # one batch beyond twice the bound: segment first, then the head
    ops = _commit(log, w)
    assert _kinds(ops) == [["PutIfAbsent"], "PutIfMatch"]
    head = _head(store, log, "s1")
    assert head.tail == () and head.pending is None and len(store.get(log.layout.head("s1")).body) <= TAIL


def test_format_v1_writes_stay_sequential() -> None:
    store = s3log.MemoryStore()
    log = _log(store, format_version=1)
    w = log.create("s1")
    for _ in range(10):
        _fill(w)
        ops = _commit(log, w)
        assert _kinds(ops) in (["PutIfMatch"], [["PutIfAbsent"], "PutIfMatch"])
        assert _head(store, log, "s1").pending is None


# ------------------------------------------------------------------ faults between the PUTs


def _until_flush(store: BreakingStore, log: s3log.Log, w: s3log.Writer[Any]) -> list[s3log.Entry]:
    """Append until a commit writes a segment beside the head; its acked entries."""
    acked: list[s3log.Entry] = []
    while True:
        _fill(w)
        before = set(store.all_keys())
        acked += w.commit().entries
        new_segs = [k for k in set(store.all_keys()) - before if "/seg/" in k]
        head = _head(store, log, "s1")
        if head.pending is not None or new_segs:
            return acked


@pytest.mark.parametrize("how", ["before", "after"])
def test_a_segment_put_that_fails_beside_a_landed_head_loses_nothing(how: str) -> None:
    store = BreakingStore()
    log = _log(store)
    w = log.create("s1")
    store.fail = lambda key: how if "/seg/" in key else None
    acked = _until_flush(store, log, w)
    head = _head(store, log, "s1")
    assert head.pending is not None
    # Acknowledged means readable now: the head holds every entry inline.
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]
    store.fail = lambda key: None
    _fill(w)
    acked += w.commit().entries
    head = _head(store, log, "s1")
    # The segment was never confirmed: it is not referenced; a new one went out instead.
    if head.pending is not None:
        assert head.pending.key != "" and not head.segments
    for key in head.segments:
        assert key in store.all_keys()
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]


def test_a_head_put_that_fails_beside_a_landed_segment_acknowledges_nothing_and_gc_collects_it() -> None:
    store, clock = s3log.MemoryStore(), Clock()
    log = _log(store, clock)
    w = log.create("s1")
    acked: list[s3log.Entry] = []
    while True:
        _fill(w)
        inline = _head(store, log, "s1")
        if len(encode_head(inline)) > TAIL - 400:
            break
        acked += w.commit().entries
    # The next commit flushes: its head PUT fails for good (403), its segment lands.
    real = store.put_if_match

    def denied(key: str, body: bytes, etag: str) -> str:
        raise s3log.StoreError("injected: access denied", key=key)

    store.put_if_match = denied  # type: ignore[method-assign]
    with pytest.raises(s3log.StoreError):
        w.commit()
    store.put_if_match = real  # type: ignore[method-assign]
    orphans = [k for k in store.all_keys() if "/seg/" in k]
    assert orphans, "the segment went out beside the head"
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]
    clock.t += 3_600_000  # past the commit deadline and any retirement's grace
    report = log.gc(older_than_ms=0)
    assert set(orphans) <= set(report.deleted)
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]


# ------------------------------------------------------------------ readers and restores


def test_a_reader_holding_the_head_of_a_commit_in_flight_reads_it_whole() -> None:
    """A reader reads a head naming a pending segment whose PUT has not landed yet."""
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    while True:
        _fill(w)
        seen: list[Op] = []
        proc = recorded(w._core.commit(), seen)
        op = next(proc)
        if isinstance(op, Parallel) and any(isinstance(o, PutIfAbsent) for o in op.ops):
            break
        log._run(_finish(proc, op))
    seg_op = next(o for o in op.ops if isinstance(o, PutIfAbsent))
    head_op = next(o for o in op.ops if isinstance(o, PutIfMatch))
    # The head lands first; the segment is still in flight when a reader comes.
    etag = store.put_if_match(head_op.key, head_op.body, head_op.etag)
    view = log.read("s1")
    assert view.head.pending is not None and view.head.pending.key == seg_op.key
    assert seg_op.key not in store.all_keys()
    assert view.entries[-1].hash == view.head.hash
    # A writer restoring now finds the pending segment missing: not confirmed, not promoted.
    w2 = log.open("s1")
    assert w2._core.ws.confirmed is None
    seg_etag = store.put_if_absent(seg_op.key, seg_op.body)
    log._run(_finish(proc, None, [etag if o is head_op else seg_etag for o in op.ops]))
    w.append("msg", {"i": -1})
    w.commit()
    assert _head(store, log, "s1").segments[-1] == seg_op.key
    assert log.read("s1").entries[-1].data == {"i": -1}


def _finish(proc: Generator[Op, Any, Any], op: Op | None, value: Any = None) -> Generator[Op, Any, Any]:
    """Continue ``proc``: answer ``value`` (if ``op`` is None) or perform ``op`` first."""
    if op is not None:
        value = yield op
    while True:
        try:
            op = proc.send(value)
        except StopIteration as stop:
            return stop.value
        value = yield op


def test_a_restoring_writer_confirms_the_pending_segment_in_the_segments_round_trip() -> None:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    # Enough for a segment in the manifest and then a pending one.
    while not (_head(store, log, "s1").segments and _head(store, log, "s1").pending):
        _fill(w)
        w.commit()
    pending = _head(store, log, "s1").pending
    assert pending is not None
    seen: list[Op] = []
    ws = log._run(recorded(log._core.open("s1", None), seen))
    assert _kinds(seen) == ["Get", ["Get"] * (len(_head(store, log, "s1").segments) + 1)]
    assert ws.confirmed == pending.key
    w2 = log.open("s1")
    _fill(w2)
    assert _kinds(_commit(log, w2)) == ["PutIfMatch"]
    assert pending.key in _head(store, log, "s1").segments


def test_a_pending_segment_that_does_not_match_the_chain_is_never_referenced() -> None:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    _until_pending(store, log, w)
    pending = _head(store, log, "s1").pending
    assert pending is not None
    # Someone replaces the segment's bytes with a segment of other entries.
    other = _log(s3log.MemoryStore())
    wo = other.create("s1")
    _fill(wo, 3)
    wo.commit()
    store.delete(pending.key)
    store.put_if_absent(pending.key, s3log._format.codec.encode_segment("s1", list(other.read("s1").entries), 2))
    w2 = log.open("s1")
    assert w2._core.ws.confirmed is None
    _fill(w2)
    w2.commit()
    assert pending.key not in _head(store, log, "s1").segments
    assert len(log.read("s1").entries) == len(w2._core.ws.head.tail) + sum(
        len(s3log._format.codec.decode_segment(store.get(k).body, k).entries) for k in _head(store, log, "s1").segments)


def test_a_head_naming_a_pending_key_outside_its_session_is_refused() -> None:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    _fill(w)
    w.commit()
    key = log.layout.head("s1")
    head = _head(store, log, "s1")
    hostile = replace(head, pending=Pending("elsewhere/secret.cbor", head.seq, 0, 0))
    store.put_if_match(key, encode_head(hostile), store.get(key).etag)
    with pytest.raises(CorruptionError, match="pending"):
        log.read("s1")


def test_gc_keeps_a_pending_segment_until_no_head_names_it() -> None:
    store, clock = s3log.MemoryStore(), Clock()
    log = _log(store, clock)
    w = log.create("s1")
    _until_pending(store, log, w)
    pending = _head(store, log, "s1").pending
    assert pending is not None
    clock.t += 3_600_000
    report = log.gc(older_than_ms=0)
    assert pending.key not in report.deleted and pending.key in store.all_keys()
    _fill(w)
    w.commit()  # promotes it
    assert pending.key in _head(store, log, "s1").segments
    assert log.read("s1").entries[-1].hash == _head(store, log, "s1").hash


def test_protocol_promotable_checks_the_manifest_shape() -> None:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create("s1")
    _until_pending(store, log, w)
    head = _head(store, log, "s1")
    assert head.pending is not None and read.promotable(head)
    assert not read.promotable(replace(head, pending=replace(head.pending, take=1)))  # no segment to replace
    assert not read.promotable(replace(head, pending=replace(head.pending, last=head.seq + 1)))
    assert not read.promotable(replace(head, pending=replace(head.pending, last=head.seq - 1)))  # key's hash
    assert not read.promotable(replace(head, tail=head.tail[1:]))


@pytest.mark.parametrize("cache_levels", [0, 1, 3])
def test_merges_read_what_the_writer_does_not_hold_a_round_trip_ahead(cache_levels: int) -> None:
    """A merge of segments the writer keeps no copy of needs their entries: they are
    read beside an earlier commit's head PUT, so no commit spends a round trip on them.
    (Without the read-ahead, a merge's commit was two round trips: GETs, then PUTs.)"""
    store = s3log.MemoryStore()
    log = _log(store, cache_levels=cache_levels)
    w = log.create("s1")
    shapes = []
    for _ in range(300):
        _fill(w)
        shapes.append(_kinds(_commit(log, w)))
    assert all(len(s) == 1 for s in shapes), [s for s in shapes if len(s) > 1][:3]
    assert any("Get" in s[0] for s in shapes if isinstance(s[0], list)), "some commits read ahead"
    head = _head(store, log, "s1")
    assert max(head.levels) >= 2, "merges happened"
    assert len(log.read("s1").entries) == 300


def test_a_short_session_restores_in_one_get_and_flushes_rarely() -> None:
    """The default tail bound (32 KiB, decision record 0027): a ~30 KB conversation lives
    in its head, so reading it back is one GET; with ~1 KB entries a flush (a second
    PUT, beside the head) comes about once in 30 commits."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    assert log.config.tail_max_bytes == 32 * 1024
    w = log.create()
    for i in range(30):
        w.append("message", {"i": i, "text": "x" * 950})
        w.commit()
    store.requests.reset()
    assert len(log.read(w.session_id).entries) == 30
    assert store.requests.snapshot() == {"GET": 1, "PUT": 0, "LIST": 0, "DELETE": 0}
    store.requests.reset()
    for i in range(300):
        w.append("message", {"i": i, "text": "x" * 950})
        w.commit()
    assert store.requests["PUT"] <= 310  # 300 head PUTs and one segment per ~32 commits
