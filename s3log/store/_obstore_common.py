"""What the obstore stores share: building the Rust client and mapping its errors."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any

from s3log._extras import require
from s3log._protocol.ops import Blob, ListPage, ObjectInfo
from s3log.errors import InvalidArgumentError, ObjectNotFound, PreconditionFailed, StoreError, TransientStoreError
from s3log.store.base import checked_etag, error_for_status

#: The name suffix of an S3 Express One Zone directory bucket (``NAME--ZONE-ID--x-s3``).
DIRECTORY_BUCKET_SUFFIX = "--x-s3"


def make_client(
    bucket: str,
    endpoint_url: str | None,
    region_name: str | None,
    *,
    timeout: timedelta = timedelta(seconds=30),
    connect_timeout: timedelta = timedelta(seconds=5),
) -> Any:
    """An ``obstore.store.S3Store`` for ``bucket``, configured like boto3 would be.

    Credentials come from the standard ``AWS_*`` variables (or instance metadata);
    the endpoint from the argument, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``.
    obstore's own retries are off: s3log retries idempotent requests itself and must
    see every failure of a conditional head PUT.
    """
    rust_store = require("obstore.store", "fast").S3Store

    endpoint, region = resolved(endpoint_url, region_name)
    kwargs: dict[str, Any] = {"region": region}
    if bucket.endswith(DIRECTORY_BUCKET_SUFFIX):
        # A directory bucket (S3 Express One Zone) takes session credentials from
        # CreateSession; botocore does that by the name alone, object_store only when asked.
        kwargs["s3_express"] = True
    client_options: dict[str, Any] = {"timeout": timeout, "connect_timeout": connect_timeout}
    if endpoint:
        kwargs["endpoint"] = endpoint
        # object_store reads AWS_ENDPOINT_URL_S3 from the environment and lets it win over
        # the endpoint argument: naming it explicitly keeps the endpoint asked for.
        kwargs["config"] = {"aws_endpoint_url_s3": endpoint}
        if endpoint.startswith("http://"):
            client_options["allow_http"] = True
    for env, key in (("AWS_ACCESS_KEY_ID", "access_key_id"), ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
                     ("AWS_SESSION_TOKEN", "session_token")):
        if os.environ.get(env):
            kwargs[key] = os.environ[env]
    retry: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=30)}
    options: Any = client_options
    return rust_store(bucket, client_options=options, retry_config=retry, **kwargs)


def resolved(endpoint_url: str | None, region_name: str | None) -> tuple[str | None, str]:
    """The endpoint (None: AWS's) and region a client built for these arguments uses."""
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = region_name or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return endpoint, region


#: The process whose requests started obstore's runtime (None: none yet).
_runtime_pid: int | None = None


def runtime_started_in() -> int | None:
    """The process obstore's runtime was started in, if not this one; call before each request.

    obstore runs every request, blocking or awaited, on one Tokio runtime per process,
    started by the first request. Its threads do not survive ``fork``: in a child of a
    process that sent a request, every request (through any obstore client, even one
    built in the child) waits for ever. So the first request here records the process,
    and a process that finds another one recorded is such a child.
    """
    global _runtime_pid
    pid = os.getpid()
    if _runtime_pid is None:
        _runtime_pid = pid
    return None if _runtime_pid == pid else _runtime_pid


_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
_REQUEST_ID = re.compile(r"<RequestId>([^<]*)</RequestId>")


def map_error(exc: BaseException, key: str) -> StoreError:
    """Translate an obstore exception into s3log's store errors.

    obstore's exception class is not enough: it reports a 409 on a conditional PUT as
    "already exists" (AlreadyExistsError) and an If-Match PUT on a missing key as a
    precondition error. The HTTP status and S3 error code in its message decide,
    through the mapping every HTTP store shares (:func:`.base.error_for_status`).
    """
    if isinstance(exc, StoreError):
        return exc  # already mapped (a reply without an ETag, see :func:`etag_of`)
    ox = require("obstore.exceptions", "fast")
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    status = _STATUS.search(text)
    if status is not None:
        # obstore's own wording ("already exists") can contradict the status: keep S3's.
        code, message, rid = (m.group(1) if m else None for m in
                              (_CODE.search(text), _MESSAGE.search(text), _REQUEST_ID.search(text)))
        return error_for_status(int(status.group(1)), code or "", message or first, key=key, request_id=rid)
    # No HTTP reply to go by: the exception class is all there is.
    if isinstance(exc, (ox.NotFoundError, FileNotFoundError)):
        return ObjectNotFound(first, key=key, code="NoSuchKey", status=404)
    if isinstance(exc, (ox.AlreadyExistsError, ox.PreconditionError)):
        return PreconditionFailed(first, key=key, code="PreconditionFailed", status=412)
    if isinstance(exc, (ox.PermissionDeniedError, ox.UnauthenticatedError, ox.InvalidPathError,
                        ox.NotSupportedError, ox.UnknownConfigurationKeyError)):
        return StoreError(first, key=key)
    if isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, ox.BaseError):
        # obstore refused the arguments (a key it cannot parse): no retry changes that.
        return StoreError(first, key=key)
    # Everything else (timeouts, broken connections): the outcome is unknown.
    return TransientStoreError(first, key=key)


def blob(result: Any, data: Any, key: str) -> Blob:
    """A :class:`Blob` from an obstore get result and its bytes."""
    return Blob(bytes(data), etag_of(result.meta, key, write=False))


