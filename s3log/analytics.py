"""Batch analytics: many sessions' entries as Arrow record batches, Parquet, DuckDB.

:func:`scan` reads sessions with bounded parallelism (heads, then each session's
segments in parallel), verifies every chain as it reads, and yields record batches of
a fixed schema. Memory is bounded by ``parallelism`` sessions in flight plus one
batch, whatever the size of the prefix. Needs the ``analytics`` extra (pyarrow, duckdb).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from . import protocol
from ._extras import extra
from .codec import Entry, Head, dumps
from .errors import CorruptionError, FormatVersionError, SessionNotFound
from .log import Log
from .ops import Proc
from .store.base import ObjectStore

with extra("analytics"):
    import pyarrow as pa

log = logging.getLogger(__name__)

#: The schema of every batch :func:`scan` yields.
SCHEMA = pa.schema([
    pa.field("session", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("hash", pa.string(), nullable=False),
    pa.field("prev", pa.string()),
    pa.field("parent_session", pa.string()),
    pa.field("data_cbor", pa.binary(), nullable=False),
    pa.field("data_json", pa.string()),
])


class CorruptSessionWarning(UserWarning):
    """A session failed to verify and was skipped by a scan."""


def _ms(value: int | float | datetime | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    return int(value)


def _json(value: Any) -> str | None:
    try:
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    except (TypeError, ValueError):
        return None


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _rows(head: Head, entries: Iterable[Entry], since: int | None, until: int | None,
          kinds: frozenset[str] | None) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    parent = head.parent.session if head.parent else None
    for e in entries:
        if (since is not None and e.ts < since) or (until is not None and e.ts >= until):
            continue
        if kinds is not None and e.kind not in kinds:
            continue
        cols["session"].append(head.session)
        cols["seq"].append(e.seq)
        cols["ts"].append(e.ts)
        cols["kind"].append(e.kind)
        cols["hash"].append(e.hash.hex())
        cols["prev"].append(e.prev.hex() if e.prev else None)
        cols["parent_session"].append(parent)
        cols["data_cbor"].append(dumps(e.data))
        cols["data_json"].append(_json(e.data))
    return cols


def _batch(cols: dict[str, list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(cols, schema=SCHEMA)


def scan(
    store: ObjectStore,
    sessions: Sequence[str] | None = None,
    since: int | float | datetime | None = None,
    until: int | float | datetime | None = None,
    kinds: Iterable[str] | None = None,
    *,
    prefix: str | None = None,
    batch_size: int = 65_536,
    parallelism: int = 16,
    strict: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Stream the entries of many sessions as Arrow record batches of :data:`SCHEMA`.

    ``sessions``: ids to read (default: every session under the prefix). ``since`` /
    ``until``: entry time bounds (ms since the epoch or datetimes; until is exclusive);
    sessions whose head says all their entries fall outside the window (``ts_min`` /
    ``ts_max``) are skipped without reading their segments. ``kinds``: keep only these kinds.

    A session that fails to verify is skipped with a :class:`CorruptSessionWarning`
    naming the key and seq, or raises :class:`~s3log.CorruptionError` with ``strict``.
    """
    lg = Log(store, prefix=prefix, config=protocol.LogConfig(max_parallel=parallelism))
    lo, hi = _ms(since), _ms(until)
    kind_set = frozenset(kinds) if kinds is not None else None
    ids = list(sessions) if sessions is not None else lg.list_session_ids()

    def one(sid: str) -> Proc[protocol.SessionData | None]:
        head, etag = yield from protocol.read_head(lg.layout, sid)
        if head.ts_min is None or (lo is not None and head.ts_max is not None and head.ts_max < lo) or (
            hi is not None and head.ts_min >= hi
        ):
            return None  # empty, or no entry can fall inside the window: its segments are not read
        return (yield from protocol.load_from_head(lg.layout, head, etag))

    def read(sid: str) -> tuple[Head, list[Entry]] | None:
        try:
            data = lg.run(one(sid))
            return None if data is None else (data.head, data.entries)
        except SessionNotFound:
            return None  # deleted since it was listed
        except (CorruptionError, FormatVersionError) as exc:
            if strict:
                raise
            warnings.warn(f"skipping session {sid}: {exc}", CorruptSessionWarning, stacklevel=3)
            return None

    pending: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    try:
        with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="s3log-scan") as pool:
            # A window of `parallelism` sessions at a time keeps memory bounded.
            for start in range(0, len(ids), parallelism):
                for got in pool.map(read, ids[start : start + parallelism]):
                    if got is None:
                        continue
                    for name, values in _rows(got[0], got[1], lo, hi, kind_set).items():
                        pending[name].extend(values)
                    while len(pending["seq"]) >= batch_size:
                        yield _batch({k: v[:batch_size] for k, v in pending.items()})
                        pending = {k: v[batch_size:] for k, v in pending.items()}
        if pending["seq"]:
            yield _batch(pending)
    finally:
        lg.close()


