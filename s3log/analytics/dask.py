"""Scaling a scan out: a Dask DataFrame of entries, partitioned by session ranges.

The client lists session ids once; each partition is a slice of them that a Dask
worker reads itself, straight from S3, with :func:`s3log.analytics.scan`. The task
graph carries plain values only (bucket, prefix, endpoint, ids, scan options), and
a ``verifier`` (trusted keys), which pickles as its public keys: no store, client,
log or thread pool is pickled. Each worker process opens one store per
(bucket, prefix, endpoint) and reuses it for every partition it reads; each partition
opens and closes its own log (and its thread pools) around its scan.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from s3log._extras import extra
from s3log._format.layout import DEFAULT_PREFIX, normalize_prefix
from s3log.analytics import columns, reading
from s3log.analytics import options as arguments  # `options` names the scan options here
from s3log.errors import InvalidArgumentError
from s3log.signing import Verifier, check_log_id

with extra("dask"):
    import pandas as pd
    import pyarrow as pa

#: The scan options a partition accepts (everything else is refused before any task runs).
SCAN_OPTIONS = frozenset({"since", "until", "kinds", "strict", "parallelism", "batch_size"})

#: ``storage_options`` as they travel in the task graph: :func:`s3log.analytics.options.storage_kwargs`' pairs.
Storage = tuple[tuple[str, str], ...]

_stores: dict[tuple[int, str, str, str | None, bool, Storage], Any] = {}
_stores_lock = threading.Lock()
#: How many stores this process has opened (tests check that partitions share one).
stores_opened = 0


def worker_store(bucket: str, prefix: str, endpoint_url: str | None, fast: bool, storage: Storage = ()) -> Any:
    """This process's store for ``bucket``/``prefix``/``endpoint_url`` (and the client
    arguments ``storage``, from ``storage_options``), opened once.

    A boto3 client costs hundreds of milliseconds and a connection pool to build, so
    partitions share one per process. The process id is part of the key: a forked
    child never uses a client (and its sockets) inherited from its parent.
    """
    global stores_opened
    key = (os.getpid(), bucket, prefix, endpoint_url, fast, storage)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            for stale in [k for k in _stores if k[0] != key[0]]:
                del _stores[stale]  # inherited through fork: not ours to use or close
            from s3log.store.s3 import S3Store

            if storage:
                store = arguments.boto3_store(bucket, _client_kwargs(endpoint_url, storage))
            else:
                store = S3Store.fast(bucket, endpoint_url=endpoint_url) if fast else \
                    S3Store(bucket, endpoint_url=endpoint_url)
            _stores[key] = store
            stores_opened += 1
        return store


def _types_mapper(dtype: pa.DataType) -> Any:
    # Timestamps become pandas' own datetime64[ms, UTC], which compares with strings
    # (df.ts > "2026-01-01"); everything else stays Arrow-backed so data_cbor stays
    # binary (dask would cast object columns to text) and labels stay a map.
    if pa.types.is_timestamp(dtype):
        return None
    return pd.ArrowDtype(dtype)


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as the DataFrame a partition returns (see :func:`read_entries`)."""
    return table.to_pandas(types_mapper=_types_mapper)


def _client_kwargs(endpoint_url: str | None, storage: Storage) -> dict[str, str]:
    kwargs = dict(storage)
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url  # the argument wins over AWS_ENDPOINT_URL
    return kwargs


def _storage(storage_options: object, fast: bool) -> Storage:
    """``storage_options`` checked (before any task is built) as pairs that pickle."""
    if storage_options is None:
        return ()
    if fast:
        raise InvalidArgumentError("storage_options", "configures the boto3 client: not with fast=True")
    return tuple(sorted(arguments.storage_kwargs(storage_options).items()))


def _entries_partition(
    ids: Sequence[str], bucket: str, prefix: str, endpoint_url: str | None, fast: bool,
    options: tuple[tuple[str, Any], ...], storage: Storage = (),
) -> pd.DataFrame:
    store = worker_store(bucket, prefix, endpoint_url, fast, storage)
    return to_pandas(reading.to_arrow(store, list(ids), prefix=prefix, **dict(options)))


