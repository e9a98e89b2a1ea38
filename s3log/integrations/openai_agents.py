"""An OpenAI Agents SDK session on s3log: ``S3LogSession``.

Satisfies the SDK's ``Session`` protocol. Nothing is ever deleted: ``add_items`` is one
``oa.items`` entry, ``pop_item`` appends ``oa.pop`` (carrying the item it removed) and
``clear_session`` appends ``oa.clear``, so the chain stays verifiable and every past
state can be forked from. ``get_items(limit)`` reads the session backwards (tail, then
segments from the newest) only until it has ``limit`` items. Needs the
``openai-agents`` extra.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

from .._extras import extra
from ..codec import FORK_KIND, Entry
from ..errors import ConflictError, SessionExists, SessionNotFound
from ..ids import validate_session_id
from ..log import Log, Writer
from ..protocol import load_suffix

with extra("openai-agents"):
    from agents.memory import SessionSettings

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


class S3LogSession:
    """Conversation memory for the OpenAI Agents SDK, kept in one s3log session.

    Concurrent writers on one session are safe: a commit that meets another writer's
    re-reads the head and appends again (a pop recomputes which item it removes).
    """

    def __init__(self, session_id: str, log: Log, *, session_settings: SessionSettings | None = None) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.log = log
        self.sid = store_id(session_id)
        self._lock = asyncio.Lock()
        self._writer: Writer | None = None

    # ---------------------------------------------------------------------- reads

    def _items(self, limit: int | None) -> list[Any]:
        if limit is not None and limit <= 0:
            return []
        try:
            _, entries = self.log.run(
                load_suffix(self.log.layout, self.sid, lambda es: latest_items(es, limit)[1])
            )
        except SessionNotFound:
            return []
        return latest_items(entries, limit)[0]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (all when None), in chronological order."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await asyncio.to_thread(self._items, limit)

    # --------------------------------------------------------------------- writes

    def _append(self, make: Any) -> Any:
        """Append what ``make()`` returns (kind, data, result) with retry on conflict."""
        while True:
            if self._writer is None:
                try:
                    self._writer = self.log.open(self.sid, on_conflict="raise")
                except SessionNotFound:
                    self._writer = self.log.create(
                        self.sid, meta={"openai_agents": {"session_id": self.session_id}},
                        lazy=True, on_conflict="raise",
                    )
            kind, data, result = make()
            if kind is None:
                return result
            self._writer.append(kind, data)
            try:
                self._writer.commit()
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
        async with self._lock:
            await asyncio.to_thread(self._append, lambda: (ITEMS, {"items": payload}, None))

    async def pop_item(self) -> Any | None:
        """Remove and return the most recent item (None if the session is empty)."""

        def make() -> tuple[str | None, Any, Any]:
            latest = self._items(1)
            if not latest:
                return None, None, None
            return POP, {"item": latest[0]}, latest[0]

        async with self._lock:
            return await asyncio.to_thread(self._append, make)

    async def clear_session(self) -> None:
        """Forget every item (appends a clear marker; history stays in the chain)."""
        async with self._lock:
            await asyncio.to_thread(self._append, lambda: (CLEAR, {}, None))

    # -------------------------------------------------------------------- branching

    def fork(self, session_id: str | None = None) -> S3LogSession:
        """A new session continuing from this one's current items."""
        return self.fork_at(session_id=session_id)

    def fork_at(
        self, *, at_seq: int | None = None, at_hash: bytes | str | None = None, session_id: str | None = None
    ) -> S3LogSession:
        """A new session continuing from a stored point of this one (the latest by default)."""
        child = self.log.fork(self.sid, at_seq=at_seq, at_hash=at_hash,
                              child_id=store_id(session_id) if session_id else None)
        return S3LogSession(session_id or child, self.log, session_settings=self.session_settings)
