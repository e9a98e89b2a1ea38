"""What the verbs of :class:`~s3log.Log` and :class:`~s3log.AsyncLog` return.

Plain frozen values, no I/O: commits (:class:`CommitResult`, :class:`ForkInfo`),
reads (:class:`SessionView`, :class:`VerifyReport`, :class:`LineageStep`, :data:`EntryRun`,
and what a head alone tells: :func:`head_outside`), listings
(:class:`SessionInfo`, :class:`HeadRow`), maintenance (:class:`GcReport`,
:class:`DeletePlan`, :class:`ProbeReport`, :class:`ExpireReport`, :class:`ActiveSessions`) and where a
submitted entry stands (:data:`TicketStatus`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Generic, Literal

from s3log._format.columns import RunColumns
from s3log._format.values import FORK_KIND, Entry, Head, ParentRef, short_hash
from s3log.reducer import EntriesReducer, Reducer, S, replay

if TYPE_CHECKING:
    from s3log._protocol.state import ChainPosition

# ------------------------------------------------------------------------------ commits


@dataclass(frozen=True, slots=True, eq=False)
class AckedEntry(Entry):
    """An acknowledged entry and the session it is stored in: reading ``session_id``
    gives this entry at ``seq``.

    One commit can store its entries in more than one session (a prefix found landed
    in the parent after an undecided PUT, the rest in a fork), so the session is said
    per entry, not only per result. Equal to the same :class:`~s3log._format.values.Entry` as read.
    """

    session_id: str = ""

    def __repr__(self) -> str:
        return f"AckedEntry(session_id={self.session_id!r}, {self._repr_fields()})"

    @property
    def position(self) -> tuple[str, int, bytes]:
        """Where the entry is: ``(session_id, seq, hash)``."""
        return (self.session_id, self.seq, self.hash)


def acked_in(session: str, entries: Sequence[Entry]) -> list[AckedEntry]:
    """``entries`` as acknowledged in ``session``."""
    new = object.__new__
    put = object.__setattr__
    out: list[AckedEntry] = []
    for e in entries:
        a = new(AckedEntry)
        # Field by field, as the frozen dataclass's __init__ would, without its checks.
        for name in _ENTRY_FIELDS:
            put(a, name, getattr(e, name))
        put(a, "session_id", session)
        out.append(a)
    return out


#: The fields an AckedEntry copies from its Entry.
_ENTRY_FIELDS = tuple(f.name for f in fields(Entry))


@dataclass(frozen=True, slots=True)
class ForkInfo:
    """A fork made because of a conflict (or explicitly)."""

    parent: ParentRef
    child: str
    found: dict[str, Any] | None

    def __repr__(self) -> str:
        at = short_hash(self.parent.hash) if self.parent.hash else "start"
        return (f"ForkInfo(parent={self.parent.session!r} at seq {self.parent.seq} ({at}), child={self.child!r}, "
                f"reason={self.parent.reason!r})")


@dataclass(frozen=True, slots=True)
class CommitResult(Generic[S]):
    """The outcome of a commit.

    ``entries``: every entry this commit made durable (a fork entry included);
    ``acked``: the committed form of each pending entry, in order; ``fork``: where the
    writer forked to, if it had to. Each entry of both is an :class:`AckedEntry`
    naming the session it is stored in, which is not always :attr:`session_id`: a
    commit that found a prefix of its batch landed in the parent and forked the rest
    holds entries of both.
    """

    # The writer's chain position after the commit: private (read ``session_id``, ``head``
    # and ``etag``); ``append_latest(after=...)`` starts from it.
    _ws: ChainPosition[S] = field(repr=False)
    entries: list[AckedEntry]
    acked: list[AckedEntry]
    fork: ForkInfo | None = None
    #: Every fork this commit made, in order (``fork`` is the last): more than one
    #: when it continued in a fork an earlier commit left undecided and forked from there.
    forks: tuple[ForkInfo, ...] = ()

    @property
    def session_id(self) -> str:
        """The session the writer continues in after this commit (where its last entry
        is; each entry says its own: :attr:`AckedEntry.session_id`)."""
        return self._ws.session

    @property
    def head(self) -> Head:
        """The head this commit wrote (or found its entries under)."""
        return self._ws.head

    @property
    def etag(self) -> str | None:
        """The ETag of that head."""
        return self._ws.etag

    def __repr__(self) -> str:
        seqs = f"{self.acked[0].seq}..{self.acked[-1].seq}" if self.acked else "none"
        last = short_hash(self.acked[-1].hash) if self.acked else "-"
        return (f"CommitResult(session={self.session_id!r}, acked={len(self.acked)} (seq {seqs}, last {last}), "
                f"version={self._ws.head.version}, fork={self.fork!r})")


#: Where an appended entry stands: queued and withdrawable (``pending``), carried by
#: the commit in flight (``committing``), queued after a commit whose head PUT may
#: have been applied (``uncertain``: the next commit finds it landed or writes it; a
#: commit refused outright leaves its entries ``pending``), durable
#: (``committed``), taken back before any commit carried it (``withdrawn``), or not
#: tracked (``unknown``).
#: What the probe saw of one property: honoured, ignored, untested (None), or a request
#: the store cannot send at all.
ProbeSeen = bool | Literal["unsupported"] | None
TicketStatus = Literal["pending", "committing", "uncertain", "committed", "withdrawn", "unknown"]

# -------------------------------------------------------------------------------- reads


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as read: its verified entries and its head."""

    session_id: str
    head: Head
    etag: str
    entries: list[Entry]

    @property
    def meta(self) -> dict[str, Any]:
        """The session header."""
        return self.head.meta

    @property
    def parent(self) -> ParentRef | None:
        """Where this session forked from, or None."""
        return self.head.parent

    @property
    def seed(self) -> Any:
        """The seed a fork started from (None if this session is not a fork)."""
        if self.entries and self.entries[0].kind == FORK_KIND and isinstance(self.entries[0].data, dict):
            return self.entries[0].data.get("seed")
        return None

    def state(self, reducer: Reducer[Any] | None = None) -> Any:
        """The state the reducer (default: the entries themselves) folds these entries to."""
        return replay(reducer or EntriesReducer(), self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)


