"""The scan: many sessions' entries read, verified, and yielded as Arrow record batches.

:func:`scan` reads sessions with bounded parallelism (heads, then each session's
segments in parallel), verifies every chain as it reads, and yields record batches of
a fixed schema (:data:`~s3log.analytics.SCHEMA`). Memory is bounded by ``parallelism``
sessions in flight plus one batch, whatever the size of the prefix. :func:`sessions`
gives one row per session from its head alone (:data:`~s3log.analytics.SESSIONS_SCHEMA`):
labels, meta, counts. Sessions are read through the log's public verbs
(:meth:`s3log.Log.list_session_ids`, :meth:`s3log.Log.read_runs`, :meth:`s3log.Log.heads`)
and what a head tells (:attr:`s3log.Head.expired`, :func:`s3log.results.head_outside`).

The other rooms: the Arrow columns are made in :mod:`s3log.analytics.columns`, exports
written by :mod:`s3log.analytics.export`, DuckDB views made by :mod:`s3log.analytics.sql`,
the store opened and the arguments checked by :mod:`s3log.analytics.options`.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, cast

from s3log._extras import extra
from s3log._format.columns import RunColumns
from s3log._format.ids import validate_session_id
from s3log._format.layout import normalize_prefix
from s3log._format.values import Head
from s3log.analytics.columns import _TS_OF, SCHEMA, SESSIONS_SCHEMA, TS_RANGE, _Columns, _session_row, _sessions_batch
from s3log.analytics.options import _check_verifier, _config, _ms, _names, _positive, _session_list, open_store
from s3log.config import LogConfig
from s3log.encryption import Encryption
from s3log.errors import CorruptionError, EncryptionError, FormatVersionError, InvalidArgumentError, SessionNotFound
from s3log.log import Log
from s3log.results import EntryRun, head_outside
from s3log.signing import Verifier
from s3log.store.base import ObjectStore

with extra("analytics"):
    import pyarrow as pa


class CorruptSessionWarning(UserWarning):
    """A session failed to verify and was skipped by a scan."""


@dataclass(frozen=True, slots=True)
class ScanProgress:
    """How far a scan is: sessions done of the total, entries produced, time taken."""

    sessions_done: int
    sessions_total: int
    entries: int
    elapsed_s: float

    @property
    def entries_per_s(self) -> float:
        """Entries produced per second so far."""
        return self.entries / self.elapsed_s if self.elapsed_s > 0 else 0.0


#: Called with a :class:`ScanProgress` after every session (read or skipped).
ProgressCallback = Callable[[ScanProgress], None]


# ------------------------------------------------------------------------------ checks


def _out_of_range(t: object) -> bool:
    return isinstance(t, bool) or not isinstance(t, int) or not TS_RANGE[0] <= t <= TS_RANGE[1]


def _check_head_times(head: Head, key: str) -> None:
    """CorruptionError (``key``) if a time of the head is outside :data:`~s3log.analytics.TS_RANGE`:
    no Arrow, DuckDB or Python reader of the session's row could hold it."""
    for name in ("created_at", "updated_at", "ts_min", "ts_max"):
        t = getattr(head, name)
        if t is not None and _out_of_range(t):
            raise CorruptionError(key, f"{name} {t!r} is outside the times a scan holds {TS_RANGE} "
                                       "(ms since the epoch, 1970 to 294247)")


def _check_run_times(head: Head, runs: list[EntryRun], key: str) -> None:
    """CorruptionError (``key``, the seq) if an entry's ts is outside :data:`~s3log.analytics.TS_RANGE`."""
    lo, hi = TS_RANGE
    for run in runs:
        if isinstance(run, RunColumns):
            tss, first = run.ts, run.seq
        elif run:
            tss, first = list(map(_TS_OF, run)), run[0].seq
        else:
            continue
        # Two C passes per run; only a failing run is looked at entry by entry.
        if tss and lo <= min(tss) and max(tss) <= hi:
            continue
        for i, t in enumerate(tss):
            if _out_of_range(t):
                seq = first + i if isinstance(run, RunColumns) else run[i].seq
                raise CorruptionError(key, f"entry ts {t!r} is outside the times a scan holds {TS_RANGE} "
                                           "(ms since the epoch, 1970 to 294247)", seq=seq)


