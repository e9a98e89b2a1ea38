"""Writing a head, sans-IO: what goes out before it, the conditional PUT, what it decided.

The machinery every verb that writes a chain shares (commits, forks, creating and
compacting a session): :func:`write_head` has the next head planned
(:mod:`s3log._protocol.headplan`: inline, or flushing a merged segment), creates the
immutable objects it depends on (:func:`put_immutable`, :func:`rewrite_marker`), PUTs
the head conditionally and decides what happened, with the decisions in
:mod:`s3log._protocol.decide`; :func:`advance` and :func:`adopt` make the writer's next
position. What to do after a lost race is the callers' (commit, fork).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from s3log._format.chain import PendingEntry
from s3log._format.codec import Segment, decode_segment
from s3log._format.layout import Layout
from s3log._format.manifest import plan_merge
from s3log._format.values import Entry, Head
from s3log._protocol import activity, decide, ops
from s3log._protocol.headplan import HeadPlan, plan_head
from s3log._protocol.ops import Blob, Get, Op, Parallel, Proc, PutIfAbsent, PutIfMatch
from s3log._protocol.read import read_head_or_none, segment_decoder
from s3log._protocol.state import STALE_ETAG, ChainPosition, CommitJournal, LeasePlan
from s3log.config import LogConfig
from s3log.errors import CorruptionError, FormatVersionError, SegmentMissing, SessionNotFound, StoreError
from s3log.reducer import S

log = logging.getLogger("s3log")


@dataclass(frozen=True, slots=True)
class HeadOutcome:
    """What became of a head PUT: ``committed`` (its ETag), or ``conflict`` (the head
    ``found`` in its place, if one was read)."""

    kind: Literal["committed", "conflict"]
    etag: str | None
    found: tuple[Head, str] | None
    #: Segments read ahead for the next merge (see :func:`merge_ahead`).
    fetched: Mapping[str, tuple[Entry, ...]] = field(default_factory=dict)
    #: Some head PUT of this write had an unknown outcome: it may have landed.
    uncertain: bool = False


def put_immutable(cfg: LogConfig, puts: Sequence[PutIfAbsent]) -> Proc[dict[str, decide.Confirmed]]:
    """Create immutable objects (segments, fork markers) with create-only PUTs, in parallel.

    Each key ends :attr:`~decide.Confirmed.OURS` (stored, byte for byte what we wrote)
    or :attr:`~decide.Confirmed.TAKEN` (another object holds the key); nothing else
    returns. An "already exists" reply is confirmed by a GET before it is trusted, and
    409s, throttling and unknown outcomes are retried here (see :mod:`s3log._protocol.decide`).
    """
    out: dict[str, decide.Confirmed] = {}
    todo = list(puts)
    attempt = 0
    while todo:
        attempt += 1
        results = yield from ops.parallel(todo)
        confirm: list[PutIfAbsent] = []
        again: list[PutIfAbsent] = []
        for op, res in zip(todo, results, strict=True):
            step = decide.after_create(decide.classify(res))
            if step is decide.CreateStep.DONE:
                out[op.key] = decide.Confirmed.OURS
            elif step is decide.CreateStep.CONFIRM:
                confirm.append(op)
            elif step is decide.CreateStep.RETRY:
                again.append(op)
            else:
                raise _failure(res)
        if confirm:
            got = yield from ops.parallel([Get(op.key) for op in confirm])
            for op, blob in zip(confirm, got, strict=True):
                stored = None if isinstance(blob, StoreError) else blob.body
                verdict = decide.after_confirm(decide.classify(blob), stored, op.body)
                if verdict in (decide.Confirmed.OURS, decide.Confirmed.TAKEN):
                    out[op.key] = verdict
                else:
                    again.append(op)
        if again:
            log.info("retrying create-only PUT of %s (attempt %d)", again[0].key, attempt)
            if attempt >= cfg.retry.attempts:
                raise StoreError(f"could not create {again[0].key} after {attempt} attempts", key=again[0].key)
            yield from ops.sleep(cfg.retry.backoff(attempt, cfg.env.rng))
        todo = again
    return out


def rewrite_marker(cfg: LogConfig, op: PutIfAbsent, same_fork: Callable[[bytes], bool]) -> Proc[decide.Confirmed]:
    """Store ``op.body`` at ``op.key``, replacing an earlier copy of the same fork's
    marker (``same_fork`` judges a stored body) with If-Match on its ETag: the key is
    never empty while a copy is there, and what ends up stored was written now.

    A retried fork does this before its head (decision 0008): gc deletes a dangling
    marker only with If-Match on the ETag it listed, so a copy it judged old and
    unreferenced is no longer the one there, and the new copy is young. Returns
    :attr:`~decide.Confirmed.OURS` or :attr:`~decide.Confirmed.TAKEN` (another object
    holds the key, left alone).
    """
    for attempt in range(1, cfg.retry.attempts + 1):
        if attempt > 1:
            yield from ops.sleep(cfg.retry.backoff(attempt - 1, cfg.env.rng))
        (got,) = yield from ops.parallel([Get(op.key)])
        last: object = got
        stored = got.body if isinstance(got, Blob) else None
        step = decide.after_marker_read(decide.classify(got), stored, op.body,
                                        stored is not None and same_fork(stored))
        if step is decide.RefreshStep.REPLACE:
            assert isinstance(got, Blob)
            (res,) = yield from ops.parallel([PutIfMatch(op.key, op.body, got.etag)])
            step = decide.after_marker_replace(decide.classify(res))
            last = res
        elif step is decide.RefreshStep.CREATE:
            # An earlier copy landing meanwhile shows as TAKEN here: read it again.
            if (yield from put_immutable(cfg, [op]))[op.key] is decide.Confirmed.OURS:
                return decide.Confirmed.OURS
            continue
        if step is decide.RefreshStep.DONE:
            return decide.Confirmed.OURS
        if step is decide.RefreshStep.TAKEN:
            return decide.Confirmed.TAKEN
        if step is decide.RefreshStep.FAIL:
            raise _failure(last)
        log.info("writing fork marker %s again: %s (attempt %d)", op.key, last, attempt)
    raise StoreError(f"could not write fork marker {op.key} again after {cfg.retry.attempts} attempts", key=op.key)


def _failure(result: object) -> BaseException:
    """The error of a request :func:`decide.classify` found fatal (so it is one)."""
    return result if isinstance(result, BaseException) else StoreError(f"request failed: {result!r}")


def _head_op(layout: Layout, ws: ChainPosition[Any], body: bytes) -> PutIfAbsent | PutIfMatch:
    """The conditional PUT of a new head: create-only for a new session, else If-Match."""
    key = layout.head(ws.session)
    return PutIfAbsent(key, body) if ws.etag is None else PutIfMatch(key, body, ws.etag)


def _put_head(
    layout: Layout, cfg: LogConfig, ws: ChainPosition[Any], plan: HeadPlan, deadline_ms: int | None,
    journal: CommitJournal, first: str | StoreError | None = None, doubted: bool = False,
) -> Proc[HeadOutcome]:
    """PUT the head conditionally and decide what happened, whatever the response.

    The decisions are :func:`s3log._protocol.decide.after_head_put` and
    :func:`s3log._protocol.decide.after_reread`. ``deadline_ms``: past it (a segment written for
    this commit could be collected by gc as garbage) no further attempt is made.
    ``first``: the result of a first attempt already made (beside a segment PUT), and
    ``doubted`` what ``journal.in_doubt`` was before it went out. The journal is in
    doubt while a PUT is out and after any reply that leaves its outcome unknown.
    """
    key = layout.head(ws.session)
    expected = ws.etag
    creating = expected is None
    attempt = 0
    uncertain = False
    # A PUT to another session (a fork's child) is the journal's ``fork`` doubt, kept
    # by whoever writes there: in_doubt is about the writer's own session only.
    own = journal.session is None or journal.session == ws.session
    track = journal if own else CommitJournal()
    if first is None:
        doubted = track.in_doubt
    while True:
        attempt += 1
        # Checked before each PUT is sent. Not before reading the reply of one already
        # out (``first``): it may have landed, and a 2xx must be taken as such.
        if deadline_ms is not None and not (attempt == 1 and first is not None) and cfg.env.now_ms() > deadline_ms:
            raise StoreError(f"commit to session {ws.session} passed its deadline undecided; nothing acknowledged",
                             key=key)
        result: str | StoreError
        if attempt == 1 and first is not None:
            result = first
        else:
            track.in_doubt = True  # from the moment it may reach the store
            try:
                if expected is None:
                    result = yield from ops.put_if_absent(key, plan.body)
                else:
                    result = yield from ops.put_if_match(key, plan.body, expected)
            except StoreError as exc:
                result = exc
        reply = decide.classify(result)
        uncertain |= reply is decide.Reply.UNKNOWN
        step = decide.after_head_put(reply, None if isinstance(result, StoreError) else result, creating=creating)
        if isinstance(step, decide.Committed):
            return HeadOutcome("committed", step.etag, None)
        # In doubt still if this PUT may have been applied, or an earlier one left unknown.
        track.in_doubt = doubted or uncertain or decide.may_have_applied(reply)
        if isinstance(step, decide.SessionGone):
            raise SessionNotFound(ws.session, "it was deleted while this writer held it")
        if isinstance(step, decide.Fatal):
            raise _failure(result)
        current = yield from read_head_or_none(layout, ws.session)
        stored = decide.StoredHead(current[0].writer, current[1]) if current else None
        verdict = decide.after_reread(stored, expected_etag=expected, nonce=plan.head.writer, attempt=attempt,
                                      max_attempts=cfg.retry.attempts)
        if isinstance(verdict, decide.Committed):
            return HeadOutcome("committed", verdict.etag, None)
        if isinstance(verdict, decide.Lost):
            return HeadOutcome("conflict", None, current, uncertain=uncertain)
        if isinstance(verdict, decide.SessionGone):
            raise SessionNotFound(ws.session, "it was deleted while this writer held it")
        if isinstance(verdict, decide.GiveUp):
            raise StoreError(f"could not commit session {ws.session} after {attempt} attempts", key=key)
        log.info("session %s: head PUT undecided (%s); the head is unchanged, retrying", ws.session, result)
        yield from ops.sleep(cfg.retry.backoff(attempt, cfg.env.rng))


def write_head(
    layout: Layout,
    cfg: LogConfig,
    ws: ChainPosition[Any],
    entries: Sequence[Entry],
    *,
    before_head: Sequence[PutIfAbsent] = (),
    rewrite: Sequence[tuple[PutIfAbsent, Callable[[bytes], bool]]] = (),
    lease: LeasePlan | None = None,
    journal: CommitJournal | None = None,
    sources: Sequence[PendingEntry] = (),
) -> Proc[tuple[HeadPlan | None, HeadOutcome, dict[str, decide.Confirmed]]]:
    """Write a segment if the plan needs one (with ``before_head`` alongside), then the head.

    The head is written only once every object it depends on is confirmed stored as
    ours; a segment key found taken by something else is never referenced. ``journal``
    is kept true of the head PUTs (see :class:`~s3log._protocol.state.CommitJournal`). ``rewrite``: markers
    written again (:func:`rewrite_marker`) first, after the deadline is set, so they
    are younger than anything the head may meet. ``sources``: the pending entries
    ``entries`` were built from (their append keys go into the head's window).
    """
    if journal is None:
        journal = CommitJournal()
    # The deadline counts from planning: a merge's retired_at is stamped here.
    deadline = cfg.env.now_ms() + cfg.commit_deadline_ms
    plan = yield from _plan_or_moved(layout, cfg, ws, entries, lease, sources)
    if isinstance(plan, HeadOutcome):
        return None, plan, {}
    confirmed, marker, segment = yield from _put_before_head(layout, cfg, ws, plan, before_head, rewrite)
    if any(v is not decide.Confirmed.OURS for k, v in confirmed.items() if marker is None or k != marker):
        return plan, HeadOutcome("conflict", None, None), confirmed
    # A segment written beside the head counts too: it is unreferenced until its head
    # lands, so gc may collect it once older than the deadline; a head retried later
    # would name it pending and its writer, holding the 2xx of its PUT, promote it.
    deadline_ms = deadline if confirmed or segment is not None or plan.head.retired_at else None
    beside = segment if segment is not None and plan.parallel else None
    ahead = merge_ahead(cfg, ws, plan)
    if beside is None and not ahead:
        outcome = yield from _put_head(layout, cfg, ws, plan, deadline_ms, journal)
        return plan, outcome, confirmed
    outcome = yield from _put_head_beside(layout, cfg, ws, plan, deadline_ms, journal, beside, ahead, confirmed)
    return plan, outcome, confirmed


def _plan_or_moved(
    layout: Layout, cfg: LogConfig, ws: ChainPosition[Any], entries: Sequence[Entry], lease: LeasePlan | None,
    sources: Sequence[PendingEntry],
) -> Proc[HeadPlan | HeadOutcome]:
    """:func:`~s3log._protocol.headplan.plan_head`, or the conflict of a head that moved on while its segments a
    merge reads were collected."""
    try:
        return (yield from plan_head(layout, cfg, ws, entries, cfg.env.nonce(), lease, sources))
    except SegmentMissing:
        # Our view of the head is stale and gc collected what it listed: the head moved.
        current = yield from read_head_or_none(layout, ws.session)
        if current is None and ws.etag is not None:
            # Deleted (Log.delete) while this writer held it: its segments went with the
            # head. What the head PUT would have met (404), not corruption.
            raise SessionNotFound(ws.session, "it was deleted while this writer held it") from None
        if current is None or decide.etags_equal(current[1], ws.etag):
            raise
        return HeadOutcome("conflict", None, current)


def _put_before_head(
    layout: Layout, cfg: LogConfig, ws: ChainPosition[Any], plan: HeadPlan, before_head: Sequence[PutIfAbsent],
    rewrite: Sequence[tuple[PutIfAbsent, Callable[[bytes], bool]]],
) -> Proc[tuple[dict[str, decide.Confirmed], str | None, PutIfAbsent | None]]:
    """Store what the head depends on: markers written again, ``before_head``, the day's
    activity marker, the segment (unless it goes out beside the head). Returns what
    each key ended as, the activity marker's key (its outcome does not hold the head
    back) and the segment's PUT."""
    confirmed: dict[str, decide.Confirmed] = {}
    for op, same_fork in rewrite:
        confirmed[op.key] = yield from rewrite_marker(cfg, op, same_fork)
    puts = list(before_head)
    # Activity index (s3log._protocol.activity): a day's first commit marks the day, before its head.
    marker = None if not cfg.activity_index else activity.marker_for(
        layout, ws.session, ws.etag is None, ws.head.updated_at, plan.head.updated_at)
    if marker is not None:
        puts.append(marker)
    segment = None
    if plan.segment_key is not None and plan.segment_body is not None:
        segment = PutIfAbsent(plan.segment_key, plan.segment_body)
        if not plan.parallel:
            puts.append(segment)
    if puts:
        confirmed.update((yield from put_immutable(cfg, puts)))
        if not plan.parallel and plan.segment_key is not None \
                and confirmed[plan.segment_key] is not decide.Confirmed.OURS:
            raise CorruptionError(plan.segment_key, "another object holds this new segment's key; not referenced")
    return confirmed, None if marker is None else marker.key, segment


