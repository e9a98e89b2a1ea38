"""Committing a batch after the head a writer knows, sans-IO; forking or raising on conflict.

A :class:`CommitPlan` holds what a commit needs; :func:`commit`, :func:`renew` (a
lease renewal or release: the head is written even with nothing pending) and
:func:`take_over` (a new session over an expired one's tombstone) run it. After a lost
race the decisions are :func:`s3log._protocol.decide.after_lost`: acknowledge what
landed, adopt a head that ends with our entries, raise, or fork the rest
(:mod:`s3log._protocol.fork`). Also :func:`create_session`, which stores an empty head.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic

from s3log._format.chain import PendingEntry, build_chain
from s3log._format.layout import Layout
from s3log._format.values import Entry, Head, ParentRef
from s3log._protocol import decide
from s3log._protocol.append_keys import inherited_keys, key_window
from s3log._protocol.compact import compactions, landed_before_compaction
from s3log._protocol.fork import create_fork
from s3log._protocol.ops import Proc
from s3log._protocol.read import landed_prefix, read_head_or_none
from s3log._protocol.state import ChainPosition, CommitJournal, ForkDoubt, LeasePlan, same_life
from s3log._protocol.write import HeadOutcome, adopt, advance, stale_position, takeover_position, write_head
from s3log.config import LogConfig, OnConflict
from s3log.errors import ConflictError, SessionExists, SessionNotFound, StoreError
from s3log.reducer import Reducer, S, fold
from s3log.results import AckedEntry, CommitResult, ForkInfo, acked_in

log = logging.getLogger("s3log")


@dataclass(frozen=True, slots=True)
class CommitPlan(Generic[S]):
    """What a commit needs: where it writes, what, and what it may find stored already.

    ``ws``: the head the writer knows (the commit goes on after it). ``pending``: the
    entries to commit, in order. ``on_conflict``: after a lost race to another writer,
    fork the rest (``"fork"``) or raise :class:`~s3log.errors.ConflictError`
    (``"raise"``). ``lease``: what this commit records about the head's lease.

    ``maybe_landed``: an earlier commit of these entries ended undecided, so some may
    be stored already in this session: how many leading ones (those queued since were
    never sent); None, all of them. Otherwise only a head PUT of this commit with an
    unknown outcome can have stored them: after definite refusals, entries found in
    the other writer's chain are that writer's (equal entries, e.g. the same kind, ts
    and data appended at the same place by two writers), not ours.

    ``journal``: kept true of what this commit may have stored, for its caller to read
    if it raises or is abandoned (:class:`~s3log._protocol.state.CommitJournal`); its
    ``forks`` are the forks earlier commits of these entries left undecided: one that
    forks from the same place forks into that same child
    (:func:`~s3log._protocol.fork.create_fork`), so the entries cannot be stored in two
    children. None: the commit keeps its own.
    """

    layout: Layout
    cfg: LogConfig
    reducer: Reducer[S]
    ws: ChainPosition[S]
    pending: Sequence[PendingEntry]
    on_conflict: OnConflict = "fork"
    lease: LeasePlan | None = None
    maybe_landed: int | None = None
    journal: CommitJournal | None = None


def commit(plan: CommitPlan[S]) -> Proc[CommitResult[S]]:
    """Commit ``plan.pending`` after the head ``plan.ws`` knows; fork or raise on conflict.

    A commit with nothing pending writes nothing, not even the head of a session not
    stored yet (a lazily created session stays unstored until it has an entry; use
    :func:`create_session` to store an empty one). ``CommitResult.acked`` holds the
    committed form of each pending entry, in order, wherever it landed. The decisions
    after a lost race are :func:`s3log._protocol.decide.after_lost`.
    """
    if not plan.pending:
        return CommitResult(plan.ws, [], [])
    return (yield from _Run.start(plan, over_tombstone=False).drive())


def renew(plan: CommitPlan[S]) -> Proc[CommitResult[S]]:
    """:func:`commit`, writing the head even with nothing pending (a lease renewal or
    release, ``plan.lease``), if the session is stored."""
    if not plan.pending and plan.ws.etag is None:
        return CommitResult(plan.ws, [], [])
    return (yield from _Run.start(plan, over_tombstone=False).drive())


def take_over(plan: CommitPlan[S]) -> Proc[CommitResult[S]]:
    """:func:`commit` of a new session over an expired one's tombstone: ``plan.ws`` is
    set up to replace it (If-Match on its ETag, :func:`~s3log._protocol.write.takeover_position`);
    losing the race means the id is taken."""
    if not plan.pending:
        return CommitResult(plan.ws, [], [])
    return (yield from _Run.start(plan, over_tombstone=True).drive())


@dataclass(frozen=True, slots=True)
class _ForkFrom(Generic[S]):
    """Where a commit forks the rest of its batch from: after the ``landed`` entries
    (``done``, ``state`` folded over them) that are stored; ``found``, the head that
    made it fork, and ``why``, for the fork's record and log."""

    landed: int
    done: Sequence[Entry]
    state: S
    found: dict[str, Any] | None
    why: str


