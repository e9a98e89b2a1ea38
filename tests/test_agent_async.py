"""AsyncAgentSession: the sync scenarios, awaited, over AsyncLog on the local HTTP S3."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

import s3log
import s3log.agent
from s3log.agent import (
    NOT_RUN,
    OUTCOME,
    TOOL_RESULTS,
    UNKNOWN_OUTCOME,
    AgentSession,
    AsyncAgentSession,
    SessionBusy,
    SessionScopeError,
    collect_state,
)
from s3log.testing.plugin import LocalS3
from tests.test_agent import later

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def _turn(s: AsyncAgentSession, text: str) -> None:
    await s.user_input(text)
    await s.assistant_items([{"role": "assistant", "content": f"re: {text}"}])
    await s.turn_end()


async def _kinds(log: s3log.AsyncLog, sid: str) -> list[str]:
    return [e.kind for e in (await log.read(sid)).entries]


async def test_round_trip_and_chain(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log, system_prompt="be brief", config={"temperature": 0})
    await _turn(s, "one")
    await _turn(s, "two")
    assert await _kinds(log, s.session_id) == [
        "agent.session_start", "agent.user_input", "agent.assistant_items", "agent.turn_end",
        "agent.user_input", "agent.assistant_items", "agent.turn_end"]
    r = await AsyncAgentSession.restore(log, s.session_id)
    assert r.state.turn_count == 2 and r.state.system_prompt == "be brief"
    assert r.state == collect_state((await log.read(s.session_id)).entries)
    await log.verify(s.session_id)


async def test_write_behind_commits_when_the_buffer_is_full(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log, max_buffer_entries=3)
    await s.user_input("a")  # the turn opens: committed at once, under a lease
    assert s.buffered == 0 and await _kinds(log, s.session_id) == ["agent.session_start", "agent.user_input"]
    version = (await log.head(s.session_id)).version
    await s.assistant_items({"role": "assistant", "content": "b"})
    await s.hook_items({"role": "system", "content": "c"})
    assert s.buffered == 2 and (await log.head(s.session_id)).version == version  # buffered only
    await s.assistant_items({"role": "assistant", "content": "d"})  # third record: flushed
    assert s.buffered == 0 and await _kinds(log, s.session_id) == [
        "agent.session_start", "agent.user_input", "agent.assistant_items", "agent.hook_items",
        "agent.assistant_items"]


async def test_crash_repair_race_repairs_once(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log)
    await s.user_input("crash me")
    await s.assistant_items([
        {"type": "function_call", "call_id": "started", "name": "x", "arguments": "{}"},
        {"role": "assistant", "tool_calls": [{"id": "never", "function": {"name": "y"}}]},
    ])
    await s.tool_started(["started"])  # durable; then the worker dies
    with pytest.raises(SessionBusy) as busy:  # while its lease lasts, the turn is a live worker's
        await AsyncAgentSession.restore(log, s.session_id)
    assert busy.value.owner == s.owner
    after = later(log)  # the lease has expired: every restorer races to repair
    restored = await asyncio.gather(*(AsyncAgentSession.restore(after, s.session_id) for _ in range(4)))
    kinds = await _kinds(log, s.session_id)
    assert kinds.count(TOOL_RESULTS) == 1 and kinds.count(OUTCOME) == 1
    assert await log.list_session_ids() == [s.session_id]  # nobody forked
    st = restored[0].state
    results = {i.get("call_id") or i.get("tool_call_id"): i for i in st.history[-2:]}
    assert results["started"]["output"] == UNKNOWN_OUTCOME and results["never"]["content"] == NOT_RUN
    assert all(r.state.last_run_interrupted and not r.state.turn_open for r in restored)


async def test_auto_fork_on_conflict(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log)
    await _turn(s, "first")
    events: list[Any] = []
    worker = await AsyncAgentSession.restore(log, s.session_id, on_fork=lambda sess, info: events.append(info))
    await _turn(await AsyncAgentSession.restore(log, s.session_id), "interloper")
    await _turn(worker, "worker")
    assert worker.session_id != s.session_id and len(events) == 1
    fork = await AsyncAgentSession.restore(log, s.session_id, follow_forks=True)
    assert fork.session_id == worker.session_id
    assert [h["content"] for h in fork.state.history] == ["first", "re: first", "worker", "re: worker"]


async def test_fork_at_a_user_message_keeps_the_turn_open(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log)
    await _turn(s, "a")
    await s.user_input({"role": "user", "content": "b"})
    await s.flush()
    point = await log.head(s.session_id)
    await s.assistant_items([{"role": "assistant", "content": "bad"}])
    await s.turn_end()
    f = await AsyncAgentSession.fork_at(log, s.session_id, at_hash=point.hash)
    prefix = [e for e in (await log.read(s.session_id)).entries if e.seq <= point.seq]
    assert replace(f.state, head_hash=None, seed_len=0) == replace(collect_state(prefix), head_hash=None)
    assert await _kinds(log, f.session_id) == ["s3log.fork"]


async def test_lazy_ids_scope_and_list(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    async with await AsyncAgentSession.create(log, session_id="agent-a", labels={"cwd": "/other"}):
        pass
    assert await log.list_session_ids() == []
    s = await AsyncAgentSession.create(log, session_id="agent-a", labels={"cwd": "/other"})
    await s.user_input("hi")
    await s.aclose()
    with pytest.raises(SessionScopeError, match="label 'cwd' expected '/w', found '/other'"):
        await AsyncAgentSession.restore(later(log), "agent-a", labels={"cwd": "/w"})  # lease expired
    assert (await log.head("agent-a")).version == 1  # the open turn was not repaired
    assert [r.session_id for r in await AsyncAgentSession.list(log, labels={"cwd": "/other"})] == ["agent-a"]
    assert await AsyncAgentSession.list(log, labels={"cwd": "/w"}) == []


SEED = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "an answer"}]


async def _keys(log: s3log.AsyncLog) -> list[tuple[str, str]]:
    page = await log.store.list("")
    assert page.next_token is None
    return [(o.key, o.etag) for o in page.objects]


@pytest.mark.parametrize("end", ["flush", "aclose"])
async def test_a_session_seeded_with_history_is_stored_at_flush_or_close(
    s3log_async_log: s3log.AsyncLog, end: str
) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log, session_id="seeded", system_prompt="sys", history=SEED,
                                       labels={"cwd": "/w"})
    assert log.store.requests.total == 0  # write-behind: nothing sent yet
    await getattr(s, end)()
    assert await log.list_session_ids() == ["seeded"]
    assert await _kinds(log, "seeded") == ["agent.session_start"]
    assert (await AsyncAgentSession.restore(log, "seeded", labels={"cwd": "/w"})).state.history == SEED
    sent = log.store.requests.total
    await s.aclose()  # nothing left to store
    assert log.store.requests.total == sent and s.unsaved() == 0


@pytest.mark.parametrize("labels", [{"cwd": "/w"}, {"cwd": "/elsewhere"}])
async def test_a_seeded_session_cannot_take_an_id_another_session_holds(
    s3log_async_log: s3log.AsyncLog, labels: dict[str, str]
) -> None:
    log = s3log_async_log
    await (await AsyncAgentSession.create(log, session_id="held", history=SEED, labels={"cwd": "/w"})).aclose()
    stored, keys = await log.head("held"), await _keys(log)
    other = await AsyncAgentSession.create(log, session_id="held", history=[{"role": "user", "content": "mine"}],
                                           labels=labels)
    with pytest.raises(s3log.SessionExists):
        await other.flush()
    with pytest.raises(s3log.SessionExists):
        await other.aclose()
    assert await log.head("held") == stored and await _keys(log) == keys  # nothing written
    restored = await AsyncAgentSession.restore(log, "held", labels={"cwd": "/w"})
    assert restored.state.history == SEED and restored.meta["labels"] == {"cwd": "/w"}
    assert other.discard() == 1


async def test_an_empty_start_stays_lazy_and_sends_nothing(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    s = await AsyncAgentSession.create(log, session_id="empty", system_prompt="sys", config={"model": "m"})
    await s.flush()
    await s.aclose()
    assert log.store.requests.total == 0 and s.unsaved() == 0
    assert await log.list_session_ids() == []


async def test_read_only_state_and_input_shapes(s3log_async_log: s3log.AsyncLog) -> None:
    s = await AsyncAgentSession.create(s3log_async_log)
    await s.user_input({"role": "user", "content": "one dict"})
    with pytest.raises(TypeError, match="read-only"):
        s.state.history[0]["content"] = "x"  # type: ignore[index]
    with pytest.raises(s3log.InvalidEntryError, match="argument 'items'"):
        await s.user_input(7)  # type: ignore[arg-type]
    assert s.buffered == 0 and len(s.state.history) == 1  # the refused input left nothing behind
    await s.aclose()


async def test_adrain_drains_every_session_of_the_log(s3log_async_log: s3log.AsyncLog) -> None:
    log = s3log_async_log
    a = await AsyncAgentSession.create(log)
    await a.user_input("a")
    b = await AsyncAgentSession.create(log)
    await b.user_input("b")
    await s3log.agent.adrain(log)
    assert a.buffered == 0 and b.buffered == 0
    assert await _kinds(log, b.session_id) == ["agent.session_start", "agent.user_input"]


async def test_aclose_drains_every_session_then_closes_the_log_as_close_does() -> None:
    store = s3log.AsyncMemoryStore()
    log = s3log.AsyncLog(store)
    closed: list[str] = []
    a = await AsyncAgentSession.create(log)
    await a.user_input("a")
    log.add_close_hook(lambda: closed.append("log"))
    await s3log.agent.aclose(log)
    assert a.buffered == 0 and closed == ["log"]
    assert await _kinds(s3log.AsyncLog(store), a.session_id) == ["agent.session_start", "agent.user_input"]


async def test_sync_and_async_sessions_read_each_other(s3log_server: LocalS3, s3log_async_log: s3log.AsyncLog) -> None:
    alog = s3log_async_log
    s = await AsyncAgentSession.create(alog, system_prompt="sys")
    await _turn(s, "async")
    bucket = alog.store.bucket  # type: ignore[attr-defined]
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    sync = AgentSession.restore(log, s.session_id)
    sync.user_input("sync")
    sync.turn_end()
    back = await AsyncAgentSession.restore(alog, s.session_id)
    assert [h["content"] for h in back.state.history] == ["async", "re: async", "sync"]
    log.close()


def test_the_async_example_worker(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    env = {**os.environ, **s3log_server.env(), "S3LOG_BUCKET": bucket, "PYTHONPATH": ROOT}
    script = os.path.join(ROOT, "scripts", "agent_worker_async.py")

    def invoke(*args: str) -> dict[str, Any]:
        out = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True,
                             timeout=120, check=True)
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    sid = invoke("--prompt", "hello")["session"]
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    fork = AgentSession.fork_at(log, sid, at_seq=0)  # someone branched off: the worker can follow it
    again = invoke("--session", sid, "--follow-forks", "--prompt", "again")
    assert again["session"] == fork.session_id and again["turns"] == 1
    st = AgentSession.restore(log, fork.session_id).state
    assert [h.get("type") or h.get("role") for h in st.history] == [
        "user", "function_call", "function_call_output", "assistant"]
    assert st.history[0]["content"] == "again" and st.system_prompt == "You are a helpful agent."
    assert AgentSession.restore(log, sid).state.turn_count == 1
    log.close()