def _put_head_beside(
    layout: Layout, cfg: LogConfig, ws: ChainPosition[Any], plan: HeadPlan, deadline_ms: int | None,
    journal: CommitJournal, beside: PutIfAbsent | None, ahead: Sequence[str],
    confirmed: dict[str, decide.Confirmed],
) -> Proc[HeadOutcome]:
    """The head PUT in one round trip with the segment ``beside`` it and the GETs of
    segments the next flush will merge (``ahead``); then :func:`_put_head` decides.
    ``confirmed`` gets the segment, if its PUT plainly succeeded."""
    # The head does not reference the segment (it keeps the entries inline), so both
    # go out together, with the GETs of segments the next flush will merge.
    batch: list[Op] = [_head_op(layout, ws, plan.body), *(Get(k, segment_decoder(k)) for k in ahead)]
    if beside is not None:
        batch.append(beside)
    # As _put_head does before each PUT: nothing goes out past the deadline (the
    # objects written above may be collected from then on). Nothing is sent yet.
    if deadline_ms is not None and cfg.env.now_ms() > deadline_ms:
        raise StoreError(f"commit to session {ws.session} passed its deadline before its head went out; "
                         "nothing acknowledged", key=layout.head(ws.session))
    doubted = journal.in_doubt
    if journal.session is None or journal.session == ws.session:
        journal.in_doubt = True  # the head PUT is in this batch
    results: list[Any] = yield Parallel(tuple(batch))
    head_result = results[0]
    if beside is not None:
        # Confirmed only on a plain 2xx: anything else leaves it unconfirmed, and a
        # later commit writes another (nothing is lost, the head holds every entry).
        seg_result = results[-1]
        if decide.after_create(decide.classify(seg_result)) is decide.CreateStep.DONE:
            confirmed[beside.key] = decide.Confirmed.OURS
        else:
            log.info("session %s: segment %s beside the head not confirmed (%s); kept inline",
                     ws.session, beside.key, seg_result)
    fetched = _fetched_ahead(ahead, results[1:1 + len(ahead)])
    outcome = yield from _put_head(layout, cfg, ws, plan, deadline_ms, journal, first=head_result, doubted=doubted)
    return replace(outcome, fetched=fetched)


