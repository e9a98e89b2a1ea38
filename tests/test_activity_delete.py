"""``Log.delete`` and the activity index: a session created again at the id keeps its marker.

Before: ``Log.delete`` deleted the session's activity markers by key after its head.
A session created again at the same id the same day (another writer, right after the
head went) found the old session's marker there (its create-only PUT met 412, and the
bytes were the same), relied on it, and lost it to the delete: ``active_sessions`` and
``list_session_ids(since=...)`` (so ``scan(since=...)``) missed a live session.

The marker's bytes are the same for every session at the id that day, so no ETag
tells the new session's from the old one's, and If-Match on a DELETE cannot help.
``Log.delete`` now leaves the markers of the days a new session at the id could still
commit on (its head landing after the old one's DELETE, planned at most twice the
commit deadline before), on every store, and deletes the older days' by key. Each test
here failed before.
"""

from __future__ import annotations

from typing import Any

import pytest

import s3log
from s3log._protocol.activity import DAY_MS, day_of, marker_key
from s3log.config import LogConfig
from s3log.env import Env
from tests.delete_hooks import Clock, hooked_store

T0 = 1_800_000_000_000
SID = "thread-1"


def _log(store: Any, clock: Clock, seed: int = 7) -> s3log.Log:
    return s3log.Log(store, config=LogConfig(env=Env.deterministic(seed, clock)))


def _keys(store: Any, prefix: str) -> list[str]:
    return [o.key for o in store.list(prefix).objects]


@pytest.mark.parametrize("kind", ["memory", "server", "plain"])
def test_a_session_created_again_right_after_the_head_went_keeps_its_activity_marker(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = hooked_store(kind, request, after=True)
    clock = Clock(T0)
    log = _log(store, clock)
    old = log.create(SID)
    old.append("k", "old")
    old.commit()
    log.create("other-day").append_durable("k", 0)  # a day folder before today's
    clock.t += DAY_MS
    old.append("k", "old, the next day")
    old.commit()  # markers on two days
    clock.t += 1000
    new_log = _log(store, clock, seed=8)  # another worker, with its own creator nonce
    acked: list[s3log.Entry] = []

    def create_again() -> None:
        w = new_log.create(SID)
        w.append("k", "new")
        acked.extend(w.commit().acked)

    store.hook = create_again
    log.delete(SID)
    assert [e.data for e in log.read(SID).entries] == ["new"] and len(acked) == 1
    today = marker_key(log.layout, day_of(clock.t), SID)
    assert today in _keys(store, today), "the new session's marker was deleted with the old session"
    assert SID in log.list_session_ids(since=clock.t - 1000)
    assert SID in log.active_sessions(since=clock.t - 1000).ids
    # The old session's marker of a day no new session can commit on went by key.
    yesterday = marker_key(log.layout, day_of(clock.t - DAY_MS), SID)
    assert yesterday not in _keys(store, yesterday)


def test_delete_leaves_the_markers_of_days_a_new_session_could_commit_on() -> None:
    """Five minutes after midnight, with the default 10-minute commit deadline, a commit
    planned yesterday can still land after the DELETE: yesterday's marker stays too."""
    store = s3log.MemoryStore()
    midnight = (T0 // DAY_MS + 3) * DAY_MS
    clock = Clock(midnight - 3 * DAY_MS)
    log = _log(store, clock)
    w = log.create(SID)
    for t in (midnight - 2 * DAY_MS, midnight - 60_000, midnight + 300_000):
        clock.t = t
        w.append("k", t)
        w.commit()
    days = [day_of(midnight - d * DAY_MS) for d in (3, 2, 1, 0)]
    assert [bool(_keys(store, marker_key(log.layout, d, SID))) for d in days] == [True] * 4
    log.delete(SID)
    assert [bool(_keys(store, marker_key(log.layout, d, SID))) for d in days] == [False, False, True, True]
    # An hour after midnight only today's stays.
    clock.t = midnight - 60_000
    log.create("thread-2").append_durable("k", 1)
    clock.t = midnight + 3_600_000
    log.open("thread-2").append_durable("k", 2)
    log.delete("thread-2")
    assert [bool(_keys(store, marker_key(log.layout, d, "thread-2"))) for d in days[2:]] == [False, True]


def test_a_marker_left_by_a_delete_names_no_session_to_the_readers_of_the_index() -> None:
    """The marker left names a session with no head, as a failed commit's does: the index
    is a superset, and a scan over it skips the missing session."""
    pytest.importorskip("pyarrow")
    from s3log import analytics

    store = s3log.MemoryStore()
    clock = Clock(T0)
    log = _log(store, clock)
    log.create("other-day").append_durable("k", 0)
    clock.t += DAY_MS
    log.create(SID).append_durable("k", 1)
    log.create("kept").append_durable("k", 2)
    log.delete(SID)
    assert SID in log.list_session_ids(since=clock.t - 1000)
    table = analytics.to_arrow(store, since=clock.t - 1000)
    assert table.column("session").to_pylist() == ["kept"]
