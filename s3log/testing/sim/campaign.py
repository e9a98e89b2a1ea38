"""Many seeds: :func:`run_seed` runs one, :func:`campaign` runs a range of them (in
processes with ``jobs``) and totals them in a :class:`Campaign`, which
``scripts/sim.py`` reports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from s3log.testing.sim.outcome import Outcome
from s3log.testing.sim.scenario import Scenario
from s3log.testing.sim.simulation import Simulation


def run_seed(seed: int, *, trace: bool = False, steps: int | None = None,
             known_bugs: frozenset[str] = frozenset()) -> Outcome:
    """Run one seed (``known_bugs``: names from :data:`KNOWN_BUGS` to stop steering around)."""
    return Simulation(Scenario.from_seed(seed, steps), trace=trace, known_bugs=known_bugs).run()


@dataclass(slots=True)
class Campaign:
    """Totals over many seeds."""

    seeds: int = 0
    steps: int = 0
    requests: int = 0
    acked: int = 0
    forks: int = 0
    faults: int = 0
    seconds: float = 0.0
    failures: list[Outcome] = field(default_factory=list)
    #: known bug -> seeds it struck in (steered around, not failures)
    known: dict[str, list[int]] = field(default_factory=dict)
    #: Seeds whose whole history the checker checked, and the events in them.
    histories: int = 0
    events: int = 0

    def add(self, other: Campaign) -> None:
        """Fold another campaign's totals into these (its seconds are not added: the
        campaigns may have run side by side)."""
        for name in ("seeds", "steps", "requests", "acked", "forks", "faults", "histories", "events"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures += other.failures
        for bug, seeds in other.known.items():
            self.known.setdefault(bug, []).extend(seeds)


def campaign(seeds: Iterator[int] | range, *, jobs: int = 1) -> Campaign:
    """Run every seed; collect failures (without traces: replay a seed to get one).
    ``jobs`` > 1 runs ``seeds`` (a range) in that many processes."""
    start = time.perf_counter()
    out = _campaign_in_processes(seeds, jobs) if jobs > 1 and isinstance(seeds, range) else _campaign(seeds)
    out.seconds = time.perf_counter() - start
    return out


def _campaign(seeds: Iterator[int] | range) -> Campaign:
    out = Campaign()
    for seed in seeds:
        o = run_seed(seed)
        out.seeds += 1
        out.steps += o.steps
        out.requests += o.requests
        out.acked += o.acked
        out.forks += o.forks
        out.faults += o.faults
        out.events += o.events
        out.histories += o.violation is None
        if o.violation is not None:
            out.failures.append(replace(o, trace=[]))
        for name in o.known:
            out.known.setdefault(name, []).append(seed)
    return out


def _quiet() -> None:
    # Forks and lost races are logged at WARNING; a campaign makes thousands of them.
    logging.getLogger("s3log").setLevel(logging.ERROR)


def _campaign_in_processes(seeds: range, jobs: int) -> Campaign:
    """Chunks of ``seeds`` over a pool of ``jobs`` processes (spawned: no state of this
    one is inherited), folded in seed order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = max(1, min(200, len(seeds) // (jobs * 4) or 1))
    chunks = [seeds[i:i + size] for i in range(0, len(seeds), size)]
    out = Campaign()
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_quiet) as pool:
        for part in pool.map(_campaign, chunks):
            out.add(part)
    return out
