"""Fault-injecting store wrappers, for testing what s3log promises under failure.

:class:`FaultyStore` wraps any blocking store, :class:`AsyncFaultyStore` any async
store; both follow the same plan. Before or after each request a *plan* may inject:

- ``"409"``: a ConditionalRequestConflict, nothing written (conditional requests only:
  create-only or If-Match PUTs and If-Match DELETEs, as on S3; ignored on others);
- ``"503"``: a throttling TransientStoreError, nothing done;
- ``"timeout-landed"``: the request is performed, then the response is lost;
- ``"timeout-lost"``: the request never reaches the store, the caller sees a timeout;
- ``"crash"``: the writer process dies here (:class:`Crash`, not a store error).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from s3log._protocol.ops import Blob, ListPage, call_delete_if_match, list_keywords
from s3log.errors import ConditionalRequestConflict, TransientStoreError
from s3log.store.base import AsyncObjectStore, ObjectStore, RequestCounter

T = TypeVar("T")

Fault = Literal["409", "503", "timeout-landed", "timeout-lost", "crash"]
#: ``plan(method, key) -> fault or None``; method is get, put_if_absent, put_if_match, list,
#: delete, delete_if_match.
FaultPlan = Callable[[str, str], Fault | None]


class Crash(BaseException):
    """The simulated death of a writer: propagates through s3log untouched."""


class _Faults:
    """The plan logic both wrappers share: which fault a request meets, and raising it."""

    def __init__(self, inner: ObjectStore | AsyncObjectStore, plan: FaultPlan) -> None:
        self.plan = plan
        # Its bucket too: signed heads are bound to <bucket>/<prefix> (s3log.signing.default_log_id).
        if hasattr(inner, "bucket"):
            self.bucket: str = inner.bucket
        self.requests: RequestCounter = inner.requests
        # A wrapper is as trustworthy as what it wraps: the precondition probe asks the inner store.
        self.honours_preconditions = bool(getattr(inner, "honours_preconditions", False))
        self.injected: list[tuple[str, str, Fault]] = []
        self._lock = threading.Lock()

    def _fault(self, method: str, key: str) -> Fault | None:
        fault = self.plan(method, key)
        if fault is not None:
            with self._lock:
                self.injected.append((method, key, fault))
        # S3 answers 409 only to conditional writes; elsewhere the fault does nothing.
        if fault == "409" and method not in ("put_if_match", "put_if_absent", "delete_if_match"):
            return None
        return fault

    def _before(self, method: str, key: str) -> Fault | None:
        """Decide the fault of this request; raise it now if it strikes before the store."""
        fault = self._fault(method, key)
        if fault == "crash":
            raise Crash(key)
        if fault == "409":
            raise ConditionalRequestConflict("injected 409", key=key, code="ConditionalRequestConflict", status=409)
        if fault == "503":
            raise TransientStoreError("injected throttle", key=key, code="SlowDown", status=503)
        if fault == "timeout-lost":
            raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")
        return fault

    @staticmethod
    def _after(fault: Fault | None, key: str) -> None:
        """Raise the fault that strikes after the store did the work (a lost response)."""
        if fault == "timeout-landed":
            raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")


class FaultyStore(_Faults):
    """A blocking store that fails on purpose, as ``plan`` decides."""

    def __init__(self, inner: ObjectStore, plan: FaultPlan) -> None:
        super().__init__(inner, plan)
        self.inner = inner

    def _call(self, method: str, key: str, request: Callable[[], T]) -> T:
        fault = self._before(method, key)
        out = request()
        self._after(fault, key)
        return out

    def get(self, key: str) -> Blob:
        """GET, maybe failing."""
        return self._call("get", key, lambda: self.inner.get(key))

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create-only PUT, maybe failing."""
        return self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, body))

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Conditional PUT, maybe failing."""
        return self._call("put_if_match", key, lambda: self.inner.put_if_match(key, body, etag))

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """LIST, maybe failing."""
        kwargs = list_keywords(delimiter, token, max_keys, start_after)
        return self._call("list", prefix, lambda: self.inner.list(prefix, **kwargs))

    def delete(self, key: str) -> None:
        """DELETE, maybe failing."""
        self._call("delete", key, lambda: self.inner.delete(key))

    def delete_if_match(self, key: str, etag: str) -> None:
        """Conditional DELETE, maybe failing (ConditionalDeleteUnsupported if the inner store cannot)."""
        self._call("delete_if_match", key, lambda: call_delete_if_match(self.inner, key, etag))


class AsyncFaultyStore(_Faults):
    """An async store that fails on purpose, as ``plan`` decides (same plans as FaultyStore)."""

    def __init__(self, inner: AsyncObjectStore, plan: FaultPlan) -> None:
        super().__init__(inner, plan)
        self.inner = inner

    async def _call(self, method: str, key: str, request: Callable[[], Awaitable[T]]) -> T:
        fault = self._before(method, key)
        out = await request()
        self._after(fault, key)
        return out

    async def get(self, key: str) -> Blob:
        """GET, maybe failing."""
        return await self._call("get", key, lambda: self.inner.get(key))

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create-only PUT, maybe failing."""
        return await self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, body))

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Conditional PUT, maybe failing."""
        return await self._call("put_if_match", key, lambda: self.inner.put_if_match(key, body, etag))

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """LIST, maybe failing."""
        kwargs = list_keywords(delimiter, token, max_keys, start_after)
        return await self._call("list", prefix, lambda: self.inner.list(prefix, **kwargs))

    async def delete(self, key: str) -> None:
        """DELETE, maybe failing."""
        await self._call("delete", key, lambda: self.inner.delete(key))

    async def delete_if_match(self, key: str, etag: str) -> None:
        """Conditional DELETE, maybe failing (ConditionalDeleteUnsupported if the inner store cannot)."""
        await self._call("delete_if_match", key, lambda: call_delete_if_match(self.inner, key, etag))


def random_plan(
    seed: int,
    rate: float = 0.2,
    faults: tuple[Fault, ...] = ("409", "503", "timeout-landed", "timeout-lost"),
) -> FaultPlan:
    """A plan injecting one of ``faults`` into a fraction ``rate`` of writes and reads."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def plan(method: str, key: str) -> Fault | None:
        with lock:
            if rng.random() >= rate:
                return None
            return rng.choice(faults)

    return plan
