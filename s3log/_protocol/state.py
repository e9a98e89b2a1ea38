"""The values the protocol's procedures pass between them, and what a head says of itself.

A writer's :class:`ChainPosition`, a verified :class:`SessionData`, the
:class:`CommitJournal` and :class:`ForkDoubt` a commit keeps for its caller, the
:class:`LeasePlan` it records; and the predicates on a head (expired, same life) that
every verb asks. No requests: the other modules of :mod:`s3log._protocol` import from
here, and this imports none of them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic

from s3log._format.values import Entry, Head, ParentRef
from s3log.config import LogConfig
from s3log.reducer import Reducer, S, replay

log = logging.getLogger("s3log")


#: An ETag no object has: a writer holding it meets a 412 on its next commit.
STALE_ETAG = '"s3log-stale"'


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


#: The head field that makes a head a tombstone (s3log._protocol.retention): the session expired.
EXPIRED_FIELD = "expired"


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




def empty_head(
    session: str, meta: Mapping[str, Any] | None, parent: ParentRef | None, now: int, creator: str | None = None,
) -> Head:
    """The head of a session before its first write (version 0: not stored), created at ``now`` (ms).

    ``creator``: a nonce of the writer creating it, stored in the head, so that writer
    recognises its own create when the response was lost (see :func:`~s3log._protocol.commit.commit`).
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