def to_arrow(store: ObjectStore, *args: Any, **kwargs: Any) -> pa.Table:
    """:func:`scan` collected into one Arrow table."""
    return pa.Table.from_batches(list(scan(store, *args, **kwargs)), schema=SCHEMA)


def with_date(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch plus a ``date`` column (YYYY-MM-DD of ``ts``, UTC) to partition by."""
    import pyarrow.compute as pc

    date = pc.strftime(batch.column("ts"), format="%Y-%m-%d")
    return batch.append_column("date", date)


def to_parquet(
    store: ObjectStore,
    path_or_uri: str,
    *args: Any,
    partition_by: str | None = "date",
    filesystem: Any = None,
    **kwargs: Any,
) -> int:
    """Write the scan as Parquet under a directory or ``s3://bucket/prefix``.

    ``partition_by="date"`` writes Hive-style ``date=YYYY-MM-DD/`` directories, so a
    query engine filtering on date reads only the matching files. Returns the row count.
    """
    import pyarrow.dataset as ds

    schema = SCHEMA.append(pa.field("date", pa.string()))
    rows = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for b in scan(store, *args, **kwargs):
            rows += b.num_rows
            yield with_date(b)

    target = path_or_uri
    if filesystem is None and path_or_uri.startswith("s3://"):
        filesystem, target = _s3_filesystem(path_or_uri, _endpoint_of(store))
    partitioning = ds.partitioning(pa.schema([("date", pa.string())]), flavor="hive") if partition_by else None
    if partition_by not in (None, "date"):
        partitioning = ds.partitioning(pa.schema([schema.field(partition_by)]), flavor="hive")
    ds.write_dataset(
        batches(), target, schema=schema, format="parquet", partitioning=partitioning, filesystem=filesystem,
        existing_data_behavior="overwrite_or_ignore", max_rows_per_group=65_536,
    )
    return rows


def _endpoint_of(store: Any) -> str | None:
    """The endpoint a boto3-backed store talks to, so an export goes to the same place."""
    client = getattr(store, "client", None)
    meta = getattr(client, "meta", None)
    url = getattr(meta, "endpoint_url", None)
    if isinstance(url, str) and "amazonaws.com" not in url:
        return url
    return None


def _s3_filesystem(uri: str, endpoint: str | None) -> tuple[Any, str]:
    import os

    from pyarrow import fs

    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host, scheme=scheme)
    return fs.S3FileSystem(**kwargs), uri[len("s3://"):]


def duckdb(connection: Any, store: ObjectStore, *args: Any, view: str = "entries", **kwargs: Any) -> Any:
    """Register the scan as a DuckDB view (default ``entries``); returns the connection."""
    table = to_arrow(store, *args, **kwargs)
    connection.register(f"{view}__arrow", table)
    connection.execute(f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM "{view}__arrow"')
    return connection
