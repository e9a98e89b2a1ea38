"""Stores over obstore (Python bindings of Rust's ``object_store``): the fast path.

Same interface, errors and request counting as the boto3 stores; conditional writes
use obstore's ``mode="create"`` (If-None-Match: *) and ``mode={"e_tag": ...}`` (If-Match).
obstore 0.12 has no conditional DELETE: ``delete_if_match`` raises
:class:`~s3log.errors.ConditionalDeleteUnsupported` and sends nothing.
Needs the ``fast`` extra (``pip install "s3log[fast]"``).

obstore cannot send from a process forked after it sent requests (its Rust runtime's
threads stay in the parent): there a store that built its own client sends through
boto3 instead, with the same bucket, endpoint, region, errors and counting; one given
a client raises :class:`~s3log.errors.StoreForkedError` (docs/stores.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from s3log._protocol.ops import Blob, ListPage
from s3log.errors import ConditionalDeleteUnsupported, StoreError
from s3log.store import _obstore_common as common
from s3log.store._checks import check_bucket, check_endpoint, check_region
from s3log.store.base import RequestCounter, forked_error, precondition_scope

if TYPE_CHECKING:
    from s3log.store.s3 import S3Store

log = logging.getLogger("s3log")


class _ObstoreBase:
    """The client and request counter both obstore stores hold."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = check_bucket(bucket)
        check_endpoint(endpoint_url)
        check_region(region_name)
        #: What the precondition probe's result is remembered for (None: this object).
        self.precondition_scope = (precondition_scope("obstore", bucket, endpoint_url, region_name)
                                   if client is None else None)
        self.client = client if client is not None else common.make_client(bucket, endpoint_url, region_name)
        self.requests = RequestCounter()
        #: The endpoint and region the client was built for (None: a client passed in).
        self._resolved = common.resolved(endpoint_url, region_name) if client is None else None
        self._boto: S3Store | None = None

    def _stand_in(self) -> S3Store | None:
        """None while obstore can send from this process; in a process forked after
        obstore sent requests, the boto3 store that sends this store's requests instead
        (same bucket, endpoint and region, counted in :attr:`requests`). A client passed
        in cannot be matched: StoreForkedError, before anything is sent."""
        started_in = common.runtime_started_in()
        if started_in is None:
            return None
        if self._boto is None:
            if self._resolved is None:
                raise forked_error(f"obstore (the client given to {self!r})", started_in)
            from s3log.store.s3 import S3Store

            endpoint, region = self._resolved
            store = S3Store(self.bucket, endpoint_url=endpoint, region_name=region)
            store.requests = self.requests
            self._boto = store
            log.warning("%r sends through boto3 in process %d: obstore's runtime, started in process %d "
                        "before it forked this one, did not survive the fork", self, os.getpid(), started_in)
        return self._boto

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r})"

    def _error(self, exc: BaseException, key: str, *, write: bool = True) -> StoreError:
        """The s3log error for an obstore exception (a subclass maps its service's replies);
        ``write``: whether the request was a PUT or DELETE (a reply it lost may have applied)."""
        return common.map_error(exc, key)

    def _no_conditional_delete(self, key: str) -> ConditionalDeleteUnsupported:
        # Refused rather than sent unconditionally: a DELETE by key could remove an object
        # that replaced the one meant (a new session that took an expired id over); the
        # caller decides whether a plain DELETE is acceptable (delete_session falls back).
        common.check_key(key)
        return ConditionalDeleteUnsupported(
            "obstore cannot send a DELETE with If-Match", key=key, code="NotImplemented")


