"""The commit decision table: every reply a commit can meet, and what s3log does.

Pure functions over typed replies and typed outcomes; no I/O, no clock. The
procedures of :mod:`s3log._protocol` (commit, write, fork, delete) ask these functions what to do and do it, so the
whole commit protocol can be read (and is tested, row by row, in
``tests/test_decide.py``) here, top to bottom.

A commit is: (0) planning: what becomes of a segment written by an earlier commit
and not yet referenced (:func:`pending_step`) and whether the new entries fit the
head or go to a segment, written before or beside the head (:func:`flush_mode`);
(1) create-only PUTs of immutable objects (a segment, a fork marker), then (2) one
conditional PUT of the head (with (1), in the same round trip, when the head keeps
the segment's entries inline), then (3) if the head PUT met another writer, the
log-level decision (acknowledge what landed, adopt, fork or raise).

Replies are classified once (:func:`classify`):

=================  ==================================================================
``OK``             2xx: the request took effect
``NOT_FOUND``      404
``PRECONDITION``   412: If-Match did not match, or If-None-Match found an object
``CONFLICT``       409: a concurrent conditional write; nothing was written
``UNKNOWN``        5xx, throttling, timeout, reset: the write may or may not have landed
``FATAL``          anything else (access denied, no such bucket...): raise it
=================  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from s3log.errors import (
    ConditionalRequestConflict,
    ObjectNotFound,
    PreconditionFailed,
    TransientStoreError,
)


class Reply(Enum):
    """What a store said to one request, as far as the protocol cares."""

    OK = "ok"
    NOT_FOUND = "404"
    PRECONDITION = "412"
    CONFLICT = "409"
    UNKNOWN = "unknown"
    FATAL = "fatal"


def classify(result: object) -> Reply:
    """The :class:`Reply` of a request's result (a value) or error (a StoreError)."""
    if not isinstance(result, BaseException):
        return Reply.OK
    if isinstance(result, ObjectNotFound):
        return Reply.NOT_FOUND
    if isinstance(result, PreconditionFailed):
        return Reply.PRECONDITION
    if isinstance(result, ConditionalRequestConflict):
        return Reply.CONFLICT
    if isinstance(result, TransientStoreError):
        return Reply.UNKNOWN
    return Reply.FATAL


# ------------------------------------------------------- 1. create-only PUT (immutable)


class CreateStep(Enum):
    """Next step after a create-only PUT of an immutable object (segment, fork marker)."""

    DONE = "done"          # it is stored, as we wrote it
    CONFIRM = "confirm"    # something is there: GET it and compare before trusting it
    RETRY = "retry"        # nothing (known to be) written: PUT again after a backoff
    FAIL = "fail"          # raise the store's error


#: Row by row. A 412 is never trusted on its own: a store may report a 409 as
#: "already exists" (obstore does), and an object at that key may not be ours. Only
#: a GET showing our exact bytes lets the head reference it.
CREATE_TABLE: dict[Reply, CreateStep] = {
    Reply.OK: CreateStep.DONE,
    Reply.PRECONDITION: CreateStep.CONFIRM,
    # 409 on a unique key is transient: another request for it was in flight (ours).
    Reply.CONFLICT: CreateStep.RETRY,
    # The PUT may have landed: PUT again; if it had, the repeat meets 412 and confirms.
    Reply.UNKNOWN: CreateStep.RETRY,
    Reply.NOT_FOUND: CreateStep.FAIL,
    Reply.FATAL: CreateStep.FAIL,
}


def after_create(reply: Reply) -> CreateStep:
    """What to do after a create-only PUT replied ``reply``."""
    return CREATE_TABLE[reply]


class Confirmed(Enum):
    """What a GET of an object our create-only PUT found already there showed."""

    OURS = "ours"          # byte for byte what we meant to write: safe to reference
    ABSENT = "absent"      # not there after all (the 412 was not an "exists"): PUT again
    TAKEN = "taken"        # another object holds the key: never reference it
    UNKNOWN = "unknown"    # the GET failed transiently: ask again


