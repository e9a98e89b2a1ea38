"""The I/O-free engine the blocking and the asyncio APIs share.

:class:`LogCore` builds the procedure behind each verb of :class:`~s3log.Log` and
:class:`~s3log.AsyncLog`; :class:`LogVerbs` is what those two expose alike; a writer's
queue is :class:`~s3log._api.queue.CommitQueue`. The drivers
(:mod:`s3log._drive.drivers`) run the procedures.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from s3log import results
from s3log._api.checks import (
    check_callable,
    check_keys,
    check_pairs,
    check_reducer,
    check_session_ids,
    check_type,
    check_writer_args,
)
from s3log._api.keyring import (
    Keyring,
    PlainOnly,
    SealingReducer,
    refs_in,
    refuse_sealed,
    seal_pending,
    sealing_selector,
)
from s3log._api.queue import CommitQueue, ForkListener, check_append_key
from s3log._format.cbor import dumps
from s3log._format.chain import PendingEntry
from s3log._format.entries import check_kind, normalize_data
from s3log._format.ids import validate_session_id
from s3log._format.layout import DEFAULT_PREFIX, Layout
from s3log._format.times import to_ms
from s3log._format.values import Entry, Head, append_digest
from s3log._protocol import listing, retention
from s3log._protocol.commit import create_session
from s3log._protocol.compact import compact_session
from s3log._protocol.delete import delete_session, gc, plan_delete
from s3log._protocol.fork import child_heads, children, fork_at, lineage
from s3log._protocol.latest import append_latest
from s3log._protocol.listing import list_all, list_head_rows, list_session_ids
from s3log._protocol.ops import ObjectInfo, Proc
from s3log._protocol.overlap import overlapped
from s3log._protocol.probe import probe_preconditions
from s3log._protocol.read import (
    load,
    load_latest_from,
    load_runs_from_head,
    load_suffix,
    load_suffix_data,
    read_head,
)
from s3log._protocol.state import (
    ChainPosition,
    SessionData,
    new_writer_state,
    writer_state_from,
)
from s3log.config import LogConfig, OnConflict, Selector
from s3log.encryption.envelope import ENVELOPE_TAG, DataKey, is_envelope
from s3log.errors import (
    CorruptionError,
    InvalidArgumentError,
    InvalidEntryError,
    PreconditionsIgnoredError,
    SessionNotFound,
    StoreError,
)
from s3log.reducer import EntriesReducer, NullReducer, Reducer, S
from s3log.signing import default_log_id

T = TypeVar("T")

#: Stores the precondition probe has passed in this process.
_PROBED: weakref.WeakSet[object] = weakref.WeakSet()
#: The ``precondition_scope`` of stores the probe has passed (an endpoint and bucket:
#: docs/decisions/0012): a store of the same scope made later is not probed again.
_PROBED_SCOPES: set[object] = set()
_log = logging.getLogger("s3log")


class LogCore:
    """The procedures behind each verb of :class:`~s3log.Log` and :class:`~s3log.AsyncLog`."""

    def __init__(
        self,
        store: object,
        prefix: str | None,
        config: LogConfig | None,
        reducer: Reducer[Any] | None,
    ) -> None:
        if not callable(getattr(store, "put_if_absent", None)):
            raise InvalidArgumentError("store", f"must be an s3log store (S3Store, MemoryStore, ...; or "
                                       f"s3log.open_log for a URL), not {store!r:.80}")
        check_type(config, LogConfig, "config")
        check_reducer(reducer)
        self.config = config or LogConfig()
        layout = Layout(prefix if prefix is not None else DEFAULT_PREFIX)
        log_id = self.config.log_id or default_log_id(store, layout.prefix)
        if log_id is None and (self.config.signer is not None or self.config.verifier is not None):
            raise InvalidArgumentError("log_id", f"signed heads are bound to their log's identity, and this store "
                                       f"({type(store).__name__}) names no bucket to derive it from: pass "
                                       f"LogConfig(log_id=...)")
        self.layout = Layout(layout.prefix, verifier=self.config.verifier, log_id=log_id)
        self.reducer: Reducer[Any] = reducer or EntriesReducer()
        enc = self.config.encryption
        #: The data keys of an encrypting log (decision 0049); None: data is stored as given.
        self.keyring = Keyring(enc, layout.prefix) if enc is not None else None
        self.store = store
        # Stores that are known to honour conditional writes (the in-memory ones say so)
        # are never probed; the others once per store object and process.
        self._verified = not self.config.verify_preconditions or bool(getattr(store, "honours_preconditions", False))
        #: What a probe found ignored (PreconditionsIgnoredError's detail): every later
        #: write of this log is refused with it.
        self._refusal: str | None = None

    def writing(self, proc: Proc[T]) -> Proc[T]:
        """``proc``, preceded the first time by the precondition probe of this store.

        Raises :class:`~s3log.errors.PreconditionsIgnoredError` before anything of
        ``proc`` is written if the store ignores ``If-None-Match`` or ``If-Match``.
        """
        yield from self._probe_once()
        return (yield from proc)

    def reading_to_write(self, proc: Proc[T]) -> Proc[T]:
        """``proc``, which writes nothing, with the probe (if this store still needs one)
        sent beside it: a writer's open reads while the probe runs, so its first commit
        need not wait for the probe's round trips (docs/decisions/0051).

        The verdict is given where it always was, at the first write: a store the probe
        refuses fails nothing here, and every write of this log raises its refusal (not
        probed again: a store that loses a race only now and then must not get a second
        chance). An open that finds no session lets the probe finish first, so the
        ``create`` that usually follows need not probe.
        """
        if self._verified:
            return (yield from proc)
        _, outcome = yield from overlapped(self._probe_ahead(), _not_found_as_value(proc))
        if isinstance(outcome, SessionNotFound):
            raise outcome
        return outcome

    def _probe_ahead(self) -> Proc[None]:
        # Kept for the first write (_probe_once raises it again); a probe that could not
        # finish leaves the store to be probed at the first write.
        with contextlib.suppress(PreconditionsIgnoredError, StoreError):
            yield from self._probe_once()

    def _probe_once(self) -> Proc[None]:
        """The precondition probe, unless this store (or its scope) passed it before;
        PreconditionsIgnoredError if it, or an earlier probe of this log, refused it."""
        bucket = str(getattr(self.store, "bucket", type(self.store).__name__))
        if self._refusal is not None:
            raise PreconditionsIgnoredError(bucket, self._refusal)
        scope = getattr(self.store, "precondition_scope", None)
        if not self._verified and self.store not in _PROBED and (scope is None or scope not in _PROBED_SCOPES):
            report = yield from probe_preconditions(self.layout, self.config)
            if not report.ok:
                self._refusal = report.detail
                raise PreconditionsIgnoredError(bucket, report.detail)
            if not report.complete:
                _log.warning("could not verify that the store honours conditional writes: %s", report.detail)
            with contextlib.suppress(TypeError):  # a store that cannot be weakly referenced is probed again
                _PROBED.add(self.store)
            if scope is not None and report.complete:
                # Only a probe that saw every property honoured speaks for the scope's other stores.
                with contextlib.suppress(TypeError):  # not hashable: this object only
                    _PROBED_SCOPES.add(scope)
        self._verified = True

    def probe(self) -> Proc[results.ProbeReport]:
        """Run the precondition probe now, whatever was found before."""
        return probe_preconditions(self.layout, self.config)

    def writer(
        self,
        ws: ChainPosition[S],
        reducer: Reducer[S] | None,
        on_conflict: OnConflict,
        on_fork: ForkListener | None,
        key: DataKey | None = None,
    ) -> CommitQueue[S]:
        """The commit queue of a writer starting at ``ws`` (sealing with ``key`` if given)."""
        red = reducer or self.reducer
        if key is not None and self.keyring is not None:
            red = self.keyring.reducer(red, key, ws.session)
        queue = CommitQueue(self.layout, self.config, ws, red, on_conflict, on_fork)
        if key is not None and self.keyring is not None:
            ring, session = self.keyring, ws.session
            queue.sealer = key
            queue.opener = lambda entries: ring.open_acked(entries, session)
            queue.result_opener = lambda result: ring.open_result(result, session)
        return queue

    def new_session(
        self, session_id: str | None, meta: Mapping[str, Any] | None, reducer: Reducer[S] | None,
        on_conflict: object = "fork",
    ) -> ChainPosition[S]:
        """The chain position of a session not stored yet (validates the id, meta and the
        writer's arguments)."""
        sid = validate_session_id(session_id) if session_id is not None else self.config.env.new_id()
        check_writer_args(reducer, on_conflict, sid)
        meta = check_meta(meta, sid)
        return new_writer_state(sid, reducer or self.reducer, meta, now=self.config.env.now_ms(),
                                         creator=self.config.env.nonce())

    def create(self, ws: ChainPosition[S]) -> Proc[ChainPosition[S]]:
        """Store the empty head of ``ws`` (probed first: :meth:`writing`)."""
        return self.writing(create_session(self.layout, self.config, ws))

    def open(self, session_id: str, reducer: Reducer[S] | None) -> Proc[ChainPosition[S]]:
        """Load and verify a session, and replay it into a chain position (the probe
        sent beside the reads: :meth:`reading_to_write`).

        A reducer with a ``restarts(entry)`` method (see :mod:`s3log.reducer`) is replayed
        from the newest entry it restarts at: the chain is read backwards (the head's
        tail, then one segment at a time) only until one is found, so the requests do not
        grow with what came before it.
        """
        return self.reading_to_write(self._replayed(validate_session_id(session_id), reducer or self.reducer))

    def _replayed(self, sid: str, reducer: Reducer[S]) -> Proc[ChainPosition[S]]:
        """What :meth:`open` reads and replays, without the probe."""
        restarts: Callable[[Entry], bool] | None = getattr(reducer, "restarts", None)
        if restarts is None:
            data: SessionData = yield from load(self.layout, sid, confirm_pending=True)
            if self.keyring is None:
                refuse_sealed(data.entries, data.session)
            return writer_state_from(data, reducer, self.config)
        data = yield from load_suffix_data(self.layout, sid, lambda es: any(restarts(e) for e in es))
        if self.keyring is None:
            refuse_sealed(data.entries, data.session)
        start = max((i for i, e in enumerate(data.entries) if restarts(e)), default=0)
        return writer_state_from(replace(data, entries=data.entries[start:]), reducer, self.config)

    def load_sealed(self, session_id: str) -> Proc[SessionData]:
        """Load and verify an encrypted session for a writer (:meth:`open` with the keys
        fetched between the load and the replay: :meth:`replay`)."""
        return self.reading_to_write(load(self.layout, validate_session_id(session_id), confirm_pending=True))

    def replay(self, data: SessionData, reducer: Reducer[S] | None, key: DataKey) -> ChainPosition[S]:
        """The chain position of an encrypted session loaded by :meth:`load_sealed`."""
        assert self.keyring is not None
        return writer_state_from(data, self.keyring.reducer(reducer or self.reducer, key, data.session),
                                 self.config)

    def read(self, session_id: str) -> Proc[results.SessionView]:
        """Load and verify a session (its data as stored: :meth:`opened` decrypts it)."""
        data: SessionData = yield from load(self.layout, validate_session_id(session_id))
        if self.keyring is None:
            refuse_sealed(data.entries, data.session)
        return results.SessionView(data.session, data.head, data.etag, data.entries)

    def ring(self, verb: str) -> Keyring:
        """This log's keyring; InvalidArgumentError naming ``verb`` if it does not encrypt."""
        if self.keyring is None:
            raise InvalidArgumentError("config", f"{verb} needs LogConfig(encryption=Encryption(provider))")
        return self.keyring

    def opened(self, view: results.SessionView) -> results.SessionView:
        """``view`` with its entries decrypted (their keys fetched: Keyring.fetch)."""
        if self.keyring is None:
            return view
        return results.SessionView(view.session_id, view.head, view.etag,
                           self.keyring.open_entries(view.entries, view.session_id))

    def verify(self, session_id: str) -> Proc[results.VerifyReport]:
        """Load and verify a session; report what was checked."""
        data: SessionData = yield from load(self.layout, validate_session_id(session_id))
        return results.VerifyReport(data.session, len(data.entries), len(data.head.segments), data.head.version)

    def fork(
        self,
        session_id: str,
        at_seq: int | None,
        at_hash: bytes | str | None,
        meta: Mapping[str, Any] | None,
        reducer: Reducer[Any] | None,
        child: str | None,
    ) -> Proc[str]:
        """Fork a stored session at a committed entry; return the child's id (arguments
        checked first, then the store probed)."""
        sid = validate_session_id(session_id)
        meta = None if meta is None else check_meta(meta, session_id)
        child = None if child is None else validate_session_id(child)
        return self.writing(self._fork(sid, at_seq, at_hash, meta, reducer, child))

    def _fork(
        self, session_id: str, at_seq: int | None, at_hash: bytes | str | None,
        meta: Mapping[str, Any] | None, reducer: Reducer[Any] | None, child: str | None,
    ) -> Proc[str]:
        red = reducer or self.reducer
        if self.keyring is None:  # an encrypted parent is refused, not seeded with envelopes
            red = PlainOnly(red, session_id)
        ws, _ = yield from fork_at(self.layout, self.config, session_id, red,
                                            at_seq=at_seq, at_hash=at_hash, meta=meta, child=child)
        return ws.session

    def session_infos(self, ids: Sequence[str]) -> Proc[list[results.SessionInfo]]:
        """Rows for ``ids`` (sessions deleted meanwhile are left out)."""
        rows = yield from list_head_rows(self.layout, ids)
        # Expired: gone, as far as listings go.
        return [results.SessionInfo.from_row(r) for r in rows if r.head is None or not r.head.expired]

    def lineage(self, session_id: str) -> Proc[list[results.LineageStep]]:
        """``session_id`` and its ancestors."""
        return lineage(self.layout, validate_session_id(session_id))

    def children(self, session_id: str) -> Proc[list[str]]:
        """Sessions forked from ``session_id``."""
        return children(self.layout, validate_session_id(session_id))

    def child_heads(self, session_id: str) -> Proc[list[results.HeadRow]]:
        """Sessions forked from ``session_id``, with their heads (read once)."""
        return child_heads(self.layout, validate_session_id(session_id))

    def delete_plan(self, session_id: str) -> Proc[results.DeletePlan]:
        """What deleting a session would remove now and leave for gc or expire (reads only)."""
        return plan_delete(self.layout, validate_session_id(session_id), self.config)

    def delete(self, session_id: str) -> Proc[int]:
        """Delete a session and everything under it (probed first)."""
        return self.writing(delete_session(self.layout, validate_session_id(session_id), self.config))

    def gc(self, older_than_ms: int, dry_run: bool) -> Proc[results.GcReport]:
        """Collect unreferenced segments and dangling fork markers older than the grace period
        (probed first, unless a dry run, which deletes nothing)."""
        if not isinstance(older_than_ms, int) or isinstance(older_than_ms, bool) or older_than_ms < 0:
            raise InvalidArgumentError("older_than_ms", f"must be a non-negative integer, not {older_than_ms!r}")
        proc = gc(
            self.layout, older_than_ms=older_than_ms, now=self.config.env.now_ms(), dry_run=dry_run,
            commit_deadline_ms=self.config.commit_deadline_ms,
        )
        return proc if dry_run else self.writing(proc)

    def prepare_latest(
        self,
        session_id: str,
        entries: object,
        create_meta: Mapping[str, Any] | None,
        after: object,
        keys: object = None,
    ) -> LatestCall:
        """Validate an ``append_latest`` call: ``(kind, data)`` pairs, their append
        ``keys`` (one per entry or None), ``create_meta`` and ``after``; nothing is read."""
        sid = validate_session_id(session_id)
        pairs = check_pairs(entries, sid)
        keys = check_keys(keys, sid)
        check_type(after, results.CommitResult, "after", session=sid)
        now = self.config.env.now_ms()
        pending = [PendingEntry(check_kind(k, session=sid), now, normalize_data(k, d, session=sid)) for k, d in pairs]
        if any(is_envelope(p.data) for p in pending):
            raise InvalidEntryError("", "data may not be an encrypted entry's envelope (a CBOR tag "
                                    f"{ENVELOPE_TAG})", session=sid)
        if keys is not None:
            pending = _keyed(sid, pairs, pending, keys)
        meta = None if create_meta is None else check_meta(create_meta, sid)
        assert after is None or isinstance(after, results.CommitResult)
        hint = after._ws if after is not None and after.session_id == sid and after.etag is not None else None
        return LatestCall(sid, pending, meta, hint)

    def append_latest(self, call: LatestCall, key: DataKey | None = None) -> Proc[results.CommitResult]:
        """Append a checked call's entries at the session's latest head (sealed under ``key`` if given)."""
        sid = call.session
        pending = call.pending if key is None else seal_pending(call.pending, key)
        # A log with no key provider appends nothing in the clear to a session whose
        # head shows sealed entries (refused by name, before anything is written).
        check = None if key is not None or self.keyring is not None else (lambda head: refuse_sealed(head.tail, sid))
        return self.writing(append_latest(self.layout, self.config, sid, pending, NullReducer(),
                                          create_meta=call.meta, hint=call.hint, check_head=check))

    def read_window(self, session_id: str, since: object, until: object) -> Proc[results.SessionView | None]:
        """Load and verify a session unless its head shows no entry can fall in ``[since, until)``
        (ms, datetimes or ISO text, as listings take)."""
        since, until = _bounds(since, until)
        head, etag = yield from read_head(self.layout, validate_session_id(session_id))
        if results.head_outside(head, since, until):
            return None
        data: SessionData = yield from load_latest_from(self.layout, head, etag)
        return results.SessionView(data.session, data.head, data.etag, data.entries)

    def read_runs(
        self, session_id: str, since: object, until: object
    ) -> Proc[tuple[Head, list[results.EntryRun]] | None]:
        """:meth:`read_window` as the runs the chain is stored in (see :func:`load_runs_from_head`)."""
        since, until = _bounds(since, until)
        head, etag = yield from read_head(self.layout, validate_session_id(session_id))
        if results.head_outside(head, since, until):
            return None
        return (yield from load_runs_from_head(self.layout, head, etag))

    def read_suffix(
        self, session_id: str, enough: Callable[[Sequence[Entry]], bool]
    ) -> Proc[tuple[Head, list[Entry]]]:
        """The newest entries of a session, read backwards until ``enough(entries)``."""
        return load_suffix(self.layout, validate_session_id(session_id), enough)

    def heads(self, session_ids: Sequence[str]) -> Proc[list[results.HeadRow]]:
        """The heads of sessions (rows with ``error`` for unreadable ones; missing ones left out)."""
        return list_head_rows(self.layout, [validate_session_id(s) for s in check_session_ids(session_ids)])

    def session_ids(self, prefix: object, since: object) -> Proc[list[str]]:
        """Session ids, newest first: those starting with ``prefix`` (if given) and, if
        ``since`` is given, those that may have been committed to since then
        (:func:`s3log._protocol.retention.session_ids_since`). Arguments checked before any request."""
        if prefix is not None and not isinstance(prefix, str):
            raise InvalidArgumentError("prefix", f"must be a string (a session id prefix), not {prefix!r}")
        start = prefix or ""
        if since is None:
            return list_session_ids(self.layout, start)
        return retention.session_ids_since(self.layout, retention.since_ms(since, self.config.env.now_ms()), start)

    def object_keys(self, session_id: str) -> Proc[list[str]]:
        """Every key stored under a session's folder (head, segments, fork markers)."""
        return _keys_of(list_all(self.layout.session_dir(validate_session_id(session_id))))

    def head(self, session_id: str) -> Proc[tuple[Head, str]]:
        """A session's head and ETag."""
        return read_head(self.layout, validate_session_id(session_id))

    def exists(self, session_id: str) -> Proc[bool]:
        """Whether a session's head is stored (one GET; a corrupt one is stored)."""
        try:
            yield from read_head(self.layout, validate_session_id(session_id))
        except SessionNotFound:
            return False
        except CorruptionError:
            return True
        return True

    def head_refs(self, session_id: str) -> Proc[set[str] | None]:
        """The data keys the entries in a session's head name (None for a session not
        stored): what a first data key must not be made again over."""
        try:
            head, _ = yield from read_head(self.layout, validate_session_id(session_id))
        except SessionNotFound:
            return None
        return refs_in(head.tail)

    # -------------------------------------------- bounded listings and retention

    def session_page(
        self, want: int, labels: Mapping[str, str] | None, after: str | None, batch: int
    ) -> Proc[tuple[list[results.SessionInfo], str | None]]:
        """Up to ``want`` sessions before ``after``, newest first (:func:`s3log._protocol.listing.session_page`)."""
        rows, cursor = yield from listing.session_page(
            self.layout, want, labels=labels, after=after, now=self.config.env.now_ms(), batch=batch)
        return [results.SessionInfo.from_row(r) for r in rows], cursor

    def expire(
        self,
        idle_for: object,
        labels: object,
        dry_run: bool,
        progress: Callable[[results.ExpireProgress], None] | None,
    ) -> Proc[results.ExpireReport]:
        """Delete sessions idle for ``idle_for`` (:func:`s3log._protocol.retention.expire`); arguments
        checked first, then the store probed (unless a dry run, which deletes nothing)."""
        ms = retention.idle_ms(idle_for)
        wanted = listing.check_labels(labels)
        check_callable(progress, "progress", optional=True)
        proc = retention.expire(self.layout, self.config, idle_for_ms=ms, now=self.config.env.now_ms(),
                                labels=wanted, dry_run=bool(dry_run), progress=progress)
        return proc if dry_run else self.writing(proc)

    def compact(self, session_id: str, select: Selector, sealing: SealingReducer[Any] | None = None) -> Proc[bool]:
        """Rewrite a session as a new root chain of what ``select`` keeps (see
        :func:`compact_session`; probed first). ``sealing``: an encrypted session's
        reducer (:meth:`s3log.Log._sealing`): the selector sees plaintext, and what it
        keeps is sealed again."""
        sid = validate_session_id(session_id)
        reducer: Reducer[list[dict[str, Any]]]
        if sealing is not None:
            select = sealing_selector(select, sealing.key, sealing.session)
            reducer = sealing
        elif self.keyring is None:
            # A log with no key provider: a sealed entry or seed is refused by name, before
            # the selector sees ciphertext or anything is written.
            reducer = PlainOnly(EntriesReducer(), sid)
        else:
            reducer = EntriesReducer()
        return self.writing(compact_session(self.layout, self.config, sid, select, reducer))

    def active_sessions(self, since: object) -> Proc[results.ActiveSessions]:
        """Sessions committed to since ``since`` (:func:`s3log._protocol.retention.active_sessions`)."""
        return retention.active_sessions(self.layout, retention.since_ms(since, self.config.env.now_ms()))


def _keyed(session: str, entries: Sequence[tuple[str, Any]], pending: list[PendingEntry],
           keys: Sequence[str | None]) -> list[PendingEntry]:
    """``pending`` with the append keys ``keys`` (checked: one per entry, no key twice)."""
    if isinstance(keys, str) or len(keys) != len(pending):
        raise InvalidArgumentError("keys", f"must give one key (or None) per entry: {len(pending)}, "
                                           f"not {keys!r:.80}", session=session)
    seen = {k for k in keys if k is not None}
    if len(seen) != sum(k is not None for k in keys):
        raise InvalidArgumentError("keys", "a key appears twice in one call", session=session)
    out = []
    for (kind, _), p, key in zip(entries, pending, keys, strict=True):
        if key is None:
            out.append(p)
            continue
        check_append_key(key, session)
        encoded = dumps(p.data)
        out.append(PendingEntry(p.kind, p.ts, p.data, encoded, key, append_digest(kind, encoded)))
    return out


def _keys_of(proc: Proc[tuple[list[ObjectInfo], list[str]]]) -> Proc[list[str]]:
    objects, _ = yield from proc
    return [o.key for o in objects]


def check_meta(meta: object, session: str | None) -> dict[str, Any]:
    """Validate a session header: a map with string keys that CBOR can store."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise InvalidArgumentError("meta", f"must be a mapping, not {type(meta).__name__}", session=session)
    bad = [k for k in meta if not isinstance(k, str)]
    if bad:
        raise InvalidArgumentError("meta", f"keys must be strings, found {bad[0]!r}", session=session)
    normalized: dict[str, Any] = normalize_data("meta", dict(meta), session=session)
    return normalized


class LogVerbs:
    """What :class:`~s3log.Log` and :class:`~s3log.AsyncLog` expose alike (over their :class:`LogCore`)."""

    _core: LogCore

    @property
    def prefix(self) -> str:
        """The key prefix sessions live under."""
        return self._core.layout.prefix

    @property
    def layout(self) -> Layout:
        """The key layout of this log (where each object of a session is stored)."""
        return self._core.layout

    @property
    def log_id(self) -> str | None:
        """The identity signed heads (and checkpoints) of this log are bound to:
        ``LogConfig.log_id``, else ``<bucket>/<prefix>`` (None if the store names no bucket)."""
        return self._core.layout.log_id

    @property
    def config(self) -> LogConfig:
        """This log's tunables."""
        return self._core.config


@dataclass(frozen=True, slots=True)
class LatestCall:
    """A checked ``append_latest`` call (:meth:`LogCore.prepare_latest`), not sealed yet."""

    session: str
    pending: list[PendingEntry]
    meta: Mapping[str, Any] | None
    hint: ChainPosition[Any] | None


def _bounds(since: object, until: object) -> tuple[int | None, int | None]:
    """A read window's bounds as ms (each None, or a time :func:`to_ms` takes)."""
    return (None if since is None else to_ms(since, "since"), None if until is None else to_ms(until, "until"))


def _not_found_as_value(proc: Proc[T]) -> Proc[T | SessionNotFound]:
    """``proc``, returning the SessionNotFound it raises instead of raising it."""
    try:
        return (yield from proc)
    except SessionNotFound as exc:
        return exc
