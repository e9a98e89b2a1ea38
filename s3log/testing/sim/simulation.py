"""One seeded run: the event loop of the simulator.

Each step the virtual clock moves on a few milliseconds, crashes, cancellations and
requests of abandoned procedures landing happen, and one runnable actor is stepped:
one request of its procedure performed against the :class:`~s3log.testing.sim.store.SimStore`
(perhaps with an injected fault), the result sent back. The books and the invariants
checked after every step are the :class:`~s3log.testing.sim.ledger.Ledger` this
:class:`Simulation` extends.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from s3log._api.core import LogCore
from s3log._format.layout import Layout
from s3log._protocol import decide
from s3log._protocol.ops import (
    Delete,
    DeleteIfMatch,
    Get,
    KeyOp,
    ListKeys,
    Op,
    Parallel,
    PutIfAbsent,
    PutIfMatch,
    Sleep,
    call_key,
    decoded,
    is_retryable,
)
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import S3LogError, StoreError
from s3log.testing.sim.actors import (
    Actor,
    CompactorActor,
    CreatorActor,
    ForkerActor,
    GcActor,
    ReaderActor,
    Req,
    RetentionActor,
    WriterActor,
)
from s3log.testing.sim.ledger import Ledger
from s3log.testing.sim.outcome import Outcome, Violation
from s3log.testing.sim.scenario import EPOCH_MS, Fault, Scenario
from s3log.testing.sim.store import SimStore, injected_error, perform

#: How long a request of a cancelled procedure may stay on its way before it lands (or
#: never does): well under every scenario's commit deadline, as a real request's
#: lifetime (client and server timeouts) is well under the default 10 minutes.
GHOST_LIFETIME_MS = 500
#: Steps the writers get to commit what they hold once the faults stop.
DRAIN_STEPS = 400
#: What a request in flight does when its actor dies or is cancelled.
Fate = Literal["dropped", "landed", "ghost"]


class Simulation(Ledger):
    """One seeded run. :meth:`run` returns an :class:`Outcome`."""

    def __init__(self, scenario: Scenario, *, trace: bool = False, known_bugs: frozenset[str] = frozenset()) -> None:
        super().__init__(scenario, trace=trace, known_bugs=known_bugs)
        self.calm = False
        self.rng = random.Random(f"sim-{scenario.seed}")
        #: Every choice keyed appends add (Scenario.keyed), apart from the others.
        self.krng = random.Random(f"sim-keys-{scenario.seed}")
        self.retries = scenario.keyed and not scenario.compactor
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
        self.step_no = 0
        self.requests = 0
        self.injected = 0
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
            value = injected_error(fault, getattr(op, "key", None), landed=perform_it)
        if self.tracing:
            tag = f" [{fault}{'/landed' if fault == 'reset' and perform_it else ''}]" if fault else ""
            retry = f" (try {req.attempt})" if req.attempt > 1 else ""
            self.note(actor, f"{self._describe(op)}{retry}{tag} -> {self._result(value)}")
        return value
