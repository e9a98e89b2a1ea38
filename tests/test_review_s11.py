"""Regressions from the session 11 hostile review.

- A head PUT sent before the commit deadline can land after it, when gc may already
  have collected the segment that head names (gc's grace is the deadline), or decided
  to and sent its DELETE later. The commit now writes the entries again under a new
  key and moves the head to it before it is acknowledged (sequential flush), or does
  not take a segment beside the head as confirmed, so it is never promoted (parallel);
  a writer opening a session confirms a pending segment only if its head was written
  less than a deadline ago.
- A head PUT beside its segment whose 2xx was read after the deadline was reported as
  "passed its deadline undecided; nothing acknowledged": it landed, and is acknowledged.
- LogConfig accepted any fan-out: above 4097 a writer acknowledged heads listing more
  segments than every reader accepts (MAX_SEGMENTS). The other sizes were not checked.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import s3log
from s3log.codec import decode_head
from s3log.config import MAX_FANOUT, RetryPolicy
from s3log.env import Env
from s3log.errors import InvalidArgumentError, TransientStoreError
from s3log.layout import MAX_SEGMENTS
from s3log.manifest import max_manifest_length

FAST = RetryPolicy(initial=0.0001, max_backoff=0.0001)
DEADLINE = 60_000


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000_000

    def __call__(self) -> int:
        return self.t


class ClockStore(s3log.MemoryStore):
    """A MemoryStore whose objects carry the virtual clock's time; ``during_head`` runs
    inside each If-Match PUT, after it is sent and before it lands (a slow request)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.during_head: Any = lambda key, body: None

    def put_if_absent(self, key: str, body: bytes) -> str:
        etag = super().put_if_absent(key, body)
        self.put_raw(key, body, mtime_ms=self.clock())
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.during_head(key, body)
        new = super().put_if_match(key, body, etag)
        self.put_raw(key, body, mtime_ms=self.clock())
        return new


def _log(store: Any, clock: Clock, seed: int = 7, **kw: Any) -> s3log.Log:
    kw.setdefault("tail_max_bytes", 1024)
    cfg = s3log.LogConfig(env=Env.deterministic(seed, clock), tail_per_commit=0, activity_index=False,
                          retry=FAST, commit_deadline_ms=DEADLINE, **kw)
    return s3log.Log(store, config=cfg)


def _head(store: s3log.MemoryStore, sid: str = "s1") -> s3log.Head:
    key = f"s3log/sessions/{sid}/head"
    return decode_head(store.get(key).body, key)


@pytest.mark.parametrize("pending_max", [0, 2048], ids=["sequential", "parallel"])
@pytest.mark.parametrize("cache_levels", [3, 0])
def test_a_head_that_lands_past_the_deadline_names_no_collected_segment(pending_max: int, cache_levels: int) -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock, pending_max_bytes=pending_max, cache_levels=cache_levels)
    gc_log = _log(store, clock, seed=8, pending_max_bytes=pending_max, cache_levels=cache_levels)
    w = log.create("s1")
    calls: list[str] = []
    collected: list[str] = []

    def slow(key: str, body: bytes) -> None:
        h = decode_head(body, key)
        if collected or not (h.pending is not None if pending_max else h.segments):
            return
        if pending_max and not calls:
            calls.append("lost")  # the first head PUT beside the segment never arrives
            raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")
        calls.append("slow")
        # Sent before the deadline, in flight past it: gc runs meanwhile.
        clock.t += DEADLINE + 1
        collected.extend(gc_log.gc(older_than_ms=0).deleted)

    store.during_head = slow
    acked: list[s3log.Entry] = []
    for i in range(12):
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked
        keys = set(store.all_keys())
        head = _head(store)
        assert not [k for k in head.segments if k not in keys], (i, collected)
        # Acknowledged means readable now, by a fresh reader.
        assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
    assert collected, "gc ran during a slow head PUT and deleted the segment it named"
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]


def test_a_head_beside_its_segment_answered_past_the_deadline_is_acknowledged() -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock, pending_max_bytes=4096)
    w = log.create("s1")
    late: list[str] = []

    def slow(key: str, body: bytes) -> None:
        if decode_head(body, key).pending is not None and not late:
            late.append(key)
            clock.t += DEADLINE + 1  # its 2xx is read past the deadline

    store.during_head = slow
    acked: list[s3log.Entry] = []
    for i in range(8):
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked  # raised "passed its deadline undecided" before the fix
    assert late
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]