@dataclass(slots=True)
class _Run(Generic[S]):
    """A commit in progress: where it stands, what is left, what it has made durable."""

    plan: CommitPlan[S]
    journal: CommitJournal
    ws: ChainPosition[S]
    pending: Sequence[PendingEntry]
    #: How many leading entries of ``pending`` may be stored already where this commit
    #: writes: only those are looked for after a lost race (decision 0025).
    uncertain: int
    #: This commit creates the session over an expired one's tombstone (If-Match on it).
    over_tombstone: bool
    attempts_left: int
    #: Each entry stamped with the session it is stored in (AckedEntry): one commit may
    #: store a prefix in the parent and the rest in a fork.
    acked: list[AckedEntry] = field(default_factory=list)
    #: Every entry made durable (acked, and a fork entry among them if this commit
    #: continued in a fork an earlier one left undecided), and where it forked to.
    durable: list[AckedEntry] = field(default_factory=list)
    forked: ForkInfo | None = None
    forks: list[ForkInfo] = field(default_factory=list)

    @classmethod
    def start(cls, plan: CommitPlan[S], *, over_tombstone: bool) -> _Run[S]:
        """The run of ``plan``, before its first attempt."""
        journal = plan.journal if plan.journal is not None else CommitJournal(plan.ws.session)
        uncertain = len(plan.pending) if plan.maybe_landed is None else plan.maybe_landed
        return cls(plan, journal, plan.ws, plan.pending, uncertain, over_tombstone, plan.cfg.retry.attempts)

    def result(self, ws: ChainPosition[S]) -> CommitResult[S]:
        """The commit's result, the writer going on from ``ws``."""
        return CommitResult(ws, self.durable, self.acked, self.forked, tuple(self.forks))

    def drive(self) -> Proc[CommitResult[S]]:
        """Attempt the commit until it is decided or out of attempts."""
        while self.attempts_left > 0:
            self.attempts_left -= 1
            done = yield from self.attempt()
            if done is not None:
                return done
        raise StoreError(f"could not commit session {self.ws.session}: the head kept changing under this writer")

    def attempt(self) -> Proc[CommitResult[S] | None]:
        """Write the rest of the batch after ``ws`` once; None: attempt again."""
        plan, ws, journal = self.plan, self.ws, self.journal
        if plan.on_conflict == "fork" and _fork_point(ws) in journal.forks:
            ended = yield from self.parent_ended()
            if ended is not None:
                return (yield from self.fork_rest(ended))
        entries = build_chain(self.pending, after_seq=ws.head.seq, after_hash=ws.head.hash)
        # An earlier commit of these entries found a prefix of them stored here, forked the
        # rest and left that fork undecided: its child may hold the rest. Only the prefix
        # is written here (the session may be gone and this a new one at the id, which no
        # race will reveal); the rest follows into that same child, as below.
        cut = _landed_before_expiry(ws.session, entries, journal.forks) if journal.forks else 0
        if not 0 < cut < len(entries):
            cut = 0
        try:
            head_plan, outcome, written = yield from write_head(
                plan.layout, plan.cfg, ws, entries[:cut] if cut else entries, lease=plan.lease, journal=journal,
                sources=self.pending[:cut] if cut else self.pending)
        except SessionNotFound:
            if not self.over_tombstone or journal.in_doubt:
                raise
            # The tombstone this create replaced (If-Match) was deleted meanwhile, and
            # no PUT of ours can have landed (404, nothing in doubt): the id is free now,
            # so the session is created there as on a missing id (create-only).
            self.ws, self.over_tombstone = replace(ws, etag=None), False
            return None
        if outcome.uncertain:
            self.uncertain = len(entries)
        if outcome.kind == "committed" and outcome.etag is not None and head_plan is not None and not cut:
            state = fold(plan.reducer, ws.state, entries)
            stored = acked_in(ws.session, entries)
            return CommitResult(advance(plan.cfg, ws, head_plan, outcome.etag, state, written, outcome.fetched),
                                self.durable + stored, self.acked + stored, self.forked, tuple(self.forks))
        if outcome.kind == "committed" and outcome.etag is not None and head_plan is not None:
            # The prefix is stored: the rest goes on from its end into the doubt's child.
            done = entries[:cut]
            # Into a copy, as below: the fork may still fail, and the writer's state (which
            # its next commit folds these into again) must hold only what it acknowledged.
            state = fold(plan.reducer, copy.deepcopy(ws.state), done)
            self.ws = ws = advance(plan.cfg, ws, head_plan, outcome.etag, state, written, outcome.fetched)
            self.acked += acked_in(ws.session, done)
            self.durable += acked_in(ws.session, done)
            found = dict(ws.head.summary(), etag=ws.etag)
            fork_from = _ForkFrom(cut, done, state, found, "an undecided fork holds the rest of this batch")
        else:
            lost = yield from self.after_lost(entries, outcome)
            if not isinstance(lost, _ForkFrom):
                return lost
            fork_from = lost
        return (yield from self.fork_rest(fork_from))

    def parent_ended(self) -> Proc[_ForkFrom[S] | None]:
        """Where to fork from if an earlier commit of this batch forked from exactly where
        the writer stands and left that fork undecided, and the chain it forked from has
        ended since; None to write here as usual.

        That fork was made because the head had moved past here: while it still has, a
        PUT here loses and the fork is found again (after_lost, fork_rest). If the
        session is gone, expired or another one, or its head is back here (deleted and
        written again up to here, as a commit that found a prefix of its batch landed
        before the end does), a PUT here can win and no race would reveal the child,
        which may hold the rest: stored twice. One GET of the head tells, paid only by a
        commit standing where an undecided fork starts.
        """
        ws = self.ws
        current = yield from read_head_or_none(self.plan.layout, ws.session)
        if current is not None:
            head = current[0]
            back_here = head.seq == ws.head.seq and head.hash == ws.head.hash
            if not head.expired and same_life(head, ws.head) and not back_here:
                return None
        found = dict(current[0].summary(), etag=current[1]) if current is not None else None
        return _ForkFrom(0, (), ws.state, found, "the chain it forked from ended after an undecided fork from here")

    def after_lost(self, entries: Sequence[Entry], outcome: HeadOutcome) -> Proc[CommitResult[S] | _ForkFrom[S] | None]:
        """After the head PUT lost to ``outcome.found``: the result, where to fork from,
        or None to attempt again (the decisions are :func:`decide.after_lost`)."""
        plan, ws = self.plan, self.ws
        if outcome.found is None:
            raise StoreError(f"commit to session {ws.session} lost its head without finding another")
        found_head, found_etag = outcome.found
        if ws.etag is None and found_head.expired:
            # The id is an expired session's: a new session takes it over, as it would
            # one deleted (nothing of ours can be in a tombstone, which lists no entries).
            self.ws, self.over_tombstone = takeover_position(ws, found_head, found_etag, plan.cfg.env.now_ms()), True
            self.attempts_left += 1
            return None
        # A create that landed unacknowledged is ours, not a taken id: the stored head
        # carries the creator nonce this writer put in it. A creator that is not ours
        # proves our create never landed: equal entries there are the other writer's.
        ours = ws.head.creator is not None and found_head.creator == ws.head.creator
        creating = (ws.etag is None or self.over_tombstone) and not ours
        others = creating and ws.head.creator is not None  # (a position built without a nonce cannot tell)
        landed = yield from self.landed(entries, found_head, ours=ours, others=others)
        done = entries[:landed]
        ends_at = done[-1].hash if done else ws.head.hash
        step = decide.after_lost(
            creating=creating,
            batch=len(entries),
            landed=landed,
            stored_ends_at_ours=found_head.seq == (done[-1].seq if done else ws.head.seq)
            and found_head.hash == ends_at,
            on_conflict=plan.on_conflict,
        )
        if isinstance(step, decide.IdTaken):
            raise SessionExists(ws.session)
        # A reducer may fold into the state it is given: entries that landed are folded
        # into a copy, so that if this commit still fails, the writer's state (which the
        # next commit folds them into again) holds only what it acknowledged.
        state = fold(plan.reducer, copy.deepcopy(ws.state), done) if done else ws.state
        self.acked += acked_in(ws.session, done)
        self.durable += acked_in(ws.session, done)
        if isinstance(step, decide.AckAll):
            # Not adopting: someone built on our entries. They are durable, but this
            # writer's view is behind; its next commit meets the other writer and forks.
            return self.result(adopt(ws, found_head, found_etag, state) if step.adopt
                               else stale_position(ws, done, state))
        if isinstance(step, decide.AdoptAndRetry):
            log.info("session %s: adopting a head that ends with this writer's own entries", ws.session)
            self.ws = adopt(ws, found_head, found_etag, state)
            self.pending = self.pending[landed:]
            self.uncertain = max(0, self.uncertain - landed)
            if landed:
                # Adopting a head that holds part of this batch is progress, not a
                # failed attempt (at most one per entry): counted as one, a writer
                # allowed a single attempt adopted, ran out and raised, losing the
                # adopted position, on every commit after an undecided PUT.
                self.attempts_left += 1
            return None
        self.ws = ws = stale_position(ws, done, state) if done else ws
        found = dict(found_head.summary(), etag=found_etag)
        if isinstance(step, decide.RaiseConflict):
            raise ConflictError(ws.session, dict(ws.head.summary(), etag=ws.etag), found, landed=self.acked)
        return _ForkFrom(landed, done, state, found, f"lost a race to writer {found_head.writer}")

    def landed(self, entries: Sequence[Entry], found: Head, *, ours: bool, others: bool) -> Proc[int]:
        """How many of ``entries`` are stored in the chain ``found`` (0 when another
        writer's create proves none of ours landed: ``others``)."""
        ws, uncertain, forks = self.ws, self.uncertain, self.journal.forks
        landed = (yield from landed_prefix(self.plan.layout, found, entries[:uncertain])) if uncertain and not others \
            else 0
        if not landed and uncertain and not others and (ours or same_life(found, ws.head)) \
                and compactions(found) > compactions(ws.head):
            # Compacted since: the new chain's hashes are not ours to find. (A lazy
            # create's head is stamped when it lands: its creator nonce says ours.)
            landed = landed_before_compaction(self.plan.layout, ws.head, found, entries[:uncertain])
        if not landed and forks and (found.expired or not same_life(found, ws.head)):
            # Expired since, or deleted and another session took the id over.
            landed = _landed_before_expiry(ws.session, entries, forks)
        return landed

    def fork_rest(self, at: _ForkFrom[S]) -> Proc[CommitResult[S] | None]:
        """Fork what did not land into a new child (or the one an undecided fork left);
        None when that child holds only part of it: the rest goes on there."""
        plan, ws, journal = self.plan, self.ws, self.journal
        parent = _fork_point(ws)
        rest = self.pending[at.landed:]
        # A fork an earlier commit of these entries left undecided, from this same place:
        # forked into again (same id), so its late or landed head and this one cannot
        # both be stored (both are create-only PUTs of one key).
        doubt = journal.forks.get(parent)
        # The child remembers the parent's append keys up to the fork (those of entries
        # found landed too): a retry in the child finds an append stored before it.
        window = key_window(plan.cfg, ws.head.append_keys, at.done, self.pending[:at.landed])
        fork_ws, fork_entries = yield from create_fork(
            plan.layout, plan.cfg, parent, plan.reducer.to_seed(at.state), plan.reducer, ws.head.meta, rest,
            lease=plan.lease, journal=journal, doubt=doubt, inherit=inherited_keys(ws.session, window, parent.seq),
        )
        self.forked = ForkInfo(parent, fork_ws.session, at.found)
        self.forks.append(self.forked)
        # Both ids and the reason, as text and as record attributes an application's
        # handler can route on (after the fork exists: the record names a real session).
        log.warning("session %s: %s; forked into %s at seq %d (reason: %s)%s", ws.session, at.why, fork_ws.session,
                    parent.seq, parent.reason, ", as an undecided commit had" if doubt else "",
                    extra={"s3log_session": ws.session, "s3log_fork": fork_ws.session,
                           "s3log_fork_reason": parent.reason, "s3log_fork_why": at.why})
        # fork_entries[0] is the fork entry; the rest of the batch follows it.
        self.acked += acked_in(fork_ws.session, fork_entries[1:])
        self.durable += acked_in(fork_ws.session, fork_entries)
        if len(fork_entries) - 1 == len(rest):
            return self.result(fork_ws)
        # The undecided fork holds only part of the batch: the rest goes on in that
        # child. An earlier commit may have gone on there too and left its PUT undecided
        # (it may land yet): the rest may be stored there, and while this commit writes
        # there, the child is where its entries may be (the journal's fork doubt).
        if doubt is None:  # (a fork is continued only from a doubt; conservative if not)
            doubt = ForkDoubt(parent, fork_ws.session, fork_ws.head.creator or "", fork_entries[0].ts, len(rest))
        self.ws, self.pending = fork_ws, rest[len(fork_entries) - 1:]
        self.uncertain = max(0, doubt.carried - (len(fork_entries) - 1))
        journal.forks[parent] = replace(doubt, carried=max(doubt.carried, len(rest)))
        journal.fork_sent = True
        self.attempts_left += 1
        return None


