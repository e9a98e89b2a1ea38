"""The s3log protocol, written once, as sans-IO procedures.

Each procedure is a generator that yields :mod:`s3log._protocol.ops` requests and receives
their results (or has the store's error thrown in). It never touches a socket: the
blocking and the asyncio drivers (:mod:`s3log._drive.drivers`) run the same procedures, so
the commit decision table, chain verification, merging and forking are reviewed and
tested in one place.

The values procedures return live in :mod:`s3log.results`, the tunables they read in
:mod:`s3log.config`; both are re-exported here for the code that imported them from
this module.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any, Generic, Literal

import cbor2

from s3log._format.chain import ChainVerifier, PendingEntry, build_chain, check_fork_origin, fork_entry_data
from s3log._format.codec import (
    COMPACTED_FIELD,
    FORK_KIND,
    MAX_INTERNAL_DEPTH,
    AppendKey,
    Entry,
    Head,
    Lease,
    ParentRef,
    Pending,
    RunColumns,
    Segment,
    append_digest,
    check_kind,
    check_ts,
    decode_head,
    decode_segment,
    decode_segment_columns,
    dumps,
    encode_head,
    encode_segment,
    entry_record,
    loads,
    new_entry,
    normalize_data,
    tail_run,
)
from s3log._format.ids import validate_session_id
from s3log._format.layout import MAX_SEGMENTS, Layout, parse_segment_key
from s3log._format.manifest import plan_merge, segment_ranges, segments_for_range
from s3log._protocol import activity, decide, ops
from s3log._protocol.ops import (
    Blob,
    Delete,
    DeleteIfMatch,
    Get,
    ObjectInfo,
    Op,
    Parallel,
    Proc,
    PutIfAbsent,
    PutIfMatch,
)
from s3log.config import LogConfig
from s3log.errors import (
    AppendKeyReused,
    ConditionalDeleteUnsupported,
    ConflictError,
    CorruptionError,
    EntryNotFound,
    FormatVersionError,
    InvalidArgumentError,
    InvalidEntryError,
    InvalidSessionIdError,
    ObjectNotFound,
    PreconditionFailed,
    SegmentMissing,
    SessionExists,
    SessionExpired,
    SessionNotFound,
    SessionReplaced,
    StoreError,
)
from s3log.reducer import Reducer, S, fold, replay
from s3log.results import (
    AckedEntry,
    CommitResult,
    DeletePlan,
    ForkInfo,
    GcReport,
    HeadRow,
    LineageStep,
    ProbeReport,
    ProbeSeen,
    acked_in,
)
from s3log.signing import SignatureError, signed_head, verified_head

log = logging.getLogger("s3log")

OnConflict = Literal["fork", "raise"]
#: An ETag no object has: a writer holding it meets a 412 on its next commit.
STALE_ETAG = '"s3log-stale"'


# ------------------------------------------------------------------------- internal state


@dataclass(frozen=True, slots=True)
class SessionData:
    """A session as read and verified: head, ETag, entries, and entries by segment.

    ``confirmed``: the head's pending segment, when it was read and verified too.
    """

    session: str
    head: Head
    etag: str
    entries: list[Entry]
    segments: dict[str, tuple[Entry, ...]]
    confirmed: str | None = None


@dataclass(frozen=True, slots=True)
class ChainPosition(Generic[S]):
    """Where a writer stands on its chain: the head it builds on, its ETag, the
    reducer state of the entries up to there.

    ``etag`` is None while the session is not stored yet (lazy creation).
    ``cache`` holds the entries of small segments of the manifest, for merging.
    Immutable: every commit procedure returns a new one.
    """

    session: str
    head: Head
    etag: str | None
    state: S
    cache: Mapping[str, tuple[Entry, ...]]
    #: The key of the head's pending segment if this writer saw it stored as written
    #: (its own create-only PUT, or a GET verified against the chain): only then may
    #: its next commit move it into the manifest (see :func:`s3log._protocol.decide.pending_step`).
    confirmed: str | None = None


@dataclass(frozen=True, slots=True)
class _HeadPlan:
    head: Head
    body: bytes
    segment_key: str | None
    segment_body: bytes | None
    segment_entries: tuple[Entry, ...]
    segment_level: int
    #: The segment goes out beside the head (which lists it as pending), not before it.
    parallel: bool = False


@dataclass(frozen=True, slots=True)
class _HeadOutcome:
    kind: Literal["committed", "conflict"]
    etag: str | None
    found: tuple[Head, str] | None
    #: Segments read ahead for the next merge (see :func:`merge_ahead`).
    fetched: Mapping[str, tuple[Entry, ...]] = field(default_factory=dict)
    #: Some head PUT of this write had an unknown outcome: it may have landed.
    uncertain: bool = False


@dataclass(frozen=True, slots=True)
class ForkDoubt:
    """A fork whose child's head PUT may have landed unacknowledged: enough to find the
    child and to rebuild its first entries exactly (the same id, creator nonce and time;
    the fork entry's seed follows from the parent position, which is the same)."""

    parent: ParentRef
    child: str
    creator: str
    ts: int
    #: How many of the batch's entries (after the fork entry) a PUT to the child may
    #: have carried: only those may be there, and only those are looked for (0025).
    carried: int = 0


@dataclass(slots=True)
class CommitJournal:
    """What a commit in progress may have stored, kept true before every head PUT goes
    out and after every definite reply, so that whoever ran the commit knows it after
    the commit raised or was abandoned at any point (cancelled, its process killed).

    ``in_doubt``: a head PUT of this commit to ``session`` (the writer's own session)
    may have stored some of its entries (it was sent, and no definite reply or re-read
    has ruled it out). ``fork``: a fork child that may hold some of them, its head PUT
    (or a later one of this commit, continuing there) undecided (see
    :class:`ForkDoubt`). A commit that raises with neither stored nothing: its entries
    are simply still pending. The two are kept apart so that a doubt about a child
    never makes the next commit look for the entries in the parent, where equal entries
    are another writer's ([0025](docs/decisions/0025-landed-only-after-an-undecided-put.md)).
    """

    session: str | None = None
    in_doubt: bool = False
    #: The forks that may hold some of the entries, by the parent position they fork
    #: from (a fork of a fork has its own): those of earlier commits, kept or resolved
    #: by this one.
    forks: dict[ParentRef, ForkDoubt] = field(default_factory=dict)
    #: A PUT of this commit to a fork's child may have carried its entries.
    fork_sent: bool = False


# ------------------------------------------------------------------------- basic reads


#: The head field that makes a head a tombstone (s3log._protocol.retention): the session expired.
EXPIRED_FIELD = "expired"


#: The head field a compaction writes (:func:`compact_session`), ``COMPACTED_FIELD``
#: (defined in s3log._format.codec, as signing covers it): the end (``seq``, ``hash``) of the
#: chain it replaced, the hashes of its last entries (``tips``), ``n``, how many
#: compactions the session has had, and the marks of the ones before (``prev``). Kept by
#: every later commit. Readers ignore it; a writer settling a commit that may have landed
#: before the compaction decides from it (:func:`_landed_before_compaction`).


#: How many of the replaced chain's last entries a compaction's mark names (by the
#: first ``_TIP`` bytes of their hashes): a writer whose entries landed there, built on
#: by fewer commits than that, can tell they did.
COMPACTION_WINDOW = 32
_TIP = 16
#: How many compactions' marks a head keeps (the newest with the older ones in its
#: ``prev``): a writer settles against the first compaction after the head it built on.
COMPACTION_MARKS = 4


def compactions(head: Head) -> int:
    """How many times the session of ``head`` was compacted (its ``compacted.n``; 0 if never)."""
    mark = head.extra.get(COMPACTED_FIELD)
    n = mark.get("n") if isinstance(mark, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def same_life(a: Head, b: Head) -> bool:
    """Whether two heads of one id are the same session: created at the same time by the
    same creator (a session created again at the id, over a tombstone or after a delete,
    has a new ``created_at`` and creator nonce)."""
    return a.created_at == b.created_at and a.creator == b.creator


def tombstone_hash(session: str, last_hash: bytes | None) -> bytes:
    """The ``hash`` of the tombstone of ``session`` whose last entry had ``last_hash``
    (docs/format.md, "Head"): names no entry, and binds the tombstone to the chain it
    ended, so a signature over the head's hash covers its ``expired`` too."""
    return hashlib.sha256(b"s3log.expired\0" + session.encode() + b"\0" + (last_hash or b"")).digest()


def is_expired(head: Head) -> bool:
    """Whether ``head`` is the tombstone of an expired session (it lists no entries)."""
    return isinstance(head.extra.get(EXPIRED_FIELD), dict)


def read_head(layout: Layout, session: str, *, expired_ok: bool = False) -> Proc[tuple[Head, str]]:
    """GET and decode a session's head; a tombstone raises SessionExpired unless ``expired_ok``."""
    key = layout.head(session)
    try:
        blob = yield from ops.get(key)
    except ObjectNotFound:
        raise SessionNotFound(session) from None
    head = decode_head(blob.body, key)
    yield from check_head(layout, head, session, key)
    if is_expired(head) and not expired_ok:
        raise _expired(head)
    return head, blob.etag


def _expired(head: Head) -> SessionExpired:
    """The error of reading the tombstone ``head`` as a session."""
    at = head.extra[EXPIRED_FIELD].get("at")
    return SessionExpired(head.session, at if isinstance(at, int) else None)


def check_head(layout: Layout, head: Head, session: str, key: str) -> Proc[None]:
    """Refuse a head that names another session or segments outside its own folder, or
    (with trusted keys, ``layout.verifier``) whose signature does not verify.

    Runs before any segment is fetched, so a hostile head cannot make a reader GET
    an arbitrary key (or thousands of them). The signature is checked by a
    :class:`~s3log._protocol.ops.Verify` op the driver performs.
    """
    if head.session != session:
        raise CorruptionError(key, f"head belongs to session {head.session}, expected {session}")
    if len(head.segments) > MAX_SEGMENTS:
        raise CorruptionError(key, f"head lists {len(head.segments)} segments (at most {MAX_SEGMENTS})")
    for seg in head.segments:
        if not layout.is_segment_of(session, seg):
            raise CorruptionError(key, f"head lists {seg!r}, which is not a segment key of session {session}")
    if head.pending is not None and not layout.is_segment_of(session, head.pending.key):
        raise CorruptionError(key, f"head names {head.pending.key!r} as pending, which is not a segment key of "
                                   f"session {session}")
    # Signed heads: every read path comes through here.
    yield from verified_head(layout.verifier, head, key, layout.log_id)
    if layout.verifier is not None and is_expired(head):
        # ``expired`` is outside the signed payload: it is what it says only if the signed
        # seq and hash are the tombstone's of the chain it names (else a signed live
        # head, with ``expired`` added, would read as expired; docs/format.md).
        gone = head.extra[EXPIRED_FIELD]
        if head.seq != gone["seq"] or head.hash != tombstone_hash(session, gone["hash"]):
            raise SignatureError(key, session, head.sig.key_id if head.sig else None,
                                 "its 'expired' field does not match the signed seq and hash (a tombstone's "
                                 "hash names the chain it ended)", seq=head.seq)


def _read_head_or_none(layout: Layout, session: str) -> Proc[tuple[Head, str] | None]:
    # A tombstone is returned: a writer whose head PUT met one forks (its entries live on).
    try:
        return (yield from read_head(layout, session, expired_ok=True))
    except SessionNotFound:
        return None


def fetch_segments(layout: Layout, session: str, keys: Sequence[str]) -> Proc[dict[str, Segment]]:
    """GET segments concurrently (one round trip); a missing one is corruption."""
    if not keys:
        return {}
    # Each segment is decoded as soon as its body arrives (Get.decode), while the
    # others are still in transfer.
    results: list[Any] = yield Parallel(tuple(Get(k, _segment_decoder(k)) for k in keys))
    return _decoded_segments(session, keys, results)


def _segment_decoder(key: str) -> Callable[[Blob], Segment]:
    return lambda blob: decode_segment(blob.body, key)


def load(
    layout: Layout, session: str, *, upto_seq: int | None = None, confirm_pending: bool = False
) -> Proc[SessionData]:
    """Read and verify a session: the head, then its segments in parallel.

    With ``upto_seq`` only the segments holding entries ``0..upto_seq`` are read, and
    the chain is verified up to there. ``confirm_pending`` (a writer about to
    continue the session): read the head's pending segment in the same round trip and
    check it, so the writer's next commit can move it into the manifest.
    """
    head, etag = yield from read_head(layout, session)
    return (yield from load_latest_from(layout, head, etag, upto_seq=upto_seq, confirm_pending=confirm_pending))


def load_latest_from(
    layout: Layout, head: Head, etag: str, *, upto_seq: int | None = None, confirm_pending: bool = False
) -> Proc[SessionData]:
    """:func:`load_from_head` for a head just read as the current one: if a segment it
    lists is gone because the head has moved since, load from the new head instead."""
    for _ in range(3):
        try:
            return (yield from load_from_head(layout, head, etag, upto_seq=upto_seq, confirm_pending=confirm_pending))
        except SegmentMissing as missing:
            head, etag = yield from _moved_on(layout, head.session, etag, missing)
    return (yield from load_from_head(layout, head, etag, upto_seq=upto_seq, confirm_pending=confirm_pending))


def _moved_on(layout: Layout, session: str, etag: str, missing: SegmentMissing) -> Proc[tuple[Head, str]]:
    """After a segment the head at ``etag`` lists was found missing: the head to read
    from now, if it moved (a slow reader can meet a segment gc collected after a newer
    head stopped listing it). Raises SessionNotFound / SessionExpired if the session was
    deleted or expired meanwhile, and ``missing`` if the head did not move (corruption)."""
    current = yield from _read_head_or_none(layout, session)
    if current is None:
        raise SessionNotFound(session, "it was deleted while being read") from None
    if decide.etags_equal(current[1], etag):
        raise missing
    if is_expired(current[0]):
        raise _expired(current[0]) from None  # expired meanwhile: no chain to read
    return current


def load_from_head(
    layout: Layout, head: Head, etag: str, *, upto_seq: int | None = None, confirm_pending: bool = False
) -> Proc[SessionData]:
    """:func:`load` for a head already read: its segments in parallel, then verify."""
    session = head.session
    if upto_seq is not None and not -1 <= upto_seq <= head.seq:
        raise EntryNotFound(session, f"seq {upto_seq} (the session ends at seq {head.seq})")
    # Only the entries after a prefix link it to the head: with trusted keys, whose
    # signature covers the head's last hash and not its (unsigned) manifest, a prefix
    # read alone would return whatever segments a forged manifest names. So it reads and
    # verifies the whole chain, then keeps the prefix.
    anchored = upto_seq if layout.verifier is None else None
    keys = list(head.segments) if anchored is None else segments_for_range(head, 0, anchored)
    pending_key = None
    if confirm_pending and upto_seq is None and head.pending is not None and promotable(head):
        pending_key = head.pending.key
    if pending_key is not None and pending_key not in keys:
        # Fetched with the segments (one round trip); a pending segment may be missing
        # (its PUT failed, or a later head dropped it and gc collected it): then it is
        # simply not confirmed.
        results: list[Any] = yield Parallel((*(Get(k, _segment_decoder(k)) for k in keys), Get(pending_key)))
        pending_blob = results[-1]
        segs = _decoded_segments(session, keys, results[:-1])
    else:
        pending_blob = None
        segs = yield from fetch_segments(layout, session, keys)
    _verify_runs(layout, head, [(k, segs[k].session, segs[k].entries) for k in keys], upto_seq=anchored)
    by_key: dict[str, tuple[Entry, ...]] = {k: segs[k].entries for k in keys}
    entries: list[Entry] = [e for k in keys for e in segs[k].entries]
    if _reads_tail(head, anchored):
        entries.extend(head.tail)
    if upto_seq is not None:
        entries = entries[: upto_seq + 1]
    confirmed = None
    if pending_key is not None and isinstance(pending_blob, Blob):
        seg_entries = _pending_entries(head, pending_key, pending_blob.body, entries)
        if seg_entries is not None:
            confirmed = pending_key
            by_key[pending_key] = seg_entries
    return SessionData(session, head, etag, entries, by_key, confirmed)


#: A run of verified entries as a bulk reader gets them (:func:`load_runs_from_head`):
#: a v2 segment's columns, or entries (a v1 segment's, the head's tail).
Run = RunColumns | tuple[Entry, ...]


def load_runs_from_head(layout: Layout, head: Head, etag: str) -> Proc[tuple[Head, list[Run]]]:
    """:func:`load_latest_from` for a bulk reader: the verified chain as the runs it is
    stored in, each segment's in the head's order, then the tail. A v2 segment comes as
    its verified columns (:func:`s3log._format.codec.decode_segment_columns`): no Entry is made.

    The checks are :func:`load_from_head`'s, with its errors: every segment decoded,
    the chain verified from its first entry to the head (:class:`ChainVerifier` at every
    join, then the tail and the head's last entry), a fork's origin. A segment that is
    missing or unreadable is left to :func:`load_latest_from`, which reads a moved head
    again or raises what it meets.
    """
    keys = list(head.segments)
    results: list[Any] = (yield Parallel(tuple(Get(k, _columns_decoder(k)) for k in keys))) if keys else []
    if any(isinstance(r, BaseException) for r in results):
        data = yield from load_latest_from(layout, head, etag)
        return data.head, [*(data.segments[k] for k in data.head.segments), data.head.tail]
    # Decoded by the driver as it arrived, or a plain blob from one that does not: then
    # every segment is decoded before any is verified, as load_from_head does, so the
    # same error is raised (a garbled segment before a broken link in an earlier one).
    decoded = [res if isinstance(res, tuple) else decode_segment_columns(res.body, key)
               for key, res in zip(keys, results, strict=True)]
    _verify_runs(layout, head, [(k, seg_session, run) for k, (seg_session, run) in zip(keys, decoded, strict=True)])
    # The tail as the columns its decoder made (no Entry made), when it did.
    return head, [*(run for _, run in decoded), tail_run(head)]


def _reads_tail(head: Head, upto_seq: int | None) -> bool:
    """Whether a read up to ``upto_seq`` (None: all) takes entries from the head's tail."""
    return upto_seq is None or upto_seq >= head.tail_first_seq


def _verify_runs(
    layout: Layout, head: Head, segments: Sequence[tuple[str, str, Run]], *, upto_seq: int | None = None
) -> None:
    """Verify a chain read as runs, the one sequence every read of a whole chain (or a
    prefix) goes through: each segment ``(key, its session, its run)`` in order, where it
    joins the chain; then the tail, if the read reaches it, and (reading it all) that
    the head names the last entry; then a fork's origin."""
    verifier = ChainVerifier(head.session)
    verified: list[Run] = []
    for key, seg_session, run in segments:
        if isinstance(run, RunColumns):
            verifier.feed_columns(key, seg_session, run)
        else:
            verifier.feed_segment(key, Segment(seg_session, run))
        verified.append(run)
    head_key = layout.head(head.session)
    if _reads_tail(head, upto_seq):
        tail = tail_run(head)
        if isinstance(tail, RunColumns):
            verifier.feed_linked_columns(head_key, tail)
        else:
            verifier.feed(head_key, tail)
        verified.append(tail)
        if upto_seq is None:
            verifier.finish(head_key, head)
    if upto_seq != -1:  # a prefix of nothing (a fork at the very start) has no origin to check
        check_fork_origin(head_key, head, _first_entry(verified))


def _columns_decoder(key: str) -> Callable[[Blob], tuple[str, RunColumns | tuple[Entry, ...]]]:
    return lambda blob: decode_segment_columns(blob.body, key)


def _first_entry(runs: Sequence[Run]) -> Entry | None:
    """The first entry of a chain read as runs (made from columns if need be)."""
    for run in runs:
        if isinstance(run, RunColumns):
            # Made as the decoder makes entries (a frozen dataclass's __init__ costs 5x).
            return new_entry(run.seq, run.prev, run.kinds[0], run.ts[0], run.values[0], run.hashes[0], b"")
        if run:
            return run[0]
    return None


def _pending_entries(head: Head, key: str, body: bytes, entries: Sequence[Entry]) -> tuple[Entry, ...] | None:
    """The entries of the pending segment ``key`` read as ``body``, if it holds exactly
    entries ``first..pending.last`` of the verified chain ``entries``; else None.

    Each record's hash is checked as it is decoded and each hash is compared with the
    verified chain's, so equal hashes mean equal entries.
    """
    assert head.pending is not None
    try:
        seg = decode_segment(body, key)
    except CorruptionError:
        log.warning("session %s: pending segment %s does not decode; not promoted", head.session, key)
        return None
    got = seg.entries
    first = pending_first(head)
    try:
        if got:
            ChainVerifier(head.session, start_seq=got[0].seq, start_hash=got[0].prev).feed(key, got)
    except CorruptionError:
        got = ()
    if (seg.session != head.session or len(got) != head.pending.last - first + 1
            or any(e.seq != first + i or e.hash != entries[e.seq].hash for i, e in enumerate(got))):
        log.warning("session %s: pending segment %s does not match the chain; not promoted", head.session, key)
        return None
    return got


def _decoded_segments(session: str, keys: Sequence[str], results: Sequence[Any]) -> dict[str, Segment]:
    """The segments GET returned, decoded; a missing one is corruption."""
    out: dict[str, Segment] = {}
    for key, res in zip(keys, results, strict=True):
        if isinstance(res, ObjectNotFound):
            raise SegmentMissing(key, f"segment listed in the head of session {session} is missing")
        if isinstance(res, BaseException):
            raise res
        # Decoded by the driver (see fetch_segments), or a plain blob from one that does not.
        out[key] = res if isinstance(res, Segment) else decode_segment(res.body, key)
    return out


def pending_first(head: Head) -> int:
    """The first seq of the head's pending segment (carried in its key)."""
    assert head.pending is not None
    parsed = parse_segment_key(head.pending.key)
    return -1 if parsed is None else parsed[0]


def promotable(head: Head) -> bool:
    """Whether the head's pending segment fits its manifest as its writer planned it:
    it starts where the ``take`` segments it replaces start (or where the tail does),
    and ends inside the tail, at the entry its key names."""
    p = head.pending
    if p is None:
        return False
    parsed = parse_segment_key(p.key)
    if parsed is None or p.take > len(head.segments):
        return False
    first, last_hash = parsed
    ranges = segment_ranges(head)
    start = ranges[len(ranges) - p.take][1] if p.take else head.tail_first_seq
    if first != start or not head.tail_first_seq <= p.last <= head.seq:
        return False
    return head.tail[p.last - head.tail_first_seq].hash == last_hash


def load_suffix(
    layout: Layout, session: str, enough: Callable[[Sequence[Entry]], bool]
) -> Proc[tuple[Head, list[Entry]]]:
    """The newest entries of a session, read backwards until ``enough(entries)`` holds.

    The head's tail first, then one segment at a time from the end: a reader that
    needs the latest N items does not replay the whole log. The suffix read is
    verified (seqs, links, hashes, keys, and the head against its last entry).
    """
    head, etag = yield from read_head(layout, session)
    for _ in range(3):
        try:
            return (yield from _suffix_from(layout, session, head, enough))
        except SegmentMissing as missing:
            head, etag = yield from _moved_on(layout, session, etag, missing)
    return (yield from _suffix_from(layout, session, head, enough))


def _suffix_from(
    layout: Layout, session: str, head: Head, enough: Callable[[Sequence[Entry]], bool]
) -> Proc[tuple[Head, list[Entry]]]:
    """:func:`load_suffix` from ``head``, already read."""
    entries = list(head.tail)
    read: list[tuple[str, Segment]] = []
    remaining = list(head.segments)
    while remaining and (not entries or not enough(entries)):
        key = remaining.pop()
        segs = yield from fetch_segments(layout, session, [key])
        read.insert(0, (key, segs[key]))
        entries = list(segs[key].entries) + entries
    _verify_suffix(layout, head, read, entries, whole=not remaining)
    return head, entries


def _verify_suffix(
    layout: Layout, head: Head, read: Sequence[tuple[str, Segment]], entries: Sequence[Entry], *, whole: bool
) -> None:
    """Verify a suffix of ``head``'s chain: the segments ``read`` (the last ones of its
    manifest, in order), then its tail, up to the head; ``entries`` are theirs."""
    session = head.session
    head_key = layout.head(session)
    # Every segment read: the suffix is the whole chain, so it starts at seq 0 (a head
    # whose manifest and tail hold fewer entries than its seq names is corrupt, not a
    # shorter session), and an empty one is an empty session's.
    whole = whole or not entries
    verifier = ChainVerifier(session) if whole else \
        ChainVerifier(session, start_seq=entries[0].seq, start_hash=entries[0].prev)
    for key, seg in read:
        verifier.feed_segment(key, seg)
    verifier.feed(head_key, head.tail)
    verifier.finish(head_key, head)
    if whole or entries[0].seq == 0:
        check_fork_origin(head_key, head, entries[0] if entries else None)


def entry_at(layout: Layout, head: Head, seq: int) -> Proc[Entry | None]:
    """The entry at ``seq`` of the chain ``head`` describes, reading at most one segment.

    With trusted keys (``layout.verifier``), the entry is read with the rest of the
    chain after it (in one round trip) and verified up to the head (:func:`load_suffix`'s check): the
    signature covers the head's last hash, not its manifest, so one segment the
    manifest names proves nothing."""
    if seq < 0 or seq > head.seq:
        return None
    if layout.verifier is not None:
        if is_expired(head):
            return None  # a tombstone lists no entries (its seq names none)
        # The segments from the one holding ``seq`` to the end, in one round trip (not
        # one GET after another, as a suffix read that cannot know how far it goes).
        ranges = segment_ranges(head)
        start = next((i for i, (_, _, last) in enumerate(ranges) if last >= seq), len(ranges))
        keys = list(head.segments[start:])
        segs = yield from fetch_segments(layout, head.session, keys)
        read = [(k, segs[k]) for k in keys]
        suffix = [e for _, s in read for e in s.entries] + list(head.tail)
        _verify_suffix(layout, head, read, suffix, whole=start == 0)
        i = seq - suffix[0].seq if suffix else -1
        return suffix[i] if 0 <= i < len(suffix) else None
    for e in head.tail:
        if e.seq == seq:
            return e
    for key, first, last in segment_ranges(head):
        if first <= seq <= last:
            blob: Blob = yield Get(key)
            seg = decode_segment(blob.body, key)
            idx = seq - first
            if idx >= len(seg.entries) or seg.entries[idx].seq != seq:
                raise CorruptionError(key, f"segment does not hold seq {seq}", seq=seq)
            return seg.entries[idx]
    return None


def landed_prefix(layout: Layout, head: Head, entries: Sequence[Entry]) -> Proc[int]:
    """How many of ``entries`` (a commit's chain) are part of the chain ``head`` describes.

    A write whose response was lost may have landed and then been built on by
    another writer. An entry's hash commits to every entry before it, so the entries
    that landed are a prefix, found by binary search over at most a few lookups.
    """
    if not entries or entries[0].seq > head.seq:
        return 0
    base = entries[0].seq

    def landed(i: int) -> Proc[bool]:
        e = yield from entry_at(layout, head, base + i)
        return e is not None and e.hash == entries[i].hash

    if not (yield from landed(0)):
        return 0
    lo, hi = 1, min(len(entries), head.seq - base + 1)  # entries[:lo] landed; beyond hi cannot have
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if (yield from landed(mid - 1)):
            lo = mid
        else:
            hi = mid - 1
    return lo


def list_all(prefix: str, *, delimiter: str | None = None) -> Proc[tuple[list[ObjectInfo], list[str]]]:
    """Every key (and common prefix) under ``prefix``, page after page."""
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    token: str | None = None
    while True:
        page = yield from ops.list_page(prefix, delimiter=delimiter, token=token)
        objects.extend(page.objects)
        prefixes.extend(page.prefixes)
        token = page.next_token
        if token is None:
            return objects, prefixes


def _session_ids(layout: Layout, prefixes: Sequence[str]) -> list[str]:
    # A folder whose name is not a valid session id is not a session: skip it (and
    # say so) instead of failing every listing of the bucket.
    base = layout.sessions_prefix
    return _valid_ids([p[len(base):].rstrip("/") for p in prefixes if not p.endswith("/" + PROBE_DIR)], base)


def _valid_ids(names: Sequence[str], base: str) -> list[str]:
    """The ``names`` (found under ``base``) that are session ids; the others are not
    s3log's (stray objects or folders): skipped, with a warning naming them."""
    out: list[str] = []
    for name in names:
        if not name:
            continue
        try:
            validate_session_id(name)
        except InvalidSessionIdError:
            log.warning("skipping %r under %s: not a valid session id", name, base)
            continue
        out.append(name)
    return out


def list_session_ids(layout: Layout, prefix: str = "") -> Proc[list[str]]:
    """The session ids under the layout's prefix that start with ``prefix`` (every one by
    default), newest first (UUIDv7 ids sort by time); one LIST per 1,000."""
    _, prefixes = yield from list_all(layout.sessions_prefix + prefix, delimiter="/")
    return sorted(_session_ids(layout, prefixes), reverse=True)


def list_head_rows(layout: Layout, sessions: Sequence[str]) -> Proc[list[HeadRow]]:
    """The heads of ``sessions``, fetched concurrently.

    A session whose head is missing (deleted meanwhile, or a folder left without a
    head by a failed create) is left out; one whose head cannot be read or decoded
    (corrupt, a future format version) is a row with ``error`` set.
    """
    if not sessions:
        return []
    results = yield from ops.parallel([Get(layout.head(s)) for s in sessions])
    out: list[HeadRow] = []
    for sid, res in zip(sessions, results, strict=True):
        key = layout.head(sid)
        if isinstance(res, ObjectNotFound):
            continue
        if isinstance(res, BaseException):
            out.append(HeadRow(sid, None, str(res)))
            continue
        try:
            head = decode_head(res.body, key)
            yield from check_head(layout, head, sid, key)
        except (CorruptionError, FormatVersionError) as exc:
            log.warning("session %s has an unreadable head: %s", sid, exc)
            out.append(HeadRow(sid, None, str(exc)))
            continue
        out.append(HeadRow(sid, head, etag=res.etag))
    return out


def children(layout: Layout, session: str) -> Proc[list[str]]:
    """The sessions forked from ``session``, found through its fork markers: those with a
    head (one LIST, then one GET per marker, in parallel; see :func:`child_heads`)."""
    return [row.session for row in (yield from child_heads(layout, session))]


def child_heads(layout: Layout, session: str, *, newest: int | None = None) -> Proc[list[HeadRow]]:
    """The sessions forked from ``session`` that have a head, with their heads, as
    :func:`list_head_rows` gives them (one LIST, then one GET per marker, in parallel;
    with ``newest``, of the newest that many markers only: ids made by s3log sort by time).

    A marker whose child has no head is skipped, as docs/format.md says readers do: a
    fork whose head never landed, or a deleted child whose marker ``Log.delete`` left
    to gc (young enough that a fork retried into the freed id may have just written it).
    Only a 404 says there is no head: a head that cannot be read is still a child's (a
    row with ``error``). A head naming no parent, or another parent, is not a fork of
    ``session``: its marker outlived the fork it was written for (a child deleted and
    its id used again, by a root session or a fork of another parent, while
    ``Log.delete`` left the young marker to gc; a fork into an id another parent's fork
    won), and gc keeps such a marker, since its child has a head.
    """
    objects, _ = yield from list_all(layout.forks_dir(session))
    base = layout.forks_dir(session)
    # A name that is not a session id is not a marker s3log wrote (a stray object).
    ids = _valid_ids([o.key[len(base):] for o in objects], base)
    rows = yield from list_head_rows(layout, ids if newest is None else ids[len(ids) - newest:])
    return [r for r in rows if r.head is None or (r.head.parent is not None and r.head.parent.session == session)]


#: How far :func:`fork_keys` looks: forks of forks this many levels down, at most this
#: many fork folders listed in all, and the heads of the newest this many markers of each.
FORK_KEYS_DEPTH = 3
FORK_KEYS_LISTINGS = 8
FORK_KEYS_CHILDREN = 16


def fork_keys(layout: Layout, head: Head) -> Proc[dict[str, tuple[AppendKey, Head]]]:
    """The append keys of entries stored in forks that lost races made of ``head``'s
    session (reason ``"conflict"``) from a fork point ``head``'s chain holds: each key as
    that fork's head remembers it, with the head (the nearest fork's, if in several).

    Only a fork's own keys count (those it inherited name its parent's entries). A fork
    whose head was replaced since it was made (version above 1) may have lost a race in
    turn: its forks are looked at too, breadth-first, :data:`FORK_KEYS_DEPTH` levels
    down at most, listing at most :data:`FORK_KEYS_LISTINGS` fork folders and reading
    the heads of the newest :data:`FORK_KEYS_CHILDREN` markers of each. A session never
    forked costs one LIST (decision 0037).
    """
    found: dict[str, tuple[AppendKey, Head]] = {}
    level, listings = [head], 0
    for _ in range(FORK_KEYS_DEPTH):
        deeper: list[Head] = []
        for parent in level[:FORK_KEYS_LISTINGS - listings]:
            listings += 1
            for row in (yield from child_heads(layout, parent.session, newest=FORK_KEYS_CHILDREN)):
                child = row.head
                if child is None or child.parent is None or child.parent.reason != "conflict" or is_expired(child):
                    continue
                own = [a for a in child.append_keys if a.session is None]
                if not (own or child.version > 1) or not (yield from _still_holds(layout, parent, child.parent)):
                    continue
                for a in own:
                    found.setdefault(a.key, (a, child))
                if child.version > 1:
                    deeper.append(child)
        level = deeper
    return found


def lineage(layout: Layout, session: str) -> Proc[list[LineageStep]]:
    """``session`` and its ancestors, child first, root last."""
    steps: list[LineageStep] = []
    seen: set[str] = set()
    current: str | None = session
    while current is not None:
        if current in seen:
            raise CorruptionError(layout.head(current), "fork parents form a cycle")
        seen.add(current)
        try:
            head, _ = yield from read_head(layout, current, expired_ok=current != session)
        except SessionNotFound:
            if current == session:
                raise
            # An ancestor was deleted: the lineage ends there, and says so.
            steps.append(LineageStep(current, None))
            break
        if steps and not is_expired(head) and not (yield from _still_holds(layout, head, steps[-1].parent)):
            # Another session took the id over (a new root chain over an expired or
            # deleted parent): it is not the parent, and the lineage ends here.
            steps.append(LineageStep(current, None, replaced=True))
            break
        steps.append(LineageStep(current, head.parent, is_expired(head)))
        current = head.parent.session if head.parent else None
    return steps


def _still_holds(layout: Layout, head: Head, ref: ParentRef | None) -> Proc[bool]:
    """Whether ``head``'s chain still holds the entry a child forked after (``ref``):
    false when the session at that id is another one now. A fork of an empty chain
    (seq -1) is held by any."""
    if ref is None or ref.seq < 0:
        return True
    entry = yield from entry_at(layout, head, ref.seq)
    return entry is not None and entry.hash == ref.hash


# ---------------------------------------------------------------------------- writing


def empty_head(
    session: str, meta: Mapping[str, Any] | None, parent: ParentRef | None, now: int, creator: str | None = None,
) -> Head:
    """The head of a session before its first write (version 0: not stored), created at ``now`` (ms).

    ``creator``: a nonce of the writer creating it, stored in the head, so that writer
    recognises its own create when the response was lost (see :func:`commit`).
    """
    t = now
    return Head(
        session=session, version=0, seq=-1, hash=None, segments=(), levels=(), tail=(),
        parent=parent, meta=dict(meta or {}), created_at=t, updated_at=t, writer="", creator=creator,
    )


def new_writer_state(
    session: str,
    reducer: Reducer[S],
    meta: Mapping[str, Any] | None = None,
    parent: ParentRef | None = None,
    *,
    now: int,
    creator: str | None = None,
) -> ChainPosition[S]:
    """The chain position of a writer of a session that is not stored yet, created at ``now`` (ms)."""
    return ChainPosition(session, empty_head(session, meta, parent, now, creator), None, reducer.initial(), {})


def writer_state_from(data: SessionData, reducer: Reducer[S], cfg: LogConfig) -> ChainPosition[S]:
    """The chain position of a writer continuing a session that was just loaded (its entries replayed)."""
    cache = {k: data.segments[k] for k, lvl in zip(data.head.segments, data.head.levels, strict=True)
             if lvl < cfg.cache_levels and k in data.segments}
    pending = data.head.pending
    if data.confirmed is not None and pending is not None and pending.level < cfg.cache_levels:
        cache[data.confirmed] = data.segments[data.confirmed]
    return ChainPosition(data.session, data.head, data.etag, replay(reducer, data.entries), cache, data.confirmed)


@dataclass(frozen=True, slots=True)
class LeasePlan:
    """What a commit does to the head's lease: hold it for ``owner`` until ``ttl_ms``
    from the commit's time, or (``ttl_ms`` None) release it if ``owner`` holds it."""

    owner: str
    ttl_ms: int | None


def _next_lease(h: Head, plan: LeasePlan | None, now: int) -> Lease | None:
    if plan is None:
        return h.lease  # a writer that does not hold leases leaves the stored one alone
    if plan.ttl_ms is not None:
        return Lease(plan.owner, now + plan.ttl_ms)
    return None if h.lease is None or h.lease.owner == plan.owner else h.lease


def _promote(h: Head, t: int) -> Head:
    """``h`` with its pending segment moved into the manifest (it replaces the last
    ``take`` segments and the tail entries it holds)."""
    p = h.pending
    assert p is not None
    keep = len(h.segments) - p.take
    return replace(
        h,
        segments=(*h.segments[:keep], p.key),
        levels=(*h.levels[:keep], p.level),
        tail=tuple(e for e in h.tail if e.seq > p.last),
        pending=None,
        # Segments merged away stop being referenced now: gc counts its grace from here.
        retired_at=t if p.take else h.retired_at,
    )


def key_window(
    cfg: LogConfig, window: tuple[AppendKey, ...], entries: Sequence[Entry], sources: Sequence[PendingEntry],
) -> tuple[AppendKey, ...]:
    """The append keys a head remembers after ``entries`` (built from ``sources``, in
    order): ``window`` and the keys of these, the newest ``cfg.append_key_window``."""
    new = [AppendKey(p.key, e.seq, p.digest) for e, p in zip(entries, sources, strict=False) if p.key is not None]
    if not new and len(window) <= cfg.append_key_window:
        return window
    fresh = {a.key for a in new}
    out = (*(a for a in window if a.key not in fresh), *new)
    return out[max(0, len(out) - cfg.append_key_window):] if cfg.append_key_window else ()


def inherited_keys(session: str, window: tuple[AppendKey, ...], upto_seq: int) -> tuple[AppendKey, ...]:
    """What a fork of ``session`` at ``upto_seq`` remembers of its parent's append keys:
    those of entries up to there, each naming the session it is in."""
    return tuple(a if a.session is not None else replace(a, session=session)
                 for a in window if a.session is not None or a.seq <= upto_seq)


def find_append_key(head: Head, key: str) -> AppendKey | None:
    """The append key ``key`` as ``head`` remembers it, or None."""
    for a in reversed(head.append_keys):
        if a.key == key:
            return a
    return None


def stored_for_key(layout: Layout, head: Head, mark: AppendKey) -> Proc[AckedEntry | None]:
    """The stored entry an append key of ``head`` names (verified), or None if that
    entry is no longer there (its session compacted, expired or deleted since).

    From the tail when it holds it (no request); else read as :func:`entry_at` reads.
    """
    session = mark.session or head.session
    entry: Entry | None = None
    if mark.session is None and head.tail_first_seq <= mark.seq <= head.seq:
        entry = head.tail[mark.seq - head.tail_first_seq]
    else:
        at: Head | None = head
        if mark.session is not None:
            found = yield from _read_head_or_none(layout, session)
            at = found[0] if found is not None else None
        if at is not None and not is_expired(at):
            entry = yield from entry_at(layout, at, mark.seq)
    if entry is None or append_digest(entry.kind, dumps(entry.data)) != mark.digest:
        return None
    return acked_in(session, [entry])[0]


def _plan_head(
    layout: Layout,
    cfg: LogConfig,
    ws: ChainPosition[Any],
    entries: Sequence[Entry],
    nonce: str,
    lease: LeasePlan | None = None,
    sources: Sequence[PendingEntry] = (),
) -> Proc[_HeadPlan]:
    h = ws.head
    t = cfg.env.now_ms()
    last = entries[-1] if entries else None
    stamps = [e.ts for e in entries]
    if h.ts_min is not None:
        stamps += [h.ts_min, h.ts_max or h.ts_min]
    confirmed = h.pending is not None and ws.confirmed == h.pending.key and promotable(h)
    if decide.pending_step(has_pending=h.pending is not None, confirmed=confirmed, flushes=False) \
            is decide.PendingStep.PROMOTE:
        h = _promote(h, t)
    # One copy of the head per commit on the common path (inline), made directly: a
    # Head has twenty fields and dataclasses.replace costs twice as much (the field
    # list it follows is checked against Head's below, _NEXT_HEAD_FIELDS).
    inline = Head(
        session=h.session,
        version=h.version + 1,
        seq=last.seq if last else h.seq,
        hash=last.hash if last else h.hash,
        segments=h.segments,
        levels=h.levels,
        tail=h.tail + tuple(entries),
        parent=h.parent,
        meta=h.meta,
        created_at=h.created_at if ws.etag is not None else t,
        updated_at=t,
        writer=nonce,
        ts_min=min(stamps) if stamps else None,
        ts_max=max(stamps) if stamps else None,
        retired_at=h.retired_at,
        creator=h.creator,
        lease=_next_lease(h, lease, t),
        v=cfg.format_version,
        extra=h.extra,
        sig=h.sig,
        # v1 heads have no pending field; a v2 head keeps one not yet promoted.
        pending=h.pending if cfg.format_version >= 2 else None,
        append_keys=key_window(cfg, h.append_keys, entries, sources),
    )
    # The signed payload does not cover the tail or pending (it is the same whether or
    # not this commit flushes), so the heads derived below keep the signature.
    inline = yield from signed_head(cfg.signer, inline, layout.log_id)
    body = encode_head(inline)
    # A big commit (a group of many appenders) may carry more of the tail inline.
    own = sum(map(len, map(entry_record, entries)))
    mode = decide.flush_mode(inline_bytes=len(body), tail_max_bytes=cfg.tail_max_bytes,
                             pending_max_bytes=cfg.pending_max_bytes, format_version=cfg.format_version,
                             has_tail=bool(inline.tail), commit_bytes=own, tail_per_commit=cfg.tail_per_commit)
    if mode is decide.FlushMode.INLINE:
        return _HeadPlan(inline, body, None, None, (), 0)
    # This commit writes a segment: an unconfirmed pending one is dropped (the DROP row
    # of decide.PENDING_TABLE: the new segment holds its entries too, and gc collects
    # it once no head names it), as both heads below replace the field.

    # Flush: the tail and the new entries go to one segment, merged with the
    # trailing run of segments the policy picks, so the manifest stays short.
    plan = plan_merge(h.levels, cfg.fanout)
    keep = len(h.segments) - plan.take
    merged_keys = h.segments[keep:]
    missing = [k for k in merged_keys if k not in ws.cache]
    fetched = yield from fetch_segments(layout, ws.session, missing)
    run: list[Entry] = []
    for k in merged_keys:
        run.extend(ws.cache[k] if k in ws.cache else fetched[k].entries)
    run.extend(h.tail)
    run.extend(entries)
    # Entries re-read for a merge are checked before they are rewritten.
    verifier = ChainVerifier(ws.session, start_seq=run[0].seq, start_hash=run[0].prev)
    verifier.feed(merged_keys[0] if merged_keys else layout.head(ws.session), run)
    # The nonce makes the key new to this write: see s3log._format.layout.
    seg_key = layout.segment(ws.session, run[0].seq, run[-1].hash, nonce)
    segment_body = encode_segment(ws.session, run, cfg.format_version)
    if mode is decide.FlushMode.PARALLEL:
        # One round trip: the head keeps every entry inline and names the segment as
        # pending; the writer's next commit, having seen it stored, references it.
        head = replace(inline, pending=Pending(seg_key, run[-1].seq, plan.level, plan.take))
        body = encode_head(head)
        # The mode was chosen from the head without this pending field, which can take
        # it past the bound: measured again with it, such a head goes sequentially.
        # (Without commit_bytes: only whether it still fits pending_max_bytes matters.)
        if decide.flush_mode(inline_bytes=len(body), tail_max_bytes=cfg.tail_max_bytes,
                             pending_max_bytes=cfg.pending_max_bytes, format_version=cfg.format_version,
                             has_tail=True) is decide.FlushMode.PARALLEL:
            return _HeadPlan(head, body, seg_key, segment_body, tuple(run), plan.level, parallel=True)
    head = replace(
        inline,
        segments=(*h.segments[:keep], seg_key),
        levels=(*h.levels[:keep], plan.level),
        tail=(),
        pending=None,
        # Segments merged away stop being referenced now: gc counts its grace from here.
        retired_at=t if merged_keys else h.retired_at,
    )
    return _HeadPlan(head, encode_head(head), seg_key, segment_body, tuple(run), plan.level)


#: Every field of Head, as _plan_head sets them: a field added to Head must be added there.
_NEXT_HEAD_FIELDS = ("session", "version", "seq", "hash", "segments", "levels", "tail", "parent", "meta",
                     "created_at", "updated_at", "writer", "ts_min", "ts_max", "retired_at", "creator", "lease", "v",
                     "extra", "sig", "pending", "append_keys")
assert tuple(f.name for f in fields(Head)) == _NEXT_HEAD_FIELDS, "protocol._plan_head sets every field of Head"


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


def _is_marker_of(body: bytes, marker: Mapping[str, Any]) -> bool:
    """Whether ``body`` is a copy of ``marker`` (any ``refreshed_at``): the same fork's."""
    try:
        stored = loads(body)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError):
        return False
    if type(stored) is not dict:
        return False
    stored.pop("refreshed_at", None)
    return bool(stored == marker)


def _is_marker_naming(body: bytes, parent: str, child: str) -> bool:
    """Whether ``body`` is a fork marker of ``parent`` naming ``child`` (of any fork point)."""
    try:
        stored = loads(body)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError):
        return False
    if type(stored) is not dict or stored.get("child") != child:
        return False
    ref = stored.get("parent")
    return type(ref) is dict and ref.get("session") == parent


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
    layout: Layout, cfg: LogConfig, ws: ChainPosition[Any], plan: _HeadPlan, deadline_ms: int | None,
    journal: CommitJournal, first: str | StoreError | None = None, doubted: bool = False,
) -> Proc[_HeadOutcome]:
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
            return _HeadOutcome("committed", step.etag, None)
        # In doubt still if this PUT may have been applied, or an earlier one left unknown.
        track.in_doubt = doubted or uncertain or decide.may_have_applied(reply)
        if isinstance(step, decide.SessionGone):
            raise SessionNotFound(ws.session, "it was deleted while this writer held it")
        if isinstance(step, decide.Fatal):
            raise _failure(result)
        current = yield from _read_head_or_none(layout, ws.session)
        stored = decide.StoredHead(current[0].writer, current[1]) if current else None
        verdict = decide.after_reread(stored, expected_etag=expected, nonce=plan.head.writer, attempt=attempt,
                                      max_attempts=cfg.retry.attempts)
        if isinstance(verdict, decide.Committed):
            return _HeadOutcome("committed", verdict.etag, None)
        if isinstance(verdict, decide.Lost):
            return _HeadOutcome("conflict", None, current, uncertain=uncertain)
        if isinstance(verdict, decide.SessionGone):
            raise SessionNotFound(ws.session, "it was deleted while this writer held it")
        if isinstance(verdict, decide.GiveUp):
            raise StoreError(f"could not commit session {ws.session} after {attempt} attempts", key=key)
        log.info("session %s: head PUT undecided (%s); the head is unchanged, retrying", ws.session, result)
        yield from ops.sleep(cfg.retry.backoff(attempt, cfg.env.rng))