class ObstoreStore(_ObstoreBase):
    """S3 (or any S3-compatible store) through obstore, blocking."""

    def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            return boto.get(key)
        self.requests.add("GET")
        try:
            result = obstore.get(self.client, key)
            return common.blob(result, result.bytes(), key)
        except Exception as exc:
            raise self._error(exc, key, write=False) from exc

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists; return its ETag."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            return boto.put_if_absent(key, body)
        self.requests.add("PUT")
        try:
            return common.etag_of(obstore.put(self.client, key, body, mode="create"), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; return the new ETag."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            return boto.put_if_match(key, body, etag)
        self.requests.add("PUT")
        try:
            return common.etag_of(obstore.put(self.client, key, body, mode={"e_tag": etag}), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order (after ``start_after`` if given)."""
        import obstore

        folder, offset, chunk = common.check_list(prefix, delimiter, token, max_keys, start_after)
        if (boto := self._stand_in()) is not None:
            return boto.list(prefix, delimiter=delimiter, token=token, max_keys=max_keys, start_after=start_after)
        self.requests.add("LIST")
        try:
            if common.rolled_up(delimiter, token, start_after):
                rolled = obstore.list(self.client, folder, offset=offset, chunk_size=chunk)
                return common.page_rolled_up(next(iter(rolled), []), prefix, chunk, token)
            if delimiter:
                page, requests = common.page_from_delimited(obstore.list_with_delimiter(self.client, folder), prefix)
                # obstore paged through the whole listing: count every request it sent.
                self.requests.add("LIST", requests - 1)
                return page
            stream = obstore.list(self.client, folder, offset=offset, chunk_size=chunk)
            return common.page_from_chunk(next(iter(stream), []), prefix, chunk)
        except Exception as exc:
            raise self._error(exc, prefix) from exc

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            boto.delete(key)
            return
        self.requests.add("DELETE")
        try:
            obstore.delete(self.client, key)
        except Exception as exc:
            raise self._error(exc, key) from exc

    def delete_if_match(self, key: str, etag: str) -> None:
        """Not possible through obstore: ConditionalDeleteUnsupported, nothing sent or counted."""
        raise self._no_conditional_delete(key)


class AsyncObstoreStore(_ObstoreBase):
    """S3 (or any S3-compatible store) through obstore, awaited."""

    async def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            return await asyncio.to_thread(boto.get, key)
        self.requests.add("GET")
        try:
            result = await obstore.get_async(self.client, key)
            return common.blob(result, await result.bytes_async(), key)
        except Exception as exc:
            raise self._error(exc, key, write=False) from exc

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists; return its ETag."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            return await asyncio.to_thread(boto.put_if_absent, key, body)
        self.requests.add("PUT")
        try:
            return common.etag_of(await obstore.put_async(self.client, key, body, mode="create"), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; return the new ETag."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            return await asyncio.to_thread(boto.put_if_match, key, body, etag)
        self.requests.add("PUT")
        try:
            return common.etag_of(await obstore.put_async(self.client, key, body, mode={"e_tag": etag}), key,
                                  write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order (after ``start_after`` if given)."""
        import obstore

        folder, offset, chunk = common.check_list(prefix, delimiter, token, max_keys, start_after)
        if (boto := self._stand_in()) is not None:
            return await asyncio.to_thread(boto.list, prefix, delimiter=delimiter, token=token, max_keys=max_keys,
                                           start_after=start_after)
        self.requests.add("LIST")
        try:
            if common.rolled_up(delimiter, token, start_after):
                rolled: Any = await anext(aiter(obstore.list(self.client, folder, offset=offset, chunk_size=chunk)), [])
                return common.page_rolled_up(rolled, prefix, chunk, token)
            if delimiter:
                result = await obstore.list_with_delimiter_async(self.client, folder)
                page, requests = common.page_from_delimited(result, prefix)
                self.requests.add("LIST", requests - 1)
                return page
            stream = obstore.list(self.client, folder, offset=offset, chunk_size=chunk)
            found: Any = await anext(aiter(stream), [])
            return common.page_from_chunk(found, prefix, chunk)
        except Exception as exc:
            raise self._error(exc, prefix) from exc

    async def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        import obstore

        common.check_key(key)
        if (boto := self._stand_in()) is not None:
            await asyncio.to_thread(boto.delete, key)
            return
        self.requests.add("DELETE")
        try:
            await obstore.delete_async(self.client, key)
        except Exception as exc:
            raise self._error(exc, key) from exc

    async def delete_if_match(self, key: str, etag: str) -> None:
        """Not possible through obstore: ConditionalDeleteUnsupported, nothing sent or counted."""
        raise self._no_conditional_delete(key)
