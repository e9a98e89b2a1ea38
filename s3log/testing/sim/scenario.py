"""What one seed simulates: its :class:`Scenario` (actors, fault rates, tunables) and
the faults a scenario may inject.

Its own room because the order of the draws is a contract: a seed must replay the
scenario that found its bug, so every choice added later is drawn from a generator of
its own (``extra``) after the earlier ones, and every earlier seed keeps what it drew.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from s3log.config import OnConflict

#: Virtual time starts here (2023-11-14T22:13:20Z): realistic ids and timestamps.
EPOCH_MS = 1_700_000_000_000

Fault = Literal["409", "412", "503", "timeout-landed", "timeout-lost", "reset"]
FAULTS: tuple[Fault, ...] = ("409", "412", "503", "timeout-landed", "timeout-lost", "reset")


@dataclass(frozen=True, slots=True)
class Scenario:
    """What one seed simulates: actors, fault rates and tunables, all drawn from the seed."""

    seed: int
    solo: bool
    sessions: int
    writers: tuple[tuple[int, str, OnConflict], ...]  # (session index, "sync"/"async", on_conflict)
    readers: int
    gc: bool
    forker: bool
    fault_rate: float
    faults: tuple[Fault, ...]
    crash_rate: float
    cancel_rate: float
    ghosts: bool
    tail_max_bytes: int
    fanout: int
    cache_levels: int
    attempts: int
    commit_deadline_ms: int
    grace_ms: int
    steps: int
    max_advance_ms: int
    #: LogConfig.pending_max_bytes: 0 writes every segment before its head.
    pending_max_bytes: int = 0
    #: Whether the simulated driver applies ``Get.decode`` inside a Parallel, as the
    #: real drivers do (otherwise the procedures decode the blobs themselves).
    decode: bool = False
    #: LogConfig.tail_per_commit: 0 is the strict tail bound; 4 (the default) lets a big
    #: commit keep more inline (it matters only with pending_max_bytes set).
    tail_per_commit: int = 0
    #: The retention actor: "" (none), "expire" (idle sessions), "delete" (a session
    #: now and then), or "both".
    retention: str = ""
    #: How long a session must be idle for the retention actor's expire sweep.
    idle_ms: int = 100
    #: How often (on average) the retention actor runs.
    retention_every_ms: int = 600
    #: A creator taking over ids retention expired or deleted (with the retention actor).
    creator: bool = False
    #: The store does not vouch for itself: the first of gc, the retention actor and the
    #: forker to write runs the precondition probe first (``LogCore.writing``), under
    #: the scenario's faults, beside the other actors (docs/decisions/0034).
    probe: bool = False
    #: A compactor: now and then ``Log.compact`` of a session, dropping its oldest entry.
    #: Not drawn, so drawn scenarios (the regression seeds among them) run as they did;
    #: tests/test_sim.py runs seeds with it (``replace(scenario, compactor=True)``).
    compactor: bool = False
    #: Keyed appends (decision 0037): writers give about half their entries an
    #: idempotency key, and retry some with it as a caller would: after a commit ended
    #: undecided or was cancelled (a timeout), in the same writer, and after a crash, in
    #: the restarted one. Every choice it adds is drawn from a generator of its own, so
    #: a scenario without it runs as before. Retries are not made with a compactor: it
    #: forgets every key, also of entries it kept (stored again, documented).
    keyed: bool = False

    @staticmethod
    def from_seed(seed: int, steps: int | None = None) -> Scenario:
        """The scenario of ``seed`` (``steps`` overrides its length)."""
        r = random.Random(f"scenario-{seed}")
        extra = random.Random(f"scenario-extra-{seed}")
        solo = r.random() < 0.5
        if solo:
            sessions = r.randint(1, 3)
            fork: OnConflict = "fork"
            writers = tuple((i, r.choice(("sync", "async")), fork) for i in range(sessions))
        else:
            sessions = r.randint(1, 2)
            n = r.randint(2, 4)
            modes: list[OnConflict] = ["raise" if r.random() < 0.15 else "fork" for _ in range(n)]
            writers = tuple((i % sessions, r.choice(("sync", "async")), modes[i]) for i in range(n))
        faults = tuple(f for f in FAULTS if r.random() < 0.7) or ("timeout-landed",)
        deadline = r.choice((1_000, 3_000, 10_000))
        return Scenario(
            seed=seed,
            solo=solo,
            sessions=sessions,
            writers=writers,
            readers=r.randint(0, 2),
            gc=r.random() < 0.75,
            forker=not solo and r.random() < 0.4,
            fault_rate=r.choice((0.0, 0.05, 0.15, 0.3)),
            faults=faults,
            crash_rate=r.choice((0.0, 0.003, 0.01)),
            cancel_rate=r.choice((0.0, 0.005, 0.02)),
            ghosts=r.random() < 0.5,
            # The default bound (32 KiB) now and then: a tail that rarely flushes.
            tail_max_bytes=_tail_bound(r.choice((300, 600, 1200, 8192)), extra),
            fanout=r.randint(2, 4),
            cache_levels=r.randint(0, 3),
            attempts=r.randint(3, 8),
            commit_deadline_ms=deadline,
            grace_ms=r.choice((300, 1_000, 3_000)),
            steps=steps if steps is not None else r.choice((150, 250, 400)),
            max_advance_ms=r.choice((2, 10, 40)),
            pending_max_bytes=r.choice((0, 256 * 1024)),
            # Drawn apart, so the scenarios of earlier seeds (the regression seeds) keep
            # every choice above.
            decode=extra.random() < 0.5,
            tail_per_commit=extra.choice((0, 4)),
            # Drawn after the choices above (keyword arguments are evaluated in order):
            # the scenarios of earlier seeds keep them.
            retention=extra.choice(("", "", "expire", "delete", "both", "both")),
            idle_ms=extra.choice((20, 100, 400)),
            retention_every_ms=extra.choice((150, 600)),
            creator=extra.random() < 0.6,
            probe=extra.random() < 0.5,
            keyed=extra.random() < 0.5,
        )

    def describe(self) -> str:
        """One line naming every choice."""
        ws = " ".join(f"w{i}:S{s}/{style}/{oc}" for i, (s, style, oc) in enumerate(self.writers))
        return (
            f"seed={self.seed} {'solo' if self.solo else 'contended'} sessions={self.sessions} [{ws}] "
            f"readers={self.readers} gc={self.gc} forker={self.forker} "
            f"faults={self.fault_rate}:{','.join(self.faults)} "
            f"crash={self.crash_rate} cancel={self.cancel_rate} ghosts={self.ghosts} tail={self.tail_max_bytes} "
            f"fanout={self.fanout} cache={self.cache_levels} attempts={self.attempts} "
            f"deadline={self.commit_deadline_ms}ms grace={self.grace_ms}ms steps={self.steps} "
            f"advance<={self.max_advance_ms}ms pending<={self.pending_max_bytes} decode={self.decode} "
            f"share={self.tail_per_commit}"
            + (f" retention={self.retention}/idle={self.idle_ms}ms/every={self.retention_every_ms}ms"
               f" creator={self.creator}" if self.retention else "")
            + (" probe" if self.probe else "")
            + (" compactor" if self.compactor else "")
            + (" keyed" if self.keyed else "")
        )


def _tail_bound(drawn: int, extra: random.Random) -> int:
    """Half the scenarios that drew the largest small bound get the default (32 KiB,
    a tail that rarely flushes) instead; the others keep what they drew, so the
    regression seeds' scenarios are the ones that found their bugs."""
    return 32 * 1024 if drawn == 8192 and extra.random() < 0.5 else drawn
