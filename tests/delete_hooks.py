"""Stores that let another process act at one moment of ``Log.delete`` (tests of its races).

The hook runs once, just before (or with ``after`` just after) the DELETE of a session's
head, whether by key or with If-Match: what another writer does between ``Log.delete``'s
read of the head and its DELETE, or between that DELETE and those of the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import s3log
from s3log.testing.plugin import LocalS3


class Clock:
    """A settable clock in ms, for ``Env.deterministic``."""

    def __init__(self, t: int = 1_800_000_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


class HeadDeleteHook:
    """Runs ``hook`` once around the DELETE of the head of session ``sid``."""

    sid = "thread-1"
    after = False
    hook: Callable[[], None] | None = None

    def _around(self, key: str, delete: Callable[[], None]) -> None:
        fire = key.endswith(f"/sessions/{self.sid}/head") and self.hook is not None
        if fire and not self.after:
            self._fire()
        delete()
        if fire and self.after:
            self._fire()

    def _fire(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


class HookedDeletes(HeadDeleteHook):
    """The hook on a store's ``delete`` and ``delete_if_match`` (mixed in before the store)."""

    def delete(self, key: str) -> None:
        self._around(key, lambda: super(HookedDeletes, self).delete(key))  # type: ignore[misc]

    def delete_if_match(self, key: str, etag: str) -> None:
        self._around(key, lambda: super(HookedDeletes, self).delete_if_match(key, etag))  # type: ignore[misc]


class HookedMemory(HookedDeletes, s3log.MemoryStore):
    """A MemoryStore with the hook."""


class PlainStore(HeadDeleteHook):
    """A store written before ``delete_if_match`` existed (as obstore's, which refuse it):
    the five original operations over a MemoryStore (``inner``), with the hook."""

    def __init__(self) -> None:
        self.inner = s3log.MemoryStore()
        self.requests = self.inner.requests
        self.honours_preconditions = True
        self.get, self.put_if_absent, self.put_if_match = self.inner.get, self.inner.put_if_absent, \
            self.inner.put_if_match
        self.list = self.inner.list

    def delete(self, key: str) -> None:
        self._around(key, lambda: self.inner.delete(key))


def hooked_store(kind: str, request: pytest.FixtureRequest, *, after: bool = False) -> Any:
    """A store with the hook: ``memory``, ``server`` (S3Store on the local server) or ``plain``."""
    store: Any
    if kind == "memory":
        store = HookedMemory()
    elif kind == "plain":
        store = PlainStore()
    else:
        server: LocalS3 = request.getfixturevalue("s3log_server")

        class _HookedS3(HookedDeletes, s3log.S3Store):
            pass

        store = _HookedS3(server.create_bucket(), endpoint_url=server.endpoint_url)
    store.after = after
    return store
