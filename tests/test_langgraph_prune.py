"""LangGraph savers: prune and delete_for_runs (conformance, chain safety, gc)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

import s3log
from s3log.env import Env
from s3log.integrations.langgraph import AsyncS3LogSaver, S3LogSaver, session_for
from s3log.testing.plugin import LocalS3


async def _sync_memory() -> AsyncGenerator[Any, None]:
    yield S3LogSaver(s3log.Log(s3log.MemoryStore()))


async def _async_memory() -> AsyncGenerator[Any, None]:
    yield AsyncS3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))


def _check(make: Any) -> None:
    @checkpointer_test(name=make.__name__)
    async def factory() -> AsyncGenerator[Any, None]:
        async for saver in make():
            yield saver

    report = asyncio.run(validate(factory, capabilities={"prune", "delete_for_runs"}))
    for cap in ("prune", "delete_for_runs"):
        assert report.results[cap].passed is True, (cap, report.results[cap].failures)


@pytest.mark.parametrize("make", [_sync_memory, _async_memory], ids=["S3LogSaver", "AsyncS3LogSaver"])
def test_prune_and_delete_for_runs_pass_conformance(make: Any) -> None:
    _check(make)


@pytest.mark.slow
def test_prune_and_delete_for_runs_pass_conformance_over_http(s3log_server: LocalS3) -> None:
    async def make() -> AsyncGenerator[Any, None]:
        yield S3LogSaver(s3log.Log(s3log.S3Store(s3log_server.create_bucket(),
                                                 endpoint_url=s3log_server.endpoint_url)))

    _check(make)


def _put(saver: S3LogSaver, tid: str, n: int, *, big: int = 0) -> list[Any]:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    configs: list[Any] = []
    parent = None
    for i in range(n):
        cfg: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
        if parent is not None:
            cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        cp = generate_checkpoint()
        cp["channel_values"] = {"x": "y" * big}
        parent = saver.put(cfg, cp, generate_metadata(step=i, run_id=f"run{i % 2}"), {})
        configs.append(parent)
    return configs


def test_prune_keeps_the_latest_n_as_a_verified_chain_and_gc_collects_the_rest() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=2048))
    saver = S3LogSaver(log)
    configs = _put(saver, "t", 8, big=1500)
    sid = session_for("t", "")
    before = log.head(sid)
    assert before.segments, "the thread's session has segments to retire"
    saver.prune(["t"], keep=2)
    kept = [c.config["configurable"]["checkpoint_id"] for c in saver.list({"configurable": {"thread_id": "t"}})]
    assert kept == [c["configurable"]["checkpoint_id"] for c in configs[-2:]][::-1]
    # The rewritten session is a whole chain again (seq 0 up), at the same id.
    report = log.verify(sid)
    assert report.entries == 2 and log.head(sid).version == before.version + 1
    assert log.head(sid).retired_at is not None
    # The old segments are unreferenced now; gc takes them once the grace period is over.
    young = log.gc(older_than_ms=3_600_000)
    assert young.deleted == [] and young.kept_young >= len(before.segments)
    old = {k for k in before.segments}
    late = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(1, lambda: 2**45)))
    collected = late.gc(older_than_ms=3_600_000)
    assert old <= set(collected.deleted)
    log.verify(sid)
    # And the saver appends on the compacted head.
    more = _put(saver, "t", 1)
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}).config == more[0]


def test_a_writer_that_held_the_old_head_appends_again_after_a_prune() -> None:
    log = s3log.Log(s3log.MemoryStore())
    a, b = S3LogSaver(log), S3LogSaver(log)
    _put(a, "t", 3)
    _put(b, "t", 1)  # b now holds a writer on the session
    a.prune(["t"])
    last = _put(b, "t", 1)  # b's head is stale: it re-reads and appends (nothing lost)
    ids = [c.config["configurable"]["checkpoint_id"] for c in a.list({"configurable": {"thread_id": "t"}})]
    assert ids[0] == last[0]["configurable"]["checkpoint_id"] and len(ids) == 2


def test_prune_refuses_bad_arguments_before_writing() -> None:
    store = s3log.MemoryStore()
    saver = S3LogSaver(s3log.Log(store))
    _put(saver, "t", 2)
    store.requests.reset()
    with pytest.raises(s3log.S3LogError, match="strategy"):
        saver.prune(["t"], strategy="keep_some")
    with pytest.raises(s3log.S3LogError, match="keep"):
        saver.prune(["t"], keep=0)
    assert store.requests.total == 0
