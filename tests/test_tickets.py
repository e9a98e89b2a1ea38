"""Append tickets: ``status`` and ``withdraw`` tell the truth about each entry, under threads, async
cancellation and commits whose outcome is unknown.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

import s3log
from s3log.store.memory import AsyncMemoryStore


def test_status_and_withdraw_never_lie_under_threads() -> None:
    """Submitters withdraw at random while others commit: a withdrawn entry is never
    stored, every other one is stored once, and status agrees at every step."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    withdrawn: set[int] = set()
    kept: set[int] = set()
    lies: list[str] = []
    lock = threading.Lock()

    def submitter(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(150):
            t = w.submit("k", {"seed": seed, "n": rng.random()})
            st = w.status(t)
            if st not in ("pending", "committing", "committed"):
                lies.append(f"fresh ticket {t} is {st}")
            if rng.random() < 0.5 and w.withdraw(t):
                if w.status(t) != "withdrawn" or w.withdraw(t):
                    lies.append(f"withdrawn ticket {t} is {w.status(t)}")
                with lock:
                    withdrawn.add(t)
                continue
            entry = w.wait(t)
            if w.status(t) != "committed" or w.withdraw(t):
                lies.append(f"committed ticket {t} is {w.status(t)}")
            with lock:
                kept.add(t)
            assert entry.data["seed"] == seed

    def committer() -> None:
        for _ in range(60):
            w.commit()

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=committer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.commit()
    assert not lies
    entries = log.read(w.session_id).entries
    assert len(entries) == len(kept) and len(kept) + len(withdrawn) == 600
    assert len({(e.data["seed"], e.data["n"]) for e in entries}) == len(entries)
    assert w.pending == 0


def test_async_withdraw_during_a_commit_is_refused_for_what_it_carries() -> None:
    async def main() -> None:
        store = _SlowHeadStore(s3log.MemoryStore())
        alog, w, carried, commit = await _held_commit(store)
        later = w.submit("k", "later")
        assert [w.status(t) for t in carried] == ["committing"] * 3
        assert not any(w.withdraw(t) for t in carried)
        assert w.status(later) == "pending" and w.withdraw(later) and w.status(later) == "withdrawn"
        store.hold.set()
        await commit
        assert [w.status(t) for t in carried] == ["committed"] * 3
        assert [e.data for e in (await alog.read(w.session_id)).entries] == [0, 1, 2]

    asyncio.run(main())


class _SlowHeadStore(AsyncMemoryStore):
    """Conditional head PUTs wait until ``hold`` is set (after landing, with ``land_first``)."""

    def __init__(self, store: s3log.MemoryStore, *, land_first: bool = False) -> None:
        super().__init__(store)
        self.hold = asyncio.Event()
        self.hold.set()
        self.waiting = False
        self.land_first = land_first

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.waiting = True
        if self.land_first:
            etag = await super().put_if_match(key, body, etag)
            await self.hold.wait()
            return etag
        await self.hold.wait()
        return await super().put_if_match(key, body, etag)


async def _held_commit(store: _SlowHeadStore) -> tuple[s3log.AsyncLog, Any, list[Any], asyncio.Future[Any]]:
    """A new session's commit of three entries, held at its head PUT: the log, the writer,
    the entries' tickets and the commit's future."""
    alog = s3log.AsyncLog(store)
    w = await alog.create()
    carried = [w.submit("k", i) for i in range(3)]
    store.hold.clear()
    commit = asyncio.ensure_future(w.commit())
    while not store.waiting:
        await asyncio.sleep(0)
    return alog, w, carried, commit


def test_a_cancelled_async_commit_still_carries_its_tickets() -> None:
    """Cancelling the caller of an async commit does not abandon it (it is shielded):
    its tickets stay "committing" and cannot be withdrawn; they end committed once."""

    async def main() -> None:
        mem = s3log.MemoryStore()
        store = _SlowHeadStore(mem)
        _alog, w, carried, commit = await _held_commit(store)
        commit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await commit
        assert [w.status(t) for t in carried] == ["committing"] * 3
        assert not any(w.withdraw(t) for t in carried)
        store.hold.set()
        assert [e.data for e in [await w.wait(t) for t in carried]] == [0, 1, 2]
        await w.commit()
        entries = (await s3log.AsyncLog(AsyncMemoryStore(mem)).read(w.session_id)).entries
        assert [e.data for e in entries] == [0, 1, 2]

    asyncio.run(main())


class _BrokenHeadStore(s3log.MemoryStore):
    """A head PUT fails with an error the protocol cannot judge (after landing, with ``land``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: bool | None = None  # None: healthy; False: fail before; True: land, then fail

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if self.fail is None:
            return super().put_if_match(key, body, etag)
        if self.fail:
            super().put_if_match(key, body, etag)
        raise RuntimeError("connection reset by the caller's runtime")


@pytest.mark.parametrize("landed", [False, True])
def test_a_failed_commit_leaves_its_tickets_uncertain_then_stored_once(landed: bool) -> None:
    """A commit that failed with its outcome unknown (its head landed or not): its
    tickets are "uncertain", cannot be withdrawn, can be watched; an entry queued after
    it is "pending" and can be; the next commit stores each carried entry once."""
    store = _BrokenHeadStore()
    log = s3log.Log(store)
    w = log.create()
    carried = [w.submit("k", i) for i in range(3)]
    store.fail = landed
    with pytest.raises(RuntimeError):
        w.commit()
    store.fail = None
    later, gone = w.submit("k", "later"), w.submit("k", "gone")
    assert [w.status(t) for t in carried] == ["uncertain"] * 3
    assert not any(w.withdraw(t) for t in carried)
    assert all(w._core.watch(t) for t in carried)
    assert w.status(later) == "pending" and w.withdraw(gone) and w.status(gone) == "withdrawn"
    w.commit()
    assert [w.status(t) for t in [*carried, later]] == ["committed"] * 4
    assert not w.withdraw(later) and not w.withdraw(carried[0])
    assert [e.data for e in log.read(w.session_id).entries] == [0, 1, 2, "later"]
