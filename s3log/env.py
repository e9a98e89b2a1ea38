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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .ids import uuid7


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
