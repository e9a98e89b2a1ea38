"""Batch analytics: many sessions' entries as Arrow record batches, Parquet, DuckDB, Dask.

:func:`scan` reads sessions with bounded parallelism and verifies every chain as it
reads, yielding record batches of :data:`SCHEMA`; :func:`sessions` gives one row per
session from its head alone (:data:`SESSIONS_SCHEMA`). :func:`duckdb` registers both as
lazy views: every query streams a fresh scan in small batches, so nothing is
materialized and filters given to it (sessions, time window, kinds) cut the requests
made; ``snapshot=True`` reads once into DuckDB tables instead. :func:`to_parquet`
writes a scan out, :func:`duckdb_parquet` queries what it wrote. Every entry point also
opens a log URL with ``storage_options``.

Needs the ``analytics`` extra (pyarrow, duckdb); :mod:`s3log.analytics.dask` needs the
``dask`` extra too. The rooms: :mod:`~s3log.analytics.reading` (the scan and the
sessions table), :mod:`~s3log.analytics.columns` (the schemas, entries made into Arrow
columns), :mod:`~s3log.analytics.export` (Parquet and the export modes),
:mod:`~s3log.analytics.sql` (DuckDB views), :mod:`~s3log.analytics.options` (opening a
store from a URL, checking arguments).
"""

from s3log.analytics.columns import SCHEMA, SESSIONS_SCHEMA, TS_RANGE
from s3log.analytics.export import ExportMode, OutputExistsError, to_parquet
from s3log.analytics.reading import (
    CorruptSessionWarning,
    ProgressCallback,
    ScanProgress,
    scan,
    sessions,
    sessions_table,
    to_arrow,
)
from s3log.analytics.sql import VIEW_BATCH_BYTES, VIEW_BATCH_SIZE, duckdb, duckdb_parquet, stream_error

__all__ = [
    "SCHEMA", "SESSIONS_SCHEMA", "TS_RANGE", "VIEW_BATCH_BYTES", "VIEW_BATCH_SIZE", "CorruptSessionWarning",
    "ExportMode", "OutputExistsError", "ProgressCallback", "ScanProgress", "duckdb", "duckdb_parquet", "scan",
    "sessions", "sessions_table", "stream_error", "to_arrow", "to_parquet",
]
