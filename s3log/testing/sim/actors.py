"""The simulated processes: writers, readers, gc, a forker, retention, a compactor and
a creator taking over ended ids.

Each :class:`Actor` runs one protocol procedure at a time; the simulation steps it one
request at a time. Its own room because this is where the callers' side of the
promise lives: what each process does next (drawn from the simulation's generators),
and which of its errors are documented behaviour (a conflict, a session deleted under
it) and which break an invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3log._api.queue import CommitQueue
from s3log._format.columns import RunColumns
from s3log._format.values import Entry, Head
from s3log._protocol import retention
from s3log._protocol.compact import compact_session
from s3log._protocol.delete import delete_session, gc
from s3log._protocol.ops import Op, Proc, Sleep
from s3log._protocol.read import load, load_from_head, load_runs_from_head, read_head
from s3log._protocol.state import ChainPosition, SessionData
from s3log.config import OnConflict
from s3log.errors import (
    ConflictError,
    CorruptionError,
    EntryNotFound,
    SessionExists,
    SessionNotFound,
    SessionReplaced,
    StoreError,
)
from s3log.results import CommitResult, ExpireReport, GcReport
from s3log.testing.history import Fork
from s3log.testing.sim.outcome import Violation
from s3log.testing.sim.store import _payload

if TYPE_CHECKING:
    from s3log.testing.sim.simulation import Simulation

#: The kind of every entry the simulated callers append.
KIND = "k"


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
        #: answered from the head's window or a fork's), and those whose stored entry must
        #: be read; payloads a crash took unacknowledged, retried by the restarted writer;
        #: retries queued again (a commit may answer them from a fork: :meth:`answered`);
        #: and whether a commit ended undecided or was cancelled since the last that did not.
        self.keyed: dict[str, tuple[dict[str, str], str]] = {}
        #: When each keyed payload was first appended (virtual ms).
        self.keyed_at: dict[str, int] = {}
        self.followers: dict[int, str] = {}
        self.lookups: list[int] = []
        self.to_retry: list[str] = []
        self.requeued: set[str] = set()
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
        self.followers, self.lookups, self.unsure, self.requeued = {}, [], False, set()

    def withdraw(self, sim: Simulation) -> None:
        """Take back a random queued entry; one taken back must never be stored."""
        if self.core is None or not self.queued:
            return
        payload = sim.rng.choice(self.queued)
        taken = self.core.withdraw(self.tickets[payload])
        sim.note(self, f"withdraw {payload}: {'taken back' if taken else 'refused (in a commit)'}")
        if taken:
            self.queued.remove(payload)
            if payload in self.requeued:
                # A keyed retry queued again: taking it back takes back this attempt only;
                # an earlier one (a crashed incarnation's commit) may have stored it.
                self.requeued.discard(payload)
                return
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
                self.keyed_at[payload] = sim.now
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
        if payload in self.to_retry and where is not None and sim.keys_after(payload, where, self.sid) >= \
                sim.config.append_key_window:
            # Past the documented window: a key reused there is a new key (decision 0037).
            self.to_retry.remove(payload)
            sim.note(self, f"does not retry {payload}: {sim.config.append_key_window} or more keyed appends "
                           "followed it, past the window of keys")
            return
        related = self._lineage(sim) & sim.ancestors(where) if where is not None else set()
        if payload in self.to_retry and where is not None and (
            not related or any(sim.disturbed_since(sid, self.keyed_at.get(payload, 0)) for sid in related)
        ):
            # The chains it was appended to ended since (retention deleted or expired them,
            # or the creator took the id over) and this writer is in a new one: the key's
            # window went with them (decision 0037).
            self.to_retry.remove(payload)
            sim.note(self, f"does not retry {payload}: stored in {sim.short(where)}, a chain this writer's "
                           "no longer continues")
            return
        before = self.core.pending_count
        ticket = self.core.add(KIND, data, None, wait=True, key=key)
        if payload in self.to_retry:
            self.to_retry.remove(payload)
        if self.core.pending_count > before:  # the key is new to this writer and its head
            self.queued.append(payload)
            self.tickets[payload] = ticket
            self.requeued.add(payload)
            sim.note(self, f"retry {payload} with its key: queued again (pending {self.core.pending_count})")
            return
        self.followers[ticket] = payload
        lookup = self.core.resolve(ticket) is not None
        if lookup:
            self.lookups.append(ticket)
        sim.note(self, f"retry {payload} with its key: stands for the earlier append"
                       + (" (its entry to be read)" if lookup else ""))
        self.claim(sim)

    def _lineage(self, sim: Simulation) -> set[str]:
        """This writer's session and those its chain descends from: its head's parent,
        then each one's as the ledger last read it."""
        assert self.core is not None
        head = self.core.ws.head
        return {head.session} | (sim.ancestors(head.parent.session) if head.parent is not None else set())

    def answered(self, sim: Simulation, acked: Sequence[Entry]) -> None:
        """Acknowledge each retry queued again that a commit answered with the entry a
        fork of the session holds (its crashed first attempt forked): it is not among
        the entries the commit ``acked``, as nothing was written for it."""
        assert self.core is not None
        carried = {_payload(e) for e in acked}
        for payload in [p for p in self.queued if p in self.requeued and p not in carried]:
            entry = self.core.claim(self.tickets[payload])
            if entry is not None:
                self.queued.remove(payload)
                self.requeued.discard(payload)
                sim.ack_retry(self, payload, entry)

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
        self.answered(sim, value.acked)
        sim.acknowledge(self, value)
        self.sid = value.session_id
        if self.core is not None and self.core.pending_count == 0:
            self.unsure = False
        if self.followers:
            self.claim(sim)

    def failed(self, sim: Simulation, exc: BaseException) -> None:
        if self.core is not None and self.what.startswith("commit"):
            self.answered(sim, exc.landed if isinstance(exc, ConflictError) else ())
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
            return f"load {sim.short(sid)}", load(sim.layout, sid)
        hold = r.randint(0, sim.scenario.grace_ms * 3 // 2)
        return f"hold {sim.short(sid)} {hold}ms", self._held(sim, sid, hold)

    def done(self, sim: Simulation, value: Any) -> None:
        assert isinstance(value, SessionData)
        sim.check_read(self, value)

    def _runs(self, sim: Simulation, sid: str) -> Proc[SessionData]:
        """What ``Log.read_runs`` reads, as the entries its runs hold."""
        head, etag = yield from read_head(sim.layout, sid)
        head, runs = yield from load_runs_from_head(sim.layout, head, etag)
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
        head, etag = yield from read_head(sim.layout, sid)
        self.head_seen = (head, sim.now)
        yield Sleep(hold_ms / 1000)
        return (yield from load_from_head(sim.layout, head, etag))

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
        return "gc", sim.core.writing(gc(
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
        head, _ = yield from read_head(sim.layout, sid)
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
        return f"delete {sim.short(sid)}", sim.core.writing(delete_session(sim.layout, sid, sim.config))

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
        return f"compact {sim.short(sid)}", compact_session(sim.layout, sim.config, sid, _drop_oldest)

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
                    sim.core.append_latest(sim.core.prepare_latest(
                        sid, self.entries, {"by": self.name}, None, [f"k.{p}" for p in names])))
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
                sim.core.append_latest(sim.core.prepare_latest(sid, entries, {"by": self.name}, None, keys)))

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
