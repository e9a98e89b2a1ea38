"""Run leases for the integrations: one run at a time on a LangGraph thread or an
OpenAI Agents session, opt in (docs/decisions/0048-a-run-lease-for-the-integrations.md).

A run lease is the agent layer's lease (``Head.lease``, decision 0023) taken for the
length of a caller's run instead of a turn: :func:`acquire` records it in the session's
head with a head-only conditional PUT, or raises :class:`~s3log.agent.SessionBusy` when
another owner's lease is live; :func:`release` clears it. Writers that hold no lease
(every append of the savers and the session) leave it in the head as they found it, so
it stays there for the whole run. Both are procedures of public-verb calls
(:mod:`s3log._upper`): each integration performs them blocking or awaited, as it
performs everything else.

Its own room: the LangGraph savers and the OpenAI session share it, and neither
imports the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from s3log._upper import Proc, call
from s3log.agent.args import default_owner
from s3log.agent.errors import SessionBusy
from s3log.aio import AsyncLog, AsyncWriter
from s3log.errors import ConflictError, SessionExists, SessionNotFound
from s3log.integrations import IntegrationError
from s3log.log import Log, Writer

__all__ = ["RunLease", "acquire", "release"]

#: How often a release tries again when other writers keep moving the head.
_RELEASE_ATTEMPTS = 8
#: The longest pause (seconds) between two reads of a busy session's head, waiting.
POLL = 0.5


class RunLease:
    """What a caller's run holds: the session, the owner and the lease's length.

    ``owner`` defaults to ``host:pid:random`` (each lease its own owner); ``ttl`` is in
    seconds and must cover the whole run (the lease is recorded once, when the run
    starts); ``wait``: how many seconds to wait for another owner's run to end before
    raising :class:`~s3log.agent.SessionBusy`.
    """

    def __init__(self, session_id: str, owner: str | None, ttl: float, wait: float = 0.0) -> None:
        if not _seconds(ttl) or not 0.001 <= ttl <= 10**9:
            raise IntegrationError(f"ttl must be a number of seconds from 0.001 to 10**9, got {ttl!r}")
        if not _seconds(wait) or not 0 <= wait < math.inf:
            raise IntegrationError(f"wait must be a number of seconds >= 0 (finite), got {wait!r}")
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise IntegrationError(f"owner must be a non-empty string, got {owner!r}")
        self.session_id = session_id
        self.owner = owner or default_owner()
        self.ttl_ms = int(ttl * 1000)
        self.wait = float(wait)


def _seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def acquire(log: Log | AsyncLog, lease: RunLease, meta: Mapping[str, Any],
            sleep: Callable[[float], Any]) -> Proc[None]:
    """Record ``lease`` in its session's head (creating the session with ``meta`` if it
    does not exist yet), or raise :class:`~s3log.agent.SessionBusy` naming the live
    lease of another owner once ``lease.wait`` seconds have passed (``sleep``: the
    shell's, blocking or awaitable). A conditional PUT: of two runs starting at once,
    one wins and the other finds its lease."""
    sid = lease.session_id
    deadline: int | None = None
    waited = 0.0
    while True:
        try:
            writer = yield call(log.open, sid, on_conflict="raise")
        except SessionNotFound:
            try:
                writer = yield call(log.create, sid, meta=dict(meta), on_conflict="raise")
            except SessionExists:
                continue  # created by another run meanwhile: read its lease
        held = writer.head.lease
        now = log.config.env.now_ms()
        if held is not None and held.owner != lease.owner and held.live(now):
            if deadline is None:
                deadline = now + int(lease.wait * 1000)
            # Bounded by the log's clock and by the time slept, as the agent layer's
            # restore is: a clock that stands still must not make this wait forever.
            left = min((deadline - now) / 1000, lease.wait - waited)
            if left <= 0:
                raise SessionBusy(sid, held.owner, held.expires_at)
            pause = max(0.001, min(POLL, left, (held.expires_at - now) / 1000))
            yield call(sleep, pause)
            waited += pause
            continue
        writer.hold_lease(lease.owner, lease.ttl_ms)
        if (yield from _put_head(writer)):
            return
        # Another writer moved the head since it was read: read its lease again.


def release(log: Log | AsyncLog, lease: RunLease) -> Proc[None]:
    """Clear ``lease`` from its session's head if the head still carries it (one
    head-only PUT); another owner's lease, or none, is left alone. If other writers keep
    moving the head, or the store cannot be reached, the lease is left to expire."""
    for _ in range(_RELEASE_ATTEMPTS):
        try:
            writer = yield call(log.open, lease.session_id, on_conflict="raise")
        except SessionNotFound:
            return
        held = writer.head.lease
        if held is None or held.owner != lease.owner:
            return
        writer.hold_lease(lease.owner, 1)
        writer.release_lease()
        if (yield from _put_head(writer)):
            return


def _put_head(writer: Writer | AsyncWriter) -> Proc[bool]:
    """Write the head with the lease the writer now holds (or releases): one conditional
    PUT. False when another writer moved the head first (and this PUT did not land)."""
    try:
        yield call(writer.renew_lease, on_conflict="raise")
    except ConflictError as err:
        return bool(err.landed)
    return True