def _write(
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
) -> Proc[tuple[_HeadPlan | None, _HeadOutcome, dict[str, decide.Confirmed]]]:
    """Write a segment if the plan needs one (with ``before_head`` alongside), then the head.

    The head is written only once every object it depends on is confirmed stored as
    ours; a segment key found taken by something else is never referenced. ``journal``
    is kept true of the head PUTs (see :class:`CommitJournal`). ``rewrite``: markers
    written again (:func:`rewrite_marker`) first, after the deadline is set, so they
    are younger than anything the head may meet. ``sources``: the pending entries
    ``entries`` were built from (their append keys go into the head's window).
    """
    if journal is None:
        journal = CommitJournal()
    # The deadline counts from planning: a merge's retired_at is stamped here.
    deadline = cfg.env.now_ms() + cfg.commit_deadline_ms
    try:
        plan = yield from _plan_head(layout, cfg, ws, entries, cfg.env.nonce(), lease, sources)
    except SegmentMissing:
        # Our view of the head is stale and gc collected what it listed: the head moved.
        current = yield from _read_head_or_none(layout, ws.session)
        if current is None and ws.etag is not None:
            # Deleted (Log.delete) while this writer held it: its segments went with the
            # head. What the head PUT would have met (404), not corruption.
            raise SessionNotFound(ws.session, "it was deleted while this writer held it") from None
        if current is None or decide.etags_equal(current[1], ws.etag):
            raise
        return None, _HeadOutcome("conflict", None, current), {}
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
    if any(v is not decide.Confirmed.OURS for k, v in confirmed.items() if marker is None or k != marker.key):
        return plan, _HeadOutcome("conflict", None, None), confirmed
    # A segment written beside the head counts too: it is unreferenced until its head
    # lands, so gc may collect it once older than the deadline; a head retried later
    # would name it pending and its writer, holding the 2xx of its PUT, promote it.
    deadline_ms = deadline if confirmed or segment is not None or plan.head.retired_at else None
    beside = segment if segment is not None and plan.parallel else None
    ahead = merge_ahead(cfg, ws, plan)
    if beside is None and not ahead:
        outcome = yield from _put_head(layout, cfg, ws, plan, deadline_ms, journal)
        return plan, outcome, confirmed
    # The head does not reference the segment (it keeps the entries inline), so both
    # go out together, with the GETs of segments the next flush will merge.
    batch: list[Op] = [_head_op(layout, ws, plan.body), *(Get(k, _segment_decoder(k)) for k in ahead)]
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
    return plan, replace(outcome, fetched=fetched), confirmed


