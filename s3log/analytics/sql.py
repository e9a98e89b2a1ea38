"""DuckDB over a store or an export: :func:`duckdb` and :func:`duckdb_parquet`.

:func:`duckdb` registers lazy views (:class:`LazyBatches`: every query streams a fresh
:func:`~s3log.analytics.reading.scan` in small batches) or, with ``snapshot``, tables
read once; :func:`stream_error` gives back the exception that ended a view's scan.
:func:`duckdb_parquet` makes the same views over a local
:func:`~s3log.analytics.to_parquet` export, its filters pushed into the files. Named
``sql``, not ``duckdb``: a submodule of that name would be shadowed by the function
:mod:`s3log.analytics` exports.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator, Iterable, Iterator
from datetime import datetime
from typing import Any, cast

from s3log._extras import extra
from s3log.analytics.columns import _DAY_MS, SCHEMA, SESSIONS_SCHEMA, TS_RANGE, _days_to_dates
from s3log.analytics.options import _ms, _names, _opened, _session_list
from s3log.analytics.reading import checked_scan, scan, sessions
from s3log.errors import InvalidArgumentError
from s3log.store.base import ObjectStore

with extra("analytics"):
    import pyarrow as pa


class LazyBatches:
    """A re-readable Arrow stream: every read (``__arrow_c_stream__``) starts a new one.

    DuckDB reads a registered object once per query that scans it, so a view over this
    streams a fresh scan per query, batch by batch, instead of holding a table. It asks
    for the stream more than once while planning; the generator starts only when the
    first batch is pulled, so those extra calls read nothing.
    """

    def __init__(self, schema: pa.Schema, make: Callable[[], Iterator[pa.RecordBatch]]) -> None:
        self.schema = schema
        self._make = make
        #: The exception that ended the last stream read, as raised (None if it ended
        #: well): DuckDB reports it only as text inside its own error.
        self.error: BaseException | None = None

    def _batches(self) -> Iterator[pa.RecordBatch]:
        self.error = None
        try:
            yield from self._make()
        except Exception as exc:
            self.error = exc
            raise

    def reader(self) -> pa.RecordBatchReader:
        """A new reader over a new scan."""
        return pa.RecordBatchReader.from_batches(self.schema, self._batches())

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        """The Arrow PyCapsule stream protocol: a new scan per call."""
        return self.reader().__arrow_c_stream__(requested_schema)


#: Rows per batch the DuckDB views stream by default: DuckDB's own vector size, so
#: what is held at once (a batch per DuckDB thread, and the one being filled) stays small.
VIEW_BATCH_SIZE = 2048
#: And the bytes of entry data a view's batch is cut at (entries of many KiB each).
VIEW_BATCH_BYTES = 2**20


def duckdb(
    connection: Any,
    store: ObjectStore | str,
    *args: Any,
    view: str = "entries",
    sessions_view: str | None = "sessions",
    snapshot: bool = False,
    **kwargs: Any,
) -> Any:
    """Register lazy DuckDB views over the store; returns the connection.

    ``view`` (default ``entries``, :data:`~s3log.analytics.SCHEMA`) streams :func:`~s3log.analytics.scan` with the given
    arguments each time a query reads it: ``sessions=``, ``since=``/``until=`` and
    ``kinds=`` cut the requests made, not only the rows. ``sessions_view`` (default
    ``sessions``, :data:`~s3log.analytics.SESSIONS_SCHEMA`, ``None`` for none) streams one row per
    session from the heads, joinable on ``session``. Batches of :data:`VIEW_BATCH_SIZE`
    rows (or :data:`VIEW_BATCH_BYTES` of data) unless ``batch_size`` says otherwise.

    ``snapshot=True`` reads the store once, now, into DuckDB tables of the same names:
    every later query reads those tables (no request; writes made since are not seen
    until ``duckdb(...)`` is called again). ``store`` may be a log URL opened with
    ``storage_options``, as for :func:`~s3log.analytics.scan`.
    """
    _view_names(view, sessions_view)
    if not isinstance(snapshot, bool):
        raise InvalidArgumentError("snapshot", f"must be True or False, not {snapshot!r}")
    store = _opened(store, kwargs)
    if "batch_size" not in kwargs:
        kwargs.setdefault("batch_bytes", VIEW_BATCH_BYTES)
    kwargs.setdefault("batch_size", VIEW_BATCH_SIZE)
    # Checked now, not at the first query (then DuckDB would report them as its own text).
    checked_scan(store, *args, **kwargs).close()
    entries = LazyBatches(SCHEMA, lambda: scan(store, *args, **kwargs))
    streams = [entries]
    named = [(view, entries)]
    if sessions_view is not None:
        options = {k: v for k, v in kwargs.items()
                   if k in ("sessions", "since", "until", "prefix", "parallelism", "strict", "verifier", "log_id")}
        for name, value in zip(("sessions", "since", "until"), args, strict=False):
            options[name] = value
        cast(Generator[pa.RecordBatch, None, None], sessions(store, **options)).close()
        heads = LazyBatches(SESSIONS_SCHEMA, lambda: sessions(store, **options))
        streams.append(heads)
        named.append((sessions_view, heads))
    _streams[connection] = streams
    for name, stream in named:
        connection.register(f"{name}__s3log", stream)
        # A name is a view or a table, whichever the last call made it.
        connection.execute(f'DROP {"VIEW" if snapshot else "TABLE"} IF EXISTS "{name}"')
        kind = "TABLE" if snapshot else "VIEW"
        connection.execute(f'CREATE OR REPLACE {kind} "{name}" AS SELECT * FROM "{name}__s3log"')
        if snapshot:
            connection.unregister(f"{name}__s3log")
    return connection


#: The streams :func:`duckdb` registered on each connection (for :func:`stream_error`).
_streams: weakref.WeakKeyDictionary[Any, list[LazyBatches]] = weakref.WeakKeyDictionary()


def stream_error(connection: Any) -> BaseException | None:
    """The exception that ended a scan behind the views :func:`duckdb` registered on
    ``connection`` in its last query, as raised (a :class:`~s3log.CorruptionError`
    under ``strict``, a store error...): DuckDB's own error carries it only as text."""
    for stream in _streams.get(connection, ()):
        if stream.error is not None:
            return stream.error
    return None


