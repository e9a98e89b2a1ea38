"""Recorded histories of s3log operations, and a checker of what s3log promises.

A :class:`History` is a list of events, recorded by whoever drives s3log: the simulator
(:mod:`s3log.testing.sim`) records every procedure its actors run and every head its store
applies; a test against a real server records what its callers saw through the
public API and, through a :class:`RecordingStore`, every head write the server
applied. :func:`check` then holds the history to a model of the promise and returns
one :class:`Violation` per breach:

``lost``
    every acknowledged entry is readable where its result said (session, seq, hash):
    in the final read of that session, or in a chain retention ended (expired or
    deleted: only those entries are legitimately gone);
``duplicated``
    no entry is acknowledged twice (the answer to a retry with an idempotency key
    may acknowledge it again, at the very same position), and none is stored twice: an entry appears at
    most once over the final reads of every session (fork entries aside), and an
    acknowledged one nowhere but where its result said;
``read``
    every read returns a prefix of a chain of its session: the final one, or one
    retention ended;
``fork``
    a session is forked only explicitly or after a lost race: before the child's
    head was applied, someone other than the forking operation moved its parent past
    the fork point, or ended it;
``etag``
    no two writes are accepted from one ETag: two applied ``If-Match`` writes (PUT or
    DELETE) of one head with the same ETag, the object not rewritten to that ETag in
    between, or two applied create-only PUTs of one head with no delete in between.

It is a checker of these properties over one history, not a general linearizability
checker (docs/decisions/0039-a-history-checker-of-the-promise.md says why). Pure:
no clock, no client library; a history is plain data.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from s3log._format.codec import decode_head
from s3log._format.values import FORK_KIND, Entry
from s3log._protocol.compact import compactions
from s3log._protocol.ops import Blob, ListPage
from s3log._protocol.probe import PROBE_DIR
from s3log.errors import CorruptionError
from s3log.results import CommitResult
from s3log.store.base import AsyncObjectStore, ObjectStore

StoreT = TypeVar("StoreT", ObjectStore, AsyncObjectStore)


class Position(NamedTuple):
    """Where one entry is: its payload (the caller's identity of it; None for a fork
    entry, which is not counted), session, seq and hash."""

    payload: str | None
    session: str
    seq: int
    hash: bytes


@dataclass(frozen=True, slots=True)
class _Event:
    """What every event names: the operation it belongs to (``op``, an id from
    :meth:`History.invoke`) and the client that ran it."""

    op: int
    client: str


@dataclass(frozen=True, slots=True)
class Invoke(_Event):
    """An operation began: ``action`` is what it does (commit, read, fork, expire...)."""

    action: str
    session: str = ""


@dataclass(frozen=True, slots=True)
class Ack(_Event):
    """An operation acknowledged entries, each at its position (one operation may
    acknowledge in several events: a commit that forked, a conflict's landed entries)."""

    positions: tuple[Position, ...]
    #: The answer to a retry with an idempotency key: the entry stored by an earlier
    #: append of that key, which may have been acknowledged already (at this position).
    retry: bool = False


@dataclass(frozen=True, slots=True)
class Fail(_Event):
    """An operation ended without an acknowledgement (an error, a crash, a
    cancellation): what it carried may or may not be stored."""

    error: str


@dataclass(frozen=True, slots=True)
class Read(_Event):
    """A read of a session's chain, from seq 0; ``final``: the read at the end of the
    history, which acknowledgements are checked against."""

    session: str
    entries: tuple[Position, ...]
    final: bool = False


@dataclass(frozen=True, slots=True)
class Fork(_Event):
    """A caller was told a session forked: ``child`` holds the parent's chain up to
    ``at_seq``; ``explicit`` if the caller asked for the fork."""

    parent: str
    at_seq: int
    child: str
    explicit: bool = False


@dataclass(frozen=True, slots=True)
class Ended(_Event):
    """Retention ended a session (an expiry or a delete): its chain as it ended.
    Its entries are legitimately gone, and reads of it were reads of a real chain."""

    session: str
    entries: tuple[Position, ...]
    #: Ended by a compaction: the kept entries are stored again in the new chain, by design.
    rewritten: bool = False


@dataclass(frozen=True, slots=True)
class HeadWrite(_Event):
    """A write of a session's head the store applied (as its request log saw it).

    ``method``: put_if_absent, put_if_match, delete or delete_if_match; ``base``: the
    ETag an If-Match named; ``etag``: the new ETag (None for a delete); ``seq``: the
    new head's last seq; ``parent``: (session, seq) a fork head starts from; ``sent``:
    how many events the history held when the request was sent (it cannot have been
    applied earlier)."""

    session: str
    method: str
    base: str | None
    etag: str | None
    seq: int = -1
    tomb: bool = False
    parent: tuple[str, int] | None = None
    sent: int = 0
    #: How many times the session was compacted (a compaction rewrites the chain).
    compactions: int = 0


Event = Invoke | Ack | Fail | Read | Fork | Ended | HeadWrite


@dataclass(frozen=True, slots=True)
class Violation:
    """One breach of the promise: ``rule`` (lost, duplicated, read, fork, etag), what
    happened, and the indexes of the events that show it."""

    rule: str
    message: str
    events: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass(slots=True)
class History:
    """An append-only list of events; safe to record into from several threads."""

    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ops: int = 0

    def __len__(self) -> int:
        return len(self.events)

    def add(self, event: Event) -> None:
        """Record ``event``."""
        with self._lock:
            self.events.append(event)

    def invoke(self, client: str, action: str, session: str = "") -> int:
        """Record that ``client`` began an operation; return its id."""
        with self._lock:
            self._ops += 1
            op = self._ops
            self.events.append(Invoke(op, client, action, session))
        return op

    def ack(self, op: int, client: str, positions: Iterable[Position], *, retry: bool = False) -> None:
        """Record entries ``op`` acknowledged (``retry``: as the answer to a retry with
        an idempotency key, see :class:`Ack`)."""
        self.add(Ack(op, client, tuple(positions), retry))

    def fail(self, op: int, client: str, error: str) -> None:
        """Record that ``op`` ended with no acknowledgement."""
        self.add(Fail(op, client, error))

    def read(self, op: int, client: str, session: str, entries: Iterable[Position], *, final: bool = False) -> None:
        """Record a read of ``session``'s chain."""
        self.add(Read(op, client, session, tuple(entries), final))

    def ack_result(self, op: int, client: str, result: CommitResult[Any], payload: Payload) -> None:
        """Record what a commit's result acknowledged, where, and the forks it reports."""
        for sid, group in result_groups(result):
            self.ack(op, client, positions(sid, group, payload))
        for f in result.forks or ((result.fork,) if result.fork else ()):
            self.add(Fork(op, client, f.parent.session, f.parent.seq, f.child))


#: The caller's identity of an entry (None: not counted, as a fork entry).
Payload = Callable[[Entry], str | None]


def positions(session: str, entries: Iterable[Entry], payload: Payload) -> list[Position]:
    """The positions of ``entries`` of ``session`` (fork entries get payload None)."""
    return [Position(None if e.kind == FORK_KIND else payload(e), session, e.seq, e.hash) for e in entries]


def result_groups(result: CommitResult[Any]) -> list[tuple[str, list[Entry]]]:
    """A commit's acknowledged entries by the session each says it is stored in
    (:attr:`~s3log.AckedEntry.session_id`; a split batch spans a parent and its forks)."""
    groups: dict[str, list[Entry]] = {}
    for e in result.acked:
        groups.setdefault(e.session_id, []).append(e)
    return list(groups.items())


# ------------------------------------------------------------------- recording a store


class _Recording(Generic[StoreT]):
    """What both recording stores hold: the store they wrap, the history they record
    into, whose requests these are and the operation under way."""

    def __init__(self, inner: StoreT, history: History, client: str) -> None:
        self.inner: StoreT = inner
        self.history = history
        self.client = client
        self.op = 0
        self.requests = inner.requests
        self.honours_preconditions = bool(getattr(inner, "honours_preconditions", False))

    def _record(self, key: str, method: str, base: str | None, etag: str | None, body: bytes | None,
                sent: int) -> None:
        """Record an applied write of ``key`` if it is a session's head."""
        if not key.endswith("/head") or "/" + PROBE_DIR in key:  # the probe's object is no session
            return
        try:
            event = head_write(self.op, self.client, key, method, base, etag, body, sent)
        except CorruptionError:
            return  # not a session's head (the precondition probe's objects)
        self.history.add(event)


class RecordingStore(_Recording[ObjectStore]):
    """A blocking store that records every head write the store it wraps applied.

    Put it beneath a fault injector (``FaultyStore(RecordingStore(s3, ...), plan)``):
    a write whose reply the injector then loses is still recorded, as the server's
    request log would show it. ``op`` names the operation under way (set by the one
    thread that drives the log on this store: its driver's pool threads read it too).
    """

    def get(self, key: str) -> Blob:
        """GET."""
        return self.inner.get(key)

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """LIST."""
        return self.inner.list(prefix, delimiter=delimiter, token=token, max_keys=max_keys, start_after=start_after)

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create-only PUT, recorded when applied to a head."""
        sent = len(self.history)
        etag = self.inner.put_if_absent(key, body)
        self._record(key, "put_if_absent", None, etag, body, sent)
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Conditional PUT, recorded when applied to a head."""
        sent = len(self.history)
        new = self.inner.put_if_match(key, body, etag)
        self._record(key, "put_if_match", etag, new, body, sent)
        return new

    def delete(self, key: str) -> None:
        """DELETE (of a head: recorded)."""
        sent = len(self.history)
        self.inner.delete(key)
        self._record(key, "delete", None, None, None, sent)

    def delete_if_match(self, key: str, etag: str) -> None:
        """Conditional DELETE (of a head: recorded when applied)."""
        sent = len(self.history)
        self.inner.delete_if_match(key, etag)
        self._record(key, "delete_if_match", etag, None, None, sent)


class AsyncRecordingStore(_Recording[AsyncObjectStore]):
    """An async store that records every head write the store it wraps applied (see
    :class:`RecordingStore`; under an ``AsyncFaultyStore`` likewise)."""

    async def get(self, key: str) -> Blob:
        """GET."""
        return await self.inner.get(key)

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """LIST."""
        return await self.inner.list(prefix, delimiter=delimiter, token=token, max_keys=max_keys,
                                     start_after=start_after)

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create-only PUT, recorded when applied to a head."""
        sent = len(self.history)
        etag = await self.inner.put_if_absent(key, body)
        self._record(key, "put_if_absent", None, etag, body, sent)
        return etag

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Conditional PUT, recorded when applied to a head."""
        sent = len(self.history)
        new = await self.inner.put_if_match(key, body, etag)
        self._record(key, "put_if_match", etag, new, body, sent)
        return new

    async def delete(self, key: str) -> None:
        """DELETE (of a head: recorded)."""
        sent = len(self.history)
        await self.inner.delete(key)
        self._record(key, "delete", None, None, None, sent)

    async def delete_if_match(self, key: str, etag: str) -> None:
        """Conditional DELETE (of a head: recorded when applied)."""
        sent = len(self.history)
        await self.inner.delete_if_match(key, etag)
        self._record(key, "delete_if_match", etag, None, None, sent)


def head_write(op: int, client: str, key: str, method: str, base: str | None, etag: str | None,
               body: bytes | None, sent: int) -> HeadWrite:
    """The event of an applied write of head ``key`` (``body`` None for a delete)."""
    if body is None:
        return HeadWrite(op, client, key.rsplit("/", 2)[-2], method, base, etag, sent=sent)
    head = decode_head(body, key)
    parent = (head.parent.session, head.parent.seq) if head.parent is not None else None
    return HeadWrite(op, client, head.session, method, base, etag, head.seq, head.expired, parent, sent,
                     compactions(head))


# ---------------------------------------------------------------------------- checking


def check(history: History | Sequence[Event]) -> list[Violation]:
    """Every breach of the promise ``history`` shows (see the module's docstring)."""
    events = history.events if isinstance(history, History) else list(history)
    finals: dict[str, list[Position]] = {}
    ended: dict[str, list[tuple[Position, ...]]] = {}
    rewritten: dict[str, list[tuple[Position, ...]]] = {}
    for ev in events:
        if isinstance(ev, Read) and ev.final:
            finals[ev.session] = list(ev.entries)
        elif isinstance(ev, Ended):
            ended.setdefault(ev.session, []).append(ev.entries)
            if ev.rewritten:
                rewritten.setdefault(ev.session, []).append(ev.entries)
    out = _check_acks(events, finals, ended, rewritten)
    out += _check_stored_once(finals)
    out += _check_reads(events, finals, ended)
    out += _check_forks(events)
    out += _check_etags(events)
    return out


def _check_acks(events: Sequence[Event], finals: dict[str, list[Position]],
                ended: dict[str, list[tuple[Position, ...]]],
                rewritten: dict[str, list[tuple[Position, ...]]]) -> list[Violation]:
    """Each acknowledged entry acknowledged once, and readable where its result said."""
    out: list[Violation] = []
    acked: dict[str, tuple[Position, int]] = {}
    where: dict[str, tuple[str, int]] = {}  # stored payload -> (session, seq), over the final reads
    for sid, chain in finals.items():
        for p in chain:
            if p.payload is not None:
                where.setdefault(p.payload, (sid, p.seq))
    for i, ev in enumerate(events):
        if not isinstance(ev, Ack):
            continue
        for p in ev.positions:
            if p.payload is None:
                continue
            first = acked.get(p.payload)
            if first is not None and ev.retry and first[0] == p:
                continue  # a retry answered with the entry stored (and acknowledged) before
            if first is not None:
                out.append(Violation("duplicated", f"{p.payload} acknowledged twice: at {_at(first[0])} and at "
                                                   f"{_at(p)}", (first[1], i)))
                continue
            acked[p.payload] = (p, i)
            chain = finals.get(p.session, [])
            if p.seq < len(chain) and chain[p.seq] == p:
                continue
            if any(p.seq < len(c) and c[p.seq] == p for c in ended.get(p.session, [])):
                kept = any(p.seq < len(c) and c[p.seq] == p for c in rewritten.get(p.session, []))
                if p.payload in where and not (kept and where[p.payload][0] == p.session):
                    s, q = where[p.payload]
                    out.append(Violation("duplicated", f"{p.payload}, acknowledged at {_at(p)} (since ended), is "
                                                       f"stored again at {s}@{q}", (i,)))
                continue
            there = chain[p.seq] if p.seq < len(chain) else None
            found = "nothing" if there is None else f"{there.payload} ({there.hash.hex()[:12]})"
            moved = f"; it is stored at {where[p.payload][0]}@{where[p.payload][1]}" if p.payload in where else ""
            out.append(Violation("lost", f"{p.payload} acknowledged at {_at(p)} is not there: the final read holds "
                                         f"{found} (chain length {len(chain)}){moved}", (i,)))
    return out


def _check_stored_once(finals: dict[str, list[Position]]) -> list[Violation]:
    """No payload is stored twice over every session's final chain."""
    seen = Counter(p.payload for chain in finals.values() for p in chain if p.payload is not None)
    out = []
    for payload, n in sorted(seen.items()):
        if n > 1:
            at = [_at(p) for chain in finals.values() for p in chain if p.payload == payload]
            out.append(Violation("duplicated", f"{payload} is stored {n} times: {', '.join(at)}"))
    return out


def _check_reads(events: Sequence[Event], finals: dict[str, list[Position]],
                 ended: dict[str, list[tuple[Position, ...]]]) -> list[Violation]:
    """Every read is a prefix of its session's final chain, or of a chain retention ended."""
    out = []
    for i, ev in enumerate(events):
        if not isinstance(ev, Read) or ev.final or not ev.entries:
            continue
        n = len(ev.entries)
        candidates = [finals.get(ev.session, []), *ended.get(ev.session, [])]
        if any(len(c) >= n and tuple(c[:n]) == ev.entries for c in candidates):
            continue
        out.append(Violation("read", f"{ev.client} read {n} entries of {ev.session} (last {_at(ev.entries[-1])}): "
                                     f"a prefix of no chain of it ({len(candidates)} known, the final one "
                                     f"{len(candidates[0])} long; {_first_difference(ev.entries, candidates[0])})",
                             (i,)))
    return out


def _check_forks(events: Sequence[Event]) -> list[Violation]:
    """Every fork is explicit or follows a lost race: before the child's first head was
    applied, another operation moved the parent past the fork point, rewrote its chain
    (a compaction) or ended it."""
    writes = [(i, ev) for i, ev in enumerate(events) if isinstance(ev, HeadWrite)]
    seen: dict[str, int] = {}
    rewrites: set[int] = set()  # the writes that compacted their session
    for i, w in writes:
        if w.compactions > seen.get(w.session, 0):
            rewrites.add(i)
        seen[w.session] = max(seen.get(w.session, 0), w.compactions)
    born: dict[str, tuple[int, HeadWrite]] = {}
    for i, w in writes:
        if w.parent is not None and w.etag is not None:
            born.setdefault(w.session, (i, w))
    # (child) -> (op, parent, at_seq, explicit, event index): told to a caller, or seen created.
    forks: dict[str, tuple[int, str, int, bool, int]] = {}
    explicit_ops = {ev.op for ev in events if isinstance(ev, Invoke) and ev.action == "fork"}
    for i, ev in enumerate(events):
        if isinstance(ev, Fork):
            forks.setdefault(ev.child, (ev.op, ev.parent, ev.at_seq, ev.explicit or ev.op in explicit_ops, i))
    for child, (i, w) in born.items():
        assert w.parent is not None
        forks.setdefault(child, (w.op, w.parent[0], w.parent[1], w.op in explicit_ops, i))
    out = []
    for child, (op, parent, at_seq, explicit, i) in forks.items():
        if explicit:
            continue
        bound = born[child][0] if child in born else i
        if any(w.session == parent and w.op != op and w.sent < bound
               and (w.etag is None or w.tomb or w.seq > at_seq or j in rewrites) for j, w in writes):
            continue
        out.append(Violation("fork", f"{child} forked from {parent}@{at_seq} by operation {op}, which nobody asked "
                                     f"for and no other write to {parent} explains (no race was lost)", (i,)))
    return out


def _check_etags(events: Sequence[Event]) -> list[Violation]:
    """No two writes accepted from one ETag of one head; no two creates of one head."""
    out = []
    consumed: dict[str, dict[str, int]] = {}
    exists: dict[str, int] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, HeadWrite):
            continue
        used = consumed.setdefault(ev.session, {})
        if ev.base is not None:
            base = ev.base.strip('"')
            if base in used:
                out.append(Violation("etag", f"two writes of {ev.session}'s head accepted from ETag {base}: "
                                             f"events {used[base]} and {i}", (used[base], i)))
            used[base] = i
        if ev.method == "put_if_absent" and ev.session in exists:
            out.append(Violation("etag", f"two creates of {ev.session}'s head accepted: events "
                                         f"{exists[ev.session]} and {i}", (exists[ev.session], i)))
        if ev.etag is None:
            exists.pop(ev.session, None)
        else:
            exists[ev.session] = i
            used.pop(ev.etag.strip('"'), None)  # rewritten to that ETag: a new object to match
    return out


def _at(p: Position) -> str:
    return f"{p.session}@{p.seq}"


def _first_difference(read: Sequence[Position], chain: Sequence[Position]) -> str:
    for a, b in zip(read, chain, strict=False):
        if a != b:
            return f"at seq {a.seq} it read {a.payload}, the chain holds {b.payload}"
    return "the read is longer"
