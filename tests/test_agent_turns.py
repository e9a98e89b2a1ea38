"""Agent turns: record_turn is atomic, an abandoned or cancelled turn releases its lease, renewal
after a takeover raises.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import s3log
import s3log.errors
from s3log.agent import AgentSession, AsyncAgentSession, SessionBusy
from s3log.testing.faults import FaultyStore
from tests.helpers import GatedHeads, kinds

logging.getLogger("s3log").setLevel(logging.ERROR)  # forks and repairs are expected here


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


async def test_turn_cancelled_during_its_commit_releases_the_lease() -> None:
    store = GatedHeads()
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
    assert kinds(log, sid).count("agent.tool_started") == 1  # stored once


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
    assert kinds(log, a.session_id)[-1] == "agent.hook_items"


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


def test_busy_is_still_raised_for_a_live_lease() -> None:
    """A live lease still refuses another owner (a control: releasing abandoned leases changes no other decision)."""
    log = s3log.Log(s3log.MemoryStore())
    a = AgentSession.create(log, owner="a", lease_ttl=60)
    a.user_input("hi")
    with pytest.raises(SessionBusy):
        AgentSession.restore(log, a.session_id, owner="b")