# -------------------------------------------------------------------------------- scan


def _session_ids(lg: Log, sessions: Iterable[str] | None, since: int | None = None) -> list[str]:
    if sessions is None:
        # With since: only the sessions that may have been committed to since then, from the
        # activity index when it covers the window (s3log._protocol.retention); every one otherwise.
        return lg.list_session_ids(since=since)
    if isinstance(sessions, str):
        raise ValueError("sessions must be a list of session ids, not one string")
    return list(dict.fromkeys(validate_session_id(s) for s in sessions))


class _Progress:
    def __init__(self, callback: ProgressCallback | None, total: int) -> None:
        self.callback = callback
        self.total = total
        self.done = 0
        self.entries = 0
        self.start = time.perf_counter()

    def step(self, entries: int) -> None:
        self.done += 1
        self.entries += entries
        if self.callback is not None:
            self.callback(ScanProgress(self.done, self.total, self.entries, time.perf_counter() - self.start))


def scan(
    store: ObjectStore | str,
    sessions: Iterable[str] | None = None,
    since: int | float | datetime | str | None = None,
    until: int | float | datetime | str | None = None,
    kinds: Iterable[str] | None = None,
    *,
    prefix: str | None = None,
    batch_size: int = 65_536,
    parallelism: int = 16,
    strict: bool = False,
    progress: ProgressCallback | None = None,
    on_head: Callable[[Head], None] | None = None,
    verifier: Verifier | None = None,
    log_id: str | None = None,
    storage_options: dict[str, str] | None = None,
    batch_bytes: int | None = None,
    encryption: Encryption | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the entries of many sessions as Arrow record batches of :data:`~s3log.analytics.SCHEMA`.

    ``sessions``: ids to read (default: every session under the prefix, one LIST per
    1,000); only their heads and segments are read. ``since`` / ``until``: entry time
    bounds (ms since the epoch, datetimes or ISO strings; until is exclusive); sessions
    whose head says all their entries fall outside the window (``ts_min`` / ``ts_max``)
    are skipped without reading their segments. ``kinds``: keep only these kinds.
    ``progress`` is called after every session with a :class:`ScanProgress`;
    ``on_head`` with the head of every session whose entries were read.

    A session that fails to verify is skipped with a :class:`CorruptSessionWarning`
    naming the key and seq, or raises :class:`~s3log.CorruptionError` with ``strict``.
    ``verifier`` (trusted keys, as ``LogConfig(verifier=...)``): a session whose head is
    not validly signed by one of them fails to verify too (a
    :class:`~s3log.signing.SignatureError`); without it signatures are not checked.
    ``log_id``: the identity heads are verified as heads of (as ``LogConfig(log_id=...)``;
    default ``<bucket>/<prefix>``): a copy of a whole log names its original's.
    ``encryption`` (as ``LogConfig(encryption=...)``): encrypted sessions' data is
    decrypted (a shredded one is skipped with a warning, or raises with ``strict``);
    without it their ``data`` is the stored envelope (a CBOR tag 21299).

    ``store`` may be a log URL (``s3://bucket/prefix``) opened with ``storage_options``
    (:func:`~s3log.analytics.options.open_store`). A batch holds ``batch_size`` rows, or with ``batch_bytes``
    fewer once their entries' data reach that many bytes (memory bound by bytes).
    """
    # Every argument is checked here, before anything is read.
    _positive("batch_size", batch_size)
    _positive("parallelism", parallelism)
    if batch_bytes is not None:
        _positive("batch_bytes", batch_bytes)
    lo, hi = _ms(since, "since"), _ms(until, "until")
    kind_set = None if kinds is None else frozenset(_names("kinds", kinds, "kinds"))
    wanted = _session_list(sessions)
    if prefix is not None:
        normalize_prefix(prefix)
    for name, fn in (("progress", progress), ("on_head", on_head)):
        if fn is not None and not callable(fn):
            raise InvalidArgumentError(name, f"must be callable, not {fn!r}")
    _check_verifier(verifier)
    config = _config(parallelism, verifier, log_id, encryption)
    store, prefix = open_store(store, storage_options, prefix)
    return _scan(store, wanted, lo, hi, kind_set, prefix, batch_size, batch_bytes, strict, progress, on_head,
                 config)


def _scan(
    store: ObjectStore,
    sessions: Iterable[str] | None,
    lo: int | None,
    hi: int | None,
    kind_set: frozenset[str] | None,
    prefix: str | None,
    batch_size: int,
    batch_bytes: int | None,
    strict: bool,
    progress: ProgressCallback | None,
    on_head: Callable[[Head], None] | None,
    config: LogConfig,
) -> Iterator[pa.RecordBatch]:
    lg = Log(store, prefix=prefix, config=config)

    def read(sid: str) -> tuple[Head, list[EntryRun]] | None:
        try:
            got = lg.read_runs(sid, since=lo, until=hi)
            if got is not None:
                key = lg.layout.head(sid)
                _check_head_times(got[0], key)
                _check_run_times(got[0], got[1], key)
            return got
        except SessionNotFound:
            return None  # deleted since it was listed
        except (CorruptionError, FormatVersionError, EncryptionError) as exc:
            if strict:
                raise
            warnings.warn(f"skipping session {sid}: {exc}", CorruptSessionWarning, stacklevel=4)
            return None

    keep: Callable[[int, str], bool] | None = None
    if lo is not None or hi is not None or kind_set is not None:
        def keep(ts: int, kind: str) -> bool:
            return (lo is None or ts >= lo) and (hi is None or ts < hi) and (kind_set is None or kind in kind_set)

    try:
        ids = _session_ids(lg, sessions, lo)
        tracker = _Progress(progress, len(ids))
        cols = _Columns()
        for got in _read_in_order(read, ids, config.max_parallel):
            n = 0
            if got is not None:
                head, runs = got
                if on_head is not None:
                    on_head(head)
                n = cols.add(head, runs, keep)
            tracker.step(n)
            yield from cols.take(batch_size, batch_bytes)
        yield from cols.rest()
    finally:
        lg.close()


_Read = tuple[Head, list[EntryRun]] | None


def _read_in_order(read: Callable[[str], _Read], ids: list[str], parallelism: int) -> Iterator[_Read]:
    """``read`` of each id, in order, ``parallelism`` at a time.

    With 1, in the calling thread: one at a time means no thread to hand each session
    over from (measured: a quarter of a scan's CPU from memory went to that hand-over).
    """
    if parallelism == 1:
        yield from map(read, ids)
        return
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="s3log-scan") as pool:
        # A sliding window: at most `parallelism` sessions read or being read ahead
        # of the one consumed, which bounds memory; a session starts as soon as the
        # oldest is taken, not when a whole window is done, so one slow session (a
        # head then its segments: two round trips in a row) holds back no others.
        # Sessions come out in order.
        ahead: deque[Future[_Read]] = deque()
        todo = iter(ids)
        try:
            for sid in islice(todo, parallelism):
                ahead.append(pool.submit(read, sid))
            while ahead:
                got = ahead.popleft().result()
                for sid in islice(todo, 1):
                    ahead.append(pool.submit(read, sid))
                yield got
        finally:
            # Stopped early (an error, or the consumer closed the generator): sessions
            # not yet started are not read at all.
            for f in ahead:
                f.cancel()


def to_arrow(store: ObjectStore | str, *args: Any, **kwargs: Any) -> pa.Table:
    """:func:`scan` collected into one Arrow table.

    ``table.to_pandas()`` gives ``ts`` as ``datetime64[ms, UTC]``, so
    ``df[df.ts > "2026-01-01"]`` works.
    """
    return pa.Table.from_batches(list(scan(store, *args, **kwargs)), schema=SCHEMA)


def with_date(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its ``date`` column (kept for callers of older versions: scan has it)."""
    if "date" in batch.schema.names:
        return batch
    import pyarrow.compute as pc

    return batch.append_column("date", pc.strftime(batch.column("ts"), format="%Y-%m-%d"))


def checked_scan(store: ObjectStore | str, *args: Any, **kwargs: Any) -> Generator[pa.RecordBatch, None, None]:
    """:func:`scan` of these arguments, every one checked now (an unknown option too, as
    :class:`~s3log.InvalidArgumentError`): nothing is read until the first batch is taken."""
    import inspect

    params = inspect.signature(scan).parameters
    unknown = sorted(set(kwargs) - set(params))
    if unknown:
        raise InvalidArgumentError(unknown[0], f"not an option of scan (use {', '.join(list(params)[1:])})")
    try:
        inspect.signature(scan).bind(store, *args, **kwargs)
    except TypeError as exc:
        raise InvalidArgumentError("scan arguments", str(exc)) from None
    return cast(Generator[pa.RecordBatch, None, None], scan(store, *args, **kwargs))


def first_then(batches: Generator[pa.RecordBatch, None, None]) -> Generator[pa.RecordBatch, None, None]:
    """``batches`` with its first batch already taken: the store has answered (a missing
    bucket, a strict scan's first corrupt session fail here), then the same batches."""
    first = next(batches, None)

    def again() -> Generator[pa.RecordBatch, None, None]:
        try:
            if first is not None:
                yield first
                yield from batches
        finally:
            batches.close()

    return again()


# ---------------------------------------------------------------------------- sessions


def sessions(
    store: ObjectStore | str,
    sessions: Iterable[str] | None = None,
    since: int | float | datetime | str | None = None,
    until: int | float | datetime | str | None = None,
    *,
    prefix: str | None = None,
    batch_size: int = 1_000,
    parallelism: int = 16,
    strict: bool = False,
    verifier: Verifier | None = None,
    log_id: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """One row per session (:data:`~s3log.analytics.SESSIONS_SCHEMA`), from its head: one GET each.

    ``labels`` is ``meta["labels"]`` as a string map (non-string values as JSON), so
    ``labels['tenant']`` works in SQL; ``meta_json`` is the whole meta. With ``since`` /
    ``until``, sessions whose entries all fall outside the window are left out (as
    :func:`scan` skips them). Missing, unreadable and expired heads are left out; a head
    with a time outside :data:`~s3log.analytics.TS_RANGE` is left out with a :class:`CorruptSessionWarning`,
    or raises :class:`~s3log.CorruptionError` with ``strict``. With ``verifier`` (trusted
    keys), a head not validly signed by one of them (as a head of the log ``log_id``, as
    :func:`scan`'s) is unreadable: left out. ``store`` may be a log URL opened with
    ``storage_options``, as for :func:`scan`.
    """
    lo, hi = _ms(since, "since"), _ms(until, "until")
    wanted = _session_list(sessions)
    if prefix is not None:
        normalize_prefix(prefix)
    _positive("batch_size", batch_size)
    _positive("parallelism", parallelism)
    _check_verifier(verifier)
    config = _config(parallelism, verifier, log_id)
    store, prefix = open_store(store, storage_options, prefix)
    return _sessions(store, wanted, lo, hi, prefix, batch_size, strict, config)


def _sessions(
    store: ObjectStore, wanted: list[str] | None, lo: int | None, hi: int | None, prefix: str | None,
    batch_size: int, strict: bool, config: LogConfig,
) -> Iterator[pa.RecordBatch]:
    lg = Log(store, prefix=prefix, config=config)
    try:
        ids = _session_ids(lg, wanted, lo)
        rows: list[dict[str, Any]] = []
        # Heads are read `max_parallel` at a time and each made its row at once: a head
        # holds its tail (up to tens of KiB decoded), so a batch's worth of heads held
        # together grew with the prefix; the rows are small.
        step = config.max_parallel
        for start in range(0, len(ids), step):
            for r in lg.heads(ids[start : start + step]):
                head = r.head
                if head is None or head.expired or (
                        (lo is not None or hi is not None) and head_outside(head, lo, hi)):
                    continue
                try:
                    _check_head_times(head, lg.layout.head(head.session))
                except CorruptionError as exc:
                    if strict:
                        raise
                    warnings.warn(f"skipping session {head.session}: {exc}", CorruptSessionWarning, stacklevel=3)
                    continue
                rows.append(_session_row(head))
            while len(rows) >= batch_size:
                yield _sessions_batch(rows[:batch_size])
                rows = rows[batch_size:]
        if rows:
            yield _sessions_batch(rows)
    finally:
        lg.close()


def sessions_table(store: ObjectStore | str, *args: Any, **kwargs: Any) -> pa.Table:
    """:func:`sessions` collected into one Arrow table."""
    return pa.Table.from_batches(list(sessions(store, *args, **kwargs)), schema=SESSIONS_SCHEMA)
