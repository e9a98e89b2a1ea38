"""The object store interface s3log needs, and request counting.

Six operations: get, put-if-absent, put-if-match, list, delete, delete-if-match.
Stores raise the :mod:`s3log.errors` store errors (ObjectNotFound, PreconditionFailed,
ConditionalRequestConflict, TransientStoreError, and ConditionalDeleteUnsupported from
a store that cannot make a DELETE conditional) and nothing else for store failures.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from s3log._protocol.ops import Blob, ListPage
from s3log.errors import (
    ConditionalRequestConflict,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    StoreForkedError,
    TransientStoreError,
)

C = TypeVar("C")

#: The request kinds counted by every store.
REQUEST_KINDS = ("GET", "PUT", "LIST", "DELETE")

#: Error codes S3 (and compatible stores) use for throttling and server trouble,
#: whatever the HTTP status that carries them: the outcome of a write is unknown.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling",
        "ThrottlingException", "RequestTimeTooSkewed", "503", "500",
    }
)

#: 404 codes that mean the bucket, not the key, is missing: a configuration error no
#: retry fixes. Reporting it as ObjectNotFound would make a wrong bucket name look
#: like a missing session (or, on a head PUT, like a session deleted under the writer).
MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})


def error_for_status(
    status: int, code: str, message: str, *, key: str, request_id: str | None = None
) -> StoreError:
    """The s3log store error for an HTTP error reply (``status`` 0 when unknown, S3 ``code``).

    The one mapping every HTTP store uses (see docs/stores.md):

    ======================================  ==============================
    412, or code PreconditionFailed         PreconditionFailed
    404 with code NoSuchBucket              StoreError (fatal)
    404, or code NoSuchKey / NotFound       ObjectNotFound
    409, whatever the code                  ConditionalRequestConflict
    5xx, 429, or a throttling/server code   TransientStoreError
    anything else (403, 400...)             StoreError (fatal)
    ======================================  ==============================

    A 409 on an object request means S3 refused it because of a concurrent request
    (ConditionalRequestConflict, OperationAborted): nothing was written, whatever the code.
    """
    cls: type[StoreError]
    if status == 412 or code == "PreconditionFailed":
        cls = PreconditionFailed
    elif code in MISSING_BUCKET_CODES:
        cls = StoreError
    elif status == 404 or code in ("NoSuchKey", "404", "NotFound"):
        cls = ObjectNotFound
    elif status == 409 or code == "ConditionalRequestConflict":
        cls = ConditionalRequestConflict
    elif status >= 500 or status == 429 or code in TRANSIENT_CODES:
        cls = TransientStoreError
    else:
        cls = StoreError
    return cls(message or code or f"HTTP {status}", key=key, code=code or None, status=status or None,
               request_id=request_id)


def precondition_scope(kind: str, bucket: str, endpoint_url: str | None, region_name: str | None
                       ) -> tuple[str, ...]:
    """What the precondition probe's answer holds for, for a store that builds its own
    client: the client library, the bucket, and the endpoint and region it resolves
    (from the arguments or, as the clients do, the environment, read now).

    Whether conditional writes are honoured is a property of that endpoint and bucket,
    not of one store object: a serverless handler that opens a store per invocation
    would otherwise pay the probe's PUTs (two or three) on every commit of a warm
    worker (docs/decisions/0012). A store given a client of the caller's makes no
    scope: that client may be configured in any way, so it is probed on its own.
    """
    env = os.environ.get
    endpoint = endpoint_url or env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL") or ""
    region = region_name or env("AWS_REGION") or env("AWS_DEFAULT_REGION") or ""
    # boto3 and aiobotocore also take the endpoint and region from the profile in the AWS
    # config file (``endpoint_url``, ``region``): the profile and the file are part of
    # what the answer holds for (a store of the same bucket name on another endpoint,
    # chosen by profile, escaped the probe).
    profile = (env("AWS_PROFILE") or env("AWS_DEFAULT_PROFILE") or "", env("AWS_CONFIG_FILE") or "",
               env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") or "", env("AWS_SHARED_CREDENTIALS_FILE") or "")
    return (kind, bucket, endpoint, region, *profile)


def resolved_scope(kind: str, bucket: str, client: Any) -> tuple[str, ...] | None:
    """The ``precondition_scope`` of a store whose botocore client is built: the endpoint
    and region that client resolved (from its arguments, the environment or the config
    file), or None (probed on its own) if it does not say."""
    meta = getattr(client, "meta", None)
    endpoint, region = getattr(meta, "endpoint_url", None), getattr(meta, "region_name", None)
    if not isinstance(endpoint, str) or not endpoint:
        return None
    return (kind, bucket, endpoint, region if isinstance(region, str) else "")


def checked_etag(etag: object, key: str, *, write: bool) -> str:
    """``etag`` (the ETag a reply carried, or None), if it is one.

    A reply without one is not something s3log can build on (every head is replaced
    with ``If-Match`` on the ETag read): after a write, whose request was applied, it is
    an unknown outcome (TransientStoreError: the protocol reads the head to settle it);
    after a read, a store that sends no ETag cannot be used (StoreError).
    """
    if isinstance(etag, str) and etag:
        return etag
    if write:
        raise TransientStoreError("the write's reply carried no ETag: it may have been applied",
                                  key=key, code="MissingETag")
    raise StoreError("the reply carried no ETag: the object cannot be replaced conditionally",
                     key=key, code="MissingETag")


class RequestCounter:
    """Counts requests by kind (GET / PUT / LIST / DELETE), thread-safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        """Count ``n`` requests of ``kind``."""
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> dict[str, int]:
        """The counts so far, every kind present."""
        with self._lock:
            return {k: self._counts.get(k, 0) for k in REQUEST_KINDS}

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self._counts.clear()

    def __getitem__(self, kind: str) -> int:
        with self._lock:
            return self._counts.get(kind, 0)

    @property
    def total(self) -> int:
        """All requests counted."""
        with self._lock:
            return sum(self._counts.values())

    def __repr__(self) -> str:
        return f"RequestCounter({self.snapshot()})"


