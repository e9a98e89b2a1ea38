"""The sans-IO core of agent sessions, shared by the blocking and the asyncio shells.

Every decision lives here: what a verb records, when the write-behind buffer commits,
how a crashed turn is repaired, which fork ``follow_forks`` opens, whether a session
is in scope, what must not be stored (a session holding only an empty start). Decisions
are generator procedures that yield calls of the log's and the writer's public verbs
(``log.open``, ``writer.commit``, ``log.child_heads``: :class:`s3log._upper.Call`) and
receive what they return; :class:`~s3log.agent.AgentSession` performs them blocking
(:func:`s3log._upper.run`), :class:`~s3log.agent.AsyncAgentSession` awaits them
(:func:`s3log._upper.arun`). Nothing else differs between the two.

Argument checks are in :mod:`s3log.agent.args`, the errors in :mod:`s3log.agent.errors`,
the registry of live sessions (drained when their log closes, or at exit) in
:mod:`s3log.agent.registry`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Self, TypeVar

from s3log import otel
from s3log._format.cbor import dumps
from s3log._format.entries import normalize_data_cbor
from s3log._format.values import Entry, Head
from s3log._upper import Call, Proc, call
from s3log.agent.args import (
    call_ids_arg,
    check_outcome,
    check_scope,
    check_status,
    default_owner,
    in_scope,
    is_number,
    items_arg,
    labels_arg,
    options_arg,
    session_args,
)
from s3log.agent.errors import AgentArgumentError, SessionBusy
from s3log.agent.registry import register, track
from s3log.agent.state import (
    CACHE_LOCKED,
    CACHE_UNLOCKED,
    CONFIG_CHANGED,
    OUTCOME,
    SESSION_START,
    SUMMARY,
    TOOL_STARTED,
    TURN_END,
    AgentReducer,
    ReadOnlyDict,
    SessionState,
    SummarySpan,
    freeze,
    group_items,
    repair_records,
)
from s3log.agent.summary import span_proc, summary_data
from s3log.aio import AsyncLog, AsyncWriter
from s3log.errors import ConflictError, EntryNotFound, InvalidEntryError, S3LogError
from s3log.log import Log, Writer
from s3log.results import ForkInfo, HeadRow, SessionInfo

T = TypeVar("T")
_log = logging.getLogger("s3log")
#: The log of an agent session (either shell's).
AgentLog = Log | AsyncLog
#: The writer of an agent session (either shell's): its state is a SessionState.
AgentWriter = Writer[SessionState] | AsyncWriter[SessionState]
#: How often a waiting restore looks at the head again, at most (seconds).
LEASE_POLL = 0.5


# ---------------------------------------------------------------------- procedures


def _open(log: AgentLog, session_id: str) -> Call:
    """Open a session with the agent reducer, ``on_conflict="raise"``; result: its writer."""
    return call(log.open, session_id, reducer=AgentReducer(), on_conflict="raise")


def create_proc(log: AgentLog, session_id: str | None, meta: dict[str, Any]) -> Proc[AgentWriter]:
    """A lazy writer for a new session."""
    writer: AgentWriter = yield call(log.create, session_id, meta=meta, reducer=AgentReducer(), lazy=True)
    return writer


def newest_leaf_proc(log: AgentLog, session_id: str, labels: Mapping[str, Any] | None) -> Proc[str]:
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
            rows: list[HeadRow] = yield call(log.child_heads, parent)
            for row in rows:
                sid, h = row.session, row.head
                if sid in seen or h is None or h.parent is None or h.parent.session != parent \
                        or not in_scope(h.meta, labels):
                    continue
                seen.add(sid)
                walk.append(sid)
                if not h.expired:
                    found.append((h.created_at, sid))
        if found:
            best = max(found)[1]
        level = walk
    return best


def restore_proc(
    log: AgentLog,
    session_id: str,
    labels: Mapping[str, Any] | None,
    follow_forks: bool,
    *,
    owner: str | None = None,
    wait: float = 0.0,
    force: bool = False,
    sleep: Callable[[float], Any] = time.sleep,
) -> Proc[AgentWriter]:
    """Open a session (or its newest fork), check its scope, close a turn a crashed worker left open.

    A turn left open under another worker's live lease is that worker's, still running:
    wait up to ``wait`` seconds for it to end (then continue the same session), else
    raise :class:`SessionBusy` (``sleep``: the shell's, blocking or awaitable). An
    expired lease, this ``owner``'s own, or ``force`` lets the repair go ahead.
    """
    labels = labels_arg(labels)
    if not is_number(wait) or not 0 <= wait < math.inf:  # (NaN fails the comparison too)
        raise AgentArgumentError(f"wait must be a number of seconds >= 0 (finite), not {wait!r}")
    deadline: int | None = None
    waited = 0.0
    target = session_id
    if follow_forks:
        root: Head = yield call(log.head, session_id)
        check_scope(session_id, root.meta, labels)  # refuse before walking someone else's tree
        target = yield from newest_leaf_proc(log, session_id, labels)
    while True:
        writer: AgentWriter = yield _open(log, target)
        check_scope(writer.session_id, writer.head.meta, labels)
        fixes = repair_records(writer.state)
        if not fixes:
            break
        # An open turn under another worker's live lease is not a crash: that worker is
        # running (a double invocation, a long tool call). The lease came with the head
        # the Open read: no extra request.
        lease = writer.head.lease
        if lease is not None and lease.owner != owner and not force:
            now = log.config.env.now_ms()
            if lease.live(now):
                if deadline is None:
                    deadline = now + int(wait * 1000)
                # Bounded by the log's clock and by the time slept: a clock that stands
                # still while this sleeps (a simulator's, a test's) must not wait forever.
                left = min((deadline - now) / 1000, wait - waited)
                if left <= 0:
                    raise SessionBusy(writer.session_id, lease.owner, lease.expires_at)
                pause = max(0.001, min(LEASE_POLL, left, (lease.expires_at - now) / 1000))
                yield call(sleep, pause)
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
            writer.append(kind, data)
        try:
            yield call(writer.commit)
            break
        except ConflictError:
            continue  # another worker changed it (maybe repaired it): look again
    writer.on_conflict = "fork"
    return writer


def fork_at_proc(
    log: AgentLog,
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
        # is written (fork._check_at_seq is left as it is: its other callers may
        # rely on it).
        raise EntryNotFound(session_id, f"seq {at_seq}")
    head: Head = yield call(log.head, session_id)
    meta = dict(head.meta)
    given = labels_arg(labels)
    if given is not None:
        meta["labels"] = given
    child: str = yield call(log.fork, session_id, at_seq=at_seq, at_hash=at_hash, meta=meta, reducer=AgentReducer())
    writer: AgentWriter = yield _open(log, child)
    writer.on_conflict = "fork"
    return writer


def list_proc(log: AgentLog, labels: Mapping[str, Any] | None, limit: int | None) -> Proc[list[SessionInfo]]:
    """Agent sessions (header ``kind: agent``) whose labels match, newest first."""
    labels = labels_arg(labels)
    rows: list[SessionInfo] = yield Call(log.list_sessions, kwargs={"limit": limit}, listed=True)
    return [r for r in rows if r.meta.get("kind") == "agent" and in_scope(r.meta, labels)]


@contextlib.contextmanager
def restore_span(log: AgentLog, session_id: str) -> Iterator[Callable[[str], None]]:
    """The span of a restore (none when no tracer records); call what it gives with the
    id of the session restored. Opened by the shell around the whole restore, so a
    cancelled one ends its span at once, not when its procedure is collected."""
    if otel.TRACER is None or not otel.recording():
        yield lambda _restored: None
        return
    with otel.verb_span("restore", otel.store_id(log.store, log.prefix), session_id) as span:
        yield lambda restored: otel.restored(span, restored)


# -------------------------------------------------------------------------- sessions


ForkCallback = Callable[[Any, ForkInfo], None]


class SessionCore(ABC):
    """What :class:`AgentSession` and :class:`AsyncAgentSession` share: the buffer,
    the buffered state, and every decision, as procedures the shells run."""

    log: AgentLog
    _writer: AgentWriter

    def __init__(
        self,
        log: AgentLog,
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
        register(self)

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
        track(self)
        return dropped

    def _check_usable(self) -> None:
        if self._discarded:
            raise S3LogError(f"agent session {self.session_id} was discarded")

    # ---------------------------------------------------------------- procedures

    def _p_record(self, kind: str, data: dict[str, Any]) -> Proc[None]:
        try:
            yield from self._p_buffer(kind, data)
        finally:
            track(self)

    def _p_buffer(self, kind: str, data: dict[str, Any]) -> Proc[None]:
        self._check_usable()
        self._writer.append(kind, data)
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
            track(self)

    def _p_commit(self, force: bool) -> Proc[None]:
        self._check_usable()
        w = self._writer
        if w.pending == 0 and w.head.version > 0:
            self.last_error = None
            return
        if self._start_only and not force:
            return  # nothing but the session start: storing it would occupy the id for nothing
        yield call(w.commit)
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
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise InvalidEntryError(SESSION_START, "argument 'system_prompt' must be text or None, not "
                                    f"{type(system_prompt).__name__}", session=self.session_id)
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
        check_status(status, self.session_id)
        check_outcome(message, interrupted, self.session_id)
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
            check_status(outcome, self.session_id)
        check_outcome(message, False, self.session_id)
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
            yield call(w.renew_lease, on_conflict="raise")
        finally:
            track(self)
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
                yield call(w.renew_lease)  # nothing to commit: the release is a head-only write
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
            yield call(w.renew_lease)

    def _p_summarize(self, summary: Any, keep_last: Any, span: Mapping[str, Any]) -> Proc[SummarySpan]:
        """Store a summary of the history (see ``AgentSession.summarize``): everything
        buffered is committed first, the span is checked against the stored chain, then
        the summary is committed alone, raising on conflict (a span checked against one
        chain must not land in a fork of it)."""
        self._check_usable()
        sid = self.session_id
        items = items_arg(SUMMARY, summary, session=sid, name="summary")
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
            raise AgentArgumentError(f"keep_last must be an integer >= 0, not {keep_last!r}")
        if self._pending_state.turn_open:
            raise AgentArgumentError(f"session {sid}: a turn is open; summarize between turns")
        yield from self._p_flush(force=True)
        w = self._writer
        state = self._durable_state()
        checked = yield from span_proc(self.log, w.session_id, state, w.head.seq, span.get("first_seq"),
                                       span.get("first_hash"), span.get("last_seq"), span.get("last_hash"))
        data = summary_data(state, checked, items, keep_last)
        normalize_data_cbor(SUMMARY, data, session=w.session_id)
        ticket = w.append(SUMMARY, data)
        try:
            yield call(w.renew_lease, on_conflict="raise")
        except ConflictError:
            w.withdraw(ticket)
            raise
        finally:
            track(self)
        self._buffered_bytes = 0
        self._oldest = None
        self._pending_state = self._durable_state()
        done = self._pending_state.summary
        assert done is not None  # the summary just committed was folded in
        return done

    def _p_fork(self, labels: Mapping[str, Any] | None, options: Mapping[str, Any]) -> Proc[Self]:
        options_arg(options)
        # The parent must be stored to be forked, even if it holds only its start.
        yield from self._p_flush(force=True)
        writer = yield from fork_at_proc(self.log, self.session_id, self._writer.head.hash, None, labels)
        return type(self)(self.log, writer, **options)

    # ------------------------------------------------- construction (both shells')

    @classmethod
    def _p_create(
        cls, log: AgentLog, session_id: str | None, meta: dict[str, Any],
        start: tuple[str | None, Mapping[str, Any] | None, Sequence[Mapping[str, Any]]], options: Mapping[str, Any],
    ) -> Proc[Self]:
        """A session started lazily with header ``meta`` and ``start`` (system prompt,
        config, history) recorded (see ``AgentSession.create``)."""
        writer = yield from create_proc(log, session_id, meta)
        session = cls(log, writer, **options)
        yield from session._p_start(*start)
        return session

    @classmethod
    def _p_restore(
        cls, log: AgentLog, session_id: str, labels: Mapping[str, Any] | None, follow_forks: bool,
        wait: float, force: bool, options: Mapping[str, Any], sleep: Callable[[float], Any],
    ) -> Proc[Self]:
        """A stored session, scoped and repaired (see ``AgentSession.restore``; the
        options checked by the shell, before its span: :func:`restore_span`)."""
        writer = yield from restore_proc(log, session_id, labels, follow_forks, owner=options.get("owner"),
                                         wait=wait, force=force, sleep=sleep)
        return cls(log, writer, **options)

    @classmethod
    def _p_fork_at(
        cls, log: AgentLog, session_id: str, at_hash: bytes | str | None, at_seq: int | None,
        labels: Mapping[str, Any] | None, options: Mapping[str, Any],
    ) -> Proc[Self]:
        """A new session at a stored point of ``session_id`` (see ``AgentSession.fork_at``)."""
        options_arg(options)
        writer = yield from fork_at_proc(log, session_id, at_hash, at_seq, labels)
        return cls(log, writer, **options)

    # ----------------------------------------------------------- shell-specific

    @abstractmethod
    def _flush_at_exit(self) -> None:
        """Commit what is buffered from an interpreter-exit hook (raise if impossible)."""

    @abstractmethod
    def _hook_log_close(self) -> None:
        """Make closing this session's log drain it (called once per log, for its first session)."""


def _provisional(kind: str, data: Any) -> Entry:
    # The buffered state is folded with a placeholder hash; the real one comes at commit.
    return Entry(-1, None, kind, 0, data, b"\0" * 32)