def after_confirm(reply: Reply, stored: bytes | None, ours: bytes) -> Confirmed:
    """Judge the GET that confirms an "already exists" reply."""
    if reply is Reply.OK:
        return Confirmed.OURS if stored == ours else Confirmed.TAKEN
    if reply is Reply.NOT_FOUND:
        return Confirmed.ABSENT
    if reply in (Reply.UNKNOWN, Reply.CONFLICT):
        return Confirmed.UNKNOWN
    return Confirmed.TAKEN if reply is Reply.PRECONDITION else Confirmed.UNKNOWN


# --------------------------------------------- 1b. writing a fork marker again (a retried fork)


class RefreshStep(Enum):
    """Next step in writing a fork marker again, with new bytes, before a retried fork's
    head (decision 0008): the marker must be there, and younger than the head, all along."""

    DONE = "done"          # the new bytes are stored
    REPLACE = "replace"    # this fork's earlier copy is there: If-Match PUT on its ETag
    CREATE = "create"      # nothing is there: create-only PUT
    AGAIN = "again"        # read the key again (after a backoff)
    TAKEN = "taken"        # another object holds the key: never touch it
    FAIL = "fail"          # raise the store's error


def after_marker_read(reply: Reply, stored: bytes | None, ours: bytes, same_fork: bool) -> RefreshStep:
    """After the GET of a marker about to be written again: ``same_fork`` says whether
    what is stored is a copy of this fork's marker (any earlier bytes of it)."""
    if reply is Reply.OK:
        if stored == ours:
            return RefreshStep.DONE
        return RefreshStep.REPLACE if same_fork else RefreshStep.TAKEN
    if reply is Reply.NOT_FOUND:
        return RefreshStep.CREATE
    return RefreshStep.AGAIN if reply in (Reply.UNKNOWN, Reply.CONFLICT) else RefreshStep.FAIL


#: After the If-Match PUT of the new bytes. Anything but a 2xx reads the key again:
#: a 412 or 404 is gc's DELETE (or an earlier copy landing late), an unknown outcome
#: shows as our bytes or not.
REPLACE_TABLE: dict[Reply, RefreshStep] = {
    Reply.OK: RefreshStep.DONE,
    Reply.PRECONDITION: RefreshStep.AGAIN,
    Reply.NOT_FOUND: RefreshStep.AGAIN,
    Reply.CONFLICT: RefreshStep.AGAIN,
    Reply.UNKNOWN: RefreshStep.AGAIN,
    Reply.FATAL: RefreshStep.FAIL,
}


def after_marker_replace(reply: Reply) -> RefreshStep:
    """What to do after the If-Match PUT that writes a marker again replied ``reply``."""
    return REPLACE_TABLE[reply]


# ------------------------------------------------------------ 2. the head's conditional PUT


@dataclass(frozen=True, slots=True)
class Committed:
    """The head PUT took effect; ``etag`` is the new head's ETag."""

    etag: str


@dataclass(frozen=True, slots=True)
class Reread:
    """The outcome is unknown or lost to another writer: read the head to find out."""


@dataclass(frozen=True, slots=True)
class SessionGone:
    """The session was deleted while this writer held it."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Nothing happened (the stored head is the one expected): PUT again after a backoff."""


@dataclass(frozen=True, slots=True)
class Lost:
    """Another writer's head is stored: a conflict (check what of ours landed under it)."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Out of attempts with the outcome still undecided: raise; nothing is acknowledged."""


@dataclass(frozen=True, slots=True)
class Fatal:
    """The store refused in a way no retry fixes: raise its error."""


HeadPutStep = Committed | Reread | SessionGone | Fatal


def after_head_put(reply: Reply, etag: str | None, *, creating: bool) -> HeadPutStep:
    """What a reply to the head PUT means.

    ``creating``: the PUT was ``If-None-Match: *`` (a session's first head).
    """
    if reply is Reply.OK and etag is not None:
        return Committed(etag)
    if reply is Reply.NOT_FOUND:
        # If-Match on a key that is gone: deleted under us. (A create never gets 404.)
        return Reread() if creating else SessionGone()
    if reply in (Reply.PRECONDITION, Reply.CONFLICT, Reply.UNKNOWN):
        return Reread()
    return Fatal()


