"""The asyncio API: :class:`AsyncLog` and :class:`AsyncWriter`, driven over aiobotocore."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from s3log import otel
from s3log._api.checks import check_callable, check_reducer, check_writer_args
from s3log._api.core import LogCore, LogVerbs
from s3log._api.keyring import SealingReducer, SuffixProbe
from s3log._api.queue import CommitQueue, ForkListener
from s3log._api.writer import WriterVerbs
from s3log._drive.drivers import AsyncDriver
from s3log._format.ids import validate_session_id
from s3log._format.values import Entry, Head
from s3log._loops import PerLoop
from s3log._protocol.listing import check_after, check_labels, check_limit
from s3log._protocol.ops import Proc
from s3log.config import LogConfig, OnConflict, Selector
from s3log.errors import InvalidArgumentError, SessionExists, SessionNotFound, SessionShredded
from s3log.reducer import EntriesReducer, Reducer, S
from s3log.results import (
    AckedEntry,
    ActiveSessions,
    CommitResult,
    DeletePlan,
    EntryRun,
    ExpireProgress,
    ExpireReport,
    GcReport,
    HeadRow,
    LineageStep,
    ProbeReport,
    SessionInfo,
    SessionView,
    TicketStatus,
    VerifyReport,
)
from s3log.store.base import AsyncObjectStore

T = TypeVar("T")
LIST_PAGE = 100


class AsyncWriter(WriterVerbs[S]):
    """Appends to one session from asyncio code.

    The verbs of :class:`~s3log.Writer`, awaited where they do I/O: ``append`` queues
    (returns a ticket), ``await commit()`` makes what is queued durable, ``await
    append_durable(...)`` returns once the entry is durable. Many tasks appending at
    once share commits (group commit): while one commit is in flight the others'
    entries queue, and the next commit carries them all.

    Cancellation: a commit runs in a task of its own, shielded, so cancelling or
    timing out a caller never abandons a commit half way. A cancelled ``append_durable``
    withdraws its entry if no commit had taken it yet (it will never be stored);
    otherwise the entry's fate is that commit's. To retry without duplicates, use
    :meth:`submit`, :meth:`wait` and :meth:`status` (see docs/design.md).
    """

    def __init__(self, log: AsyncLog, core: CommitQueue[S]) -> None:
        self._log = log
        self._core = core
        #: What belongs to the event loop this writer's commits run on: the lock that
        #: runs them one at a time (per loop: see :meth:`_bind`), every commit task not
        #: finished yet, the newest of them (see :meth:`wait`: waiters follow it, not
        #: queue more) and the futures of the waiters following it, each resolved when
        #: it ends. Another loop takes over once this one is closed or has none pending.
        self._lock: PerLoop[asyncio.Lock] = PerLoop(
            asyncio.Lock, busy=lambda _: any(not t.done() for t in self._tasks),
            session=lambda: self.session_id, drop=self._leave_loop)
        self._tasks: set[asyncio.Task[CommitResult[S]]] = set()
        self._running: asyncio.Future[CommitResult[S]] | None = None
        self._following: dict[asyncio.Future[None], None] = {}

    def _bind(self) -> asyncio.Lock:
        """Make the running event loop this writer's, if it was another's; its commit lock.

        asyncio's lock and futures belong to one loop, and a writer outlives a loop
        (a second ``asyncio.run``, a test framework's loop per test): its commits were
        refused with a RuntimeError on the next loop after entries were carried by a
        commit that was not, so callers heard of failure for stored entries. A commit
        still pending on a loop that is closed can never finish: it is abandoned as a
        cancelled one is (its entries stay queued, "uncertain" if its head PUT may have
        landed), then the writer starts afresh. One pending on a loop that is not
        closed may still finish there: using the writer elsewhere meanwhile is refused.
        """
        return self._lock.get()

    def _leave_loop(self, _lock: asyncio.Lock) -> None:
        """Forget the loop this writer leaves (closed, or with no commit pending there)."""
        for task in list(self._tasks):
            if not task.done():
                _abandon(task)
        self._tasks.clear()
        self._running, self._following = None, {}

    def append(self, kind: str, data: Any = None, *, ts: int | None = None, key: str | None = None) -> int:
        """Queue an entry; return its ticket. Nothing is written: :meth:`commit` (or
        :meth:`wait`) makes it durable. The same verb as :meth:`s3log.Writer.append`
        (``key``: an idempotency key, as there).

        Bad input raises InvalidEntryError at once.
        """
        return self._core.add(kind, data, ts, key=key)

    def submit(self, kind: str, data: Any = None, *, ts: int | None = None, key: str | None = None) -> int:
        """Queue an entry and return a ticket to :meth:`wait` on or ask the :meth:`status` of
        (``key``: as for :meth:`s3log.Writer.append`)."""
        return self._core.add(kind, data, ts, wait=True, key=key)

    def status(self, ticket: int) -> TicketStatus:
        """Where a submitted entry stands: pending, committing, uncertain, committed, withdrawn."""
        return self._core.status(ticket)

    def withdraw(self, ticket: int) -> bool:
        """Take back a submitted entry no commit has carried yet; True if it was."""
        return self._core.withdraw(ticket)

    async def wait(self, ticket: int) -> AckedEntry:
        """Commit (sharing commits with other tasks) until the ticket's entry is durable.

        Cancelling ``wait`` changes nothing about the entry: it stays queued (or in
        its commit) and :meth:`status` tells what became of it. The entry is returned
        to one wait; a wait on a ticket already returned raises InvalidArgumentError.
        """
        self._bind()
        lookup = self._core.resolve(ticket)
        if lookup is not None:  # answered by an append key the head remembers: read its entry
            await self._log._run(lookup)
        # Let every task that is ready to append queue its entry first, so one
        # commit carries them all even when the store never suspends.
        await asyncio.sleep(0)
        while True:
            entry = self._core.claim(ticket)
            if entry is not None:
                return entry
            # "committed" with nothing to claim: another wait took the entry already.
            if self._core.status(ticket) in ("withdrawn", "unknown", "committed"):
                raise InvalidArgumentError("ticket", f"entry {ticket} is not waiting for a commit "
                                           f"({self._core.status(ticket)})", session=self.session_id)
            running = self._running
            if running is not None and not running.done():
                # A commit is in flight: follow it instead of queueing another behind
                # it. The first waiter to find none in flight leads the next commit,
                # which takes everything queued meanwhile (as Writer.wait's leader does);
                # a commit per waiter would split the group into tiny commits. Each
                # waiter awaits a future of its own, so cancelling one cancels nothing
                # else (asyncio.wait gives the same, at twice the cost per waiter).
                follow = asyncio.get_running_loop().create_future()
                following = self._following
                following[follow] = None
                try:
                    await follow
                finally:
                    # A waiter cancelled (or timed out) while one long commit runs
                    # leaves nothing behind: polling wait() must not pile futures up.
                    following.pop(follow, None)
                continue
            await self.commit()

    async def append_durable(
        self, kind: str, data: Any = None, *, ts: int | None = None, key: str | None = None
    ) -> AckedEntry:
        """Append an entry and return it once committed (tasks appending at once share commits).

        If this call is cancelled before a commit took the entry, the entry is
        withdrawn and never stored; after, it is stored or not as that commit goes.
        ``key``: an idempotency key (see :meth:`s3log.Writer.append`): calling again
        with it after a timeout joins the first attempt's entry, or returns it stored.
        """
        return await self._durable(self._core.add(kind, data, ts, wait=True, key=key))

    async def _durable(self, ticket: int) -> AckedEntry:
        try:
            return await self.wait(ticket)
        except BaseException:
            self._core.withdraw(ticket)
            self._core.forget(ticket)
            raise

    async def commit(self) -> CommitResult[S]:
        """Make every queued entry durable; fork (or raise ConflictError) on conflict.

        The commit runs in its own task: cancelling the caller does not cancel it.
        """
        if otel.TRACER is None or not otel.recording():
            return await self._commit()
        # The commit's task starts inside the span: its requests are the span's children.
        with otel.verb_span("commit", self._log._store_id(), self.session_id) as span:
            result = await self._commit()
            otel.committed(span, result)
            return result

    async def _commit(self) -> CommitResult[S]:
        task = self._start(self._commit_task(self._bind()))
        # Nobody may be left to await it (its caller was cancelled): its error is then
        # retrieved here, and the entries it carried stay queued ("uncertain" if its
        # head PUT may have been applied).
        task.add_done_callback(_retrieve)
        following: dict[asyncio.Future[None], None] = {}
        task.add_done_callback(partial(_release, following))
        self._running, self._following = task, following
        return await asyncio.shield(task)

    async def renew_lease(self, *, on_conflict: OnConflict | None = None) -> CommitResult[S]:
        """Write the head now, renewing (or releasing) this writer's lease (see ``Writer.renew_lease``)."""
        task = self._start(self._commit_task(self._bind(), touch=True, on_conflict=on_conflict))
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    def _start(self, commit: Coroutine[Any, Any, CommitResult[S]]) -> asyncio.Task[CommitResult[S]]:
        task = asyncio.ensure_future(commit)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _commit_task(self, lock: asyncio.Lock, touch: bool = False,
                           on_conflict: OnConflict | None = None) -> CommitResult[S]:
        async with lock:
            proc = self._core.touch(on_conflict) if touch else self._core.commit()
            return await self._log._run(self._log._core.writing(proc))


def _abandon(task: asyncio.Task[Any]) -> None:
    """Close the commit task of a closed event loop, which will never run it again: its
    procedure's cleanup runs as on a cancellation (the commit journal decides what its
    entries become). What fails after that cleanup, such as waking the other tasks of
    that loop, concerns nothing but that loop."""
    with contextlib.suppress(Exception):
        task.get_coro().close()


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _release(following: dict[asyncio.Future[None], None], task: asyncio.Future[Any]) -> None:
    """Wake the waiters that followed ``task`` (those cancelled meanwhile are done already)."""
    for follow in list(following):
        if not follow.done():
            follow.set_result(None)


class AsyncLog(LogVerbs):
    """The :class:`~s3log.Log` verbs, awaited, over an async store."""

    def __init__(
        self,
        store: AsyncObjectStore,
        *,
        prefix: str | None = None,
        config: LogConfig | None = None,
        reducer: Reducer[Any] | None = None,
    ) -> None:
        self.store = store
        self._core = LogCore(store, prefix, config, reducer)
        self._driver = AsyncDriver(
            store, self._core.config.retry, self._core.config.max_parallel, self._core.config.env
        )
        enc = self._core.config.encryption
        # The key objects' store (decision 0049): the log's own unless one is given.
        self._key_driver = self._driver if enc is None or enc.key_store is None else AsyncDriver(
            enc.key_store, self._core.config.retry, self._core.config.max_parallel, self._core.config.env)
        # Key objects are created and destroyed under conditions too: the key store is
        # probed before its first write, as the log's store is (decision 0034).
        self._key_core = self._core if enc is None or enc.key_store is None else LogCore(
            enc.key_store, prefix, config, reducer)
        self._close_hooks: list[Callable[[], Awaitable[None] | None]] = []



    async def _keys(self, proc: Proc[T]) -> T:
        """A keyring procedure on the key store, which is probed before its first write."""
        return await self._key_driver.run(self._key_core.writing(proc))

    def add_close_hook(self, hook: Callable[[], Awaitable[None] | None]) -> None:
        """Call (and await) ``hook`` when this log closes, before its store is closed."""
        self._close_hooks.append(hook)

    async def aclose(self) -> None:
        """Run the close hooks (draining live agent sessions), then close the store's client."""
        hooks, self._close_hooks = self._close_hooks, []
        first: BaseException | None = None
        for hook in hooks:
            try:
                result = hook()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:  # every hook must get its chance
                first = first or exc
        self._driver.close()
        if self._key_driver is not self._driver:
            self._key_driver.close()
        closer = getattr(self.store, "aclose", None)
        if closer is not None:
            await closer()
        if first is not None:
            raise first

    async def __aenter__(self) -> AsyncLog:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()

    async def _run(self, proc: Proc[T]) -> T:
        """Run a protocol procedure against this log's store (the verbs' one way to the driver)."""
        return await self._driver.run(proc)

    async def create(
        self,
        session_id: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        reducer: Reducer[S] | None = None,
        on_conflict: OnConflict = "fork",
        lazy: bool = False,
        on_fork: ForkListener | None = None,
    ) -> AsyncWriter[S]:
        """Start a session and return its writer (see :meth:`s3log.Log.create`)."""
        ws = self._core.new_session(session_id, meta, reducer, on_conflict)
        ring = self._core.keyring
        if ring is not None and session_id is not None and not lazy and await self._run(self._core.exists(ws.session)):
            raise SessionExists(ws.session)  # a taken id, refused before a data key is stored
        # The data key is stored (or a racing writer's adopted) before anything is sealed.
        key = None if ring is None else await self._keys(ring.current(ws.session))
        if not lazy:
            ws = await self._run(self._core.create(ws))
        return AsyncWriter(self, self._core.writer(ws, reducer, on_conflict, on_fork, key))

    async def open(
        self,
        session_id: str,
        *,
        reducer: Reducer[S] | None = None,
        on_conflict: OnConflict = "fork",
        on_fork: ForkListener | None = None,
    ) -> AsyncWriter[S]:
        """Continue a stored session: read, verify and replay it."""
        check_writer_args(reducer, on_conflict, session_id if isinstance(session_id, str) else None)
        ring = self._core.keyring
        if ring is None:
            ws = await self._run(self._core.open(session_id, reducer))
            return AsyncWriter(self, self._core.writer(ws, reducer, on_conflict, on_fork))
        data = await self._run(self._core.load_sealed(session_id))
        await self._key_driver.run(ring.fetch(data.entries, data.session))
        key = await self._keys(ring.current(data.session))
        ws = self._core.replay(data, reducer, key)
        return AsyncWriter(self, self._core.writer(ws, reducer, on_conflict, on_fork, key))

    async def read(self, session_id: str) -> SessionView:
        """Read and verify a session (decrypted, for a log with a key provider)."""
        if otel.TRACER is None or not otel.recording():
            return await self._opened(await self._run(self._core.read(session_id)))
        with otel.verb_span("read", self._store_id(), session_id) as span:
            view = await self._opened(await self._run(self._core.read(session_id)))
            span.set_attribute("gen_ai.memory.record.count", len(view.entries))
            return view

    async def _opened(self, view: SessionView) -> SessionView:
        ring = self._core.keyring
        if ring is not None:
            await self._key_driver.run(ring.fetch(view.entries, view.session_id))
        return self._core.opened(view)

    async def _sealing(self, session_id: str, reducer: Reducer[Any] | None) -> SealingReducer[Any]:
        """As :meth:`s3log.Log._sealing`."""
        ring = self._core.ring("fork")
        view = await self._run(self._core.read(session_id))
        await self._key_driver.run(ring.fetch(view.entries, view.session_id))
        key = await self._keys(ring.current(view.session_id))
        return ring.reducer(reducer or self._core.reducer, key, view.session_id)

    async def _sealed_run(self, proc: Callable[[], Proc[T]], sealing: SealingReducer[Any] | None) -> T:
        """``proc()`` run; for an encrypted session, an entry under a key not held (one a
        rotation made after :meth:`_sealing` fetched the keys) has that key fetched and
        ``proc()`` run again: the session is live, not shredded."""
        while True:
            try:
                return await self._run(proc())
            except SessionShredded as exc:
                if sealing is None or exc.key_ref is None or sealing.keyring.holds(exc.key_ref):
                    raise
                ring = sealing.keyring
                await self._key_driver.run(ring.fetch_refs([exc.key_ref], sealing.session))

    async def rotate_key(self, session_id: str) -> str:
        """Start a new data key for a session; return its ref (see :meth:`s3log.Log.rotate_key`)."""
        sid = validate_session_id(session_id)
        ring = self._core.ring("rotate_key")
        await self._keys(ring.ready())  # both stores probed before the head is read
        if not await self._run(self._core.writing(self._core.exists(sid))):
            raise SessionNotFound(sid)  # a typo: no key is made for it
        return (await self._keys(ring.rotate(sid))).ref

    async def shred(self, session_id: str) -> list[str]:
        """Destroy every data key of a session (see :meth:`s3log.Log.shred`); return their refs."""
        sid = validate_session_id(session_id)
        ring = self._core.ring("shred")
        await self._keys(ring.ready())  # both stores probed before the head is read
        stored = await self._run(self._core.writing(self._core.exists(sid)))
        return await self._keys(ring.shred(sid, stored=stored))

    def _store_id(self) -> str:
        return otel.store_id(self.store, self._core.layout.prefix)

    async def head(self, session_id: str) -> Head:
        """A session's head (one GET)."""
        return (await self._run(self._core.head(session_id)))[0]

    async def append_latest(
        self,
        session_id: str,
        entries: Sequence[tuple[str, Any]],
        *,
        create_meta: Mapping[str, Any] | None = None,
        after: CommitResult | None = None,
        keys: Sequence[str | None] | None = None,
    ) -> CommitResult:
        """Append ``(kind, data)`` entries at the session's end whatever other writers did.

        Never forks: on a conflict the head is read again and the entries go on top.
        For entries that do not depend on what precedes them (checkpoints, chat items).
        The session is created with ``create_meta`` if it does not exist (without it:
        SessionNotFound). Pass the previous result as ``after`` to save the head GET.
        ``keys``: an idempotency key (or None) per entry: an entry whose key the head
        remembers is not appended again, the stored one is in ``acked`` in its place
        (see :meth:`s3log.Writer.append`).
        """
        call = self._core.prepare_latest(session_id, entries, create_meta, after, keys)
        ring = self._core.keyring
        key = None
        if ring is not None:
            key = await self._keys(ring.newest(call.session))
            if key is None:
                # A session with no data key yet: its head is read for the refs its entries name.
                named = await self._run(self._core.head_refs(call.session))
                if named is None and call.meta is None:
                    raise SessionNotFound(call.session)  # before a key is made for it
                key = await self._keys(ring.current(call.session, named or ()))
        result = await self._run(self._core.append_latest(call, key))
        # An encrypting log's results hold plaintext, as reads and a writer's commits do.
        return result if ring is None else ring.open_result(result, result.session_id)

    async def read_window(
        self, session_id: str, *, since: int | None = None, until: int | None = None
    ) -> SessionView | None:
        """Read and verify a session, or None when its head shows no entry in ``[since, until)``
        (ms): a time-window reader skips a session's segments from its head alone."""
        view = await self._run(self._core.read_window(session_id, since, until))
        return None if view is None else await self._opened(view)

    async def read_runs(
        self, session_id: str, *, since: int | None = None, until: int | None = None
    ) -> tuple[Head, list[EntryRun]] | None:
        """The verified entries of a session as the runs they are stored in, for bulk
        readers (s3log.analytics): each segment's, then the head's tail, each a
        :data:`s3log.results.EntryRun`; a format v2 segment as its columns
        (:class:`s3log._format.columns.RunColumns`, no Entry made), and the tail too when its
        decoder made them (records in the shape s3log writes).
        The same checks and errors as :meth:`read_window`, and None when it gives None."""
        got = await self._run(self._core.read_runs(session_id, since, until))
        ring = self._core.keyring
        if got is None or ring is None:
            return got
        await self._key_driver.run(ring.fetch_runs(got[1], session_id))
        return got[0], ring.open_runs(got[1], session_id)

    async def compact(self, session_id: str, select: Selector) -> bool:
        """Rewrite a session, at its id, as a new root chain of the entries ``select`` keeps.

        ``select(history, head)`` gets the logical history (``{"kind", "ts", "data"}``
        maps) and returns those to keep, or None for no change; an empty list deletes
        the session. Atomic against commits (ConflictError if one lands first); for
        retention of stores that keep only recent states (a checkpointer's prune).
        """
        check_callable(select, "select")
        # An encrypted session's selector sees plaintext, and what it keeps is sealed again.
        sealing = None if self._core.keyring is None else await self._sealing(session_id, EntriesReducer())
        return await self._sealed_run(lambda: self._core.compact(session_id, select, sealing), sealing)

    async def read_suffix(
        self, session_id: str, enough: Callable[[Sequence[Entry]], bool]
    ) -> tuple[Head, list[Entry]]:
        """The newest entries, read backwards (tail, then segments) until ``enough(entries)``; verified."""
        ring = self._core.keyring
        if ring is None:
            return await self._run(self._core.read_suffix(session_id, enough))
        while True:  # again once per key first met (SuffixProbe)
            probe = SuffixProbe(ring, session_id, enough)
            head, entries = await self._run(self._core.read_suffix(session_id, probe))
            if not probe.missing:  # enough saw plaintext; a read that ran out may hold more keys
                await self._key_driver.run(ring.fetch(entries, session_id))
                return head, ring.open_entries(entries, session_id)
            await self._key_driver.run(ring.fetch_refs(sorted(probe.missing), session_id))

    async def heads(self, session_ids: Sequence[str]) -> list[HeadRow]:
        """The heads of sessions, fetched in parallel (unreadable ones as rows with ``error``)."""
        return await self._run(self._core.heads(session_ids))

    async def object_keys(self, session_id: str) -> list[str]:
        """Every key stored under a session's folder."""
        return await self._run(self._core.object_keys(session_id))

    async def verify(self, session_id: str) -> VerifyReport:
        """Verify a session's whole chain."""
        return await self._run(self._core.verify(session_id))

    async def fork(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        at_hash: bytes | str | None = None,
        meta: Mapping[str, Any] | None = None,
        reducer: Reducer[Any] | None = None,
        child_id: str | None = None,
    ) -> str:
        """Fork a session at a committed entry; return the new id."""
        check_reducer(reducer)
        sealing = None if self._core.keyring is None else await self._sealing(session_id, reducer)
        reducer = sealing or reducer

        def proc() -> Proc[str]:
            return self._core.fork(session_id, at_seq, at_hash, meta, reducer, child_id)
        if otel.TRACER is None or not otel.recording():
            return await self._sealed_run(proc, sealing)
        with otel.verb_span("fork", self._store_id(), session_id) as span:
            child = await self._sealed_run(proc, sealing)
            otel.forked(span, session_id, child)
            return child

    async def lineage(self, session_id: str) -> list[LineageStep]:
        """The session and its ancestors, child first."""
        return await self._run(self._core.lineage(session_id))

    async def children(self, session_id: str) -> list[str]:
        """The sessions forked from this one that have a head (see :func:`s3log._protocol.fork.children`)."""
        return await self._run(self._core.children(session_id))

    async def child_heads(self, session_id: str) -> list[HeadRow]:
        """The sessions forked from this one that have a head, with those heads, read once
        (rows with ``error`` for unreadable ones): :meth:`children`, for a caller that
        looks at the forks too (which is newest, which are tombstones: ``Head.expired``)."""
        return await self._run(self._core.child_heads(session_id))

    async def list_session_ids(
        self, *, prefix: str | None = None, since: datetime | timedelta | int | None = None
    ) -> list[str]:
        """Session ids, newest first; no head is read (see :meth:`s3log.Log.list_session_ids`)."""
        return await self._run(self._core.session_ids(prefix, since))

    async def list_sessions(
        self,
        *,
        limit: int | None = None,
        labels: Mapping[str, Any] | None = None,
        after: str | None = None,
    ) -> AsyncIterator[SessionInfo]:
        """Sessions, newest first (see :meth:`s3log.Log.list_sessions`)."""
        limit = check_limit(limit)
        wanted = check_labels(labels)
        cursor = check_after(after)
        if limit is None and wanted is None and cursor is None:
            ids = await self.list_session_ids()
            for i in range(0, len(ids), LIST_PAGE):
                for info in await self._run(self._core.session_infos(ids[i : i + LIST_PAGE])):
                    yield info
            return
        remaining = limit
        while remaining is None or remaining > 0:
            want = LIST_PAGE if remaining is None else min(remaining, LIST_PAGE)
            infos, cursor = await self._run(self._core.session_page(want, wanted, cursor, LIST_PAGE))
            for info in infos:
                yield info
            if remaining is not None:
                remaining -= len(infos)
            if cursor is None or not infos:
                return

    async def gc(self, *, older_than_ms: int = 3_600_000, dry_run: bool = False) -> GcReport:
        """Delete segments no head references (and dangling fork markers) older than the grace period."""
        return await self._run(self._core.gc(older_than_ms, dry_run))

    async def check_store(self) -> ProbeReport:
        """Probe whether the store honours conditional writes (``s3log doctor`` runs this).

        Costs 11 small PUTs under ``{prefix}/sessions/_probe/`` in three round trips (12 the
        first time in a bucket): :func:`s3log._protocol.probe.probe_preconditions`.
        """
        return await self._run(self._core.probe())

    async def delete_plan(self, session_id: str) -> DeletePlan:
        """What :meth:`delete` would remove now, and leave for ``gc`` or ``expire`` (a dry run)."""
        return await self._run(self._core.delete_plan(session_id))

    async def delete(self, session_id: str) -> int:
        """Delete a session (head first); what is left for later: :meth:`delete_plan`."""
        return await self._run(self._core.delete(session_id))

    # -------------------------------------------------------- retention

    async def expire(
        self,
        *,
        idle_for: timedelta | int,
        labels: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        progress: Callable[[ExpireProgress], None] | None = None,
    ) -> ExpireReport:
        """Expire sessions idle for ``idle_for`` (see :meth:`s3log.Log.expire`)."""
        if otel.TRACER is None or not otel.recording():
            return await self._run(self._core.expire(idle_for, labels, dry_run, progress))
        with otel.verb_span("expire", self._store_id(), dry_run=dry_run) as span:
            report = await self._run(self._core.expire(idle_for, labels, dry_run, progress))
            otel.expired(span, report)
            return report

    async def active_sessions(self, *, since: datetime | timedelta | int) -> ActiveSessions:
        """Sessions committed to since ``since`` (see :meth:`s3log.Log.active_sessions`)."""
        return await self._run(self._core.active_sessions(since))
