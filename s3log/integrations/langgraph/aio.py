"""The asyncio shell: :class:`AsyncS3LogSaver` awaits the core's calls of the verbs
of an :class:`~s3log.AsyncLog` (:mod:`s3log._upper`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any

from s3log._extras import extra
from s3log._loops import PerLoop
from s3log._upper import Proc, arun
from s3log.aio import AsyncLog
from s3log.errors import S3LogError
from s3log.integrations import IntegrationError, _log_from_url
from s3log.integrations.langgraph.core import SaverCore, T
from s3log.integrations.langgraph.serde import AllowedType
from s3log.log import Log

with extra("langgraph"):
    from langgraph.checkpoint.serde.base import SerializerProtocol


class SyncCallError(S3LogError, asyncio.InvalidStateError):
    """A synchronous method of :class:`AsyncS3LogSaver` was called where it cannot
    block: on its event loop's own thread, or with no loop running."""


class AsyncS3LogSaver(SaverCore[AsyncLog]):
    """A LangGraph ``BaseCheckpointSaver`` on an s3log :class:`~s3log.AsyncLog`: the
    ``a*`` methods await the log directly (no worker threads).

    Options as for :class:`S3LogSaver`. As with LangGraph's own async savers, the sync
    methods work only from a thread other than the event loop's, while that loop runs
    (they submit to it and wait); elsewhere they raise :class:`SyncCallError`. Use
    ``ainvoke`` / ``aget_state`` from async code.
    """

    #: The loop the sync methods submit to: the one running at construction, else the
    #: one the async methods last ran on.
    loop: asyncio.AbstractEventLoop | None

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string: str, *, serde: SerializerProtocol | None = None,
                               allowed_types: Iterable[AllowedType] | None = None,
                               strict: bool = False) -> AsyncIterator[AsyncS3LogSaver]:
        """A saver on ``s3://bucket/prefix?endpoint=...&region=...``; its client is closed on exit."""
        log = _log_from_url(conn_string, async_=True)
        try:
            yield cls(log, serde=serde, allowed_types=allowed_types, strict=strict)
        finally:
            aclose = getattr(log.store, "aclose", None)
            if aclose is not None:
                await aclose()

    async def setup(self) -> None:
        """Nothing to set up: sessions are created on first write (kept for LangGraph's convention)."""

    def _check_log(self, log: Any) -> None:
        if isinstance(log, Log):
            raise IntegrationError("AsyncS3LogSaver needs an s3log.AsyncLog; for an s3log.Log use S3LogSaver")
        if not isinstance(log, AsyncLog):
            raise IntegrationError(f"AsyncS3LogSaver needs an s3log.AsyncLog, got {type(log).__name__}")

    def _started(self) -> None:
        self.loop = None
        with contextlib.suppress(RuntimeError):
            self.loop = asyncio.get_running_loop()
        # Per loop, a lock per session id (see _lock).
        self._locks: PerLoop[dict[str, asyncio.Lock]] = PerLoop(dict)

    def _lock(self, sid: str) -> asyncio.Lock:
        """The running loop's lock on one session.

        An ``asyncio.Lock`` belongs to the loop it was first contended on, and a saver
        outlives loops (``asyncio.run`` per request, a loop per test): one lock for all
        made contended use on a later loop raise RuntimeError. Each loop has its own
        locks (those of closed loops are dropped), so tasks of one loop queue; appends
        from two loops at once meet as two writers do.
        """
        return self._locks.get().setdefault(sid, asyncio.Lock())

    @staticmethod
    async def _pause(seconds: float) -> None:
        # Every procedure runs on the saver's loop (the sync verbs submit to it).
        await asyncio.sleep(seconds)

    async def _async(self, proc: Proc[T]) -> T:
        self.loop = asyncio.get_running_loop()
        return await arun(proc)

    def _sync(self, proc: Proc[T]) -> T:
        return self._blocking(self._async(proc))

    def _blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the saver's loop from another thread, as LangGraph's async
        savers do; refuse where waiting would deadlock or never finish."""
        loop = self.loop
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop.is_closed() or not loop.is_running() or running is loop:
            coro.close()
            raise SyncCallError(
                "synchronous calls to AsyncS3LogSaver only work from another thread while its event loop "
                "runs; use the async interface (await saver.aget_tuple(...), await graph.ainvoke(...), "
                "await graph.aget_state(...)) or S3LogSaver for sync code")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
