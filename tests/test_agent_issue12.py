"""Agent sessions that behave like the reference implementations (issue 12), over the local HTTP S3."""

from __future__ import annotations

import copy
import json
import pickle
from dataclasses import replace
from typing import Any

import pytest

import s3log
import s3log.agent
from s3log import InvalidEntryError
from s3log.agent import (
    AgentSession,
    SessionScopeError,
    collect_state,
    thaw,
)
from tests.test_agent import later


def _turn(s: AgentSession, text: str) -> None:
    s.user_input(text)
    s.assistant_items([{"role": "assistant", "content": f"re: {text}"}])
    s.turn_end()


def _kinds(log: s3log.Log, sid: str) -> list[str]:
    return [e.kind for e in log.read(sid).entries]


def _comparable(state: s3log.agent.SessionState) -> s3log.agent.SessionState:
    # A fork's head hash is its own entry's, and it counts what it inherited: the rest must match.
    return replace(state, head_hash=None, seed_len=0)


# ---------------------------------------------------------------- 1. fork at a user message


def test_fork_at_a_user_message_is_the_prefix_with_its_turn_open(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, system_prompt="sys")
    _turn(s, "a")
    s.user_input("b")
    s.flush()
    point = log.head(s.session_id)
    s.assistant_items([{"role": "assistant", "content": "a bad answer"}])
    s.turn_end()

    f = AgentSession.fork_at(log, s.session_id, at_hash=point.hash)
    prefix = [e for e in log.read(s.session_id).entries if e.seq <= point.seq]
    assert _comparable(f.state) == _comparable(collect_state(prefix))
    assert f.state.turn_open and f.state.last_outcome is None and f.state.turn_count == 1
    assert _kinds(log, f.session_id) == ["s3log.fork"]  # nothing synthetic
    # Re-ask the model from there.
    f.assistant_items([{"role": "assistant", "content": "a better answer"}])
    f.outcome("finished")
    f.turn_end()
    st = AgentSession.restore(log, f.session_id).state
    assert [h["content"] for h in st.history] == ["a", "re: a", "b", "a better answer"]
    assert st.turn_count == 2 and not st.last_run_interrupted