def etag_of(reply: Any, key: str, *, write: bool) -> str:
    """The ``e_tag`` of an obstore get result's meta or put result
    (:func:`~s3log.store.base.checked_etag`). obstore gives None when the reply had no
    ETag (it used to become the text ``"None"``, sent later as an ``If-Match``)."""
    return checked_etag(reply.get("e_tag") if hasattr(reply, "get") else None, key, write=write)


#: S3 returns at most this many entries (keys and common prefixes) per LIST request.
S3_PAGE = 1000


#: A control character (obstore refuses them in a path).
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def check_key(key: str) -> str:
    """``key``, if obstore can address exactly that key; else InvalidArgumentError.

    obstore parses keys as paths: it rewrites ``a/`` and ``/a`` to ``a`` (writing a
    different key than asked, silently) and refuses empty, ``.`` and ``..`` segments
    and control characters. s3log's own keys never have these; refuse them up front.
    """
    parts = key.split("/")
    if not key or "" in parts or "." in parts or ".." in parts or _CONTROL.search(key):
        raise InvalidArgumentError(
            "key", f"{key!r} cannot be stored exactly through obstore (empty, '.' or '..' path segment, "
            "a leading or trailing '/', or a control character)")
    return key


def check_list(
    prefix: str, delimiter: str | None, token: str | None, max_keys: int, start_after: str | None = None
) -> tuple[str | None, str | None, int]:
    """The obstore ``list`` arguments (folder, offset, chunk size) for one page under ``prefix``.

    obstore's only delimiter is ``/``; any other is refused (InvalidArgumentError).

    obstore lists a *folder*: ``list("t/a")`` lists ``t/a/...``, not ``t/ab``. S3 lists
    a string prefix. For a prefix that does not end in ``/`` list its folder from just
    before the prefix and keep only the keys that start with it (:func:`page_from_chunk`).
    The chunk is capped at one S3 page, so one call sends one request.
    """
    if delimiter not in (None, "/"):
        raise InvalidArgumentError("delimiter", f"obstore lists with '/' only, not {delimiter!r}")
    folder = prefix[: prefix.rfind("/") + 1]
    offset = token
    if offset is None and folder != prefix:
        # Every key starting with the prefix sorts after the prefix minus its last character.
        offset = prefix[:-1].rstrip("/") or None
    if start_after is not None and (offset is None or start_after > offset):
        offset = start_after  # obstore's offset is S3's StartAfter: keys strictly after it
    return folder or None, offset, max(1, min(max_keys, S3_PAGE))


def rolled_up(delimiter: str | None, token: str | None, start_after: str | None) -> bool:
    """Whether a delimited page must be built from a plain listing (:func:`page_rolled_up`).

    obstore's delimited listing has no offset and returns the whole folder, however
    big; a listing that starts after a key (or resumes from a token of such a
    listing) lists keys from that offset instead, one S3 page per call.
    """
    return delimiter is not None and (token is not None or start_after is not None)


def page_rolled_up(chunk: Any, prefix: str, chunk_size: int, token: str | None) -> ListPage:
    """A delimited :class:`ListPage` rolled up from one chunk of a plain listing.

    The token is the chunk's last key; the common prefix holding the token was
    returned by the page before, so it is not repeated.
    """
    done = None if token is None else _common(token, prefix)
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    for meta in chunk:
        key = str(meta["path"])
        if not key.startswith(prefix):
            if key > prefix:
                return ListPage(objects, prefixes, None)  # past every key with the prefix
            continue
        common = _common(key, prefix)
        if common is None:
            objects.append(_info(meta))
        elif common != done and (not prefixes or prefixes[-1] != common):
            prefixes.append(common)
    next_token = str(chunk[-1]["path"]) if len(chunk) >= chunk_size else None
    return ListPage(objects, prefixes, next_token)


def _common(key: str, prefix: str) -> str | None:
    cut = key.find("/", len(prefix))
    return key[: cut + 1] if cut >= 0 else None


def page_from_chunk(chunk: Any, prefix: str, chunk_size: int) -> ListPage:
    """A :class:`ListPage` from one chunk of ``list``; the token is the chunk's last key.

    A full chunk may be followed by more keys, so it carries a token; a page can then
    hold fewer than ``max_keys`` keys (or none) and still not be the last.
    """
    objects: list[ObjectInfo] = []
    for meta in chunk:
        info = _info(meta)
        if info.key.startswith(prefix):
            objects.append(info)
        elif info.key > prefix:
            return ListPage(objects, [], None)  # past every key with the prefix
    token = str(chunk[-1]["path"]) if len(chunk) >= chunk_size else None
    return ListPage(objects, [], token)


def page_from_delimited(result: Any, prefix: str) -> tuple[ListPage, int]:
    """A :class:`ListPage` from ``list_with_delimiter`` of ``prefix``'s folder, and the
    number of S3 requests it took.

    obstore returns a delimited listing whole (it pages internally, 1,000 entries per
    request), so the page holds everything and its token is None.
    """
    objects = [_info(o) for o in result["objects"]]
    prefixes = [p if p.endswith("/") else p + "/" for p in result["common_prefixes"]]
    requests = max(1, -(-(len(objects) + len(prefixes)) // S3_PAGE))
    return ListPage([o for o in objects if o.key.startswith(prefix)],
                    [p for p in prefixes if p.startswith(prefix)], None), requests


def _info(meta: Any) -> ObjectInfo:
    modified = meta.get("last_modified")
    return ObjectInfo(
        str(meta["path"]), int(meta.get("size", 0)),
        int(modified.timestamp() * 1000) if modified is not None else 0, str(meta.get("e_tag") or ""),
    )
