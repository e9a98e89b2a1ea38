"""A fault-injecting store wrapper, for testing what s3log promises under failure.

Wraps any blocking store. Before or after each request a *plan* may inject:

- ``"409"``: a ConditionalRequestConflict, nothing written;
- ``"503"``: a throttling TransientStoreError, nothing done;
- ``"timeout-landed"``: the request is performed, then the response is lost;
- ``"timeout-lost"``: the request never reaches the store, the caller sees a timeout;
- ``"crash"``: the writer process dies here (:class:`Crash`, not a store error).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Literal

from .errors import ConditionalRequestConflict, TransientStoreError
from .ops import Blob, ListPage
from .store.base import ObjectStore, RequestCounter

Fault = Literal["409", "503", "timeout-landed", "timeout-lost", "crash"]
#: ``plan(method, key) -> fault or None``; method is get, put_if_absent, put_if_match, list, delete.
FaultPlan = Callable[[str, str], Fault | None]


class Crash(BaseException):
    """The simulated death of a writer: propagates through s3log untouched."""


class FaultyStore:
    """A store that fails on purpose, as ``plan`` decides."""

    def __init__(self, inner: ObjectStore, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.prefix = getattr(inner, "prefix", "s3log")
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
        if fault == "409" and method != "put_if_match":
            return None
        return fault

    def _before(self, fault: Fault | None, key: str) -> None:
        if fault == "crash":
            raise Crash(key)
        if fault == "409":
            raise ConditionalRequestConflict("injected 409", key=key, code="ConditionalRequestConflict", status=409)
        if fault == "503":
            raise TransientStoreError("injected throttle", key=key, code="SlowDown", status=503)
        if fault == "timeout-lost":
            raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")

    @staticmethod
    def _after(fault: Fault | None, key: str) -> None:
        if fault == "timeout-landed":
            raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")

    def get(self, key: str) -> Blob:
        """GET, maybe failing."""
        fault = self._fault("get", key)
        self._before(fault, key)
        out = self.inner.get(key)
        self._after(fault, key)
        return out

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create-only PUT, maybe failing."""
        fault = self._fault("put_if_absent", key)
        self._before(fault, key)
        out = self.inner.put_if_absent(key, body)
        self._after(fault, key)
        return out

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Conditional PUT, maybe failing."""
        fault = self._fault("put_if_match", key)
        self._before(fault, key)
        out = self.inner.put_if_match(key, body, etag)
        self._after(fault, key)
        return out

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000
    ) -> ListPage:
        """LIST, maybe failing."""
        fault = self._fault("list", prefix)
        self._before(fault, prefix)
        out = self.inner.list(prefix, delimiter=delimiter, token=token, max_keys=max_keys)
        self._after(fault, prefix)
        return out

    def delete(self, key: str) -> None:
        """DELETE, maybe failing."""
        fault = self._fault("delete", key)
        self._before(fault, key)
        self.inner.delete(key)
        self._after(fault, key)


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
