"""Cancelled and timed-out async appends: withdrawn before their commit, the commit's fate after.

A cancelled ``await append(...)`` must not be committed later anyway: a caller who retried
would store it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import s3log
from tests.helpers import GatedHeads


async def _gated_writer() -> tuple[GatedHeads, s3log.AsyncLog, s3log.AsyncWriter[Any]]:
    """A writer of a new session whose head PUTs wait until ``store.gate`` is set again."""
    store = GatedHeads()
    log = s3log.AsyncLog(store)
    w = await log.create()
    store.gate.clear()
    return store, log, w


async def _entries(log: s3log.AsyncLog, sid: str) -> list[object]:
    return [e.data for e in (await log.read(sid)).entries]


async def test_cancelled_before_its_commit_started_is_withdrawn() -> None:
    store, log, w = await _gated_writer()
    first = asyncio.create_task(w.append_durable("k", "a"))
    await store.entered.wait()                     # "a" is in a commit, blocked on its head PUT
    second = asyncio.create_task(w.append_durable("k", "b"))
    await asyncio.sleep(0.01)                      # "b" waits for the next commit
    second.cancel()
    store.gate.set()
    assert (await first).data == "a"
    await asyncio.gather(second, return_exceptions=True)
    await w.commit()
    assert await _entries(log, w.session_id) == ["a"]  # "b" was withdrawn, never stored
    assert w.pending == 0


async def test_cancelled_during_its_commit_is_stored_once_and_learnable() -> None:
    store, log, w = await _gated_writer()
    ticket = w.submit("k", "x")
    waiter = asyncio.create_task(w.wait(ticket))
    await store.entered.wait()
    waiter.cancel()                                # the caller gives up mid-commit...
    await asyncio.gather(waiter, return_exceptions=True)
    assert w.status(ticket) == "committing"        # ...and can see its entry is in flight
    assert not w.withdraw(ticket)
    store.gate.set()
    entry = await w.wait(ticket)                   # retrying the wait, not the append
    assert entry.data == "x" and w.status(ticket) == "committed"
    await w.commit()
    assert await _entries(log, w.session_id) == ["x"]


async def test_append_cancelled_mid_commit_still_commits_exactly_once_without_fork() -> None:
    store, log, w = await _gated_writer()
    task = asyncio.create_task(w.append_durable("k", "y"))
    await store.entered.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    store.gate.set()
    await asyncio.sleep(0.01)
    await w.append_durable("k", "z")
    assert await _entries(log, w.session_id) == ["y", "z"]
    assert w.forks == [] and (await log.list_session_ids()) == [w.session_id]


async def test_timeout_before_commit_withdraws() -> None:
    store, log, w = await _gated_writer()
    blocker = asyncio.create_task(w.append_durable("k", "a"))
    await store.entered.wait()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(w.append_durable("k", "late"), timeout=0.01)
    store.gate.set()
    await blocker
    await w.commit()
    assert await _entries(log, w.session_id) == ["a"]
