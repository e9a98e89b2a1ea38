"""What the boto3 and aiobotocore stores share: error mapping and request shapes."""

from __future__ import annotations

from typing import Any

from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ChecksumError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    ReadTimeoutError,
)

from s3log._protocol.ops import ListPage, ObjectInfo
from s3log.errors import StoreError, TransientStoreError
from s3log.store.base import checked_etag, error_for_status


def client_options(max_pool: int = 64, *, connect_timeout: float = 5, read_timeout: float = 30) -> dict[str, Any]:
    """botocore settings for s3log's clients (boto3 and aiobotocore), as ``Config`` arguments.

    botocore's own retries are turned off: s3log retries idempotent requests itself,
    and must see every failure of a conditional head PUT to resolve its outcome.
    ``total_max_attempts`` counts the first attempt; botocore's ``max_attempts``
    counts retries only, so ``max_attempts=1`` would still repeat a failed PUT once
    (hidden from s3log's request counts: a lost create-only PUT came back as a 412).
    """
    return {
        "retries": {"mode": "standard", "total_max_attempts": 1},
        "max_pool_connections": max_pool,
        "connect_timeout": connect_timeout,
        "read_timeout": read_timeout,
    }


def client_config(max_pool: int = 64, *, connect_timeout: float = 5, read_timeout: float = 30) -> Config:
    """The boto3 client settings of :func:`client_options`."""
    return Config(**client_options(max_pool, connect_timeout=connect_timeout, read_timeout=read_timeout))


#: botocore's data loader (the parsed JSON models: S3's, KMS's, endpoints, partitions) of
#: each kind of session and data path, shared by the sessions s3log makes. A new session
#: otherwise parses them again for its first client: about 0.1 s of CPU per store.
#: A loader holds only that data, the same for every session of its data path.
_LOADERS: dict[tuple[type, Any], Any] = {}


def share_loader(session: Any) -> Any:
    """``session`` (a new botocore or aiobotocore session) reading botocore's models through
    the loader s3log's sessions share; returns it."""
    try:
        key = (type(session), session.get_config_variable("data_path"))
    except BotoCoreError:  # a profile that does not exist: its client says so, as before
        return session
    own = session.get_component("data_loader")
    shared = _LOADERS.setdefault(key, own)
    if shared is not own:
        session.register_component("data_loader", shared)
    return session


def boto3_session(**kwargs: Any) -> Any:
    """A new ``boto3.session.Session(**kwargs)`` whose clients share botocore's parsed
    models with s3log's other sessions (:func:`share_loader`)."""
    import boto3

    session = boto3.session.Session(**kwargs)
    # After boto3's own setup, which adds its resource path to the loader it was given.
    share_loader(session._session)
    return session


def map_error(exc: BaseException, key: str) -> StoreError:
    """Translate a botocore exception into s3log's store errors, keeping code and request id."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(err.get("Code", ""))
        status = int(meta.get("HTTPStatusCode", 0) or 0)
        rid = meta.get("RequestId")
        return error_for_status(status, code, str(err.get("Message", "")), key=key, request_id=rid)
    if isinstance(
        exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError)
    ):
        return TransientStoreError(f"{type(exc).__name__}: {exc}", key=key)
    if isinstance(exc, HTTPClientError):
        return TransientStoreError(f"{type(exc).__name__}: {exc}", key=key)
    if isinstance(exc, (IncompleteReadError, FlexibleChecksumError, ChecksumError)):
        # A reply cut short or damaged on the way (fewer bytes than its Content-Length,
        # a checksum that does not match): the request may be repeated, as after a reset.
        return TransientStoreError(f"{type(exc).__name__}: {exc}", key=key)
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return TransientStoreError(f"{type(exc).__name__}: {exc}", key=key)
    return StoreError(f"{type(exc).__name__}: {exc}", key=key)


def etag_of(resp: Any, key: str, *, write: bool) -> str:
    """The ETag of a GetObject or PutObject reply (:func:`~s3log.store.base.checked_etag`)."""
    return checked_etag(resp.get("ETag") if isinstance(resp, dict) else None, key, write=write)


def list_params(
    bucket: str, prefix: str, delimiter: str | None, token: str | None, max_keys: int,
    start_after: str | None = None,
) -> dict[str, Any]:
    """Arguments of one ListObjectsV2 call."""
    params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": max_keys}
    if delimiter:
        params["Delimiter"] = delimiter
    if token:
        params["ContinuationToken"] = token
    if start_after:
        params["StartAfter"] = start_after
    return params


def list_page(resp: dict[str, Any]) -> ListPage:
    """A ListObjectsV2 response as a :class:`ListPage`."""
    objects = [
        ObjectInfo(
            o["Key"],
            int(o.get("Size", 0)),
            int(o["LastModified"].timestamp() * 1000) if o.get("LastModified") else 0,
            str(o.get("ETag", "")),
        )
        for o in resp.get("Contents", [])
    ]
    prefixes = [p["Prefix"] for p in resp.get("CommonPrefixes", [])]
    token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
    return ListPage(objects, prefixes, token)


#: Errors the stores catch and map; anything else is a bug and propagates.
CAUGHT = (ClientError, BotoCoreError, ConnectionError, TimeoutError, OSError)