def test_the_fanout_is_bounded_so_no_head_lists_more_segments_than_readers_accept() -> None:
    assert max_manifest_length(2**64, MAX_FANOUT) <= MAX_SEGMENTS
    assert s3log.LogConfig(fanout=MAX_FANOUT).fanout == MAX_FANOUT
    for bad in (MAX_FANOUT + 1, 100_000, 1, 0, -3, 4.0, "4", True):
        with pytest.raises(InvalidArgumentError, match="fanout"):
            s3log.LogConfig(fanout=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "bad"), [
    ("tail_max_bytes", -1), ("tail_max_bytes", 1.5), ("pending_max_bytes", -1), ("tail_per_commit", -2),
    ("cache_levels", -1), ("cache_levels", None), ("max_parallel", 0), ("commit_deadline_ms", 0),
    ("commit_deadline_ms", 60.0),
])
def test_log_config_names_a_bad_size_before_anything_is_written(name: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=name) as info:
        s3log.LogConfig(**{name: bad})  # type: ignore[arg-type]
    assert info.value.argument == name
    # Zero is a valid size where it has a meaning (always flush, never cache, strict bound).
    s3log.LogConfig(tail_max_bytes=0, pending_max_bytes=0, tail_per_commit=0, cache_levels=0)


class DeferDeletes:
    """The objects of ``inner``; its DELETEs are held back (a gc run decided, and its
    requests arrive later) until :meth:`apply`."""

    honours_preconditions = True

    def __init__(self, inner: s3log.MemoryStore) -> None:
        self.inner = inner
        self.deferred: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete(self, key: str) -> None:
        self.deferred.append(key)

    def apply(self) -> None:
        for key in self.deferred:
            self.inner.delete(key)


def test_a_late_head_moves_off_a_segment_gc_decided_to_delete_before_it_landed() -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock, pending_max_bytes=0)
    gc_store = DeferDeletes(store)
    gc_log = _log(gc_store, clock, seed=8, pending_max_bytes=0)
    w = log.create("s1")
    ran: list[str] = []

    def slow(key: str, body: bytes) -> None:
        if ran or not decode_head(body, key).segments:
            return
        clock.t += DEADLINE + 1  # sent in time, lands past the deadline
        ran.extend(gc_log.gc(older_than_ms=0).deleted)  # gc read the old head: unreferenced

    store.during_head = slow
    acked: list[s3log.Entry] = []
    for i in range(12):
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked
        if ran:
            break
    assert ran
    gc_store.apply()  # gc's DELETEs, decided before the head landed, arrive after the ack
    keys = set(store.all_keys())
    assert not [k for k in _head(store).segments if k not in keys]
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
    w.append("msg", {"i": 99})
    acked += w.commit().acked  # and the writer goes on
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]


def test_a_writer_opening_a_late_head_does_not_promote_its_pending_segment() -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock, pending_max_bytes=4096)
    gc_store = DeferDeletes(store)
    gc_log = _log(gc_store, clock, seed=8, pending_max_bytes=4096)
    w = log.create("s1")
    ran: list[str] = []
    seg_written = threading.Event()
    put_if_absent = store.put_if_absent

    def pia(key: str, body: bytes) -> str:
        etag = put_if_absent(key, body)
        if "/seg/" in key:
            seg_written.set()
        return etag

    store.put_if_absent = pia  # type: ignore[method-assign]

    def slow(key: str, body: bytes) -> None:
        h = decode_head(body, key)
        if ran or h.pending is None:
            return
        assert seg_written.wait(5)  # the segment beside it landed first (the driver's pool)
        clock.t += DEADLINE + 1  # the head is in flight past the deadline
        ran.extend(gc_log.gc(older_than_ms=0).deleted)
        assert h.pending.key in ran

    store.during_head = slow
    acked: list[s3log.Entry] = []
    for i in range(12):
        seg_written.clear()
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked
        if ran:
            break
    assert ran
    store.during_head = lambda key, body: None
    # Another writer (a restarted process) opens while the pending segment still exists.
    w2 = _log(store, clock, seed=9, pending_max_bytes=4096).open("s1")
    gc_store.apply()
    for i in range(6):
        w2.append("msg", {"i": 100 + i, "text": "y" * 300})
        acked += w2.commit().acked
        assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
