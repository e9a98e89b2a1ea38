"""Agent sessions: regressions of the revB review (record_turn atomicity, expired forks,
abandoned leases, options checked up front, renewal conflicts, a fork's head hash)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import s3log
import s3log.errors
from s3log.agent import AgentArgumentError, AgentSession, AsyncAgentSession, SessionBusy
from s3log.env import Env
from s3log.faults import FaultyStore
from tests.tombstones import tombstone_idle

DAY = 86_400_000


def _kinds(log: s3log.Log, sid: str) -> list[str]:
    return [e.kind for e in log.read(sid).entries]


def _clocked() -> tuple[dict[str, int], s3log.Log]:
    now = {"ms": 1_800_000_000_000}
    log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(env=Env.deterministic(3, lambda: now["ms"])))
    return now, log


# 1 ------------------------------------------------- record_turn checks the whole turn first


@pytest.mark.parametrize("kw", [
    {"new_items": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": object()}]},
    {"new_items": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\ud800"}]},
    {"new_items": [{"role": "user", "content": "hi"}], "outcome": "finished", "message": object()},
])
def test_record_turn_with_a_bad_record_stores_nothing_of_the_turn(kw: dict[str, Any]) -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log, owner="w")
    s.user_input("one")
    s.turn_end()
    before = log.head(s.session_id)
    with pytest.raises(s3log.InvalidEntryError):
        s.record_turn(kw.pop("new_items"), **kw)
    head = log.head(s.session_id)
    assert (head.version, head.lease) == (before.version, None)  # the user message was not committed
    assert s.buffered == 0 and not s.state.turn_open
    s.record_turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], outcome="finished")
    assert [h["content"] for h in AgentSession.restore(log, s.session_id).state.history] == ["one", "hi", "hello"]


async def test_async_record_turn_with_a_bad_item_stores_nothing() -> None:
    log = s3log.AsyncLog(s3log.AsyncMemoryStore())
    s = await AsyncAgentSession.create(log, owner="w")
    await s.user_input("one")
    await s.turn_end()
    before = (await log.head(s.session_id)).version
    with pytest.raises(s3log.InvalidEntryError):
        await s.record_turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": object()}])
    assert (await log.head(s.session_id)).version == before


# 2 ------------------------------------------------- follow_forks and expired forks


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
    assert log.expire(idle_for=30 * DAY).expired == [branch.session_id]
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


# 3 ------------------------------------------------- an abandoned turn releases its lease


class _GatedHeads(s3log.AsyncMemoryStore):
    """Head PUTs wait for ``gate`` while it is cleared; ``entered`` says one is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def put_if_match(self, key: str, body: bytes, etag: str) -> Any:
        self.entered.set()
        await self.gate.wait()
        return await super().put_if_match(key, body, etag)


async def test_turn_cancelled_during_its_commit_releases_the_lease() -> None:
    store = _GatedHeads()
    log = s3log.AsyncLog(store)
    s = await AsyncAgentSession.create(log, owner="first")
    await s.user_input("one")
    await s.turn_end()
    sid = s.session_id

    async def invocation() -> None:
        async with await AsyncAgentSession.restore(log, sid, owner="worker") as w:
            await w.user_input("two")  # the turn-open commit: cancelled while its head PUT waits
            await w.turn_end()

    store.gate.clear()
    store.entered.clear()
    task = asyncio.create_task(invocation())
    await store.entered.wait()
    task.cancel()
    for _ in range(5):  # let the cancellation reach the with block (no time is waited for)
        await asyncio.sleep(0)
    store.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    head = await log.head(sid)
    assert head.lease is None
    retry = await AsyncAgentSession.restore(log, sid, owner="retry")  # repaired at once, not SessionBusy
    assert retry.state.last_run_interrupted


