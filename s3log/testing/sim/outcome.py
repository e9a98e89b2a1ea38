"""How a run ends: the :class:`Violation` of an invariant that stopped it, the known
bugs it struck, and the counts of its :class:`Outcome`.

:data:`KNOWN_BUGS` is the one table of protocol bugs the simulator found that are not
fixed yet; the actors and the checks name them when one strikes
(:meth:`~s3log.testing.sim.ledger.Ledger.known`). Its own room because every
other module of the simulator raises violations and names known bugs: it sits beneath
them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from s3log.testing.sim.scenario import Scenario


class Violation(AssertionError):
    """An invariant failed: ``invariant`` names which (1-5, or ``writer`` for an
    error no writer should ever see)."""

    def __init__(self, invariant: str, message: str) -> None:
        self.invariant = invariant
        self.message = message
        super().__init__(f"invariant {invariant}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # A campaign's worker processes send their failures back pickled.
        return (Violation, (self.invariant, self.message))


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: the violation (None if every invariant held) and counts."""

    scenario: Scenario
    violation: Violation | None
    steps: int
    requests: int
    acked: int
    forks: int
    faults: int
    trace: list[str]
    known: dict[str, int] = field(default_factory=dict)
    #: Events the history checker checked (0 if the run stopped at a violation first).
    events: int = 0


#: Protocol bugs the simulator found that are not fixed yet. When one strikes it is
#: counted (``Outcome.known``) and the run goes on as the application would (reopen,
#: skip), so a campaign keeps finding new ones; ``known_bugs`` makes them violations.
KNOWN_BUGS: dict[str, str] = {
    "fork-before-fork-entry": "fork_at(at_seq=-1) of a session that is itself a fork raises CorruptionError "
                              "('head has a parent but the session has no fork entry') on a healthy session",
    "create-prefix-taken": "a lazy writer whose first commit landed unacknowledged (cancelled, or it raised) "
                           "and that appended more since gets SessionExists from every later commit: "
                           "decide.after_lost says IdTaken when creating and landed < batch, though the "
                           "stored chain is exactly its own first entries (and nobody wrote after them)",
    "retired-at-plan-time": "gc counts a retired segment's grace from the new head's retired_at, stamped "
                            "when its commit was planned; the head lands later (segment write, retries), "
                            "so a reader of the previous head gets less than the grace period",
    "stale-writer-merge": "a writer whose view of the head is stale (its commit landed unacknowledged: "
                          "cancelled, or it raised; or another writer moved on) plans its next flush from "
                          "the old head; once gc collected the segments that head listed, the merge's GET "
                          "raises CorruptionError (missing segment) before the head PUT could tell it to "
                          "adopt or fork, and so does every later commit",
}