def _fork_point(ws: ChainPosition[Any]) -> ParentRef:
    """The parent a fork of the rest of a batch names when made from ``ws`` (and the key
    of an undecided one in the journal)."""
    return ParentRef(ws.session, ws.head.seq, ws.head.hash, "conflict")


def _landed_before_expiry(session: str, entries: Sequence[Entry], forks: Mapping[ParentRef, ForkDoubt]) -> int:
    """How many of ``entries`` an earlier commit found landed in ``session`` before it
    expired (or was deleted and the id taken over), as the fork it left undecided from
    there proves (0 if none).

    That commit found a prefix of these entries stored, forked from the end of it, and
    left the fork undecided (its child may hold the rest). The tombstone that replaced
    the head lists no entries (a new session at the id holds none of ours), so the
    prefix cannot be found again; but the doubt's
    parent names it exactly (its seq and hash are those of our own chain's entry):
    forking from the same place forks into the same child, rather than storing the
    rest a second time in a new one.
    """
    for k in range(len(entries) - 1, -1, -1):
        if ParentRef(session, entries[k].seq, entries[k].hash, "conflict") in forks:
            return k + 1
    return 0


def create_session(layout: Layout, cfg: LogConfig, ws: ChainPosition[S]) -> Proc[ChainPosition[S]]:
    """Store the empty head of a new session (``If-None-Match: *``); SessionExists if taken.

    An id whose session expired (its head a tombstone) is taken over, as one deleted is.
    """
    plan, outcome, written = yield from write_head(layout, cfg, ws, [])
    if outcome.kind != "committed" and outcome.found is not None and outcome.found[0].expired:
        fresh = ws
        ws = takeover_position(ws, outcome.found[0], outcome.found[1], cfg.env.now_ms())
        try:
            plan, outcome, written = yield from write_head(layout, cfg, ws, [])
        except SessionNotFound:
            # The tombstone was deleted meanwhile (Log.delete): the id is free, create it.
            ws = fresh
            plan, outcome, written = yield from write_head(layout, cfg, ws, [])
    if outcome.kind == "committed" and outcome.etag is not None and plan is not None:
        return advance(cfg, ws, plan, outcome.etag, ws.state, written)
    raise SessionExists(ws.session)
