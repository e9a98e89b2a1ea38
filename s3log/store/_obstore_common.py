"""What the obstore stores share: building the Rust client and mapping its errors."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from .._extras import require
from ..errors import (
    ConditionalRequestConflict,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    TransientStoreError,
)
from ..ops import Blob, ListPage, ObjectInfo


def make_client(bucket: str, endpoint_url: str | None, region_name: str | None) -> Any:
    """An ``obstore.store.S3Store`` for ``bucket``, configured like boto3 would be.

    Credentials come from the standard ``AWS_*`` variables (or instance metadata);
    the endpoint from the argument, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``.
    obstore's own retries are off: s3log retries idempotent requests itself and must
    see every failure of a conditional head PUT.
    """
    rust_store = require("obstore.store", "fast").S3Store

    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = region_name or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    kwargs: dict[str, Any] = {"region": region}
    client_options: dict[str, Any] = {"timeout": timedelta(seconds=30), "connect_timeout": timedelta(seconds=5)}
    if endpoint:
        kwargs["endpoint"] = endpoint
        if endpoint.startswith("http://"):
            client_options["allow_http"] = True
    for env, key in (("AWS_ACCESS_KEY_ID", "access_key_id"), ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
                     ("AWS_SESSION_TOKEN", "session_token")):
        if os.environ.get(env):
            kwargs[key] = os.environ[env]
    retry: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=30)}
    options: Any = client_options
    return rust_store(bucket, client_options=options, retry_config=retry, **kwargs)


def map_error(exc: BaseException, key: str) -> StoreError:
    """Translate an obstore exception into s3log's store errors."""
    ox = require("obstore.exceptions", "fast")

    text = str(exc)
    if isinstance(exc, (ox.NotFoundError, FileNotFoundError)):
        return ObjectNotFound("no such key", key=key, code="NoSuchKey", status=404)
    if isinstance(exc, (ox.AlreadyExistsError, ox.PreconditionError)):
        # obstore reports If-Match on a missing key as a precondition error with a 404.
        if "404 Not Found" in text:
            return ObjectNotFound("no such key", key=key, code="NoSuchKey", status=404)
        return PreconditionFailed("precondition failed", key=key, code="PreconditionFailed", status=412)
    if "409 Conflict" in text or "ConditionalRequestConflict" in text:
        return ConditionalRequestConflict("conditional request conflict", key=key,
                                          code="ConditionalRequestConflict", status=409)
    if isinstance(exc, (ox.PermissionDeniedError, ox.UnauthenticatedError, ox.InvalidPathError,
                        ox.NotSupportedError, ox.UnknownConfigurationKeyError)):
        return StoreError(text.splitlines()[0], key=key)
    # Everything else (5xx, throttling, timeouts, broken connections): outcome unknown.
    return TransientStoreError(text.splitlines()[0] if text else type(exc).__name__, key=key)


def blob(result: Any, data: Any) -> Blob:
    """A :class:`Blob` from an obstore get result and its bytes."""
    return Blob(bytes(data), str(result.meta["e_tag"]))


def page_from_delimited(result: Any) -> ListPage:
    """A :class:`ListPage` from ``list_with_delimiter`` (obstore returns it whole)."""
    return ListPage(
        [_info(o) for o in result["objects"]],
        [p if p.endswith("/") else p + "/" for p in result["common_prefixes"]],
        None,
    )


def page_from_chunk(chunk: Any, max_keys: int) -> ListPage:
    """A :class:`ListPage` from one chunk of ``list``; the token is the last key."""
    objects = [_info(o) for o in chunk]
    token = objects[-1].key if len(objects) >= max_keys else None
    return ListPage(objects, [], token)


def _info(meta: Any) -> ObjectInfo:
    modified = meta.get("last_modified")
    return ObjectInfo(
        str(meta["path"]), int(meta.get("size", 0)),
        int(modified.timestamp() * 1000) if modified is not None else 0, str(meta.get("e_tag") or ""),
    )
