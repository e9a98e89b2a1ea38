"""``Log.delete_plan`` (``s3log rm --dry-run``) says what ``Log.delete`` does: the keys it
deletes now and those it leaves for gc and expire, whatever the objects' ages.

Before, ``rm --dry-run`` listed the head and the session's own fork marker, ``rm --yes``
deleted only the head (a young marker is left for gc, decision 0031), and today's
activity marker, also left, was named by neither.
"""

from __future__ import annotations

from typing import Any

import pytest

import s3log
from s3log._protocol.activity import DAY_MS
from s3log.config import LogConfig
from s3log.env import Env
from s3log.store.memory import AsyncMemoryStore, MemoryStore
from tests.delete_hooks import Clock

T0 = 1_800_000_000_000


def _session_keys(store: Any, sid: str) -> set[str]:
    return {o.key for o in store.list("").objects if o.key.split("/")[-1] == sid or f"/{sid}/" in o.key}


@pytest.mark.parametrize("later_ms", [0, 60_000, 30 * 60_000, 3 * 3_600_000, 2 * DAY_MS, 40 * DAY_MS])
@pytest.mark.parametrize("fork_on_day_one", [True, False])
def test_delete_removes_what_the_plan_says_and_leaves_what_it_leaves(
    later_ms: int, fork_on_day_one: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    clock = Clock(T0)
    monkeypatch.setattr("s3log.store.memory._now_ms", clock)  # objects' ages on the log's clock
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(3, clock)))
    root = log.create("root")
    root.append("k", "x" * 40_000)  # a segment beside the head
    root.commit()
    if fork_on_day_one:
        log.fork("root", child_id="child")
    clock.t += DAY_MS
    if not fork_on_day_one:
        log.fork("root", child_id="child")
    w = log.open("child")
    w.append("k", "y" * 40_000)
    w.commit()  # a segment of its own; activity markers on one or two days
    marker_age = later_ms + (DAY_MS if fork_on_day_one else 0)
    clock.t += later_ms
    plan = log.delete_plan("child")
    assert plan.objects[0] == "s3log/sessions/child/head"
    before = _session_keys(store, "child")
    deleted = log.delete("child")
    after = _session_keys(store, "child")
    assert deleted == len(plan.objects)
    assert before - after == {*plan.objects, *(k for k in plan.activity if k in before)}
    assert after == {*plan.left_for_gc, *plan.left_for_expire} & before
    young = marker_age < plan.left_until_ms
    assert ("s3log/sessions/root/forks/child" in plan.left_for_gc) == young
    assert ("s3log/sessions/root/forks/child" in plan.objects) == (not young)
    assert bool(plan.left_for_expire) == (later_ms < DAY_MS)  # the last commit's day, while it is today


def test_a_dry_run_changes_nothing() -> None:
    store = MemoryStore()
    log = s3log.Log(store)
    log.create("a").append_durable("k", 1)
    keys = {o.key for o in store.list("").objects}
    plan = log.delete_plan("a")
    assert plan.objects == ["s3log/sessions/a/head"] and plan.left_for_expire and not plan.left_for_gc
    assert {o.key for o in store.list("").objects} == keys
    with pytest.raises(s3log.SessionNotFound):
        log.delete_plan("nobody")


async def test_the_async_plan_is_the_same() -> None:
    store = MemoryStore()
    log = s3log.Log(store)
    log.create("a").append_durable("k", 1)
    async with s3log.AsyncLog(AsyncMemoryStore(store)) as alog:
        assert await alog.delete_plan("a") == log.delete_plan("a")
