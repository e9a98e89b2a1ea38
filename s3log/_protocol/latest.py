"""Appending at the latest head whatever other writers did, sans-IO: never forking.

:func:`append_latest` commits on the head as read now, and on a conflict acknowledges
what landed, reads again and commits the rest on top; a keyed entry already stored is
acknowledged in its place (:mod:`s3log._protocol.append_keys`). Its own room: it is a
loop around :func:`s3log._protocol.commit.take_over` and ``commit`` with its own rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from s3log._format.chain import PendingEntry
from s3log._format.layout import Layout
from s3log._format.values import Head
from s3log._protocol import ops
from s3log._protocol.append_keys import stored_by_key
from s3log._protocol.commit import CommitPlan, commit, take_over
from s3log._protocol.ops import Proc
from s3log._protocol.read import expired_error, read_head_or_none
from s3log._protocol.state import ChainPosition, new_writer_state
from s3log._protocol.write import takeover_position
from s3log.config import LogConfig
from s3log.errors import ConflictError, SessionExists, SessionNotFound, StoreError
from s3log.reducer import Reducer, S
from s3log.results import AckedEntry, CommitResult


def append_latest(
    layout: Layout,
    cfg: LogConfig,
    session: str,
    pending: Sequence[PendingEntry],
    reducer: Reducer[S],
    *,
    create_meta: Mapping[str, Any] | None = None,
    hint: ChainPosition[S] | None = None,
    check_head: Callable[[Head], None] | None = None,
) -> Proc[CommitResult[S]]:
    """Append ``pending`` at the end of ``session`` whatever other writers did: never fork.

    For entries that do not depend on what precedes them (a checkpoint, a message):
    starting from ``hint`` (the state a previous call returned: one PUT when nobody
    else wrote) or the head as read now, commit; on a conflict, acknowledge what
    landed, re-read the head and commit the rest on top. A missing session is created
    with ``create_meta`` (or is :class:`SessionNotFound` without it). The state in the
    result is only good as the next ``hint``: it does not fold other writers' entries.

    An entry with an append key (``PendingEntry.key``) the head it would go on
    remembers is not written again: the stored one is acknowledged in its place
    (decision 0037); AppendKeyReused, before anything is written, if it differs.
    ``check_head`` sees every head read before anything goes on it, and may raise.
    """
    acked: dict[int, AckedEntry] = {}
    durable: list[AckedEntry] = []
    # The index, in the call, of each entry of ``pending`` (which loses those stored).
    order = list(range(len(pending)))
    ws = hint
    for attempt in range(1, cfg.retry.attempts + 1):
        takeover = False
        if attempt > 1:
            # After a lost race, a jittered backoff before reading again: the winner
            # holds its head and needs no GET, so a loser retrying at once (a GET and
            # a PUT per try) kept losing to it and ran out of attempts.
            yield from ops.sleep(cfg.retry.backoff(attempt - 1, cfg.env.rng))
        if ws is None:
            ws, takeover = yield from _start_from(layout, cfg, session, reducer, create_meta)
        if check_head is not None and not takeover:
            check_head(ws.head)  # the head read now, or the one ``hint`` names
        if ws.head.append_keys and any(p.key is not None for p in pending):
            found = yield from stored_by_key(layout, ws.head, pending)
            acked.update((order[i], e) for i, e in found.items())
            pending = [p for i, p in enumerate(pending) if i not in found]
            order = [x for i, x in enumerate(order) if i not in found]
            if not pending:
                return CommitResult(ws, durable, [acked[i] for i in sorted(acked)])
        try:
            # Fresh entries: only this call's own undecided PUTs can have stored them.
            plan = CommitPlan(layout, cfg, reducer, ws, pending, "raise", maybe_landed=0)
            result = yield from (take_over(plan) if takeover else commit(plan))
        except ConflictError as err:
            acked.update(zip(order, err.landed, strict=False))
            durable += err.landed
            pending, order = pending[len(err.landed):], order[len(err.landed):]
            ws = None
            if pending:
                continue
            return CommitResult(new_writer_state(session, reducer, now=cfg.env.now_ms()), durable,
                                [acked[i] for i in sorted(acked)])
        except SessionExists:
            ws = None  # created by someone else meanwhile: append on top of theirs
            continue
        except SessionNotFound:
            # Deleted (Log.delete, or gc's delete of a tombstone) after its head was read
            # here: the If-Match PUT met 404, so no head of this call can land there any
            # more, and what an earlier undecided PUT stored went with the session. With
            # create_meta a missing session is created: read again (the id is free, or
            # someone created it meanwhile).
            if create_meta is None:
                raise
            ws = None
            continue
        acked.update(zip(order, result.acked, strict=True))
        return CommitResult(result._ws, durable + result.entries, [acked[i] for i in sorted(acked)])
    raise StoreError(f"could not append to session {session}: the head kept changing")


def _start_from(
    layout: Layout, cfg: LogConfig, session: str, reducer: Reducer[S], create_meta: Mapping[str, Any] | None,
) -> Proc[tuple[ChainPosition[S], bool]]:
    """The position :func:`append_latest` commits from, read now, and whether it takes
    over an expired session's tombstone. A missing session is created with
    ``create_meta`` (SessionNotFound without it)."""
    current = yield from read_head_or_none(layout, session)
    if current is None:
        if create_meta is None:
            raise SessionNotFound(session)
        return new_writer_state(session, reducer, create_meta, now=cfg.env.now_ms(), creator=cfg.env.nonce()), False
    if current[0].expired:
        # Expired by retention: never written on (its entries would be unreadable
        # and collected with it). With create_meta the id starts again, as a new
        # root chain that replaces the tombstone (If-Match on it: a racing sweep
        # or writer wins); its old segments get gc's grace from now.
        if create_meta is None:
            raise expired_error(current[0])
        fresh = new_writer_state(session, reducer, create_meta, now=cfg.env.now_ms(), creator=cfg.env.nonce())
        return takeover_position(fresh, current[0], current[1], fresh.head.created_at), True
    return ChainPosition(session, current[0], current[1], reducer.initial(), {}), False
