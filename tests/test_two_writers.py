"""Two writers, nothing lost: the race of s3log.testing.conformance against s3log's
LangGraph savers, OpenAI session and AgentSession, with and without the run lease, and
against the peers installed with the test extra (LangGraph's InMemorySaver, the SDK's
SQLiteSession), whose rows document what the lease guards against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession
from langgraph.checkpoint.memory import InMemorySaver

import s3log
from s3log.agent import SessionBusy
from s3log.env import Env
from s3log.integrations import IntegrationError
from s3log.integrations.langgraph import AsyncS3LogSaver, S3LogSaver, session_for
from s3log.integrations.openai_agents import S3LogSession
from s3log.testing.conformance import RaceResult, interleaved, race_agent_sessions, race_checkpointers, race_sessions

#: Both runs stored and acknowledged; the one put first is off the thread's latest
#: chain, and the thread's history mixes the two runs' checkpoints.
LOST_AND_INTERLEAVED = RaceResult(acknowledged=4, reachable=2, interleaved=True)
#: Every item kept, but both runs' items in one conversation: A, B, A, B.
INTERLEAVED = RaceResult(acknowledged=4, reachable=4, interleaved=True)
#: The late run refused before it read or wrote anything; the first one whole.
REFUSED_CLEAN = RaceResult(acknowledged=2, reachable=2, interleaved=False, refused=1)

CONFIG: Any = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}


def test_interleaved_tells_mixed_runs_from_runs_one_after_another() -> None:
    assert interleaved(["A", "B", "A"]) and interleaved(["A", "B", "B", "A"])
    assert not interleaved(["A", "A", "B", "B"]) and not interleaved(["B"]) and not interleaved([])


# ------------------------------------------------------------------ LangGraph


def test_langgraphs_in_memory_saver_loses_a_run_off_the_latest_chain() -> None:
    shared = InMemorySaver()
    assert race_checkpointers(lambda worker: shared) == LOST_AND_INTERLEAVED


def test_s3log_saver_by_default_stores_both_runs_as_langgraphs_savers_do(s3log_store: Any) -> None:
    result = race_checkpointers(lambda worker: S3LogSaver(s3log.Log(s3log_store)))
    assert result == LOST_AND_INTERLEAVED and not result.clean


def test_s3log_saver_under_a_run_lease_refuses_the_late_run(s3log_store: Any) -> None:
    result = race_checkpointers(lambda worker: S3LogSaver(s3log.Log(s3log_store)),
                                guard=lambda saver, config: saver.lease(config, ttl=60))
    assert result == REFUSED_CLEAN and result.clean


def test_strict_s3log_saver_refuses_the_late_run_at_its_first_put() -> None:
    store = s3log.MemoryStore()
    assert race_checkpointers(lambda worker: S3LogSaver(s3log.Log(store), strict=True)) == REFUSED_CLEAN


async def test_async_saver_lease_refuses_a_second_run_and_frees_the_thread_at_exit() -> None:
    store = s3log.AsyncMemoryStore()
    first, second = AsyncS3LogSaver(s3log.AsyncLog(store)), AsyncS3LogSaver(s3log.AsyncLog(store))
    async with first.alease(CONFIG, owner="worker-a", ttl=60) as lease:
        assert lease.owner == "worker-a"
        with pytest.raises(SessionBusy) as busy:
            async with second.alease(CONFIG, owner="worker-b"):
                pytest.fail("entered a leased thread")
        assert busy.value.owner == "worker-a"
    sid = session_for("t-1", "")
    assert (await s3log.AsyncLog(store).head(sid)).lease is None
    async with second.alease(CONFIG, owner="worker-b"):  # the next run, by another worker
        assert (await s3log.AsyncLog(store).head(sid)).lease.owner == "worker-b"


def test_saver_lease_costs_one_put_to_take_and_one_to_release_and_survives_the_runs_puts() -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    store = s3log.MemoryStore()
    saver = S3LogSaver(s3log.Log(store))
    sid = session_for("t-1", "")
    at = saver.put(CONFIG, empty_checkpoint(), {"source": "input", "step": -1}, {})
    puts = store.requests["PUT"]
    with saver.lease(CONFIG, owner="w", ttl=60):
        assert store.requests["PUT"] == puts + 1  # the head, with the lease
        saver.put(at, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        assert s3log.Log(store).head(sid).lease.owner == "w"  # the run's own puts keep it
        puts = store.requests["PUT"]
    assert store.requests["PUT"] == puts + 1 and s3log.Log(store).head(sid).lease is None


def test_a_lease_is_released_when_the_run_raises_and_an_expired_one_is_taken_over() -> None:
    now = {"ms": 1_800_000_000_000}
    store = s3log.MemoryStore()
    config = s3log.LogConfig(env=Env.deterministic(1, lambda: now["ms"]))
    a, b = S3LogSaver(s3log.Log(store, config=config)), S3LogSaver(s3log.Log(store, config=config))
    with pytest.raises(RuntimeError, match="model failed"), a.lease(CONFIG, owner="a", ttl=60):
        raise RuntimeError("model failed")
    with b.lease(CONFIG, owner="b", ttl=60):
        pass  # free at once: the failed run released it
    stuck = a.lease(CONFIG, owner="a", ttl=60)
    stuck.__enter__()  # a worker that dies holding the lease
    with pytest.raises(SessionBusy):
        b.lease(CONFIG, owner="b").__enter__()
    now["ms"] += 61_000
    with b.lease(CONFIG, owner="b", ttl=60):
        assert s3log.Log(store, config=config).head(session_for("t-1", "")).lease.owner == "b"


def test_a_waiting_run_takes_over_a_dead_workers_lease_once_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    now = {"ms": 1_800_000_000_000}
    config = s3log.LogConfig(env=Env.deterministic(1, lambda: now["ms"]))
    # The shell's sleep moves the injected clock instead of waiting.
    monkeypatch.setattr(S3LogSaver, "_pause", staticmethod(lambda s: now.update(ms=now["ms"] + int(s * 1000))))
    store = s3log.MemoryStore()
    a, b = S3LogSaver(s3log.Log(store, config=config)), S3LogSaver(s3log.Log(store, config=config))
    start = now["ms"]
    dead = a.lease(CONFIG, owner="a", ttl=60)
    dead.__enter__()  # a worker that dies holding the lease (kept: dropped, it would release)
    with pytest.raises(SessionBusy):
        b.lease(CONFIG, owner="b", wait=10).__enter__()  # the wait runs out first
    assert start + 10_000 <= now["ms"] < start + 60_000
    with b.lease(CONFIG, owner="b", ttl=60, wait=120):
        assert now["ms"] >= start + 60_000  # taken once the dead worker's lease expired
        assert s3log.Log(store, config=config).head(session_for("t-1", "")).lease.owner == "b"


async def test_a_waiting_session_runs_after_the_first_run_on_its_history() -> None:
    import asyncio

    store = s3log.AsyncMemoryStore()
    a, b = S3LogSession("conv-1", s3log.AsyncLog(store)), S3LogSession("conv-1", s3log.AsyncLog(store))
    seen: list[list[str]] = []

    async def second_run() -> None:
        async with b.lease(owner="b", wait=30):
            seen.append([i["content"] for i in await b.get_items()])
            await b.add_items([{"role": "user", "content": "B: question"}])

    async with a.lease(owner="a"):
        waiting = asyncio.create_task(second_run())
        await a.add_items([{"role": "user", "content": "A: question"}])
        await asyncio.sleep(0)  # the second run reads the busy head and waits
        await a.add_items([{"role": "assistant", "content": "A: answer"}])
        assert not seen
    await waiting
    assert seen == [["A: question", "A: answer"]]
    assert [i["content"] for i in await a.get_items()] == ["A: question", "A: answer", "B: question"]


@pytest.mark.parametrize(("option", "value"), [("ttl", 0), ("ttl", -1), ("ttl", True), ("ttl", "60"),
                                               ("ttl", float("nan")), ("wait", -1), ("wait", float("inf")),
                                               ("wait", "1"), ("owner", "")])
def test_bad_lease_options_are_refused_before_anything_is_written(option: str, value: Any) -> None:
    store = s3log.MemoryStore()
    with pytest.raises(IntegrationError, match=option), S3LogSaver(s3log.Log(store)).lease(CONFIG, **{option: value}):
        pass
    assert store.requests.total == 0


# ------------------------------------------------------------ OpenAI Agents SDK


async def test_the_sdks_sqlite_session_interleaves_two_runs(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    assert await race_sessions(lambda worker: SQLiteSession("conv-1", db)) == INTERLEAVED


async def test_s3log_session_by_default_interleaves_two_runs_as_the_sdks_sessions_do(s3log_async_log: Any) -> None:
    result = await race_sessions(lambda worker: S3LogSession("conv-1", s3log_async_log))
    assert result == INTERLEAVED
    items = await S3LogSession("conv-1", s3log_async_log).get_items()
    assert [i["content"] for i in items] == ["seed", "A: question", "B: question", "A: answer", "B: answer"]


async def test_s3log_session_under_a_run_lease_refuses_the_late_run(s3log_async_log: Any) -> None:
    result = await race_sessions(lambda worker: S3LogSession("conv-1", s3log_async_log),
                                 guard=lambda session: session.lease(ttl=60))
    assert result == REFUSED_CLEAN and result.clean
    items = await S3LogSession("conv-1", s3log_async_log).get_items()
    assert [i["content"] for i in items] == ["seed", "A: question", "A: answer"]


async def test_session_lease_over_a_blocking_log_and_the_next_run_after_release() -> None:
    store = s3log.MemoryStore()
    a, b = S3LogSession("conv-1", s3log.Log(store)), S3LogSession("conv-1", s3log.Log(store))
    assert await race_sessions(lambda worker: S3LogSession("conv-2", s3log.Log(store)),
                               guard=lambda session: session.lease()) == REFUSED_CLEAN
    async with a.lease(owner="a"):
        await a.add_items([{"role": "user", "content": "one"}])
        with pytest.raises(SessionBusy):
            async with b.lease(owner="b"):
                pass
    async with b.lease(owner="b"):
        await b.add_items([{"role": "user", "content": "two"}])
    assert [i["content"] for i in await a.get_items()] == ["one", "two"]
    assert s3log.Log(store).head("conv-1").lease is None


# ---------------------------------------------------------------- AgentSession


def test_agent_session_continues_the_late_run_in_a_fork(s3log_store: Any) -> None:
    result = race_agent_sessions(lambda worker: s3log.Log(s3log_store))
    assert result == RaceResult(acknowledged=4, reachable=4, interleaved=False, forked=1) and result.clean
