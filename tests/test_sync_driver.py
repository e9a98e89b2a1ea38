"""The sync driver's Parallel: the calling thread performs the first op, the pool the
rest, never more than ``max_parallel`` requests at once, results in op order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import s3log
from s3log.config import RetryPolicy
from s3log.drive import SyncDriver
from s3log.errors import ObjectNotFound
from s3log.ops import Blob, Get, Parallel, Proc


class _Counting(s3log.MemoryStore):
    """Counts the GETs in flight at once (each takes a few milliseconds)."""

    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Lock()
        self.now = 0
        self.most = 0
        self.threads: set[str] = set()

    def get(self, key: str) -> Blob:
        with self._guard:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(0.01)
            return super().get(key)
        finally:
            with self._guard:
                self.now -= 1


def _gets(keys: list[str]) -> Proc[list[Any]]:
    return (yield Parallel(tuple(Get(k) for k in keys)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("max_parallel", [1, 2, 3, 16])
def test_parallel_stays_within_max_parallel_and_keeps_op_order(max_parallel: int) -> None:
    store = _Counting()
    keys = [f"k{i}" for i in range(8)]
    for k in keys:
        store.put_raw(k, k.encode())
    driver = SyncDriver(store, RetryPolicy(), max_parallel)
    try:
        results = driver.run(_gets([*keys, "missing"]))
    finally:
        driver.close()
    assert [r.body for r in results[:-1]] == [k.encode() for k in keys]
    assert isinstance(results[-1], ObjectNotFound)  # handed back in its place, not raised
    assert store.most <= max_parallel
    if max_parallel > 1:
        assert store.most > 1  # and the requests did overlap
        assert threading.current_thread().name in store.threads  # the caller took one itself
    else:
        assert store.threads == {threading.current_thread().name}


def test_a_single_op_runs_in_the_calling_thread() -> None:
    store = _Counting()
    store.put_raw("k", b"v")
    driver = SyncDriver(store, RetryPolicy(), 4)
    try:
        (blob,) = driver.run(_gets(["k"]))
    finally:
        driver.close()
    assert blob.body == b"v"
    assert store.threads == {threading.current_thread().name}
