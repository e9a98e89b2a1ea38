"""The sans-IO core of agent sessions, shared by the blocking and the asyncio shells.

Every decision lives here: what a verb records, when the write-behind buffer commits,
how a crashed turn is repaired, which fork ``follow_forks`` opens, whether a session
is in scope, what must not be stored (a session holding only an empty start). Decisions
are written as generator procedures that yield small operations (:class:`Open`,
:class:`Commit`, ...) and receive their results; :class:`~s3log.agent.AgentSession`
performs them against a :class:`~s3log.Log`, :class:`~s3log.agent.AsyncAgentSession`
awaits them against an :class:`~s3log.AsyncLog`. Nothing else differs between the two.

It also keeps the registry of live sessions per log, so closing a log (or the
interpreter exiting) drains what is still buffered.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import secrets
import socket
import threading
import time
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from s3log._api.writer import WriterVerbs
from s3log._format.cbor import dumps
from s3log._format.entries import normalize_data_cbor
from s3log._format.values import Entry, Head
from s3log._protocol.protocol import OnConflict, is_expired
from s3log.agent.state import (
    CACHE_LOCKED,
    CACHE_UNLOCKED,
    CONFIG_CHANGED,
    OUTCOME,
    SESSION_START,
    STATUSES,
    TOOL_STARTED,
    TURN_END,
    AgentReducer,
    ReadOnlyDict,
    SessionState,
    freeze,
    group_items,
    repair_records,
)
from s3log.errors import ConflictError, EntryNotFound, InvalidEntryError, S3LogError
from s3log.results import ForkInfo, HeadRow, SessionInfo

T = TypeVar("T")
_log = logging.getLogger("s3log")
#: The writer of an agent session (either shell's): its state is a SessionState.
AgentWriter = WriterVerbs[SessionState]


class SessionScopeError(S3LogError):
    """A session's header labels are not the ones the caller is scoped to; nothing was written."""

    def __init__(self, session: str, label: str, expected: Any, found: Any, *, missing: bool = False) -> None:
        self.session = session
        self.label = label
        self.expected = expected
        self.found = found
        self.missing = missing
        what = "no such label" if missing else repr(found)
        super().__init__(
            f"session {session} is out of scope: label {label!r} expected {expected!r}, found {what}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_scope_error, (self.session, self.label, self.expected, self.found, self.missing))


def _scope_error(session: str, label: str, expected: Any, found: Any, missing: bool) -> SessionScopeError:
    return SessionScopeError(session, label, expected, found, missing=missing)


class SessionBusy(S3LogError):
    """Another worker holds a live lease on the session and its turn is open.

    ``owner`` and ``expires_at`` (ms) say who and until when; restore again after that,
    pass ``wait=`` to wait for it, or ``force=True`` to repair the turn anyway.
    """

    def __init__(self, session: str, owner: str, expires_at: int) -> None:
        self.session = session
        self.owner = owner
        self.expires_at = expires_at
        super().__init__(
            f"session {session} is busy: worker {owner!r} holds it with an open turn until {expires_at} ms"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable (a worker process's error must reach its parent intact).
        return (SessionBusy, (self.session, self.owner, self.expires_at))


class AgentArgumentError(S3LogError, ValueError):
    """An argument of an agent-session call is of the wrong shape (raised before anything is written)."""


class AgentItemError(InvalidEntryError, AgentArgumentError):
    """An item-taking argument of a recording verb (``items``, ``new_items``,
    ``history``, ``call_ids``) is malformed. An :class:`~s3log.InvalidEntryError`, as
    documented for them, and an :class:`AgentArgumentError`, as every argument of the
    wrong shape; raised before anything is buffered."""


class RecordsLostWarning(UserWarning):
    """Buffered records of an agent session could not be committed before the interpreter exited."""


# ----------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class Create:
    """Start a session lazily (nothing stored); result: its writer."""

    session_id: str | None
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Open:
    """Load and replay a session with the agent reducer, ``on_conflict="raise"``; result: its writer."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Append:
    """Queue one record on a writer (no I/O in either shell); result: None."""

    writer: AgentWriter
    kind: str
    data: Any


@dataclass(frozen=True, slots=True)
class Commit:
    """Commit a writer's queued records; result: the CommitResult."""

    writer: AgentWriter


@dataclass(frozen=True, slots=True)
class ReadHead:
    """One session's head; result: the Head (SessionNotFound if there is none)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Children:
    """The sessions forked from one that have a head, with their heads (read once, for
    both); result: a list of HeadRow (``head`` None: unreadable)."""

    session_id: str


@dataclass(frozen=True, slots=True)
class Fork:
    """Fork a stored session at a committed entry with the agent reducer; result: the child's id."""

    session_id: str
    at_seq: int | None
    at_hash: bytes | str | None
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ListSessions:
    """Every session's row, newest first; result: a list of SessionInfo."""

    limit: int | None


@dataclass(frozen=True, slots=True)
class Renew:
    """Write a writer's head now (its lease renewed or released); result: the CommitResult.

    ``on_conflict``: what a conflict does to records this write commits too (None: the
    writer's own mode).
    """

    writer: AgentWriter
    on_conflict: OnConflict | None = None


@dataclass(frozen=True, slots=True)
class Now:
    """The log's clock (``LogConfig.env``), in ms; result: an int."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep ``seconds`` (blocking, or awaited); result: None."""

    seconds: float


Op = Create | Open | Append | Commit | ReadHead | Children | Fork | ListSessions | Renew | Now | Wait
Proc = Generator[Op, Any, T]


def step(proc: Proc[T], value: Any, error: BaseException | None) -> tuple[Op | None, T | None]:
    """Advance ``proc`` with the last result (or throw the last error into it)."""
    try:
        op = proc.throw(error) if error is not None else proc.send(value)
    except StopIteration as stop:
        return None, stop.value
    return op, None


# ------------------------------------------------------------------ argument checks


def items_arg(
    kind: str, value: Any, *, text: bool = False, session: str | None = None, name: str = "items",
) -> list[dict[str, Any]]:
    """The ``items`` argument of a recording verb as a list of plain dicts.

    One message dict or an iterable of them; a string too when ``text`` (it becomes
    one user message). Each item is checked by :func:`check_item`. Anything else is an
    :class:`AgentItemError` naming the argument (``name``).
    """
    if isinstance(value, str):
        if text:
            return [{"role": "user", "content": value}]
        raise AgentItemError(kind, f"argument {name!r} must be a message dict or a list of them, not a string",
                             session=session)
    if isinstance(value, Mapping):
        return [check_item(kind, value, repr(name), session)]
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        allowed = "a string, a message dict or a list of message dicts" if text else "a message dict or a list of them"
        raise AgentItemError(kind, f"argument {name!r} must be {allowed}, not {type(value).__name__}",
                             session=session)
    return [check_item(kind, item, f"{name!r}[{i}]", session) for i, item in enumerate(value)]


#: Fields of an item the agent state reads (roles group a turn's items, the others are
#: tool calls and their results: docs/agent.md): a string where present (None = absent).
_TEXT_FIELDS = ("role", "type", "call_id", "tool_call_id")


def check_item(kind: str, item: object, where: str, session: str | None) -> dict[str, Any]:
    """One history item as a plain dict: a message dict (string keys, as JSON has) whose
    fields the state reads have the shapes docs/agent.md gives them.

    Stored as given, ``{1: "x"}`` came back from the state with an integer key (a model
    client's JSON turns it into "1"), and a call id such as 7 or ``["a"]`` was matched
    by its text, so a restore answered a call the model never made.
    """
    if not isinstance(item, Mapping):
        raise AgentItemError(kind, f"argument {where} must be a message dict, not {type(item).__name__}",
                             session=session)
    for key in item:
        if not isinstance(key, str):
            raise AgentItemError(kind, f"argument {where} must have string keys (a message dict), "
                                 f"not {key!r}", session=session)
    for field in _TEXT_FIELDS:
        value = item.get(field)
        if value is not None and not isinstance(value, str):
            raise AgentItemError(kind, f"argument {where}[{field!r}] must be a string, not {value!r}",
                                 session=session)
    calls = item.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, (list, tuple)):
            raise AgentItemError(kind, f"argument {where}['tool_calls'] must be a list of tool calls, "
                                 f"not {type(calls).__name__}", session=session)
        for j, call in enumerate(calls):
            if not isinstance(call, Mapping) or any(not isinstance(k, str) for k in call):
                raise AgentItemError(kind, f"argument {where}['tool_calls'][{j}] must be a tool call dict "
                                     f"(string keys), not {call!r}", session=session)
            call_id = call.get("id")
            if call_id is not None and not isinstance(call_id, str):
                raise AgentItemError(kind, f"argument {where}['tool_calls'][{j}]['id'] must be a string, "
                                     f"not {call_id!r}", session=session)
    return dict(item)


def call_ids_arg(value: Any, *, session: str | None = None) -> list[str]:
    """The ``call_ids`` argument of ``tool_started``: one id or an iterable of ids."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, (bytes, bytearray, Mapping)):
        raise AgentItemError(TOOL_STARTED, f"argument 'call_ids' must be a call id or a list of them, "
                             f"not {type(value).__name__}", session=session)
    out = list(value)
    for i, c in enumerate(out):
        if not isinstance(c, str):
            raise AgentItemError(TOOL_STARTED, f"argument 'call_ids'[{i}] must be a string, "
                                 f"not {type(c).__name__}", session=session)
    return out


SESSION_OPTIONS = frozenset({"max_buffer_entries", "max_buffer_bytes", "max_delay", "on_fork", "owner", "lease_ttl"})
#: How often a waiting restore looks at the head again, at most (seconds).
LEASE_POLL = 0.5


def default_owner() -> str:
    """This process's worker id: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


#: The longest ``lease_ttl`` (seconds, about 31 years): a lease's ``expires_at`` (ms)
#: then stays far inside a 64-bit integer, which every reader of a head can decode.
MAX_LEASE_TTL = 10**9


def options_arg(options: Mapping[str, Any]) -> None:
    """Refuse unknown or malformed session options before anything is read or written (a restore may repair)."""
    unknown = sorted(set(options) - SESSION_OPTIONS)
    if unknown:
        raise AgentArgumentError(f"unknown agent session option(s) {unknown}; known: {sorted(SESSION_OPTIONS)}")
    session_args(**options)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def session_args(
    *,
    max_buffer_entries: Any = 64,
    max_buffer_bytes: Any = 256 * 1024,
    max_delay: Any = 2.0,
    on_fork: Any = None,
    owner: Any = None,
    lease_ttl: Any = 300.0,
) -> None:
    """Refuse a malformed session option with :class:`AgentArgumentError`.

    Checked when the session is made, before anything is read or written: a bad value
    found later (by the first record that hits the buffer limits, or the first fork)
    would fail a verb after its record was queued, or even after it was committed.
    """
    for name, value in (("max_buffer_entries", max_buffer_entries), ("max_buffer_bytes", max_buffer_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise AgentArgumentError(f"{name} must be an integer >= 0, not {value!r}")
    if not _is_number(max_delay) or not max_delay >= 0:  # (NaN fails the comparison too)
        raise AgentArgumentError(f"max_delay must be a number of seconds >= 0, not {max_delay!r}")
    if on_fork is not None and not callable(on_fork):
        raise AgentArgumentError(f"on_fork must be a callable (session, info) or None, not {on_fork!r}")
    lease_args(owner, lease_ttl)


def lease_args(owner: Any, lease_ttl: Any) -> None:
    """Refuse a bad ``owner`` or ``lease_ttl`` option (checked before a restore may repair).

    ``lease_ttl`` must be at least a millisecond (the lease is recorded in whole ms) and
    finite (its expiry is an integer).
    """
    if not _is_number(lease_ttl) or not 0.001 <= lease_ttl <= MAX_LEASE_TTL or int(lease_ttl * 1000) < 1:
        raise AgentArgumentError(
            f"lease_ttl must be a number of seconds from 0.001 to {MAX_LEASE_TTL}, not {lease_ttl!r}")
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise AgentArgumentError(f"owner must be a non-empty string, not {owner!r}")


def labels_arg(labels: Any) -> dict[str, Any] | None:
    """A ``labels`` scope argument: None (no scope) or a mapping of label names to values."""
    if labels is None:
        return None
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) for k in labels):
        raise AgentArgumentError(f"labels must be a mapping of label names (str) to values, not {labels!r}")
    return dict(labels)


def check_scope(session: str, meta: Mapping[str, Any], labels: Mapping[str, Any] | None) -> None:
    """Refuse a session whose header labels differ from ``labels`` (each given label must match)."""
    if labels is None:
        return
    found = meta.get("labels")
    found = found if isinstance(found, Mapping) else {}
    for name, expected in labels.items():
        if name not in found:
            raise SessionScopeError(session, name, expected, None, missing=True)
        if found[name] != expected:
            raise SessionScopeError(session, name, expected, found[name])


def in_scope(meta: Mapping[str, Any], labels: Mapping[str, Any] | None) -> bool:
    """Whether a header's labels match ``labels``."""
    try:
        check_scope("", meta, labels)
    except SessionScopeError:
        return False
    return True


def header(
    *,
    meta: Mapping[str, Any] | None,
    labels: Mapping[str, Any] | None,
    delegation_depth: int,
    parent_session: str | None,
) -> dict[str, Any]:
    """The header of a new agent session."""
    if meta is not None and not isinstance(meta, Mapping):
        raise AgentArgumentError(f"meta must be a mapping, not {meta!r}")
    if not isinstance(delegation_depth, int) or isinstance(delegation_depth, bool) or delegation_depth < 0:
        raise AgentArgumentError(f"delegation_depth must be an integer >= 0, not {delegation_depth!r}")
    if parent_session is not None and (not isinstance(parent_session, str) or not parent_session):
        raise AgentArgumentError(f"parent_session must be a session id (str) or None, not {parent_session!r}")
    out = dict(meta or {})
    out.setdefault("kind", "agent")
    given = labels_arg(labels)
    out["labels"] = given if given is not None else (labels_arg(out.get("labels")) or {})
    out["delegation_depth"] = delegation_depth
    out["parent"] = parent_session
    out["seed_len"] = 0
    return out


# ---------------------------------------------------------------------- procedures


def create_proc(session_id: str | None, meta: dict[str, Any]) -> Proc[AgentWriter]:
    """A lazy writer for a new session."""
    writer: AgentWriter = yield Create(session_id, meta)
    return writer


def newest_leaf_proc(session_id: str, labels: Mapping[str, Any] | None) -> Proc[str]:
    """The session ``follow_forks`` continues: the deepest descendant of ``session_id``
    in its fork tree (every session at the deepest level is a leaf), and among those the
    newest (greatest ``created_at``, then greatest id: UUIDv7 ids sort by creation).

    The tree is walked a level at a time: per session, one LIST of its fork markers and
    one parallel read of its forks' heads (one GET per fork). Forks whose head never
    landed, or cannot be read, and forks out of scope, are skipped.
    A fork ``Log.expire`` deleted has no head: the walk ends there (its own forks are
    restored by id). A tombstone head is never chosen, since it cannot be opened, but
    its own forks, which may still be live, are walked into.
    """
    level = [session_id]
    seen = {session_id}
    best = session_id
    while level:
        found: list[tuple[int, str]] = []
        walk: list[str] = []
        for parent in level:
            rows: list[HeadRow] = yield Children(parent)
            for row in rows:
                sid, h = row.session, row.head
                if sid in seen or h is None or h.parent is None or h.parent.session != parent \
                        or not in_scope(h.meta, labels):
                    continue
                seen.add(sid)
                walk.append(sid)
                if not is_expired(h):
                    found.append((h.created_at, sid))
        if found:
            best = max(found)[1]
        level = walk
    return best


def restore_proc(
    session_id: str,
    labels: Mapping[str, Any] | None,
    follow_forks: bool,
    *,
    owner: str | None = None,
    wait: float = 0.0,
    force: bool = False,
) -> Proc[AgentWriter]:
    """Open a session (or its newest fork), check its scope, close a turn a crashed worker left open.

    A turn left open under another worker's live lease is that worker's, still running:
    wait up to ``wait`` seconds for it to end (then continue the same session), else
    raise :class:`SessionBusy`. An expired lease, this ``owner``'s own, or ``force``
    lets the repair go ahead.
    """
    labels = labels_arg(labels)
    if not _is_number(wait) or not 0 <= wait < math.inf:  # (NaN fails the comparison too)
        raise AgentArgumentError(f"wait must be a number of seconds >= 0 (finite), not {wait!r}")
    deadline: int | None = None
    waited = 0.0
    target = session_id
    if follow_forks:
        root: Head = yield ReadHead(session_id)
        check_scope(session_id, root.meta, labels)  # refuse before walking someone else's tree
        target = yield from newest_leaf_proc(session_id, labels)
    while True:
        writer: AgentWriter = yield Open(target)
        check_scope(writer.session_id, writer.head.meta, labels)
        fixes = repair_records(writer.state)
        if not fixes:
            break
        # An open turn under another worker's live lease is not a crash: that worker is
        # running (a double invocation, a long tool call). The lease came with the head
        # the Open read: no extra request.
        lease = writer.head.lease
        if lease is not None and lease.owner != owner and not force:
            now: int = yield Now()
            if lease.live(now):
                if deadline is None:
                    deadline = now + int(wait * 1000)
                # Bounded by the log's clock and by the time slept: a clock that stands
                # still while this sleeps (a simulator's, a test's) must not wait forever.
                left = min((deadline - now) / 1000, wait - waited)
                if left <= 0:
                    raise SessionBusy(writer.session_id, lease.owner, lease.expires_at)
                pause = max(0.001, min(LEASE_POLL, left, (lease.expires_at - now) / 1000))
                yield Wait(pause)
                waited += pause
                continue
        if lease is not None and lease.owner:
            # The repair closes the turn the lease was for: its commit clears the lease
            # (a release clears only the named owner's lease), so the head no longer
            # shows a worker holding a session nobody is running.
            writer.hold_lease(lease.owner, 1)
            writer.release_lease()
        _log.info("session %s: repairing a turn a stopped worker left open (%d records)", writer.session_id, len(fixes))
        for kind, data in fixes:
            yield Append(writer, kind, data)
        try:
            yield Commit(writer)
            break
        except ConflictError:
            continue  # another worker changed it (maybe repaired it): look again
    writer.on_conflict = "fork"
    return writer


def fork_at_proc(
    session_id: str,
    at_hash: bytes | str | None,
    at_seq: int | None,
    labels: Mapping[str, Any] | None,
) -> Proc[AgentWriter]:
    """A new session holding ``session_id``'s state at a stored point, exactly as replayed.

    The fork is not repaired: forking at a user message (to ask the model again) must
    give that prefix with its turn open, not a turn closed as interrupted.
    """
    if isinstance(at_seq, int) and not isinstance(at_seq, bool) and at_seq < 0:
        # No entry has a negative seq; the log would read it as "before the first entry"
        # and store an empty fork, with no session start. Refused here, before anything
        # is written (protocol._check_at_seq is left as it is: its other callers may
        # rely on it).
        raise EntryNotFound(session_id, f"seq {at_seq}")
    head: Head = yield ReadHead(session_id)
    meta = dict(head.meta)
    given = labels_arg(labels)
    if given is not None:
        meta["labels"] = given
    child: str = yield Fork(session_id, at_seq, at_hash, meta)
    writer: AgentWriter = yield Open(child)
    writer.on_conflict = "fork"
    return writer


def list_proc(labels: Mapping[str, Any] | None, limit: int | None) -> Proc[list[SessionInfo]]:
    """Agent sessions (header ``kind: agent``) whose labels match, newest first."""
    labels = labels_arg(labels)
    rows: list[SessionInfo] = yield ListSessions(limit)
    return [r for r in rows if r.meta.get("kind") == "agent" and in_scope(r.meta, labels)]


# -------------------------------------------------------------------------- sessions


ForkCallback = Callable[[Any, ForkInfo], None]


class SessionCore(ABC):
    """What :class:`AgentSession` and :class:`AsyncAgentSession` share: the buffer,
    the buffered state, and every decision, as procedures the shells run."""

    log: Any
    _writer: AgentWriter

    def __init__(
        self,
        log: Any,
        writer: AgentWriter,
        *,
        max_buffer_entries: int = 64,
        max_buffer_bytes: int = 256 * 1024,
        max_delay: float = 2.0,
        on_fork: ForkCallback | None = None,
        owner: str | None = None,
        lease_ttl: float = 300.0,
    ) -> None:
        session_args(max_buffer_entries=max_buffer_entries, max_buffer_bytes=max_buffer_bytes,
                     max_delay=max_delay, on_fork=on_fork, owner=owner, lease_ttl=lease_ttl)
        self.log = log
        self._writer = writer
        #: The worker id this session records in the head's lease while a turn is open.
        self.owner = owner or default_owner()
        self.lease_ttl_ms = int(lease_ttl * 1000)
        self.max_buffer_entries = max_buffer_entries
        self.max_buffer_bytes = max_buffer_bytes
        self.max_delay = max_delay
        self._on_fork = on_fork
        self._buffered_bytes = 0
        self._oldest: float | None = None
        #: The last automatic commit's error, kept until a flush succeeds.
        self.last_error: BaseException | None = None
        self._pending_state: SessionState = self._durable_state()
        self._reducer = AgentReducer()
        # True while the only record is an empty session start (no history) of a session
        # not stored yet: such a session is abandoned if nothing follows, and must not
        # take its id. A start seeded with history holds what the caller would lose.
        self._start_only = False
        self._discarded = False
        # The writer must not keep the session alive: a dropped session with nothing
        # unsaved is simply collected (one with unsaved records is held by the registry
        # until drained), hence a weak reference.
        ref = weakref.ref(self)

        def forked(info: ForkInfo) -> None:
            session = ref()
            if session is not None and session._on_fork is not None:
                session._on_fork(session, info)

        writer.on_fork(forked)
        _register(self)

    # ---------------------------------------------------------------- properties

    @property
    def session_id(self) -> str:
        """The session recorded to (changes after an automatic fork)."""
        return self._writer.session_id

    @property
    def state(self) -> SessionState:
        """The state including buffered records (read-only)."""
        return self._pending_state

    @property
    def committed_state(self) -> SessionState:
        """The state of what is durable (read-only)."""
        return self._durable_state()

    def _durable_state(self) -> SessionState:
        state = self._writer.state
        head = self._writer.head
        if state.head_hash is None and head.hash is not None:
            # A fork holding only its fork entry: the fold seeds its state from the
            # parent's without seeing that entry (reducer.fold), so no hash was folded
            # in; the session's last entry is still that fork entry, the head's hash.
            state = replace(state, head_hash=head.hash.hex())
        return state

    @property
    def meta(self) -> Mapping[str, Any]:
        """The session header (a read-only copy: the stored header changes only through records)."""
        meta = freeze(self._writer.head.meta)
        assert isinstance(meta, ReadOnlyDict)  # a mapping freezes to one
        return meta

    @property
    def forks(self) -> list[ForkInfo]:
        """Automatic forks this session made."""
        return self._writer.forks

    @property
    def buffered(self) -> int:
        """Records not yet committed."""
        return self._writer.pending

    def unsaved(self) -> int:
        """Records that would be lost if the process ended now (a lone session start is not one)."""
        return 0 if self._start_only or self._discarded else self._writer.pending

    def discard(self) -> int:
        """Give up this session: its buffered records are dropped, knowingly (closing the log
        and exiting no longer try to commit them), and every later verb raises. For a session
        whose commit cannot succeed, such as one whose id turned out to be taken. Returns how
        many records were dropped."""
        dropped = self.unsaved()
        self._discarded = True
        _track(self)
        return dropped

    def _check_usable(self) -> None:
        if self._discarded:
            raise S3LogError(f"agent session {self.session_id} was discarded")

    # ---------------------------------------------------------------- procedures

    def _p_record(self, kind: str, data: dict[str, Any]) -> Proc[None]:
        try:
            yield from self._p_buffer(kind, data)
        finally:
            _track(self)

    def _p_buffer(self, kind: str, data: dict[str, Any]) -> Proc[None]:
        self._check_usable()
        yield Append(self._writer, kind, data)
        was_open = self._pending_state.turn_open
        self._pending_state = self._reducer.apply(self._pending_state, _provisional(kind, data))
        opened = self._pending_state.turn_open and not was_open
        # A turn is leased while it is open: the commits of the turn carry the lease, the
        # one that closes it releases it. Opening a turn commits at once, so a restore
        # elsewhere (a double invocation) sees the live turn instead of a stale head.
        if self._pending_state.turn_open:
            if self._writer.lease_owner != self.owner:
                self._writer.hold_lease(self.owner, self.lease_ttl_ms)
        elif self._writer.lease_owner is not None:
            self._writer.release_lease()
        self._start_only = kind == SESSION_START and self._writer.head.version == 0 and not data.get("history")
        self._buffered_bytes += len(dumps(data))
        now = time.monotonic()
        if self._oldest is None:
            self._oldest = now
        if self._start_only:
            return
        if (
            opened
            or self._writer.pending >= self.max_buffer_entries
            or self._buffered_bytes >= self.max_buffer_bytes
            or now - self._oldest >= self.max_delay
        ):
            try:
                yield from self._p_flush()
            except S3LogError as exc:
                self.last_error = exc  # kept: the next flush retries and raises

    def _p_flush(self, *, force: bool = False) -> Proc[None]:
        try:
            yield from self._p_commit(force)
        finally:
            _track(self)

    def _p_commit(self, force: bool) -> Proc[None]:
        self._check_usable()
        w = self._writer
        if w.pending == 0 and w.head.version > 0:
            self.last_error = None
            return
        if self._start_only and not force:
            return  # nothing but the session start: storing it would occupy the id for nothing
        yield Commit(w)
        self.last_error = None
        self._buffered_bytes = 0
        self._oldest = None
        self._start_only = False
        if w.pending == 0:
            self._pending_state = self._durable_state()

    def _p_start(
        self, system_prompt: str | None, config: Mapping[str, Any] | None, history: Sequence[Mapping[str, Any]]
    ) -> Proc[None]:
        items = items_arg(SESSION_START, history, session=self.session_id, name="history") if history else []
        if config is not None and not isinstance(config, Mapping):
            raise InvalidEntryError(SESSION_START, f"argument 'config' must be a mapping, not {type(config).__name__}",
                                    session=self.session_id)
        return self._p_record(SESSION_START, {
            "system_prompt": system_prompt, "config": dict(config or {}), "history": items,
        })

    def _p_items(self, kind: str, items: Any, *, text: bool = False) -> Proc[None]:
        return self._p_record(kind, {"items": items_arg(kind, items, text=text, session=self.session_id)})

    def _p_tool_started(self, call_ids: Any) -> Proc[None]:
        yield from self._p_record(TOOL_STARTED, {"call_ids": call_ids_arg(call_ids, session=self.session_id)})
        yield from self._p_flush()  # a side effect is about to happen: make the fact durable first

    def _p_turn_end(self) -> Proc[None]:
        yield from self._p_record(TURN_END, {"turn": self._pending_state.turn_count + 1})
        yield from self._p_flush()

    def _p_outcome(self, status: str, message: str | None, interrupted: bool) -> Proc[None]:
        _check_status(status, self.session_id)
        yield from self._p_record(OUTCOME, {"status": status, "message": message, "interrupted": interrupted})
        yield from self._p_flush()

    def _p_config_changed(self, config: Mapping[str, Any]) -> Proc[None]:
        if not isinstance(config, Mapping):
            raise InvalidEntryError(CONFIG_CHANGED, f"argument 'config' must be a mapping, not {type(config).__name__}",
                                    session=self.session_id)
        return self._p_record(CONFIG_CHANGED, {"config": dict(config)})

    def _p_cache_locked(self, prefix_len: int) -> Proc[None]:
        if not isinstance(prefix_len, int) or isinstance(prefix_len, bool) or prefix_len < 0:
            # int() would take "3", 3.9 or True and store something the caller did not mean.
            raise InvalidEntryError(CACHE_LOCKED, f"argument 'prefix_len' must be an integer >= 0, "
                                    f"not {prefix_len!r}", session=self.session_id)
        return self._p_record(CACHE_LOCKED, {"prefix_len": int(prefix_len)})

    def _p_cache_unlocked(self) -> Proc[None]:
        return self._p_record(CACHE_UNLOCKED, {})

    def _p_record_turn(self, new_items: Any, outcome: str | None, message: str | None) -> Proc[None]:
        runs = group_items(items_arg("record_turn", new_items, session=self.session_id, name="new_items"))
        if outcome is not None:
            _check_status(outcome, self.session_id)
        records: list[tuple[str, dict[str, Any]]] = [(kind, {"items": items}) for kind, items in runs]
        if outcome is not None:
            records.append((OUTCOME, {"status": outcome, "message": message, "interrupted": False}))
        # Every record is checked as the writer's queue will check it, before the first
        # is queued: the first one may open the turn, which commits at once, so a bad
        # later item would otherwise leave half a turn stored (and the turn open).
        for kind, data in records:
            normalize_data_cbor(kind, data, session=self.session_id)
        for kind, data in records:
            yield from self._p_record(kind, data)
        yield from self._p_turn_end()

    def _p_renew(self) -> Proc[None]:
        """Renew the lease of the open turn (for a long tool call): one PUT of the head."""
        self._check_usable()
        w = self._writer
        if w.lease_owner is None:
            return
        # With records buffered, the renewal commits them too, and a conflict would fork
        # them into a new session without a word; the renewal must tell the caller that
        # another worker wrote the session meanwhile (decision 0023), so it raises. The
        # records stay buffered: the next commit forks them, as any lost race does.
        # (For this one commit only: the writer's own mode stays "fork" for the others.)
        try:
            yield Renew(w, on_conflict="raise")
        finally:
            _track(self)
        if w.pending == 0:
            self._buffered_bytes = 0
            self._oldest = None
            self._pending_state = self._durable_state()

    def _p_abandon(self) -> Proc[None]:
        """Drain after the caller's block raised: its open turn is given up, so the drain
        releases the turn's lease too (a retry then repairs the turn at once instead of
        finding it busy until the lease expires)."""
        self._check_usable()
        w = self._writer
        if w.lease_owner is not None:
            w.release_lease()
            if w.pending == 0:
                yield Renew(w)  # nothing to commit: the release is a head-only write
                return
        yield from self._p_flush()
        lease = w.head.lease
        if lease is not None and lease.owner == self.owner and w.pending == 0:
            # The flush stored the turn without writing the release: the batch was carried
            # by a commit already in flight (an async cancellation), or by one whose reply
            # was lost and which this flush found landed and adopted. Either way the head
            # still carries this worker's lease, so release it with a head-only write,
            # else a retry would find the abandoned turn busy until the lease expires.
            w.hold_lease(self.owner, 1)
            w.release_lease()
            yield Renew(w)

    def _p_fork(self, labels: Mapping[str, Any] | None) -> Proc[AgentWriter]:
        # The parent must be stored to be forked, even if it holds only its start.
        yield from self._p_flush(force=True)
        return (yield from fork_at_proc(self.session_id, self._writer.head.hash, None, labels))

    # ----------------------------------------------------------- shell-specific

    @abstractmethod
    def _flush_at_exit(self) -> None:
        """Commit what is buffered from an interpreter-exit hook (raise if impossible)."""

    @abstractmethod
    def _hook_log_close(self) -> None:
        """Make closing this session's log drain it (called once per log, for its first session)."""


def _check_status(status: str, session: str) -> None:
    if status not in STATUSES:
        raise InvalidEntryError(OUTCOME, f"argument 'status' must be one of {STATUSES}, not {status!r}",
                                session=session)


def _provisional(kind: str, data: Any) -> Entry:
    # The buffered state is folded with a placeholder hash; the real one comes at commit.
    return Entry(-1, None, kind, 0, data, b"\0" * 32)


# -------------------------------------------------------------------------- registry

_LOCK = threading.Lock()
_LIVE: weakref.WeakKeyDictionary[Any, weakref.WeakSet[SessionCore]] = weakref.WeakKeyDictionary()
# Sessions holding records not yet committed, held strongly: a session dropped before
# its buffer was drained is kept until close(log) or exit commits it, never lost quietly.
_UNSAVED: set[SessionCore] = set()
_EXIT_HOOKED = False


def _track(session: SessionCore) -> None:
    with _LOCK:
        if session.unsaved():
            _UNSAVED.add(session)
        else:
            _UNSAVED.discard(session)


def _register(session: SessionCore) -> None:
    global _EXIT_HOOKED
    with _LOCK:
        sessions = _LIVE.get(session.log)
        first_on_log = sessions is None
        if sessions is None:
            sessions = _LIVE[session.log] = weakref.WeakSet()
        sessions.add(session)
        hook_exit, _EXIT_HOOKED = not _EXIT_HOOKED, True
    if hook_exit:
        _hook_exit()
    if first_on_log:
        session._hook_log_close()


def live_sessions(log: Any) -> list[SessionCore]:
    """The agent sessions opened on ``log`` that are still referenced."""
    with _LOCK:
        return list(_LIVE.get(log, ()))


def raise_first(errors: list[tuple[str, BaseException]]) -> None:
    """Raise the first drain error, noting which other sessions failed too."""
    if not errors:
        return
    first = errors[0][1]
    for sid, err in errors[1:]:
        first.add_note(f"session {sid} could not be drained either: {err}")
    raise first


def _hook_exit() -> None:
    # threading's exit hooks run before concurrent.futures stops taking work (a commit
    # that writes a segment uses the log's thread pool) and before non-daemon threads
    # are joined; hooks run newest first, and concurrent.futures registered its own at
    # import, before any session existed. atexit is the fallback on interpreters without it.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(drain_at_exit)
            return
        except RuntimeError:
            pass  # the interpreter is already shutting down
    atexit.register(drain_at_exit)


def drain_at_exit() -> None:
    """Commit what live sessions still buffer; warn, naming each session and count, for what cannot be."""
    with _LOCK:
        sessions = [s for group in _LIVE.values() for s in group]
    for session in sessions:
        lost = session.unsaved()
        if not lost:
            continue
        sid = session.session_id
        try:
            session._flush_at_exit()
        except Exception as exc:
            warnings.warn(RecordsLostWarning(
                f"s3log.agent: session {sid}: {lost} buffered record(s) lost at exit, not committed: "
                f"{type(exc).__name__}: {exc}"
            ), stacklevel=1)


