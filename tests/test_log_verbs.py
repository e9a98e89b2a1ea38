"""The Log verbs upper layers use instead of running core procedures themselves."""

from __future__ import annotations

import pytest

import s3log


def test_append_latest_creates_then_appends_on_top_of_others_without_forking() -> None:
    store = s3log.MemoryStore()
    a, b = s3log.Log(store), s3log.Log(store)
    with pytest.raises(s3log.SessionNotFound):
        a.append_latest("thread-1", [("k", 0)])
    ra = a.append_latest("thread-1", [("k", 1)], create_meta={"who": "a"})
    rb = b.append_latest("thread-1", [("k", 2)], create_meta={"who": "b"})  # exists: appended on top
    store.requests.reset()
    ra = a.append_latest("thread-1", [("k", 3), ("k", 4)], after=ra)  # stale hint: conflict, re-read, on top
    assert [e.data for e in ra.acked] == [3, 4] and ra.fork is None
    rb = b.append_latest("thread-1", [("k", 5)], after=rb)
    view = a.read("thread-1")
    assert [e.data for e in view.entries] == [1, 2, 3, 4, 5] and view.meta == {"who": "a"}
    assert a.list_session_ids() == ["thread-1"]
    store.requests.reset()
    a.append_latest("thread-1", [("k", 6)], after=a.append_latest("thread-1", [("k", 6.5)]))
    assert store.requests["GET"] == 1  # only the first call read the head: the hint saved the second


def test_append_latest_validates_before_writing() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    with pytest.raises(s3log.InvalidEntryError):
        log.append_latest("t", [("s3log.fork", 1)], create_meta={})
    with pytest.raises(s3log.InvalidArgumentError):
        log.append_latest("t", [("k", 1)], create_meta=[1])  # type: ignore[arg-type]
    assert store.all_keys() == []


def test_read_suffix_heads_find_and_keys() -> None:
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600))
    w = log.create("conv-1")
    for i in range(20):
        w.append("k", "x" * 100 + str(i))
        w.commit()
    head, entries = log.read_suffix("conv-1", lambda es: len(es) >= 3)
    assert head.seq == 19 and entries[-1].data.endswith("19") and len(entries) >= 3
    log.create("conv-2")
    assert log.list_session_ids(prefix="conv-") == ["conv-2", "conv-1"]
    rows = log.heads(["conv-1", "conv-2", "missing"])
    assert [r.session for r in rows] == ["conv-1", "conv-2"] and rows[0].head is not None
    keys = log.object_keys("conv-1")
    assert keys[-1].endswith("/head") or any(k.endswith("/head") for k in keys)
    assert all("/conv-1/" in k for k in keys) and any("/seg/" in k for k in keys)


async def test_async_verbs_match() -> None:
    alog = s3log.AsyncLog(s3log.AsyncMemoryStore())
    r = await alog.append_latest("t", [("k", 1)], create_meta={})
    await alog.append_latest("t", [("k", 2)], after=r)
    _, entries = await alog.read_suffix("t", lambda es: True)
    assert [e.data for e in entries] == [1, 2]
    assert await alog.list_session_ids(prefix="t") == ["t"]


def test_compact_rewrites_a_session_at_its_id_and_conflicts_with_a_concurrent_commit() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create("c1", meta={"m": 1})
    for i in range(6):
        w.append("k", i)
    w.commit()
    assert log.compact("c1", lambda history, head: None) is False  # unchanged
    changed = log.compact("c1", lambda history, head: [e for e in history if e["data"] % 2 == 0])
    view = log.read("c1")
    assert changed and [e.data for e in view.entries] == [0, 2, 4] and view.meta == {"m": 1}
    assert view.head.retired_at is not None  # the old chain's segments reach gc after the grace period

    def select_while_someone_commits(history: list[dict], head: s3log.Head) -> list[dict]:
        other = log.open("c1")
        other.append("k", 99)
        other.commit()
        return history[:1]

    with pytest.raises(s3log.ConflictError):
        log.compact("c1", select_while_someone_commits)
    assert [e.data for e in log.read("c1").entries] == [0, 2, 4, 99]  # the commit won
    assert log.compact("c1", lambda history, head: []) is True
    with pytest.raises(s3log.SessionNotFound):
        log.read("c1")


