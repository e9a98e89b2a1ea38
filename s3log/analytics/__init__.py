"""Batch analytics: many sessions' entries as Arrow record batches, Parquet, DuckDB, Dask.

Needs the ``analytics`` extra (pyarrow, duckdb); :mod:`s3log.analytics.dask` needs
the ``dask`` extra too.
"""

from s3log.analytics.reading import (
    SCHEMA,
    SESSIONS_SCHEMA,
    TS_RANGE,
    VIEW_BATCH_BYTES,
    VIEW_BATCH_SIZE,
    CorruptSessionWarning,
    ExportMode,
    OutputExistsError,
    ProgressCallback,
    ScanProgress,
    duckdb,
    duckdb_parquet,
    scan,
    sessions,
    sessions_table,
    stream_error,
    to_arrow,
    to_parquet,
)

__all__ = [
    "SCHEMA", "SESSIONS_SCHEMA", "TS_RANGE", "VIEW_BATCH_BYTES", "VIEW_BATCH_SIZE", "CorruptSessionWarning",
    "ExportMode", "OutputExistsError", "ProgressCallback", "ScanProgress", "duckdb", "duckdb_parquet", "scan",
    "sessions", "sessions_table", "stream_error", "to_arrow", "to_parquet",
]
