"""The blocking API: :class:`Log` and :class:`Writer`, driven over boto3 (or any store)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from s3log import otel
from s3log._api.checks import check_callable, check_reducer, check_writer_args
from s3log._api.core import LogCore, LogVerbs
from s3log._api.keyring import SealingReducer, SuffixProbe
from s3log._api.queue import CommitQueue, ForkListener
from s3log._api.writer import WriterVerbs
from s3log._drive.drivers import SyncDriver
from s3log._format.ids import validate_session_id
from s3log._format.values import Entry, Head
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
from s3log.store.base import ObjectStore

T = TypeVar("T")

#: Heads fetched per round trip when listing sessions.
LIST_PAGE = 100


class Writer(WriterVerbs[S]):
    """Appends to one session. ``append`` queues; ``commit`` makes durable.

    Safe to share between threads: appends from many threads are carried by the
    next commit, and concurrent ``commit`` calls queue up, so threads share commits
    (group commit). ``session_id`` changes when a conflict made the writer fork.
    """

    def __init__(self, log: Log, core: CommitQueue[S]) -> None:
        self._log = log
        self._core = core
        # Group commit: one thread at a time leads a commit carrying everything queued;
        # the others wait on the condition and find their entries durable when it ends.
        self._cond = threading.Condition()
        self._committing = False

    def append(self, kind: str, data: Any = None, *, ts: int | None = None, key: str | None = None) -> int:
        """Queue an entry; return its ticket. Bad input raises InvalidEntryError at once.

        ``key``: an idempotency key (up to 64 bytes; decision 0037). An append of a key
        this writer holds or the session's head remembers is not queued again (a retry
        is stored once); AppendKeyReused if it had another kind or data. One stored in a
        fork a lost race made of the session (a crashed writer's commit) is found by the
        commit, which lists those forks once per writer, and is not written again.
        """
        return self._core.add(kind, data, ts, key=key)

    def commit(self) -> CommitResult[S]:
        """Make every queued entry durable; fork (or raise ConflictError) on conflict."""
        with self._cond:
            while self._committing:
                self._cond.wait()
            self._committing = True
        if otel.TRACER is None or not otel.recording():
            return self._lead()
        with otel.verb_span("commit", self._log._store_id(), self.session_id) as span:
            result = self._lead()
            otel.committed(span, result)
            return result

    def _lead(self) -> CommitResult[S]:
        try:
            return self._log._run(self._log._core.writing(self._core.commit()))
        finally:
            with self._cond:
                self._committing = False
                self._cond.notify_all()

    def submit(self, kind: str, data: Any = None, *, ts: int | None = None, key: str | None = None) -> int:
        """Queue an entry and return a ticket to :meth:`wait` on or ask the :meth:`status` of
        (``key``: as for :meth:`append`; the ticket then stands for the stored entry)."""
        return self._core.add(kind, data, ts, wait=True, key=key)

    def status(self, ticket: int) -> TicketStatus:
        """Where a submitted entry stands: pending, committing, uncertain, committed, withdrawn."""
        return self._core.status(ticket)

    def withdraw(self, ticket: int) -> bool:
        """Take back a submitted entry no commit has carried yet; True if it was."""
        return self._core.withdraw(ticket)

    def wait(self, ticket: int) -> AckedEntry:
        """Commit (sharing commits with other threads) until the ticket's entry is durable.

        The entry is returned to one wait; a wait on a ticket already returned raises
        InvalidArgumentError."""
        lookup = self._core.resolve(ticket)
        if lookup is not None:  # answered by an append key the head remembers: read its entry
            self._log._run(lookup)
        while True:
            with self._cond:
                while True:
                    entry = self._core.claim(ticket)
                    if entry is not None:
                        return entry
                    # "committed" with nothing to claim: another wait took the entry already.
                    if self._core.status(ticket) in ("withdrawn", "unknown", "committed"):
                        raise InvalidArgumentError("ticket", f"entry {ticket} is not waiting for a commit "
                                                   f"({self._core.status(ticket)})", session=self.session_id)
                    if not self._committing:
                        self._committing = True
                        break
                    self._cond.wait()
            self._lead()

    def renew_lease(self, *, on_conflict: OnConflict | None = None) -> CommitResult[S]:
        """Write the head now, renewing (or releasing) this writer's lease: one PUT.

        Commits whatever is queued too. Raises ConflictError if another writer appended
        since this writer's last commit (with entries queued, if ``on_conflict`` is
        ``"raise"``: ``on_conflict`` is what a conflict does to them in this renewal
        only, the writer's :attr:`on_conflict` by default).
        """
        with self._cond:
            while self._committing:
                self._cond.wait()
            self._committing = True
        try:
            return self._log._run(self._log._core.writing(self._core.touch(on_conflict)))
        finally:
            with self._cond:
                self._committing = False
                self._cond.notify_all()

    def append_durable(
        self, kind: str, data: Any = None, *, ts: int | None = None, key: str | None = None
    ) -> AckedEntry:
        """Append one entry and return it once committed (it says its ``session_id``).

        Threads calling this at once share commits: one leads a commit of everything
        queued while the others wait, and they find their entries durable when it ends.
        ``key``: an idempotency key (see :meth:`append`): a retry after a timeout, a
        crash or in another process returns the entry stored the first time.
        """
        ticket = self._core.add(kind, data, ts, wait=True, key=key)
        try:
            return self.wait(ticket)
        except BaseException:
            self._core.withdraw(ticket)
            self._core.forget(ticket)
            raise

    def __enter__(self) -> Writer[S]:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()


class Log(LogVerbs):
    """Sessions under one store prefix: create, open, read, fork, list, verify, delete."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        prefix: str | None = None,
        config: LogConfig | None = None,
        reducer: Reducer[Any] | None = None,
    ) -> None:
        self.store = store
        self._core = LogCore(store, prefix, config, reducer)
        self._driver = SyncDriver(
            store, self._core.config.retry, self._core.config.max_parallel, self._core.config.env
        )
        enc = self._core.config.encryption
        # The key objects' store (decision 0049): the log's own unless one is given.
        self._key_driver = self._driver if enc is None or enc.key_store is None else SyncDriver(
            enc.key_store, self._core.config.retry, self._core.config.max_parallel, self._core.config.env)
        # Key objects are created and destroyed under conditions too: the key store is
        # probed before its first write, as the log's store is (decision 0034).
        self._key_core = self._core if enc is None or enc.key_store is None else LogCore(
            enc.key_store, prefix, config, reducer)
        self._close_hooks: list[Callable[[], None]] = []



    def _keys(self, proc: Proc[T]) -> T:
        """A keyring procedure on the key store, which is probed before its first write."""
        return self._key_driver.run(self._key_core.writing(proc))

    def _run(self, proc: Proc[T]) -> T:
        """Run a protocol procedure against this log's store (the verbs' one way to the driver)."""
        return self._driver.run(proc)

    def _store_id(self) -> str:
        return otel.store_id(self.store, self._core.layout.prefix)

    def add_close_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when this log closes, before its resources are released.

        Agent sessions use it to drain their write-behind buffers (docs/agent.md).
        """
        self._close_hooks.append(hook)

    def close(self) -> None:
        """Run the close hooks (draining live agent sessions), then release the thread pool.

        Every hook runs; the first error is raised after the pool is released.
        """
        hooks, self._close_hooks = self._close_hooks, []
        first: BaseException | None = None
        for hook in hooks:
            try:
                hook()
            except Exception as exc:  # every hook must get its chance
                first = first or exc
        self._driver.close()
        if self._key_driver is not self._driver:
            self._key_driver.close()
        if first is not None:
            raise first

    def __enter__(self) -> Log:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    def create(
        self,
        session_id: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        reducer: Reducer[S] | None = None,
        on_conflict: OnConflict = "fork",
        lazy: bool = False,
        on_fork: ForkListener | None = None,
    ) -> Writer[S]:
        """Start a session (a UUIDv7 id unless given) and return its writer.

        The head is stored at once (``SessionExists`` if the id is taken) unless
        ``lazy``: then nothing is stored until the first commit (an encrypting log
        stores the session's data key at once either way).
        """
        ws = self._core.new_session(session_id, meta, reducer, on_conflict)
        ring = self._core.keyring
        if ring is not None and session_id is not None and not lazy and self._run(self._core.exists(ws.session)):
            raise SessionExists(ws.session)  # a taken id, refused before a data key is stored
        # The data key is stored (or a racing writer's adopted) before anything is sealed.
        key = None if ring is None else self._keys(ring.current(ws.session))
        if not lazy:
            ws = self._run(self._core.create(ws))
        return Writer(self, self._core.writer(ws, reducer, on_conflict, on_fork, key))

    def open(
        self,
        session_id: str,
        *,
        reducer: Reducer[S] | None = None,
        on_conflict: OnConflict = "fork",
        on_fork: ForkListener | None = None,
    ) -> Writer[S]:
        """Continue a stored session: read, verify and replay it."""
        check_writer_args(reducer, on_conflict, session_id if isinstance(session_id, str) else None)
        ring = self._core.keyring
        if ring is None:
            ws = self._run(self._core.open(session_id, reducer))
            return Writer(self, self._core.writer(ws, reducer, on_conflict, on_fork))
        data = self._run(self._core.load_sealed(session_id))
        self._key_driver.run(ring.fetch(data.entries, data.session))
        key = self._keys(ring.current(data.session))
        ws = self._core.replay(data, reducer, key)
        return Writer(self, self._core.writer(ws, reducer, on_conflict, on_fork, key))

    def read(self, session_id: str) -> SessionView:
        """Read and verify a session (decrypted, for a log with a key provider)."""
        if otel.TRACER is None or not otel.recording():
            return self._opened(self._run(self._core.read(session_id)))
        with otel.verb_span("read", self._store_id(), session_id) as span:
            view = self._opened(self._run(self._core.read(session_id)))
            span.set_attribute("gen_ai.memory.record.count", len(view.entries))
            return view

    def _opened(self, view: SessionView) -> SessionView:
        ring = self._core.keyring
        if ring is not None:
            self._key_driver.run(ring.fetch(view.entries, view.session_id))
        return self._core.opened(view)

    def _sealing(self, session_id: str, reducer: Reducer[Any] | None) -> SealingReducer[Any]:
        """``reducer`` over the decrypted entries of an encrypted ``session_id``, sealing
        the seed of a fork of it (its keys fetched first: a reducer does no I/O)."""
        ring = self._core.ring("fork")
        view = self._run(self._core.read(session_id))
        self._key_driver.run(ring.fetch(view.entries, view.session_id))
        key = self._keys(ring.current(view.session_id))
        return ring.reducer(reducer or self._core.reducer, key, view.session_id)

    def _sealed_run(self, proc: Callable[[], Proc[T]], sealing: SealingReducer[Any] | None) -> T:
        """``proc()`` run; for an encrypted session, an entry under a key not held (one a
        rotation made after :meth:`_sealing` fetched the keys) has that key fetched and
        ``proc()`` run again: the session is live, not shredded."""
        while True:
            try:
                return self._run(proc())
            except SessionShredded as exc:
                if sealing is None or exc.key_ref is None or sealing.keyring.holds(exc.key_ref):
                    raise
                ring = sealing.keyring
                self._key_driver.run(ring.fetch_refs([exc.key_ref], sealing.session))

    def rotate_key(self, session_id: str) -> str:
        """Start a new data key for a session; return its ref. Writers created or opened
        after this seal with it; entries sealed before stay readable with theirs."""
        sid = validate_session_id(session_id)
        ring = self._core.ring("rotate_key")
        self._keys(ring.ready())  # both stores probed before the head is read
        if not self._run(self._core.writing(self._core.exists(sid))):
            raise SessionNotFound(sid)  # a typo: no key is made for it
        return (self._keys(ring.rotate(sid))).ref

    def shred(self, session_id: str) -> list[str]:
        """Destroy every data key of a session (crypto-shredding); return their refs.

        Its data becomes unreadable to everyone (reads raise SessionShredded) while its
        chain, signatures and listings still verify. Irreversible. A fork's entries sealed
        under this session's key are shredded with it; shred each fork for its own.
        """
        sid = validate_session_id(session_id)
        ring = self._core.ring("shred")
        self._keys(ring.ready())  # both stores probed before the head is read
        stored = self._run(self._core.writing(self._core.exists(sid)))
        return self._keys(ring.shred(sid, stored=stored))

    def head(self, session_id: str) -> Head:
        """A session's head (one GET, not verified against the chain)."""
        return self._run(self._core.head(session_id))[0]

    def append_latest(
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
            key = self._keys(ring.newest(call.session))
            if key is None:
                # A session with no data key yet: its head is read for the refs its entries name.
                named = self._run(self._core.head_refs(call.session))
                if named is None and call.meta is None:
                    raise SessionNotFound(call.session)  # before a key is made for it
                key = self._keys(ring.current(call.session, named or ()))
        result = self._run(self._core.append_latest(call, key))
        # An encrypting log's results hold plaintext, as reads and a writer's commits do.
        return result if ring is None else ring.open_result(result, result.session_id)

    def read_window(
        self, session_id: str, *, since: int | None = None, until: int | None = None
    ) -> SessionView | None:
        """Read and verify a session, or None when its head shows no entry in ``[since, until)``
        (ms): a time-window reader skips a session's segments from its head alone."""
        view = self._run(self._core.read_window(session_id, since, until))
        return None if view is None else self._opened(view)

    def read_runs(
        self, session_id: str, *, since: int | None = None, until: int | None = None
    ) -> tuple[Head, list[EntryRun]] | None:
        """The verified entries of a session as the runs they are stored in, for bulk
        readers (s3log.analytics): each segment's, then the head's tail, each a
        :data:`s3log.results.EntryRun`; a format v2 segment as its columns
        (:class:`s3log._format.columns.RunColumns`, no Entry made), and the tail too when its
        decoder made them (records in the shape s3log writes).
        The same checks and errors as :meth:`read_window`, and None when it gives None."""
        got = self._run(self._core.read_runs(session_id, since, until))
        ring = self._core.keyring
        if got is None or ring is None:
            return got
        self._key_driver.run(ring.fetch_runs(got[1], session_id))
        return got[0], ring.open_runs(got[1], session_id)

    def compact(self, session_id: str, select: Selector) -> bool:
        """Rewrite a session, at its id, as a new root chain of the entries ``select`` keeps.

        ``select(history, head)`` gets the logical history (``{"kind", "ts", "data"}``
        maps) and returns those to keep, or None for no change; an empty list deletes
        the session. Atomic against commits (ConflictError if one lands first); for
        retention of stores that keep only recent states (a checkpointer's prune).
        """
        check_callable(select, "select")
        # An encrypted session's selector sees plaintext, and what it keeps is sealed again.
        sealing = None if self._core.keyring is None else self._sealing(session_id, EntriesReducer())
        return self._sealed_run(lambda: self._core.compact(session_id, select, sealing), sealing)

    def read_suffix(
        self, session_id: str, enough: Callable[[Sequence[Entry]], bool]
    ) -> tuple[Head, list[Entry]]:
        """The newest entries, read backwards (tail, then segments) until ``enough(entries)``; verified."""
        ring = self._core.keyring
        if ring is None:
            return self._run(self._core.read_suffix(session_id, enough))
        while True:  # again once per key first met (SuffixProbe)
            probe = SuffixProbe(ring, session_id, enough)
            head, entries = self._run(self._core.read_suffix(session_id, probe))
            if not probe.missing:  # enough saw plaintext; a read that ran out may hold more keys
                self._key_driver.run(ring.fetch(entries, session_id))
                return head, ring.open_entries(entries, session_id)
            self._key_driver.run(ring.fetch_refs(sorted(probe.missing), session_id))

    def heads(self, session_ids: Sequence[str]) -> list[HeadRow]:
        """The heads of sessions, fetched in parallel (unreadable ones as rows with ``error``)."""
        return self._run(self._core.heads(session_ids))

    def object_keys(self, session_id: str) -> list[str]:
        """Every key stored under a session's folder."""
        return self._run(self._core.object_keys(session_id))

    def verify(self, session_id: str) -> VerifyReport:
        """Verify a session's whole chain; CorruptionError names the key and seq at fault."""
        return self._run(self._core.verify(session_id))

    def fork(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        at_hash: bytes | str | None = None,
        meta: Mapping[str, Any] | None = None,
        reducer: Reducer[Any] | None = None,
        child_id: str | None = None,
    ) -> str:
        """Fork a session at a committed entry (the latest by default); return the new id."""
        check_reducer(reducer)
        sealing = None if self._core.keyring is None else self._sealing(session_id, reducer)
        reducer = sealing or reducer

        def proc() -> Proc[str]:
            return self._core.fork(session_id, at_seq, at_hash, meta, reducer, child_id)
        if otel.TRACER is None or not otel.recording():
            return self._sealed_run(proc, sealing)
        with otel.verb_span("fork", self._store_id(), session_id) as span:
            child = self._sealed_run(proc, sealing)
            otel.forked(span, session_id, child)
            return child

    def lineage(self, session_id: str) -> list[LineageStep]:
        """The session and its ancestors, child first."""
        return self._run(self._core.lineage(session_id))

    def children(self, session_id: str) -> list[str]:
        """The sessions forked from this one that have a head (see :func:`s3log._protocol.fork.children`)."""
        return self._run(self._core.children(session_id))

    def child_heads(self, session_id: str) -> list[HeadRow]:
        """The sessions forked from this one that have a head, with those heads, read once
        (rows with ``error`` for unreadable ones): :meth:`children`, for a caller that
        looks at the forks too (which is newest, which are tombstones: ``Head.expired``)."""
        return self._run(self._core.child_heads(session_id))

    def list_session_ids(
        self, *, prefix: str | None = None, since: datetime | timedelta | int | None = None
    ) -> list[str]:
        """Session ids, newest first (UUIDv7 ids sort by time); no head is read.

        ``prefix``: only the ids starting with it (one LIST per 1,000 of them).
        ``since`` (an aware datetime, ms since the epoch, or a timedelta ago): only the
        sessions that may have been committed to since then, a superset, never missing
        one that was. When the activity index covers the window it answers (one LIST to
        check it, then one per 1,000 markers of those days): sessions committed to on
        since's first day, even before ``since``, and sessions deleted since may appear.
        When it does not (the index is younger than the window, or
        ``LogConfig.activity_index`` is off), every id is listed, as without ``since``.
        For exactly the sessions active since then, read their heads
        (:meth:`active_sessions`). Both arguments combine.
        """
        return self._run(self._core.session_ids(prefix, since))

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        labels: Mapping[str, Any] | None = None,
        after: str | None = None,
    ) -> Iterator[SessionInfo]:
        """Sessions, newest first, their heads fetched a page at a time in parallel.

        ``limit``: at most this many, found without listing every session (a few LISTs,
        see :mod:`s3log._protocol.listing`). ``labels``: only sessions whose ``meta["labels"]``
        hold these pairs (heads must be read: at most ``LogConfig.max_parallel`` at
        once). ``after``: continue after this id (the last one of a previous page).
        """
        limit = check_limit(limit)
        wanted = check_labels(labels)
        cursor = check_after(after)
        if limit is None and wanted is None and cursor is None:
            ids = self.list_session_ids()
            for i in range(0, len(ids), LIST_PAGE):
                yield from self._run(self._core.session_infos(ids[i : i + LIST_PAGE]))
            return
        remaining = limit
        while remaining is None or remaining > 0:
            want = LIST_PAGE if remaining is None else min(remaining, LIST_PAGE)
            infos, cursor = self._run(self._core.session_page(want, wanted, cursor, LIST_PAGE))
            yield from infos
            if remaining is not None:
                remaining -= len(infos)
            if cursor is None or not infos:
                return

    def gc(self, *, older_than_ms: int = 3_600_000, dry_run: bool = False) -> GcReport:
        """Delete segments no head references (and dangling fork markers) older than the grace period."""
        return self._run(self._core.gc(older_than_ms, dry_run))

    def check_store(self) -> ProbeReport:
        """Probe whether the store honours conditional writes (``s3log doctor`` runs this).

        Costs 11 small PUTs under ``{prefix}/sessions/_probe/`` in three round trips (12 the
        first time in a bucket): :func:`s3log._protocol.probe.probe_preconditions`.
        """
        return self._run(self._core.probe())

    def delete_plan(self, session_id: str) -> DeletePlan:
        """What :meth:`delete` would remove now, and leave for ``gc`` or ``expire`` to remove
        later (a dry run: reads and lists only; ``s3log rm --dry-run``)."""
        return self._run(self._core.delete_plan(session_id))

    def delete(self, session_id: str) -> int:
        """Delete a session (head first); return how many objects were removed.

        A few objects a session created again at the id may rely on are left for ``gc``
        and ``expire``: :meth:`delete_plan` names them (:class:`~s3log.results.DeletePlan`).
        """
        return self._run(self._core.delete(session_id))

    # -------------------------------------------------------- retention

    def expire(
        self,
        *,
        idle_for: timedelta | int,
        labels: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        progress: Callable[[ExpireProgress], None] | None = None,
    ) -> ExpireReport:
        """Expire sessions whose last commit is older than ``idle_for`` (a timedelta or ms).

        Each head is deleted with If-Match on the ETag just read (nothing is written), so
        a session committed to during the sweep is kept; a writer that commits after
        raises :class:`~s3log.SessionNotFound` (nothing of that commit is stored);
        readers get SessionNotFound; ``gc`` collects the segments
        (:mod:`s3log._protocol.retention`). Raises ConditionalDeleteUnsupported on a store that
        cannot make a DELETE conditional (obstore), before deleting anything.
        ``labels``: only sessions with these labels. ``progress`` is called after
        each batch with an :class:`~s3log.results.ExpireProgress`.
        """
        if otel.TRACER is None or not otel.recording():
            return self._run(self._core.expire(idle_for, labels, dry_run, progress))
        with otel.verb_span("expire", self._store_id(), dry_run=dry_run) as span:
            report = self._run(self._core.expire(idle_for, labels, dry_run, progress))
            otel.expired(span, report)
            return report

    def active_sessions(self, *, since: datetime | timedelta | int) -> ActiveSessions:
        """Sessions committed to since ``since`` (an aware datetime, ms, or a timedelta ago).

        From the activity index when it covers the window (no head read), else from
        every head (:func:`s3log._protocol.retention.active_sessions`).
        """
        return self._run(self._core.active_sessions(since))
