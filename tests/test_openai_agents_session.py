"""The OpenAI Agents SDK session (S3LogSession): a failed or cancelled call's entry is never carried by
the next call, the session survives a change of event loop, session ids map one to one, bad
items are refused, and an expired id starts afresh.
"""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.integrations import IntegrationError
from s3log.integrations.openai_agents import S3LogSession, store_id
from s3log.testing.faults import AsyncFaultyStore, Fault, FaultyStore
from tests.delete_hooks import Clock

# Two attempts per request, no real waiting: a refused write fails fast.
FAST = LogConfig(retry=RetryPolicy(attempts=2, initial=0.001, max_backoff=0.001))


def _contents(items: list[Any]) -> list[str]:
    return [i["content"] for i in items]


class Writes:
    """A fault plan refusing every write (503, nothing done) while ``failing``."""

    def __init__(self) -> None:
        self.failing = False

    def __call__(self, method: str, key: str) -> Fault | None:
        return "503" if self.failing and method in ("put_if_match", "put_if_absent") else None


def _faulty_log(kind: str, plan: Writes) -> s3log.Log | s3log.AsyncLog:
    if kind == "Log":
        return s3log.Log(FaultyStore(s3log.MemoryStore(), plan), config=FAST)
    return s3log.AsyncLog(AsyncFaultyStore(s3log.AsyncMemoryStore(), plan), config=FAST)