def merge_ahead(cfg: LogConfig, ws: ChainPosition[Any], plan: HeadPlan) -> list[str]:
    """Segments the next flush will merge that this writer does not hold in memory.

    They are read in this commit's round trip (beside its head PUT), so that flush
    needs no GET of its own: every commit stays one round trip. Only when a flush is
    near (this commit flushed, or its head is past half the tail bound), so a writer
    holds them no longer than it must.
    """
    if plan.segment_key is None and len(plan.body) <= cfg.tail_max_bytes // 2:
        return []
    return [k for k in _next_merge(cfg, plan) if k not in ws.cache and k != plan.segment_key]


def _next_merge(cfg: LogConfig, plan: HeadPlan) -> tuple[str, ...]:
    """The segments the flush after ``plan``'s commit will merge (if it comes before
    any other flush)."""
    h = plan.head
    segments, levels = h.segments, h.levels
    if plan.parallel and h.pending is not None:  # the next commit promotes it first
        keep = len(segments) - h.pending.take
        segments, levels = (*segments[:keep], h.pending.key), (*levels[:keep], h.pending.level)
    take = plan_merge(levels, cfg.fanout).take
    return tuple(segments[len(segments) - take:]) if take else ()


def _fetched_ahead(keys: Sequence[str], results: Sequence[Any]) -> dict[str, tuple[Entry, ...]]:
    """The entries of the segments :func:`merge_ahead` named that came back whole; the
    rest are read again when the merge needs them (and checked then, like any)."""
    out: dict[str, tuple[Entry, ...]] = {}
    for key, res in zip(keys, results, strict=True):
        if isinstance(res, Segment):  # decoded by the driver as it arrived
            out[key] = res.entries
        elif isinstance(res, Blob):
            try:
                out[key] = decode_segment(res.body, key).entries
            except (CorruptionError, FormatVersionError):  # as the drivers' decode returns it: skipped
                continue
    return out


