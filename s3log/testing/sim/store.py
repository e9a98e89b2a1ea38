"""The simulated store, and the fault-free driver the checks read it with.

:class:`SimStore` is a :class:`~s3log.store.memory.MemoryStore` on the virtual clock
that records what the invariants are checked against: every head ever current
(:class:`HeadLife`), every session that lived at an id and how it ended
(:class:`SessionLife`), the chains retention legitimately removed, and every head
write it applied (the history checker's input). :func:`injected_error` is what a
request meets when the simulation injects a fault into it. :func:`run_direct` runs a
procedure on a store with no fault and no time passing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from s3log._drive.drivers import step
from s3log._format.codec import decode_head
from s3log._format.layout import Layout
from s3log._format.values import Entry, Head
from s3log._protocol.compact import compactions
from s3log._protocol.ops import Blob, KeyOp, Op, Parallel, Proc, Sleep, StoreOp, call_key, call_store
from s3log._protocol.probe import PROBE_DIR
from s3log._protocol.read import load_from_head
from s3log._protocol.state import SessionData
from s3log.errors import ConditionalRequestConflict, PreconditionFailed, S3LogError, StoreError, TransientStoreError
from s3log.store.base import ObjectStore
from s3log.store.memory import MemoryStore
from s3log.testing.history import Ended, History, head_write, positions
from s3log.testing.sim.scenario import Fault


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
    return (head.created_at, head.creator, compactions(head))


def _payload(e: Entry) -> str:
    """The name the simulated callers gave an entry (``data["p"]``); any other entry
    (a fork entry) by its kind and seq."""
    data = e.data
    if isinstance(data, dict) and isinstance(data.get("p"), str):
        return str(data["p"])
    return f"<{e.kind}@{e.seq}>"


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
        if key.endswith("/head") and PROBE_DIR not in key:  # the probe's object is no session
            self.history.add(head_write(self.op, self.who, key, method, base, etag, body, len(self.history)))

    def current(self, sid: str) -> HeadLife | None:
        """The head stored at ``sid`` now (None if none is)."""
        lives = self.heads.get(sid)
        return lives[-1] if lives and lives[-1].end is None else None

    def life_of(self, sid: str, life: HeadLife) -> SessionLife:
        """The session ``life`` was a head of."""
        return self.lives[sid][life.life]

    def _deleted(self, key: str, old: bytes | None) -> None:
        if key.startswith(self.layout.sessions_prefix + PROBE_DIR):
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
            data: SessionData = run_direct(self, load_from_head(self.layout, head, ""))
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
        if not key.endswith("/head") or key.startswith(self.layout.sessions_prefix + PROBE_DIR):
            return  # the precondition probe's object is no session's head
        sid = self.layout.session_of(key)
        assert sid is not None
        head = decode_head(body, key)
        self.dangling += [f"{key} v{head.version} lists {k}" for k in head.segments if k not in self._objects]
        lives = self.heads.setdefault(sid, [])
        sessions = self.lives.setdefault(sid, [])
        tomb = head.expired
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


def injected_error(fault: Fault, key: str | None, *, landed: bool) -> StoreError:
    """The error a request meets when ``fault`` is injected into it (``landed``: the
    store performed it before the reply was lost)."""
    if fault == "409":
        return ConditionalRequestConflict("injected 409", key=key, code="ConditionalRequestConflict", status=409)
    if fault == "412":
        return PreconditionFailed("injected 412", key=key, code="PreconditionFailed", status=412)
    if fault == "503":
        return TransientStoreError("injected throttle", key=key, code="SlowDown", status=503)
    if fault == "reset":
        return TransientStoreError(f"injected reset ({'landed' if landed else 'lost'})", key=key,
                                   code="ConnectionReset")
    return TransientStoreError(f"injected {fault}", key=key, code="RequestTimeout")


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