class GatedStore(s3log.AsyncMemoryStore):
    """Holds the next head PUT at a gate (``reached`` is set when one waits there) and
    yields once on every write, so concurrent calls meet."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.reached: asyncio.Event | None = None

    async def _hold(self, key: str) -> None:
        await asyncio.sleep(0)
        gate = self.gate
        if gate is not None and key.endswith("/head"):
            self.gate = None
            assert self.reached is not None
            self.reached.set()
            await gate.wait()

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        await self._hold(key)
        return await super().put_if_match(key, body, etag)

    async def put_if_absent(self, key: str, body: bytes) -> str:
        await self._hold(key)
        return await super().put_if_absent(key, body)

    def arm(self) -> tuple[asyncio.Event, asyncio.Event]:
        self.gate, self.reached = asyncio.Event(), asyncio.Event()
        return self.gate, self.reached


async def _yield(times: int = 50) -> None:
    """Let every ready task run as far as it can (no clock involved)."""
    for _ in range(times):
        await asyncio.sleep(0)


@pytest.mark.parametrize("kind", ["Log", "AsyncLog"])
def test_a_failed_pop_is_not_performed_by_the_next_call(kind: str) -> None:
    async def main() -> None:
        plan = Writes()
        s = S3LogSession("conv", _faulty_log(kind, plan))
        await s.add_items([{"content": "A"}, {"content": "B"}])
        plan.failing = True
        with pytest.raises(s3log.StoreError):
            await s.pop_item()
        plan.failing = False
        assert _contents(await s.get_items()) == ["A", "B"]
        await s.add_items([{"content": "C"}])
        # Before the fix the failed pop rode along with this commit and removed B.
        assert _contents(await s.get_items()) == ["A", "B", "C"]

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["Log", "AsyncLog"])
def test_a_failed_add_items_retried_is_stored_once(kind: str) -> None:
    async def main() -> None:
        plan = Writes()
        log = _faulty_log(kind, plan)
        s = S3LogSession("conv", log)
        await s.add_items([{"content": "A"}])
        plan.failing = True
        with pytest.raises(s3log.StoreError):
            await s.add_items([{"content": "B"}])
        plan.failing = False
        assert _contents(await s.get_items()) == ["A"]
        await s.add_items([{"content": "B"}])  # the caller's natural retry
        assert _contents(await S3LogSession("conv", log).get_items()) == ["A", "B"]

    asyncio.run(main())


def test_a_pop_after_a_cancelled_add_returns_the_item_it_removes() -> None:
    async def main() -> None:
        store = GatedStore()
        log = s3log.AsyncLog(store)
        s = S3LogSession("conv", log)
        await s.add_items([{"content": "X"}])
        gate, reached = store.arm()
        add = asyncio.create_task(s.add_items([{"content": "Y"}]))
        await reached.wait()  # Y's head PUT is in flight
        add.cancel()
        with pytest.raises(asyncio.CancelledError):
            await add
        pop = asyncio.create_task(s.pop_item())
        await _yield()
        gate.set()  # the commit of Y goes on and lands
        popped = await pop
        left = _contents(await S3LogSession("conv", log).get_items())
        # Before the fix: pop_item returned X and removed Y.
        assert popped is not None and sorted([*left, popped["content"]]) == ["X", "Y"]
        assert popped["content"] == "Y" and left == ["X"]

    asyncio.run(main())


def test_after_a_cancelled_add_get_items_tells_whether_it_landed() -> None:
    async def main() -> None:
        store = GatedStore()
        s = S3LogSession("conv", s3log.AsyncLog(store))
        await s.add_items([{"content": "X"}])
        gate, reached = store.arm()
        add = asyncio.create_task(s.add_items([{"content": "Y"}]))
        await reached.wait()
        add.cancel()
        with pytest.raises(asyncio.CancelledError):
            await add
        read = asyncio.create_task(s.get_items())
        await _yield()
        gate.set()
        # The read waits for the commit the cancelled call left in flight: a caller
        # checking before repeating the call sees Y (and does not store it twice).
        assert _contents(await read) == ["X", "Y"]

    asyncio.run(main())


def test_contended_calls_on_a_second_event_loop() -> None:
    store = GatedStore()
    s = S3LogSession("conv", s3log.AsyncLog(store))

    async def turn(i: int) -> None:
        await asyncio.gather(s.add_items([{"content": f"{i}a"}]), s.add_items([{"content": f"{i}b"}]))

    for i in range(2):
        asyncio.run(turn(i))  # the second raised RuntimeError: lock bound to the first loop
    assert sorted(_contents(asyncio.run(s.get_items()))) == ["0a", "0b", "1a", "1b"]


def test_a_call_held_on_a_live_loop_refuses_another_loop() -> None:
    store = GatedStore()
    s = S3LogSession("conv", s3log.AsyncLog(store))
    first = asyncio.new_event_loop()
    try:
        async def start() -> tuple[asyncio.Task[None], asyncio.Event]:
            gate, reached = store.arm()
            task = asyncio.create_task(s.add_items([{"content": "A"}]))
            await reached.wait()
            return task, gate

        task, gate = first.run_until_complete(start())  # the first loop stops, A in flight

        async def second() -> None:
            call = asyncio.create_task(s.add_items([{"content": "B"}]))
            await _yield()
            # Before the fix the call waited for ever on the first loop's lock.
            assert call.done(), "the call waits for a lock held on another loop"
            with pytest.raises(s3log.WriterBusyError):
                await call

        asyncio.run(second())
        gate.set()
        first.run_until_complete(task)
    finally:
        first.close()
    asyncio.run(s.add_items([{"content": "C"}]))
    assert _contents(asyncio.run(s.get_items())) == ["A", "C"]


def test_session_ids_map_one_to_one() -> None:
    async def main() -> None:
        log = s3log.AsyncLog(s3log.AsyncMemoryStore())
        victim = S3LogSession("alice@example.com", log)  # not a safe id: hashed, as before
        hashed = "oa-" + hashlib.sha256(b"alice@example.com").hexdigest()[:40]
        assert victim.sid == hashed
        await victim.add_items([{"content": "secret"}])
        assert _contents(await S3LogSession("alice@example.com", log).get_items()) == ["secret"]
        with pytest.raises(IntegrationError, match="session_id 'oa-"):
            S3LogSession(hashed, log)  # would read alice's conversation
        with pytest.raises(IntegrationError, match="session_id 'lg-"):
            S3LogSession("lg-" + "0" * 32 + "-" + "0" * 16, log)  # a LangGraph saver's session
        with pytest.raises(IntegrationError, match="session_id"):
            await victim.afork(session_id=hashed)
        assert store_id("conv") == "conv" and store_id("oa-chat") == "oa-chat"
        assert store_id("OA-" + "0" * 40) == "OA-" + "0" * 40  # not the hashed form

    asyncio.run(main())


@pytest.mark.parametrize("bad", ["\ud800", "conv\udc00", None, 42])
def test_bad_session_ids_raise_an_s3log_error(bad: Any) -> None:
    with pytest.raises(IntegrationError, match="session_id"):
        S3LogSession(bad, s3log.Log(s3log.MemoryStore()))
    base = S3LogSession("base", s3log.Log(s3log.MemoryStore()))
    asyncio.run(base.add_items([{"content": "a"}]))
    if bad:
        with pytest.raises(IntegrationError, match="session_id"):
            base.fork(session_id=bad)


@pytest.mark.parametrize("items", ["hello", b"hello", bytearray(b"hi"), {"role": "user", "content": "hi"}, None, 7])
def test_add_items_refuses_what_is_not_a_list_of_items(items: Any) -> None:
    store = s3log.MemoryStore()
    s = S3LogSession("conv", s3log.Log(store))
    asyncio.run(s.add_items([{"content": "before"}]))
    puts = store.requests["PUT"]
    with pytest.raises(IntegrationError, match="add_items takes a list"):
        asyncio.run(s.add_items(items))
    assert store.requests["PUT"] == puts  # nothing written
    assert _contents(asyncio.run(s.get_items())) == ["before"]
    asyncio.run(s.add_items(({"content": "after"},)))  # any other iterable of items
    assert _contents(asyncio.run(s.get_items())) == ["before", "after"]


T0 = 1_800_000_000_000


DAY = 86_400_000


def test_an_openai_session_on_an_expired_id_starts_afresh() -> None:
    pytest.importorskip("agents")
    from s3log.integrations.openai_agents import S3LogSession

    clock = Clock(T0)
    log = s3log.AsyncLog(s3log.AsyncMemoryStore(), config=LogConfig(env=Env.deterministic(1, clock)))

    async def main() -> None:
        first = S3LogSession("conv-1", log)
        await first.add_items([{"role": "user", "content": "hi"}])
        clock.t += 40 * DAY
        assert len((await log.expire(idle_for=timedelta(days=30))).expired) == 1
        again = S3LogSession("conv-1", log)
        assert await again.get_items() == []
        await asyncio.wait_for(again.add_items([{"role": "user", "content": "again"}]), 10)  # looped for ever
        assert await again.get_items() == [{"role": "user", "content": "again"}]

    asyncio.run(main())


@pytest.mark.parametrize("limit", ["3", 2.5, True], ids=["text", "float", "bool"])
def test_get_items_with_a_limit_that_is_not_an_int_names_limit(limit: Any) -> None:
    """``limit`` (given, or from ``session_settings``) is an int or None; anything else is
    an InvalidArgumentError naming it."""
    from types import SimpleNamespace

    log = s3log.Log(s3log.MemoryStore())
    with pytest.raises(s3log.InvalidArgumentError, match="limit"):
        asyncio.run(S3LogSession("t1", log).get_items(limit=limit))
    settings: Any = SimpleNamespace(limit=limit)
    with pytest.raises(s3log.InvalidArgumentError, match="limit"):
        asyncio.run(S3LogSession("t1", log, session_settings=settings).get_items())
