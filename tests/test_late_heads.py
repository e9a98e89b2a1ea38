"""A head that lands past the commit deadline: nothing it names has been collected.

gc's grace for an unreferenced object is twice the deadline (``landing_bound_ms``), so a
head PUT sent just before the deadline and landing just after still names live segments,
fork markers and pending segments promoted by a later opener.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import s3log
from s3log._format.codec import decode_head
from s3log._protocol import write
from s3log.env import Env
from s3log.errors import TransientStoreError
from tests.delete_hooks import Clock
from tests.helpers import DEADLINE, commit_until, deadline_log, gc_beside, head_of, writer_beside_gc
from tests.test_pending_hostile import FAST, ClockStore


@pytest.mark.parametrize("pending_max", [0, 2048], ids=["sequential", "parallel"])
@pytest.mark.parametrize("cache_levels", [3, 0])
def test_a_head_that_lands_past_the_deadline_names_no_collected_segment(pending_max: int, cache_levels: int) -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = deadline_log(store, clock, pending_max_bytes=pending_max, cache_levels=cache_levels)
    gc_log = deadline_log(store, clock, seed=8, pending_max_bytes=pending_max, cache_levels=cache_levels)
    w = log.create("s1")
    calls: list[str] = []
    gc_runs: list[list[str]] = []

    def slow(key: str, body: bytes) -> None:
        h = decode_head(body, key)
        if gc_runs or not (h.pending is not None if pending_max else h.segments):
            return
        if pending_max and not calls:
            calls.append("lost")  # the first head PUT beside the segment never arrives
            raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")
        calls.append("slow")
        # Sent before the deadline, in flight past it (by less than the deadline again):
        # gc runs meanwhile.
        clock.t += DEADLINE + 1
        gc_runs.append(gc_log.gc(older_than_ms=0).deleted)

    store.before_head = slow
    acked: list[s3log.Entry] = []
    for i in range(12):
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked
        keys = set(store.all_keys())
        head = head_of(store)
        assert not [k for k in head.segments if k not in keys], (i, gc_runs)
        # Acknowledged means readable now, by a fresh reader.
        assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
    assert gc_runs, "gc ran while a head PUT was in flight past the deadline"
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]


def test_a_head_beside_its_segment_answered_past_the_deadline_is_acknowledged() -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = deadline_log(store, clock, pending_max_bytes=4096)
    w = log.create("s1")
    late: list[str] = []

    def slow(key: str, body: bytes) -> None:
        if decode_head(body, key).pending is not None and not late:
            late.append(key)
            clock.t += DEADLINE + 1  # its 2xx is read past the deadline

    store.before_head = slow
    acked: list[s3log.Entry] = []
    for i in range(8):
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked  # raised "passed its deadline undecided" before the fix
    assert late
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]


def test_a_writer_opening_a_late_head_promotes_its_pending_segment_safely() -> None:
    clock = Clock()
    store = ClockStore(clock)
    _log, gc_store, gc_log, w = writer_beside_gc(store, clock, pending_max_bytes=4096)
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
        gc_log.gc(older_than_ms=0)
        ran.append(h.pending.key)

    store.before_head = slow
    acked: list[s3log.Entry] = []
    for i in range(12):
        seg_written.clear()
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked
        if ran:
            break
    assert ran
    store.before_head = lambda key, body: None
    # Another writer (a restarted process) opens while the pending segment still exists.
    w2 = deadline_log(store, clock, seed=9, pending_max_bytes=4096).open("s1")
    gc_store.apply()
    for i in range(6):
        w2.append("msg", {"i": 100 + i, "text": "y" * 300})
        acked += w2.commit().acked
        assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]


def test_a_fork_whose_child_head_lands_past_the_deadline_keeps_its_parent_marker() -> None:
    clock = Clock()

    class SlowCreate(ClockStore):
        hook: Any = None

        def put_if_absent(self, key: str, body: bytes) -> str:
            if key.endswith("/c1/head") and self.hook is not None:
                self.hook()
            return super().put_if_absent(key, body)

    store = SlowCreate(clock)
    log, gc_store, gc_log, w = writer_beside_gc(store, clock)
    w.append("msg", {"text": "a"})
    w.commit()

    def slow() -> None:
        store.hook = None
        clock.t += DEADLINE + 1  # the child's head, sent in time, lands past the deadline
        gc_log.gc(older_than_ms=0)  # sees a marker whose child has no head yet

    store.hook = slow
    assert log.fork("s1", child_id="c1") == "c1"
    gc_store.apply()
    assert log.children("s1") == ["c1"]


def test_a_late_pending_segment_carried_inline_then_promoted_by_an_opener_stays_readable() -> None:
    clock = Clock()
    store = ClockStore(clock)
    cfg = dict(tail_max_bytes=1024, pending_max_bytes=4096)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(7, clock), activity_index=False, retry=FAST,
                                                  commit_deadline_ms=DEADLINE, **cfg))  # type: ignore[arg-type]
    gc_store, gc_log = gc_beside(store, clock, **cfg)
    w = log.create("s1")
    ran: list[str] = []

    def slow(key: str, body: bytes) -> None:
        p = decode_head(body, key).pending
        if ran or p is None:
            return
        if p.key not in store.all_keys():  # the head PUT beside the segment is lost; retried
            raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")
        clock.t += DEADLINE + 1  # the retried head lands past the deadline
        gc_log.gc(older_than_ms=0)
        ran.append(p.key)

    store.before_head = slow
    acked = commit_until(w, ran)
    assert ran
    w.append("big", {"text": "y" * 1500})  # inline (tail_per_commit): the pending is carried
    acked += w.commit().acked
    clock.t += 1000
    w2 = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(9, clock), activity_index=False, retry=FAST,
                                                 commit_deadline_ms=DEADLINE, **cfg)).open("s1")  # type: ignore[arg-type]
    w2.append("msg", {"text": "z"})
    acked += w2.commit().acked
    gc_store.apply()
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]


def test_a_head_going_out_with_a_read_ahead_batch_is_not_sent_past_the_deadline() -> None:
    """A sequential flush whose head goes out in the batch that reads ahead for the next
    merge (_write's Parallel): its segment's create-only PUT landed, the reply was lost
    and the retry went out past the deadline. The head was then sent anyway (and its
    2xx taken, the ``first`` skip in _put_head), landing within one more deadline while
    gc collected the segment, now twice the deadline old. Nothing goes out past the
    deadline now: the commit gives up, nothing acknowledged, and the next one commits."""
    clock = Clock()

    class SlowSeg(ClockStore):
        armed = False

        def put_if_absent(self, key: str, body: bytes) -> str:
            etag = super().put_if_absent(key, body)
            if self.armed and "/seg/" in key:
                self.armed = False
                clock.t += DEADLINE + 1  # the reply is lost; the retry goes out past the deadline
                raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")
            return etag

    # Find the first commit whose head goes out with a read-ahead batch.
    ahead_at: list[int] = []
    orig = write.merge_ahead
    cur = [0]

    def spy(cfg: Any, ws: Any, plan: Any) -> list[str]:
        out = orig(cfg, ws, plan)
        if out and plan.segment_key is not None and not plan.parallel:
            ahead_at.append(cur[0])
        return out

    def writer(store: ClockStore) -> Any:
        return deadline_log(store, clock, pending_max_bytes=0, cache_levels=0).create("s1")

    write.merge_ahead = spy  # type: ignore[assignment]
    try:
        w = writer(SlowSeg(clock))
        for i in range(30):
            cur[0] = i
            w.append("msg", {"i": i, "text": "x" * 300})
            w.commit()
    finally:
        write.merge_ahead = orig  # type: ignore[assignment]
    assert ahead_at

    clock.t = Clock().t
    store = SlowSeg(clock)
    log = deadline_log(store, clock, pending_max_bytes=0, cache_levels=0)
    gc_log = deadline_log(store, clock, seed=8, pending_max_bytes=0, cache_levels=0)
    w = log.create("s1")
    sent_late: list[int] = []

    def slow(key: str, body: bytes) -> None:
        if store.armed is False and sent_late == [1]:
            clock.t += DEADLINE - 1  # in flight within one more deadline
            gc_log.gc(older_than_ms=0)
            sent_late.append(2)

    store.before_head = slow
    acked: list[s3log.Entry] = []
    for i in range(ahead_at[0] + 5):
        w.append("msg", {"i": i, "text": "x" * 300})
        store.armed = i == ahead_at[0]
        if i == ahead_at[0]:
            sent_late.append(1)
            with pytest.raises(s3log.StoreError, match="passed its deadline"):
                w.commit()
            continue
        acked += w.commit().acked
        keys = set(store.all_keys())
        assert not [k for k in head_of(store).segments if k not in keys]
        assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
    clock.t += 3 * DEADLINE
    gc_log.gc(older_than_ms=0)
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
