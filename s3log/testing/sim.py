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
3. every stored chain verifies (:func:`s3log._protocol.protocol.load` on every session with a head);
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
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from s3log._api.core import CommitQueue, LogCore
from s3log._drive.drivers import step
from s3log._format.codec import decode_head
from s3log._format.columns import RunColumns
from s3log._format.layout import Layout, parse_segment_key
from s3log._format.values import FORK_KIND, Entry, Head
from s3log._protocol import decide, protocol, retention
from s3log._protocol.ops import (
    Blob,
    Delete,
    DeleteIfMatch,
    Get,
    KeyOp,
    ListKeys,
    Op,
    Parallel,
    Proc,
    PutIfAbsent,
    PutIfMatch,
    Sleep,
    StoreOp,
    call_key,
    call_store,
    decoded,
    is_retryable,
)
from s3log._protocol.protocol import ChainPosition, OnConflict, SessionData
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import (
    ConditionalRequestConflict,
    ConflictError,
    CorruptionError,
    EntryNotFound,
    PreconditionFailed,
    S3LogError,
    SessionExists,
    SessionNotFound,
    SessionReplaced,
    StoreError,
    TransientStoreError,
)
from s3log.results import AckedEntry, CommitResult, ExpireReport, GcReport
from s3log.store.base import ObjectStore
from s3log.store.memory import MemoryStore
from s3log.testing.history import Ended, Fork, History, head_write, positions
from s3log.testing.history import check as check_history

#: Virtual time starts here (2023-11-14T22:13:20Z): realistic ids and timestamps.
EPOCH_MS = 1_700_000_000_000
KIND = "k"
#: How long a request of a cancelled procedure may stay on its way before it lands (or
#: never does): well under every scenario's commit deadline, as a real request's
#: lifetime (client and server timeouts) is well under the default 10 minutes.
GHOST_LIFETIME_MS = 500
#: Steps the writers get to commit what they hold once the faults stop.
DRAIN_STEPS = 400

Fault = Literal["409", "412", "503", "timeout-landed", "timeout-lost", "reset"]
FAULTS: tuple[Fault, ...] = ("409", "412", "503", "timeout-landed", "timeout-lost", "reset")
#: What a request in flight does when its actor dies or is cancelled.
Fate = Literal["dropped", "landed", "ghost"]


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


# ------------------------------------------------------------------------------ scenario


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


# -------------------------------------------------------------------------------- store


@dataclass(slots=True)
class HeadLife:
    """One head body as stored: the segments it lists, when it became current and
    when another replaced it or it was deleted (None while current)."""

    segments: frozenset[str]
    start: int
    end: int | None = None
    #: The head's ``retired_at`` (stamped when its commit was planned).
    retired_at: int | None = None
    #: Which session lived at the id when it landed (an index into ``SimStore.lives``).
    life: int = 0
    #: A tombstone (retention): the session at the id expired.
    tomb: bool = False


#: What tells one session at an id from another that took it over: (created_at, creator).
#: Which session a head belongs to: its created_at, creator nonce and how many
#: compactions it has had (a compaction starts a new history at the same id).
Ident = tuple[int, str | None, int]


def _ident(head: Head) -> Ident:
    return (head.created_at, head.creator, protocol.compactions(head))


@dataclass(slots=True)
class SessionLife:
    """One session at an id, from its first head to its expiry (tombstone) and its
    deletion (head deleted), and who ended it."""

    ident: Ident
    start: int
    expired_at: int | None = None
    deleted_at: int | None = None
    deleted_by: str = ""
    #: Ended (tombstone or delete) by the retention actor, of the session it had read
    #: at the id: only then are its entries legitimately gone.
    decided: bool = False


class SimStore(MemoryStore):
    """A :class:`MemoryStore` stamping objects with the virtual clock and recording
    what the invariants need: every head ever current, which session lived at each id
    (and how it ended), which sessions changed."""

    def __init__(self, clock: Callable[[], int], layout: Layout) -> None:
        super().__init__()
        self.clock = clock
        self.layout = layout
        self.heads: dict[str, list[HeadLife]] = {}
        #: Per id, every session that lived there (a takeover starts another).
        self.lives: dict[str, list[SessionLife]] = {}
        self.dirty: set[str] = set()
        #: (key, when, who) of every DELETE since the last check.
        self.deletes: list[tuple[str, int, str]] = []
        #: Who last deleted each key.
        self.deleted_by: dict[str, str] = {}
        #: Heads that landed listing a segment not stored at that moment (invariant 6).
        self.dangling: list[str] = []
        #: The actor whose request is being performed (the simulator sets it).
        self.who = ""
        #: Per id, the entries legitimately gone: the chain of each head an expiry
        #: (tombstone) or a delete replaced, as (seq, hash) -> the ident of its session.
        self.gone: dict[str, dict[tuple[int, bytes], Ident]] = {}
        #: Heads ended by retention that did not load at that moment (invariant 3).
        self.unloadable: list[str] = []
        #: Per id, the last time retention or the creator changed it (the premise of
        #: invariant 4: writers of a solo scenario meet no competitor but these).
        self.disturbed: dict[str, int] = {}
        #: Per id, the session whose head the retention actor last read there (what an
        #: expiry or a delete decides on).
        self.decided: dict[str, Ident] = {}
        #: What the actors did and saw, and every head write applied (the history checker's input).
        self.history = History()
        #: The operation (``History.invoke``) whose request is being performed.
        self.op = 0

    def get(self, key: str) -> Blob:
        """GET; a head the retention actor reads is what it decides on."""
        blob = super().get(key)
        if self.who == "rt" and key.endswith("/head"):
            sid = self.layout.session_of(key)
            if sid is not None:
                head = decode_head(blob.body, key)
                self.decided[sid] = _ident(head)
        return blob

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create-only PUT, stamped with virtual time."""
        etag = super().put_if_absent(key, body)
        self._landed(key, body, None)
        self._record(key, "put_if_absent", None, etag, body)
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Conditional PUT, stamped with virtual time."""
        old = self._objects.get(key)
        new = super().put_if_match(key, body, etag)
        self._landed(key, body, old[0] if old else None)
        self._record(key, "put_if_match", etag, new, body)
        return new

    def delete(self, key: str) -> None:
        """DELETE, recorded for invariant 5."""
        old = self._objects.get(key)
        super().delete(key)
        self._deleted(key, old[0] if old else None)
        if old is not None:
            self._record(key, "delete", None, None, None)

    def delete_if_match(self, key: str, etag: str) -> None:
        """Conditional DELETE, recorded (when it deletes) as a DELETE is."""
        old = self._objects.get(key)
        super().delete_if_match(key, etag)
        self._deleted(key, old[0] if old else None)
        self._record(key, "delete_if_match", etag, None, None)

    def _record(self, key: str, method: str, base: str | None, etag: str | None, body: bytes | None) -> None:
        """The request log: every head write applied, by which operation."""
        if key.endswith("/head") and protocol.PROBE_DIR not in key:  # the probe's object is no session
            self.history.add(head_write(self.op, self.who, key, method, base, etag, body, len(self.history)))

    def current(self, sid: str) -> HeadLife | None:
        """The head stored at ``sid`` now (None if none is)."""
        lives = self.heads.get(sid)
        return lives[-1] if lives and lives[-1].end is None else None

    def life_of(self, sid: str, life: HeadLife) -> SessionLife:
        """The session ``life`` was a head of."""
        return self.lives[sid][life.life]

    def _deleted(self, key: str, old: bytes | None) -> None:
        if key.startswith(self.layout.sessions_prefix + protocol.PROBE_DIR):
            return  # the precondition probe deletes its own objects: no session's
        now = self.clock()
        sid = self.layout.session_of(key)
        if sid is not None:
            self.dirty.add(sid)
            if key.endswith("/head") and old is not None:
                cur = self.current(sid)
                assert cur is not None
                cur.end = now
                life = self.life_of(sid, cur)
                life.deleted_at, life.deleted_by = now, self.who
                if self.who == "rt" and self.decided.get(sid) == life.ident:
                    life.decided = True
                    if not cur.tomb:
                        self._gone(sid, key, old)
                    # The histories it had before its compactions are the same session's:
                    # deleted with it (Log.delete promises their readers no grace either).
                    for earlier in self.lives[sid]:
                        if earlier.ident[:2] == life.ident[:2] and earlier.deleted_at is None:
                            earlier.deleted_at, earlier.deleted_by, earlier.decided = now, self.who, True
                self._disturb(sid, now)
        self.deletes.append((key, now, self.who))
        self.deleted_by[key] = self.who

    def _disturb(self, sid: str, now: int) -> None:
        if self.who in ("rt", "cr", "cp"):
            self.disturbed[sid] = now

    def _gone(self, sid: str, key: str, body: bytes, *, rewritten: bool = False) -> None:
        """The head ``body`` (replaced by a tombstone, or deleted): its chain is legitimately gone."""
        head = decode_head(body, key)
        try:
            data: SessionData = run_direct(self, protocol.load_from_head(self.layout, head, ""))
        except S3LogError as exc:
            self.unloadable.append(f"{key} v{head.version}: {type(exc).__name__}: {exc}")
            return
        ident = _ident(head)
        gone = self.gone.setdefault(sid, {})
        for e in data.entries:
            gone[(e.seq, e.hash)] = ident
        self.history.add(Ended(self.op, self.who, sid, tuple(positions(sid, data.entries, _payload)), rewritten))

    def _landed(self, key: str, body: bytes, old: bytes | None) -> None:
        now = self.clock()
        self.put_raw(key, body, mtime_ms=now)
        if not key.endswith("/head") or key.startswith(self.layout.sessions_prefix + protocol.PROBE_DIR):
            return  # the precondition probe's object is no session's head
        sid = self.layout.session_of(key)
        assert sid is not None
        head = decode_head(body, key)
        self.dangling += [f"{key} v{head.version} lists {k}" for k in head.segments if k not in self._objects]
        lives = self.heads.setdefault(sid, [])
        sessions = self.lives.setdefault(sid, [])
        tomb = protocol.is_expired(head)
        ident = _ident(head)
        prev = self.current(sid)
        if prev is not None:
            prev.end = now
        if prev is not None and tomb and not prev.tomb:
            life = prev.life  # expired: the same session, ended
            sessions[life].expired_at = now
            assert old is not None
            if self.who == "rt" and self.decided.get(sid) == sessions[life].ident:
                sessions[life].decided = True
                self._gone(sid, key, old)
        elif prev is not None and not prev.tomb and sessions[prev.life].ident == ident:
            life = prev.life  # a commit of the same session
        elif prev is not None and not prev.tomb and self.who == "cp" and old is not None:
            # Compacted: a new history at the id; the replaced chain's positions are gone
            # (its payloads are not: invariant 2 still counts them, wherever they are).
            self._gone(sid, key, old, rewritten=True)
            life = len(sessions)
            sessions.append(SessionLife(ident, now))
        else:
            # A new session at the id: at a free id, over a tombstone (a takeover), or
            # (a protocol bug) over another live session, whose entries are then not
            # excused: invariant 1 catches their loss.
            life = len(sessions)
            sessions.append(SessionLife(ident, now))
        lives.append(HeadLife(frozenset(head.segments), now, None, head.retired_at, life, tomb))
        self._disturb(sid, now)
        self.dirty.add(sid)