def test_turn_abandoned_after_an_undecided_commit_releases_the_lease() -> None:
    mode: dict[str, str | None] = {"m": None}

    def plan(method: str, key: str) -> str | None:
        if mode["m"] == "land" and method == "put_if_match" and key.endswith("/head"):
            mode["m"] = "outage"
            return "timeout-landed"  # the head PUT lands, its reply is lost
        return "503" if mode["m"] == "outage" else None

    store = FaultyStore(s3log.MemoryStore(), plan)
    log = s3log.Log(store, config=s3log.LogConfig(retry=s3log.RetryPolicy(attempts=2, initial=0.0, max_backoff=0.0)))
    s = AgentSession.create(log, owner="first")
    s.user_input("one")
    s.turn_end()
    sid = s.session_id
    w = AgentSession.restore(log, sid, owner="worker")
    with pytest.raises(s3log.errors.TransientStoreError), w:
        w.user_input("two")
        w.assistant_items({"type": "function_call", "call_id": "c", "name": "rm", "arguments": "{}"})
        mode["m"] = "land"
        try:
            w.tool_started("c")  # its commit lands, the reply is lost, then 503s: raises
        finally:
            mode["m"] = None  # the store is back when the with block is left
    assert log.head(sid).lease is None
    retry = AgentSession.restore(log, sid, owner="retry")  # repaired at once, not SessionBusy
    assert retry.state.last_run_interrupted
    assert _kinds(log, sid).count("agent.tool_started") == 1  # stored once


# 4 ------------------------------------------------- options and arguments checked up front


BAD_OPTIONS = [
    {"max_delay": None}, {"max_delay": float("nan")}, {"max_delay": -1}, {"max_delay": True},
    {"max_buffer_entries": "64"}, {"max_buffer_entries": -1}, {"max_buffer_entries": True},
    {"max_buffer_bytes": None}, {"max_buffer_bytes": 1.5},
    {"on_fork": "not callable"},
    {"lease_ttl": 0.0004}, {"lease_ttl": float("inf")}, {"lease_ttl": float("nan")}, {"lease_ttl": 1e17},
]


@pytest.mark.parametrize("option", BAD_OPTIONS)
def test_a_bad_option_is_refused_before_anything_is_queued_or_written(option: dict[str, Any]) -> None:
    log = s3log.Log(s3log.MemoryStore())
    with pytest.raises(AgentArgumentError):
        AgentSession.create(log, **option)
    busy = AgentSession.create(log, owner="a")
    busy.user_input("hi")
    before = log.head(busy.session_id).version
    with pytest.raises(AgentArgumentError):
        AgentSession.restore(log, busy.session_id, force=True, **option)  # would repair
    with pytest.raises(AgentArgumentError):
        busy.fork(**option)
    with pytest.raises(AgentArgumentError):
        AgentSession.fork_at(log, busy.session_id, at_seq=0, **option)
    assert log.head(busy.session_id).version == before
    assert log.list_session_ids() == [busy.session_id]


@pytest.mark.parametrize("option", [{"max_delay": None}, {"on_fork": 1}, {"lease_ttl": float("inf")}])
async def test_async_bad_option_is_refused(option: dict[str, Any]) -> None:
    log = s3log.AsyncLog(s3log.AsyncMemoryStore())
    with pytest.raises(AgentArgumentError):
        await AsyncAgentSession.create(log, **option)


def test_good_edge_options_are_accepted() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log, max_delay=float("inf"), max_buffer_entries=1, max_buffer_bytes=0,
                            lease_ttl=0.001, on_fork=lambda session, info: None)
    s.user_input("hi")
    s.turn_end()
    assert _kinds(log, s.session_id)[-1] == "agent.turn_end"


@pytest.mark.parametrize("wait", [float("nan"), float("inf"), -1, "1", True])
def test_restore_refuses_a_bad_wait(wait: Any) -> None:
    log = s3log.Log(s3log.MemoryStore())
    busy = AgentSession.create(log, owner="x")
    busy.user_input("q")
    with pytest.raises(AgentArgumentError):
        AgentSession.restore(log, busy.session_id, wait=wait)