def _ids_log() -> tuple[s3log.MemoryStore, s3log.Log, int]:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    for sid in ("a1", "a2", "b1"):
        log.create(sid).append_durable("k", 1)
    return store, log, s3log.env.wall_clock_ms() - 1000


def test_list_session_ids_by_prefix_and_activity_newest_first_without_reading_a_head() -> None:
    store, log, since = _ids_log()
    store.requests.reset()
    assert log.list_session_ids() == ["b1", "a2", "a1"]
    assert log.list_session_ids(prefix="a") == ["a2", "a1"]
    assert log.list_session_ids(prefix="zz") == []
    assert store.requests["LIST"] == 3 and store.requests["GET"] == 0
    # The index's first day may be partial: it covers only the days after it, so every
    # id is listed (a superset of those active since then), never None nor fewer.
    store.requests.reset()
    assert log.list_session_ids(since=since) == ["b1", "a2", "a1"]
    assert store.requests["LIST"] == 2 and store.requests["GET"] == 0  # the index checked, then the ids
    store.put_raw("s3log/activity/2020-01-01/old-1", b"")  # an older day: the index covers today
    log.delete("a2")
    store.requests.reset()
    assert log.list_session_ids(since=since) == ["b1", "a2", "a1"]  # a2 deleted today: still a candidate
    assert log.list_session_ids(since=since, prefix="b") == ["b1"]
    assert store.requests["LIST"] == 4 and store.requests["GET"] == 0  # per call: the index checked, its days read
    assert "old-1" not in log.list_session_ids(since=since)  # a marker of a day before the window


async def test_list_session_ids_is_the_same_verb_on_the_async_log() -> None:
    alog = s3log.AsyncLog(s3log.AsyncMemoryStore())
    for sid in ("a1", "a2", "b1"):
        await alog.append_latest(sid, [("k", 1)], create_meta={})
    since = s3log.env.wall_clock_ms() - 1000
    assert await alog.list_session_ids() == ["b1", "a2", "a1"]
    assert await alog.list_session_ids(prefix="a", since=since) == ["a2", "a1"]


@pytest.mark.parametrize("bad", [{"prefix": 7}, {"prefix": b"a"}, {"since": "yesterday"}, {"since": -1}])
def test_list_session_ids_refuses_bad_arguments_before_any_request(bad: dict[str, object]) -> None:
    store, log, _ = _ids_log()
    store.requests.reset()
    with pytest.raises(s3log.InvalidArgumentError):
        log.list_session_ids(**bad)  # type: ignore[arg-type]
    assert store.requests.total == 0


def test_read_runs_gives_the_verified_chain_as_stored_runs_sync_and_async() -> None:
    """Bulk readers (analytics) read a session as the runs it is stored in: v2 segments
    as columns, the tail as entries; the same entries as ``read``, and None outside the
    window, on both logs."""
    import asyncio

    from s3log._format.columns import RunColumns
    from s3log.store.memory import AsyncMemoryStore

    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=300))
    w = log.create()
    for i in range(30):
        w.append("k", {"i": i}, ts=1000 + i)
        w.commit()
    got = log.read_runs(w.session_id)
    assert got is not None
    head, runs = got
    assert head == log.head(w.session_id) and any(isinstance(r, RunColumns) for r in runs)
    flat = [v for r in runs for v in (r.values if isinstance(r, RunColumns) else [e.data for e in r])]
    assert flat == [e.data for e in log.read(w.session_id).entries]
    assert log.read_runs(w.session_id, since=5000) is None
    alog = s3log.AsyncLog(AsyncMemoryStore(store))
    assert asyncio.run(alog.read_runs(w.session_id)) == got
