"""A deterministic simulator of s3log: many actors, one virtual clock, injected faults.

The protocol is sans-IO, so every actor (writer, reader, gc, forker) is just a running
procedure. The simulator is the only driver: each step it picks one actor at random,
performs one request of that actor against an in-memory store (a :class:`Parallel` is
split into its requests, run one per step in random order), perhaps injects a fault
(409, 412, 503, a lost response after the write landed, a request that never arrived,
a connection reset), and sends the result back. Between steps the virtual clock moves
on by a few milliseconds; a :class:`Sleep` parks its actor until the clock reaches its
end. Writers crash (their process dies: pending entries vanish, the request in flight
lands or not) and restart by opening their session again; async-style writers have
commits cancelled at a yield point (the procedure is abandoned, the request in flight
lands now, later, or never) and start a new commit from the same
:class:`~s3log._api.core.CommitQueue`.

Everything follows from the seed: the scenario, the interleaving, the faults, the
clock, and (through :meth:`s3log.env.Env.deterministic`) nonces and session ids. A
failing seed replays exactly and prints one line per step.

Half the scenarios add retention (drawn apart, so earlier seeds keep every other
choice): an actor that now and then expires the sessions idle on the virtual clock
(If-Match DELETEs of their heads) and/or deletes one (``Log.delete``), and a creator that takes expired or
deleted ids over (``Log.create``, ``append_latest`` with ``create_meta``). The store
records every session that lived at each id, how it ended, and the chain of each head
an expiry or a delete replaced (read as it ended): only those entries are legitimately
gone. A scenario may add a compactor (``Scenario.compactor``, not drawn): a compaction
starts a new history at the id, its replaced chain's positions excused like an expiry's.
Half the scenarios append with idempotency keys (``Scenario.keyed``, its choices from a
generator of their own): writers retry keyed payloads with their key, as a caller would,
after an undecided or cancelled commit and after a crash; a retry's answer must be the
stored entry, where any acknowledgement of it said.

After every step that changed the store, the invariants are checked on a fresh load of
each session it touched:

1. no acknowledged entry is lost: each is in the session it was acked in, at its seq
   and with its hash, unless it was in the chain of a head an expiry or a delete
   replaced (never a later session's at the id: a takeover's entries, or those a
   writer meeting the tombstone forked, must stay);
2. none is duplicated: each payload is acked at most once and stored at most once,
   in one chain of all the sessions (fork seeds are not counted, only entries);
3. every stored chain verifies (:func:`s3log._protocol.read.load` on every session with a head);
4. in a ``solo`` scenario (one writer per session, nobody else writing to it) no writer
   ever forks, meets a conflict or finds its session taken, unless retention or the
   creator changed its session since it opened it;
5. gc never deletes a segment referenced by a head that was current within the grace
   period before the delete (``Log.delete`` may delete the segments of the session it
   deleted and of expired ones at the id, never of a session that has not ended);
6. no head ever lands listing a segment that is not stored at that moment (a segment
   written beside its head stays pending until confirmed: "acknowledged means
   readable now", not after a later commit);
7. every fork child with a head is listed by its parent (its fork marker is stored),
   unless the parent was deleted (``Log.delete`` deletes the markers in its folder).

At the end of a seed that kept them all, its whole history is checked too: the actors
record every invocation, acknowledgement (with the session, seq and hash it reported),
failure, read and fork, the store every head write it applied and which operation sent
it, and :func:`s3log.testing.history.check` holds that history to a model of the
promise that knows nothing of the bookkeeping above (a breach is invariant
``history/<rule>``).

Run ``python scripts/sim.py --seeds 5000`` for a campaign, ``--seed N --trace`` to replay one.
Its rooms: :mod:`~s3log.testing.sim.scenario` (what a seed draws),
:mod:`~s3log.testing.sim.store` (the simulated store and the fault-free driver),
:mod:`~s3log.testing.sim.actors` (the processes), :mod:`~s3log.testing.sim.ledger`
(the books and the invariants), :mod:`~s3log.testing.sim.simulation` (the event loop),
:mod:`~s3log.testing.sim.outcome` (how a run ends, and the table of known bugs,
:data:`KNOWN_BUGS`) and :mod:`~s3log.testing.sim.campaign` (many seeds). The names
below are what a test of one's own needs: run a seed or a scenario changed with
:func:`dataclasses.replace`, swap the store for a :class:`SimStore` that misbehaves,
add an actor.
"""

from s3log.testing.sim.actors import Actor, WriterActor
from s3log.testing.sim.campaign import Campaign, campaign, run_seed
from s3log.testing.sim.outcome import KNOWN_BUGS, Outcome, Violation
from s3log.testing.sim.scenario import Scenario
from s3log.testing.sim.simulation import Simulation
from s3log.testing.sim.store import SimStore, run_direct

__all__ = [
    "KNOWN_BUGS",
    "Actor",
    "Campaign",
    "Outcome",
    "Scenario",
    "SimStore",
    "Simulation",
    "Violation",
    "WriterActor",
    "campaign",
    "run_direct",
    "run_seed",
]
