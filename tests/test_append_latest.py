"""``Log.append_latest``: appends to the newest session at an id, across tombstones, deletes and
lost races, creating the session with ``create_meta`` when it is gone.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig
from s3log.env import Env
from tests.delete_hooks import Clock
from tests.helpers import SID, HookedMatch, expired_world
from tests.tombstones import tombstone_idle


def test_append_latest_backs_off_after_each_lost_race() -> None:
    """``append_latest`` retried a lost race at once: the winner needs no GET, so a
    loser (a GET and a PUT per try) kept losing and ran out of attempts ("the head kept
    changing", found with two LangGraph savers on one thread). It now waits a jittered
    backoff before each new try."""
    waits: list[int] = []

    class Recording(s3log.RetryPolicy):
        def backoff(self, attempt: int, rng: Any = None) -> float:
            waits.append(attempt)
            return 0.0

    class Contended(s3log.MemoryStore):
        races = 2
        rival: Any = None

        def put_if_match(self, key: str, body: bytes, etag: str) -> str:
            if key.endswith("/s1/head") and self.races and self.rival is not None:
                self.races -= 1
                self.rival.append_latest("s1", [("rival", {"n": self.races})])  # lands first
            return super().put_if_match(key, body, etag)

    store = Contended()
    s3log.Log(store).create("s1").append_durable("k", {"n": 0})
    store.rival = s3log.Log(_Plain(store))
    log = s3log.Log(store, config=s3log.LogConfig(retry=Recording(attempts=8, initial=0.0)))
    result = log.append_latest("s1", [("mine", {"n": 1})])
    assert [e.kind for e in result.acked] == ["mine"]
    assert [e.kind for e in log.read("s1").entries] == ["k", "rival", "rival", "mine"]
    assert waits == [1, 2]


class _Plain:
    """The objects of a store, seen without its subclass's hooks (a second process)."""

    honours_preconditions = True

    def __init__(self, store: s3log.MemoryStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(s3log.MemoryStore, name).__get__(self.store)


T0 = 1_800_000_000_000

DAY = 86_400_000


def test_append_latest_does_not_write_onto_a_tombstone() -> None:
    _store, clock, log = expired_world()
    with pytest.raises(s3log.SessionExpired):
        log.append_latest("thread-7", [("msg", "after expiry")])
    # With create_meta the id starts again, readable, and survives gc.
    result = log.append_latest("thread-7", [("msg", "again")], create_meta={"n": 1})
    assert [e.data for e in log.read("thread-7").entries] == ["again"]
    clock.t += 2 * 3_600_000
    log.gc(older_than_ms=3_600_000)
    view = log.read("thread-7")
    assert [e.hash for e in view.entries] == [e.hash for e in result.acked]
    assert view.head.meta == {"n": 1}


def test_append_latest_with_a_hint_from_before_the_sweep_starts_the_id_again() -> None:
    clock, store = Clock(T0), s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, clock)))
    hint = log.append_latest("thread-8", [("msg", "first")], create_meta={})
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["thread-8"]
    result = log.append_latest("thread-8", [("msg", "second")], after=hint, create_meta={})
    assert [e.hash for e in log.read("thread-8").entries] == [e.hash for e in result.acked]


def _live_session() -> tuple[HookedMatch, s3log.Log, s3log.CommitResult]:
    store = HookedMatch()
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
