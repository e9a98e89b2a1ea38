"""What an object keeps per asyncio event loop: :class:`PerLoop`.

An ``asyncio.Lock`` (or future) belongs to the loop it was first used on, and the
objects holding one (an :class:`~s3log.AsyncWriter`, an OpenAI Agents session, a
LangGraph async saver) outlive loops: ``asyncio.run`` per request, a loop per test.
Kept from an earlier loop, such a lock raised RuntimeError ("bound to a different event
loop") at the first contended use on a later one, or was waited on for ever for a task
its closed loop would never run. So what belongs to a loop is made afresh on each loop,
here, for all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from s3log.errors import WriterBusyError

T = TypeVar("T")


class PerLoop(Generic[T]):
    """A value of ``T`` per event loop, made by ``make()`` on a loop's first :meth:`get`.

    Without ``busy``, live loops keep values side by side (their users meet as separate
    writers do), and the values of closed loops are dropped when a new loop comes.

    With ``busy``, one loop at a time owns the value: a new loop takes over, dropping
    the old loop's value, unless that loop is not closed (it may still run what it
    holds) and ``busy(value)`` says the value is in use there: then :meth:`get` raises
    :class:`~s3log.WriterBusyError` naming ``session()``, and nothing changes.

    ``drop`` is called with each value dropped (to abandon what its loop left pending).
    Loops may run in different threads: each change is one atomic dictionary operation,
    and a value two threads find to drop is dropped once.
    """

    def __init__(
        self,
        make: Callable[[], T],
        *,
        busy: Callable[[T], bool] | None = None,
        session: Callable[[], str] = lambda: "?",
        drop: Callable[[T], None] | None = None,
    ) -> None:
        self._make = make
        self._busy = busy
        self._session = session
        self._drop = drop
        self._values: dict[asyncio.AbstractEventLoop, T] = {}

    def get(self) -> T:
        """The running loop's value (a new one on a loop seen for the first time)."""
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is not None:
            return value
        kept = list(self._values.items())
        if self._busy is not None:
            for old, held in kept:
                if not old.is_closed() and self._busy(held):
                    raise WriterBusyError(self._session())
        for old, held in kept:
            # A closed loop never runs again: what it holds can never be used. With one
            # owner at a time, a live loop's value goes with its ownership.
            if self._busy is None and not old.is_closed():
                continue
            if self._values.pop(old, None) is not None and self._drop is not None:
                self._drop(held)
        return self._values.setdefault(loop, self._make())

    def pop(self) -> T | None:
        """Remove and return the running loop's value (None if it has none); ``drop`` is
        not called (the caller takes it)."""
        return self._values.pop(asyncio.get_running_loop(), None)

    def __len__(self) -> int:
        """How many loops' values are kept."""
        return len(self._values)