class ProcessClient(Generic[C]):
    """A store's client, for the process that sends through it.

    A client does not survive ``fork``: urllib3's pooled connections would be shared by
    parent and child (each could read the other's reply on one socket) and aiohttp's
    belong to the parent's event loop. :meth:`get`, asked before every request, notices
    a fork by the process id: a client the store built (``build``) is built again in the
    child; one passed in cannot be, so it is refused with StoreForkedError if it sent
    anything before the fork (one that never sent has no connection to share).
    """

    def __init__(self, client: C, build: Callable[[], C] | None, what: str) -> None:
        self._client = client
        self._build = build
        self._what = what
        self._pid = os.getpid()
        self._sent = False

    def get(self, *, send: bool = True) -> C:
        """The client to send the next request with, in this process (``send=False``: the
        client to inspect, a passed-in one even in a forked child)."""
        pid = os.getpid()
        if pid != self._pid:
            if self._build is not None:
                self._client = self._build()
            elif not send:
                return self._client
            elif self._sent:
                raise forked_error(self._what, self._pid)
            self._pid, self._sent = pid, False
        self._sent = self._sent or send
        return self._client


def forked_error(what: str, used_in: int) -> StoreForkedError:
    """The error of a request refused (nothing sent) because ``what``, used in process
    ``used_in``, cannot send from this process, forked from it."""
    return StoreForkedError(
        f"{what} sent requests in process {used_in} before it forked this process ({os.getpid()}) and cannot "
        "be rebuilt here: build the store after the fork, or start processes with 'spawn' or 'forkserver'",
        code="ForkedProcess")


@runtime_checkable
class ObjectStore(Protocol):
    """A blocking object store."""

    requests: RequestCounter

    def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        ...

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists; return its ETag."""
        ...

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; return the new ETag."""
        ...

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order (after ``start_after`` if given)."""
        ...

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        ...

    def delete_if_match(self, key: str, etag: str) -> None:
        """Delete the object if its ETag is ``etag`` (``If-Match``).

        PreconditionFailed if the ETag differs, ObjectNotFound if the key is missing
        (as for :meth:`put_if_match`); ConditionalDeleteUnsupported, with nothing sent,
        from a store that cannot do it (a store without the method is taken to be one).
        """
        ...


@runtime_checkable
class AsyncObjectStore(Protocol):
    """The same interface, awaited."""

    requests: RequestCounter

    async def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        ...

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists; return its ETag."""
        ...

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; return the new ETag."""
        ...

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order (after ``start_after`` if given)."""
        ...

    async def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        ...

    async def delete_if_match(self, key: str, etag: str) -> None:
        """Delete the object if its ETag is ``etag`` (see :meth:`ObjectStore.delete_if_match`)."""
        ...
