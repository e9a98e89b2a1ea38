"""Deleting, sans-IO: a session (:func:`delete_session`), its dry run, and gc.

A delete removes the head first (If-Match on the ETag read) and leaves what a session
created again at the id may rely on; gc collects what no head references once no
commit in flight or reader can still need it (:func:`landing_bound_ms`). One room, as
both judge the same ages with the same rules.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from s3log._format.ids import validate_session_id
from s3log._format.layout import Layout, parse_segment_key
from s3log._format.values import Head
from s3log._protocol import activity, decide, ops
from s3log._protocol.listing import list_all, list_head_rows
from s3log._protocol.ops import Delete, DeleteIfMatch, ObjectInfo, Proc
from s3log._protocol.read import read_head, read_head_or_none
from s3log._protocol.state import same_life
from s3log.config import LogConfig
from s3log.errors import (
    ConditionalDeleteUnsupported,
    ConflictError,
    InvalidSessionIdError,
    ObjectNotFound,
    PreconditionFailed,
    SessionReplaced,
    StoreError,
)
from s3log.results import DeletePlan, GcReport

log = logging.getLogger("s3log")


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
        current = yield from read_head_or_none(layout, session)
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
                expired=head.expired)


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
    by_session = _by_session(layout, objects)
    rows = yield from list_head_rows(layout, sorted(by_session))
    heads = {r.session: r.head for r in rows if r.head is not None}
    broken = sorted(r.session for r in rows if r.head is None)
    # A pending segment is kept too: its writer may move it into the manifest next.
    referenced = {k for h in heads.values() for k in (*h.segments, *((h.pending.key,) if h.pending else ()))}
    etags = {r.session: r.etag for r in rows}
    sweep = _GcSweep(layout, now, grace, referenced, {r.session for r in rows})
    for sid, objs in by_session.items():
        if sid in broken:
            continue
        head = heads.get(sid)
        # retired_at is stamped when the merging commit is planned; its head lands up to
        # landing_bound_ms later: the grace counts from the latest it could have landed.
        retired_recently = (head is not None and head.retired_at is not None
                            and now - head.retired_at < older_than_ms + landing_bound_ms(commit_deadline_ms))
        sweep.judge(sid, objs, head, etags.get(sid), retired_recently)
    deleted: list[str] = []
    failed: dict[str, str] = {}
    if sweep.doomed and not dry_run:
        deleted, failed = yield from sweep.collect()
    return GcReport(len(heads), sweep.doomed, deleted, sweep.young, broken, failed)


def _by_session(layout: Layout, objects: Sequence[ObjectInfo]) -> dict[str, list[ObjectInfo]]:
    """``objects`` by the session folder they are in; those in no session's are left out."""
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
    return by_session


@dataclass(slots=True)
class _GcSweep:
    """What gc finds to delete (``doomed``, in order) and how many it leaves as too
    young; judged at ``now`` with ``grace``, against the segments some head
    references and the sessions that have a head."""

    layout: Layout
    now: int
    grace: int
    referenced: set[str]
    with_head: set[str]
    doomed: list[str] = field(default_factory=list)
    #: Deleted only with If-Match: a head key -> the ETag read, a fork marker -> the ETag listed.
    conditional: dict[str, str] = field(default_factory=dict)
    markers: set[str] = field(default_factory=set)
    young: int = 0

    def judge(self, sid: str, objs: Sequence[ObjectInfo], head: Head | None, etag: str | None,
              retired_recently: bool) -> None:
        """Judge the objects of session ``sid`` (its head ``head``, read with ``etag``)."""
        layout = self.layout
        for o in objs:
            rest = o.key[len(layout.session_dir(sid)):]
            if o.key == layout.head(sid):
                if head is None or not head.expired or etag is None:
                    continue
                if retired_recently or self.now - o.last_modified_ms < self.grace:
                    self.young += 1
                else:
                    self.conditional[o.key] = etag
                    self.doomed.append(o.key)
                continue
            if rest.startswith("seg/"):
                garbage = o.key not in self.referenced
                recent = retired_recently
            elif rest.startswith("forks/"):
                # A marker is dangling only if its child has no head at all: a child
                # whose head is unreadable is broken, and its parent link is kept. A
                # retried fork writes its marker again (new bytes) before its head, so
                # the DELETE names the copy listed: a newer one stays (decision 0008).
                # A listing without ETags leaves markers alone.
                garbage = rest[len("forks/"):] not in self.with_head and bool(o.etag)
                recent = False
            else:
                continue
            if not garbage:
                continue
            if recent or self.now - o.last_modified_ms < self.grace:
                self.young += 1
            else:
                if rest.startswith("forks/"):
                    self.conditional[o.key] = o.etag
                    self.markers.add(o.key)
                self.doomed.append(o.key)

    def collect(self) -> Proc[tuple[list[str], dict[str, str]]]:
        """DELETE what is doomed: the keys deleted, and why each that failed did."""
        doomed, conditional = self.doomed, self.conditional
        # A tombstone is deleted only if it is still the head read (If-Match): a new session
        # may take the id over from it at any moment, and that one must not be deleted. A
        # fork marker only if it is still the copy listed. A 412 (taken over, written
        # again), a 404 (deleted meanwhile) or a store that cannot make a DELETE
        # conditional (obstore: nothing is sent) leaves whatever is there.
        results = yield from ops.parallel(
            [DeleteIfMatch(k, conditional[k]) if k in conditional else Delete(k) for k in doomed])
        # A fork marker on a store without conditional DELETE (obstore) goes by key, the
        # race with a retried fork kept on that store alone: left for ever, it made a fork
        # with that explicit child id (LangGraph's copy_thread) fail for ever instead.
        by_key = [k for k, r in zip(doomed, results, strict=True)
                  if isinstance(r, ConditionalDeleteUnsupported) and k in self.markers]
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
        return deleted, failed
