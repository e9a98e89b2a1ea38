"""Review s9: ``Log.delete`` and a new session created at the id while it runs.

``delete_session`` lists the session's objects before it deletes the head, so that
"a session created again at the id after the head goes keeps what it stores"
(decision 0032). But a new session's first commit writes its segment *before* its
create-only head PUT lands (sequential flush: segment confirmed first; parallel flush:
beside the head). Such a segment can be in the delete's listing while the new head
lands only after the old head is gone: the delete then removed a segment the new
session's acknowledged head names (or will promote), and those entries were lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import s3log
from s3log.config import LogConfig
from tests.tombstones import tombstone_idle

SID = "thread-1"


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


# ---------------------------------------------------------------- a takeover losing to a delete

T0 = 1_800_000_000_000
DAY = 86_400_000


class _Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t


class _HookedMatch(s3log.MemoryStore):
    """Runs ``hook`` once, just before the first If-Match PUT of ``SID``'s head."""

    hook: Any = None

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if key.endswith(f"/sessions/{SID}/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().put_if_match(key, body, etag)


def _expired_session() -> tuple[_HookedMatch, s3log.Log]:
    from datetime import timedelta

    from s3log.env import Env

    clock = _Clock()
    store = _HookedMatch()
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
