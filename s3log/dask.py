"""Scaling a scan out: a Dask DataFrame of entries, partitioned by session ranges.

The client lists session ids once; each partition is a slice of them that a Dask
worker reads itself, straight from S3, with :func:`s3log.analytics.scan`. Workers open
their own store from ``bucket``/``prefix``/``endpoint_url`` (and the standard AWS
credential chain), so nothing but the ids travels from the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import analytics
from ._extras import extra

with extra("dask"):
    import pandas as pd


def _partition(
    ids: Sequence[str], bucket: str, prefix: str, endpoint_url: str | None, fast: bool, options: dict[str, Any]
) -> pd.DataFrame:
    from .store.s3 import S3Store

    store: Any = S3Store.fast(bucket, prefix, endpoint_url=endpoint_url) if fast else \
        S3Store(bucket, prefix, endpoint_url=endpoint_url)
    return analytics.to_arrow(store, list(ids), **options).to_pandas(types_mapper=pd.ArrowDtype)


def _meta() -> pd.DataFrame:
    # Arrow-backed dtypes: CBOR bytes stay binary (dask would cast object columns to text).
    return analytics.SCHEMA.empty_table().to_pandas(types_mapper=pd.ArrowDtype)


def read_entries(
    bucket: str,
    prefix: str = "s3log",
    *,
    endpoint_url: str | None = None,
    sessions: Sequence[str] | None = None,
    sessions_per_partition: int = 256,
    fast: bool = False,
    **scan_options: Any,
) -> Any:
    """A dask DataFrame of every entry under ``s3://bucket/prefix`` (or of ``sessions``).

    ``scan_options`` (``since``, ``until``, ``kinds``, ``strict``, ``parallelism``) are
    passed to each partition's :func:`~s3log.analytics.scan`. ``fast`` reads with obstore.
    """
    with extra("dask"):
        import dask.dataframe as dd

    from .log import Log
    from .store.s3 import S3Store

    if sessions is None:
        lister = Log(S3Store(bucket, prefix, endpoint_url=endpoint_url))
        try:
            sessions = lister.list_session_ids()
        finally:
            lister.close()
    ids = sorted(sessions)
    chunks = [ids[i : i + sessions_per_partition] for i in range(0, len(ids), sessions_per_partition)] or [[]]
    from_map: Any = dd.from_map  # dask is untyped
    return from_map(
        _partition, chunks, bucket=bucket, prefix=prefix, endpoint_url=endpoint_url, fast=fast,
        options=scan_options, meta=_meta(), enforce_metadata=False,
    )
