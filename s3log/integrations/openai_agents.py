"""An OpenAI Agents SDK session on s3log: ``S3LogSession``.

A ``SessionABC`` of the SDK, over an s3log :class:`~s3log.AsyncLog` (awaited directly)
or :class:`~s3log.Log` (run in a worker thread). Stored items are plain CBOR data
(dicts, lists, strings, numbers): reading them imports and calls nothing. Nothing is ever deleted: ``add_items`` is one
``oa.items`` entry, ``pop_item`` appends ``oa.pop`` (carrying the item it removed) and
``clear_session`` appends ``oa.clear``, so the chain stays verifiable and every past
state can be forked from. ``get_items(limit)`` reads the session backwards (tail, then
segments from the newest) only until it has ``limit`` items. Needs the
``openai-agents`` extra.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._extras import extra
from ..aio import AsyncLog, AsyncWriter
from ..codec import FORK_KIND, Entry
from ..errors import ConflictError, SessionExists, SessionNotFound
from ..ids import validate_session_id
from ..log import Log, Writer
from . import IntegrationError, _log_from_url

# What an append step decides: (kind, data) to append, or kind None for nothing; and
# the value to return once it is durable.
_Step = tuple[str | None, Any, Any]

with extra("openai-agents"):
    from agents.memory import SessionABC, SessionSettings

ITEMS = "oa.items"
POP = "oa.pop"
CLEAR = "oa.clear"


def store_id(session_id: str) -> str:
    """The s3log session id for an SDK session id (hashed if it is not a safe id)."""
    try:
        return validate_session_id(session_id)
    except ValueError:
        return "oa-" + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def latest_items(entries: Sequence[Entry], limit: int | None) -> tuple[list[Any], bool]:
    """The session's items (the latest ``limit`` of them), oldest first, from a suffix
    of its entries; and whether the suffix was enough to know them.

    A fork's first entry carries its parent's entries in its seed: they are read as if
    they came before the fork's own.
    """
    stream: list[tuple[str, Any]] = [(e.kind, e.data) for e in reversed(entries)]
    newest_first: list[Any] = []
    pops = 0
    i = 0
    while i < len(stream):
        kind, data = stream[i]
        i += 1
        if kind == CLEAR:
            return newest_first[::-1], True
        if kind == POP:
            pops += 1
        elif kind == FORK_KIND:
            seed = data.get("seed") if isinstance(data, dict) else None
            stream.extend((m["kind"], m["data"]) for m in reversed(seed or []))
        elif kind == ITEMS:
            for item in reversed(data.get("items") or []):
                if pops:
                    pops -= 1
                    continue
                newest_first.append(item)
                if limit is not None and len(newest_first) >= limit:
                    return newest_first[::-1], True
    complete = not entries or entries[0].seq == 0
    return newest_first[::-1], complete


class S3LogSession(SessionABC):
    """Conversation memory for the OpenAI Agents SDK, kept in one s3log session.

    ``log`` is an :class:`~s3log.AsyncLog` (its calls are awaited on the running loop)
    or a :class:`~s3log.Log` (its calls run in a worker thread). Concurrent writers on
    one session are safe: a commit that meets another writer's re-reads the head and
    appends again (a pop recomputes which item it removes).
    """

    def __init__(
        self, session_id: str, log: Log | AsyncLog, *, session_settings: SessionSettings | None = None
    ) -> None:
        if not isinstance(log, (Log, AsyncLog)):
            raise IntegrationError(f"S3LogSession needs an s3log.Log or s3log.AsyncLog, got {type(log).__name__}")
        self.session_id = session_id
        self.session_settings = session_settings
        self.log = log
        self.sid = store_id(session_id)
        self._lock = asyncio.Lock()
        self._writer: Writer | AsyncWriter | None = None
        self._owns_log = False

    @classmethod
    def from_url(
        cls, session_id: str, *, url: str, session_settings: SessionSettings | None = None
    ) -> S3LogSession:
        """A session on ``s3://bucket/prefix?endpoint=...&region=...`` over an
        :class:`~s3log.AsyncLog` it owns (release it with :meth:`close`)."""
        session = cls(session_id, _log_from_url(url, async_=True), session_settings=session_settings)
        session._owns_log = True
        return session

    async def close(self) -> None:
        """Close the S3 client of a log this session opened (:meth:`from_url`); a log
        passed in is left to its owner."""
        if self._owns_log:
            self._owns_log = False
            aclose = getattr(self.log.store, "aclose", None)
            if aclose is not None:
                await aclose()

    # ------------------------------------------------------------------ log access

    async def _open(self) -> Writer | AsyncWriter:
        meta = {"openai_agents": {"session_id": self.session_id}}
        if isinstance(self.log, AsyncLog):
            try:
                return await self.log.open(self.sid, on_conflict="raise")
            except SessionNotFound:
                return await self.log.create(self.sid, meta=meta, lazy=True, on_conflict="raise")
        log = self.log

        def open_sync() -> Writer:
            try:
                return log.open(self.sid, on_conflict="raise")
            except SessionNotFound:
                return log.create(self.sid, meta=meta, lazy=True, on_conflict="raise")

        return await asyncio.to_thread(open_sync)

    @staticmethod
    async def _commit(writer: Writer | AsyncWriter, kind: str, data: Any) -> None:
        if isinstance(writer, AsyncWriter):
            writer.append(kind, data)
            await writer.commit()
        else:
            writer.append(kind, data)
            await asyncio.to_thread(writer.commit)

    # ---------------------------------------------------------------------- reads

    async def _items(self, limit: int | None) -> list[Any]:
        if limit is not None and limit <= 0:
            return []
        try:
            if isinstance(self.log, AsyncLog):
                _, entries = await self.log.read_suffix(self.sid, lambda es: latest_items(es, limit)[1])
            else:
                _, entries = await asyncio.to_thread(
                    self.log.read_suffix, self.sid, lambda es: latest_items(es, limit)[1])
        except SessionNotFound:
            return []
        return latest_items(entries, limit)[0]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (all when None), in chronological order."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await self._items(limit)

    # --------------------------------------------------------------------- writes

    async def _append(self, make: Callable[[], Awaitable[_Step]]) -> Any:
        """Append what ``make()`` decides, retrying on conflict (``make`` runs again)."""
        while True:
            if self._writer is None:
                self._writer = await self._open()
            kind, data, result = await make()
            if kind is None:
                return result
            try:
                await self._commit(self._writer, kind, data)
                return result
            except ConflictError as err:
                self._writer = None
                if err.landed:
                    return result
            except (SessionExists, SessionNotFound):
                self._writer = None

    async def add_items(self, items: list[Any]) -> None:
        """Append items, as one atomic entry."""
        if not items:
            return
        payload = [dict(i) if isinstance(i, dict) else i for i in items]

        async def make() -> _Step:
            return ITEMS, {"items": payload}, None

        async with self._lock:
            await self._append(make)

    async def pop_item(self) -> Any | None:
        """Remove and return the most recent item (None if the session is empty)."""

        async def make() -> _Step:
            latest = await self._items(1)
            if not latest:
                return None, None, None
            return POP, {"item": latest[0]}, latest[0]

        async with self._lock:
            return await self._append(make)

    async def clear_session(self) -> None:
        """Forget every item (appends a clear marker; history stays in the chain)."""

        async def make() -> _Step:
            return CLEAR, {}, None

        async with self._lock:
            await self._append(make)

    # -------------------------------------------------------------------- branching

    def fork(self, session_id: str | None = None) -> S3LogSession:
        """A new session continuing from this one's current items (over a Log; see :meth:`afork`)."""
        return self.fork_at(session_id=session_id)

    def fork_at(
        self, *, at_seq: int | None = None, at_hash: bytes | str | None = None, session_id: str | None = None
    ) -> S3LogSession:
        """A new session continuing from a stored point of this one (the latest by
        default); over a Log (see :meth:`afork_at`)."""
        if isinstance(self.log, AsyncLog):
            raise IntegrationError("this session is over an s3log.AsyncLog: use await session.afork_at(...)")
        child = self.log.fork(self.sid, at_seq=at_seq, at_hash=at_hash,
                              child_id=store_id(session_id) if session_id else None)
        return S3LogSession(session_id or child, self.log, session_settings=self.session_settings)

    async def afork(self, session_id: str | None = None) -> S3LogSession:
        """Async :meth:`fork` (over either kind of log)."""
        return await self.afork_at(session_id=session_id)

    async def afork_at(
        self, *, at_seq: int | None = None, at_hash: bytes | str | None = None, session_id: str | None = None
    ) -> S3LogSession:
        """Async :meth:`fork_at` (over either kind of log). The new session shares this
        one's log; :meth:`close` of the new session leaves it open."""
        child_id = store_id(session_id) if session_id else None
        if isinstance(self.log, AsyncLog):
            child = await self.log.fork(self.sid, at_seq=at_seq, at_hash=at_hash, child_id=child_id)
        else:
            log = self.log
            child = await asyncio.to_thread(
                lambda: log.fork(self.sid, at_seq=at_seq, at_hash=at_hash, child_id=child_id))
        return S3LogSession(session_id or child, self.log, session_settings=self.session_settings)