def _sessions_partition(
    ids: Sequence[str], bucket: str, prefix: str, endpoint_url: str | None, fast: bool,
    options: tuple[tuple[str, Any], ...], storage: Storage = (),
) -> pd.DataFrame:
    store = worker_store(bucket, prefix, endpoint_url, fast, storage)
    return to_pandas(reading.sessions_table(store, list(ids), prefix=prefix, **dict(options)))


def _plain_options(options: dict[str, Any], allowed: Iterable[str]) -> tuple[tuple[str, Any], ...]:
    """Scan options as a sorted tuple of plain values, checked before any task is built."""
    allowed = frozenset(allowed)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidArgumentError(unknown[0], f"unknown scan option(s) {unknown}: use {sorted(allowed)}")
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name in ("since", "until"):
            value = arguments._ms(value, name)  # datetimes and strings travel as ints
        elif name == "kinds" and value is not None:
            value = tuple(arguments._names("kinds", value, "kinds"))
        elif name in ("parallelism", "batch_size"):
            arguments._positive(name, value)
        elif name == "strict":
            value = bool(value)
        out[name] = value
    return tuple(sorted(out.items()))


def _portable_verifier(verifier: object) -> Verifier | None:
    """``verifier`` if it is one and survives a pickling round trip, as it will to reach a worker.

    Checked at the call, before any task is built: a verifier that does not pickle
    (:class:`~s3log.signing.KmsVerifier`, which holds a boto3 client, or an
    :class:`~s3log.signing.AnyVerifier` holding one) would otherwise fail in every
    task, or on the client as the graph is sent.
    """
    if verifier is None:
        return None
    arguments._check_verifier(verifier)
    assert isinstance(verifier, Verifier)  # for mypy: checked just above
    with extra("dask"):
        import cloudpickle  # what dask and distributed pickle tasks with

    try:
        copy = cloudpickle.loads(cloudpickle.dumps(verifier))
    except Exception as exc:  # each type refuses with its own error
        raise InvalidArgumentError("verifier", f"cannot be sent to Dask workers: it does not pickle ({exc})") \
            from None
    if not isinstance(copy, Verifier) or tuple(copy.key_ids) != tuple(verifier.key_ids):
        raise InvalidArgumentError("verifier", "cannot be sent to Dask workers: unpickled, it does not trust "
                                   "the same keys")
    return verifier


def _with_verifier(options: tuple[tuple[str, Any], ...], verifier: object, log_id: object
                   ) -> tuple[tuple[str, Any], ...]:
    checked = _portable_verifier(verifier)
    extra: list[tuple[str, Any]] = [] if checked is None else [("verifier", checked)]
    if log_id is not None:
        extra.append(("log_id", check_log_id(log_id)))  # a bad one fails here, not in a task
    return tuple(sorted((*options, *extra))) if extra else options


def _ids(bucket: str, prefix: str, endpoint_url: str | None, sessions: Iterable[str] | None,
         storage: Storage = ()) -> list[str]:
    from s3log.log import Log
    from s3log.store.s3 import S3Store

    wanted = arguments._session_list(sessions)
    if wanted is not None:
        return sorted(set(wanted))
    store: Any = arguments.boto3_store(bucket, _client_kwargs(endpoint_url, storage)) if storage else \
        S3Store(bucket, endpoint_url=endpoint_url)
    lister = Log(store, prefix=prefix)
    try:
        return sorted(lister.list_session_ids())
    finally:
        lister.close()
        store.client.close()


def _frame(
    func: Any, meta: pa.Schema, bucket: str, prefix: str, endpoint_url: str | None,
    sessions: Iterable[str] | None, per_partition: int, fast: bool, options: tuple[tuple[str, Any], ...],
    storage: Storage = (),
) -> Any:
    with extra("dask"):
        import dask.dataframe as dd

    arguments._positive("sessions_per_partition", per_partition)
    prefix = normalize_prefix(prefix)  # a bad prefix fails here, not in a task
    ids = _ids(bucket, prefix, endpoint_url, sessions, storage)
    chunks = [tuple(ids[i : i + per_partition]) for i in range(0, len(ids), per_partition)] or [()]
    from_map: Any = dd.from_map  # dask is untyped
    return from_map(
        func, chunks, bucket=bucket, prefix=prefix, endpoint_url=endpoint_url, fast=fast, options=options,
        storage=storage, meta=to_pandas(meta.empty_table()), enforce_metadata=False,
    )


