"""Agent sessions: scenarios of a mature agent-persistence suite, on s3log."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, TypeVar

import pytest

import s3log
from s3log.agent import (
    NOT_RUN,
    OUTCOME,
    TOOL_RESULTS,
    UNKNOWN_OUTCOME,
    AgentSession,
    SessionBusy,
    collect_state,
    group_items,
)
from s3log.testing.faults import FaultyStore
from s3log.testing.plugin import LocalS3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
L = TypeVar("L", s3log.Log, s3log.AsyncLog)


@pytest.fixture
def log() -> s3log.Log:
    return s3log.Log(s3log.MemoryStore())


def later(log: L, seconds: float = 3600.0) -> L:
    """The same sessions seen from a log (a Log or an AsyncLog) whose clock is ``seconds``
    ahead: a crashed worker's lease has expired there, so a restore repairs its open turn."""
    env = s3log.env.Env(clock_ms=lambda: s3log.env.wall_clock_ms() + int(seconds * 1000))
    return type(log)(log.store, prefix=log.prefix, config=dataclasses.replace(log.config, env=env))


def _turn(s: AgentSession, text: str) -> None:
    s.user_input(text)
    s.assistant_items([{"role": "assistant", "content": f"re: {text}"}])
    s.turn_end()


def test_logs_entries_with_an_intact_chain(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys", config={"model": "m"})
    _turn(s, "hi")
    view = log.read(s.session_id)
    kinds = [e.kind for e in view.entries]
    assert kinds == ["agent.session_start", "agent.user_input", "agent.assistant_items", "agent.turn_end"]
    log.verify(s.session_id)


def test_restore_round_trip(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="be brief", config={"temperature": 0})
    _turn(s, "one")
    _turn(s, "two")
    r = AgentSession.restore(log, s.session_id)
    assert r.state.system_prompt == "be brief"
    assert r.state.config == {"temperature": 0}
    assert r.state.turn_count == 2
    assert [h["content"] for h in r.state.history] == ["one", "re: one", "two", "re: two"]
    assert r.state.head_hash == log.head(s.session_id).hash.hex()  # type: ignore[union-attr]
    assert r.state == collect_state(log.read(s.session_id).entries)


def test_tool_call_turn(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys")
    s.record_turn([
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ], outcome="finished")
    kinds = [e.kind for e in log.read(s.session_id).entries]
    assert kinds[1:] == ["agent.user_input", "agent.assistant_items", "agent.tool_results",
                         "agent.assistant_items", "agent.outcome", "agent.turn_end"]
    st = AgentSession.restore(log, s.session_id).state
    assert st.turn_count == 1 and len(st.history) == 4 and st.open_calls == {}
    assert st.last_outcome is not None and st.last_outcome["status"] == "finished"


def test_pause_then_resume_after_restore_is_not_repaired(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys")
    s.user_input("delete prod?")
    s.assistant_items([{"type": "function_call", "call_id": "c9", "name": "rm", "arguments": "{}"}])
    s.outcome("paused", message="needs approval")
    r = AgentSession.restore(log, s.session_id)
    assert r.state.paused and not r.state.last_run_interrupted
    assert [e.kind for e in log.read(s.session_id).entries][-1] == OUTCOME  # nothing appended
    r.tool_results([{"type": "function_call_output", "call_id": "c9", "output": "approved, done"}])
    r.assistant_items([{"role": "assistant", "content": "done"}])
    r.outcome("finished")
    r.turn_end()
    st = AgentSession.restore(log, s.session_id).state
    assert st.turn_count == 1 and st.open_calls == {} and not st.paused


def test_fork_preserves_state_and_meta(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys", labels={"team": "x"}, delegation_depth=1)
    _turn(s, "a")
    f = s.fork()
    assert f.session_id != s.session_id
    assert f.state.history == s.state.history and f.state.turn_count == 1
    assert f.state.system_prompt == "sys"
    head = log.head(f.session_id)
    assert head.meta["parent"] == s.session_id and head.meta["seed_len"] == 2
    assert head.meta["labels"] == {"team": "x"} and head.meta["delegation_depth"] == 1
    _turn(f, "b")
    assert len(AgentSession.restore(log, s.session_id).state.history) == 2
    assert len(AgentSession.restore(log, f.session_id).state.history) == 4


def test_fork_at_a_point_truncates_the_state(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys")
    _turn(s, "a")
    point = log.head(s.session_id).hash
    _turn(s, "b")
    f = AgentSession.fork_at(log, s.session_id, at_hash=point)
    assert [h["content"] for h in f.state.history] == ["a", "re: a"] and f.state.turn_count == 1
    with pytest.raises(s3log.EntryNotFound):
        AgentSession.fork_at(log, s.session_id, at_hash="ab" * 32)


def test_config_change_is_logged(log: s3log.Log) -> None:
    s = AgentSession.create(log, config={"model": "a"})
    s.config_changed({"model": "b"})
    s.flush()
    assert AgentSession.restore(log, s.session_id).state.config == {"model": "b"}
    assert "agent.config_changed" in [e.kind for e in log.read(s.session_id).entries]


def test_cache_lock_and_unlock(log: s3log.Log) -> None:
    s = AgentSession.create(log)
    _turn(s, "a")
    s.cache_locked(2)
    s.flush()
    assert AgentSession.restore(log, s.session_id).state.locked_prefix_len == 2
    s.cache_unlocked()
    s.flush()
    assert AgentSession.restore(log, s.session_id).state.locked_prefix_len is None


def test_auto_fork_on_conflict_keeps_both_workers_entries(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys")
    _turn(s, "first")
    original = s.session_id
    events: list[Any] = []
    worker = AgentSession.restore(log, original, on_fork=lambda sess, info: events.append(info))
    interloper = AgentSession.restore(log, original)
    _turn(interloper, "interloper")
    _turn(worker, "worker")
    assert worker.session_id != original
    assert len(events) == 1 and events[0].parent.session == original
    orig = [h["content"] for h in AgentSession.restore(log, original).state.history]
    fork = [h["content"] for h in AgentSession.restore(log, worker.session_id).state.history]
    assert "interloper" in orig and "worker" not in orig
    assert fork == ["first", "re: first", "worker", "re: worker"]
    assert log.head(worker.session_id).meta["parent"] == original


def test_lazy_creation_stores_nothing_until_the_first_commit(log: s3log.Log) -> None:
    store = log.store
    assert isinstance(store, s3log.MemoryStore)
    s = AgentSession.create(log, system_prompt="sys", session_id="agent-1")
    s.flush()  # only the session start: nothing worth an id yet
    assert store.all_keys() == []
    s.user_input("hi")  # a turn opens: committed at once, under this worker's lease
    sessions = [k for k in store.all_keys() if "/sessions/" in k]  # (the activity index marks the day too)
    assert sessions == ["s3log/sessions/agent-1/head"]
    assert log.head("agent-1").lease is not None and log.head("agent-1").lease.owner == s.owner
    s.assistant_items([{"role": "assistant", "content": "hello"}])  # buffered
    s.turn_end()  # committed; the lease released
    assert [k for k in store.all_keys() if "/sessions/" in k] == sessions and log.head("agent-1").lease is None


SEED = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "an answer"}]


@pytest.mark.parametrize("end", ["flush", "close"])
def test_a_session_seeded_with_history_is_stored_at_flush_or_close(log: s3log.Log, end: str) -> None:
    s = AgentSession.create(log, session_id="seeded", system_prompt="sys", history=SEED, labels={"cwd": "/w"})
    assert log.store.requests.total == 0  # write-behind: nothing sent yet
    getattr(s, end)()
    assert log.list_session_ids() == ["seeded"]
    assert [e.kind for e in log.read("seeded").entries] == ["agent.session_start"]
    assert AgentSession.restore(log, "seeded", labels={"cwd": "/w"}).state.history == SEED
    sent = log.store.requests.total
    s.close()  # nothing left to store
    assert log.store.requests.total == sent and s.unsaved() == 0


@pytest.mark.parametrize("labels", [{"cwd": "/w"}, {"cwd": "/elsewhere"}])
def test_a_seeded_session_cannot_take_an_id_another_session_holds(log: s3log.Log, labels: dict[str, str]) -> None:
    AgentSession.create(log, session_id="held", history=SEED, labels={"cwd": "/w"}).close()
    store = log.store
    assert isinstance(store, s3log.MemoryStore)
    before = {k: store.get(k) for k in store.all_keys()}
    other = AgentSession.create(log, session_id="held", history=[{"role": "user", "content": "mine"}], labels=labels)
    assert other.unsaved() == 1  # the seed is worth keeping, so it is tried at exit too
    with pytest.raises(s3log.SessionExists):
        other.flush()
    with pytest.raises(s3log.SessionExists):
        other.close()
    assert {k: store.get(k) for k in store.all_keys()} == before  # nothing written
    assert AgentSession.restore(log, "held", labels={"cwd": "/w"}).state.history == SEED
    assert other.discard() == 1


def test_an_empty_start_stays_lazy_and_sends_nothing(log: s3log.Log) -> None:
    s = AgentSession.create(log, session_id="empty", system_prompt="sys", config={"model": "m"}, history=[])
    s.flush()
    s.close()
    assert log.store.requests.total == 0 and log.list_session_ids() == [] and s.unsaved() == 0


def test_id_collision_is_rejected(log: s3log.Log) -> None:
    _turn(AgentSession.create(log, session_id="taken"), "x")
    s = AgentSession.create(log, session_id="taken")
    with pytest.raises(s3log.SessionExists):
        _turn(s, "y")
    assert s.discard() == 4  # knowingly dropped: exit does not try (nor warn) again
    assert s.unsaved() == 0
    with pytest.raises(s3log.S3LogError, match="discarded"):
        s.user_input("z")


def test_open_turn_left_by_a_crash_is_closed_once_as_interrupted(log: s3log.Log) -> None:
    s = AgentSession.create(log, system_prompt="sys")
    _turn(s, "ok")
    s.user_input("do two things")
    s.assistant_items([
        {"type": "function_call", "call_id": "started", "name": "a", "arguments": "{}"},
        {"role": "assistant", "tool_calls": [{"id": "never", "function": {"name": "b"}}]},
    ])
    s.tool_started(["started"])  # durable; then the worker dies
    with pytest.raises(SessionBusy) as busy:  # while its lease lasts, the turn is a live worker's
        AgentSession.restore(log, s.session_id)
    assert busy.value.owner == s.owner and busy.value.session == s.session_id
    log = later(log)  # the lease has expired: the worker is gone
    r = AgentSession.restore(log, s.session_id)
    st = r.state
    assert st.last_run_interrupted and not st.turn_open and st.turn_count == 2
    results = {i.get("call_id") or i.get("tool_call_id"): i for i in st.history[-2:]}
    assert results["started"]["output"] == UNKNOWN_OUTCOME
    assert results["never"]["content"] == NOT_RUN and results["never"]["role"] == "tool"
    n = len(log.read(s.session_id).entries)
    AgentSession.restore(log, s.session_id)  # already repaired: nothing more written
    assert len(log.read(s.session_id).entries) == n
    assert [e.kind for e in log.read(s.session_id).entries].count(TOOL_RESULTS) == 1


def test_two_workers_restoring_a_crashed_session_repair_it_once(s3log_server: LocalS3) -> None:
    import threading

    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    s = AgentSession.create(log)
    s.user_input("crash me")
    s.assistant_items([{"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"}])
    s.flush()
    barrier = threading.Barrier(4)

    def restorer() -> None:
        barrier.wait()
        AgentSession.restore(later(log), s.session_id)  # after the crashed worker's lease

    threads = [threading.Thread(target=restorer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kinds = [e.kind for e in log.read(s.session_id).entries]
    assert kinds.count(TOOL_RESULTS) == 1 and kinds.count(OUTCOME) == 1
    assert log.list_session_ids() == [s.session_id]  # nobody forked


def test_failed_commit_keeps_the_batch_and_raises_on_the_next_flush() -> None:
    mem = s3log.MemoryStore()
    failing = {"on": False}

    def plan(method: str, key: str) -> Any:
        return "503" if failing["on"] and method.startswith("put") else None

    log = s3log.Log(FaultyStore(mem, plan), config=s3log.LogConfig(
        retry=s3log.RetryPolicy(attempts=2, initial=0.0001, max_backoff=0.0002)))
    s = AgentSession.create(log, max_buffer_entries=1)
    s.user_input("first")  # over the bound: committed at once
    assert s.buffered == 0
    failing["on"] = True
    s.user_input("a")  # hits the size bound: the automatic commit fails, quietly
    assert s.last_error is not None and s.buffered == 1
    with pytest.raises(s3log.StoreError):
        s.flush()
    failing["on"] = False
    s.flush()
    restored = AgentSession.restore(later(s3log.Log(mem)), s.session_id).state.history
    assert [h["content"] for h in restored if h.get("role") == "user"] == ["first", "a"]


def test_write_behind_commits_when_the_buffer_is_full(log: s3log.Log) -> None:
    s = AgentSession.create(log, max_buffer_entries=3)
    store = log.store
    assert isinstance(store, s3log.MemoryStore)
    s.user_input("a")  # the turn opens: committed at once, under a lease
    version = log.head(s.session_id).version
    s.assistant_items([{"role": "assistant", "content": "b"}])
    s.hook_items([{"role": "system", "content": "c"}])
    assert log.head(s.session_id).version == version and s.buffered == 2
    s.assistant_items([{"role": "assistant", "content": "d"}])  # third record: flushed
    assert log.head(s.session_id).version == version + 1 and s.buffered == 0


def test_group_items_splits_a_turn_by_kind() -> None:
    runs = group_items([
        {"role": "user", "content": "x"},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "1"},
        {"type": "function_call_output", "call_id": "1"},
        {"role": "tool", "tool_call_id": "2"},
        {"role": "user", "content": "hook says hi", "hook": "pre"},
    ])
    assert [(k, len(v)) for k, v in runs] == [
        ("agent.user_input", 1), ("agent.assistant_items", 2), ("agent.tool_results", 2), ("agent.hook_items", 1)]


def test_restore_of_a_session_written_by_another_process(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    env = {**os.environ, **s3log_server.env(), "S3LOG_BUCKET": bucket, "PYTHONPATH": ROOT}  # this checkout's s3log
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "agent_worker.py"), "--prompt", "hello"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    sid = json.loads(out.stdout)["session"]
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    st = AgentSession.restore(log, sid).state
    assert st.turn_count == 1 and st.system_prompt == "You are a helpful agent."
    assert [h.get("type") or h.get("role") for h in st.history] == [
        "user", "function_call", "function_call_output", "assistant"]


def _invoke_worker(args: tuple[str, str, str, int]) -> dict[str, Any]:
    endpoint, bucket, sid, n = args
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import agent_worker

    os.environ.update({"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"})
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint))
    return agent_worker.handle(log, sid, f"prompt {n}")


def test_racing_example_workers_keep_every_turn(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    first = AgentSession.create(log, system_prompt="sys")
    first.config_changed({"model": "fake-1"})  # a real record: a session holding only its start is not stored
    first.flush()
    sid = first.session_id
    with ProcessPoolExecutor(max_workers=4, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_invoke_worker, [(s3log_server.endpoint_url, bucket, sid, n) for n in range(12)]))
    prompts: list[str] = []
    for other in log.list_session_ids():
        view = log.read(other)
        for e in view.entries:
            if e.kind == "agent.user_input":
                prompts.extend(i["content"] for i in e.data["items"])
    assert sorted(prompts) == sorted(f"prompt {n}" for n in range(12))
    for r in results:
        st = AgentSession.restore(log, r["session"]).state
        assert r["prompt"] in [h.get("content") for h in st.history]