def test_fork_at_an_open_tool_call_keeps_the_call_open(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log)
    s.user_input("weather?")
    s.assistant_items([{"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}])
    s.flush()
    point = log.head(s.session_id).hash
    s.tool_results([{"type": "function_call_output", "call_id": "c1", "output": "sunny"}])
    s.turn_end()
    f = AgentSession.fork_at(log, s.session_id, at_hash=point)
    assert dict(f.state.open_calls) == {"c1": "responses"} and f.state.turn_open
    assert _kinds(log, f.session_id) == ["s3log.fork"]


# ------------------------------------------------------------- 3. abandoned sessions


def test_a_session_holding_only_its_start_is_never_stored(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, system_prompt="sys", session_id="agent-x")
    s.flush()
    s.close()
    with AgentSession.create(log, session_id="agent-x"):
        pass
    assert log.list_session_ids() == []
    again = AgentSession.create(log, system_prompt="sys", session_id="agent-x")
    _turn(again, "hi")  # the id is free: no SessionExists
    assert log.list_session_ids() == ["agent-x"]
    assert _kinds(log, "agent-x")[0] == "agent.session_start"


def test_forking_a_session_holding_only_its_start_stores_it(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, system_prompt="sys")
    f = s.fork()
    assert f.state.system_prompt == "sys"
    assert _kinds(log, s.session_id) == ["agent.session_start"]


# ----------------------------------------------------------------- 4. closing a log


def test_agent_close_drains_every_session_of_the_log(s3log_log: s3log.Log) -> None:
    log = s3log_log
    sessions = []
    for on, text in [(log, "a"), (log, "b"), (s3log.Log(log.store), "c")]:
        s = AgentSession.create(on)
        s.user_input(f"from {text}")  # opens the turn: committed at once
        s.assistant_items({"role": "assistant", "content": f"re: {text}"})  # buffered
        sessions.append(s)
    a, b, c = sessions
    other = c.log
    assert a.buffered == b.buffered == c.buffered == 1
    s3log.agent.close(log)
    assert a.buffered == 0 and b.buffered == 0 and c.buffered == 1  # only this log's sessions
    assert _kinds(other, a.session_id) == ["agent.session_start", "agent.user_input", "agent.assistant_items"]
    assert _kinds(other, b.session_id) == ["agent.session_start", "agent.user_input", "agent.assistant_items"]
    s3log.agent.close(other)
    assert c.buffered == 0


def test_a_session_dropped_undrained_is_kept_until_the_log_is_closed(s3log_log: s3log.Log) -> None:
    import gc

    log = s3log_log

    def handler() -> str:
        s = AgentSession.create(log)
        s.user_input("the handler forgot to close")
        return s.session_id

    sid = handler()
    gc.collect()
    s3log.agent.close(log)
    assert _kinds(s3log.Log(log.store), sid) == ["agent.session_start", "agent.user_input"]


class _HookedLog(s3log.Log):
    """A Log with close hooks, for as long as s3log.Log has none of its own."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._hooks: list[Any] = []

    def add_close_hook(self, fn: Any) -> None:
        self._hooks.append(fn)

    def close(self) -> None:
        for fn in self._hooks:
            fn()
        super().close()


def test_closing_the_log_drains_its_sessions(s3log_store: Any) -> None:
    log_cls = s3log.Log if hasattr(s3log.Log, "add_close_hook") else _HookedLog
    log = log_cls(s3log_store)
    s = AgentSession.create(log)
    s.user_input("buffered")
    log.close()
    assert s.buffered == 0
    assert _kinds(s3log.Log(s3log_store), s.session_id) == ["agent.session_start", "agent.user_input"]


def test_a_failed_drain_names_every_failed_session_and_keeps_the_records() -> None:
    from s3log.faults import FaultyStore

    mem = s3log.MemoryStore()
    failing = {"on": True}
    log = s3log.Log(FaultyStore(mem, lambda method, key: "503" if failing["on"] and method.startswith("put") else None),
                    config=s3log.LogConfig(retry=s3log.RetryPolicy(attempts=1, initial=0.0001, max_backoff=0.0002)))
    a = AgentSession.create(log)
    a.user_input("a")
    b = AgentSession.create(log)
    b.user_input("b")
    with pytest.raises(s3log.StoreError) as info:
        s3log.agent.close(log)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert (a.session_id in notes) != (b.session_id in notes)  # the other one is noted
    assert a.buffered == 2 and b.buffered == 2
    failing["on"] = False
    s3log.agent.close(log)  # the records were kept: the next drain commits them
    assert a.buffered == 0 and b.buffered == 0


# --------------------------------------------------------------------- 5. scoping


def test_restore_refuses_a_session_of_another_scope_and_writes_nothing(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, labels={"cwd": "/other", "tenant": "t1"})
    s.user_input("crashed mid-turn")
    s.flush()
    before = log.head(s.session_id)
    log = later(log)  # the crashed worker's lease has expired: only the scope stops a repair
    with pytest.raises(SessionScopeError) as info:
        AgentSession.restore(log, s.session_id, labels={"cwd": "/w"})
    msg = str(info.value)
    assert s.session_id in msg and "'cwd'" in msg and "'/w'" in msg and "'/other'" in msg
    assert isinstance(info.value, s3log.S3LogError)
    assert (info.value.session, info.value.label, info.value.expected, info.value.found) == (
        s.session_id, "cwd", "/w", "/other")
    with pytest.raises(SessionScopeError, match="'region' expected 'eu', found no such label"):
        AgentSession.restore(log, s.session_id, labels={"region": "eu"})
    assert log.head(s.session_id).version == before.version  # not repaired, nothing written
    r = AgentSession.restore(log, s.session_id, labels={"cwd": "/other"})  # in scope: repaired
    assert r.state.last_run_interrupted


def test_list_filters_agent_sessions_by_labels(s3log_log: s3log.Log) -> None:
    log = s3log_log
    here = AgentSession.create(log, labels={"cwd": "/w", "tenant": "t1"})
    _turn(here, "x")
    there = AgentSession.create(log, labels={"cwd": "/other"})
    _turn(there, "y")
    w = log.create(meta={"labels": {"cwd": "/w"}})  # not an agent session
    w.append("k", 1)
    w.commit()
    assert [r.session_id for r in AgentSession.list(log, labels={"cwd": "/w"})] == [here.session_id]
    assert {r.session_id for r in AgentSession.list(log)} == {here.session_id, there.session_id}
    assert AgentSession.list(log, labels={"cwd": "/w", "tenant": "t2"}) == []
    with pytest.raises(ValueError, match="labels must be a mapping"):
        AgentSession.list(log, labels=["cwd"])  # type: ignore[arg-type]


# --------------------------------------------------------------- 6. read-only views


def test_state_views_are_read_only_and_nothing_leaks(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, config={"model": "m"})
    msg = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    s.user_input([msg])
    msg["content"][0]["text"] = "changed by the caller"  # type: ignore[index]
    s.assistant_items([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]}])
    st = s.state
    with pytest.raises(TypeError, match="read-only"):
        st.history[0]["content"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        st.history[0]["content"][0]["text"] = "x"
    with pytest.raises(TypeError, match="read-only"):
        st.history.append({"role": "user"})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="read-only"):
        st.history[1]["tool_calls"][0]["id"] = "c2"
    with pytest.raises(TypeError, match="read-only"):
        st.config["model"] = "n"  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        s.meta["labels"] = {"cwd": "/x"}  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        st.open_calls.clear()  # type: ignore[attr-defined]
    # They still serialize like plain data, and a copy is mutable.
    assert json.loads(json.dumps(st.history))[0]["content"][0]["text"] == "hi"
    mine = copy.deepcopy(st.history)
    mine[0]["content"] = "mutable"
    assert thaw(st.history)[0] == {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert pickle.loads(pickle.dumps(st.history))[0]["content"][0]["text"] == "hi"
    s.turn_end()
    stored = AgentSession.restore(log, s.session_id).state
    assert stored.history[0]["content"][0]["text"] == "hi"
    assert stored.history == s.state.history and stored.open_calls == {}
    assert log.head(s.session_id).meta["labels"] == {}


# ------------------------------------------------------------------- 7. input shapes


def test_user_input_takes_a_string_a_message_or_a_list(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log)
    s.user_input({"role": "user", "content": "one dict"})
    s.user_input("a string")
    s.user_input([{"role": "user", "content": "a list"}])
    s.tool_results({"type": "function_call_output", "call_id": "c", "output": "one result"})
    s.turn_end()
    history = AgentSession.restore(log, s.session_id).state.history
    assert [h.get("content") or h.get("output") for h in history] == ["one dict", "a string", "a list", "one result"]


@pytest.mark.parametrize("bad", [42, None, b"bytes", [1], ["text"], [{"role": "user"}, 3]])
def test_user_input_of_another_shape_is_refused_naming_the_argument(s3log_log: s3log.Log, bad: Any) -> None:
    s = AgentSession.create(s3log_log)
    with pytest.raises(InvalidEntryError, match="argument 'items'") as info:
        s.user_input(bad)
    assert isinstance(info.value, ValueError) and s.session_id in str(info.value)
    assert s.buffered == 1 and len(s.state.history) == 0  # only the session start


def test_assistant_items_refuse_a_bare_string(s3log_log: s3log.Log) -> None:
    s = AgentSession.create(s3log_log)
    with pytest.raises(InvalidEntryError, match="argument 'items' must be a message dict or a list of them"):
        s.assistant_items("just text")  # type: ignore[arg-type]


def test_tool_started_takes_one_id(s3log_log: s3log.Log) -> None:
    s = AgentSession.create(s3log_log)
    s.assistant_items({"type": "function_call", "call_id": "call-1", "name": "f", "arguments": "{}"})
    s.tool_started("call-1")
    assert s.state.started_calls == frozenset({"call-1"})


# ------------------------------------------------------------------ 2/9. follow_forks


def test_restore_follow_forks_opens_the_deepest_newest_descendant(s3log_log: s3log.Log) -> None:
    log = s3log_log
    root = AgentSession.create(log, labels={"team": "a"})
    _turn(root, "root")
    f1 = root.fork()
    _turn(f1, "f1")
    g = root.fork()  # newer than f1, but shallower than what follows
    _turn(g, "g")
    f2 = f1.fork()
    _turn(f2, "f2")
    f3 = f1.fork()  # as deep as f2, newer
    _turn(f3, "f3")
    elsewhere = f3.fork(labels={"team": "b"})  # deeper, but another scope
    _turn(elsewhere, "b")

    assert AgentSession.restore(log, root.session_id).session_id == root.session_id
    assert AgentSession.restore(log, root.session_id, follow_forks=True).session_id == elsewhere.session_id
    scoped = AgentSession.restore(log, root.session_id, follow_forks=True, labels={"team": "a"})
    assert scoped.session_id == f3.session_id
    assert [h["content"] for h in scoped.state.history][-2:] == ["f3", "re: f3"]
    assert AgentSession.restore(log, g.session_id, follow_forks=True).session_id == g.session_id
    with pytest.raises(SessionScopeError):
        AgentSession.restore(log, root.session_id, follow_forks=True, labels={"team": "b"})


def test_follow_forks_follows_automatic_forks_and_repairs_the_leaf(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log)
    _turn(s, "first")
    loser = AgentSession.restore(log, s.session_id)
    _turn(AgentSession.restore(log, s.session_id), "winner")
    loser.user_input("loser, then crash")
    loser.flush()  # conflict: forks, then the worker dies mid-turn
    assert loser.session_id != s.session_id
    r = AgentSession.restore(later(log), s.session_id, follow_forks=True)  # after its lease expired
    assert r.session_id == loser.session_id
    assert r.state.last_run_interrupted and not r.state.turn_open


def test_an_unknown_option_is_refused_before_a_restore_repairs(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log)
    s.user_input("crashed mid-turn")
    s.flush()
    version = log.head(s.session_id).version
    with pytest.raises(s3log.agent.AgentArgumentError, match="max_buffer_entrys"):
        AgentSession.restore(later(log), s.session_id, max_buffer_entrys=3)  # past the lease: would repair
    assert log.head(s.session_id).version == version