@pytest.mark.parametrize("bad", ["3", None, 3.9, -4, True])
def test_cache_locked_refuses_a_bad_prefix_len(bad: Any) -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log)
    s.user_input("x")
    with pytest.raises(s3log.InvalidEntryError, match="prefix_len"):
        s.cache_locked(bad)
    assert s.buffered == 0
    s.cache_locked(1)
    assert s.state.locked_prefix_len == 1


def test_fork_at_a_negative_seq_is_an_unknown_point_and_stores_nothing() -> None:
    log = s3log.Log(s3log.MemoryStore())
    s = AgentSession.create(log)
    s.user_input("a")
    s.turn_end()
    with pytest.raises(s3log.EntryNotFound):
        AgentSession.fork_at(log, s.session_id, at_seq=-1)
    assert log.list_session_ids() == [s.session_id]


@pytest.mark.parametrize(("kw", "error"), [
    ({"config": 5}, s3log.InvalidEntryError),
    ({"meta": {"labels": 5}}, AgentArgumentError),
    ({"meta": 5}, AgentArgumentError),
    ({"labels": 5}, AgentArgumentError),
    ({"delegation_depth": "x"}, AgentArgumentError),
    ({"delegation_depth": -1}, AgentArgumentError),
    ({"parent_session": 5}, AgentArgumentError),
])
def test_create_refuses_a_malformed_config_or_header(kw: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        AgentSession.create(s3log.Log(s3log.MemoryStore()), **kw)


# 5 ------------------------------------------------- renew_lease after another worker wrote


def test_renew_lease_with_buffered_records_raises_after_a_takeover() -> None:
    log = s3log.Log(s3log.MemoryStore())
    a = AgentSession.create(log, owner="a")
    a.user_input("q")
    a.assistant_items({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"})
    a.tool_started("c")
    sid = a.session_id
    AgentSession.restore(log, sid, owner="b", force=True)  # another worker repaired the turn
    a.hook_items({"role": "system", "content": "progress note"})
    with pytest.raises(s3log.ConflictError):
        a.renew_lease()
    assert a.session_id == sid and a.buffered == 1  # nothing forked silently, nothing lost
    a.flush()  # the rest of the turn goes to a fork, as any lost race does
    assert a.session_id != sid
    assert a.state.history[-1]["content"] == "progress note"
    assert _kinds(log, a.session_id)[-1] == "agent.hook_items"


class _WatchedHeads(s3log.MemoryStore):
    """Calls ``watch`` at each head PUT, while its commit is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.watch: Any = lambda: None

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.watch()
        return super().put_if_match(key, body, etag)


def test_renew_lease_leaves_the_writers_conflict_mode_alone() -> None:
    # The renewal's "raise" was set on the session's writer for the renewal's span (and
    # restored after), so another commit on that writer meanwhile (flush_all, a close
    # hook) raised instead of forking. It is this one commit's mode now.
    store = _WatchedHeads()
    log = s3log.Log(store)
    a = AgentSession.create(log, owner="a")
    a.user_input("q")
    a.hook_items({"role": "system", "content": "progress note"})
    writer = a._writer  # (private: the writer's mode while the renewal is in flight)
    seen: list[str] = []
    store.watch = lambda: seen.append(writer.on_conflict)
    a.renew_lease()
    assert seen == ["fork"] and writer.on_conflict == "fork" and a.buffered == 0


# 6 ------------------------------------------------- a fork's head hash


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


def test_busy_is_still_raised_for_a_live_lease() -> None:
    """The checks above change no decision about leases (a control)."""
    log = s3log.Log(s3log.MemoryStore())
    a = AgentSession.create(log, owner="a", lease_ttl=60)
    a.user_input("hi")
    with pytest.raises(SessionBusy):
        AgentSession.restore(log, a.session_id, owner="b")


logging.getLogger("s3log").setLevel(logging.ERROR)  # forks and repairs are expected here
