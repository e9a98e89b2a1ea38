"""Commits whose outcome is unknown: their entries stay uncertain, and are acknowledged once.

A commit refused definitively stores nothing and leaves its entries pending; one whose
head PUT ended undecided leaves them uncertain; the next commit never takes another
writer's equal entries for its own (decision 0025).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log._protocol import decide
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import SessionExists, StoreError
from s3log.testing.faults import FaultyStore
from tests.delete_hooks import Clock
from tests.tombstones import tombstone_idle


def _fast(attempts: int = 2) -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=attempts, initial=0.0001, max_backoff=0.0002, max_time=1.0))


@pytest.mark.parametrize(("reply", "applied"), [
    (decide.Reply.PRECONDITION, False),
    (decide.Reply.CONFLICT, False),
    (decide.Reply.NOT_FOUND, False),
    (decide.Reply.UNKNOWN, True),
    (decide.Reply.FATAL, True),
])
def test_which_replies_say_a_put_was_not_applied(reply: decide.Reply, applied: bool) -> None:
    assert decide.may_have_applied(reply) is applied


def test_entries_refused_by_session_exists_stay_pending() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log_a, log_b = s3log.AsyncLog(store), s3log.AsyncLog(store)
        sid = log_a.config.env.new_id()
        w_a = await log_a.create(sid, lazy=True)
        w_b = await log_b.create(sid, lazy=True)
        await w_b.append_durable("pop", {"item": 1}, ts=1_000)
        t = w_a.submit("pop", {"item": 1}, ts=1_000)
        with pytest.raises(SessionExists):
            await w_a.wait(t)  # definite: A stored nothing
        assert w_a.status(t) == "pending"
        # Waiting again must not return B's equal entry as A's (nor adopt B's session).
        with pytest.raises(SessionExists):
            await w_a.wait(t)
        assert w_a.withdraw(t)

    asyncio.run(main())


def lost_head_reply(armed: Callable[[], bool]) -> Any:
    """A fault plan: while ``armed()``, a head If-Match PUT lands with its reply lost and
    re-reading the head fails (503): the commit ends with its outcome unknown."""

    def plan(method: str, key: str) -> Any:
        if not armed():
            return None
        if method == "put_if_match":
            return "timeout-landed"
        return "503" if method == "get" and key.endswith("/head") else None

    return plan


def test_a_store_error_on_the_head_put_still_leaves_the_entries_uncertain() -> None:
    # A lost reply, and the re-read fails too: the PUT may have been applied.
    inner = s3log.MemoryStore()
    state = {"on": False}
    plan = lost_head_reply(lambda: state["on"])

    log = s3log.Log(FaultyStore(inner, plan), config=_fast(1))
    w = log.create()
    w.append("k", 0)
    w.commit()
    t = w.submit("k", 1)
    state["on"] = True
    with pytest.raises(StoreError):
        w.commit()
    assert w.status(t) == "uncertain"
    assert not w.withdraw(t)
    state["on"] = False
    assert w.wait(t).data == 1
    assert [e.data for e in s3log.Log(inner).read(w.session_id).entries] == [0, 1]


T0 = 1_800_000_000_000

DAY = 86_400_000


def test_entry_queued_after_an_undecided_commit_is_not_taken_from_another_writer() -> None:
    inner = s3log.MemoryStore()
    on = {"v": False}
    plan = lost_head_reply(lambda: on["v"])

    w_a = s3log.Log(FaultyStore(inner, plan), config=_fast(1)).create()
    sid = w_a.session_id
    w_a.append("k", "a0")
    w_a.commit()
    t1 = w_a.submit("pop", {"item": 1}, ts=1_000)
    on["v"] = True
    with pytest.raises(StoreError):
        w_a.commit()  # item 1 landed; A does not know
    on["v"] = False

    w_b = s3log.Log(inner).open(sid)  # B sees item 1 and pops item 2
    b_entry = w_b.append_durable("pop", {"item": 2}, ts=2_000)

    t2 = w_a.submit("pop", {"item": 2}, ts=2_000)  # A pops item 2 too, never sent before
    w_a.wait(t1)
    a_entry = w_a.wait(t2)
    assert a_entry.hash != b_entry.hash or w_a.session_id != sid, \
        "item 2 acknowledged to both writers"


def _cfg_seeded(clock: Clock, seed: int) -> LogConfig:
    return LogConfig(env=Env.deterministic(seed, clock), activity_index=False,
                     retry=RetryPolicy(attempts=3, initial=0.0001, max_backoff=0.0002, max_time=1.0))


def _expired_by(sid: str) -> tuple[Clock, s3log.MemoryStore]:
    clock, store = Clock(T0), s3log.MemoryStore()
    log = s3log.Log(store, config=_cfg_seeded(clock, 1))
    w = log.create(sid)
    w.append("k", "old")
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [sid]
    return clock, store


def _racing(
    store: s3log.MemoryStore, sid: str, b_does: Any, methods: tuple[str, ...] = ("put_if_match",)
) -> FaultyStore:
    box = {"armed": True}

    def plan(method: str, key: str) -> Any:
        # A's If-Match PUT replacing the tombstone (the takeover) is the one intercepted.
        if box["armed"] and method in methods and key.endswith(f"/{sid}/head"):
            box["armed"] = False
            b_does()  # B takes the id over just before A's PUT ...
            return "timeout-lost"  # ... which never reaches the store; A sees a timeout
        return None

    return FaultyStore(store, plan)


def _lazy_create_of(log: s3log.Log, sid: str, acked: list[s3log.Entry]) -> Callable[[], None]:
    """Another writer's lazy create of ``sid`` holding one entry ("hello"); what it
    acknowledges goes to ``acked``."""
    def create() -> None:
        w = log.create(sid, lazy=True)
        w.append("msg", "hello")
        acked.extend(w.commit().acked)
    return create


def _assert_not_shared(a_acked: list[s3log.Entry], b_acked: list[s3log.Entry]) -> None:
    shared = {(e.seq, e.hash) for e in a_acked} & {(e.seq, e.hash) for e in b_acked}
    assert not shared, f"one stored entry acknowledged to both writers: {shared}"


@pytest.mark.parametrize(("sid", "batch"), [
    ("thread-1", [("msg", "hello"), ("msg", "two")]),  # another creator's prefix: not adopted
    ("thread-2", [("msg", "hello")]),  # another creator's equal batch: not acknowledged
])
def test_append_latest_takeover_undecided_does_not_ack_another_creators_equal_batch(
    sid: str, batch: list[tuple[str, Any]]
) -> None:
    clock, store = _expired_by(sid)
    b_acked: list[s3log.Entry] = []
    log_b = s3log.Log(store, config=_cfg_seeded(clock, 2))
    faulty = _racing(store, sid, lambda: b_acked.extend(
        log_b.append_latest(sid, [("msg", "hello")], create_meta={}).acked))
    log_a = s3log.Log(faulty, config=_cfg_seeded(clock, 3))
    a = log_a.append_latest(sid, batch, create_meta={})
    _assert_not_shared(a.acked, b_acked)


def test_lazy_create_over_a_tombstone_undecided_does_not_ack_another_creators_equal_batch() -> None:
    sid = "thread-3"
    clock, store = _expired_by(sid)
    b_acked: list[s3log.Entry] = []
    log_b = s3log.Log(store, config=_cfg_seeded(clock, 2))
    faulty = _racing(store, sid, _lazy_create_of(log_b, sid, b_acked))
    # A's first PUT is its create-only one (it meets the tombstone, 412); the If-Match
    # takeover PUT after it is the one the plan intercepts.
    log_a = s3log.Log(faulty, config=_cfg_seeded(clock, 3))
    wa = log_a.create(sid, lazy=True)
    wa.append("msg", "hello")
    with pytest.raises(SessionExists):  # our takeover never landed: the id is B's now
        wa.commit()
    assert b_acked


def test_lazy_create_undecided_does_not_ack_another_creators_equal_batch() -> None:
    """The same without a tombstone (a plain lazy create)."""
    clock, store = Clock(T0), s3log.MemoryStore()
    sid = "thread-4"
    b_acked: list[s3log.Entry] = []
    log_b = s3log.Log(store, config=_cfg_seeded(clock, 2))
    faulty = _racing(store, sid, _lazy_create_of(log_b, sid, b_acked), methods=("put_if_absent",))
    wa = s3log.Log(faulty, config=_cfg_seeded(clock, 3)).create(sid, lazy=True)
    wa.append("msg", "hello")
    with pytest.raises(SessionExists):  # our create never landed: the id is B's
        wa.commit()
    assert b_acked
