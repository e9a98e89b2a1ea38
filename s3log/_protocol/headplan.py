"""Planning a commit's next head, sans-IO: inline, or flushing a merged segment.

:func:`plan_head` builds the head that follows a writer's position with a batch of
entries: its tail grown (one PUT), or the tail and the batch written to a new segment
merged with the trailing run the levelled policy picks, named pending beside the head
(one round trip) or listed in it (:func:`s3log._protocol.decide.flush_mode` chooses).
It reads only the segments a merge needs and the writer does not hold. Its own room:
what a head holds next is decided here, how it is written in
:mod:`s3log._protocol.write`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from s3log._format.chain import ChainVerifier, PendingEntry
from s3log._format.codec import encode_head, encode_segment
from s3log._format.layout import Layout
from s3log._format.manifest import plan_merge
from s3log._format.values import Entry, Head, Lease, Pending, entry_record
from s3log._protocol import decide
from s3log._protocol.append_keys import key_window
from s3log._protocol.ops import Proc
from s3log._protocol.read import fetch_segments, promotable
from s3log._protocol.state import ChainPosition, LeasePlan
from s3log.config import LogConfig
from s3log.signing import signed_head


@dataclass(frozen=True, slots=True)
class HeadPlan:
    """A commit's next head and its encoding, and the segment it flushes, if any."""

    head: Head
    body: bytes
    segment_key: str | None
    segment_body: bytes | None
    segment_entries: tuple[Entry, ...]
    segment_level: int
    #: The segment goes out beside the head (which lists it as pending), not before it.
    parallel: bool = False


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


def plan_head(
    layout: Layout,
    cfg: LogConfig,
    ws: ChainPosition[Any],
    entries: Sequence[Entry],
    nonce: str,
    lease: LeasePlan | None = None,
    sources: Sequence[PendingEntry] = (),
) -> Proc[HeadPlan]:
    """The next head after ``ws`` with ``entries``: inline, or flushing a merged segment."""
    h = ws.head
    t = cfg.env.now_ms()
    confirmed = h.pending is not None and ws.confirmed == h.pending.key and promotable(h)
    if decide.pending_step(has_pending=h.pending is not None, confirmed=confirmed, flushes=False) \
            is decide.PendingStep.PROMOTE:
        h = _promote(h, t)
    inline = _inline_head(cfg, ws, h, entries, nonce, lease, sources, t)
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
        return HeadPlan(inline, body, None, None, (), 0)
    # This commit writes a segment: an unconfirmed pending one is dropped (the DROP row
    # of decide.PENDING_TABLE: the new segment holds its entries too, and gc collects
    # it once no head names it), as both heads _flush_plan makes replace the field.
    return (yield from _flush_plan(layout, cfg, ws, h, inline, entries, nonce, mode, t))


def _inline_head(
    cfg: LogConfig, ws: ChainPosition[Any], h: Head, entries: Sequence[Entry], nonce: str,
    lease: LeasePlan | None, sources: Sequence[PendingEntry], t: int,
) -> Head:
    """The head after ``h`` (``ws``'s, its pending segment promoted if it was) holding
    ``entries`` in its tail, written at ``t`` by ``nonce``; not signed yet."""
    last = entries[-1] if entries else None
    stamps = [e.ts for e in entries]
    if h.ts_min is not None:
        stamps += [h.ts_min, h.ts_max or h.ts_min]
    # One copy of the head per commit on the common path (inline), made directly: a
    # Head has twenty fields and dataclasses.replace costs twice as much (the field
    # list it follows is checked against Head's below, _NEXT_HEAD_FIELDS).
    return Head(
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


def _flush_plan(
    layout: Layout, cfg: LogConfig, ws: ChainPosition[Any], h: Head, inline: Head, entries: Sequence[Entry],
    nonce: str, mode: decide.FlushMode, t: int,
) -> Proc[HeadPlan]:
    """The plan of a commit that flushes (``mode`` PARALLEL or SEQUENTIAL): the tail
    and the new entries go to one segment, merged with the trailing run of segments
    the policy picks, so the manifest stays short."""
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
            return HeadPlan(head, body, seg_key, segment_body, tuple(run), plan.level, parallel=True)
    head = replace(
        inline,
        segments=(*h.segments[:keep], seg_key),
        levels=(*h.levels[:keep], plan.level),
        tail=(),
        pending=None,
        # Segments merged away stop being referenced now: gc counts its grace from here.
        retired_at=t if merged_keys else h.retired_at,
    )
    return HeadPlan(head, encode_head(head), seg_key, segment_body, tuple(run), plan.level)


#: Every field of Head, as _inline_head sets them: a field added to Head must be added there.
_NEXT_HEAD_FIELDS = ("session", "version", "seq", "hash", "segments", "levels", "tail", "parent", "meta",
                     "created_at", "updated_at", "writer", "ts_min", "ts_max", "retired_at", "creator", "lease", "v",
                     "extra", "sig", "pending", "append_keys")


assert tuple(f.name for f in fields(Head)) == _NEXT_HEAD_FIELDS, "write._inline_head sets every field of Head"