#: The replies to a PUT that say it was not applied. After any other reply that is not
#: a success (a timeout, a 5xx, an error of the client), it may have been.
NOT_APPLIED = frozenset({Reply.PRECONDITION, Reply.CONFLICT, Reply.NOT_FOUND})


def may_have_applied(reply: Reply) -> bool:
    """Whether a conditional PUT that got ``reply`` may have been applied (see
    :data:`NOT_APPLIED`): a commit that ends after such a reply leaves its entries
    "uncertain", not pending (:class:`s3log._protocol.state.CommitJournal`)."""
    return reply not in NOT_APPLIED


@dataclass(frozen=True, slots=True)
class StoredHead:
    """What re-reading the head found: its writer nonce and ETag."""

    writer: str
    etag: str


RereadStep = Committed | Retry | Lost | SessionGone | GiveUp


def etags_equal(a: str | None, b: str | None) -> bool:
    """ETags compare without their quotes (some stores drop them)."""
    return a is not None and b is not None and a.strip('"') == b.strip('"')


def after_reread(
    found: StoredHead | None, *, expected_etag: str | None, nonce: str, attempt: int, max_attempts: int
) -> RereadStep:
    """Decide from the head as re-read after an unresolved head PUT.

    ==========================================  ==========================
    stored head                                 decision
    ==========================================  ==========================
    carries this commit's writer nonce          committed (response lost)
    none, and we were replacing one             the session was deleted
    none, and we were creating it               retry (or give up)
    the ETag we expected                        retry (or give up)
    anything else                               lost to another writer
    ==========================================  ==========================
    """
    if found is not None and found.writer == nonce:
        return Committed(found.etag)
    if found is None:
        if expected_etag is not None:
            return SessionGone()
    elif not etags_equal(found.etag, expected_etag):
        return Lost()
    return GiveUp() if attempt >= max_attempts else Retry()


# --------------------------------------------------- 3. the log's decision after a lost race


@dataclass(frozen=True, slots=True)
class AckAll:
    """Every entry of the batch is in the stored chain: acknowledge them all.

    ``adopt``: the stored head ends with our last entry, so no other writer came
    after us and the writer continues from that head (no fork, no stale view).
    """

    adopt: bool


@dataclass(frozen=True, slots=True)
class AdoptAndRetry:
    """The stored head ends exactly at our ``landed`` entries (or where we started):
    there is no competitor, only our own earlier attempt. Acknowledge the landed ones,
    adopt that head, and commit the rest on it."""

    landed: int


@dataclass(frozen=True, slots=True)
class ForkRest:
    """Another writer advanced the session: acknowledge ``landed``, fork with the rest."""

    landed: int


@dataclass(frozen=True, slots=True)
class RaiseConflict:
    """Another writer advanced the session and the writer was told to raise."""

    landed: int


@dataclass(frozen=True, slots=True)
class IdTaken:
    """Creating a session: its id belongs to someone else (our batch is not all there)."""


ConflictStep = AckAll | AdoptAndRetry | ForkRest | RaiseConflict | IdTaken


def after_lost(
    *,
    creating: bool,
    batch: int,
    landed: int,
    stored_ends_at_ours: bool,
    on_conflict: str,
) -> ConflictStep:
    """Decide after the head PUT lost to a stored head.

    ``landed``: how many entries of the batch the stored chain holds (a prefix, found
    by :func:`s3log._protocol.read.landed_prefix`). ``stored_ends_at_ours``: the stored
    head's last hash is the hash of our last landed entry (or, with nothing landed,
    the hash our batch was chained after), i.e. nobody wrote after us.
    """
    if batch == 0:
        # A head-only update (a lease renewal): redo it on the stored head if nothing
        # was appended meanwhile; if something was, this writer is behind: tell it.
        return AdoptAndRetry(0) if stored_ends_at_ours else RaiseConflict(0)
    if creating and landed < batch:
        # A new session's id is someone else's unless our whole batch is there: a
        # prefix of identical entries (same kind, ts and data, e.g. two sessions
        # started alike in the same millisecond) is a coincidence, not our write.
        return IdTaken()
    if landed == batch:
        return AckAll(adopt=stored_ends_at_ours)
    if stored_ends_at_ours:
        return AdoptAndRetry(landed)
    if on_conflict == "raise":
        return RaiseConflict(landed)
    return ForkRest(landed)


