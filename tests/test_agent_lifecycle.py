"""Agent sessions' life: never stored while empty, drained when the log closes, restored within their
scope, listed by labels.
"""

from __future__ import annotations

from typing import Any

import pytest

import s3log
import s3log.agent
from s3log.agent import (
    AgentSession,
    SessionScopeError,
)
from tests.helpers import agent_turn, kinds
from tests.test_agent import later


def test_a_session_holding_only_its_start_is_never_stored(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, system_prompt="sys", session_id="agent-x")
    s.flush()
    s.close()
    with AgentSession.create(log, session_id="agent-x"):
        pass
    assert log.list_session_ids() == []
    again = AgentSession.create(log, system_prompt="sys", session_id="agent-x")
    agent_turn(again, "hi")  # the id is free: no SessionExists
    assert log.list_session_ids() == ["agent-x"]
    assert kinds(log, "agent-x")[0] == "agent.session_start"


def test_forking_a_session_holding_only_its_start_stores_it(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, system_prompt="sys")
    f = s.fork()
    assert f.state.system_prompt == "sys"
    assert kinds(log, s.session_id) == ["agent.session_start"]


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
    assert kinds(other, a.session_id) == ["agent.session_start", "agent.user_input", "agent.assistant_items"]
    assert kinds(other, b.session_id) == ["agent.session_start", "agent.user_input", "agent.assistant_items"]
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
    assert kinds(s3log.Log(log.store), sid) == ["agent.session_start", "agent.user_input"]


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
    assert kinds(s3log.Log(s3log_store), s.session_id) == ["agent.session_start", "agent.user_input"]


def test_a_failed_drain_names_every_failed_session_and_keeps_the_records() -> None:
    from s3log.testing.faults import FaultyStore

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
    agent_turn(here, "x")
    there = AgentSession.create(log, labels={"cwd": "/other"})
    agent_turn(there, "y")
    w = log.create(meta={"labels": {"cwd": "/w"}})  # not an agent session
    w.append("k", 1)
    w.commit()
    assert [r.session_id for r in AgentSession.list(log, labels={"cwd": "/w"})] == [here.session_id]
    assert {r.session_id for r in AgentSession.list(log)} == {here.session_id, there.session_id}
    assert AgentSession.list(log, labels={"cwd": "/w", "tenant": "t2"}) == []
    with pytest.raises(ValueError, match="labels must be a mapping"):
        AgentSession.list(log, labels=["cwd"])  # type: ignore[arg-type]