def perform(store: ObjectStore, op: Op) -> Any:
    """Perform one store request (not a Parallel or Sleep) with no fault, or call a key
    (a :class:`~s3log._protocol.ops.Sign` or :class:`~s3log._protocol.ops.Verify`: no store request)."""
    if isinstance(op, (Parallel, Sleep)):
        raise TypeError(f"not a store request: {op!r}")
    if isinstance(op, KeyOp):
        return call_key(op)
    request: StoreOp = op
    return call_store(store, request)


def run_direct(store: ObjectStore, proc: Proc[Any]) -> Any:
    """Run a procedure to completion against ``store`` with no faults and no time passing
    (the invariant checker's own reads; a driver that does not decode, for tests)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        op, result = step(proc, value, error)
        if op is None:
            return result
        value, error = None, None
        if isinstance(op, Parallel):
            out: list[Any] = []
            for sub in op.ops:
                try:
                    out.append(perform(store, sub))
                except StoreError as exc:
                    out.append(exc)
            value = out
        elif isinstance(op, Sleep):
            value = None
        else:
            try:
                value = perform(store, op)
            except Exception as exc:
                if not isinstance(exc, StoreError) and not isinstance(op, KeyOp):
                    raise
                error = exc


# -------------------------------------------------------------------------------- actors


@dataclass(slots=True)
class Req:
    """One request in flight: its op, index in its Parallel, and driver retry state."""

    index: int
    op: Op
    attempt: int = 1
    started_ms: int = 0
    ready_at: int = 0


@dataclass(eq=False)
class Actor:
    """A simulated process running one procedure at a time."""

    name: str
    proc: Proc[Any] | None = None
    what: str = ""
    reqs: list[Req] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    parallel: bool = False
    sleeping: bool = False
    wake_at: int = 0
    #: The operation under way (its id in the history).
    op: int = 0

    def runnable(self, now: int) -> bool:
        """Whether the scheduler may step this actor now."""
        if now < self.wake_at:
            return False
        if self.reqs:
            return any(r.ready_at <= now for r in self.reqs)
        return True

    def next_ready(self) -> int:
        """The earliest time this actor can move."""
        if self.reqs:
            return max(self.wake_at, min(r.ready_at for r in self.reqs))
        return self.wake_at

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        """The next procedure to run (and what to call it), or None to idle."""
        raise NotImplementedError

    def done(self, sim: Simulation, value: Any) -> None:
        """The procedure returned ``value``."""

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        """The procedure raised ``exc``."""
        raise exc


class WriterActor(Actor):
    """A writer process: opens (or lazily creates) its session, appends unique payloads,
    commits. Crashes lose its core; cancellations abandon a commit at a yield point."""

    def __init__(self, name: str, sid: str, style: str, on_conflict: OnConflict) -> None:
        super().__init__(name)
        self.sid = sid
        self.style = style
        self.on_conflict = on_conflict
        self.core: CommitQueue | None = None
        #: Payloads queued in the current core and not acked yet, in order.
        self.queued: list[str] = []
        self.tickets: dict[str, int] = {}
        self.dead = False
        self.incarnation = 0
        self.count = 0
        self.commits = 0
        #: When this writer last started opening (or creating) its session: retention
        #: and the creator disturbing it since are competitors even in a solo scenario.
        self.opened_at = 0
        #: Keyed appends (Scenario.keyed): the data and key of each keyed payload; the
        #: tickets of retries that stand for an earlier append of their key (joined, or
        #: answered from the head's window), and those whose stored entry must be read;
        #: payloads a crash took unacknowledged, retried by the restarted writer; and
        #: whether a commit ended undecided or was cancelled since the last that did not.
        self.keyed: dict[str, tuple[dict[str, str], str]] = {}
        self.followers: dict[int, str] = {}
        self.lookups: list[int] = []
        self.to_retry: list[str] = []
        self.unsure = False
        self.looking = 0

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        if self.dead:
            self.dead = False
            self.incarnation += 1
            sim.note(self, f"restarts (incarnation {self.incarnation}), opens {sim.short(self.sid)}")
        if self.core is None:
            self.opened_at = sim.now
            return "open", self._open(sim)
        if self.lookups:
            self.looking = self.lookups.pop(0)
            return "lookup", self._lookup(self.looking)
        if sim.retries and not sim.calm and sim.krng.random() < 0.15:
            self.retry(sim)
        r = sim.rng
        if sim.calm:
            if self.core.pending_count == 0:
                self.wake_at = sim.now + 1000
                return None
            self.commits += 1
            return f"commit#{self.commits}", self.core.commit()
        if r.random() < 0.8:
            self.add(sim, r.randint(1, 3))
        if self.core.pending_count == 0 and r.random() < 0.7:
            self.wake_at = sim.now + r.randint(1, 50)
            return None
        self.commits += 1
        return f"commit#{self.commits}", self.core.commit()

    def drop(self, sim: Simulation, why: str) -> None:
        """The core goes away (crash, or the application reopens): what it queued is dropped."""
        sim.dropped.update(self.queued)
        if self.queued:
            sim.note(self, f"{why}: drops unacked {' '.join(self.queued)}")
        self.queued = []
        self.core = None
        self.followers, self.lookups, self.unsure = {}, [], False

    def withdraw(self, sim: Simulation) -> None:
        """Take back a random queued entry; one taken back must never be stored."""
        if self.core is None or not self.queued:
            return
        payload = sim.rng.choice(self.queued)
        taken = self.core.withdraw(self.tickets[payload])
        sim.note(self, f"withdraw {payload}: {'taken back' if taken else 'refused (in a commit)'}")
        if taken:
            self.queued.remove(payload)
            sim.withdrawn.add(payload)
            for sid, chain in sim.chains.items():
                if any(_payload(e) == payload for e in chain):
                    raise Violation("withdraw", f"{payload} was taken back but is stored in {sim.short(sid)}")

    def drained(self) -> bool:
        """Nothing left to commit and no procedure running."""
        return self.proc is None and not self.dead and self.core is not None and self.core.pending_count == 0

    def add(self, sim: Simulation, n: int) -> None:
        """Queue ``n`` entries with unique payloads."""
        assert self.core is not None
        names = []
        for _ in range(n):
            self.count += 1
            payload = f"{self.name}.{self.incarnation}.{self.count}"
            pad = "x" * sim.rng.randint(0, 120)
            data = {"p": payload, "pad": pad}
            key = f"k.{payload}" if sim.scenario.keyed and sim.krng.random() < 0.5 else None
            if key is not None:
                self.keyed[payload] = (data, key)
                sim.keyed.add(payload)
            self.tickets[payload] = self.core.add(KIND, data, None, key=key)
            self.queued.append(payload)
            sim.appended.add(payload)
            names.append(payload)
        sim.note(self, f"append {' '.join(names)} (pending {self.core.pending_count})")

    def retry(self, sim: Simulation) -> None:
        """Append again, with its key, a keyed payload this caller saw no acknowledgement
        for: one a crash took (in the restarted writer), or one still queued after a
        commit ended undecided or was cancelled (joining it). It must be stored once."""
        assert self.core is not None
        candidates = list(self.to_retry) + ([p for p in self.queued if p in self.keyed] if self.unsure else [])
        if not candidates:
            return
        payload = sim.krng.choice(candidates)
        data, key = self.keyed[payload]
        where = sim.stored_in.get(payload)
        if payload in self.to_retry and where is not None and where not in sim.lineage(self.sid):
            # The crashed commit forked after a lost race and its child's head landed
            # unacknowledged: the key is in a session this caller never heard of.
            self.to_retry.remove(payload)
            sim.known("keyed-retry-unknown-fork", self, f"{payload} is stored in {sim.short(where)}, a fork "
                                                        f"its crashed commit made; retried in {sim.short(self.sid)}, "
                                                        "it would be stored again")
            return
        if payload in self.to_retry and where is not None and sim.keys_after(payload, where, self.sid) >= \
                sim.config.append_key_window:
            # Past the documented window: a key reused there is a new key (decision 0037).
            self.to_retry.remove(payload)
            sim.note(self, f"does not retry {payload}: {sim.config.append_key_window} or more keyed appends "
                           "followed it, past the window of keys")
            return
        before = self.core.pending_count
        ticket = self.core.add(KIND, data, None, wait=True, key=key)
        if payload in self.to_retry:
            self.to_retry.remove(payload)
        if self.core.pending_count > before:  # the key is new to this writer and its head
            self.queued.append(payload)
            self.tickets[payload] = ticket
            sim.note(self, f"retry {payload} with its key: queued again (pending {self.core.pending_count})")
            return
        self.followers[ticket] = payload
        lookup = self.core.resolve(ticket) is not None
        if lookup:
            self.lookups.append(ticket)
        sim.note(self, f"retry {payload} with its key: stands for the earlier append"
                       + (" (its entry to be read)" if lookup else ""))
        self.claim(sim)

    def _lookup(self, ticket: int) -> Proc[int]:
        assert self.core is not None
        proc = self.core.resolve(ticket)
        if proc is not None:
            yield from proc
        return ticket

    def claim(self, sim: Simulation) -> None:
        """Acknowledge every retry whose entry is known now (invariants 1, 2)."""
        assert self.core is not None
        for ticket, payload in list(self.followers.items()):
            entry = self.core.claim(ticket)
            if entry is not None:
                del self.followers[ticket]
                sim.ack_retry(self, payload, entry)

    def _open(self, sim: Simulation) -> Proc[ChainPosition]:
        try:
            ws: ChainPosition = yield from sim.core.open(self.sid, None)
        except SessionNotFound:
            # Not stored yet (a lazy create that never landed): create it lazily again.
            ws = sim.core.new_session(self.sid, {"by": self.name}, None)
        return ws

    def done(self, sim: Simulation, value: Any) -> None:
        if isinstance(value, ChainPosition):
            self.core = sim.core.writer(value, None, self.on_conflict, None)
            self.sid = value.session
            sim.note(self, f"opened {sim.short(value.session)} at seq {value.head.seq} "
                           f"({'stored' if value.etag else 'lazy'})")
            return
        if isinstance(value, int):  # a retry's entry read (lookup)
            self.claim(sim)
            return
        assert isinstance(value, CommitResult)
        sim.acknowledge(self, value)
        self.sid = value.session_id
        if self.core is not None and self.core.pending_count == 0:
            self.unsure = False
        if self.followers:
            self.claim(sim)

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        if isinstance(exc, SessionNotFound) and self.core is not None:
            # Its head was deleted while this writer held it (Log.delete, or gc's delete of
            # an expired session's tombstone): documented; the application reopens.
            if not sim.disturbed_since(self.sid, self.opened_at):
                raise Violation("writer", f"{self.name} raised {type(exc).__name__} with no session deleted: {exc}")
            self.drop(sim, "session deleted; reopening")
            return
        if isinstance(exc, ConflictError):
            if sim.scenario.solo and not sim.disturbed_since(self.sid, self.opened_at):
                raise Violation("4", f"{self.name} met a conflict with no competitor: {exc}")
            sim.settle_conflict(self, exc)
            self.drop(sim, "conflict")  # an application told to raise reopens, dropping what was not acked
            return
        if isinstance(exc, SessionExists):
            if sim.scenario.solo and not sim.disturbed_since(self.sid, self.opened_at):
                sim.refresh(self.sid)
                stored = [_payload(e) for e in sim.chains.get(self.sid, [])]
                if stored and stored == self.queued[: len(stored)]:
                    sim.known("create-prefix-taken", self, f"{self.name}: the stored chain is its own "
                                                           f"{' '.join(stored)}: {exc}")
                else:
                    raise Violation("4", f"{self.name} found its session taken with no competitor: {exc}")
            self.drop(sim, "session taken; reopening")
            return
        if isinstance(exc, EntryNotFound) and self.what == "lookup":
            # The entry a retry's key named is gone: only retention may have ended it, in
            # this session or in the one the key names (a fork's parent, expired since).
            if not any(sim.disturbed_since(sid, self.opened_at) for sid in (self.sid, exc.session)):
                raise Violation("1", f"{self.name}: a retry's key names an entry that is gone: {exc}")
            self.followers.pop(self.looking, None)
            return
        if isinstance(exc, StoreError) and self.what == "lookup":
            sim.note(self, f"lookup failed: {type(exc).__name__}: {exc}; reads again later")
            self.lookups.append(self.looking)
            return
        if isinstance(exc, StoreError):
            # Gave up undecided: the pending entries stay queued; the next commit retries them.
            sim.note(self, f"commit failed: {type(exc).__name__}: {exc}")
            self.unsure = True
            return
        if isinstance(exc, CorruptionError) and "is missing" in exc.reason and self.core is None:
            # Opening: a load slower than the grace period (retries) may find a segment of
            # the head it read collected; gc promises no more. Open again.
            retired = sim.retired_since(exc.key)
            if retired is not None and retired >= sim.scenario.grace_ms:
                sim.note(self, f"open outlived the grace period (head retired {retired}ms ago); opening again")
                return
        if isinstance(exc, CorruptionError) and "is missing" in exc.reason and self.core is not None:
            ended = sim.head_ended(self.core.ws.head)
            if ended is not None and sim.now - ended >= sim.scenario.grace_ms:
                sim.known("stale-writer-merge", self, f"{self.name} (its head retired {sim.now - ended}ms ago): {exc}")
                self.drop(sim, "reopening")
                return
        raise Violation("writer", f"{self.name} raised {type(exc).__name__}: {exc}")


class ReaderActor(Actor):
    """Reads sessions: a fresh load (every other one as a bulk reader's runs, the
    analytics scan's path), or a head read now and its segments read later."""

    loads: int = 0

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        r = sim.rng
        sids = sim.stored_sessions()
        if not sids or r.random() < 0.3:
            self.wake_at = sim.now + r.randint(1, 100)
            return None
        sid = r.choice(sids)
        if r.random() < 0.5:
            # Alternating by a count, not a draw: the scenarios' random streams stay as
            # they were (the regression seeds replay what found their bugs).
            self.loads += 1
            if self.loads % 2 == 0:
                return f"runs {sim.short(sid)}", self._runs(sim, sid)
            return f"load {sim.short(sid)}", protocol.load(sim.layout, sid)
        hold = r.randint(0, sim.scenario.grace_ms * 3 // 2)
        return f"hold {sim.short(sid)} {hold}ms", self._held(sim, sid, hold)

    def done(self, sim: Simulation, value: Any) -> None:
        assert isinstance(value, SessionData)
        sim.check_read(self, value)

    def _runs(self, sim: Simulation, sid: str) -> Proc[SessionData]:
        """What ``Log.read_runs`` reads, as the entries its runs hold."""
        head, etag = yield from protocol.read_head(sim.layout, sid)
        head, runs = yield from protocol.load_runs_from_head(sim.layout, head, etag)
        entries: list[Entry] = []
        for run in runs:
            if isinstance(run, RunColumns):
                prevs = [run.prev, *run.hashes[:-1]]
                entries += map(Entry, range(run.seq, run.seq + len(run.hashes)), prevs, run.kinds, run.ts,
                               run.values, run.hashes)
            else:
                entries += run
        return SessionData(head.session, head, etag, entries, {})

    def _held(self, sim: Simulation, sid: str, hold_ms: int) -> Proc[SessionData]:
        head, etag = yield from protocol.read_head(sim.layout, sid)
        self.head_seen = (head, sim.now)
        yield Sleep(hold_ms / 1000)
        return (yield from protocol.load_from_head(sim.layout, head, etag))

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        if isinstance(exc, (StoreError, SessionNotFound)):
            return
        if isinstance(exc, CorruptionError) and "is missing" in exc.reason and self.what.startswith("hold"):
            head, _ = self.head_seen
            ended = sim.head_ended(head)
            if ended is not None and sim.now - ended >= sim.scenario.grace_ms:
                return  # held past the grace period: gc may have collected it
            if sim.deleted_since_held(head, exc.key):
                return  # its session was deleted since (Log.delete promises no grace)
            raise Violation("5", f"{self.name} holding a head retired {sim.now - (ended or sim.now)}ms ago "
                                 f"(grace {sim.scenario.grace_ms}ms) could not read it: {exc}")
        raise Violation("3", f"{self.name} failed to read: {type(exc).__name__}: {exc}")


class GcActor(Actor):
    """Runs gc now and then, with the scenario's grace period on the virtual clock."""

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        self.wake_at = sim.now + sim.rng.randint(0, sim.scenario.grace_ms)
        return "gc", sim.core.writing(protocol.gc(
            sim.layout, older_than_ms=sim.gc_older_than_ms, now=sim.now, dry_run=False,
            commit_deadline_ms=sim.gc_commit_deadline_ms,
        ))

    def done(self, sim: Simulation, value: Any) -> None:
        assert isinstance(value, GcReport)
        if value.deleted:
            sim.note(self, f"deleted {' '.join(sim.short(k) for k in value.deleted)}")
        for sid in value.broken:
            # A head gc could not GET (transient errors) is skipped, which is safe; one
            # that does not load with no fault is corruption, caught by _refresh.
            sim.note(self, f"skipped {sim.short(sid)} (head unreadable to gc)")
            sim.refresh(sid, force=True)

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        if isinstance(exc, StoreError):
            return
        raise Violation("gc", f"gc raised {type(exc).__name__}: {exc}")


class ForkerActor(Actor):
    """Forks a stored session at a random committed seq (contended scenarios only)."""

    at_fork: tuple[int, bool] = (0, False)  # (at_seq, forking a fork) of the fork under way
    target: tuple[str, int] = ("", 0)  # (session, when) of the fork under way

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        r = sim.rng
        sids = sim.stored_sessions()
        self.wake_at = sim.now + r.randint(50, 500)
        if not sids:
            return None
        sid = r.choice(sids)
        self.target = (sid, sim.now)
        return f"fork {sim.short(sid)}", self._fork(sim, sid)

    def _fork(self, sim: Simulation, sid: str) -> Proc[str]:
        head, _ = yield from protocol.read_head(sim.layout, sid)
        at = sim.rng.randint(-1, head.seq)
        self.at_fork = (at, head.parent is not None)
        sim.note(self, f"fork {sim.short(sid)} at seq {at}")
        child: str = yield from sim.core.fork(sid, at, None, None, None, None)
        return child

    def done(self, sim: Simulation, value: Any) -> None:
        sim.note(self, f"forked into {sim.short(value)}")
        sim.history.add(Fork(self.op, self.name, self.target[0], self.at_fork[0], value, explicit=True))

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        if isinstance(exc, (StoreError, SessionNotFound, SessionExists)):
            return
        if isinstance(exc, EntryNotFound) and sim.disturbed_since(*self.target):
            return  # the seq it read is past the end of a session that took the id over since
        if isinstance(exc, CorruptionError) and "no fork entry" in exc.reason and self.at_fork == (-1, True):
            sim.known("fork-before-fork-entry", self, str(exc))
            return
        raise Violation("fork", f"fork raised {type(exc).__name__}: {exc}")


class RetentionActor(Actor):
    """Now and then expires the sessions idle for ``Scenario.idle_ms`` (the retention
    sweep, on the virtual clock) and/or deletes a stored session (``Log.delete``)."""

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        r = sim.rng
        sc = sim.scenario
        self.wake_at = sim.now + r.randint(sc.retention_every_ms // 2, sc.retention_every_ms * 3 // 2)
        if sc.retention == "expire" or (sc.retention == "both" and r.random() < 0.5):
            return "expire", sim.core.writing(
                retention.expire(sim.layout, sim.config, idle_for_ms=sc.idle_ms, now=sim.now))
        sids = sim.stored_sessions()
        if not sids:
            return None
        sid = r.choice(sids)
        return f"delete {sim.short(sid)}", sim.core.writing(protocol.delete_session(sim.layout, sid, sim.config))

    def done(self, sim: Simulation, value: Any) -> None:
        if isinstance(value, ExpireReport):
            sim.note(self, f"expired {' '.join(sim.short(s) for s in value.expired) or 'none'}"
                           f"{' raced ' + ' '.join(sim.short(s) for s in value.raced) if value.raced else ''}"
                           f"{' errors ' + str(len(value.errors)) if value.errors else ''}")
        else:
            sim.note(self, f"deleted {value} objects")

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        # Documented: a session taken over meanwhile (SessionReplaced), one gone already
        # (SessionNotFound), a store that kept failing or heads that kept moving.
        if isinstance(exc, (StoreError, SessionNotFound, SessionReplaced)):
            return
        raise Violation("retention", f"{self.what} raised {type(exc).__name__}: {exc}")


def _drop_oldest(history: list[dict[str, Any]], head: Head) -> list[dict[str, Any]] | None:
    """A prune: every entry but the oldest (no change for one entry or none). A fork
    child is left alone: compacted, its seed's entries (its parent's) would become its
    own, which invariant 2 would count as stored in two sessions."""
    return history[1:] if len(history) > 1 and head.parent is None else None


class CompactorActor(Actor):
    """Now and then compacts a stored session (``Log.compact``), dropping its oldest
    entry: every kept entry gets a new seq and hash, and a writer whose reply was lost
    must still store its entries once."""

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        r = sim.rng
        self.wake_at = sim.now + r.randint(50, 400)
        sids = sim.stored_sessions()
        if not sids:
            return None
        sid = r.choice(sids)
        return f"compact {sim.short(sid)}", protocol.compact_session(sim.layout, sim.config, sid, _drop_oldest)

    def done(self, sim: Simulation, value: Any) -> None:
        sim.note(self, "compacted" if value else "nothing to compact")

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        # Documented: a commit landed first (ConflictError), the session is gone or
        # expired, or the store kept failing.
        if isinstance(exc, (StoreError, SessionNotFound, ConflictError)):
            return
        raise Violation("compactor", f"{self.what} raised {type(exc).__name__}: {exc}")


class CreatorActor(Actor):
    """Takes over ids retention expired or deleted: ``Log.create(sid)`` (an empty head,
    over the tombstone or at the free id), or ``append_latest`` with ``create_meta``
    (entries of its own, acknowledged like any writer's)."""

    count = 0
    #: The payloads of the append under way, and the session it appends to.
    sending: tuple[str, list[str]] = ("", [])
    #: With keyed appends: the entries of the append under way, and of the last that
    #: failed, which is sent again with the same keys (``append_latest(keys=)``).
    entries: tuple[tuple[str, Any], ...] = ()
    redo: tuple[str, list[str], tuple[tuple[str, Any], ...]] | None = None

    def start(self, sim: Simulation) -> tuple[str, Proc[Any]] | None:
        r = sim.rng
        self.wake_at = sim.now + r.randint(20, sim.scenario.retention_every_ms)
        if self.redo is not None and sim.krng.random() < 0.5:
            sid, names, self.entries = self.redo
            self.redo, self.sending = None, (sid, names)
            return (f"append {sim.short(sid)} {' '.join(names)} again",
                    sim.core.append_latest(sid, self.entries, {"by": self.name}, None, [f"k.{p}" for p in names]))
        ended = [sid for sid, lives in sim.store.lives.items()
                 if any(lf.expired_at is not None or lf.deleted_at is not None for lf in lives)]
        if not ended:
            return None
        sid = r.choice(ended)
        if r.random() < 0.4:
            ws = sim.core.new_session(sid, {"by": self.name}, None)
            return f"create {sim.short(sid)}", sim.core.create(ws)
        names = []
        for _ in range(r.randint(1, 2)):
            self.count += 1
            names.append(f"{self.name}.{self.count}")
        sim.appended.update(names)
        self.sending = (sid, names)
        self.entries = entries = tuple((KIND, {"p": p, "pad": "x" * r.randint(0, 60)}) for p in names)
        keys = [f"k.{p}" for p in names] if sim.retries else None
        if keys:
            sim.keyed.update(names)
        return (f"append {sim.short(sid)} {' '.join(names)}",
                sim.core.append_latest(sid, entries, {"by": self.name}, None, keys))

    def done(self, sim: Simulation, value: Any) -> None:
        if isinstance(value, ChainPosition):
            sim.note(self, f"created {sim.short(value.session)}")
            return
        assert isinstance(value, CommitResult)
        sid, names = self.sending
        got = [_payload(e) for e in value.acked]
        if got != names:
            raise Violation("2", f"{self.name} appended {names} to {sim.short(sid)}, acked {got}")
        sim.ack_direct(self, value.acked, value.session_id)

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        if self.what.startswith("append"):
            sim.dropped.update(self.sending[1])  # not acknowledged (it may have landed)
            if sim.retries and isinstance(exc, StoreError):
                self.redo = (*self.sending, self.entries)  # sent again, with the same keys
        if isinstance(exc, (StoreError, SessionExists)):
            return
        raise Violation("creator", f"{self.what} raised {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------------- simulation


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


class Simulation:
    """One seeded run. :meth:`run` returns an :class:`Outcome`."""

    def __init__(self, scenario: Scenario, *, trace: bool = False, known_bugs: frozenset[str] = frozenset()) -> None:
        self.scenario = scenario
        self.known_bugs = known_bugs
        self.known_hits: Counter[str] = Counter()
        self.calm = False
        self.rng = random.Random(f"sim-{scenario.seed}")
        #: Every choice keyed appends add (Scenario.keyed), apart from the others.
        self.krng = random.Random(f"sim-keys-{scenario.seed}")
        self.retries = scenario.keyed and not scenario.compactor
        self.keyed: set[str] = set()
        self.now = EPOCH_MS
        self.layout = Layout("sim")
        self.store = SimStore(lambda: self.now, self.layout)
        if scenario.probe:
            self.store.honours_preconditions = False
        self.env = Env.deterministic(scenario.seed, lambda: self.now)
        self.config = LogConfig(
            tail_max_bytes=scenario.tail_max_bytes,
            pending_max_bytes=scenario.pending_max_bytes,
            tail_per_commit=scenario.tail_per_commit,
            fanout=scenario.fanout,
            cache_levels=scenario.cache_levels,
            retry=RetryPolicy(attempts=scenario.attempts, initial=0.02, max_backoff=1.0, max_time=30.0),
            commit_deadline_ms=scenario.commit_deadline_ms,
            env=self.env,
        )
        self.core = LogCore(self.store, "sim", self.config, None)
        # What gc is told (the invariants hold it to scenario.grace_ms): tests shorten
        # these to check that invariant 5 catches a gc that deletes too early.
        self.gc_older_than_ms = scenario.grace_ms
        self.gc_commit_deadline_ms = scenario.commit_deadline_ms
        self.tracing = trace
        self.lines: list[str] = []
        self.names: dict[str, str] = {}
        self.step_no = 0
        self.requests = 0
        self.injected = 0
        self.forks = 0
        self.appended: set[str] = set()
        self.dropped: set[str] = set()
        self.withdrawn: set[str] = set()
        # payload -> (session, seq, hash) where it was acknowledged
        self.acked: dict[str, tuple[str, int, bytes]] = {}
        self.acked_by_session: dict[str, list[str]] = {}
        self.chains: dict[str, list[Entry]] = {}
        #: The session (created_at, creator) whose chain ``chains`` holds, per id.
        self.idents: dict[str, Ident | None] = {}
        #: The session each acknowledged payload was acknowledged in (an id may see several).
        self.ack_life: dict[str, Ident | None] = {}
        #: The session each stored payload is in (invariant 2 across chains: an entry
        #: stored in two sessions, e.g. forked twice, is duplicated too).
        self.stored_in: dict[str, str] = {}
        #: The parent of each fork child loaded (invariant 7).
        self.parent_of: dict[str, str] = {}
        # Requests of abandoned procedures still on their way: (actor, op, latest landing).
        self.ghosts: list[tuple[str, Op, int]] = []
        #: id(request) -> the operation that sent it, for requests landing after their
        #: operation was abandoned (set just before each can land).
        self.ghost_ops: dict[int, int] = {}
        sids = [self.env.new_id() for _ in range(scenario.sessions)]
        for i, sid in enumerate(sids):
            self.names[sid] = f"S{i}"
        self.actors: list[Actor] = []
        for i, (s, style, oc) in enumerate(scenario.writers):
            self.actors.append(WriterActor(f"w{i}", sids[s], style, oc))
        self.actors += [ReaderActor(f"r{i}") for i in range(scenario.readers)]
        if scenario.gc:
            self.actors.append(GcActor("gc"))
        if scenario.forker:
            self.actors.append(ForkerActor("fk"))
        if scenario.compactor:
            self.actors.append(CompactorActor("cp"))
        if scenario.retention:
            self.actors.append(RetentionActor("rt"))
            if scenario.creator:
                self.actors.append(CreatorActor("cr"))

    # ------------------------------------------------------------------------ tracing

    def short(self, text: str) -> str:
        """``text`` with session ids as S0, S1... and segment keys abbreviated."""
        prefix = self.layout.sessions_prefix
        if text.startswith(prefix):
            sid = self.layout.session_of(text)
            if sid is not None:
                rest = text[len(prefix) + len(sid) + 1:]
                if rest.startswith("seg/"):
                    parsed = parse_segment_key(rest)
                    nonce = rest.rsplit("-", 1)[-1].split(".")[0]
                    if parsed is not None:
                        rest = f"seg/{parsed[0]}-{parsed[1].hex()[:6]}-{nonce[:4]}"
                elif rest.startswith("forks/"):
                    rest = "forks/" + self._name(rest[len("forks/"):])
                return f"{self._name(sid)}/{rest}"
        return self._name(text) if text in self.names else text

    def _name(self, sid: str) -> str:
        if sid not in self.names:
            self.names[sid] = f"S{len(self.names)}"
        return self.names[sid]

    def note(self, actor: Actor | None, text: str) -> None:
        """One trace line (kept only when tracing)."""
        if self.tracing:
            who = actor.name if actor else "sim"
            self.lines.append(f"{self.step_no:5d} t={self.now - EPOCH_MS:7d} {who:3s} {text}")

    def _describe(self, op: Op) -> str:
        if isinstance(op, (Get, PutIfAbsent, PutIfMatch, Delete, DeleteIfMatch)):
            return f"{type(op).__name__} {self.short(op.key)}"
        if isinstance(op, ListKeys):
            return f"ListKeys {self.short(op.prefix)}"
        return type(op).__name__

    def _result(self, value: Any) -> str:
        if isinstance(value, BaseException):
            return f"{type(value).__name__}"
        if isinstance(value, str):
            return f"ok {value[:9]}"
        if hasattr(value, "objects"):
            return f"ok {len(value.objects)} objects {len(value.prefixes)} prefixes"
        return "ok"

    # ------------------------------------------------------------------------ running

    def run(self) -> Outcome:
        """Run the scenario; stop at the first violation."""
        violation: Violation | None = None
        self.note(None, self.scenario.describe())
        try:
            for step in range(1, self.scenario.steps + 1):
                self.step_no = step
                self._tick(self.actors)
            self.check(full=True)
            self._drain()
            self.check(full=True)
            events = self._check_history()
        except Violation as v:
            violation = v
            events = 0
            self.note(None, f"VIOLATION {v}")
        return Outcome(self.scenario, violation, self.step_no, self.requests, len(self.acked), self.forks,
                       self.injected, self.lines, dict(self.known_hits), events)

    @property
    def history(self) -> History:
        """What the actors did and saw, and the store applied (recorded by the store)."""
        return self.store.history

    def _check_history(self) -> int:
        """Record a final read of every session and hold the whole history to the model of
        the promise (:func:`s3log.testing.history.check`); return how many events it checked."""
        for sid in self.store.heads:
            self.history.read(0, "end", sid, positions(sid, self.chains.get(sid, []), _payload), final=True)
        found = check_history(self.history)
        if found:
            raise Violation(f"history/{found[0].rule}", f"{found[0].message} ({len(found)} in all)")
        return len(self.history)

    def _tick(self, actors: Sequence[Actor]) -> None:
        self.now += self.rng.randint(0, self.scenario.max_advance_ms)
        self._events()
        ready = [a for a in actors if a.runnable(self.now)]
        if not ready:
            self.now = max(self.now, min(a.next_ready() for a in actors))
            ready = [a for a in actors if a.runnable(self.now)]
        self._step(self.rng.choice(ready))
        self.check()

    def _drain(self) -> None:
        """Liveness: with faults, crashes and cancellations over and nobody appending,
        every writer must get its pending entries committed."""
        self.calm = True
        self.note(None, "calm: no more faults, crashes, cancellations or appends; writers drain")
        for actor in self.actors:
            if isinstance(actor, CreatorActor) and actor.proc is not None and actor.what.startswith("append"):
                # It stops here (only writers run from now on): what it was appending is
                # not acknowledged, and its request in flight lands or not.
                self.dropped.update(actor.sending[1])
                self._abandon(actor, "calm", ghosts=False)
        while self.ghosts:
            who, op, _ = self.ghosts.pop(0)
            if self.rng.random() < 0.5:
                self._land(who, op, "ghost lands")
        writers = [a for a in self.actors if isinstance(a, WriterActor)]
        for _ in range(DRAIN_STEPS):
            if all(w.drained() for w in writers):
                lost = sorted(self.appended - set(self.acked) - self.dropped - self.withdrawn)
                if lost:
                    raise Violation("2", f"appended, never acked nor dropped, with every writer drained: {lost[:5]}")
                return
            self.step_no += 1
            self._tick(writers)
        stuck = [f"{w.name} (pending {w.core.pending_count if w.core else '-'}, {w.what or 'idle'})"
                 for w in writers if not w.drained()]
        raise Violation("liveness", f"writers could not commit with no faults in {DRAIN_STEPS} steps: {stuck}")

    def _events(self) -> None:
        """Crashes, cancellations, ghost requests landing, appends during a commit."""
        r = self.rng
        sc = self.scenario
        if self.calm:
            return
        writers = [a for a in self.actors if isinstance(a, WriterActor) and not a.dead]
        for ghost in [g for g in self.ghosts if g[2] < self.now]:
            # A request lives a bounded time: one not arrived by then never will.
            self.ghosts.remove(ghost)
            self.note(None, f"ghost expires ({ghost[0]}): {self._describe(ghost[1])} never lands")
        if self.ghosts and r.random() < 0.1:
            who, op, _ = self.ghosts.pop(r.randrange(len(self.ghosts)))
            self._land(who, op, "ghost lands")
        if writers and sc.crash_rate and r.random() < sc.crash_rate:
            self._crash(r.choice(writers))
        busy_async = [w for w in writers if w.style == "async" and w.proc is not None and w.what.startswith("commit")]
        if busy_async and sc.cancel_rate and r.random() < sc.cancel_rate * 5:
            self._cancel(r.choice(busy_async))
        committing = [w for w in writers if w.core is not None and w.proc is not None]
        if committing and r.random() < 0.05:
            # Another task or thread of the same writer appends while a commit is in flight.
            r.choice(committing).add(self, 1)
        holding = [w for w in writers if w.core is not None and w.queued]
        if holding and r.random() < 0.02:
            r.choice(holding).withdraw(self)

    def _abandon(self, actor: Actor, why: str, ghosts: bool) -> None:
        """Stop ``actor``'s procedure at its yield point; decide each request in flight."""
        for req in actor.reqs:
            if not isinstance(req.op, (PutIfAbsent, PutIfMatch, Delete, DeleteIfMatch)):
                continue
            fate: Fate = self.rng.choice(("dropped", "landed", "ghost") if ghosts else ("dropped", "landed"))
            self.ghost_ops[id(req.op)] = actor.op
            if fate == "landed":
                self._land(actor.name, req.op, f"{why}: in-flight request lands")
            elif fate == "ghost":
                self.ghosts.append((actor.name, req.op, self.now + GHOST_LIFETIME_MS))
                self.note(actor, f"{why}: in-flight {self._describe(req.op)} will land later")
            else:
                self.note(actor, f"{why}: in-flight {self._describe(req.op)} dropped")
        if actor.proc is not None:
            self.history.fail(actor.op, actor.name, why)
            actor.proc.close()
        actor.proc, actor.reqs, actor.results, actor.sleeping = None, [], [], False

    def _land(self, who: str, op: Op, why: str) -> None:
        self.store.who = who
        self.store.op = self.ghost_ops.pop(id(op), 0)
        try:
            res: Any = perform(self.store, op)
        except StoreError as exc:
            res = exc
        self.requests += 1
        self.note(None, f"{why} ({who}): {self._describe(op)} -> {self._result(res)}")

    def _crash(self, w: WriterActor) -> None:
        self.note(w, f"CRASH (pending {w.core.pending_count if w.core else 0} vanish)")
        # A restart takes longer than any request lives: a crashed process's requests
        # are decided before it comes back (in solo scenarios this keeps the promise's
        # premise, "no competitor"; a later zombie write is a competitor).
        self._abandon(w, "crash", ghosts=False)
        # Requests still on their way from commits this process abandoned earlier (an
        # async cancellation) are decided now too, before the restart: otherwise the
        # restarted writer would meet its own previous life as a competitor.
        for ghost in [g for g in self.ghosts if g[0] == w.name]:
            self.ghosts.remove(ghost)
            if self.rng.random() < 0.5:
                self._land(ghost[0], ghost[1], "ghost lands before the restart")
            else:
                self.note(None, f"ghost dies with the crash ({ghost[0]}): {self._describe(ghost[1])} never lands")
        if self.retries:
            lost = [p for p in [*w.queued, *w.followers.values(), *w.to_retry] if p in w.keyed and p not in self.acked]
            w.to_retry = list(dict.fromkeys(lost))
        w.drop(self, "crash")
        w.dead = True
        w.wake_at = self.now + self.rng.randint(1, 500)

    def _cancel(self, w: WriterActor) -> None:
        self.note(w, f"CANCEL {w.what}")
        if w.what.startswith("commit"):
            w.unsure = True  # (not drawn from, so a scenario without keys runs as before)
        self._abandon(w, "cancel", ghosts=self.scenario.ghosts)
        w.wake_at = self.now + self.rng.randint(0, 50)

    def _step(self, actor: Actor) -> None:
        if actor.proc is None:
            started = actor.start(self)
            if started is None:
                return
            actor.what, actor.proc = started
            actor.op = self.history.invoke(actor.name, actor.what.split(" ")[0].split("#")[0],
                                           getattr(actor, "sid", ""))
            self.note(actor, f"start {actor.what}")
            self._advance(actor, None, None)
            return
        if actor.sleeping:
            actor.sleeping = False
            self._advance(actor, None, None)
            return
        ready = [r for r in actor.reqs if r.ready_at <= self.now]
        req = self.rng.choice(ready)
        value = self._execute(actor, req)
        if isinstance(value, StoreError) and self._retry(req, value):
            return
        actor.reqs.remove(req)
        if not actor.parallel:
            if isinstance(value, BaseException):
                self._advance(actor, None, value)
            else:
                self._advance(actor, value, None)
            return
        actor.results[req.index] = value
        if not actor.reqs:
            self._advance(actor, actor.results, None)

    def _retry(self, req: Req, exc: StoreError) -> bool:
        """The driver repeats an idempotent request after a transient error (as drive.py does)."""
        if not is_retryable(req.op) or not decide.may_retry_read(decide.classify(exc)):
            return False
        policy = self.config.retry
        if req.attempt >= policy.attempts or self.now - req.started_ms >= policy.max_time * 1000:
            return False
        req.ready_at = self.now + int(policy.backoff(req.attempt, self.rng) * 1000)
        req.attempt += 1
        return True

    def _advance(self, actor: Actor, value: Any, error: BaseException | None) -> None:
        """Resume the procedure; park it on its next op (or finish it)."""
        assert actor.proc is not None
        try:
            op = actor.proc.throw(error) if error is not None else actor.proc.send(value)
        except StopIteration as stop:
            actor.proc = None
            actor.done(self, stop.value)
            return
        except S3LogError as exc:
            actor.proc = None
            self.history.fail(actor.op, actor.name, type(exc).__name__)
            self.note(actor, f"{actor.what} raised {type(exc).__name__}: {exc}")
            actor.failed(self, exc)
            return
        if isinstance(op, KeyOp):
            # A signature takes no virtual time and meets no store fault: made at once.
            try:
                signed = call_key(op)
            except Exception as exc:
                self._advance(actor, None, exc)
            else:
                self._advance(actor, signed, None)
            return
        if isinstance(op, Sleep):
            actor.sleeping = True
            actor.wake_at = self.now + int(op.seconds * 1000)
            self.note(actor, f"sleep {int(op.seconds * 1000)}ms")
            return
        if isinstance(op, Parallel):
            if not op.ops:
                self._advance(actor, [], None)
                return
            actor.parallel = True
            actor.reqs = [Req(i, o, 1, self.now, self.now) for i, o in enumerate(op.ops)]
            actor.results = [None] * len(op.ops)
        else:
            actor.parallel = False
            actor.reqs = [Req(0, op, 1, self.now, self.now)]

    def _fault(self, op: Op) -> Fault | None:
        sc = self.scenario
        if self.calm or not sc.fault_rate or self.rng.random() >= sc.fault_rate:
            return None
        fault: Fault = self.rng.choice(sc.faults)
        # S3 answers 409 and 412 only to conditional requests.
        if fault in ("409", "412") and not isinstance(op, (PutIfAbsent, PutIfMatch, DeleteIfMatch)):
            return None
        return fault

    def _execute(self, actor: Actor, req: Req) -> Any:
        """Perform one request, maybe with a fault; the result or the StoreError."""
        op = req.op
        fault = self._fault(op)
        self.requests += 1
        perform_it = fault in (None, "timeout-landed") or (fault == "reset" and self.rng.random() < 0.5)
        value: Any
        if perform_it:
            self.store.who = actor.name
            self.store.op = actor.op
            try:
                value = perform(self.store, op)
            except StoreError as exc:
                value = exc
            if self.scenario.decode and actor.parallel:
                value = decoded(op, value)
        if fault is not None:
            self.injected += 1
            key = getattr(op, "key", None)
            if fault == "409":
                value = ConditionalRequestConflict("injected 409", key=key, code="ConditionalRequestConflict",
                                                   status=409)
            elif fault == "412":
                value = PreconditionFailed("injected 412", key=key, code="PreconditionFailed", status=412)
            elif fault == "503":
                value = TransientStoreError("injected throttle", key=key, code="SlowDown", status=503)
            elif fault == "reset":
                value = TransientStoreError(f"injected reset ({'landed' if perform_it else 'lost'})", key=key,
                                            code="ConnectionReset")
            else:
                value = TransientStoreError(f"injected {fault}", key=key, code="RequestTimeout")
        if self.tracing:
            tag = f" [{fault}{'/landed' if fault == 'reset' and perform_it else ''}]" if fault else ""
            retry = f" (try {req.attempt})" if req.attempt > 1 else ""
            self.note(actor, f"{self._describe(op)}{retry}{tag} -> {self._result(value)}")
        return value

    # --------------------------------------------------------------------- bookkeeping

    def stored_sessions(self) -> list[str]:
        """Sessions with a head stored now, in order of first creation."""
        return [s for s, lives in self.store.heads.items() if lives]

    def known(self, name: str, actor: Actor | None, detail: str) -> None:
        """A known protocol bug struck: a violation if asked to replay it, else counted."""
        if name in self.known_bugs:
            raise Violation(name, f"{KNOWN_BUGS[name]}: {detail}")
        self.known_hits[name] += 1
        self.note(actor, f"KNOWN BUG {name}: {detail}")

    def retired_since(self, key: str) -> int | None:
        """How long ago the last head listing segment ``key`` stopped being current
        (None if one still is, or none ever listed it)."""
        sid = self.layout.session_of(key)
        ends = [life.end for life in self.store.heads.get(sid or "", []) if key in life.segments]
        if not ends or any(e is None for e in ends):
            return None
        return self.now - max(e for e in ends if e is not None)

    def head_ended(self, head: Head) -> int | None:
        """When the head whose segments ``head`` lists stopped being current (None if it still is)."""
        lives = self.store.heads.get(head.session, [])
        segs = frozenset(head.segments)
        ended: int | None = None
        for life in lives:
            if life.segments == segs and not life.tomb:
                ended = life.end
        return ended

    def deleted_since_held(self, head: Head, key: str) -> bool:
        """Whether the session of ``head`` (its session's life at the id, not a later
        one) was deleted by ``Log.delete`` since, or expired and its segment ``key``
        deleted by ``Log.delete`` of the id: no grace promised."""
        ident = _ident(head)
        segs = frozenset(head.segments)
        for life in self.store.heads.get(head.session, []):
            lf = self.store.life_of(head.session, life)
            if life.segments == segs and not life.tomb and lf.ident == ident:
                if lf.deleted_at is not None and lf.deleted_by == "rt" and lf.decided:
                    return True
                return lf.decided and lf.expired_at is not None and self.store.deleted_by.get(key) == "rt"
        return False

    def disturbed_since(self, sid: str, t: int) -> bool:
        """Whether retention or the creator changed ``sid`` at ``t`` or later."""
        return self.store.disturbed.get(sid, -1) >= t

    def acknowledge(self, w: WriterActor, result: CommitResult) -> None:
        """Record what a commit acknowledged; check it at once (invariants 1, 2, 4)."""
        if result.fork is None:
            self._ack_entries(w, result.acked, result.session_id)
            return
        self.forks += 1
        self.note(w, f"FORK {self.short(result.fork.parent.session)}@{result.fork.parent.seq} -> "
                     f"{self.short(result.fork.child)}")
        if self.scenario.solo and not self.disturbed_since(result.fork.parent.session, w.opened_at):
            raise Violation("4", f"{w.name} forked with no competitor: {result.fork}")
        # entries = what landed in the first fork's parent, then each fork's fork entry
        # and what went to its child. A commit can fork more than once: it continues an
        # undecided fork of an earlier commit, then loses a race there and forks again
        # (CommitResult.forks). acked = the same entries without the fork entries.
        forks = result.forks or (result.fork,)
        for f in forks:
            self.history.add(Fork(w.op, w.name, f.parent.session, f.parent.seq, f.child))
        groups: list[tuple[str, list[Entry]]] = [(forks[0].parent.session, [])]
        for e in result.entries:
            if e.kind == FORK_KIND:
                if len(groups) > len(forks):
                    raise Violation("2", f"{w.name}'s commit holds more fork entries than forks: {forks}")
                groups.append((forks[len(groups) - 1].child, []))
            else:
                groups[-1][1].append(e)
        if len(groups) != len(forks) + 1 or [e for _, g in groups for e in g] != list(result.acked):
            raise Violation("2", f"{w.name}'s commit result does not add up: {len(groups) - 1} fork entries "
                                 f"for {len(forks)} forks")
        for sid, group in groups:
            self._ack_entries(w, group, sid)

    def _ack_entries(self, w: WriterActor, acked: Sequence[Entry], sid: str) -> None:
        self.ack_direct(w, acked, sid)
        done = [_payload(e) for e in acked]
        if w.queued[: len(done)] != done:
            raise Violation("2", f"{w.name} acked {done}, but its queue starts with {w.queued[:len(done)]}")
        del w.queued[: len(done)]

    def ack_direct(self, who: Actor, acked: Sequence[Entry], sid: str) -> None:
        """Record entries acknowledged in ``sid``; check them at once (invariants 1, 2)."""
        self.history.ack(who.op, who.name, positions(sid, acked, _payload))
        names = []
        for e in acked:
            payload = _payload(e)
            # Each acknowledged entry names its own session (a split batch spans two).
            if getattr(e, "session_id", sid) != sid:
                raise Violation("1", f"{payload} acked at {self.short(sid)}@{e.seq} but says it is in "
                                     f"{self.short(getattr(e, 'session_id', ''))}")
            if payload in self.acked:
                raise Violation("2", f"{payload} acked twice: first {self._where(self.acked[payload])}, "
                                     f"again at {self.short(sid)}@{e.seq}")
            self.acked[payload] = (sid, e.seq, e.hash)
            self.acked_by_session.setdefault(sid, []).append(payload)
            names.append(f"{payload}@{e.seq}")
        self.refresh(sid)
        self._check_acked(sid, [_payload(e) for e in acked])
        self.note(who, f"acked in {self.short(sid)}: {' '.join(names) or 'nothing'}")

    def keys_after(self, payload: str, where: str, sid: str) -> int:
        """How many keyed entries follow ``payload`` (stored in ``where``) in the chains
        of ``where`` and of ``sid``, the session a retry of it goes to."""
        chain = self.chains.get(where, [])
        at = next((i for i, e in enumerate(chain) if _payload(e) == payload), len(chain))
        later = [e for e in chain[at + 1:] if _payload(e) in self.keyed]
        if sid != where:
            later += [e for e in self.chains.get(sid, []) if e.seq > chain[at].seq and _payload(e) in self.keyed] \
                if at < len(chain) else []
        return len({_payload(e) for e in later})

    def lineage(self, sid: str) -> list[str]:
        """``sid`` and the sessions it forked from, as loaded (nearest first)."""
        out = [sid]
        while out[-1] in self.parent_of and self.parent_of[out[-1]] not in out:
            out.append(self.parent_of[out[-1]])
        return out

    def ack_retry(self, w: WriterActor, payload: str, entry: AckedEntry) -> None:
        """A keyed retry answered with the entry stored the first time: it must be that
        payload's, where any earlier acknowledgement of it said, and there now."""
        sid = entry.session_id
        self.history.ack(w.op, w.name, positions(sid, [entry], _payload), retry=True)
        at = (sid, entry.seq, entry.hash)
        if _payload(entry) != payload:
            raise Violation("2", f"{w.name}'s retry of {payload} was answered with {_payload(entry)} at "
                                 f"{self._where(at)}")
        first = self.acked.get(payload)
        if first is not None and first != at:
            raise Violation("2", f"{payload} acked at {self._where(first)}, its retry at {self._where(at)}")
        if first is None:
            self.acked[payload] = at
            self.acked_by_session.setdefault(sid, []).append(payload)
        self.refresh(sid)
        self._check_acked(sid, [payload])
        self.note(w, f"retry acked in {self.short(sid)}: {payload}@{entry.seq}")

    def settle_conflict(self, w: WriterActor, err: ConflictError) -> None:
        """A ConflictError's ``landed`` entries are acknowledged in the writer's session."""
        self._ack_entries(w, list(err.landed), err.session)

    def _where(self, at: tuple[str, int, bytes]) -> str:
        return f"{self.short(at[0])}@{at[1]}"

    # ---------------------------------------------------------------------- invariants

    def check(self, *, full: bool = False) -> None:
        """Re-verify every session the last step changed (every session when ``full``)."""
        if self.store.dangling:
            raise Violation("6", f"a head landed listing a segment not stored: {self.store.dangling[0]}")
        if self.store.unloadable:
            raise Violation("3", f"a head retention ended did not load: {self.store.unloadable[0]}")
        self._check_deletes()
        dirty = set(self.store.heads) if full else set(self.store.dirty)
        for sid in sorted(dirty):
            self.refresh(sid, force=True)
        self._check_markers(dirty)

    def _check_markers(self, dirty: set[str]) -> None:
        """Invariant 7, for the sessions that changed and the children of those that did
        (a marker's DELETE dirties its parent)."""
        for child, parent in sorted(self.parent_of.items()):
            if child not in dirty and parent not in dirty:
                continue
            current = self.store.current(child)
            if current is None or current.tomb:
                continue
            if self.layout.fork_marker(parent, child) in self.store._objects:
                continue
            # Log.delete of the parent deletes the markers in its folder: excused if it
            # came after this child's marker could have been written (up to the landing
            # bound before its first head), not for an earlier session at the parent's id.
            since = self.store.lives[child][-1].start - protocol.landing_bound_ms(self.scenario.commit_deadline_ms)
            if any(lf.deleted_by == "rt" and lf.deleted_at is not None and lf.deleted_at >= since
                   for lf in self.store.lives.get(parent, [])):
                continue
            by = self.store.deleted_by.get(self.layout.fork_marker(parent, child), "nobody")
            raise Violation("7", f"fork child {self.short(child)} has a head but no marker under its parent "
                                 f"{self.short(parent)} (deleted by {by})")

    def refresh(self, sid: str, *, force: bool = False) -> None:
        """Load ``sid`` afresh if it changed since its last check (invariants 1, 2, 3)."""
        if not force and sid in self.chains and sid not in self.store.dirty:
            return
        self.store.dirty.discard(sid)
        lives = self.store.heads.get(sid)
        for e in self.chains.get(sid, []):
            if self.stored_in.get(_payload(e)) == sid:
                del self.stored_in[_payload(e)]
        current = self.store.current(sid)
        if not lives or current is None or current.tomb:
            # No session at the id (never stored, deleted) or an expired one's tombstone:
            # every entry acknowledged there must be one retention legitimately removed.
            self.chains[sid] = []
            self.idents[sid] = None
            self._check_acked(sid, self.acked_by_session.get(sid, []))
            return
        try:
            data: SessionData = run_direct(self.store, protocol.load(self.layout, sid))
        except S3LogError as exc:
            raise Violation("3", f"session {self.short(sid)} does not load: {type(exc).__name__}: {exc}") from exc
        self.chains[sid] = data.entries
        self.idents[sid] = _ident(data.head)
        if data.head.parent is not None:
            self.parent_of[sid] = data.head.parent.session
        else:
            self.parent_of.pop(sid, None)
        seen = Counter(_payload(e) for e in data.entries if e.kind != FORK_KIND)
        twice = sorted(p for p, n in seen.items() if n > 1)
        if twice:
            raise Violation("2", f"session {self.short(sid)} stores {twice[:3]} more than once")
        for p in seen:
            other = self.stored_in.setdefault(p, sid)
            if other != sid:
                raise Violation("2", f"{p} is stored in two sessions: {self.short(other)} and {self.short(sid)}")
        back = sorted(self.withdrawn.intersection(seen))
        if back:
            raise Violation("withdraw", f"session {self.short(sid)} stores {back[:3]}, which were taken back")
        self._check_acked(sid, self.acked_by_session.get(sid, []))

    def check_read(self, reader: Actor, data: SessionData) -> None:
        """A reader's view (perhaps of an old head) agrees with every acknowledgement:
        a session's heads form one linear history, so seq s holds the same entry in all
        (of that session: one that took the id over after an expiry or a delete has a
        history of its own)."""
        self.history.read(reader.op, reader.name, data.session, positions(data.session, data.entries, _payload))
        ident = _ident(data.head)
        for e in data.entries:
            at = self.acked.get(_payload(e))
            if at is not None and at[0] == data.session and self.ack_life.get(_payload(e)) == ident \
                    and (at[1] != e.seq or at[2] != e.hash):
                raise Violation("1", f"{reader.name} read {_payload(e)} at {self.short(data.session)}@{e.seq}, "
                                     f"acked at {self._where(at)}")
        last = data.entries[-1].seq if data.entries else -1
        for p in self.acked_by_session.get(data.session, []):
            _, seq, h = self.acked[p]
            if seq <= last and data.entries[seq].hash != h and self.ack_life.get(p) == ident:
                raise Violation("1", f"{reader.name} read {_payload(data.entries[seq])} at "
                                     f"{self.short(data.session)}@{seq}, where {p} was acked")

    def _check_acked(self, sid: str, payloads: list[str]) -> None:
        """Each acknowledged entry is in the chain stored at ``sid``, at its seq with its
        hash, unless it was in the chain of a head an expiry or a delete replaced (and
        only that head's: the store recorded its chain as it ended)."""
        chain = self.chains.get(sid, [])
        gone = self.store.gone.get(sid, {})
        for p in payloads:
            _, seq, h = self.acked[p]
            found = chain[seq] if seq < len(chain) else None
            if found is not None and found.hash == h and _payload(found) == p:
                self.ack_life.setdefault(p, self.idents.get(sid))
                continue
            ended = gone.get((seq, h))
            if ended is not None:
                self.ack_life.setdefault(p, ended)
                continue
            what = "nothing" if found is None else f"{_payload(found)}"
            raise Violation("1", f"acked {p} at {self.short(sid)}@{seq} is lost: the chain holds {what} there "
                                 f"(chain length {len(chain)})")

    def _check_deletes(self) -> None:
        grace = self.scenario.grace_ms
        for key, t, who in self.store.deletes:
            sid = self.layout.session_of(key)
            if sid is None or "/seg/" not in key:
                continue
            lives = self.store.heads.get(sid, [])
            for i, life in enumerate(lives):
                lf = self.store.life_of(sid, life)
                if lf.deleted_by == "rt" and lf.decided and lf.deleted_at is not None and lf.deleted_at <= t:
                    continue  # its session was deleted (Log.delete): no grace promised
                if who == "rt" and lf.decided and lf.expired_at is not None and lf.expired_at <= t:
                    # Log.delete of the id removes what an expired session there left for
                    # gc too (its readers' grace ends with the delete), but never anything
                    # of a session that has not ended.
                    continue
                if key in life.segments and life.start <= t and (life.end is None or life.end >= t - grace):
                    state = "still current" if life.end is None else f"retired {t - life.end}ms before"
                    detail = f"gc deleted {self.short(key)} at t={t - EPOCH_MS}, referenced by a head {state} " \
                             f"(grace {grace}ms)"
                    nxt = lives[i + 1] if i + 1 < len(lives) else None
                    if nxt is not None and nxt.retired_at is not None and t - nxt.retired_at >= grace:
                        # gc counted the grace from when the retiring commit was planned,
                        # not from when its head landed (nxt.start).
                        self.known("retired-at-plan-time", None, f"{detail}; the head retiring it was planned "
                                   f"at t={nxt.retired_at - EPOCH_MS} but landed at t={nxt.start - EPOCH_MS}")
                        break
                    raise Violation("5", detail)
        self.store.deletes = []


def _payload(e: Entry) -> str:
    data = e.data
    if isinstance(data, dict) and isinstance(data.get("p"), str):
        return str(data["p"])
    return f"<{e.kind}@{e.seq}>"


# ----------------------------------------------------------------------------- campaigns


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
    "keyed-retry-unknown-fork": "a writer's commit of a keyed entry loses a race and forks; the child's head "
                                "lands but the writer crashes before it learns of the child: the restarted "
                                "writer opens the parent and retries the key there, which does not find it "
                                "(it is in the child's window), so it is stored again (decision 0037). The "
                                "simulated caller does not retry such an entry",
    "stale-writer-merge": "a writer whose view of the head is stale (its commit landed unacknowledged: "
                          "cancelled, or it raised; or another writer moved on) plans its next flush from "
                          "the old head; once gc collected the segments that head listed, the merge's GET "
                          "raises CorruptionError (missing segment) before the head PUT could tell it to "
                          "adopt or fork, and so does every later commit",
}


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
