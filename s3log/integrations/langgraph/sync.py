"""The blocking shell: :class:`S3LogSaver` performs the core's calls of the verbs
of a :class:`~s3log.Log` (:mod:`s3log._upper`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from s3log._extras import extra
from s3log._upper import Proc, run
from s3log.aio import AsyncLog
from s3log.integrations import IntegrationError, _log_from_url
from s3log.integrations.langgraph.core import SaverCore, T
from s3log.integrations.langgraph.serde import AllowedType
from s3log.log import Log

with extra("langgraph"):
    from langgraph.checkpoint.serde.base import SerializerProtocol


class S3LogSaver(SaverCore[Log]):
    """A LangGraph ``BaseCheckpointSaver`` persisting to an s3log :class:`~s3log.Log`.

    ``allowed_types`` names the classes of your own (besides LangGraph's safe types)
    that stored checkpoints may rebuild: classes or ``(module, name)`` pairs. ``serde``
    replaces the serializer (a permissive ``JsonPlusSerializer`` is refused).
    ``strict=True`` raises :class:`~s3log.ConflictError` when another writer advanced a
    thread's session between this saver's read (``get_tuple``) or last write and its next
    write (exposing two processes running one thread), and refuses the pending writes of
    a checkpoint it refused; by default the saver re-reads the head and appends again.

    The async methods run the log's calls in a worker thread; for native asyncio use
    :class:`AsyncS3LogSaver`.
    """

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string: str, *, serde: SerializerProtocol | None = None,
                         allowed_types: Iterable[AllowedType] | None = None,
                         strict: bool = False) -> Iterator[S3LogSaver]:
        """A saver on ``s3://bucket/prefix?endpoint=...&region=...``, closed on exit."""
        log = _log_from_url(conn_string)
        try:
            yield cls(log, serde=serde, allowed_types=allowed_types, strict=strict)
        finally:
            log.close()

    def setup(self) -> None:
        """Nothing to set up: sessions are created on first write (kept for LangGraph's convention)."""

    def _check_log(self, log: Any) -> None:
        if isinstance(log, AsyncLog):
            raise IntegrationError("S3LogSaver needs a synchronous s3log.Log; for an s3log.AsyncLog use "
                                   "AsyncS3LogSaver")
        if not isinstance(log, Log):
            raise IntegrationError(f"S3LogSaver needs an s3log.Log, got {type(log).__name__}")

    def _started(self) -> None:
        self._locks: dict[str, threading.Lock] = {}

    def _lock(self, sid: str) -> threading.Lock:
        # dict.setdefault is atomic: two threads get the same lock.
        return self._locks.setdefault(sid, threading.Lock())

    @staticmethod
    def _pause(seconds: float) -> None:
        # Both verbs' procedures run blocking (the async ones in a worker thread).
        time.sleep(seconds)

    def _sync(self, proc: Proc[T]) -> T:
        return run(proc)

    async def _async(self, proc: Proc[T]) -> T:
        # boto3 blocks: the procedure runs in a worker thread.
        return await asyncio.to_thread(self._sync, proc)
