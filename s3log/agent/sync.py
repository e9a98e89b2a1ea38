"""The blocking shell: :class:`AgentSession` performs the core's calls of the verbs
of a :class:`~s3log.Log` (:mod:`s3log._upper`)."""

from __future__ import annotations

import builtins
import contextlib
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from s3log._upper import Proc, run
from s3log.agent import args, core, registry
from s3log.agent.core import SessionCore, T
from s3log.agent.state import ASSISTANT_ITEMS, HOOK_ITEMS, TOOL_RESULTS, USER_INPUT, SessionState, Status, SummarySpan
from s3log.errors import S3LogError
from s3log.log import Log, Writer
from s3log.results import ForkInfo, SessionInfo

ForkCallback = Callable[["AgentSession", ForkInfo], None]
Items = Mapping[str, Any] | Iterable[Mapping[str, Any]]


def _sleep(seconds: float) -> None:
    # time looked up when called: a test may stand in for the module's.
    time.sleep(seconds)


class AgentSession(SessionCore):
    """One agent conversation on s3log, with write-behind buffering.

    Records are buffered and committed at turn end, on :meth:`flush`, when the buffer
    passes ``max_buffer_entries`` or ``max_buffer_bytes``, or when a record arrives more
    than ``max_delay`` seconds after the oldest buffered one. :meth:`close` (and the
    context manager) drain it; so do :func:`s3log.agent.close` and, at interpreter exit,
    an exit hook. A failed automatic commit keeps the batch; the next :meth:`flush`
    retries it and raises if it fails again. Leaving the ``with`` block by an exception
    also releases the open turn's lease, so a retry repairs the turn at once.
    """

    log: Log
    _writer: Writer[SessionState]

    # The constructor is SessionCore's: only the types of log and writer narrow here.

    def _run(self, proc: Proc[T]) -> T:
        return run(proc)

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        log: Log,
        *,
        system_prompt: str | None = None,
        config: Mapping[str, Any] | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        meta: Mapping[str, Any] | None = None,
        labels: Mapping[str, Any] | None = None,
        delegation_depth: int = 0,
        parent_session: str | None = None,
        session_id: str | None = None,
        **options: Any,
    ) -> AgentSession:
        """Start a session lazily: nothing is stored (and the id is not taken) until a
        record after the session start is committed, or, for a start seeded with
        ``history``, until the next :meth:`flush` or :meth:`close`."""
        args.log_arg(log, Log)
        args.options_arg(options)
        head = args.header(meta=meta, labels=labels, delegation_depth=delegation_depth, parent_session=parent_session)
        return run(cls._p_create(log, session_id, head, (system_prompt, config, history), options))

    @classmethod
    def restore(
        cls,
        log: Log,
        session_id: str,
        *,
        labels: Mapping[str, Any] | None = None,
        follow_forks: bool = False,
        wait: float = 0.0,
        force: bool = False,
        **options: Any,
    ) -> AgentSession:
        """Rebuild a session's state; close (durably, once) a turn a crashed worker left open.

        ``labels``: refuse (:class:`SessionScopeError`, nothing written) a session whose
        header labels differ. ``follow_forks``: open the newest descendant instead (the
        newest fork at each level, down to a session with no forks). A turn left open
        under another worker's live lease is that worker's: wait up to ``wait`` seconds
        for it to end and continue the same session, else :class:`SessionBusy`;
        ``force=True`` repairs it anyway. Options ``owner`` (this worker's id) and
        ``lease_ttl`` (seconds a turn's lease lasts past each commit) set the lease.
        """
        args.log_arg(log, Log)
        args.options_arg(options)
        with core.restore_span(log, session_id) as restored:
            session = run(cls._p_restore(log, session_id, labels, follow_forks, wait, force, options, _sleep))
            restored(session.session_id)
        return session

    @classmethod
    def fork_at(
        cls,
        log: Log,
        session_id: str,
        *,
        at_hash: bytes | str | None = None,
        at_seq: int | None = None,
        labels: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AgentSession:
        """A new session holding ``session_id``'s state at a stored point, exactly as
        replayed (an open turn stays open; an unknown point is an error)."""
        args.log_arg(log, Log)
        return run(cls._p_fork_at(log, session_id, at_hash, at_seq, labels, options))

    @classmethod
    def list(
        cls, log: Log, *, labels: Mapping[str, Any] | None = None, limit: int | None = None
    ) -> builtins.list[SessionInfo]:
        """Agent sessions whose header labels match ``labels``, newest first (reads every head)."""
        args.log_arg(log, Log)
        return run(core.list_proc(log, labels, limit))

    def renew_lease(self) -> None:
        """Extend the lease of the open turn (call during a long tool call): one PUT of the head.

        Commits what is buffered too. Without an open turn it does nothing. Raises
        ``ConflictError`` if another worker wrote the session since this one's last commit
        (e.g. repaired the turn after the lease ran out); buffered records stay buffered,
        and the next commit forks them.
        """
        self._run(self._p_renew())

    def fork(self, *, labels: Mapping[str, Any] | None = None, **options: Any) -> AgentSession:
        """A new session continuing from this one's current state (buffered records are flushed first)."""
        return self._run(self._p_fork(labels, options))

    # -------------------------------------------------------------------- recording

    def user_input(self, items: str | Items) -> None:
        """Record user input: a string (one user message), one message dict, or a list of them."""
        self._run(self._p_items(USER_INPUT, items, text=True))

    def assistant_items(self, items: Items) -> None:
        """Record assistant output (one item or a list): messages, tool calls, reasoning."""
        self._run(self._p_items(ASSISTANT_ITEMS, items))

    def tool_started(self, call_ids: str | Iterable[str]) -> None:
        """Record that tool calls began executing (so a crash can tell "unknown" from "not run"); commits."""
        self._run(self._p_tool_started(call_ids))

    def tool_results(self, items: Items) -> None:
        """Record tool results (one item or a list)."""
        self._run(self._p_items(TOOL_RESULTS, items))

    def hook_items(self, items: Items) -> None:
        """Record items a hook injected into the history (one item or a list)."""
        self._run(self._p_items(HOOK_ITEMS, items))

    def turn_end(self) -> None:
        """Close the turn and commit."""
        self._run(self._p_turn_end())

    def outcome(self, status: Status, *, message: str | None = None, interrupted: bool = False) -> None:
        """Record how a run ended (finished, paused, limit_reached, error) and commit."""
        self._run(self._p_outcome(status, message, interrupted))

    def config_changed(self, config: Mapping[str, Any]) -> None:
        """Record the request config now in force."""
        self._run(self._p_config_changed(config))

    def cache_locked(self, prefix_len: int) -> None:
        """Record that the first ``prefix_len`` history items are pinned (prompt cache)."""
        self._run(self._p_cache_locked(prefix_len))

    def cache_unlocked(self) -> None:
        """Record that the prompt-cache prefix is released."""
        self._run(self._p_cache_unlocked())

    def record_turn(self, new_items: Items, *, outcome: Status | None = None, message: str | None = None) -> None:
        """Record a whole turn's new history items, grouped by kind, then end the turn."""
        self._run(self._p_record_turn(new_items, outcome, message))

    def summarize(
        self, summary: Items, *, keep_last: int = 0, first_seq: int | None = None,
        first_hash: bytes | str | None = None, last_seq: int | None = None, last_hash: bytes | str | None = None,
    ) -> SummarySpan:
        """Commit a summary that stands for a span of this session's chain: from then on
        the history is ``summary`` (one message dict or a list) followed by the latest
        ``keep_last`` items, and a restore reads back only to it. Nothing is rewritten:
        every entry it stands for stays in the chain (read, verify, fork_at, analytics).

        The span defaults to the newest summary's own entry (or seq 0) through the last
        committed entry; a span given (seqs, hashes as bytes or hex) is checked against
        the stored chain first. Buffered records are committed first; then the summary
        alone, raising ConflictError if another writer moved the session meanwhile.
        Raises :class:`~s3log.agent.SummarySpanError` (naming the session and seq) for a
        span that is not a contiguous span of the chain or a hash that does not match,
        and :class:`~s3log.agent.AgentArgumentError` while a turn is open, before
        anything is written. Returns the span, with the summary entry's seq and hash.
        """
        span = {"first_seq": first_seq, "first_hash": first_hash, "last_seq": last_seq, "last_hash": last_hash}
        return self._run(self._p_summarize(summary, keep_last, span))

    # ------------------------------------------------------------------- committing

    def flush(self) -> None:
        """Commit every buffered record. Raises if the commit fails (the batch is kept).

        A session holding only an empty start (no history) is not stored: it stays free to
        be abandoned. A start seeded with history is stored (SessionExists if the id is taken).
        """
        self._run(self._p_flush())

    def close(self) -> None:
        """Drain the buffer."""
        self.flush()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # The original error matters more; a failed commit leaves the batch in the writer.
        with contextlib.suppress(S3LogError):
            self._run(self._p_abandon())

    def _flush_at_exit(self) -> None:
        self.flush()

    def _hook_log_close(self) -> None:
        add = getattr(self.log, "add_close_hook", None)
        if add is None:
            return
        ref = weakref.ref(self.log)

        def drain_on_close(*_: Any) -> None:
            log = ref()
            if log is not None:
                drain(log)

        add(drain_on_close)


def drain(log: Log) -> None:
    """Commit what every live :class:`AgentSession` opened on ``log`` buffers.

    Every session is tried; the first failure is raised (noting the others), and the
    failed sessions keep their records for another try.
    """
    errors: builtins.list[tuple[str, BaseException]] = []
    for session in registry.live_sessions(log):
        if isinstance(session, AgentSession) and session.unsaved():
            try:
                session.flush()
            except S3LogError as exc:
                errors.append((session.session_id, exc))
    registry.raise_first(errors)


def close(log: Log) -> None:
    """Drain every agent session opened on ``log``, then close the log.

    If a session cannot be drained, the error is raised and the log is left open, so
    the caller can retry.
    """
    drain(log)
    log.close()