def read_entries(
    bucket: str,
    prefix: str = DEFAULT_PREFIX,
    *,
    endpoint_url: str | None = None,
    sessions: Iterable[str] | None = None,
    sessions_per_partition: int = 256,
    fast: bool = False,
    verifier: Verifier | None = None,
    log_id: str | None = None,
    storage_options: dict[str, str] | None = None,
    **scan_options: Any,
) -> Any:
    """A dask DataFrame of every entry under ``s3://bucket/prefix`` (or of ``sessions``).

    Columns are :data:`s3log.analytics.SCHEMA`: ``ts`` is ``datetime64[ms, UTC]`` (it
    compares with strings), the others Arrow-backed (``data_cbor`` stays binary).
    ``scan_options`` (``since``, ``until``, ``kinds``, ``strict``, ``parallelism``,
    ``batch_size``) are passed to each partition's :func:`~s3log.analytics.scan`.
    ``fast`` reads with obstore. Workers use the standard AWS credential chain.

    ``verifier`` (trusted keys, as :func:`s3log.analytics.scan`'s): a session whose
    head is not validly signed by one of them is skipped with a
    :class:`~s3log.analytics.CorruptSessionWarning` (in the worker), or fails the
    compute with :class:`~s3log.signing.SignatureError` with ``strict``. It travels in
    the task graph, so it must pickle: a :class:`~s3log.signing.PublicKeyVerifier`
    (KMS keys too, by their exported public keys) or an
    :class:`~s3log.signing.AnyVerifier` of such; a
    :class:`~s3log.signing.KmsVerifier` is refused with
    :class:`~s3log.InvalidArgumentError`, as is anything else that does not pickle.
    ``log_id``: the identity heads are verified as heads of (default ``bucket/prefix``;
    a copy of a whole log names its original's, as ``LogConfig(log_id=...)``).
    ``storage_options``: the boto3 client's endpoint, region and credentials, as
    deltalake users write them (:func:`s3log.analytics.options.storage_kwargs`); they travel
    in the task graph to every worker (``endpoint_url`` wins over its endpoint).
    """
    options = _with_verifier(_plain_options(scan_options, SCAN_OPTIONS), verifier, log_id)
    return _frame(_entries_partition, columns.SCHEMA, bucket, prefix, endpoint_url, sessions,
                  sessions_per_partition, fast, options, _storage(storage_options, fast))


def read_sessions(
    bucket: str,
    prefix: str = DEFAULT_PREFIX,
    *,
    endpoint_url: str | None = None,
    sessions: Iterable[str] | None = None,
    sessions_per_partition: int = 1_000,
    fast: bool = False,
    verifier: Verifier | None = None,
    log_id: str | None = None,
    storage_options: dict[str, str] | None = None,
    **options: Any,
) -> Any:
    """A dask DataFrame of one row per session (:data:`s3log.analytics.SESSIONS_SCHEMA`).

    Heads only (one GET per session); merge it with :func:`read_entries` on ``session``
    to group entries by labels. ``options``: ``since``, ``until``, ``parallelism``.
    ``verifier``, ``log_id``: as :func:`read_entries`'s; a session whose head is not validly
    signed by a trusted key is left out (as :func:`s3log.analytics.sessions` does).
    ``storage_options``: as :func:`read_entries`'.
    """
    plain = _with_verifier(_plain_options(options, {"since", "until", "parallelism"}), verifier, log_id)
    return _frame(_sessions_partition, columns.SESSIONS_SCHEMA, bucket, prefix, endpoint_url, sessions,
                  sessions_per_partition, fast, plain, _storage(storage_options, fast))
