"""The object store interface s3log needs, and request counting.

Five operations: get, put-if-absent, put-if-match, list, delete. Stores raise the
:mod:`s3log.errors` store errors (ObjectNotFound, PreconditionFailed,
ConditionalRequestConflict, TransientStoreError) and nothing else for store failures.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Protocol, runtime_checkable

from ..ops import Blob, ListPage

#: The request kinds counted by every store.
REQUEST_KINDS = ("GET", "PUT", "LIST", "DELETE")


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
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order."""
        ...

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
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
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order."""
        ...

    async def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        ...
