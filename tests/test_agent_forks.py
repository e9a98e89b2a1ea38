"""Agent sessions' forks: fork points, follow_forks over expired and automatic forks, head reads counted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import s3log
import s3log.agent
import s3log.errors
from s3log.agent import (
    AgentSession,
    AsyncAgentSession,
    SessionScopeError,
    collect_state,
)
from s3log.env import Env
from tests.helpers import agent_turn, kinds
from tests.test_agent import later
from tests.tombstones import tombstone_idle


def _comparable(state: s3log.agent.SessionState) -> s3log.agent.SessionState:
    # A fork's head hash is its own entry's, and it counts what it inherited: the rest must match.
    return replace(state, head_hash=None, seed_len=0)


def test_fork_at_a_user_message_is_the_prefix_with_its_turn_open(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, system_prompt="sys")
    agent_turn(s, "a")
    s.user_input("b")
    s.flush()
    point = log.head(s.session_id)
    s.assistant_items([{"role": "assistant", "content": "a bad answer"}])
    s.turn_end()

    f = AgentSession.fork_at(log, s.session_id, at_hash=point.hash)
    prefix = [e for e in log.read(s.session_id).entries if e.seq <= point.seq]
    assert _comparable(f.state) == _comparable(collect_state(prefix))
    assert f.state.turn_open and f.state.last_outcome is None and f.state.turn_count == 1
    assert kinds(log, f.session_id) == ["s3log.fork"]  # nothing synthetic
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
    assert kinds(log, f.session_id) == ["s3log.fork"]


def test_restore_follow_forks_opens_the_deepest_newest_descendant(s3log_log: s3log.Log) -> None:
    log = s3log_log
    root = AgentSession.create(log, labels={"team": "a"})
    agent_turn(root, "root")
    f1 = root.fork()
    agent_turn(f1, "f1")
    g = root.fork()  # newer than f1, but shallower than what follows
    agent_turn(g, "g")
    f2 = f1.fork()
    agent_turn(f2, "f2")
    f3 = f1.fork()  # as deep as f2, newer
    agent_turn(f3, "f3")
    elsewhere = f3.fork(labels={"team": "b"})  # deeper, but another scope
    agent_turn(elsewhere, "b")

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
    agent_turn(s, "first")
    loser = AgentSession.restore(log, s.session_id)
    agent_turn(AgentSession.restore(log, s.session_id), "winner")
    loser.user_input("loser, then crash")
    loser.flush()  # conflict: forks, then the worker dies mid-turn
    assert loser.session_id != s.session_id
    r = AgentSession.restore(later(log), s.session_id, follow_forks=True)  # after its lease expired
    assert r.session_id == loser.session_id
    assert r.state.last_run_interrupted and not r.state.turn_open


DAY = 86_400_000


def _clocked() -> tuple[dict[str, int], s3log.Log]:
    now = {"ms": 1_800_000_000_000}
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(env=Env.deterministic(3, lambda: now["ms"])))
    return now, log


def test_follow_forks_does_not_choose_an_expired_fork() -> None:
    now, log = _clocked()
    main = AgentSession.create(log, owner="m")
    main.user_input("one")
    main.turn_end()
    sid = main.session_id
    branch = main.fork()
    branch.user_input("abandoned idea")
    branch.turn_end()
    now["ms"] += 40 * DAY
    with AgentSession.restore(log, sid, owner="m2") as m:
        m.user_input("two")
        m.turn_end()
    now["ms"] += DAY
    assert tombstone_idle(log, idle_for=30 * DAY).expired == [branch.session_id]
    assert AgentSession.restore(log, sid, follow_forks=True).session_id == sid


def test_follow_forks_walks_into_the_live_forks_of_an_expired_fork() -> None:
    now, log = _clocked()
    main = AgentSession.create(log, owner="m")
    main.user_input("one")
    main.turn_end()
    branch = main.fork()
    branch.user_input("two")
    branch.turn_end()
    leaf = branch.fork()
    leaf.user_input("three")
    leaf.turn_end()
    now["ms"] += 40 * DAY
    for sid in (main.session_id, leaf.session_id):  # active again: only the branch idles
        with AgentSession.restore(log, sid) as s:
            s.user_input("again")
            s.turn_end()
    now["ms"] += DAY
    assert tombstone_idle(log, idle_for=30 * DAY).expired == [branch.session_id]
    r = AgentSession.restore(log, main.session_id, follow_forks=True)
    assert r.session_id == leaf.session_id
    assert [h["content"] for h in r.state.history if h.get("role") == "user"] == ["one", "two", "three", "again"]


def _family(log: s3log.Log) -> tuple[str, str]:
    """A session with three forks, two levels deep: (root, the newest deepest leaf)."""
    main = AgentSession.create(log)
    main.user_input("one")
    main.turn_end()
    for branch in ("a", "b"):
        fork = main.fork()
        fork.user_input(branch)
        fork.turn_end()
    leaf = fork.fork()
    leaf.user_input("leaf")
    leaf.turn_end()
    return main.session_id, leaf.session_id


def test_follow_forks_reads_each_forks_head_once() -> None:
    # The walk used the heads Log.children had read to find the forks with one, then
    # read them all again: two GETs per fork.
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    root, leaf = _family(log)
    store.requests.reset()
    assert AgentSession.restore(log, root, follow_forks=True).session_id == leaf
    # GETs: the root's head, each of the 3 forks' heads once, the leaf's head to open
    # it (its entries are in its tail); LISTs: the fork markers of each of 4 sessions.
    assert store.requests.snapshot() == {"GET": 1 + 3 + 1, "PUT": 0, "LIST": 4, "DELETE": 0}


async def test_async_follow_forks_reads_each_forks_head_once() -> None:
    store = s3log.MemoryStore()
    root, leaf = _family(s3log.Log(store))
    alog = s3log.AsyncLog(s3log.AsyncMemoryStore(store))
    store.requests.reset()
    assert (await AsyncAgentSession.restore(alog, root, follow_forks=True)).session_id == leaf
    assert store.requests.snapshot() == {"GET": 1 + 3 + 1, "PUT": 0, "LIST": 4, "DELETE": 0}


def test_fork_at_a_negative_seq_is_an_unknown_point_and_stores_nothing() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log)
    s.user_input("a")
    s.turn_end()
    with pytest.raises(s3log.EntryNotFound):
        AgentSession.fork_at(log, s.session_id, at_seq=-1)
    assert log.list_session_ids() == [s.session_id]


def test_a_fork_with_nothing_after_its_fork_entry_has_its_head_hash() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log)
    s.user_input("a")
    s.turn_end()
    f = s.fork()
    stored = log.head(f.session_id).hash.hex()
    assert f.state.head_hash == f.committed_state.head_hash == stored
    assert AgentSession.restore(log, f.session_id).state.head_hash == stored
    at = AgentSession.fork_at(log, s.session_id, at_seq=1)
    assert at.state.head_hash == log.head(at.session_id).hash.hex()
