"""``Log.delete`` never removes what a session created again at the id stores.

It lists a session's objects, deletes the head, then the rest: a session created in
between (its first segment, pending segment, tombstone takeover) keeps what it wrote, and
a writer of the deleted session is told it is gone, not that it is corrupt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig
from s3log.env import Env
from tests.delete_hooks import Clock
from tests.helpers import DEADLINE, SID, HookedMatch, deadline_log, head_of
from tests.test_pending_hostile import ClockStore
from tests.tombstones import tombstone_idle


def test_log_delete_measures_a_new_sessions_first_segment_before_its_head_delete() -> None:
    """Log.delete lists, DELETEs the head, and only then (delete.py
    _maybe_anothers_first: cfg.env.now_ms()) measures a seq-0 segment's age. A new
    session's create-only head that lands between the head DELETE and that measure
    (sent just before its deadline, landing within one more) names a segment now 2D
    old: it is deleted, and the new session's acknowledged first commit is unreadable.
    The age must be measured before the head DELETE is sent."""
    clock = Clock()
    d = DEADLINE

    class Hooked(ClockStore):
        hook: Any = None
        on_delete: Any = None

        def put_if_absent(self, key: str, body: bytes) -> str:
            if key.endswith("/s1/head") and self.hook is not None:
                hook, self.hook = self.hook, None
                return hook(key, body)
            return super().put_if_absent(key, body)

        def delete_if_match(self, key: str, etag: str) -> None:
            super().delete_if_match(key, etag)
            if self.on_delete is not None:
                on_delete, self.on_delete = self.on_delete, None
                on_delete()

    store = Hooked(clock)
    log_a = deadline_log(store, clock)
    a = log_a.create("s1")
    a.append("msg", {"text": "old"})
    a.commit()
    log_b = deadline_log(store, clock, seed=9, pending_max_bytes=0)
    b = log_b.create("s1", lazy=True)
    b.append("msg", {"text": "x" * 2000})  # flushes: a seq-0 segment, then a create-only head
    deleter = deadline_log(store, clock, seed=8)
    p = clock.t
    landed: list[str] = []

    def b_head(key: str, body: bytes) -> str:
        clock.t = p + d - 1  # sent before B's deadline; in flight

        def head_delete_lands_then_b() -> None:
            clock.t = p + 2 * d - 1  # A's head is gone; B's head lands right after (in its bound)
            landed.append(ClockStore.put_if_absent(store, key, body))
            clock.t = p + 2 * d + 1  # the DELETE's reply is read a moment later

        store.on_delete = head_delete_lands_then_b
        deleter.delete("s1")
        return landed[0]

    store.hook = b_head
    acked = b.commit().acked
    assert landed and acked
    keys = set(store.all_keys())
    assert not [k for k in head_of(store).segments if k not in keys]


class _DeleteHook(s3log.MemoryStore):
    """Runs ``hook`` once, right after the head of ``sid`` is deleted."""

    def __init__(self, sid: str) -> None:
        super().__init__()
        self.sid = sid
        self.hook: Callable[[], None] | None = None

    def delete(self, key: str) -> None:
        super().delete(key)
        self._deleted(key)

    def delete_if_match(self, key: str, etag: str) -> None:
        super().delete_if_match(key, etag)  # the head goes conditionally (Log.delete)
        self._deleted(key)

    def _deleted(self, key: str) -> None:
        if key.endswith(f"/sessions/{self.sid}/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()


def test_delete_never_removes_a_session_created_again_under_its_id() -> None:
    store = _DeleteHook("thread-1")
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=1024, pending_max_bytes=0))
    old = log.create("thread-1")
    for i in range(4):
        old.append("k", {"old": i, "pad": "x" * 400})
        old.commit()
    acked: list[s3log.Entry] = []

    def recreate() -> None:  # another worker starts the thread again as soon as it is gone
        w = log.create("thread-1")
        for i in range(5):
            w.append("k", {"i": i, "pad": "x" * 400})
            acked.extend(w.commit().acked)

    store.hook = recreate
    log.delete("thread-1")
    assert len(acked) == 5
    assert [e.hash for e in log.read("thread-1").entries] == [e.hash for e in acked]


class _Hooked(s3log.MemoryStore):
    """Runs ``hook`` once, just before the first create-only PUT of ``SID``'s head."""

    hook: Any = None

    def put_if_absent(self, key: str, body: bytes) -> str:
        if key.endswith(f"/sessions/{SID}/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().put_if_absent(key, body)


def _segments(store: s3log.MemoryStore) -> list[str]:
    return [k for k in store.all_keys() if f"/sessions/{SID}/seg/" in k]


def test_delete_keeps_the_first_segment_of_a_session_created_while_it_ran() -> None:
    """Sequential flush: the new session's segment is stored and confirmed, the delete
    runs (reads the old head, lists, deletes head and listing), then the new session's
    head lands naming that segment. Before the fix the segment was deleted with the old
    session and the acknowledged entry was unreadable (SegmentMissing)."""
    store = _Hooked()
    cfg = LogConfig(tail_max_bytes=1024, pending_max_bytes=0)
    log = s3log.Log(store, config=cfg)
    deleter = s3log.Log(store, config=cfg)
    old = log.create(SID)
    old.append("k", {"old": 0})
    old.commit()
    new = log.create(SID, lazy=True)  # another worker starts the id again
    new.append("k", {"new": 0, "pad": "y" * 1500})
    store.hook = lambda: deleter.delete(SID)  # the old session is deleted meanwhile
    acked = new.commit().acked
    assert len(acked) == 1
    assert [e.hash for e in log.read(SID).entries] == [e.hash for e in acked]
    assert log.verify(SID).ok


def test_delete_keeps_the_pending_segment_of_a_session_created_while_it_ran() -> None:
    """Default config, parallel flush: the new session's first (big) commit writes its
    segment beside its create-only head. The delete lists that segment and deletes it
    after the old head; the new head lands (entries inline, segment pending). Its next
    commit promotes the segment it saw stored (2xx) and drops the inline copy: before
    the fix, every entry of the first commit was then unreadable."""
    store = _Hooked()
    log = s3log.Log(store)
    deleter = s3log.Log(store)
    old = log.create(SID)
    old.append("k", {"old": 0})
    old.commit()
    ran = threading.Event()

    def delete_once_the_segment_is_stored() -> None:
        deadline = time.monotonic() + 10
        while not _segments(store) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert _segments(store), "the segment beside the head was never written"
        deleter.delete(SID)
        ran.set()

    new = log.create(SID, lazy=True)
    new.append("k", {"new": 0, "pad": "y" * 150_000})
    store.hook = delete_once_the_segment_is_stored
    first = new.commit().acked
    assert ran.is_set() and len(first) == 1
    assert store.get(log.layout.head(SID)) is not None
    new.append("k", {"new": 1})
    second = new.commit().acked
    assert [e.hash for e in log.read(SID).entries] == [e.hash for e in first + second]
    assert log.verify(SID).ok


DAY = 86_400_000


def _expired_session() -> tuple[HookedMatch, s3log.Log]:
    from datetime import timedelta


    clock = Clock()
    store = HookedMatch()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(7, clock)))
    old = log.create(SID)
    old.append("k", {"old": 0})
    old.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [SID]
    return store, log


def test_append_latest_creating_over_a_tombstone_that_a_delete_removes_creates_the_session() -> None:
    """append_latest with create_meta over an expired id: its PUT replaces the tombstone
    with If-Match, and Log.delete removes the tombstone first (404). The id is free: the
    documented behaviour is to create the session. Before: SessionNotFound ("it was
    deleted while this writer held it"), though create_meta was given."""
    store, log = _expired_session()
    store.hook = lambda: log.delete(SID)
    acked = log.append_latest(SID, [("k", {"new": 0})], create_meta={}).acked
    assert [e.data for e in log.read(SID).entries] == [{"new": 0}]
    assert [e.hash for e in log.read(SID).entries] == [e.hash for e in acked]


def test_create_over_a_tombstone_that_a_delete_removes_creates_the_session() -> None:
    """Log.create over an expired id, the tombstone deleted just before its If-Match PUT:
    the id is free, so the session is created. Before: SessionNotFound from create."""
    store, log = _expired_session()
    store.hook = lambda: log.delete(SID)
    w = log.create(SID)
    w.append("k", {"new": 0})
    w.commit()
    assert [e.data for e in log.read(SID).entries] == [{"new": 0}]


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
