"""The drivers' own retry of idempotent requests: backoff and deadline from the log's Env.

Decision record 0041 keeps this loop rather than a retry library: these tests pin what
it must do. Delays are drawn from ``env.rng`` (the simulator's seed replays them), the
deadline is read from ``env``'s clock, and only idempotent requests are repeated; a
conditional PUT's failure goes back to the procedure, which decides what it means.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

import s3log
from s3log._drive import drivers as drive
from s3log._protocol.ops import Get, PutIfMatch
from s3log.config import RetryPolicy
from s3log.env import Env
from s3log.errors import TransientStoreError


class Flaky(s3log.MemoryStore):
    """A memory store whose first ``fail`` requests of each kind raise TransientStoreError."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail
        self.calls: dict[str, int] = {}

    def _maybe_fail(self, kind: str, key: str) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        if self.calls[kind] <= self.fail:
            raise TransientStoreError("503 SlowDown", key=key)

    def get(self, key: str) -> Any:
        self._maybe_fail("GET", key)
        return super().get(key)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self._maybe_fail("PUT", key)
        return super().put_if_match(key, body, etag)


def _one(op: Any) -> Any:
    return (yield op)


def test_a_transient_get_is_retried_with_delays_from_the_logs_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Flaky(fail=3)
    store.put_if_absent("k", b"v")
    slept: list[float] = []
    monkeypatch.setattr(drive.time, "sleep", slept.append)
    policy = RetryPolicy()
    env = Env(clock_ms=lambda: 0, rng=random.Random(7))
    blob = drive.SyncDriver(store, policy, 2, env).run(_one(Get("k")))
    assert blob.body == b"v" and store.calls["GET"] == 4
    expected = random.Random(7)
    assert slept == [policy.backoff(attempt, expected) for attempt in (1, 2, 3)]


def test_the_retry_deadline_is_read_from_the_logs_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Flaky(fail=100)
    store.put_if_absent("k", b"v")
    now = [0]

    def sleep(seconds: float) -> None:  # the injected clock advances instead of waiting
        now[0] += 20_000

    monkeypatch.setattr(drive.time, "sleep", sleep)
    env = Env(clock_ms=lambda: now[0], rng=random.Random(1))
    with pytest.raises(TransientStoreError):
        drive.SyncDriver(store, RetryPolicy(max_time=30.0), 2, env).run(_one(Get("k")))
    assert store.calls["GET"] == 3  # at 0 s, 20 s and 40 s: past the 30 s budget, no fourth


def test_a_conditional_put_is_never_repeated_by_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Flaky(fail=1)
    etag = store.put_if_absent("k", b"v")
    monkeypatch.setattr(drive.time, "sleep", lambda s: None)
    with pytest.raises(TransientStoreError):
        drive.SyncDriver(store, RetryPolicy(), 2).run(_one(PutIfMatch("k", b"w", etag)))
    assert store.calls["PUT"] == 1


def test_retrying_makes_no_thread_local(monkeypatch: pytest.MonkeyPatch) -> None:
    # A retry object per request holding a threading.local froze Dask workers (0026).
    made: list[object] = []
    real_init = threading.local.__init__
    monkeypatch.setattr(drive.time, "sleep", lambda s: None)
    store = Flaky(fail=2)
    store.put_if_absent("k", b"v")

    class Counting(threading.local):
        def __init__(self) -> None:
            made.append(self)
            real_init(self)

    monkeypatch.setattr(threading, "local", Counting)
    drive.SyncDriver(store, RetryPolicy(), 2, Env(rng=random.Random(3))).run(_one(Get("k")))
    assert made == []
