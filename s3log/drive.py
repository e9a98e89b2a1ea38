"""The two drivers: run a protocol procedure against a store, blocking or awaited.

They only move bytes: perform the op a procedure yields, retry it on a transient
error when the op says it is safe to, and send back the result (or throw in the
store's error). Every decision belongs to :mod:`s3log.protocol`.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from .errors import StoreError, TransientStoreError
from .ops import Op, Parallel, Proc, Sleep, is_retryable, store_call
from .protocol import RetryPolicy
from .store.base import AsyncObjectStore, ObjectStore

T = TypeVar("T")


def _retry_kwargs(policy: RetryPolicy) -> dict[str, Any]:
    return {
        "stop": stop_after_attempt(policy.attempts) | stop_after_delay(policy.max_time),
        "wait": wait_random_exponential(multiplier=policy.initial, max=policy.max_backoff),
        "retry": retry_if_exception_type(TransientStoreError),
        "reraise": True,
    }


def _step(proc: Proc[T], value: Any, error: BaseException | None) -> tuple[Op | None, T | None]:
    try:
        op = proc.throw(error) if error is not None else proc.send(value)
    except StopIteration as stop:
        return None, stop.value
    return op, None


class SyncDriver:
    """Runs procedures on a blocking store; ``Parallel`` ops use a thread pool."""

    def __init__(self, store: ObjectStore, retry: RetryPolicy, max_parallel: int) -> None:
        self.store = store
        self.retry = retry
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="s3log")

    def close(self) -> None:
        """Stop the thread pool."""
        self._pool.shutdown(wait=False)

    def run(self, proc: Proc[T]) -> T:
        """Drive ``proc`` to completion and return its value."""
        value: Any = None
        error: BaseException | None = None
        while True:
            op, result = _step(proc, value, error)
            if op is None:
                return result  # type: ignore[return-value]
            value, error = None, None
            try:
                value = self._perform(op)
            except StoreError as exc:
                error = exc

    def _perform(self, op: Op) -> Any:
        if isinstance(op, Parallel):
            return list(self._pool.map(self._capture, op.ops))
        if isinstance(op, Sleep):
            time.sleep(op.seconds)
            return None
        name, args, kwargs = store_call(op)
        method = getattr(self.store, name)
        if not is_retryable(op):
            return method(*args, **kwargs)
        return Retrying(**_retry_kwargs(self.retry))(method, *args, **kwargs)

    def _capture(self, op: Op) -> Any:
        try:
            return self._perform(op)
        except StoreError as exc:
            return exc


class AsyncDriver:
    """Runs procedures on an async store; ``Parallel`` ops are gathered under a semaphore."""

    def __init__(self, store: AsyncObjectStore, retry: RetryPolicy, max_parallel: int) -> None:
        self.store = store
        self.retry = retry
        self._max_parallel = max_parallel
        self._sem: asyncio.Semaphore | None = None

    async def run(self, proc: Proc[T]) -> T:
        """Drive ``proc`` to completion and return its value."""
        value: Any = None
        error: BaseException | None = None
        while True:
            op, result = _step(proc, value, error)
            if op is None:
                return result  # type: ignore[return-value]
            value, error = None, None
            try:
                value = await self._perform(op)
            except StoreError as exc:
                error = exc

    async def _perform(self, op: Op) -> Any:
        if isinstance(op, Parallel):
            if self._sem is None:
                self._sem = asyncio.Semaphore(self._max_parallel)
            return list(await asyncio.gather(*(self._capture(o) for o in op.ops)))
        if isinstance(op, Sleep):
            await asyncio.sleep(op.seconds)
            return None
        name, args, kwargs = store_call(op)
        method = getattr(self.store, name)
        if not is_retryable(op):
            return await method(*args, **kwargs)
        return await AsyncRetrying(**_retry_kwargs(self.retry))(method, *args, **kwargs)

    async def _capture(self, op: Op) -> Any:
        assert self._sem is not None
        async with self._sem:
            try:
                return await self._perform(op)
            except StoreError as exc:
                return exc
