"""Retention: which sessions were active since a time, and expiring idle ones.

**Active since T** (:func:`active_sessions`): the activity index
(:mod:`s3log._protocol.activity`) holds a marker per session per UTC day it was committed to,
so the sessions active since T are the markers of the days from T to today: LISTs
proportional to the active sessions, no head read. The index is trusted for a
window only from the day *after* its earliest day folder (that day may predate the
first writer that wrote markers, or have been pruned part way); otherwise every
session is listed and its head read (``updated_at >= T``).

**Expire** (:func:`expire`): a session whose last commit (``head.updated_at``) is
older than ``idle_for`` is deleted: its head is DELETEd with ``If-Match`` on the ETag
just read, and gc collects its segments. The sweep writes nothing (no PUT at all), so
a role that may only expire and collect cannot write or alter any history
(docs/decisions/0036). The If-Match makes the sweep atomic against a writer:

- a writer that committed after the head was read wins: the DELETE meets 412 and the
  session is kept (reported in ``raced``);
- a writer whose commit comes after the DELETE meets 404 on its own If-Match PUT:
  nothing of that commit is stored or acknowledged, and it raises SessionNotFound, as
  after ``Log.delete``;
- readers get :class:`~s3log.errors.SessionNotFound`; a reader that read the head
  before the DELETE and then misses a segment gc collected reads the head again and
  gets SessionNotFound too, never a chain with missing links. Forks of an expired
  session stay readable (their seed makes them self-contained); their lineage ends at
  the parent, as at a deleted one. The id is free: a new session may be created there.

A store that cannot make a DELETE conditional (obstore) cannot expire: a DELETE by key
would delete a commit acknowledged since the head was read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from s3log._format.codec import decode_head
from s3log._format.ids import uuid7_time_ms
from s3log._format.layout import Layout
from s3log._format.times import to_ms
from s3log._format.values import Head
from s3log._protocol import activity, decide, ops
from s3log._protocol.listing import list_all, list_head_rows, list_session_ids, matches
from s3log._protocol.ops import Delete, DeleteIfMatch, Get, Proc
from s3log._protocol.read import check_head
from s3log.config import ACTIVITY_KEEP_DAYS, LogConfig
from s3log.errors import (
    ConditionalDeleteUnsupported,
    CorruptionError,
    FormatVersionError,
    InvalidArgumentError,
    ObjectNotFound,
    StoreError,
)
from s3log.results import ActiveSessions, ExpireProgress, ExpireReport

#: Heads read (and deleted) per round trip of a sweep.
EXPIRE_BATCH = 1000


#: The longest idle threshold (or ``since`` window) taken: 100 years, as the CLI's
#: durations. Past it the day index's dates leave what a date can hold.
MAX_IDLE_MS = 36_500 * 86_400_000


def idle_ms(idle_for: object, name: str = "idle_for") -> int:
    """``idle_for`` (a timedelta or ms) as a positive number of ms, at most
    :data:`MAX_IDLE_MS`; InvalidArgumentError otherwise."""
    if isinstance(idle_for, timedelta):
        # Rounded up: a positive threshold under a millisecond is one millisecond, not none.
        ms = -(-(idle_for // timedelta(microseconds=1)) // 1000)
    elif isinstance(idle_for, int) and not isinstance(idle_for, bool):
        ms = idle_for
    else:
        raise InvalidArgumentError(name, f"must be a timedelta or a number of ms, not {idle_for!r}")
    if ms <= 0:
        raise InvalidArgumentError(name, f"must be positive, not {idle_for!r}")
    if ms > MAX_IDLE_MS:
        raise InvalidArgumentError(name, f"must be at most 100 years ({MAX_IDLE_MS} ms), not {idle_for!r}")
    return ms


def since_ms(since: object, now: int) -> int:
    """``since`` as ms since the epoch (:func:`s3log._format.times.to_ms`: ms, a datetime, an ISO
    string, or a timedelta or duration back from ``now``, the log's clock)."""
    if isinstance(since, timedelta):
        return now - idle_ms(since, "since")  # positive, at most 100 years
    return to_ms(since, "since", now_ms=now)


# ------------------------------------------------------------------------ active since


def index_covers(layout: Layout, since_ms: int) -> Proc[bool]:
    """Whether the activity index is complete from the day of ``since_ms`` on (one LIST).

    Its earliest day folder may be partial (writers without the index, or a prune
    part way); every later day is complete as long as every writer of the prefix has
    ``LogConfig.activity_index`` on.
    """
    page = yield from ops.list_page(activity.activity_prefix(layout), delimiter="/", max_keys=1)
    if not page.prefixes:
        return False
    first = page.prefixes[0][len(activity.activity_prefix(layout)):].rstrip("/")
    return first < activity.day_of(since_ms)


def indexed_ids(layout: Layout, since_ms: int) -> Proc[list[str]]:
    """Session ids with a marker on the day of ``since_ms`` or later (one LIST per 1,000 markers)."""
    base = activity.activity_prefix(layout)
    found: set[str] = set()
    token: str | None = None
    start = base + activity.day_of(since_ms)  # every key of that day and later sorts after this
    while True:
        page = yield from ops.list_page(base, token=token, start_after=start)
        for o in page.objects:
            _, _, sid = o.key[len(base):].partition("/")
            if sid:
                found.add(sid)
        token = page.next_token
        if token is None:
            return sorted(found, reverse=True)


def session_ids_since(layout: Layout, since_ms: int, prefix: str = "") -> Proc[list[str]]:
    """Session ids starting with ``prefix`` that may have been committed to since ``since_ms``,
    newest first: never one fewer than were, possibly more (no head is read).

    From the activity index when it covers the window (one LIST to check, then one per
    1,000 markers): a session committed to at or after ``since_ms`` has a marker on that
    day or later, and so does one committed to earlier that day (or deleted since).
    Otherwise every id with the prefix (one LIST per 1,000 sessions): still a superset.
    What ``scan(since=...)`` reads instead of every session.
    """
    if (yield from index_covers(layout, since_ms)):
        return [s for s in (yield from indexed_ids(layout, since_ms)) if s.startswith(prefix)]
    return (yield from list_session_ids(layout, prefix))


def active_sessions(layout: Layout, since_ms: int, *, batch: int = EXPIRE_BATCH) -> Proc[ActiveSessions]:
    """The sessions committed to since ``since_ms`` (see :class:`ActiveSessions`)."""
    if (yield from index_covers(layout, since_ms)):
        return ActiveSessions((yield from indexed_ids(layout, since_ms)), True)
    ids = yield from list_session_ids(layout)
    active: list[str] = []
    for i in range(0, len(ids), batch):
        rows = yield from list_head_rows(layout, ids[i : i + batch])
        active += [r.session for r in rows
                   if r.head is not None and not r.head.expired and r.head.updated_at >= since_ms]
    return ActiveSessions(active, False)


# ----------------------------------------------------------------------------- expire


def _delete_heads(
    layout: Layout, doomed: Sequence[tuple[Head, str]]
) -> Proc[tuple[list[str], list[str], list[str]]]:
    """DELETE the heads of ``doomed`` (head, ETag) with If-Match; (expired, raced, errors)."""
    results = yield from ops.parallel([DeleteIfMatch(layout.head(h.session), etag) for h, etag in doomed])
    unsupported = [r for r in results if isinstance(r, ConditionalDeleteUnsupported)]
    if unsupported:
        # Nothing was sent (obstore). A DELETE by key would delete a commit acknowledged
        # since the head was read: expiry has no safe fallback, so it stops here.
        raise ConditionalDeleteUnsupported(
            "expire needs a store that can DELETE with If-Match (S3Store, AsyncS3Store, MemoryStore); "
            f"{unsupported[0]} -- nothing was deleted", key=unsupported[0].key)
    expired: list[str] = []
    raced: list[str] = []
    errors: list[str] = []
    unknown: list[tuple[Head, str]] = []
    for (head, etag), res in zip(doomed, results, strict=True):
        reply = decide.classify(res)
        if reply is decide.Reply.OK:
            expired.append(head.session)
        elif reply is decide.Reply.PRECONDITION:
            raced.append(head.session)  # committed to since its head was read: kept
        elif reply is decide.Reply.NOT_FOUND:
            continue  # deleted meanwhile: nothing to expire
        elif reply in (decide.Reply.UNKNOWN, decide.Reply.CONFLICT):
            unknown.append((head, etag))
        else:
            errors.append(f"{head.session}: {res}")
    if unknown:
        # The DELETE may have landed: the head says (gone, the same ETag, or moved on).
        got = yield from ops.parallel([Get(layout.head(h.session)) for h, _ in unknown])
        for (head, etag), blob in zip(unknown, got, strict=True):
            if isinstance(blob, ObjectNotFound):
                expired.append(head.session)
            elif isinstance(blob, StoreError) or blob.etag == etag:
                errors.append(f"{head.session}: expiry outcome unknown; the next sweep decides")
            else:
                raced.append(head.session)  # replaced since (a commit): kept
    return expired, raced, errors


def expire(
    layout: Layout,
    cfg: LogConfig,
    *,
    idle_for_ms: int,
    now: int,
    labels: Mapping[str, str] | None = None,
    dry_run: bool = False,
    progress: Callable[[ExpireProgress], None] | None = None,
    batch: int = EXPIRE_BATCH,
    prune_activity: bool = True,
) -> Proc[ExpireReport]:
    """Delete every session idle for ``idle_for_ms`` (see the module docstring).

    Requests: one LIST per 1,000 sessions; a head GET only for sessions that may be
    idle (not created within the threshold, and, when the index covers it, without a
    marker since); one If-Match DELETE per expired session; batches of ``batch`` heads,
    each batch one parallel round trip (bounded by ``LogConfig.max_parallel``).
    """
    cutoff = now - idle_for_ms
    ids = yield from list_session_ids(layout)
    candidates, kept = yield from _candidates(layout, ids, cutoff)
    tally = _Tally(kept=kept)
    done = kept
    if progress is not None:
        progress(ExpireProgress(done, len(ids), 0, kept, 0))
    heads_read = 0
    for i in range(0, len(candidates), batch):
        chunk = candidates[i : i + batch]
        # One GET per head, in parallel: the head decides, and its ETag guards the tombstone.
        blobs = yield from ops.parallel([Get(layout.head(sid)) for sid in chunk])
        heads_read += len(chunk)
        doomed = yield from tally.judge(layout, chunk, blobs, cutoff, labels, dry_run=dry_run)
        if doomed:
            e, r, err = yield from _delete_heads(layout, doomed)
            tally.expired += e
            tally.raced += r
            tally.kept += len(r)
            tally.errors += err
        done += len(chunk)
        if progress is not None:
            progress(ExpireProgress(done, len(ids), len(tally.expired), tally.kept, len(tally.errors)))
    pruned: list[str] = []
    if prune_activity:
        pruned = yield from prune_activity_days(layout, now - max(idle_for_ms, ACTIVITY_KEEP_DAYS * activity.DAY_MS),
                                                dry_run=dry_run)
    return ExpireReport(len(ids), tally.expired, tally.kept, tally.raced, tally.skipped, tally.errors, pruned,
                        heads_read, dry_run)


def _candidates(layout: Layout, ids: Sequence[str], cutoff: int) -> Proc[tuple[list[str], int]]:
    """The sessions of ``ids`` that may be idle since ``cutoff`` (their heads are read),
    and how many are known not to be without a read."""
    recent: set[str] = set()
    if (yield from index_covers(layout, cutoff)):
        recent = set((yield from indexed_ids(layout, cutoff)))
    candidates: list[str] = []
    kept = 0
    for sid in ids:
        created = uuid7_time_ms(sid)
        # Created after the cutoff, or committed to since its day: not idle, no GET needed.
        if (created is not None and created >= cutoff) or sid in recent:
            kept += 1
        else:
            candidates.append(sid)
    return candidates, kept


@dataclass(slots=True)
class _Tally:
    """What a sweep of ``expire`` has found so far, for its report."""

    expired: list[str] = field(default_factory=list)
    raced: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    kept: int = 0
    skipped: int = 0

    def judge(
        self, layout: Layout, chunk: Sequence[str], blobs: Sequence[Any], cutoff: int,
        labels: Mapping[str, str] | None, *, dry_run: bool,
    ) -> Proc[list[tuple[Head, str]]]:
        """Judge the heads of ``chunk`` as read (``blobs``): the idle ones to delete
        (head, ETag), counting the others (a dry run counts the idle ones expired)."""
        doomed: list[tuple[Head, str]] = []
        for sid, blob in zip(chunk, blobs, strict=True):
            if isinstance(blob, ObjectNotFound):
                continue  # no head: deleted meanwhile, or a folder gc collects
            if isinstance(blob, StoreError):
                self.errors.append(f"{sid}: {blob}")
                continue
            key = layout.head(sid)
            try:
                head = decode_head(blob.body, key)
                yield from check_head(layout, head, sid, key)
            except (CorruptionError, FormatVersionError) as exc:
                self.errors.append(f"{sid}: {exc}")  # never expired on a guess
                continue
            if head.expired:
                continue  # a tombstone already: gc's business
            if head.updated_at >= cutoff:
                self.kept += 1
            elif not matches(head, labels):
                self.skipped += 1
            elif dry_run:
                self.expired.append(sid)
            else:
                doomed.append((head, blob.etag))
        return doomed


def prune_activity_days(layout: Layout, before_ms: int, *, dry_run: bool = False) -> Proc[list[str]]:
    """Delete the activity index's day folders older than the day of ``before_ms``; return the days.

    Whole days only (oldest first), so the index's earliest day stays complete.
    """
    base = activity.activity_prefix(layout)
    _, prefixes = yield from list_all(base, delimiter="/")
    limit = activity.day_of(before_ms)
    days = [p[len(base):].rstrip("/") for p in prefixes]
    old = [d for d in days if d < limit]
    if dry_run or not old:
        return old
    for day in old:
        objects, _ = yield from list_all(activity.day_dir(layout, day))
        if objects:
            results = yield from ops.parallel([Delete(o.key) for o in objects])
            for res in results:
                if res is not None:
                    raise res
    return old