#: One run of a session's verified entries, as :meth:`Log.read_runs` (and
#: :meth:`AsyncLog.read_runs`) give them, in chain order: a format v2 segment as its
#: verified columns (:class:`~s3log._format.columns.RunColumns`: seqs from ``seq``, the first
#: entry's ``prev``, then ``ts``, ``kinds``, ``hashes``, ``data`` as stored CBOR and
#: ``values`` decoded; no Entry made), or entries (a v1 segment, a tail not in the shape
#: s3log writes). A bulk reader (s3log.analytics) handles both.
EntryRun = RunColumns | tuple[Entry, ...]

def head_outside(head: Head, since: int | None, until: int | None) -> bool:
    """Whether no entry of the session can fall inside ``[since, until)`` (ms; None is
    unbounded), or it has none, from the head's ``ts_min``/``ts_max`` alone: a
    time-window reader skips such a session's segments (as :meth:`Log.read_window` does)."""
    return head.ts_min is None or (since is not None and head.ts_max is not None and head.ts_max < since) or (
        until is not None and head.ts_min >= until
    )


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :meth:`Log.verify` checked: every entry and segment of a chain that verified."""

    session_id: str
    entries: int
    segments: int
    version: int
    ok: bool = True


@dataclass(frozen=True, slots=True)
class LineageStep:
    """One session of a lineage and where it forked from (None for the root).

    ``expired``: the session was expired by retention; its fork still holds its seed.
    ``replaced``: another session lives at this id now (it took an expired or deleted
    parent's id over; its chain does not hold the entry the child forked after): the
    lineage ends here, ``parent`` None, as for a deleted ancestor.
    """

    session: str
    parent: ParentRef | None
    expired: bool = False
    replaced: bool = False

# ----------------------------------------------------------------------------- listings


@dataclass(frozen=True, slots=True)
class HeadRow:
    """A session's head as listed: the head, or None with ``error`` when it is unreadable.

    A listing reports a broken session and goes on: one bad object never hides the rest.
    """

    session: str
    head: Head | None
    error: str | None = None
    #: The head's ETag as read (None with ``error``); not part of the row's value.
    etag: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One row of :meth:`Log.list_sessions`."""

    session_id: str
    entries: int
    version: int
    created_at: int
    updated_at: int
    parent: ParentRef | None
    meta: dict[str, Any] = field(default_factory=dict)
    #: Why the session's head could not be read (None for a healthy session): a
    #: listing reports a broken session as a row and goes on.
    error: str | None = None

    @property
    def broken(self) -> bool:
        """Whether the head of this session could not be read."""
        return self.error is not None

    @staticmethod
    def broken_row(session_id: str, error: str) -> SessionInfo:
        """The row of a session whose head is unreadable."""
        return SessionInfo(session_id, 0, 0, 0, 0, None, {}, error)

    @staticmethod
    def from_head(head: Head) -> SessionInfo:
        """The row of a head."""
        return SessionInfo(
            head.session, head.entry_count, head.version, head.created_at, head.updated_at, head.parent, head.meta
        )

    @staticmethod
    def from_row(row: HeadRow) -> SessionInfo:
        """The row of a listed head (a broken row when it was unreadable)."""
        if row.head is None:
            return SessionInfo.broken_row(row.session, row.error or "")
        return SessionInfo.from_head(row.head)

# -------------------------------------------------------------------------- maintenance


@dataclass(frozen=True, slots=True)
class GcReport:
    """What garbage collection found (and deleted unless it was a dry run).

    ``broken``: sessions whose head could not be read; their objects were left alone.
    ``failed``: keys whose DELETE failed (key -> the error), other than one a 412 or a
    404 answered (changed or deleted meanwhile: left as they are, by design).
    """

    sessions: int
    unreferenced: list[str]
    deleted: list[str]
    kept_young: int
    broken: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeletePlan:
    """What :meth:`~s3log.Log.delete` would do to a session now (:meth:`~s3log.Log.delete_plan`).

    ``objects``: the keys it deletes, the head first (its count is what ``delete``
    returns); ``activity``: activity-index markers of past days it sends a DELETE for
    (where present); left for later, because a session created again at the id, or a
    fork retried into it, may rely on them: ``left_for_gc`` (a young first segment not
    named by the head, its own young fork marker; ``gc`` deletes them once older than
    ``left_until_ms`` and no head names them) and ``left_for_expire`` (its activity
    markers of today, and of yesterday just after midnight; ``expire`` prunes their day).
    """

    session_id: str
    objects: list[str]
    activity: list[str]
    left_for_gc: list[str]
    left_for_expire: list[str]
    #: Twice the commit deadline: how young an object left for gc is.
    left_until_ms: int


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """What the precondition probe saw: whether the store honours each property of
    conditional requests that commits and deletes rely on
    (:func:`s3log._protocol.probe.probe_preconditions`).

    ``if_none_match``: a create-only PUT of an existing object is refused.
    ``if_match``: an ``If-Match`` PUT of a missing object is refused (404 or 412).
    ``stale_if_match``: an ``If-Match`` PUT of an existing object with an ETag it had
    before its last write is refused. ``racing_if_match``: of concurrent ``If-Match``
    PUTs on one current ETag exactly one succeeds. ``racing_creates``: of concurrent
    create-only PUTs of one new key exactly one succeeds. ``delete_if_match``: a DELETE
    with ``If-Match`` on a stale ETag deletes nothing, and one on the current ETag
    deletes the object (what ``Log.delete``, gc and expire rely on); ``"unsupported"``
    on a store that cannot send a conditional DELETE (obstore: expire refuses it, delete
    and gc delete by key, docs/decisions/0032). Each is ``None`` when the probe could
    not test it (access denied, persistent faults, a race nobody won).
    """

    if_none_match: bool | None
    if_match: bool | None
    detail: str
    stale_if_match: bool | None = None
    racing_if_match: bool | None = None
    racing_creates: bool | None = None
    delete_if_match: ProbeSeen = None

    @property
    def checks(self) -> list[tuple[str, ProbeSeen]]:
        """Each property as (what was checked, honoured / ignored / None untested, or
        ``"unsupported"``), in order."""
        return [
            ("If-None-Match on an existing object", self.if_none_match),
            ("If-Match on a missing object", self.if_match),
            ("If-Match with a stale ETag", self.stale_if_match),
            ("racing If-Match PUTs on one ETag (one wins)", self.racing_if_match),
            ("racing creates (If-None-Match) of one key (one wins)", self.racing_creates),
            ("If-Match on DELETE (a stale ETag deletes nothing)", self.delete_if_match),
        ]

    @property
    def ok(self) -> bool:
        """No property was seen ignored."""
        return all(v is not False for _, v in self.checks)

    @property
    def complete(self) -> bool:
        """Every property was tested and seen honoured (a conditional DELETE the store
        cannot send is never relied on: it counts as tested)."""
        return all(v is True or v == "unsupported" for _, v in self.checks)


@dataclass(frozen=True, slots=True)
class ActiveSessions:
    """Sessions committed to since a time, newest id first, and how they were found.

    ``indexed``: from the activity index (no head read); otherwise from every head.
    With the index, a session appears if it had a commit on the first day of the window
    or later, so it may have been idle since slightly before ``since`` (a superset), or
    have been deleted since (``Log.delete`` leaves the markers of its last day, which a
    session created again at the id relies on).
    """

    ids: list[str]
    indexed: bool


@dataclass(frozen=True, slots=True)
class ExpireProgress:
    """Where a sweep stands: sessions looked at so far of ``total``, and what became of them."""

    done: int
    total: int
    expired: int
    kept: int
    errors: int


@dataclass(frozen=True, slots=True)
class ExpireReport:
    """What :meth:`~s3log.Log.expire` did (or, with ``dry_run``, would do).

    ``examined``: sessions listed; ``expired``: ids tombstoned (would be, in a dry
    run); ``kept``: sessions active within the threshold (most without a head read:
    created recently, or in the activity index); ``raced``: ids that committed during
    the sweep and were kept; ``skipped_labels``: idle sessions the label filter kept;
    ``errors``: ``"id: reason"`` for heads that could not be read or written (the next
    sweep tries again); ``pruned_days``: activity index days deleted; ``heads_read``:
    GETs of heads the sweep needed.
    """

    examined: int
    expired: list[str]
    kept: int
    raced: list[str] = field(default_factory=list)
    skipped_labels: int = 0
    errors: list[str] = field(default_factory=list)
    pruned_days: list[str] = field(default_factory=list)
    heads_read: int = 0
    dry_run: bool = False
