"""The store over aiobotocore (asyncio).

The ``async`` extra depends on aiobotocore, not aioboto3: aioboto3 pins one exact
aiobotocore (which pins a narrow botocore range), so beside an application's own boto3
pin it often cannot be installed at all. aiobotocore alone takes a range, and an S3
client is all this store needs. A caller who uses aioboto3 still passes its session
(``session=aioboto3.Session(...)``) or a client it opened (``client=``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from s3log._extras import extra
from s3log._loops import PerLoop
from s3log._protocol.ops import Blob, ListPage
from s3log.errors import StoreError, TransientStoreError
from s3log.store._checks import check_bucket, check_endpoint, check_region
from s3log.store._s3common import (
    CAUGHT,
    client_options,
    etag_of,
    list_page,
    list_params,
    map_error,
    share_loader,
)
from s3log.store.base import ProcessClient, RequestCounter, precondition_scope

if TYPE_CHECKING:
    from s3log.store.obstore import AsyncObstoreStore


@functools.cache
def _lib() -> SimpleNamespace:
    """aiobotocore and aiohttp, imported on first use: ``AsyncS3Store.fast`` (the ``fast``
    extra) and a store given a client need neither at import; a store that opens its own
    client names the ``async`` extra when they are missing."""
    with extra("async"):
        import aiohttp
        from aiobotocore.config import AioConfig
        from aiobotocore.httpsession import AIOHTTPSession
        from aiobotocore.session import get_session

    class NoResendSession(AIOHTTPSession):
        """aiobotocore's HTTP session, minus aiohttp's silent resend.

        aiohttp sends a PUT or DELETE again, once, when a reused connection drops before
        the reply: the HTTP idempotency rule, false for a conditional PUT. A create-only
        PUT that landed then came back as a 412, and no failure of a head PUT may go unseen.
        """

        async def _get_session(self, proxy_url: Any) -> Any:
            session = await super()._get_session(proxy_url)
            session._retry_connection = False
            return session

    # What the store catches: botocore's errors, and aiohttp's own where aiobotocore
    # lets them through (a body cut short by a reset: ``ClientPayloadError``).
    return SimpleNamespace(aiohttp=aiohttp, AioConfig=AioConfig, NoResendSession=NoResendSession,
                           get_session=get_session, caught=(*CAUGHT, aiohttp.ClientError))


def _caught() -> tuple[type[BaseException], ...]:
    caught: tuple[type[BaseException], ...] = _lib().caught
    return caught


def _map_error(exc: BaseException, key: str) -> StoreError:
    aiohttp = _lib().aiohttp
    if isinstance(exc, aiohttp.ClientError) and not isinstance(exc, CAUGHT):
        if isinstance(exc, ValueError):  # InvalidURL: no retry changes that
            return StoreError(f"{type(exc).__name__}: {exc}", key=key)
        # No reply, or one cut short: the outcome of the request is unknown.
        return TransientStoreError(f"{type(exc).__name__}: {exc}", key=key)
    return map_error(exc, key)


def client_config(max_pool: int = 64, *, connect_timeout: float = 5, read_timeout: float = 30) -> Any:
    """The aiobotocore client settings: those of the boto3 client, and no resend by aiohttp."""
    lib = _lib()
    return lib.AioConfig(http_session_cls=lib.NoResendSession,
                         **client_options(max_pool, connect_timeout=connect_timeout, read_timeout=read_timeout))


def open_client(session: Any, **kwargs: Any) -> Any:
    """The async context manager that opens an S3 client of ``session``.

    ``session``: an aiobotocore ``AioSession`` (``create_client``), an
    ``aioboto3.Session`` (``client``), or None for a new aiobotocore session, which
    reads the environment and the AWS config files as boto3 does.
    """
    if session is None:
        session = share_loader(_lib().get_session())
    if hasattr(session, "create_client"):
        return session.create_client("s3", **kwargs)
    return session.client("s3", **kwargs)


#: What stores opened in a parent process, kept in a forked child so that collecting
#: it does not close the parent's connections or touch its loops.
_INHERITED: list[object] = []


class _LoopClient:
    """The client an :class:`AsyncS3Store` opened on one event loop, and the lock that opens it."""

    __slots__ = ("client", "lock", "stack")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.client: Any = None
        self.stack: contextlib.AsyncExitStack | None = None


class AsyncS3Store:
    """Amazon S3 (or any S3-compatible store) through aiobotocore.

    ``session`` (optional): the aiobotocore ``AioSession`` or ``aioboto3.Session`` the
    store opens its clients from (credentials, profile, region); ``client``: one client
    the caller opened and closes (either library's). Neither: a new aiobotocore session
    reading the environment, as boto3 does.

    The client is opened on first use and kept until :meth:`aclose` (or the end of an
    ``async with`` block), so a worker pays the connection set-up once.
    """

    def __init__(
        self,
        bucket: str,
        *,
        client: Any = None,
        session: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        max_pool_connections: int = 64,
    ) -> None:
        self.bucket = check_bucket(bucket)
        check_endpoint(endpoint_url)
        check_region(region_name)
        if client is None:
            _lib()  # MissingExtraError now, naming the async extra, not at the first request
        self.requests = RequestCounter()
        #: What the precondition probe's result is remembered for (None: this object).
        # A session or client of the caller's may be configured in any way: probed on its own.
        self.precondition_scope = (precondition_scope("aiobotocore", bucket, endpoint_url, region_name)
                                   if client is None and session is None else None)
        #: A client passed in (its owner's to manage), else None: the store opens one per loop.
        self._client = client
        self._session = session
        self._given = ProcessClient(client, None, f"the client passed to {self!r}")
        self._endpoint_url = endpoint_url
        self._region_name = region_name
        self._max_pool = max_pool_connections
        #: The client this store opened on each event loop (aiohttp's session and
        #: connections are one loop's). Loops running at once, in threads, keep one each:
        #: a single slot was taken over by each loop in turn, opening a client per switch
        #: and leaving the other loop's open; a loop's is dropped once it is closed.
        self._loops: PerLoop[_LoopClient] = PerLoop(_LoopClient)
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"AsyncS3Store(bucket={self.bucket!r})"

    @staticmethod
    def fast(bucket: str, **kwargs: Any) -> AsyncObstoreStore:
        """The same store over obstore (Rust ``object_store``): lower latency per request."""
        from s3log.store.obstore import AsyncObstoreStore

        return AsyncObstoreStore(bucket, **kwargs)

    async def _c(self) -> Any:
        if self._client is not None:
            return self._given.get()  # one passed in: its owner's to manage
        if self._pid != os.getpid():
            # A forked child: the clients opened so far hold the parent's connections, on
            # its loops. They are left as they are (closing them here would run the parent's
            # loops); the child opens its own.
            _INHERITED.append(self._loops)
            self._loops, self._pid = PerLoop(_LoopClient), os.getpid()
        # A store outlives an event loop as a log does (``asyncio.run`` per request): a
        # client opened on another loop cannot send on this one (every request failed,
        # "Event loop is closed"), so each loop opens its own.
        slot = self._loops.get()
        if slot.client is None:
            async with slot.lock:
                if slot.client is None:
                    kwargs: dict[str, Any] = {"config": client_config(self._max_pool)}
                    if self._endpoint_url:
                        kwargs["endpoint_url"] = self._endpoint_url
                    if self._region_name:
                        kwargs["region_name"] = self._region_name
                    stack = contextlib.AsyncExitStack()
                    client = await stack.enter_async_context(open_client(self._session, **kwargs))
                    slot.client, slot.stack = client, stack
        return slot.client

    async def aclose(self) -> None:
        """Close the client this store opened on the running loop (a client passed in is
        left open). One opened on another loop that is still running is that loop's to
        close (``aclose`` there); one of a closed loop went with it."""
        slot = self._loops.pop()
        if slot is not None and slot.stack is not None:
            stack, slot.stack, slot.client = slot.stack, None, None
            await stack.aclose()

    async def __aenter__(self) -> AsyncS3Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        client = await self._c()
        self.requests.add("GET")
        try:
            resp = await client.get_object(Bucket=self.bucket, Key=key)
            # Read through aiobotocore's body, not the aiohttp response ``async with``
            # yields: only its read checks the length against Content-Length and the
            # checksum S3 sent, so a body cut short is not taken for the object.
            stream = resp["Body"]
            async with stream:
                body = await stream.read()
        except _caught() as exc:
            raise _map_error(exc, key) from exc
        return Blob(body, etag_of(resp, key, write=False))

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists (``If-None-Match: *``); return its ETag."""
        client = await self._c()
        self.requests.add("PUT")
        try:
            resp = await client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
        except _caught() as exc:
            raise _map_error(exc, key) from exc
        return etag_of(resp, key, write=True)

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag`` (``If-Match``); return the new ETag."""
        client = await self._c()
        self.requests.add("PUT")
        try:
            resp = await client.put_object(Bucket=self.bucket, Key=key, Body=body, IfMatch=etag)
        except _caught() as exc:
            raise _map_error(exc, key) from exc
        return etag_of(resp, key, write=True)

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order, after ``start_after`` (ListObjectsV2)."""
        client = await self._c()
        self.requests.add("LIST")
        try:
            params = list_params(self.bucket, prefix, delimiter, token, max_keys, start_after)
            resp = await client.list_objects_v2(**params)
        except _caught() as exc:
            raise _map_error(exc, prefix) from exc
        return list_page(resp)

    async def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        client = await self._c()
        self.requests.add("DELETE")
        try:
            await client.delete_object(Bucket=self.bucket, Key=key)
        except _caught() as exc:
            raise _map_error(exc, key) from exc

    async def delete_if_match(self, key: str, etag: str) -> None:
        """Delete the object if its ETag is ``etag`` (DeleteObject with ``If-Match``):
        PreconditionFailed if it differs, ObjectNotFound if the key is missing."""
        client = await self._c()
        self.requests.add("DELETE")
        try:
            await client.delete_object(Bucket=self.bucket, Key=key, IfMatch=etag)
        except _caught() as exc:
            raise _map_error(exc, key) from exc
