"""Reading and verifying a chain, sans-IO: a head, then its segments.

Every read of a session goes through here: one head (:func:`read_head`, checked before
any segment is fetched), the whole chain (:func:`load`), the runs a bulk reader takes
(:func:`load_runs_from_head`), the newest entries (:func:`load_suffix`), one entry
(:func:`entry_at`), and how much of a commit landed (:func:`landed_prefix`). Its own
room because writers, forks, deletes and retention all read through it, and it writes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from s3log._format.chain import ChainVerifier, check_fork_origin
from s3log._format.codec import Segment, decode_head, decode_segment, decode_segment_columns
from s3log._format.columns import RunColumns, tail_run
from s3log._format.layout import MAX_SEGMENTS, Layout, parse_segment_key
from s3log._format.manifest import segment_ranges, segments_for_range
from s3log._format.values import Entry, Head, new_entry
from s3log._protocol import decide, ops
from s3log._protocol.ops import Blob, Get, Parallel, Proc
from s3log._protocol.state import EXPIRED_FIELD, SessionData, same_life, tombstone_hash
from s3log.errors import CorruptionError, EntryNotFound, ObjectNotFound, SegmentMissing, SessionExpired, SessionNotFound
from s3log.results import EntryRun
from s3log.signing import SignatureError, verified_head

log = logging.getLogger("s3log")


def read_head(layout: Layout, session: str, *, expired_ok: bool = False) -> Proc[tuple[Head, str]]:
    """GET and decode a session's head; a tombstone raises SessionExpired unless ``expired_ok``."""
    key = layout.head(session)
    try:
        blob = yield from ops.get(key)
    except ObjectNotFound:
        raise SessionNotFound(session) from None
    head = decode_head(blob.body, key)
    yield from check_head(layout, head, session, key)
    if head.expired and not expired_ok:
        raise expired_error(head)
    return head, blob.etag


def expired_error(head: Head) -> SessionExpired:
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
    if layout.verifier is not None and head.expired:
        # ``expired`` is outside the signed payload: it is what it says only if the signed
        # seq and hash are the tombstone's of the chain it names (else a signed live
        # head, with ``expired`` added, would read as expired; docs/format.md).
        gone = head.extra[EXPIRED_FIELD]
        if head.seq != gone["seq"] or head.hash != tombstone_hash(session, gone["hash"]):
            raise SignatureError(key, session, head.sig.key_id if head.sig else None,
                                 "its 'expired' field does not match the signed seq and hash (a tombstone's "
                                 "hash names the chain it ended)", seq=head.seq)


def read_head_or_none(layout: Layout, session: str) -> Proc[tuple[Head, str] | None]:
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
    results: list[Any] = yield Parallel(tuple(Get(k, segment_decoder(k)) for k in keys))
    return _decoded_segments(session, keys, results)


def segment_decoder(key: str) -> Callable[[Blob], Segment]:
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
    current = yield from read_head_or_none(layout, session)
    if current is None:
        raise SessionNotFound(session, "it was deleted while being read") from None
    if decide.etags_equal(current[1], etag):
        raise missing
    if current[0].expired:
        raise expired_error(current[0]) from None  # expired meanwhile: no chain to read
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
        results: list[Any] = yield Parallel((*(Get(k, segment_decoder(k)) for k in keys), Get(pending_key)))
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


def load_runs_from_head(layout: Layout, head: Head, etag: str) -> Proc[tuple[Head, list[EntryRun]]]:
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
    layout: Layout, head: Head, segments: Sequence[tuple[str, str, EntryRun]], *, upto_seq: int | None = None
) -> None:
    """Verify a chain read as runs, the one sequence every read of a whole chain (or a
    prefix) goes through: each segment ``(key, its session, its run)`` in order, where it
    joins the chain; then the tail, if the read reaches it, and (reading it all) that
    the head names the last entry; then a fork's origin."""
    verifier = ChainVerifier(head.session)
    verified: list[EntryRun] = []
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


def _first_entry(runs: Sequence[EntryRun]) -> Entry | None:
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
    data = yield from load_suffix_data(layout, session, enough)
    return data.head, data.entries


def load_suffix_data(
    layout: Layout, session: str, enough: Callable[[Sequence[Entry]], bool]
) -> Proc[SessionData]:
    """:func:`load_suffix` with the head's ETag, for a writer continuing from the suffix
    (its ``segments`` are those read; no pending segment is confirmed)."""
    head, etag = yield from read_head(layout, session)
    for _ in range(3):
        try:
            head, entries, read = yield from _suffix_from(layout, session, head, enough)
            return SessionData(session, head, etag, entries, dict(read), None)
        except SegmentMissing as missing:
            head, etag = yield from _moved_on(layout, session, etag, missing)
    head, entries, read = yield from _suffix_from(layout, session, head, enough)
    return SessionData(session, head, etag, entries, dict(read), None)


def _suffix_from(
    layout: Layout, session: str, head: Head, enough: Callable[[Sequence[Entry]], bool]
) -> Proc[tuple[Head, list[Entry], list[tuple[str, tuple[Entry, ...]]]]]:
    """:func:`load_suffix` from ``head``, already read; also the segments read (key, entries)."""
    entries = list(head.tail)
    read: list[tuple[str, Segment]] = []
    remaining = list(head.segments)
    while remaining and (not entries or not enough(entries)):
        key = remaining.pop()
        segs = yield from fetch_segments(layout, session, [key])
        read.insert(0, (key, segs[key]))
        entries = list(segs[key].entries) + entries
    _verify_suffix(layout, head, read, entries, whole=not remaining)
    return head, entries, [(key, seg.entries) for key, seg in read]


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
        if head.expired:
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


def entry_now(layout: Layout, head: Head, seq: int) -> Proc[Entry | None]:
    """:func:`entry_at` for a head read a while ago: the entry at ``seq`` if the chain
    ``head`` describes still holds it, or None if it is gone.

    A segment ``head`` lists may have been collected since (the session compacted, or
    expired or deleted and its segments removed): the session's current head is read
    then, and the entry looked up there if it is the same chain (the same creation);
    None if the session is gone, expired, or its id holds another chain now. Without
    this, every caller would meet the missing segment again on every attempt.
    """
    try:
        return (yield from entry_at(layout, head, seq))
    except (ObjectNotFound, SegmentMissing):
        pass
    current = yield from read_head_or_none(layout, head.session)
    if current is None:
        return None
    now = current[0]
    if now.expired or not same_life(now, head):
        return None
    try:
        return (yield from entry_at(layout, now, seq))
    except (ObjectNotFound, SegmentMissing):
        return None  # moved on again meanwhile: as gone, for now


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
