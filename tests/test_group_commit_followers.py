"""AsyncWriter's group commit: tasks waiting while a commit is in flight follow it
(each on a future of its own, resolved when it ends) and the next commit carries
every entry queued meanwhile. Timeouts and cancellations of some waiters lose nothing
acknowledged, duplicate nothing and leave no task behind."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import s3log
from s3log.store.memory import AsyncMemoryStore


class _SlowStore(AsyncMemoryStore):
    """Every PUT takes a while (drawn from ``rng``), as a round trip does."""

    def __init__(self, rng: random.Random, most: float) -> None:
        super().__init__()
        self.rng, self.most = rng, most

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        await asyncio.sleep(self.rng.random() * self.most)
        return await super().put_if_match(key, body, etag)

    async def put_if_absent(self, key: str, body: bytes) -> str:
        await asyncio.sleep(self.rng.random() * self.most)
        return await super().put_if_absent(key, body)


@pytest.mark.parametrize("seed", range(4))
def test_waiters_timing_out_at_random_lose_and_duplicate_nothing_acknowledged(seed: int) -> None:
    async def main() -> tuple[int, int]:
        rng = random.Random(seed)
        store = _SlowStore(rng, 0.003)
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        acked: list[tuple[int, int, int]] = []
        timed_out = 0

        async def appender(a: int) -> None:
            nonlocal timed_out
            for i in range(4):
                try:
                    e = await asyncio.wait_for(w.append_durable("k", {"a": a, "i": i}), timeout=rng.random() * 0.01)
                except TimeoutError:
                    timed_out += 1
                else:
                    acked.append((a, i, e.seq))

        await asyncio.wait_for(asyncio.gather(*(appender(a) for a in range(60))), 60)
        await w.commit()  # whatever a timed-out waiter left queued
        entries = (await alog.read(w.session_id)).entries
        stored = [(e.data["a"], e.data["i"]) for e in entries]
        assert len(stored) == len(set(stored))
        for a, i, seq in acked:
            assert entries[seq].data == {"a": a, "i": i}
        # No follower left waiting, no commit left running.
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        assert w._following == [] or all(f.done() for f in w._following)
        await alog.aclose()
        return len(acked), timed_out

    acked, timed_out = asyncio.run(main())
    assert acked and timed_out  # both kinds of outcome happened


def test_followers_of_one_commit_share_the_next() -> None:
    """64 tasks appending 5 entries each: each round of appends is carried by few
    commits, not one per task (request counts are exact)."""

    async def main() -> dict[str, Any]:
        store = _SlowStore(random.Random(1), 0.002)
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        store.sync.requests.reset()

        async def appender(a: int) -> None:
            for i in range(5):
                await w.append_durable("k", {"a": a, "i": i})

        await asyncio.gather(*(appender(a) for a in range(64)))
        got = {"puts": store.sync.requests["PUT"], "entries": (await alog.read(w.session_id)).head.entry_count}
        await alog.aclose()
        return got

    got = asyncio.run(main())
    assert got["entries"] == 320
    # A commit per round at most, plus a segment beside a head now and then.
    assert got["puts"] <= 2 * 5 + 4, got
