"""The simulation's books, and the invariants held against them.

:class:`Ledger` records what the callers appended, were told (acknowledgements and
forks), dropped or took back, and where each payload is stored; after every step that
changed the store it loads the sessions that changed and checks the invariants (1-7,
listed in :mod:`s3log.testing.sim`). Its own room because it decides whether what
happened keeps the promise, apart from the event loop that makes it happen
(:mod:`s3log.testing.sim.simulation`, whose :class:`Simulation` keeps these books).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from s3log._format.layout import Layout, parse_segment_key
from s3log._format.values import FORK_KIND, Entry, Head
from s3log._protocol.delete import landing_bound_ms
from s3log._protocol.read import load
from s3log._protocol.state import SessionData
from s3log.errors import ConflictError, S3LogError
from s3log.results import AckedEntry, CommitResult
from s3log.testing.history import Fork, History, positions
from s3log.testing.history import check as check_history
from s3log.testing.sim.actors import Actor, WriterActor
from s3log.testing.sim.outcome import KNOWN_BUGS, Violation
from s3log.testing.sim.scenario import EPOCH_MS, Scenario
from s3log.testing.sim.store import Ident, SimStore, _ident, _payload, run_direct


class Ledger:
    """The books of one run and the invariants checked against them; the event loop
    (:class:`~s3log.testing.sim.simulation.Simulation`) extends it and runs the clock."""

    #: Set by the event loop: the virtual clock, the step under way, the store and its layout.
    now: int
    step_no: int
    layout: Layout
    store: SimStore

    def __init__(self, scenario: Scenario, *, trace: bool, known_bugs: frozenset[str]) -> None:
        self.scenario = scenario
        self.known_bugs = known_bugs
        self.known_hits: Counter[str] = Counter()
        self.keyed: set[str] = set()
        self.tracing = trace
        self.lines: list[str] = []
        self.names: dict[str, str] = {}
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

    @property
    def history(self) -> History:
        """What the actors did and saw, and the store applied (recorded by the store)."""
        return self.store.history

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

    def ancestors(self, sid: str) -> set[str]:
        """``sid`` and the sessions it descends from, as the ledger last read their heads."""
        out: set[str] = set()
        current: str | None = sid
        while current is not None and current not in out:
            out.add(current)
            current = self.parent_of.get(current)
        return out

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

    def _check_history(self) -> int:
        """Record a final read of every session and hold the whole history to the model of
        the promise (:func:`s3log.testing.history.check`); return how many events it checked."""
        for sid in self.store.heads:
            self.history.read(0, "end", sid, positions(sid, self.chains.get(sid, []), _payload), final=True)
        found = check_history(self.history)
        if found:
            raise Violation(f"history/{found[0].rule}", f"{found[0].message} ({len(found)} in all)")
        return len(self.history)

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
            since = self.store.lives[child][-1].start - landing_bound_ms(self.scenario.commit_deadline_ms)
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
            data: SessionData = run_direct(self.store, load(self.layout, sid))
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
