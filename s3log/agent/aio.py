"""The asyncio shell: :class:`AsyncAgentSession` awaits the core's calls of the verbs
of an :class:`~s3log.AsyncLog` (:mod:`s3log._upper`)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from s3log._upper import Proc, arun
from s3log.agent import args, core, registry
from s3log.agent.core import SessionCore, T
from s3log.agent.state import ASSISTANT_ITEMS, HOOK_ITEMS, TOOL_RESULTS, USER_INPUT, SessionState, Status, SummarySpan
from s3log.aio import AsyncLog, AsyncWriter
from s3log.errors import S3LogError
from s3log.results import ForkInfo, SessionInfo

ForkCallback = Callable[["AsyncAgentSession", ForkInfo], None]
Items = Mapping[str, Any] | Iterable[Mapping[str, Any]]


async def _sleep(seconds: float) -> None:
    # asyncio looked up when called: a test may stand in for the module's.
    await asyncio.sleep(seconds)


class AsyncAgentSession(SessionCore):
    """:class:`~s3log.agent.AgentSession` for asyncio code, over an :class:`~s3log.AsyncLog`.

    The same verbs, awaited, with the same semantics: the decisions are the shared
    core's, only the I/O is awaited. Drain it with ``await session.aclose()``,
    ``async with session`` or ``await s3log.agent.aclose(log)``: at interpreter exit
    there is no event loop left to commit on, so what is still buffered then is
    reported (a :class:`RecordsLostWarning` naming the session and the count), not saved.
    """

    log: AsyncLog
    _writer: AsyncWriter[SessionState]

    # The constructor is SessionCore's: only the types of log and writer narrow here.

    async def _run(self, proc: Proc[T]) -> T:
        return await arun(proc)

    # ------------------------------------------------------------------ construction

    @classmethod
    async def create(
        cls,
        log: AsyncLog,
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
    ) -> AsyncAgentSession:
        """Start a session lazily (see :meth:`s3log.agent.AgentSession.create`)."""
        args.log_arg(log, AsyncLog)
        args.options_arg(options)
        head = args.header(meta=meta, labels=labels, delegation_depth=delegation_depth, parent_session=parent_session)
        return await arun(cls._p_create(log, session_id, head, (system_prompt, config, history), options))

    @classmethod
    async def restore(
        cls,
        log: AsyncLog,
        session_id: str,
        *,
        labels: Mapping[str, Any] | None = None,
        follow_forks: bool = False,
        wait: float = 0.0,
        force: bool = False,
        **options: Any,
    ) -> AsyncAgentSession:
        """Rebuild a session, scoped and repaired (see :meth:`s3log.agent.AgentSession.restore`)."""
        args.log_arg(log, AsyncLog)
        args.options_arg(options)
        with core.restore_span(log, session_id) as restored:
            session = await arun(cls._p_restore(log, session_id, labels, follow_forks, wait, force, options, _sleep))
            restored(session.session_id)
        return session

    @classmethod
    async def fork_at(
        cls,
        log: AsyncLog,
        session_id: str,
        *,
        at_hash: bytes | str | None = None,
        at_seq: int | None = None,
        labels: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AsyncAgentSession:
        """A new session holding a stored point's state (see :meth:`s3log.agent.AgentSession.fork_at`)."""
        args.log_arg(log, AsyncLog)
        return await arun(cls._p_fork_at(log, session_id, at_hash, at_seq, labels, options))

    @classmethod
    async def list(
        cls, log: AsyncLog, *, labels: Mapping[str, Any] | None = None, limit: int | None = None
    ) -> builtins.list[SessionInfo]:
        """Agent sessions whose header labels match ``labels``, newest first (reads every head)."""
        args.log_arg(log, AsyncLog)
        return await arun(core.list_proc(log, labels, limit))

    async def renew_lease(self) -> None:
        """Extend the lease of the open turn (see :meth:`s3log.agent.AgentSession.renew_lease`)."""
        await self._run(self._p_renew())

    async def fork(self, *, labels: Mapping[str, Any] | None = None, **options: Any) -> AsyncAgentSession:
        """A new session continuing from this one's current state (buffered records are flushed first)."""
        return await self._run(self._p_fork(labels, options))

    # -------------------------------------------------------------------- recording

    async def user_input(self, items: str | Items) -> None:
        """Record user input: a string (one user message), one message dict, or a list of them."""
        await self._run(self._p_items(USER_INPUT, items, text=True))

    async def assistant_items(self, items: Items) -> None:
        """Record assistant output (one item or a list): messages, tool calls, reasoning."""
        await self._run(self._p_items(ASSISTANT_ITEMS, items))

    async def tool_started(self, call_ids: str | Iterable[str]) -> None:
        """Record that tool calls began executing; commits."""
        await self._run(self._p_tool_started(call_ids))

    async def tool_results(self, items: Items) -> None:
        """Record tool results (one item or a list)."""
        await self._run(self._p_items(TOOL_RESULTS, items))

    async def hook_items(self, items: Items) -> None:
        """Record items a hook injected into the history (one item or a list)."""
        await self._run(self._p_items(HOOK_ITEMS, items))

    async def turn_end(self) -> None:
        """Close the turn and commit."""
        await self._run(self._p_turn_end())

    async def outcome(self, status: Status, *, message: str | None = None, interrupted: bool = False) -> None:
        """Record how a run ended (finished, paused, limit_reached, error) and commit."""
        await self._run(self._p_outcome(status, message, interrupted))

    async def config_changed(self, config: Mapping[str, Any]) -> None:
        """Record the request config now in force."""
        await self._run(self._p_config_changed(config))

    async def cache_locked(self, prefix_len: int) -> None:
        """Record that the first ``prefix_len`` history items are pinned (prompt cache)."""
        await self._run(self._p_cache_locked(prefix_len))

    async def cache_unlocked(self) -> None:
        """Record that the prompt-cache prefix is released."""
        await self._run(self._p_cache_unlocked())

    async def record_turn(
        self, new_items: Items, *, outcome: Status | None = None, message: str | None = None
    ) -> None:
        """Record a whole turn's new history items, grouped by kind, then end the turn."""
        await self._run(self._p_record_turn(new_items, outcome, message))

    async def summarize(
        self, summary: Items, *, keep_last: int = 0, first_seq: int | None = None,
        first_hash: bytes | str | None = None, last_seq: int | None = None, last_hash: bytes | str | None = None,
    ) -> SummarySpan:
        """Commit a summary that stands for a span of this session's chain (as
        :meth:`AgentSession.summarize`, awaited): from then on the history is ``summary``
        followed by the latest ``keep_last`` items, and a restore reads back only to it.
        Nothing is rewritten. Raises :class:`~s3log.agent.SummarySpanError` for a span
        that is not the chain's, before anything is written; returns the span."""
        span = {"first_seq": first_seq, "first_hash": first_hash, "last_seq": last_seq, "last_hash": last_hash}
        return await self._run(self._p_summarize(summary, keep_last, span))

    # ------------------------------------------------------------------- committing

    async def flush(self) -> None:
        """Commit every buffered record. Raises if the commit fails (the batch is kept)."""
        await self._run(self._p_flush())

    async def aclose(self) -> None:
        """Drain the buffer (:meth:`AgentSession.close`, awaited)."""
        await self.flush()

    async def __aenter__(self) -> AsyncAgentSession:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            await self.aclose()
            return
        # The original error matters more; a failed commit leaves the batch in the writer.
        with contextlib.suppress(S3LogError):
            await self._run(self._p_abandon())

    def _hook_log_close(self) -> None:
        # AsyncLog.aclose() awaits its hooks: closing the log drains its sessions.
        add = getattr(self.log, "add_close_hook", None)
        if add is None:
            return
        ref = weakref.ref(self.log)

        async def drain_on_close() -> None:
            log = ref()
            if log is not None:
                await adrain(log)

        add(drain_on_close)

    def _flush_at_exit(self) -> None:
        # Its store's connections belong to an event loop that has ended by now.
        raise S3LogError("an asyncio session cannot commit after its event loop ended; "
                         "await session.aclose() or s3log.agent.aclose(log) before exiting")


async def adrain(log: AsyncLog) -> None:
    """Commit what every live :class:`AsyncAgentSession` opened on ``log`` buffers
    (:func:`drain`, awaited).

    Every session is tried; the first failure is raised (noting the others), and the
    failed sessions keep their records for another try.
    """
    errors: builtins.list[tuple[str, BaseException]] = []
    for session in registry.live_sessions(log):
        if isinstance(session, AsyncAgentSession) and session.unsaved():
            try:
                await session.flush()
            except S3LogError as exc:
                errors.append((session.session_id, exc))
    registry.raise_first(errors)


async def aclose(log: AsyncLog) -> None:
    """Drain every agent session opened on ``log``, then close the log (:func:`close`, awaited).

    If a session cannot be drained, the error is raised and the log is left open, so
    the caller can retry.
    """
    await adrain(log)
    await log.aclose()
