"""An OpenAI Agents SDK session on s3log: ``S3LogSession``.

A ``SessionABC`` of the SDK, over an s3log :class:`~s3log.AsyncLog` (awaited directly)
or :class:`~s3log.Log` (run in a worker thread), through the log's public verbs
(:func:`s3log._upper.acall` makes that choice). Stored items are plain CBOR data
(dicts, lists, strings, numbers): reading them imports and calls nothing. Nothing is ever deleted: ``add_items`` is one
``oa.items`` entry, ``pop_item`` appends ``oa.pop`` (carrying the item it removed),
``clear_session`` appends ``oa.clear`` and ``summarize`` (the SDK's compaction) appends
``oa.summary``, so the chain stays verifiable and every past state can be forked from.
``get_items(limit)`` reads the session backwards (tail, then segments from the newest)
only until it has ``limit`` items (or meets the newest summary or clear). Needs the
``openai-agents`` extra.

A call that raised (or was cancelled) stored nothing of its own unless its commit's
head PUT may have been applied (a lost reply, a timeout, a cancellation while it was in
flight): then its entry may be stored. The session's next call waits for such a commit
to end, so ``get_items`` tells what became of it; check it before repeating the call
(the SDK does when it resumes a run with a pending session write).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from s3log._extras import extra
from s3log._format.cbor import dumps
from s3log._format.ids import validate_session_id
from s3log._format.values import FORK_KIND, Entry
from s3log._loops import PerLoop
from s3log._upper import Proc, T, acall, arun, run
from s3log.aio import AsyncLog, AsyncWriter
from s3log.errors import ConflictError, InvalidArgumentError, InvalidSessionIdError, SessionExists, SessionNotFound
from s3log.integrations import IntegrationError, _log_from_url
from s3log.integrations._lease import RunLease, acquire, release
from s3log.log import Log, Writer
from s3log.reducer import NullReducer

__all__ = ["S3LogSession"]

# What an append step decides: (kind, data) to append, or kind None for nothing; and
# the value to return once it is durable.
_Step = tuple[str | None, Any, Any]

with extra("openai-agents"):
    from agents.memory import SessionABC, SessionSettings

ITEMS = "oa.items"
POP = "oa.pop"
CLEAR = "oa.clear"
#: The items that replace the session's items from here on, naming the span of the
#: chain they stand for (``{"span": {first_seq, first_hash, last_seq, last_hash},
#: "items": [...]}``); everything before stays stored. A reader stops at the newest.
SUMMARY = "oa.summary"


#: The form of a hashed id: a safe id of this form is refused, or it would name the
#: session of the id it is the hash of.
_HASHED = re.compile(r"oa-[0-9a-f]{40}")
#: Session-id prefixes other integrations own (the LangGraph savers list, copy and
#: delete every ``lg-`` session as one of their threads' namespaces).
RESERVED_PREFIXES = ("lg-",)


def store_id(session_id: str, argument: str = "session_id") -> str:
    """The s3log session id for an SDK session id: a safe s3log id as it is, any other
    string hashed to ``oa-<sha256[:40]>``.

    One-to-one: a safe id of the hashed form, or with another integration's prefix
    (:data:`RESERVED_PREFIXES`), would land on a session that is not its own and raises
    :class:`~s3log.integrations.IntegrationError` naming ``argument``, as does an id that
    is not a string or not valid Unicode (a lone surrogate).
    """
    if not isinstance(session_id, str):
        raise IntegrationError(f"{argument} must be a string, got {type(session_id).__name__}")
    try:
        sid = validate_session_id(session_id)
    except InvalidSessionIdError:
        try:
            raw = session_id.encode()
        except UnicodeEncodeError:
            raise IntegrationError(f"{argument} {session_id!r} is not valid Unicode text "
                                   "(it has a lone surrogate)") from None
        return "oa-" + hashlib.sha256(raw).hexdigest()[:40]
    if _HASHED.fullmatch(sid):
        raise IntegrationError(f"{argument} {sid!r} has the form of a hashed session id (oa- and 40 hex "
                               "digits): it would name another id's session; use the original id")
    if sid.startswith(RESERVED_PREFIXES):
        raise IntegrationError(f"{argument} {sid!r} starts with a prefix another integration owns "
                               f"({', '.join(RESERVED_PREFIXES)})")
    return sid


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
        elif kind in (ITEMS, SUMMARY):
            for item in reversed(data.get("items") or []):
                if pops:
                    pops -= 1
                    continue
                newest_first.append(item)
                if limit is not None and len(newest_first) >= limit:
                    return newest_first[::-1], True
            if kind == SUMMARY:  # nothing before it is an item any more
                return newest_first[::-1], True
    complete = not entries or entries[0].seq == 0
    return newest_first[::-1], complete


def _reaches_summary(entries: Sequence[Entry]) -> bool:
    return any(e.kind == SUMMARY for e in entries)


def summary_span(entries: Sequence[Entry]) -> dict[str, Any]:
    """The span a new summary stands for, from a suffix read back to the newest summary
    (or to seq 0): from that summary's entry (or the first entry) to the last."""
    first = next((e for e in reversed(entries) if e.kind == SUMMARY), entries[0])
    last = entries[-1]
    return {"first_seq": first.seq, "first_hash": first.hash.hex(), "last_seq": last.seq, "last_hash": last.hash.hex()}


