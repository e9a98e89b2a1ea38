"""The one place procedures get time, randomness and new ids from.

Every protocol procedure that needs the time (head timestamps, entry ``ts``, gc
grace), randomness (backoff jitter, the writer nonce of a head, segment key nonces)
or a new session id asks the :class:`Env` of its :class:`~s3log.LogConfig`. The
default reads the wall clock and the OS random source; the deterministic simulator
(``make sim``) passes a virtual clock and a seeded generator, so a run replays
exactly from its seed.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from s3log._format.ids import assemble_uuid7

_lock = threading.Lock()
#: How far back the clock may step with ids still ordered after the ones before.
_MAX_STEP_BACK_MS = 60_000
_last_ms = 0
_counter = 0


def uuid7(now_ms: int | None = None, rng: random.Random | None = None) -> str:
    """Return a new UUIDv7 (RFC 9562) as a string.

    Ids made in the same millisecond by this process stay ordered: the 12-bit
    ``rand_a`` field is a counter seeded randomly each millisecond, so sorting ids
    sorts sessions by creation time, which is what "newest first" listing relies on.
    ``now_ms`` and ``rng`` let a caller (the deterministic simulator, through
    :class:`Env`) fix the clock and the random bits.
    """
    if rng is not None:
        # Deterministic ids: no process-wide counter, everything from the given source.
        ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        return assemble_uuid7(ms, rng.getrandbits(12), rng.getrandbits(62))
    global _last_ms, _counter
    with _lock:
        ms = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        # Ordered across a small step back of the clock; a large one is another clock
        # (a test's virtual one), not to be carried into every later id of the process.
        if _last_ms - _MAX_STEP_BACK_MS <= ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms += 1
                _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = ms
        rand_a = _counter
    return assemble_uuid7(ms, rand_a, int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1))


def wall_clock_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Env:
    """Clock, randomness and id source of a log.

    ``clock_ms`` returns milliseconds since the epoch. ``rng`` is used for jitter and
    nonces; ``seeded`` makes ids deterministic too (the default keeps the process-wide
    UUIDv7 counter, which orders ids made in the same millisecond).
    """

    clock_ms: Callable[[], int] = wall_clock_ms
    rng: random.Random = field(default_factory=random.SystemRandom)
    seeded: bool = False

    @staticmethod
    def deterministic(seed: int, clock_ms: Callable[[], int]) -> Env:
        """An environment whose every choice follows from ``seed`` and ``clock_ms``."""
        return Env(clock_ms=clock_ms, rng=random.Random(seed), seeded=True)

    def now_ms(self) -> int:
        """The current time in milliseconds."""
        return self.clock_ms()

    def nonce(self) -> str:
        """16 random hex digits: a head's writer nonce, a segment key's suffix."""
        if type(self.rng) is random.SystemRandom:
            # The OS source directly (what SystemRandom reads): every commit takes one.
            return os.urandom(8).hex()
        return f"{self.rng.getrandbits(64):016x}"

    def new_id(self) -> str:
        """A new session id (UUIDv7)."""
        if self.seeded:
            return uuid7(self.clock_ms(), self.rng)
        return uuid7(self.clock_ms())

    def jitter(self, upper: float) -> float:
        """A uniform draw in ``[0, upper]`` (full-jitter backoff)."""
        return self.rng.uniform(0.0, upper) if upper > 0 else 0.0


#: The environment of a log that was given none.
DEFAULT_ENV = Env()
