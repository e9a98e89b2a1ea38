"""An in-memory store with the same conditional-write semantics as S3."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence

from s3log._protocol.ops import Blob, ListPage, ObjectInfo
from s3log.errors import ObjectNotFound, PreconditionFailed
from s3log.store.base import RequestCounter


def _etag(body: bytes) -> str:
    # S3's ETag of a single-part upload is the quoted MD5 of the body.
    return '"' + hashlib.md5(body, usedforsecurity=False).hexdigest() + '"'


class MemoryStore:
    """A dict of objects behind one lock: every conditional PUT is a true compare-and-swap."""

    #: Known to honour conditional writes: the precondition probe is skipped.
    honours_preconditions = True

    def __init__(self, bucket: str = "memory") -> None:
        #: A name, as an S3 store's bucket: the default identity of a signed log in it
        #: is ``<bucket>/<prefix>`` (:func:`s3log.signing.default_log_id`).
        self.bucket = bucket
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, str, int]] = {}
        self.requests = RequestCounter()

    def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        self.requests.add("GET")
        with self._lock:
            found = self._objects.get(key)
        if found is None:
            raise ObjectNotFound("no such key", key=key, code="NoSuchKey", status=404)
        return Blob(found[0], found[1])

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists; return its ETag."""
        self.requests.add("PUT")
        etag = _etag(body)
        with self._lock:
            if key in self._objects:
                raise PreconditionFailed("object exists", key=key, code="PreconditionFailed", status=412)
            self._objects[key] = (bytes(body), etag, _now_ms())
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; return the new ETag."""
        self.requests.add("PUT")
        new = _etag(body)
        with self._lock:
            self._check_match(key, etag)
            self._objects[key] = (bytes(body), new, _now_ms())
        return new

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order (after ``start_after`` if given)."""
        self.requests.add("LIST")
        with self._lock:
            keys = sorted(k for k in self._objects if k.startswith(prefix) and (token is None or k > token)
                          and (start_after is None or k > start_after))
            snapshot = {k: self._objects[k] for k in keys}
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        last: str | None = None
        for k in keys:
            if len(objects) + len(prefixes) >= max_keys:
                return ListPage(objects, prefixes, last)
            if delimiter:
                cut = k.find(delimiter, len(prefix))
                if cut >= 0:
                    common = k[: cut + len(delimiter)]
                    if prefixes and prefixes[-1] == common:
                        continue
                    prefixes.append(common)
                    # Resume after every key of this common prefix.
                    last = common + "\U0010ffff"
                    continue
            body, etag, mtime = snapshot[k]
            objects.append(ObjectInfo(k, len(body), mtime, etag))
            last = k
        return ListPage(objects, prefixes, None)

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        self.requests.add("DELETE")
        with self._lock:
            self._objects.pop(key, None)

    def delete_if_match(self, key: str, etag: str) -> None:
        """Delete the object if its ETag is ``etag``: PreconditionFailed if it differs,
        ObjectNotFound if the key is missing (S3's replies to ``If-Match`` on DELETE)."""
        self.requests.add("DELETE")
        with self._lock:
            self._check_match(key, etag)
            del self._objects[key]

    def _check_match(self, key: str, etag: str) -> None:
        # If-Match, PUT or DELETE: checked under the lock the write then holds (one step).
        found = self._objects.get(key)
        if found is None:
            raise ObjectNotFound("no such key", key=key, code="NoSuchKey", status=404)
        if found[1].strip('"') != etag.strip('"'):
            raise PreconditionFailed("etag differs", key=key, code="PreconditionFailed", status=412)

    # Not part of the store protocol: for tests and tools.

    def put_raw(self, key: str, body: bytes, *, mtime_ms: int | None = None) -> str:
        """Write an object unconditionally (to plant corruption or age objects in tests)."""
        etag = _etag(body)
        with self._lock:
            self._objects[key] = (bytes(body), etag, _now_ms() if mtime_ms is None else mtime_ms)
        return etag

    def all_keys(self) -> Sequence[str]:
        """Every key, sorted."""
        with self._lock:
            return sorted(self._objects)


class AsyncMemoryStore:
    """A :class:`MemoryStore` behind the async interface (for AsyncLog unit tests)."""

    honours_preconditions = True

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.sync = store or MemoryStore()
        self.bucket = self.sync.bucket
        self.requests = self.sync.requests

    async def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        return self.sync.get(key)

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists; return its ETag."""
        return self.sync.put_if_absent(key, body)

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag``; return the new ETag."""
        return self.sync.put_if_match(key, body, etag)

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order (after ``start_after`` if given)."""
        return self.sync.list(prefix, delimiter=delimiter, token=token, max_keys=max_keys, start_after=start_after)

    async def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        self.sync.delete(key)

    async def delete_if_match(self, key: str, etag: str) -> None:
        """Delete the object if its ETag is ``etag`` (see :meth:`MemoryStore.delete_if_match`)."""
        self.sync.delete_if_match(key, etag)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