def merge_ahead(cfg: LogConfig, ws: ChainPosition[Any], plan: _HeadPlan) -> list[str]:
    """Segments the next flush will merge that this writer does not hold in memory.

    They are read in this commit's round trip (beside its head PUT), so that flush
    needs no GET of its own: every commit stays one round trip. Only when a flush is
    near (this commit flushed, or its head is past half the tail bound), so a writer
    holds them no longer than it must.
    """
    if plan.segment_key is None and len(plan.body) <= cfg.tail_max_bytes // 2:
        return []
    return [k for k in _next_merge(cfg, plan) if k not in ws.cache and k != plan.segment_key]


def _next_merge(cfg: LogConfig, plan: _HeadPlan) -> tuple[str, ...]:
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


def _advance(
    cfg: LogConfig, ws: ChainPosition[Any], plan: _HeadPlan, etag: str, state: S,
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


def _adopt(ws: ChainPosition[Any], head: Head, etag: str, state: S) -> ChainPosition[S]:
    """Continue from a stored head that ends with our own entries (no competitor).

    Its pending segment, if any, is not taken as confirmed (whether our own PUT of it
    succeeded is not known here): a later commit writes another if it needs one.
    """
    live = set(head.segments)
    return ChainPosition(ws.session, head, etag, state, {k: v for k, v in ws.cache.items() if k in live})


def commit(
    layout: Layout,
    cfg: LogConfig,
    ws: ChainPosition[S],
    pending: Sequence[PendingEntry],
    reducer: Reducer[S],
    on_conflict: OnConflict = "fork",
    *,
    lease: LeasePlan | None = None,
    touch: bool = False,
    maybe_landed: bool | int = True,
    journal: CommitJournal | None = None,
    takeover: bool = False,
) -> Proc[CommitResult[S]]:
    """Commit ``pending`` after the head ``ws`` knows; fork or raise on conflict.

    ``lease``: what this commit records about the head's lease. ``touch``: write the
    head even with nothing pending (a lease renewal or release), if it is stored.
    ``maybe_landed``: an earlier commit of these entries ended undecided, so some may
    be stored already in this session: all of them (True), or how many leading ones
    (an int; those queued since were never sent). Otherwise only a head PUT of this commit with an unknown outcome
    can have stored them: after definite refusals, entries found in the other writer's
    chain are that writer's (equal entries, e.g. the same kind, ts and data appended at
    the same place by two writers), not ours. ``journal``: kept true of what this
    commit may have stored, for its caller to read if it raises or is abandoned
    (:class:`CommitJournal`); its ``forks`` are the forks earlier commits of these
    entries left undecided: one that forks from the same place forks into that same
    child (:func:`create_fork`), so the entries cannot be stored in two children.

    A commit with nothing pending writes nothing, not even the head of a session not
    stored yet (a lazily created session stays unstored until it has an entry; use
    :func:`create_session` to store an empty one). ``CommitResult.acked`` holds the committed form of each pending
    entry, in order, wherever it landed. The decisions after a lost race are
    :func:`s3log._protocol.decide.after_lost`. ``takeover``: ``ws`` creates the session over an
    expired one's tombstone (If-Match on its ETag): losing the race means the id is taken.
    """
    if not pending and not (touch and ws.etag is not None):
        return CommitResult(ws, [], [])
    journal = journal if journal is not None else CommitJournal(ws.session)
    # Each entry stamped with the session it is stored in (AckedEntry): one commit may
    # store a prefix in the parent and the rest in a fork.
    acked: list[AckedEntry] = []
    # Every entry made durable (acked, and a fork entry among them if this commit
    # continued in a fork an earlier one left undecided), and where it forked to.
    durable: list[AckedEntry] = []
    forked: ForkInfo | None = None
    forks: list[ForkInfo] = []
    # How many leading entries of ``pending`` may be stored already where this commit
    # writes: only those are looked for after a lost race (decision 0025).
    uncertain = len(pending) if maybe_landed is True else int(maybe_landed)
    # This commit creates the session over an expired one's tombstone (see below; or
    # ``takeover``: ``ws`` is set up so already, If-Match on the tombstone).
    over_tombstone = takeover
    attempts_left = cfg.retry.attempts
    while attempts_left > 0:
        attempts_left -= 1
        entries = build_chain(pending, after_seq=ws.head.seq, after_hash=ws.head.hash)
        # An earlier commit of these entries found a prefix of them stored here, forked the
        # rest and left that fork undecided: its child may hold the rest. Only the prefix
        # is written here (the session may be gone and this a new one at the id, which no
        # race will reveal); the rest follows into that same child, as below.
        cut = _landed_before_expiry(ws.session, entries, journal.forks) if journal.forks else 0
        if not 0 < cut < len(entries):
            cut = 0
        try:
            plan, outcome, written = yield from _write(layout, cfg, ws, entries[:cut] if cut else entries,
                                                       lease=lease, journal=journal,
                                                       sources=pending[:cut] if cut else pending)
        except SessionNotFound:
            if not over_tombstone or journal.in_doubt:
                raise
            # The tombstone this create replaced (If-Match) was deleted meanwhile, and
            # no PUT of ours can have landed (404, nothing in doubt): the id is free now,
            # so the session is created there as on a missing id (create-only).
            ws, over_tombstone = replace(ws, etag=None), False
            continue
        if outcome.uncertain:
            uncertain = len(entries)
        if outcome.kind == "committed" and outcome.etag is not None and plan is not None and not cut:
            state = fold(reducer, ws.state, entries)
            stored = acked_in(ws.session, entries)
            return CommitResult(_advance(cfg, ws, plan, outcome.etag, state, written, outcome.fetched),
                                durable + stored, acked + stored, forked, tuple(forks))
        if outcome.kind == "committed" and outcome.etag is not None and plan is not None:
            # The prefix is stored: the rest goes on from its end into the doubt's child.
            landed = cut
            done = entries[:cut]
            # Into a copy, as below: the fork may still fail, and the writer's state (which
            # its next commit folds these into again) must hold only what it acknowledged.
            state = fold(reducer, copy.deepcopy(ws.state), done)
            ws = _advance(cfg, ws, plan, outcome.etag, state, written, outcome.fetched)
            acked += acked_in(ws.session, done)
            durable += acked_in(ws.session, done)
            found = dict(ws.head.summary(), etag=ws.etag)
            why = "an undecided fork holds the rest of this batch"
        else:
            if outcome.found is None:
                raise StoreError(f"commit to session {ws.session} lost its head without finding another")
            found_head, found_etag = outcome.found
            if ws.etag is None and is_expired(found_head):
                # The id is an expired session's: a new session takes it over, as it would
                # one deleted (nothing of ours can be in a tombstone, which lists no entries).
                ws, over_tombstone = _over_tombstone(ws, found_head, found_etag, cfg.env.now_ms()), True
                attempts_left += 1
                continue
            # A create that landed unacknowledged is ours, not a taken id: the stored head
            # carries the creator nonce this writer put in it. A creator that is not ours
            # proves our create never landed: equal entries there are the other writer's.
            ours = ws.head.creator is not None and found_head.creator == ws.head.creator
            creating = (ws.etag is None or over_tombstone) and not ours
            others = creating and ws.head.creator is not None  # (a position built without a nonce cannot tell)
            landed = (yield from landed_prefix(layout, found_head, entries[:uncertain])) if uncertain and not others \
                else 0
            if not landed and uncertain and not others and (ours or same_life(found_head, ws.head)) \
                    and compactions(found_head) > compactions(ws.head):
                # Compacted since: the new chain's hashes are not ours to find. (A lazy
                # create's head is stamped when it lands: its creator nonce says ours.)
                landed = _landed_before_compaction(layout, ws.head, found_head, entries[:uncertain])
            if not landed and journal.forks and (is_expired(found_head) or not same_life(found_head, ws.head)):
                # Expired since, or deleted and another session took the id over.
                landed = _landed_before_expiry(ws.session, entries, journal.forks)
            done = entries[:landed]
            ends_at = done[-1].hash if done else ws.head.hash
            step = decide.after_lost(
                creating=creating,
                batch=len(entries),
                landed=landed,
                stored_ends_at_ours=found_head.seq == (done[-1].seq if done else ws.head.seq)
                and found_head.hash == ends_at,
                on_conflict=on_conflict,
            )
            if isinstance(step, decide.IdTaken):
                raise SessionExists(ws.session)
            # A reducer may fold into the state it is given: entries that landed are folded
            # into a copy, so that if this commit still fails, the writer's state (which the
            # next commit folds them into again) holds only what it acknowledged.
            state = fold(reducer, copy.deepcopy(ws.state), done) if done else ws.state
            acked += acked_in(ws.session, done)
            durable += acked_in(ws.session, done)
            if isinstance(step, decide.AckAll):
                if step.adopt:
                    return CommitResult(_adopt(ws, found_head, found_etag, state), durable, acked, forked, tuple(forks))
                # Someone built on our entries: they are durable, but this writer's view is
                # behind; its next commit meets the other writer and forks.
                return CommitResult(_stale(ws, done, state), durable, acked, forked, tuple(forks))
            if isinstance(step, decide.AdoptAndRetry):
                log.info("session %s: adopting a head that ends with this writer's own entries", ws.session)
                ws = _adopt(ws, found_head, found_etag, state)
                pending = pending[landed:]
                uncertain = max(0, uncertain - landed)
                if landed:
                    # Adopting a head that holds part of this batch is progress, not a
                    # failed attempt (at most one per entry): counted as one, a writer
                    # allowed a single attempt adopted, ran out and raised, losing the
                    # adopted position, on every commit after an undecided PUT.
                    attempts_left += 1
                continue
            ws = _stale(ws, done, state) if done else ws
            found = dict(found_head.summary(), etag=found_etag)
            if isinstance(step, decide.RaiseConflict):
                raise ConflictError(ws.session, dict(ws.head.summary(), etag=ws.etag), found, landed=acked)
            why = f"lost a race to writer {found_head.writer}"
        parent = ParentRef(ws.session, ws.head.seq, ws.head.hash, "conflict")
        rest = pending[landed:]
        # A fork an earlier commit of these entries left undecided, from this same place:
        # forked into again (same id), so its late or landed head and this one cannot
        # both be stored (both are create-only PUTs of one key).
        doubt = journal.forks.get(parent)
        # The child remembers the parent's append keys up to the fork (those of entries
        # found landed too): a retry in the child finds an append stored before it.
        window = key_window(cfg, ws.head.append_keys, done, pending[:landed])
        fork_ws, fork_entries = yield from create_fork(
            layout, cfg, parent, reducer.to_seed(state), reducer, ws.head.meta, rest, lease=lease,
            journal=journal, doubt=doubt, inherit=inherited_keys(ws.session, window, parent.seq),
        )
        forked = ForkInfo(parent, fork_ws.session, found)
        forks.append(forked)
        # Both ids and the reason, as text and as record attributes an application's
        # handler can route on (after the fork exists: the record names a real session).
        log.warning("session %s: %s; forked into %s at seq %d (reason: %s)%s", ws.session, why, fork_ws.session,
                    parent.seq, parent.reason, ", as an undecided commit had" if doubt else "",
                    extra={"s3log_session": ws.session, "s3log_fork": fork_ws.session,
                           "s3log_fork_reason": parent.reason, "s3log_fork_why": why})
        # fork_entries[0] is the fork entry; the rest of the batch follows it.
        acked += acked_in(fork_ws.session, fork_entries[1:])
        durable += acked_in(fork_ws.session, fork_entries)
        if len(fork_entries) - 1 == len(rest):
            return CommitResult(fork_ws, durable, acked, forked, tuple(forks))
        # The undecided fork holds only part of the batch: the rest goes on in that
        # child. An earlier commit may have gone on there too and left its PUT undecided
        # (it may land yet): the rest may be stored there, and while this commit writes
        # there, the child is where its entries may be (the journal's fork doubt).
        if doubt is None:  # (a fork is continued only from a doubt; conservative if not)
            doubt = ForkDoubt(parent, fork_ws.session, fork_ws.head.creator or "", fork_entries[0].ts, len(rest))
        ws, pending = fork_ws, rest[len(fork_entries) - 1:]
        uncertain = max(0, doubt.carried - (len(fork_entries) - 1))
        journal.forks[parent] = replace(doubt, carried=max(doubt.carried, len(rest)))
        journal.fork_sent = True
        attempts_left += 1
    raise StoreError(f"could not commit session {ws.session}: the head kept changing under this writer")


def _landed_before_compaction(layout: Layout, base: Head, found: Head, entries: Sequence[Entry]) -> int:
    """How many of ``entries`` (built on ``base``; a prefix of them may have landed) the
    chain that a compaction replaced by ``found`` held, from what it recorded of it.

    The mark of the first compaction after ``base`` (the head keeps the last
    :data:`COMPACTION_MARKS`) holds the replaced chain's end and the hashes of its last
    entries (:data:`COMPACTION_WINDOW`): the entries that landed are the longest prefix
    whose last is found there at its seq (a hash commits to every entry before it); none
    if the chain ended at ``base`` or held another entry right after it. Otherwise (our
    entries older than the window, or that mark no longer kept) it cannot be told, and
    the entries must not be written again: raises StoreError, leaving them uncertain.
    """
    newest = found.extra.get(COMPACTED_FIELD)
    older = newest.get("prev") if isinstance(newest, dict) else None
    marks = [newest, *(older if isinstance(older, list) else [])]
    # Its PUT named the head it built on: it could land only before the first compaction since.
    mark = next((m for m in marks if isinstance(m, dict) and m.get("n") == compactions(base) + 1), None)
    if mark is not None and entries:
        end, tips = mark.get("seq"), mark.get("tips")
        if (end, mark.get("hash")) == (base.seq, base.hash):
            return 0
        if isinstance(end, int) and isinstance(tips, list) and end > base.seq:
            first = end - len(tips) + 1

            def held(e: Entry) -> bool:
                return first <= e.seq <= end and tips[e.seq - first] == e.hash[:_TIP]

            landed = max((i + 1 for i, e in enumerate(entries) if held(e)), default=0)
            if landed or first <= entries[0].seq:
                return landed  # none: the entry after base in that chain was another's
    raise StoreError(f"session {base.session} was compacted after a commit of this writer may have landed, and "
                     "whether it did cannot be told: its entries are not written again (they stay uncertain; "
                     "read the session to see what it kept, and write through a new writer)",
                     key=layout.head(base.session))


def _landed_before_expiry(session: str, entries: Sequence[Entry], forks: Mapping[ParentRef, ForkDoubt]) -> int:
    """How many of ``entries`` an earlier commit found landed in ``session`` before it
    expired (or was deleted and the id taken over), as the fork it left undecided from
    there proves (0 if none).

    That commit found a prefix of these entries stored, forked from the end of it, and
    left the fork undecided (its child may hold the rest). The tombstone that replaced
    the head lists no entries (a new session at the id holds none of ours), so the
    prefix cannot be found again; but the doubt's
    parent names it exactly (its seq and hash are those of our own chain's entry):
    forking from the same place forks into the same child, rather than storing the
    rest a second time in a new one.
    """
    for k in range(len(entries) - 1, -1, -1):
        if ParentRef(session, entries[k].seq, entries[k].hash, "conflict") in forks:
            return k + 1
    return 0


def create_session(layout: Layout, cfg: LogConfig, ws: ChainPosition[S]) -> Proc[ChainPosition[S]]:
    """Store the empty head of a new session (``If-None-Match: *``); SessionExists if taken.

    An id whose session expired (its head a tombstone) is taken over, as one deleted is.
    """
    plan, outcome, written = yield from _write(layout, cfg, ws, [])
    if outcome.kind != "committed" and outcome.found is not None and is_expired(outcome.found[0]):
        fresh = ws
        ws = _over_tombstone(ws, outcome.found[0], outcome.found[1], cfg.env.now_ms())
        try:
            plan, outcome, written = yield from _write(layout, cfg, ws, [])
        except SessionNotFound:
            # The tombstone was deleted meanwhile (Log.delete): the id is free, create it.
            ws = fresh
            plan, outcome, written = yield from _write(layout, cfg, ws, [])
    if outcome.kind == "committed" and outcome.etag is not None and plan is not None:
        return _advance(cfg, ws, plan, outcome.etag, ws.state, written)
    raise SessionExists(ws.session)


def _over_tombstone(ws: ChainPosition[S], tomb: Head, etag: str, now: int) -> ChainPosition[S]:
    """A new session's position taking over ``tomb``, the tombstone of an expired session
    at its id: its first head replaces the tombstone with If-Match on ``etag`` (a racing
    writer or sweep wins), and gc counts its grace for the old segments from ``now``."""
    return replace(ws, head=replace(ws.head, version=tomb.version, retired_at=now), etag=etag)


def _stale(ws: ChainPosition[S], done: Sequence[Entry], state: S) -> ChainPosition[S]:
    if not done:
        return replace(ws, etag=STALE_ETAG)
    known = replace(ws.head, seq=done[-1].seq, hash=done[-1].hash, tail=(), segments=(), levels=(), pending=None)
    return ChainPosition(ws.session, known, STALE_ETAG, state, {})


def create_fork(
    layout: Layout,
    cfg: LogConfig,
    parent: ParentRef,
    seed: Any,
    reducer: Reducer[S],
    meta: Mapping[str, Any] | None,
    pending: Sequence[PendingEntry] = (),
    child: str | None = None,
    *,
    lease: LeasePlan | None = None,
    journal: CommitJournal | None = None,
    doubt: ForkDoubt | None = None,
    inherit: tuple[AppendKey, ...] = (),
) -> Proc[tuple[ChainPosition[S], list[Entry]]]:
    """Create a session whose first entry is ``s3log.fork`` (parent pointer + seed),
    followed by ``pending``; mark it under the parent. Returns its position and the
    entries stored: the fork entry and ``pending``, or a prefix of them when the child
    is one this writer created before (see ``doubt``); the caller commits the rest.

    The marker is written before the head, so any fork that exists can be found from
    its parent (a marker whose head never landed is skipped by readers). An explicit
    ``child`` id that is taken raises :class:`SessionExists` before anything is written.
    ``journal``: while a child's head PUT may have landed, its :class:`ForkDoubt`.
    ``doubt``: a fork from ``parent`` that an earlier commit of these entries left
    undecided: its first attempt creates that child again, with the same creator nonce
    and time (so the same fork entry); if its head is stored, the entries are
    continued from what it holds. ``inherit``: the parent's append keys the child's
    head remembers (:func:`inherited_keys`).
    """
    if child is not None:
        if child == parent.session:
            raise InvalidArgumentError("child_id", f"a session cannot fork into itself ({child})")
        if (yield from _read_head_or_none(layout, child)) is not None:
            raise SessionExists(child)
    journal = journal if journal is not None else CommitJournal()
    now = doubt.ts if doubt is not None else cfg.env.now_ms()
    fork_pending, meta = _fork_start(parent, seed, reducer, meta, now)
    # An explicit child id whose marker is there without a head (an earlier fork into it
    # that failed or was cancelled before its head landed, or a child deleted since,
    # whose young marker Log.delete leaves to gc): the marker is replaced, not taken
    # for the child (it made every retry raise SessionExists until gc collected it).
    replace_marker = False
    for attempt in range(4):
        if attempt == 0 and doubt is not None:
            sid, creator = doubt.child, doubt.creator
        else:
            sid, creator = child or cfg.env.new_id(), cfg.env.nonce()
        ws = new_writer_state(sid, reducer, meta, parent, now=now, creator=creator)
        if inherit:
            ws = replace(ws, head=replace(ws.head, append_keys=inherit))
        entries = build_chain([fork_pending, *pending], after_seq=-1, after_hash=None)
        marker_map = {"v": 1, "child": sid, "parent": parent.to_map(), "created_at": now}
        marker = PutIfAbsent(layout.fork_marker(parent.session, sid), dumps(marker_map))
        # Until it is settled, this child may hold the entries: a commit that raises or
        # is abandoned meanwhile leaves the doubt for the next one to resolve.
        reusing = attempt == 0 and doubt is not None
        rewrite: list[tuple[PutIfAbsent, Callable[[bytes], bool]]] = []
        if replace_marker:
            # Any marker of this parent naming this child: the head PUT, create-only,
            # decides who has the id (an earlier attempt's head landing late wins it).
            rewrite.append((marker, partial(_is_marker_naming, parent=parent.session, child=sid)))
        elif reusing:
            # The marker an earlier attempt wrote is of unknown age: gc may judge it
            # dangling (this child has no head yet) while this head is on its way. It
            # is written again with new bytes, so it is younger than the head and gc's
            # If-Match DELETE of the copy it listed fails (decision 0008).
            fresh = PutIfAbsent(marker.key, dumps({**marker_map, "refreshed_at": cfg.env.now_ms()}))
            rewrite.append((fresh, partial(_is_marker_of, marker=marker_map)))
        carried = max(doubt.carried, len(pending)) if reusing and doubt is not None else len(pending)
        journal.forks[parent] = ForkDoubt(parent, sid, creator, now, carried)
        journal.fork_sent = True
        plan, outcome, written = yield from _write(layout, cfg, ws, entries, before_head=[] if rewrite else [marker],
                                                   rewrite=rewrite, lease=lease, journal=journal,
                                                   sources=[fork_pending, *pending])
        if outcome.kind == "committed" and outcome.etag is not None and plan is not None:
            journal.forks.pop(parent, None)
            state = fold(reducer, ws.state, entries)
            return _advance(cfg, ws, plan, outcome.etag, state, written), entries
        if outcome.found is not None and outcome.found[0].creator == creator:
            # Created by this writer (the creator nonce is ours) and changed since, or by
            # an earlier commit's PUT: the entries it holds are a prefix of ours (the
            # same fork entry first); continue from that head, or behind it if someone
            # wrote after them (the next commit meets them).
            found_head, found_etag = outcome.found
            # Only what a PUT of ours may have carried there is looked for: all of it if
            # this attempt's own PUT may have landed, else what the doubt's PUTs carried.
            limit = len(entries) if outcome.uncertain or not reusing or doubt is None else 1 + doubt.carried
            landed = yield from landed_prefix(layout, found_head, entries[:limit])
            journal.forks.pop(parent, None)
            if landed == 0:
                # Ours once, but it no longer holds our fork entry (expired since, its
                # head a tombstone): the key is taken, so no PUT of ours can land there
                # any more; the entries go to a new child.
                if child is not None or attempt == 3:
                    raise SessionExists(sid)
                continue
            done = entries[:landed]
            state = fold(reducer, ws.state, done)
            if found_head.hash == done[-1].hash:
                return _adopt(ws, found_head, found_etag, state), done
            return _stale(ws, done, state), done
        # The id is another's (its head has another creator): ours cannot be stored there.
        journal.forks.pop(parent, None)
        if child is not None and outcome.found is None and not replace_marker \
                and written.get(marker.key) is decide.Confirmed.TAKEN:
            replace_marker = True  # only the marker was there: once more, replacing it
            continue
        if child is not None or attempt == 3:
            raise SessionExists(sid)
    raise AssertionError("unreachable")


def _fork_start(
    parent: ParentRef, seed: Any, reducer: Reducer[Any], meta: Mapping[str, Any] | None, now: int,
) -> tuple[PendingEntry, Mapping[str, Any] | None]:
    """A fork's first entry (its parent pointer and seed, at ``now``) and its header's meta."""
    fork_data = normalize_data(FORK_KIND, fork_entry_data(parent, seed), max_depth=MAX_INTERNAL_DEPTH)
    # A reducer may say what a fork's header records (an agent session: parent, seed length).
    fork_meta = getattr(reducer, "fork_meta", None)
    if fork_meta is not None:
        meta = normalize_data("meta", fork_meta(dict(meta or {}), parent, seed))
    return PendingEntry(FORK_KIND, now, fork_data), meta


def _check_at_seq(session: str, at_seq: object) -> int | None:
    if at_seq is None:
        return None
    if not isinstance(at_seq, int) or isinstance(at_seq, bool):
        raise InvalidArgumentError("at_seq", f"must be an integer, not {at_seq!r}", session=session)
    return at_seq


def fork_at(
    layout: Layout,
    cfg: LogConfig,
    session: str,
    reducer: Reducer[S],
    *,
    at_seq: int | None = None,
    at_hash: bytes | str | None = None,
    meta: Mapping[str, Any] | None = None,
    child: str | None = None,
    reason: str = "explicit",
) -> Proc[tuple[ChainPosition[S], list[Entry]]]:
    """Fork ``session`` at a committed entry (the latest when neither point is given)."""
    if at_seq is not None and at_hash is not None:
        raise InvalidArgumentError("at_seq/at_hash", "give at_seq or at_hash, not both", session=session)
    at_seq = _check_at_seq(session, at_seq)
    if child is not None and child == session:
        raise InvalidArgumentError("child_id", f"a session cannot fork into itself ({child})", session=session)
    if at_hash is not None and not isinstance(at_hash, (bytes, str)):
        raise InvalidArgumentError("at_hash", f"must be bytes or a hex string, not {at_hash!r}", session=session)
    if isinstance(at_hash, str):
        try:
            at_hash = bytes.fromhex(at_hash)
        except ValueError:
            raise EntryNotFound(session, f"hash {at_hash!r} is not hex") from None
    data = yield from load(layout, session, upto_seq=at_seq)
    entries = data.entries
    if at_hash is not None:
        idx = next((i for i, e in enumerate(entries) if e.hash == at_hash), None)
        if idx is None:
            raise EntryNotFound(session, f"hash {at_hash.hex()}")
        entries = entries[: idx + 1]
    last = entries[-1] if entries else None
    parent = ParentRef(session, last.seq if last else -1, last.hash if last else None, reason)
    state = replay(reducer, entries)
    return (
        yield from create_fork(
            layout, cfg, parent, reducer.to_seed(state), reducer,
            data.head.meta if meta is None else meta, (), child,
            inherit=inherited_keys(session, data.head.append_keys, parent.seq),
        )
    )


def delete_session(layout: Layout, session: str, cfg: LogConfig, *, etag: str | None = None) -> Proc[int]:
    """Delete a session: its head first (readers see it gone at once), then the rest.

    The head is deleted with ``If-Match`` on the ETag just read, so only that head: if
    it changed meanwhile nothing is deleted yet. A commit of the same session (same
    ``created_at`` and ``creator``) moved it on: the delete starts over from a fresh
    read, at most ``cfg.retry.attempts`` times. Another session that took the id over
    (a new session replacing an expired one's tombstone) is not the one asked for:
    :class:`~s3log.errors.SessionReplaced`, and it keeps everything. A store that
    cannot make a DELETE conditional (obstore) deletes the head by key, keeping there
    the race the condition closes (docs/operations.md).

    Activity markers of the days a new session at the id could still commit on stay
    (:func:`s3log._protocol.activity.split_by_day`): such a session relies on the same key.

    ``etag``: delete only the head with this ETag (one the caller read and decided
    on); a head changed since is ConflictError and nothing is deleted.

    Returns how many objects were deleted.
    """
    for _ in range(cfg.retry.attempts):
        head, read, objects, own = yield from _listed_for_delete(layout, session)
        if etag is not None and read != etag:
            raise ConflictError(session, {"etag": etag}, _identity(head, read))
        # Ages are measured from before the DELETE: a head of a new session landing right
        # after it may name a segment written up to landing_bound_ms before.
        sent_ms = cfg.env.now_ms()
        if not (yield from _delete_head(layout, cfg, session, head, read)):
            if etag is not None:
                raise ConflictError(session, {"etag": etag}, None)
            continue  # the same session moved on: what it stores now is listed again
        split = _split_delete(layout, cfg, session, head, objects, own, sent_ms)
        objects = split.objects
        # Its children's fork markers with If-Match on the ETag listed: a new session at
        # the id may have forked into one of them again, writing its marker anew
        # (decision 0008); that copy is the new session's and stays.
        forks_dir = layout.forks_dir(session)
        dels: list[Delete | DeleteIfMatch] = [
            DeleteIfMatch(o.key, o.etag) if o.key.startswith(forks_dir) and o.etag else Delete(o.key) for o in objects]
        if split.own is not None:
            dels.append(DeleteIfMatch(split.own.key, split.own.etag))
        counted = len(dels)
        dels += [Delete(k) for k in split.activity]
        spared = 0
        if dels:
            results = yield from ops.parallel(dels)
            unsupported = [op.key for op, res in zip(dels, results, strict=True)
                           if isinstance(res, ConditionalDeleteUnsupported)]
            if unsupported:
                # obstore: by key, keeping the race on that store alone (as for the head).
                results += (yield from ops.parallel([Delete(k) for k in unsupported]))
            for i, res in enumerate(results):
                if isinstance(res, PreconditionFailed):
                    # Written again since it was read: the new session's. (The folder's
                    # objects and its own fork marker are counted in the return value,
                    # not activity markers, whose DELETEs go out whether or not they exist.)
                    spared += i < counted
                elif res is not None and not isinstance(res, (ObjectNotFound, ConditionalDeleteUnsupported)):
                    raise res
        return 1 + counted - spared
    raise StoreError(f"could not delete session {session}: its head kept changing (commits kept landing)")


def _listed_for_delete(
    layout: Layout, session: str
) -> Proc[tuple[Head, str, list[ObjectInfo], ObjectInfo | None]]:
    """The head and its ETag, the other objects of the session's folder, and its own fork
    marker (in its parent's folder, None if absent): all read before the head goes, since
    once it is gone the id may be created again, and what the new session stores must not
    be deleted with the old one."""
    head, read = yield from read_head(layout, session, expired_ok=True)
    objects, _ = yield from list_all(layout.session_dir(session))
    head_key = layout.head(session)
    objects = [o for o in objects if o.key != head_key]
    own: ObjectInfo | None = None
    if head.parent is not None:
        marker_key = layout.fork_marker(head.parent.session, session)
        listed, _ = yield from list_all(marker_key)
        own = next((o for o in listed if o.key == marker_key and o.etag), None)
    return head, read, objects, own


@dataclass(frozen=True, slots=True)
class _DeleteSplit:
    """What a delete removes (``objects`` of the folder, its own fork marker ``own``,
    the ``activity`` markers of past days) and what it leaves for later and why."""

    objects: list[ObjectInfo]
    own: ObjectInfo | None
    activity: list[str]
    left_for_gc: list[str]
    left_for_expire: list[str]


def _split_delete(layout: Layout, cfg: LogConfig, session: str, head: Head, objects: list[ObjectInfo],
                  own: ObjectInfo | None, sent_ms: int) -> _DeleteSplit:
    """Split what deleting ``head`` at ``sent_ms`` removes from what it must leave.

    One function for :func:`delete_session` and :func:`plan_delete`, so what a dry run
    says is what the delete does. Left, because a session created again at the id
    (or a fork retried into it) may rely on them:

    - a segment starting a chain (seq 0) the head does not name, young enough for
      another session's head to still name it (``landing_bound_ms``): gc deletes it
      once no head does;
    - its own fork marker while that young: a fork retried into the freed id writes the
      same marker again before its head (decision 0031); gc deletes it once no head
      names its child;
    - its activity markers of the days such a session could still commit on (today's,
      and yesterday's up to ``landing_bound_ms`` after midnight): it finds the marker,
      the same bytes its own would be, and relies on it; ``expire`` prunes that day.
    """
    bound = landing_bound_ms(cfg.commit_deadline_ms)
    young_first = [o for o in objects if _maybe_anothers_first(layout, cfg, session, head, o, sent_ms)]
    kept = {o.key for o in young_first}
    own_young = own is not None and sent_ms - own.last_modified_ms < bound
    late, gone = activity.split_by_day(activity.markers_of(layout, session, head.created_at, head.updated_at),
                                       sent_ms - bound)
    return _DeleteSplit(
        objects=[o for o in objects if o.key not in kept],
        own=None if own is None or own_young else own,
        activity=gone,
        left_for_gc=[o.key for o in young_first] + ([own.key] if own is not None and own_young else []),
        left_for_expire=late,
    )


def plan_delete(layout: Layout, session: str, cfg: LogConfig) -> Proc[DeletePlan]:
    """What :func:`delete_session` would delete now and leave for gc or expire (a dry run).

    Reads and lists as the delete does, and judges ages at the clock's now, with the
    same rules (:func:`_split_delete`); the delete judges them a moment later, when it
    sends its DELETE, so an object on a boundary may be deleted rather than left.
    """
    head, _, objects, own = yield from _listed_for_delete(layout, session)
    split = _split_delete(layout, cfg, session, head, objects, own, cfg.env.now_ms())
    return DeletePlan(
        session_id=session,
        objects=[layout.head(session), *(o.key for o in split.objects), *([split.own.key] if split.own else [])],
        activity=split.activity,
        left_for_gc=split.left_for_gc,
        left_for_expire=split.left_for_expire,
        left_until_ms=landing_bound_ms(cfg.commit_deadline_ms),
    )


def _maybe_anothers_first(
    layout: Layout, cfg: LogConfig, session: str, head: Head, o: ObjectInfo, now_ms: int
) -> bool:
    """Whether ``o`` may be the first segment of a session created at the id after ``head``
    is deleted (written before that session's create-only head PUT, which may land yet),
    judged at ``now_ms``, when the DELETE of ``head`` was sent."""
    if o.key in head.segments or (head.pending is not None and o.key == head.pending.key):
        return False
    parsed = parse_segment_key(o.key) if layout.is_segment_of(session, o.key) else None
    return parsed is not None and parsed[0] == 0 \
        and now_ms - o.last_modified_ms < landing_bound_ms(cfg.commit_deadline_ms)


def _delete_head(layout: Layout, cfg: LogConfig, session: str, head: Head, etag: str) -> Proc[bool]:
    """DELETE the head of ``session`` if it is still ``head`` (ETag ``etag``).

    True when the head is gone (deleted now, or by another delete); False when the
    same session's head moved on (a commit landed: start over). SessionReplaced when
    another session lives at the id now.
    """
    key = layout.head(session)
    undecided = False
    for attempt in range(1, cfg.retry.attempts + 1):
        try:
            yield from ops.delete_if_match(key, etag)
            return True
        except ConditionalDeleteUnsupported:
            # obstore cannot send If-Match on a DELETE: by key, as before conditional
            # deletes existed, with the race they close left open on that store alone.
            yield from ops.delete(key)
            return True
        except StoreError as exc:
            reply = decide.classify(exc)
            if reply is decide.Reply.NOT_FOUND:
                # Nothing to delete: another delete won (it deletes what it listed too).
                # A new session at the id would have answered 412, not 404.
                return True
            if reply is decide.Reply.FATAL:
                raise
            if reply in (decide.Reply.UNKNOWN, decide.Reply.CONFLICT):
                # A lost reply (the DELETE may have landed: sent again it would meet a
                # 404) or a 409 (nothing done): read what is there before deciding.
                undecided = undecided or reply is decide.Reply.UNKNOWN
                yield from ops.sleep(cfg.retry.backoff(attempt, cfg.env.rng))
        current = yield from _read_head_or_none(layout, session)
        if current is None:
            return True  # this DELETE landed before its reply was lost, or another delete did
        found, found_etag = current
        if decide.etags_equal(found_etag, etag):
            continue  # still the head read: the DELETE did not land; send it again
        if not same_life(found, head):
            # A takeover: created anew (the creator nonce and time are the new session's).
            raise SessionReplaced(session, _identity(head, etag), _identity(found, found_etag),
                                  maybe_deleted=undecided)
        return False
    raise StoreError(f"could not delete the head of session {session}: the store kept failing", key=key)


def _identity(head: Head, etag: str) -> dict[str, Any]:
    """What tells one session at an id from another that took it over, for errors."""
    return dict(head.summary(), created_at=head.created_at, creator=head.creator, etag=etag,
                expired=is_expired(head))


def landing_bound_ms(commit_deadline_ms: int) -> int:
    """How long after a commit is planned a write of it may still land.

    A commit sends no write past its deadline, but one sent just before it is still on
    its way for as long as a request can take, which is taken to be no longer than the
    deadline again (client and server timeouts are seconds to minutes; the default
    deadline is 10 minutes). gc leaves an unreferenced object alone until this old:
    with a grace of the deadline alone, a head PUT sent just before it and landing just
    after could name a segment gc had collected (docs/decisions/0008).
    """
    return 2 * commit_deadline_ms


def gc(
    layout: Layout, *, older_than_ms: int, now: int, dry_run: bool, commit_deadline_ms: int = 0
) -> Proc[GcReport]:
    """Delete segments no head references, and dangling fork markers, once safely unused.

    An unreferenced segment is deleted only when both hold:

    - it is older than ``older_than_ms`` and than :func:`landing_bound_ms` (twice
      ``commit_deadline_ms``): no commit in flight can still reference it (a commit
      sends nothing past its deadline, a request sent before it lands within the
      deadline again, and every segment write uses a new key, so an old unreferenced
      segment stays unreferenced);
    - its session's head last retired segments (``retired_at``) longer than
      ``older_than_ms`` ago: a reader holding an earlier head, which may still list it,
      had the whole grace period to read it.

    A session whose head cannot be read is reported in ``broken`` and left alone.

    Expired sessions (tombstone heads, :mod:`s3log._protocol.retention`) list no segments, so
    theirs are collected like any unreferenced segment, from the tombstone's
    ``retired_at``. The tombstone itself goes once as old, and only with ``If-Match`` on
    the ETag just read: a new session may take the id over from it at any time, and a
    DELETE by key could delete that session. On a store that cannot make a DELETE
    conditional (obstore) tombstones stay (``Log.delete`` removes one).
    """
    grace = max(older_than_ms, landing_bound_ms(commit_deadline_ms))
    objects, _ = yield from list_all(layout.sessions_prefix)
    by_session: dict[str, list[ObjectInfo]] = {}
    for o in objects:
        sid = layout.session_of(o.key)
        if sid is None:
            continue
        try:
            validate_session_id(sid)
        except InvalidSessionIdError:
            continue  # not a session folder: not ours to collect
        by_session.setdefault(sid, []).append(o)
    rows = yield from list_head_rows(layout, sorted(by_session))
    heads = {r.session: r.head for r in rows if r.head is not None}
    broken = sorted(r.session for r in rows if r.head is None)
    with_head = {r.session for r in rows}
    # A pending segment is kept too: its writer may move it into the manifest next.
    referenced = {k for h in heads.values() for k in (*h.segments, *((h.pending.key,) if h.pending else ()))}
    etags = {r.session: r.etag for r in rows}
    doomed: list[str] = []
    # Deleted only with If-Match: a head key -> the ETag read, a fork marker -> the ETag listed.
    conditional: dict[str, str] = {}
    markers: set[str] = set()
    young = 0
    for sid, objs in by_session.items():
        if sid in broken:
            continue
        head = heads.get(sid)
        # retired_at is stamped when the merging commit is planned; its head lands up to
        # landing_bound_ms later: the grace counts from the latest it could have landed.
        retired_recently = (head is not None and head.retired_at is not None
                            and now - head.retired_at < older_than_ms + landing_bound_ms(commit_deadline_ms))
        for o in objs:
            rest = o.key[len(layout.session_dir(sid)):]
            if o.key == layout.head(sid):
                etag = etags.get(sid)
                if head is None or not is_expired(head) or etag is None:
                    continue
                if retired_recently or now - o.last_modified_ms < grace:
                    young += 1
                else:
                    conditional[o.key] = etag
                    doomed.append(o.key)
                continue
            if rest.startswith("seg/"):
                garbage = o.key not in referenced
                recent = retired_recently
            elif rest.startswith("forks/"):
                # A marker is dangling only if its child has no head at all: a child
                # whose head is unreadable is broken, and its parent link is kept. A
                # retried fork writes its marker again (new bytes) before its head, so
                # the DELETE names the copy listed: a newer one stays (decision 0008).
                # A listing without ETags leaves markers alone.
                garbage = rest[len("forks/"):] not in with_head and bool(o.etag)
                recent = False
            else:
                continue
            if not garbage:
                continue
            if recent or now - o.last_modified_ms < grace:
                young += 1
            else:
                if rest.startswith("forks/"):
                    conditional[o.key] = o.etag
                    markers.add(o.key)
                doomed.append(o.key)
    # A tombstone is deleted only if it is still the head read (If-Match): a new session
    # may take the id over from it at any moment, and that one must not be deleted. A
    # fork marker only if it is still the copy listed. A 412 (taken over, written
    # again), a 404 (deleted meanwhile) or a store that cannot make a DELETE
    # conditional (obstore: nothing is sent) leaves whatever is there.
    deleted: list[str] = []
    if doomed and not dry_run:
        results = yield from ops.parallel(
            [DeleteIfMatch(k, conditional[k]) if k in conditional else Delete(k) for k in doomed])
        # A fork marker on a store without conditional DELETE (obstore) goes by key, the
        # race with a retried fork kept on that store alone: left for ever, it made a fork
        # with that explicit child id (LangGraph's copy_thread) fail for ever instead.
        by_key = [k for k, r in zip(doomed, results, strict=True)
                  if isinstance(r, ConditionalDeleteUnsupported) and k in markers]
        if by_key:
            again = dict(zip(by_key, (yield from ops.parallel([Delete(k) for k in by_key])), strict=True))
            results = [again.get(k, r) for k, r in zip(doomed, results, strict=True)]
        deleted = [k for k, r in zip(doomed, results, strict=True) if r is None]
        for k in deleted:
            log.info("gc deleted %s", k)
        # Anything else (access denied: a role without GetObject on what it deletes with
        # If-Match; a store fault past its retries) is reported, not passed over: left
        # out silently, it showed as "nothing to collect" while garbage piled up.
        benign = (PreconditionFailed, ObjectNotFound, ConditionalDeleteUnsupported)
        failed = {k: str(r) for k, r in zip(doomed, results, strict=True)
                  if r is not None and not isinstance(r, benign)}
        for k, why in failed.items():
            log.warning("gc could not delete %s: %s", k, why)
    return GcReport(len(heads), doomed, deleted, young, broken, failed if doomed and not dry_run else {})


# ------------------------------------------------------------------- precondition probe

#: A folder no session id can name (ids start with a letter or digit): listings and gc skip it.
PROBE_DIR = "_probe/"


#: Requests each race of the probe sends at once: create-only PUTs of one new key, then
#: ``If-Match`` PUTs of it on one ETag (docs/decisions/0034).
PROBE_RACERS = 4


def probe_preconditions(layout: Layout, cfg: LogConfig) -> Proc[ProbeReport]:
    """Check that the store honours what commits and deletes rely on (docs/decisions/0012, 0034).

    With ``N`` = :data:`PROBE_RACERS` (4), an honest store and no fault: ``2N + 4`` = 12
    PUTs and 2 DELETEs in three round trips, nothing else:

    1. a create-only PUT of ``{P}/sessions/_probe/head`` (must meet 412), an ``If-Match``
       PUT of ``{P}/sessions/_probe/missing`` with an ETag no object has (404 or 412),
       ``N`` concurrent create-only PUTs of a new key ``{P}/sessions/_probe/race/{id}``
       (``id`` from ``cfg.env``: exactly one must succeed), and a create-only PUT of
       ``{P}/sessions/_probe/race/{id}.del``;
    2. ``N`` concurrent ``If-Match`` PUTs of the race key on the winner's ETag (exactly
       one must succeed), and a DELETE of ``{id}.del`` with ``If-Match`` on the ETag its
       PUT got (must delete it);
    3. an ``If-Match`` PUT and an ``If-Match`` DELETE of the race key on that first
       ETag, stale now (neither may write or delete).

    The first probe of a bucket creates ``_probe/head`` in round 1 and sends that PUT
    again in round 2: 13 PUTs. A single PUT that met a transient error is sent again in
    the next round, and then after a backoff, up to ``cfg.retry.attempts`` rounds in all;
    a race and each other request are sent once. When a race of creates shows no single
    winner, one GET of the race key finds the ETag the ``If-Match`` race starts from.
    On a store that cannot make a DELETE conditional (ConditionalDeleteUnsupported,
    nothing sent) ``delete_if_match`` is ``"unsupported"``. Each probe leaves its race
    key (one object of about 30 bytes) under ``_probe/race/``, which listings and gc
    skip (and ``{id}.del`` where the DELETE was not possible).
    """
    base = layout.sessions_prefix + PROBE_DIR
    singles = _ProbeSingles(base + "head", base + "missing", dumps({"v": 1, "probe": "s3log"}))
    race_key = f"{base}race/{cfg.env.new_id()}"
    doomed = race_key + ".del"
    creates = [PutIfAbsent(race_key, _race_body(0, i)) for i in range(PROBE_RACERS)]
    results = yield from singles.round([*creates, PutIfAbsent(doomed, _race_body(0, PROBE_RACERS))])
    doomed_etag = results[-1] if isinstance(results[-1], str) else None
    racing_creates, etag, why = _race_outcome(results[:-1], "create-only PUTs of one new key")
    singles.details += why
    if etag is None and racing_creates is not True:
        # No single winner seen (ignored, or replies lost): the ETag the key has now.
        got = yield from ops.parallel([Get(race_key)])
        etag = got[0].etag if isinstance(got[0], Blob) else None
    racing_match: bool | None = None
    stale_match: bool | None = None
    deletes = _ProbeDeletes(race_key, doomed)
    second: list[Op] = []
    if etag is not None:
        second += [PutIfMatch(race_key, _race_body(1, i), etag) for i in range(PROBE_RACERS)]
    if doomed_etag is not None:
        second.append(DeleteIfMatch(doomed, doomed_etag))
    if second:
        results = yield from singles.round(second)
        if doomed_etag is not None:
            deletes.current = results.pop()
    if etag is not None:
        racing_match, won, why = _race_outcome(results, "If-Match PUTs on one ETag")
        singles.details += why
        if won is not None or racing_match is False:
            # The key was rewritten (other bytes, so another ETag): ``etag`` is stale.
            results = yield from singles.round([PutIfMatch(race_key, _race_body(2, 0), etag),
                                                DeleteIfMatch(race_key, etag)])
            stale_match = _stale_outcome(results[0], race_key, singles.details)
            deletes.stale = results[1]
    yield from singles.finish(cfg)
    delete_match = deletes.outcome(singles.details)
    detail = "; ".join(singles.details) or "conditional writes and deletes are honoured"
    return ProbeReport(singles.none_match, singles.match, detail, stale_if_match=stale_match,
                       racing_if_match=racing_match, racing_creates=racing_creates, delete_if_match=delete_match)


_UNSENT = object()


@dataclass
class _ProbeDeletes:
    """The probe's two conditional DELETEs: of ``doomed`` on its current ETag (must
    delete it), of the race key on a stale ETag (must delete nothing)."""

    race_key: str
    doomed: str
    current: object = _UNSENT
    stale: object = _UNSENT

    def outcome(self, details: list[str]) -> ProbeSeen:
        """Honoured, ignored, untested (None) or unsupported, with what was seen in ``details``."""
        if any(isinstance(r, ConditionalDeleteUnsupported) for r in (self.current, self.stale)):
            return "unsupported"
        stale = decide.classify(self.stale) if self.stale is not _UNSENT else None
        current = decide.classify(self.current) if self.current is not _UNSENT else None
        if stale is decide.Reply.OK:
            details.append(f"a DELETE with If-Match on a stale ETag deleted {self.race_key}")
            return False
        if stale is decide.Reply.PRECONDITION and current is decide.Reply.OK:
            return True
        if current is decide.Reply.PRECONDITION:
            # A store that refuses every conditional DELETE deletes nothing it should
            # not: gc, rm and expire would delete nothing; the stale refusal says nothing.
            details.append(f"a DELETE with If-Match on the current ETag was refused ({self.doomed})")
        elif self.current is not _UNSENT and self.stale is not _UNSENT:
            seen = self.stale if current is decide.Reply.OK else self.current
            details.append(f"could not test If-Match on DELETE: {seen}")
        return None


def _race_body(round_no: int, racer: int) -> bytes:
    # Bytes differ per round and racer: each write gives the key another ETag.
    return dumps({"v": 1, "probe": "s3log", "round": round_no, "racer": racer})


def _race_outcome(results: Sequence[object], what: str) -> tuple[bool | None, str | None, list[str]]:
    """(honoured?, the winner's ETag, details) of one race of conditional PUTs."""
    wins = [r for r in results if isinstance(r, str)]
    if len(wins) > 1:
        return False, None, [f"{len(wins)} of {len(results)} racing {what} succeeded"]
    if wins:
        return True, wins[0], []
    seen = sorted({decide.classify(r).name for r in results})
    return None, None, [f"could not test racing {what}: none succeeded ({', '.join(seen)})"]


def _stale_outcome(result: object, key: str, details: list[str]) -> bool | None:
    reply = decide.classify(result)
    if reply in (decide.Reply.PRECONDITION, decide.Reply.NOT_FOUND):
        return True
    if reply is decide.Reply.OK:
        details.append(f"a PUT with If-Match on a stale ETag replaced {key}")
        return False
    details.append(f"could not test If-Match with a stale ETag: {result}")
    return None


@dataclass
class _ProbeSingles:
    """The probe's two single conditional PUTs, sent again in each round until decided."""

    exists_key: str
    missing_key: str
    body: bytes
    none_match: bool | None = None
    match: bool | None = None
    details: list[str] = field(default_factory=list)
    created: bool = False
    decided: set[str] = field(default_factory=set)
    rounds: int = 0

    def _pending(self) -> list[PutIfAbsent | PutIfMatch]:
        out: list[PutIfAbsent | PutIfMatch] = []
        if "none_match" not in self.decided:
            out.append(PutIfAbsent(self.exists_key, self.body))
        if "match" not in self.decided:
            out.append(PutIfMatch(self.missing_key, self.body, '"s3log-probe-no-such-etag"'))
        return out

    def round(self, others: Sequence[Op]) -> Proc[list[Any]]:
        """Send the undecided singles with ``others`` in one round trip; ``others``' results."""
        mine = self._pending()
        self.rounds += 1
        results = yield from ops.parallel([*mine, *others])
        for op, res in zip(mine, results, strict=False):
            self._take(op, res)
        return results[len(mine):]

    def finish(self, cfg: LogConfig) -> Proc[None]:
        """Send the undecided singles again after a backoff, until decided or out of attempts."""
        while self._pending() and self.rounds < cfg.retry.attempts:
            if not (self.created and "none_match" not in self.decided and self.rounds == 1):
                yield from ops.sleep(cfg.retry.backoff(self.rounds, cfg.env.rng))
            yield from self.round([])

    def _take(self, op: Op, res: object) -> None:
        reply = decide.classify(res)
        if isinstance(op, PutIfAbsent):
            if reply is decide.Reply.PRECONDITION:
                self.none_match = True
                self.decided.add("none_match")
            elif reply is decide.Reply.OK:
                if self.created:
                    self.none_match = False
                    self.decided.add("none_match")
                    self.details.append(f"a create-only PUT (If-None-Match: *) replaced {self.exists_key}")
                self.created = True  # first probe of this bucket: PUT it again
            elif reply is decide.Reply.FATAL:
                self.decided.add("none_match")
                self.details.append(f"could not test If-None-Match: {res}")
        elif reply in (decide.Reply.NOT_FOUND, decide.Reply.PRECONDITION):
            self.match = True
            self.decided.add("match")
        elif reply is decide.Reply.OK:
            self.match = False
            self.decided.add("match")
            self.details.append(f"a PUT with If-Match on a missing object created {self.missing_key}")
        elif reply is decide.Reply.FATAL:
            self.decided.add("match")
            self.details.append(f"could not test If-Match: {res}")


# -------------------------------------------------------------- appending at the latest head


def append_latest(
    layout: Layout,
    cfg: LogConfig,
    session: str,
    pending: Sequence[PendingEntry],
    reducer: Reducer[S],
    *,
    create_meta: Mapping[str, Any] | None = None,
    hint: ChainPosition[S] | None = None,
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
            current = yield from _read_head_or_none(layout, session)
            if current is None:
                if create_meta is None:
                    raise SessionNotFound(session)
                ws = new_writer_state(session, reducer, create_meta, now=cfg.env.now_ms(), creator=cfg.env.nonce())
            elif is_expired(current[0]):
                # Expired by retention: never written on (its entries would be unreadable
                # and collected with it). With create_meta the id starts again, as a new
                # root chain that replaces the tombstone (If-Match on it: a racing sweep
                # or writer wins); its old segments get gc's grace from now.
                if create_meta is None:
                    raise _expired(current[0])
                fresh = new_writer_state(session, reducer, create_meta, now=cfg.env.now_ms(), creator=cfg.env.nonce())
                ws = _over_tombstone(fresh, current[0], current[1], fresh.head.created_at)
                takeover = True
            else:
                ws = ChainPosition(session, current[0], current[1], reducer.initial(), {})
        if ws.head.append_keys and any(p.key is not None for p in pending):
            found = yield from _stored_by_key(layout, ws.head, pending)
            acked.update((order[i], e) for i, e in found.items())
            pending = [p for i, p in enumerate(pending) if i not in found]
            order = [x for i, x in enumerate(order) if i not in found]
            if not pending:
                return CommitResult(ws, durable, [acked[i] for i in sorted(acked)])
        try:
            # Fresh entries: only this call's own undecided PUTs can have stored them.
            result = yield from commit(layout, cfg, ws, pending, reducer, "raise", maybe_landed=False,
                                       takeover=takeover)
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


def _stored_by_key(layout: Layout, head: Head, pending: Sequence[PendingEntry]) -> Proc[dict[int, AckedEntry]]:
    """The entries of ``pending`` whose append key ``head`` remembers, by index: the
    stored entry each stands for. AppendKeyReused if one had other content."""
    out: dict[int, AckedEntry] = {}
    for i, p in enumerate(pending):
        mark = find_append_key(head, p.key) if p.key is not None else None
        if mark is None:
            continue
        if mark.digest != p.digest:
            raise AppendKeyReused(mark.key, head.session, "a different kind or data")
        stored = yield from stored_for_key(layout, head, mark)
        if stored is not None:  # (gone with a compaction or expiry: appended again)
            out[i] = stored
    return out


# ---------------------------------------------------------------------------- compaction

#: Chooses what a compacted session keeps: given the session's logical history (the
#: entries replayed as ``{"kind", "ts", "data"}`` maps, a fork's seed included) and its
#: head, the maps to keep, in order; None to leave the session unchanged.
Selector = Callable[[list[dict[str, Any]], Head], list[dict[str, Any]] | None]


def _kept_entries(session: str, kept: object) -> list[PendingEntry]:
    """The entries a compaction's selector kept, each checked as ``append`` checks one
    (:class:`InvalidEntryError` or :class:`InvalidArgumentError` naming what is wrong)."""
    if isinstance(kept, (str, bytes, Mapping)) or not isinstance(kept, Iterable):
        raise InvalidArgumentError("select", f"must return a list of entry maps or None, not {type(kept).__name__}",
                                   session=session)
    out: list[PendingEntry] = []
    for i, e in enumerate(kept):
        if not isinstance(e, Mapping) or "kind" not in e or "ts" not in e:
            raise InvalidArgumentError("select", f"item {i} of what it returned is not a map with 'kind' and 'ts' "
                                                 f"(and 'data'): {e!r:.200}", session=session)
        kind = e["kind"]
        try:
            check_kind(kind)
        except InvalidEntryError as exc:
            raise InvalidEntryError(kind, str(exc).split(": ", 1)[-1], session=session) from None
        ts = check_ts(kind, e["ts"], session=session)
        out.append(PendingEntry(kind, ts, normalize_data(kind, e.get("data"), session=session)))
    return out


def compact_session(layout: Layout, cfg: LogConfig, session: str, select: Selector) -> Proc[bool]:
    """Rewrite a session, at the same id, as a new root chain of what ``select`` keeps.

    The head is replaced with If-Match on the ETag just read, so a concurrent commit
    wins and this raises ConflictError (try again). The old segments are no longer
    referenced; ``retired_at`` gives readers holding the old head gc's grace period.
    Nothing kept deletes the session. Returns whether anything changed. For retention
    (pruning a checkpointer's old states): the new chain does not verify against the
    old one, by design.
    """
    from s3log.reducer import EntriesReducer

    data = yield from load(layout, session)
    reducer = EntriesReducer()
    history = replay(reducer, data.entries)
    kept = select(history, data.head)
    if kept is None:
        return False
    # What the selector returns is input, checked as append checks it, before anything
    # is written: an entry a reader refuses (a ts that is not an int, a kind that is not
    # text or is s3log's own) made the rewritten session unreadable, its old segments
    # retired for gc; a ts past MAX_TS made every scan skip it.
    pending = _kept_entries(session, kept)
    if not pending:
        # Only the head decided on: a concurrent commit wins here too (ConflictError).
        yield from delete_session(layout, session, cfg, etag=data.etag)
        return True
    now = cfg.env.now_ms()
    # A new chain: the append keys' seqs name entries of the old one (decision 0037).
    # Which chain end this replaces: a writer whose commit landed in it unacknowledged
    # (a lost reply) finds its entries there by that, not by hash (_landed_before_compaction).
    tips = [e.hash[:_TIP] for e in data.entries[-COMPACTION_WINDOW:]]
    mark: dict[str, Any] = {"seq": data.head.seq, "hash": data.head.hash, "n": compactions(data.head) + 1,
                            "tips": tips}
    last = data.head.extra.get(COMPACTED_FIELD)
    if isinstance(last, dict):
        prev = last.get("prev")
        mark["prev"] = [{k: v for k, v in last.items() if k != "prev"},
                        *(prev if isinstance(prev, list) else [])][: COMPACTION_MARKS - 1]
    fresh = replace(data.head, seq=-1, hash=None, segments=(), levels=(), tail=(), parent=None,
                    ts_min=None, ts_max=None, retired_at=now, pending=None, append_keys=(),
                    extra={**data.head.extra, COMPACTED_FIELD: mark})
    ws = ChainPosition(session, fresh, data.etag, reducer.initial(), {})
    entries = build_chain(pending, after_seq=-1, after_hash=None)
    # Not commit(): its landed-prefix check would take a concurrent chain that merely
    # starts with the same entries for ours. Any other head is a conflict here.
    _, outcome, _ = yield from _write(layout, cfg, ws, entries)
    if outcome.kind != "committed":
        found = dict(outcome.found[0].summary(), etag=outcome.found[1]) if outcome.found else None
        raise ConflictError(session, dict(data.head.summary(), etag=data.etag), found)
    return True