# -------------------------------------------------- 0. planning: pending segments, flushes


class PendingStep(Enum):
    """What a commit does with the segment its head lists as pending."""

    NONE = "none"          # the head lists none
    PROMOTE = "promote"    # confirmed stored: move it into the manifest now
    CARRY = "carry"        # not confirmed by this writer: leave it pending as it is
    DROP = "drop"          # not confirmed, and this commit writes a segment of its own


#: (confirmed, this commit flushes) -> step, for a head that lists a pending segment.
#: Only a segment this writer saw stored, byte for byte its own (its create-only PUT
#: answered 2xx, or a GET of it verified against the chain), may enter the manifest:
#: a head never references a segment that is not confirmed.
PENDING_TABLE: dict[tuple[bool, bool], PendingStep] = {
    (True, False): PendingStep.PROMOTE,
    (True, True): PendingStep.PROMOTE,   # promoted first; the flush plans on top of it
    (False, False): PendingStep.CARRY,   # a later writer may confirm it and promote it
    (False, True): PendingStep.DROP,     # the new segment holds those entries too
}


def pending_step(*, has_pending: bool, confirmed: bool, flushes: bool) -> PendingStep:
    """What to do with the head's pending segment (see :data:`PENDING_TABLE`)."""
    return PENDING_TABLE[(confirmed, flushes)] if has_pending else PendingStep.NONE


class FlushMode(Enum):
    """Where a commit's entries go."""

    INLINE = "inline"          # the head's tail holds them: one PUT
    PARALLEL = "parallel"      # a new segment and the head (still holding them inline), together
    SEQUENTIAL = "sequential"  # the segment first, confirmed, then the head referencing it


def tail_bound(
    *, tail_max_bytes: int, pending_max_bytes: int, commit_bytes: int, tail_per_commit: int, format_version: int
) -> int:
    """How big the head of a commit adding ``commit_bytes`` of records may grow inline.

    ``tail_max_bytes``; for a big commit (format v2), up to ``tail_per_commit`` times
    its own bytes, as long as a next commit of the same size could still flush in one
    round trip (the head then holding both within ``pending_max_bytes``). A commit
    then uploads at most that many times what it adds, or the tail bound, and a group
    commit of 64 ~1 KB entries is one PUT most of the time instead of a head and a
    segment beside it (decision record 0033). Small commits see ``tail_max_bytes``.
    """
    if format_version < 2:
        return tail_max_bytes
    return max(tail_max_bytes, min(tail_per_commit * commit_bytes, pending_max_bytes - commit_bytes))


def flush_mode(
    *, inline_bytes: int, tail_max_bytes: int, pending_max_bytes: int, format_version: int, has_tail: bool,
    commit_bytes: int = 0, tail_per_commit: int = 0,
) -> FlushMode:
    """Choose how to write a commit from the size of its head with every entry inline.

    Within :func:`tail_bound` (``tail_max_bytes`` for a small commit of
    ``commit_bytes``, or with ``tail_per_commit`` 0) the head holds them. Up to ``pending_max_bytes`` (format v2), the
    segment and the head go out in one round trip, the head keeping the entries inline
    until a later commit confirms the segment; beyond (a very large batch, or always
    with ``pending_max_bytes=0``) the head is not allowed to grow, so the segment is
    written and confirmed before the head names it. Format v1 heads have no
    ``pending`` field: always sequential.
    """
    bound = tail_bound(tail_max_bytes=tail_max_bytes, pending_max_bytes=pending_max_bytes,
                       commit_bytes=commit_bytes, tail_per_commit=tail_per_commit, format_version=format_version)
    if inline_bytes <= bound or not has_tail:
        return FlushMode.INLINE
    if format_version >= 2 and inline_bytes <= pending_max_bytes:
        return FlushMode.PARALLEL
    return FlushMode.SEQUENTIAL


# ------------------------------------------------------------------ retries of reads


def may_retry_read(reply: Reply) -> bool:
    """Whether a driver may repeat an idempotent request (GET, LIST, DELETE) by itself."""
    return reply in (Reply.UNKNOWN, Reply.CONFLICT)
