"""The two drivers: run a protocol procedure against a store, blocking or awaited.

They only move bytes: perform the op a procedure yields, retry it on a transient
error when the op says it is safe to, and send back the result (or throw in the
store's error). Every decision belongs to the procedures of :mod:`s3log._protocol`. They also call the
log's keys (:class:`~s3log._protocol.ops.Sign`, :class:`~s3log._protocol.ops.Verify`): the async driver
runs a key that may block (KMS) in a thread, so its event loop keeps running. They
pause the garbage collector while a procedure decodes (:mod:`s3log._drive.gcpause`).
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

from s3log import otel
from s3log._drive.gcpause import paused
from s3log._protocol import decide
from s3log._protocol.ops import (
    Blob,
    Delete,
    DeleteIfMatch,
    Get,
    KeyOp,
    ListKeys,
    ListPage,
    Op,
    Parallel,
    Proc,
    PutIfAbsent,
    PutIfMatch,
    Sleep,
    StoreOp,
    blocks,
    call_delete_if_match,
    call_key,
    call_store,
    decoded,
    is_retryable,
    list_kwargs,
)
from s3log.config import RetryPolicy
from s3log.env import DEFAULT_ENV, Env
from s3log.errors import StoreError
from s3log.store.base import AsyncObjectStore, ObjectStore

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")
log = logging.getLogger("s3log")


def _retry_delay(policy: RetryPolicy, env: Env, exc: StoreError, attempt: int, started_ms: int) -> float | None:
    """Seconds to wait before repeating an idempotent request that failed, or None to raise."""
    if not decide.may_retry_read(decide.classify(exc)) or attempt >= policy.attempts:
        return None
    if env.now_ms() - started_ms >= policy.max_time * 1000:
        return None
    delay = policy.backoff(attempt, env.rng)
    log.debug("retrying after %s (attempt %d, waiting %.3fs)", exc, attempt, delay)
    return delay


def _thrown_in(op: Op, exc: Exception) -> Exception:
    """``exc`` if the procedure decides what it means (a store's error, or any error of a
    signer or verifier, raised where the procedure signs); else raised on."""
    if isinstance(exc, StoreError) or isinstance(op, KeyOp):
        return exc
    raise exc


def step(proc: Proc[T], value: Any, error: BaseException | None) -> tuple[Op | None, T | None]:
    """Resume ``proc`` with a result (or throw an error into it): the next op it yields,
    or None and the value it returned. Every driver of a procedure goes through this
    (the two drivers here, the simulator's, the tests' scripted one)."""
    try:
        op = proc.throw(error) if error is not None else proc.send(value)
    except StopIteration as stop:
        return None, stop.value
    return op, None


class SyncDriver:
    """Runs procedures on a blocking store; ``Parallel`` ops use a thread pool."""

    def __init__(self, store: ObjectStore, retry: RetryPolicy, max_parallel: int, env: Env = DEFAULT_ENV) -> None:
        self.store = store
        self.retry = retry
        self.env = env
        self._max_parallel = max_parallel
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="s3log")
        self._pool_pid = os.getpid()

    def close(self) -> None:
        """Stop the thread pool."""
        self._pool.shutdown(wait=False)

    def _pool_here(self) -> ThreadPoolExecutor:
        # Threads do not survive fork: a child handed its parent's pool queues work that no
        # thread runs, and waits for it for ever. A forked child makes a pool of its own.
        if self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(max_workers=self._max_parallel, thread_name_prefix="s3log")
            self._pool_pid = os.getpid()
        return self._pool

    def run(self, proc: Proc[T]) -> T:
        """Drive ``proc`` to completion and return its value."""
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                with paused():  # the procedure decodes what the last request brought
                    op, result = step(proc, value, error)
                if op is None:
                    return cast(T, result)  # the procedure returned: result is its value
                value, error = None, None
                try:
                    value = self._perform(op)
                except Exception as exc:
                    error = _thrown_in(op, exc)
        finally:
            # Abandoned mid-way (an interrupt): let the procedure's cleanup run now.
            proc.close()

    def _perform(self, op: Op) -> Any:
        if isinstance(op, Parallel):
            if otel.TRACER is None or not otel.recording():
                return list(self._pool_here().map(self._capture, op.ops))
            # Each request's span is a child of the caller's: the pool's threads run
            # in a copy of the caller's context (one copy per op: a context is entered
            # by one thread at a time).
            contexts = [contextvars.copy_context() for _ in op.ops]
            return list(self._pool_here().map(lambda c, o: c.run(self._capture, o), contexts, op.ops))
        if isinstance(op, Sleep):
            time.sleep(op.seconds)
            return None
        if isinstance(op, KeyOp):
            return call_key(op)
        if not is_retryable(op):
            return self._call(op)
        started, attempt = self.env.now_ms(), 0
        while True:
            attempt += 1
            try:
                return self._call(op)
            except StoreError as exc:
                delay = _retry_delay(self.retry, self.env, exc, attempt, started)
                if delay is None:
                    raise
            time.sleep(delay)

    def _call(self, op: StoreOp) -> Blob | str | ListPage | None:
        if otel.TRACER is None or not otel.recording():
            return call_store(self.store, op)
        with otel.request_span(self.store, op):
            return call_store(self.store, op)

    def _capture(self, op: Op) -> Any:
        try:
            result = self._perform(op)
        except StoreError as exc:
            return exc
        with paused():
            return decoded(op, result)


class AsyncDriver:
    """Runs procedures on an async store; ``Parallel`` ops are gathered under a semaphore."""

    def __init__(
        self, store: AsyncObjectStore, retry: RetryPolicy, max_parallel: int, env: Env = DEFAULT_ENV
    ) -> None:
        self.store = store
        self.retry = retry
        self.env = env
        self._max_parallel = max_parallel
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        self._keys: ThreadPoolExecutor | None = None
        self._keys_pid = 0

    def close(self) -> None:
        """Stop the threads that call blocking keys (none were started without one)."""
        if self._keys is not None:
            self._keys.shutdown(wait=False)
            self._keys = None

    def _key_pool(self) -> ThreadPoolExecutor:
        # Threads of its own (max_parallel): the loop's default executor has min(32, cores + 4)
        # threads, shared with the application, so on a small machine ten sessions signing at
        # once waited for each other. Made again in a forked child (threads do not survive fork).
        if self._keys is None or self._keys_pid != os.getpid():
            self._keys = ThreadPoolExecutor(max_workers=self._max_parallel, thread_name_prefix="s3log-key")
            self._keys_pid = os.getpid()
        return self._keys

    async def run(self, proc: Proc[T]) -> T:
        """Drive ``proc`` to completion and return its value."""
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                with paused():  # the procedure decodes what the last request brought
                    op, result = step(proc, value, error)
                if op is None:
                    return cast(T, result)  # the procedure returned: result is its value
                value, error = None, None
                try:
                    value = await self._perform(op)
                except Exception as exc:
                    error = _thrown_in(op, exc)
        finally:
            # Abandoned mid-way (a cancellation): let the procedure's cleanup run now.
            proc.close()

    async def _perform(self, op: Op) -> Any:
        import asyncio  # here, not at the top: a blocking log never loads asyncio (~15 ms of a cold start)

        if isinstance(op, Parallel):
            # A semaphore belongs to the loop it first waits on, and a log may outlive
            # a loop (a second asyncio.run): each loop gets its own.
            loop = asyncio.get_running_loop()
            if self._sem is None or self._sem_loop is not loop:
                self._sem, self._sem_loop = asyncio.Semaphore(self._max_parallel), loop
            return list(await asyncio.gather(*(self._capture(o) for o in op.ops)))
        if isinstance(op, Sleep):
            await asyncio.sleep(op.seconds)
            return None
        if isinstance(op, KeyOp):
            # A KMS call blocks for a round trip: off the loop, so other sessions' commits
            # (and their own KMS calls) go on meanwhile. A local key is cheaper inline.
            if not blocks(op):
                return call_key(op)
            call = contextvars.copy_context().run  # the caller's span is the key call's parent
            return await asyncio.get_running_loop().run_in_executor(self._key_pool(), call, call_key, op)
        if not is_retryable(op):
            return await self._call(op)
        started, attempt = self.env.now_ms(), 0
        while True:
            attempt += 1
            try:
                return await self._call(op)
            except StoreError as exc:
                delay = _retry_delay(self.retry, self.env, exc, attempt, started)
                if delay is None:
                    raise
            await asyncio.sleep(delay)

    async def _call(self, op: StoreOp) -> Blob | str | ListPage | None:
        if otel.TRACER is None or not otel.recording():
            return await self._request(op)
        with otel.request_span(self.store, op):
            return await self._request(op)

    async def _request(self, op: StoreOp) -> Blob | str | ListPage | None:
        store = self.store
        match op:
            case Get(key):
                return await store.get(key)
            case PutIfAbsent(key, body):
                return await store.put_if_absent(key, body)
            case PutIfMatch(key, body, etag):
                return await store.put_if_match(key, body, etag)
            case ListKeys():
                return await store.list(op.prefix, **list_kwargs(op))
            case Delete(key):
                await store.delete(key)
                return None
            case DeleteIfMatch(key, etag):
                await call_delete_if_match(store, key, etag)
                return None

    async def _capture(self, op: Op) -> Any:
        assert self._sem is not None
        async with self._sem:
            try:
                result = await self._perform(op)
            except StoreError as exc:
                return exc
            with paused():
                return decoded(op, result)
