"""Writers and async stores outlive an event loop (a second ``asyncio.run``, a loop per test).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

import pytest

import s3log
from s3log.store import aio_s3
from s3log.store.memory import AsyncMemoryStore
from s3log.testing.plugin import LocalS3


class Slow(AsyncMemoryStore):
    """A head PUT takes a moment, so tasks appending at once contend for the writer."""

    def __init__(self, delay: float = 0.005) -> None:
        super().__init__()
        self.delay = delay

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        await asyncio.sleep(self.delay)
        return await super().put_if_match(key, body, etag)


async def _burst(w: s3log.AsyncWriter, tag: int) -> list[object]:
    # Two explicit commits beside the appenders make commit tasks contend for the lock.
    out = await asyncio.gather(*(w.append_durable("k", [tag, i]) for i in range(20)), w.commit(), w.commit(),
                               return_exceptions=True)
    return list(out[:20])


def test_a_writer_commits_on_a_second_event_loop() -> None:
    log = s3log.AsyncLog(Slow(), config=s3log.LogConfig(tail_max_bytes=300, tail_per_commit=0))

    async def first() -> s3log.AsyncWriter:
        w = await log.create()
        assert all(isinstance(r, s3log.Entry) for r in await _burst(w, 1))
        return w

    w = asyncio.run(first())
    for tag in (2, 3):  # a loop after the first, and one more
        res = asyncio.run(_burst(w, tag))
        assert all(isinstance(r, s3log.Entry) for r in res), [r for r in res if not isinstance(r, s3log.Entry)]
    stored = [e.data for e in asyncio.run(log.read(w.session_id)).entries]
    assert sorted(map(tuple, stored)) == sorted((t, i) for t in (1, 2, 3) for i in range(20))  # each once


def test_a_commit_left_pending_by_a_closed_loop_does_not_hang_the_writer() -> None:
    store = Slow(delay=0.05)
    log = s3log.AsyncLog(store)
    loop = asyncio.new_event_loop()
    w = loop.run_until_complete(log.create())
    with pytest.raises(asyncio.TimeoutError):
        loop.run_until_complete(asyncio.wait_for(w.append_durable("k", 1), 0.01))
    loop.close()  # closed without cancelling the commit task, which holds the writer

    async def again() -> s3log.Entry:
        # (A guard against the hang this test is about, not a timing assertion.)
        return await asyncio.wait_for(w.append_durable("k", 2), 30)

    entry = asyncio.run(again())
    assert entry.data == 2
    stored = [e.data for e in asyncio.run(log.read(w.session_id)).entries]
    # The abandoned commit's entry: its head PUT never got past the closed loop, so it
    # was queued again and carried by the next commit. Stored once either way.
    assert stored.count(2) == 1 and stored.count(1) <= 1
    assert asyncio.run(log.read(w.session_id)).entries  # and the chain verifies


def test_a_writer_with_a_commit_pending_on_a_live_loop_refuses_another_loop() -> None:
    store = Slow(delay=0.05)
    log = s3log.AsyncLog(store)
    loop = asyncio.new_event_loop()
    try:
        w = loop.run_until_complete(log.create())
        with pytest.raises(asyncio.TimeoutError):
            loop.run_until_complete(asyncio.wait_for(w.append_durable("k", 1), 0.01))
        # That loop is stopped, not closed: its commit may still run there.
        with pytest.raises(s3log.WriterBusyError, match="pending on another event loop"):
            asyncio.run(w.append_durable("k", 2))
        assert w.status(2) == "unknown"  # withdrawn: never stored
        loop.run_until_complete(w.commit())  # back on its loop, the commit finishes
        assert [e.data for e in loop.run_until_complete(log.read(w.session_id)).entries] == [1]
    finally:
        loop.close()


def test_an_async_store_used_from_two_running_loops_keeps_one_client_per_loop(
    s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []
    real = aio_s3.open_client

    def counting(*args: Any, **kwargs: Any) -> Any:
        made = real(*args, **kwargs)
        opened.append(made)
        return made

    monkeypatch.setattr(aio_s3, "open_client", counting)
    bucket = s3log_server.create_bucket()
    store = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    loops = [asyncio.new_event_loop() for _ in range(2)]
    threads = [threading.Thread(target=loop.run_forever, daemon=True) for loop in loops]
    for t in threads:
        t.start()

    def on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    try:
        on(loops[0], store.put_if_absent("k", b"v"))
        for _ in range(3):  # each loop in turn, both running all along
            for loop in loops:
                assert (on(loop, store.get("k"))).body == b"v"
        assert len(opened) == 2  # was 7: a client per switch, each left open
        for loop in loops:
            on(loop, store.aclose())
    finally:
        for loop in loops:
            loop.call_soon_threadsafe(loop.stop)
        for t in threads:
            t.join(10)
        for loop in loops:
            loop.close()
