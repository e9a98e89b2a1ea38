"""A pause of the cyclic garbage collector while a driver decodes: a driver's choice, not the codec's.

Decoding a segment or a head's tail allocates a few containers per entry, none of them
in a cycle, so every collection those allocations trigger finds nothing to free, yet
walks the young generations (measured: decoding a 10,000-entry segment takes about a
fifth less time with the collector paused). The codec stays a pure function of its
bytes: the drivers (:mod:`s3log._drive.drivers`) pause the collector while a procedure runs
between two requests (where it decodes what a request brought back) and while a
:class:`~s3log._protocol.ops.Get`'s ``decode`` runs. Nothing else in s3log touches the collector.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_depth = 0
_resume = False


class _Pause:
    """Nested and concurrent pauses share one pause; the collector is turned back on when
    the last ends, and only if it was on when the first began."""

    __slots__ = ()

    # A class, not a generator-based context manager: entered once per step of a
    # procedure, where contextlib's machinery cost as much as decoding a small head's tail.
    def __enter__(self) -> None:
        global _depth, _resume
        with _lock:
            if _depth == 0:
                _resume = gc.isenabled()
                gc.disable()
            _depth += 1

    def __exit__(self, *exc: object) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()


_PAUSE = _Pause()


def paused() -> _Pause:
    """The collector's pause, as a context manager (one object: it holds no state of its own)."""
    return _PAUSE


def depth() -> int:
    """How many pauses are open now (0: the collector is as the application left it)."""
    return _depth