def _view_names(*names: str | None) -> None:
    for name in names:
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise InvalidArgumentError("view", f"view name {name!r} must be an identifier")


def _day_text(ms: int) -> str:
    """``YYYY-MM-DD`` (UTC) of a time of :data:`~s3log.analytics.TS_RANGE`, years after 9999 too."""
    text: str = _days_to_dates(pa.array([ms // _DAY_MS], pa.int32()))[0].as_py()
    return text


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_list(values: Iterable[str]) -> str:
    return "(" + ", ".join(_sql_str(v) for v in values) + ")"


def _filters(
    lo: int | None, hi: int | None, kinds: Iterable[str] | None, sessions: Iterable[str] | None,
) -> tuple[list[str], list[str]]:
    """The terms of the ``WHERE`` of :func:`duckdb_parquet`'s entries view and of its
    sessions view, for the window ``[lo, hi)`` (ms), ``kinds`` and ``sessions`` (checked)."""
    where: list[str] = []
    if lo is not None:
        where.append(f"ts >= to_timestamp({lo} / 1000.0)" if lo <= TS_RANGE[1] else "false")
    if hi is not None:
        where.append(f"ts < to_timestamp({hi} / 1000.0)")
    if kinds is not None:
        kind_list = _names("kinds", kinds, "kinds")
        where.append(f"kind IN {_sql_list(kind_list)}" if kind_list else "false")
    ids = _session_list(sessions)
    # The sessions view keeps the sessions duckdb()'s would: those named, and with a
    # window those with an entry that can fall inside it (from ts_min / ts_max).
    heads_where: list[str] = []
    if ids is not None:
        where.append(f"session IN {_sql_list(ids)}" if ids else "false")
        heads_where.append(f"session IN {_sql_list(ids)}" if ids else "false")
    if lo is not None or hi is not None:
        heads_where.append("ts_min IS NOT NULL")
    if lo is not None:
        heads_where.append(f"ts_max >= to_timestamp({lo} / 1000.0)" if lo <= TS_RANGE[1] else "false")
    if hi is not None:
        heads_where.append(f"ts_min < to_timestamp({hi} / 1000.0)")
    return where, heads_where


def _day_files(root: str, lo: int | None, hi: int | None) -> list[str]:
    """The globs of the Parquet files of each ``date=`` directory under ``root`` that holds
    some and whose day the window ``[lo, hi)`` (ms) touches."""
    import glob
    import os

    lo_day = None if lo is None else _day_text(lo)
    hi_day = None if hi is None else _day_text(max(hi - 1, 0))
    # The time window picks date= directories here, so files of other days are never
    # opened (not even to bind the view's schema).
    days = []
    for path in sorted(glob.glob(os.path.join(glob.escape(root), "date=*"))):
        day = os.path.basename(path)[len("date="):]
        if (lo_day is None or day >= lo_day) and (hi_day is None or day <= hi_day) and glob.glob(
                os.path.join(glob.escape(path), "*.parquet")):
            days.append(os.path.join(path, "*.parquet"))
    return days


def duckdb_parquet(
    connection: Any,
    directory: str,
    *,
    sessions: Iterable[str] | None = None,
    since: int | float | datetime | str | None = None,
    until: int | float | datetime | str | None = None,
    kinds: Iterable[str] | None = None,
    view: str = "entries",
    sessions_view: str | None = "sessions",
) -> Any:
    """The views of :func:`duckdb` over a local export written by :func:`~s3log.analytics.to_parquet`.

    The filters become a ``WHERE`` that DuckDB pushes into the files: a time window
    selects ``date=`` directories before any file is opened, and DuckDB skips row
    groups by their statistics. The ``sessions`` view reads ``_sessions*.parquet``.
    """
    _view_names(view, sessions_view)
    lo, hi = _ms(since, "since"), _ms(until, "until")
    if hi is not None and hi > TS_RANGE[1]:
        hi = None  # after every time an export holds (and past what DuckDB's to_timestamp takes)
    where, heads_where = _filters(lo, hi, kinds, sessions)
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    root = directory.rstrip("/")
    days = _day_files(root, lo, hi)
    columns = ", ".join(f'"{c}"' for c in SCHEMA.names)
    if days:
        files = "[" + ", ".join(_sql_str(d) for d in days) + "]"
        source = f"read_parquet({files}, hive_partitioning = true, hive_types = {{'date': 'VARCHAR'}})"
    else:  # nothing exported in the window: an empty view of the same columns
        connection.register(f"{view}__empty", SCHEMA.empty_table())
        source = f'"{view}__empty"'
    connection.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT {columns} FROM {source}{clause}')
    if sessions_view is not None:
        heads = f"{root}/_sessions*.parquet"
        if connection.execute(f"SELECT count(*) FROM glob({_sql_str(heads)})").fetchone()[0]:
            source = f"read_parquet({_sql_str(heads)}, union_by_name = true)"
        else:
            connection.register(f"{sessions_view}__empty", SESSIONS_SCHEMA.empty_table())
            source = f'"{sessions_view}__empty"'
        keep = (" WHERE " + " AND ".join(heads_where)) if heads_where else ""
        connection.execute(f'CREATE OR REPLACE VIEW "{sessions_view}" AS SELECT * FROM {source}{keep}')
    return connection