class _Appending(NullReducer):
    """The reducer of the session's writer: it keeps no state (items are read back with
    ``read_suffix``), so opening the writer reads only the newest entry's run."""

    def restarts(self, entry: Entry) -> bool:
        """Every entry: the state after it (none) depends on nothing before it."""
        return True


class S3LogSession(SessionABC):
    """Conversation memory for the OpenAI Agents SDK, kept in one s3log session.

    ``log`` is an :class:`~s3log.AsyncLog` (its calls are awaited on the running loop)
    or a :class:`~s3log.Log` (its calls run in a worker thread). Concurrent writers on
    one session are safe: a commit that meets another writer's re-reads the head and
    appends again (a pop recomputes which item it removes).

    A session may be used on one event loop after another (``asyncio.run`` per
    request), but not on two at once: a call while another call holds the session on a
    loop that is not closed raises :class:`~s3log.WriterBusyError`.
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
        #: What belongs to the event loop the session's calls run on: the lock that
        #: runs its writes one at a time (per loop: see :meth:`_bind`), and the commit
        #: of a call that failed or was cancelled while that commit went on (see
        #: :meth:`_settle`). asyncio locks and futures belong to one loop, and a session
        #: outlives a loop. Another loop takes over once the last one is closed or no
        #: call holds its lock.
        self._lock: PerLoop[asyncio.Lock] = PerLoop(
            asyncio.Lock, busy=asyncio.Lock.locked, session=lambda: self.sid, drop=self._leave_loop)
        self._unsettled: asyncio.Future[Any] | None = None
        self._writer: Writer | AsyncWriter | None = None
        self._owns_log = False
        # The items and append key of the last add_items that failed or was cancelled
        # (its entry may be stored): the same items added again reuse that key, so the
        # retry finds them stored instead of storing them twice (decision 0037). Equal
        # items added after a success get a new key: a user may say "hi" twice.
        self._retry: tuple[bytes, str] | None = None

    @classmethod
    def from_url(
        cls, session_id: str, *, url: str, session_settings: SessionSettings | None = None
    ) -> S3LogSession:
        """A session on ``s3://bucket/prefix?endpoint=...&region=...`` over an
        :class:`~s3log.AsyncLog` it owns (release it with :meth:`aclose`)."""
        session = cls(session_id, _log_from_url(url, async_=True), session_settings=session_settings)
        session._owns_log = True
        return session

    async def aclose(self) -> None:
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
        try:
            writer: Writer | AsyncWriter = await acall(self.log.open, self.sid, reducer=_Appending(),
                                                       on_conflict="raise")
        except SessionNotFound:
            writer = await acall(self.log.create, self.sid, meta=meta, lazy=True, on_conflict="raise")
        return writer

    def _bind(self) -> asyncio.Lock:
        """The running loop's lock for this session's writes (a new one on a new loop).

        A lock kept from an earlier loop raised RuntimeError ("bound to a different
        event loop") at the first contended call on a later one.
        """
        return self._lock.get()

    def _leave_loop(self, _lock: asyncio.Lock) -> None:
        # What was unsettled on the loop left can never be awaited on the next one.
        self._unsettled = None

    async def _settle(self) -> None:
        """Wait for the commit of an earlier call that failed or was cancelled while
        the commit went on, so what is read next shows whether it landed."""
        unsettled = self._unsettled
        # One of another loop ends there or never (its loop closed): _bind forgets it.
        if unsettled is None or unsettled.get_loop() is not asyncio.get_running_loop():
            return
        if not unsettled.done():
            await asyncio.wait([unsettled])
        if self._unsettled is unsettled:
            self._unsettled = None

    async def _commit(self, writer: Writer | AsyncWriter, kind: str, data: Any, key: str | None) -> None:
        writer.append(kind, data, key=key)
        # The commit runs on in its own task (or thread) if this call is cancelled: it is
        # kept, and the next call waits for it (see _settle).
        done: asyncio.Future[Any] = asyncio.ensure_future(acall(writer.commit))
        done.add_done_callback(_retrieve)
        try:
            await asyncio.shield(done)
        except BaseException:
            if not done.done():
                self._unsettled = done
            raise

    # ---------------------------------------------------------------------- reads

    async def _items(self, limit: int | None) -> list[Any]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgumentError("limit", f"must be an int or None, not {limit!r}", session=self.sid)
        if limit is not None and limit <= 0:
            return []
        await self._settle()
        try:
            _, entries = await acall(self.log.read_suffix, self.sid, lambda es: latest_items(es, limit)[1])
        except SessionNotFound:
            return []
        return latest_items(entries, limit)[0]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (all when None), in chronological order."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await self._items(limit)

    # --------------------------------------------------------------------- writes

    async def _append(self, make: Callable[[], Awaitable[_Step]], key: str | None = None) -> Any:
        """Append what ``make()`` decides, retrying on conflict (``make`` runs again);
        ``key``: the entry's append key, the same in every attempt."""
        while True:
            await self._settle()
            try:
                writer = self._writer
                if writer is None:
                    writer = self._writer = await self._open()
                kind, data, result = await make()
                if kind is None:
                    return result
                await self._commit(writer, kind, data, key)
                return result
            except ConflictError as err:
                self._writer = None
                if err.landed:
                    return result
            except (SessionExists, SessionNotFound):
                self._writer = None
            except BaseException:
                # A failed or cancelled commit leaves its entry queued in the writer,
                # and the next call's commit would carry it: a failed add stored after
                # all (twice with the caller's retry), a failed pop removing an item
                # later, a pop returning one item and removing another. The next call
                # opens a writer from the stored head instead.
                self._writer = None
                raise

    async def add_items(self, items: list[Any]) -> None:
        """Append items, as one atomic entry.

        ``items`` is a list (any iterable but a string, bytes or a mapping, which would
        be stored character by character or key by key: those raise
        :class:`~s3log.integrations.IntegrationError` before anything is written).
        """
        if isinstance(items, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(items, Iterable):
            raise IntegrationError(f"add_items takes a list of items, got {type(items).__name__}")
        payload = [dict(i) if isinstance(i, dict) else i for i in items]
        if not payload:
            return

        async def make() -> _Step:
            return ITEMS, {"items": payload}, None

        try:
            digest = hashlib.sha256(dumps(payload)).digest()
        except Exception:  # refused with its own error by the append below
            digest = b""
        async with self._bind():
            retry = self._retry
            key = retry[1] if retry is not None and retry[0] == digest else f"oa:{self.log.config.env.nonce()}"
            try:
                await self._append(make, key)
            except BaseException:
                self._retry = (digest, key)
                raise
            self._retry = None

    async def pop_item(self) -> Any | None:
        """Remove and return the most recent item (None if the session is empty)."""

        async def make() -> _Step:
            latest = await self._items(1)
            if not latest:
                return None, None, None
            return POP, {"item": latest[0]}, latest[0]

        async with self._bind():
            return await self._append(make)

    async def summarize(self, items: list[Any]) -> dict[str, Any]:
        """Replace the session's items with ``items`` (a summary of them, such as the
        output of the Responses API's compact), as one appended entry naming the exact
        span of the chain it stands for; returns that span (first and last seq and hash).

        Nothing is deleted: every earlier entry stays readable, verifiable and forkable
        (:meth:`fork_at`), while :meth:`get_items` reads back only to the newest summary.
        ``items`` as for :meth:`add_items` (an empty list is allowed: it empties the
        session). Raises :class:`~s3log.integrations.IntegrationError` on a session
        with nothing stored, before anything is written.
        """
        if isinstance(items, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(items, Iterable):
            raise IntegrationError(f"summarize takes a list of items, got {type(items).__name__}")
        payload = [dict(i) if isinstance(i, dict) else i for i in items]

        async def make() -> _Step:
            try:
                _, entries = await acall(self.log.read_suffix, self.sid, _reaches_summary)
            except SessionNotFound:
                entries = []
            if not entries:
                raise IntegrationError(f"session {self.sid} has nothing stored to summarize")
            span = summary_span(entries)
            return SUMMARY, {"span": span, "items": payload}, span

        async with self._bind():
            result: dict[str, Any] = await self._append(make)
            return result

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The SDK's hook for ``OpenAIResponsesCompactionSession``: its compaction's
        output replaces the items as a summary (:meth:`summarize`), in one commit, and
        the compacted history stays in the chain."""
        await self.summarize(items)
        return True

    async def clear_session(self) -> None:
        """Forget every item (appends a clear marker; history stays in the chain)."""

        async def make() -> _Step:
            return CLEAR, {}, None

        async with self._bind():
            await self._append(make)

    # ------------------------------------------------------------------ run leases

    async def _perform(self, make: Callable[[Callable[[float], Any]], Proc[T]]) -> T:
        """Run the procedure ``make(sleep)`` returns, with the sleep its performer needs."""
        if isinstance(self.log, AsyncLog):
            return await arun(make(asyncio.sleep))
        return await asyncio.to_thread(run, make(time.sleep))  # boto3 blocks: a worker thread

    @contextlib.asynccontextmanager
    async def lease(self, *, owner: str | None = None, ttl: float = 300.0,
                    wait: float = 0.0) -> AsyncIterator[RunLease]:
        """Hold the session for one run: ``async with session.lease(): await Runner.run(...)``.

        Opt-in guard against two runs of one conversation at once (by default both
        runs' items are stored, interleaved, as the SDK's own sessions store them).
        Entering records a lease in the session's head (one conditional PUT; the session
        is created if new), or raises :class:`~s3log.agent.SessionBusy` before anything
        is read or written when another owner's lease is live after waiting up to
        ``wait`` seconds for it to be released; leaving releases it. ``ttl`` (seconds)
        must cover the run; a process that dies holding the lease holds it until then.
        """
        held = RunLease(self.sid, owner, ttl, wait)
        meta = {"openai_agents": {"session_id": self.session_id}}
        await self._settle()
        await self._perform(lambda sleep: acquire(self.log, held, meta, sleep))
        self._writer = None  # the lease's PUT moved the head it knew
        try:
            yield held
        except BaseException:
            with contextlib.suppress(Exception):  # the run's error wins; the lease expires
                await self._give_back(held)
            raise
        await self._give_back(held)

    async def _give_back(self, held: RunLease) -> None:
        async with self._bind():
            await self._settle()
            await self._perform(lambda sleep: release(self.log, held))
            self._writer = None

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
        one's log; :meth:`aclose` of the new session leaves it open."""
        child_id = store_id(session_id) if session_id else None
        child = await acall(self.log.fork, self.sid, at_seq=at_seq, at_hash=at_hash, child_id=child_id)
        return S3LogSession(session_id or child, self.log, session_settings=self.session_settings)


def _retrieve(done: asyncio.Future[Any]) -> None:
    # The commit's error was raised to its caller, or the caller was cancelled: either
    # way it is reported, not to be logged again as never retrieved.
    if not done.cancelled():
        done.exception()