def advance(
    cfg: LogConfig, ws: ChainPosition[Any], plan: HeadPlan, etag: str, state: S,
    confirmed: Mapping[str, decide.Confirmed], fetched: Mapping[str, tuple[Entry, ...]] | None = None,
) -> ChainPosition[S]:
    head = plan.head
    pending = head.pending
    ours = None
    level = dict(zip(head.segments, head.levels, strict=True))
    if pending is not None and plan.parallel and confirmed.get(pending.key) is decide.Confirmed.OURS:
        ours = pending.key
        level[pending.key] = pending.level
    # Kept in memory: segments below cache_levels, and whatever the next flush merges
    # (our own pending segment, segments read ahead): never more than one merge's worth.
    wanted = set(_next_merge(cfg, plan))

    def keep(k: str) -> bool:
        return k in level and (level[k] < cfg.cache_levels or k in wanted or k == ours)

    cache = {k: v for k, v in ws.cache.items() if keep(k)}
    cache.update((k, v) for k, v in (fetched or {}).items() if keep(k))
    if plan.segment_key is not None and keep(plan.segment_key):
        cache[plan.segment_key] = plan.segment_entries
    return ChainPosition(ws.session, head, etag, state, cache, ours)


def adopt(ws: ChainPosition[Any], head: Head, etag: str, state: S) -> ChainPosition[S]:
    """Continue from a stored head that ends with our own entries (no competitor).

    Its pending segment, if any, is not taken as confirmed (whether our own PUT of it
    succeeded is not known here): a later commit writes another if it needs one.
    """
    live = set(head.segments)
    return ChainPosition(ws.session, head, etag, state, {k: v for k, v in ws.cache.items() if k in live})


def takeover_position(ws: ChainPosition[S], tomb: Head, etag: str, now: int) -> ChainPosition[S]:
    """A new session's position taking over ``tomb``, the tombstone of an expired session
    at its id: its first head replaces the tombstone with If-Match on ``etag`` (a racing
    writer or sweep wins), and gc counts its grace for the old segments from ``now``."""
    return replace(ws, head=replace(ws.head, version=tomb.version, retired_at=now), etag=etag)


def stale_position(ws: ChainPosition[S], done: Sequence[Entry], state: S) -> ChainPosition[S]:
    if not done:
        return replace(ws, etag=STALE_ETAG)
    known = replace(ws.head, seq=done[-1].seq, hash=done[-1].hash, tail=(), segments=(), levels=(), pending=None)
    return ChainPosition(ws.session, known, STALE_ETAG, state, {})
