"""Run the deterministic simulator (s3log.testing.sim) over many seeds, or replay one with its trace.

    python scripts/sim.py --seeds 5000            # seeds 0..4999, report seeds/s and steps/s
    python scripts/sim.py --start 10000 --seeds 1000
    python scripts/sim.py --seed 1234 --trace     # replay one seed, one line per step
    python scripts/sim.py --seeds 100000 --jobs 8 # the nightly campaign, over 8 processes

Every seed that keeps the invariants also has its whole history (invocations,
acknowledgements with their positions, reads, forks, head writes) checked against the
model of the promise (s3log.testing.history); the totals say how many events it checked.
"""

from __future__ import annotations

import argparse
import logging
import sys

from s3log.testing.sim import KNOWN_BUGS, campaign, run_seed


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print; exit status 1 if any seed violated an invariant."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=1000, help="how many seeds to run (default 1000)")
    p.add_argument("--start", type=int, default=0, help="first seed of the campaign (default 0)")
    p.add_argument("--seed", type=int, help="run this one seed only")
    p.add_argument("--steps", type=int, help="override the scenario's number of steps")
    p.add_argument("--trace", action="store_true", help="print the trace of --seed")
    p.add_argument("--jobs", type=int, default=1, help="processes to run the seeds in (default 1)")
    p.add_argument("--bug", action="append", default=[], choices=sorted(KNOWN_BUGS),
                   help="stop steering around a known bug (replays its regression seed)")
    args = p.parse_args(argv)
    # Forks and lost races are the simulator's daily bread: keep s3log's log lines quiet.
    logging.getLogger("s3log").setLevel(logging.ERROR)

    if args.seed is not None:
        o = run_seed(args.seed, trace=args.trace, steps=args.steps, known_bugs=frozenset(args.bug))
        if args.trace:
            print("\n".join(o.trace))
        status = "OK" if o.violation is None else f"FAIL {o.violation}"
        if o.known:
            status += f" (known bugs struck: {o.known})"
        print(f"seed {args.seed}: {status} ({o.steps} steps, {o.requests} requests, {o.acked} acked, "
              f"{o.forks} forks, {o.faults} faults, {o.events} history events checked)")
        return 0 if o.violation is None else 1

    c = campaign(range(args.start, args.start + args.seeds), jobs=args.jobs)
    print(f"{c.seeds} seeds in {c.seconds:.1f}s: {c.seeds / c.seconds:.1f} seeds/s, {c.steps / c.seconds:.0f} steps/s "
          f"({c.steps} steps, {c.requests} requests, {c.acked} entries acked, {c.forks} forks, {c.faults} faults)")
    history = sum(1 for o in c.failures if o.violation is not None and o.violation.invariant.startswith("history"))
    print(f"history checker: {c.events} events checked in {c.histories} seeds, {history} violations")
    by_invariant: dict[str, list[int]] = {}
    for o in c.failures:
        assert o.violation is not None
        by_invariant.setdefault(o.violation.invariant, []).append(o.scenario.seed)
        print(f"FAIL seed {o.scenario.seed} at step {o.steps}: {o.violation}")
    for inv, seeds in sorted(by_invariant.items()):
        print(f"invariant {inv}: {len(seeds)} seeds, e.g. {seeds[:10]}")
    for name, seeds in sorted(c.known.items()):
        print(f"known bug {name}: struck in {len(seeds)} seeds, e.g. {seeds[:10]} (replay with --bug {name})")
    if c.failures:
        print(f"replay one with: python scripts/sim.py --seed {c.failures[0].scenario.seed} --trace")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
