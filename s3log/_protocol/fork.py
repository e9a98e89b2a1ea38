"""Forks, sans-IO: creating a child session, its marker under the parent, finding children.

A fork is a new session whose first entry points at its parent; its marker is written
under the parent before its head, so every fork that exists can be found from the
parent (:func:`children`, :func:`child_heads`), and :func:`lineage` walks back. A fork
an undecided commit left is created again into the same child (:class:`~s3log._protocol.state.ForkDoubt`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import cbor2

from s3log._format.cbor import dumps, loads
from s3log._format.chain import PendingEntry, build_chain, fork_entry_data
from s3log._format.entries import MAX_INTERNAL_DEPTH, normalize_data
from s3log._format.layout import Layout
from s3log._format.values import FORK_KIND, AppendKey, Entry, Head, ParentRef
from s3log._protocol import decide
from s3log._protocol.append_keys import inherited_keys
from s3log._protocol.listing import list_all, list_head_rows, valid_ids
from s3log._protocol.ops import Proc, PutIfAbsent
from s3log._protocol.read import entry_now, landed_prefix, load, read_head, read_head_or_none
from s3log._protocol.state import ChainPosition, CommitJournal, ForkDoubt, LeasePlan, new_writer_state
from s3log._protocol.write import HeadOutcome, adopt, advance, stale_position, write_head
from s3log.config import LogConfig
from s3log.errors import CorruptionError, EntryNotFound, InvalidArgumentError, SessionExists, SessionNotFound
from s3log.reducer import Reducer, S, fold, replay
from s3log.results import HeadRow, LineageStep

log = logging.getLogger("s3log")


def children(layout: Layout, session: str) -> Proc[list[str]]:
    """The sessions forked from ``session``, found through its fork markers: those with a
    head (one LIST, then one GET per marker, in parallel; see :func:`child_heads`)."""
    return [row.session for row in (yield from child_heads(layout, session))]


def child_heads(layout: Layout, session: str, *, newest: int | None = None) -> Proc[list[HeadRow]]:
    """The sessions forked from ``session`` that have a head, with their heads, as
    :func:`~s3log._protocol.listing.list_head_rows` gives them (one LIST, then one GET per marker, in parallel;
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
    ids = valid_ids([o.key[len(base):] for o in objects], base)
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
                if child is None or child.parent is None or child.parent.reason != "conflict" or child.expired:
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
        if steps and not head.expired and not (yield from _still_holds(layout, head, steps[-1].parent)):
            # Another session took the id over (a new root chain over an expired or
            # deleted parent): it is not the parent, and the lineage ends here.
            steps.append(LineageStep(current, None, replaced=True))
            break
        steps.append(LineageStep(current, head.parent, head.expired))
        current = head.parent.session if head.parent else None
    return steps


def _still_holds(layout: Layout, head: Head, ref: ParentRef | None) -> Proc[bool]:
    """Whether ``head``'s chain still holds the entry a child forked after (``ref``):
    false when the session at that id is another one now, or that chain is gone
    (expired or deleted, its segments collected). A fork of an empty chain (seq -1) is
    held by any."""
    if ref is None or ref.seq < 0:
        return True
    entry = yield from entry_now(layout, head, ref.seq)
    return entry is not None and entry.hash == ref.hash


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
    ``journal``: while a child's head PUT may have landed, its :class:`~s3log._protocol.state.ForkDoubt`.
    ``doubt``: a fork from ``parent`` that an earlier commit of these entries left
    undecided: its first attempt creates that child again, with the same creator nonce
    and time (so the same fork entry); if its head is stored, the entries are
    continued from what it holds. ``inherit``: the parent's append keys the child's
    head remembers (:func:`~s3log._protocol.append_keys.inherited_keys`).
    """
    if child is not None:
        yield from _check_child(layout, parent, child)
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
        ws = _child_position(sid, reducer, meta, parent, now, creator, inherit)
        entries = build_chain([fork_pending, *pending], after_seq=-1, after_hash=None)
        # Until it is settled, this child may hold the entries: a commit that raises or
        # is abandoned meanwhile leaves the doubt for the next one to resolve.
        reusing = attempt == 0 and doubt is not None
        marker, rewrite = _fork_marker(layout, cfg, parent, sid, now, reusing=reusing, replace_marker=replace_marker)
        carried = max(doubt.carried, len(pending)) if reusing and doubt is not None else len(pending)
        journal.forks[parent] = ForkDoubt(parent, sid, creator, now, carried)
        journal.fork_sent = True
        plan, outcome, written = yield from write_head(
            layout, cfg, ws, entries, before_head=[] if rewrite else [marker], rewrite=rewrite, lease=lease,
            journal=journal, sources=[fork_pending, *pending])
        if outcome.kind == "committed" and outcome.etag is not None and plan is not None:
            journal.forks.pop(parent, None)
            state = fold(reducer, ws.state, entries)
            return advance(cfg, ws, plan, outcome.etag, state, written), entries
        if outcome.found is not None and outcome.found[0].creator == creator:
            ours = yield from _found_ours(layout, journal, parent, ws, reducer, entries, outcome,
                                          doubt if reusing else None)
            if ours is not None:
                return ours
            if child is not None or attempt == 3:
                raise SessionExists(sid)
            continue
        # The id is another's (its head has another creator): ours cannot be stored there.
        journal.forks.pop(parent, None)
        if child is not None and outcome.found is None and not replace_marker \
                and written.get(marker.key) is decide.Confirmed.TAKEN:
            replace_marker = True  # only the marker was there: once more, replacing it
            continue
        if child is not None or attempt == 3:
            raise SessionExists(sid)
    raise AssertionError("unreachable")


def _check_child(layout: Layout, parent: ParentRef, child: str) -> Proc[None]:
    """Refuse an explicit ``child`` id that is the parent's or is taken, before anything is written."""
    if child == parent.session:
        raise InvalidArgumentError("child_id", f"a session cannot fork into itself ({child})")
    if (yield from read_head_or_none(layout, child)) is not None:
        raise SessionExists(child)


def _child_position(
    sid: str, reducer: Reducer[S], meta: Mapping[str, Any] | None, parent: ParentRef, now: int, creator: str,
    inherit: tuple[AppendKey, ...],
) -> ChainPosition[S]:
    """The position of a writer creating the child ``sid``, remembering ``inherit``."""
    ws = new_writer_state(sid, reducer, meta, parent, now=now, creator=creator)
    return replace(ws, head=replace(ws.head, append_keys=inherit)) if inherit else ws


def _fork_marker(
    layout: Layout, cfg: LogConfig, parent: ParentRef, sid: str, now: int, *, reusing: bool, replace_marker: bool,
) -> tuple[PutIfAbsent, list[tuple[PutIfAbsent, Callable[[bytes], bool]]]]:
    """The fork marker of ``sid`` under ``parent``, and the markers to write again
    before the head instead of creating it (:func:`~s3log._protocol.write.rewrite_marker`)."""
    marker_map = {"v": 1, "child": sid, "parent": parent.to_map(), "created_at": now}
    marker = PutIfAbsent(layout.fork_marker(parent.session, sid), dumps(marker_map))
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
    return marker, rewrite


def _found_ours(
    layout: Layout, journal: CommitJournal, parent: ParentRef, ws: ChainPosition[S], reducer: Reducer[S],
    entries: list[Entry], outcome: HeadOutcome, doubt: ForkDoubt | None,
) -> Proc[tuple[ChainPosition[S], list[Entry]] | None]:
    """After the child's head PUT met a head with our creator nonce: the position and
    entries of ours it holds, or None if it holds none (the id is taken then).

    Created by this writer and changed since, or by an earlier commit's PUT (``doubt``,
    when this attempt reused its child): the entries it holds are a prefix of ours (the
    same fork entry first); continue from that head, or behind it if someone wrote
    after them (the next commit meets them).
    """
    assert outcome.found is not None
    found_head, found_etag = outcome.found
    # Only what a PUT of ours may have carried there is looked for: all of it if
    # this attempt's own PUT may have landed, else what the doubt's PUTs carried.
    limit = len(entries) if outcome.uncertain or doubt is None else 1 + doubt.carried
    landed = yield from landed_prefix(layout, found_head, entries[:limit])
    journal.forks.pop(parent, None)
    if landed == 0:
        # Ours once, but it no longer holds our fork entry (expired since, its head a
        # tombstone): the key is taken, so no PUT of ours can land there any more; the
        # entries go to a new child.
        return None
    done = entries[:landed]
    state = fold(reducer, ws.state, done)
    if found_head.hash == done[-1].hash:
        return adopt(ws, found_head, found_etag, state), done
    return stale_position(ws, done, state), done


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
            raise InvalidArgumentError("at_hash", f"{at_hash!r} is not hex", session=session) from None
    if at_hash is not None and len(at_hash) != 32:
        raise InvalidArgumentError("at_hash", f"an entry hash is 32 bytes (64 hex digits), not {len(at_hash)}",
                                   session=session)
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
