"""One writer's queue: :class:`CommitQueue` keeps a writer's pending entries and its
:class:`~s3log._protocol.state.ChainPosition`, hands out commit procedures and applies
their results (acknowledgements, append keys, forks).

Its own room because it is the writer's state, where :mod:`s3log._api.core` is the
log's: the two change for different reasons.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Generic

from s3log._api.checks import check_on_conflict
from s3log._format.cbor import dumps
from s3log._format.chain import PendingEntry
from s3log._format.entries import check_kind, check_ts, normalize_data_cbor
from s3log._format.layout import Layout
from s3log._format.values import APPEND_KEY_MAX_BYTES, AppendKey, Head, ParentRef, append_digest
from s3log._protocol.append_keys import find_append_key, stored_for_key
from s3log._protocol.commit import CommitPlan, commit, renew
from s3log._protocol.fork import fork_keys
from s3log._protocol.ops import Proc
from s3log._protocol.state import (
    ChainPosition,
    CommitJournal,
    ForkDoubt,
    LeasePlan,
)
from s3log.config import LogConfig, OnConflict
from s3log.encryption.envelope import ENVELOPE_TAG, NONCE_LEN, DataKey, is_envelope
from s3log.errors import AppendKeyReused, ConflictError, EntryNotFound, InvalidArgumentError, InvalidEntryError
from s3log.reducer import Reducer, S
from s3log.results import (
    AckedEntry,
    CommitResult,
    ForkInfo,
    TicketStatus,
    acked_in,
)

_log = logging.getLogger("s3log")

#: Called with a :class:`~s3log.ForkInfo` when a conflict makes a writer fork.
ForkListener = Callable[[ForkInfo], None]


class CommitQueue(Generic[S]):
    """One writer's queue of pending entries and its chain position. Thread-safe.

    It hands out commit procedures (:meth:`commit`, :meth:`touch`) that carry what is
    queued when they start, and applies their results: which tickets became durable,
    the new :class:`~s3log._protocol.state.ChainPosition`, forks. No I/O.
    """

    def __init__(
        self,
        layout: Layout,
        config: LogConfig,
        ws: ChainPosition[S],
        reducer: Reducer[S],
        on_conflict: OnConflict,
        on_fork: ForkListener | None = None,
    ) -> None:
        check_on_conflict(on_conflict, ws.session)
        self.layout = layout
        self.config = config
        self.ws = ws
        self.reducer = reducer
        self.on_conflict: OnConflict = on_conflict
        self.forks: list[ForkInfo] = []
        self._listeners: list[ForkListener] = [on_fork] if on_fork else []
        self._lock = threading.Lock()
        self._pending: list[tuple[int, PendingEntry]] = []
        # The tickets in _pending, so status/watch are O(1) (every waiter asks, every commit).
        self._queued: set[int] = set()
        self._next_ticket = 0
        # Entries of tickets someone waits for, filled in by whichever commit carried them.
        self._waiting: set[int] = set()
        self._done: dict[int, AckedEntry] = {}
        # Tickets carried by the commit in flight, and tickets of a commit that failed
        # with its outcome unknown (its head may have landed): neither may be withdrawn.
        self._inflight: set[int] = set()
        self._uncertain: set[int] = set()
        # Of those, the tickets a head PUT to this writer's own session may have stored
        # (the rest may be in a fork's child only): the next commit looks for these there.
        self._in_doubt: set[int] = set()
        self._withdrawn: set[int] = set()
        self._claimed: set[int] = set()
        # Forks commits left undecided (their child may hold entries), by the parent
        # position they fork from: the next commit forking from there forks into the
        # same child, rather than forking these entries again.
        self._fork_doubts: dict[ParentRef, ForkDoubt] = {}
        #: What this writer's commits record about the head's lease (None: leave it).
        self.lease: LeasePlan | None = None
        # Idempotency keys (decision 0037). The live entry of each key (queued, in a
        # commit, or uncertain) as (ticket, digest): an append of that key joins it.
        self._live_keys: dict[str, tuple[int, bytes]] = {}
        # Keys whose live entry a second append joined: it may no longer be withdrawn.
        self._joined: set[str] = set()
        # Keys of entries this writer acknowledged or looked up, newest last (bounded).
        self._acked_keys: dict[str, tuple[bytes, AckedEntry]] = {}
        # Waited-for tickets standing for an earlier append of their key (joined, or
        # answered from the head's window); and of those, the ones whose stored entry
        # must still be read (:meth:`resolve`).
        self._followers: dict[int, str] = {}
        self._lookups: dict[int, AppendKey] = {}
        # The keys of entries in forks that lost races made of the session this writer
        # began in, with each fork's head (fork_keys): listed from the head it
        # began at by the first commit carrying a key (the writer may be in a fork of its
        # own by then), None until then. Empty for a head never replaced (a session this
        # writer created, or one not written since): no commit lost a race to it.
        self._fork_keys: dict[str, tuple[AppendKey, Head]] | None = \
            None if ws.etag is not None and ws.head.version > 1 else {}
        self._began: Head | None = ws.head if self._fork_keys is None else None
        #: The data key this writer seals entries with (decision 0049); None: plain data.
        self.sealer: DataKey | None = None
        #: What decrypts the entries a commit acknowledges (set with ``sealer``).
        self.opener: Callable[[list[AckedEntry]], list[AckedEntry]] | None = None
        self.result_opener: Callable[[CommitResult[S]], CommitResult[S]] | None = None

    @property
    def pending_count(self) -> int:
        """Entries appended but not yet committed."""
        with self._lock:
            return len(self._pending)

    def add_fork_listener(self, listener: ForkListener) -> None:
        """Call ``listener`` with a :class:`ForkInfo` whenever this writer forks."""
        self._listeners.append(listener)

    def add(self, kind: str, data: Any, ts: int | None, *, wait: bool = False, key: str | None = None) -> int:
        """Validate and queue an entry; return its ticket. Nothing is written.

        With ``wait``, the committed entry is kept for :meth:`claim`. With ``key`` (an
        idempotency key), an append of that key this writer still holds is joined, and
        one stored already (acknowledged here, in the head's window of keys, or in a
        fork's the writer listed: :meth:`commit`) is not queued again: the ticket then
        stands for it. AppendKeyReused if that append had another kind or data.
        """
        check_kind(kind, session=self.ws.session)
        if ts is None:
            ts = self.config.env.now_ms()
        else:
            check_ts(kind, ts, session=self.ws.session)
        value, encoded = normalize_data_cbor(kind, data, session=self.ws.session)
        if is_envelope(value):
            raise InvalidEntryError(kind, f"data may not be a CBOR tag {ENVELOPE_TAG} (an encrypted entry's "
                                    "envelope)", session=self.ws.session)
        digest = b""
        if key is not None:
            check_append_key(key, self.ws.session)
        sealer = self.sealer
        if sealer is not None:
            # A keyed append is sealed deterministically (its nonce derived from its key and
            # content): a retry seals to the same bytes, so the digest below, over what is
            # stored, finds it as for plain data, and reveals nothing of the plaintext.
            nonce = os.urandom(NONCE_LEN) if key is None else sealer.synthetic_nonce(key, kind, encoded)
            value, encoded = sealer.seal_cbor(kind, encoded, nonce, value)
        if key is not None:
            digest = append_digest(kind, encoded)
        entry = PendingEntry(kind, ts, value, encoded, key, digest)
        with self._lock:
            if key is not None:
                known = self._known_key(key, digest, wait)
                if known is not None:
                    return known
                self._live_keys[key] = (self._next_ticket, digest)
            ticket = self._next_ticket
            self._next_ticket += 1
            self._pending.append((ticket, entry))
            self._queued.add(ticket)
            if wait:
                self._waiting.add(ticket)
        return ticket

    def _known_key(self, key: str, digest: bytes, wait: bool) -> int | None:
        """A ticket standing for the append of ``key`` this writer holds or knows stored,
        or None if it knows of none. Called with the lock held."""
        live = self._live_keys.get(key)
        stored = self._acked_keys.get(key)
        mark = None if live or stored else find_append_key(self.ws.head, key) or self._in_fork(key, digest)
        if live is None and stored is None and mark is None:
            return None
        was = live[1] if live else stored[0] if stored else mark.digest if mark else b""
        if was != digest:
            raise AppendKeyReused(key, self.ws.session, "a different kind or data")
        if live is not None and not wait:
            return live[0]
        ticket = self._next_ticket
        self._next_ticket += 1
        if live is not None:
            self._joined.add(key)
        elif stored is None and mark is not None:
            head = self.ws.head
            tail = mark.session is None and head.tail_first_seq <= mark.seq <= head.seq
            entry = head.tail[mark.seq - head.tail_first_seq] if tail else None
            if entry is not None and append_digest(entry.kind, dumps(entry.data)) == digest:
                self._remember(key, digest, acked_in(head.session, [entry])[0])
            elif wait:  # read (and checked against its digest) by resolve()
                # Named by its session: the writer may fork before the read, and the
                # entry stays in the chain this head describes, not the fork's.
                self._lookups[ticket] = mark if mark.session is not None else replace(mark, session=head.session)
        if wait:
            self._followers[ticket] = key
        return ticket

    def _in_fork(self, key: str, digest: bytes) -> AppendKey | None:
        """The append key ``key`` of an equal entry in a fork that lost a race made of this
        session, naming that fork, if the writer listed them (a key there with other
        content is not this chain's: not refused). Lock held."""
        got = self._fork_keys.get(key) if self._fork_keys else None
        return None if got is None or got[0].digest != digest else replace(got[0], session=got[1].session)

    def _remember(self, key: str, digest: bytes, entry: AckedEntry) -> None:
        """Keep the stored entry of ``key`` (the newest keys only). Lock held."""
        self._acked_keys.pop(key, None)
        self._acked_keys[key] = (digest, entry)
        while len(self._acked_keys) > max(_ACKED_KEYS_KEPT, self.config.append_key_window):
            del self._acked_keys[next(iter(self._acked_keys))]

    def resolve(self, ticket: int) -> Proc[None] | None:
        """The procedure reading the stored entry a ticket answered from the head's window
        of keys stands for (None if there is none to read). EntryNotFound if that entry
        is gone (its session compacted, expired or deleted since)."""
        with self._lock:
            mark = self._lookups.get(ticket)
            head = self.ws.head
        return None if mark is None else self._resolving(ticket, mark, head)

    def _resolving(self, ticket: int, mark: AppendKey, head: Head) -> Proc[None]:
        entry = yield from stored_for_key(self.layout, head, mark)
        with self._lock:
            self._lookups.pop(ticket, None)
            if entry is None:
                self._followers.pop(ticket, None)
                raise EntryNotFound(mark.session or head.session,
                                    f"seq {mark.seq}, where the entry of append key {mark.key!r} was")
            self._remember(mark.key, mark.digest, entry)

    def claim(self, ticket: int) -> AckedEntry | None:
        """The committed entry of a waited-for ticket, once a commit carried it."""
        with self._lock:
            entry = self._done.pop(ticket, None)
            key = self._followers.get(ticket)
            if entry is None and key is not None and key not in self._live_keys and ticket not in self._lookups \
                    and key in self._acked_keys:
                entry = self._acked_keys[key][1]
                del self._followers[ticket]
            if entry is not None:
                self._waiting.discard(ticket)
                self._claimed.add(ticket)
        if entry is not None and self.opener is not None:
            # One found stored (a retry's, read from the head or a fork) is still sealed.
            entry = self.opener([entry])[0]
        return entry

    def status(self, ticket: int) -> TicketStatus:
        """Where the entry of a waited-for ticket stands (see :class:`TicketStatus`)."""
        with self._lock:
            if ticket in self._done or ticket in self._claimed or ticket in self._lookups:
                return "committed"
            key = self._followers.get(ticket)
            if key is not None:  # the status of the append it stands for
                live = self._live_keys.get(key)
                if live is None:
                    return "committed" if key in self._acked_keys else "unknown"
                ticket = live[0]
            if ticket in self._withdrawn:
                return "withdrawn"
            if ticket in self._inflight:
                return "committing"
            if ticket in self._queued:
                return "uncertain" if ticket in self._uncertain else "pending"
            return "unknown"

    def withdraw(self, ticket: int) -> bool:
        """Take a queued entry back; True if it was, so it will never be stored.

        Refused (False) once a commit carries it, or after a commit that carried it
        failed with an unknown outcome: its fate is then that of the commits.
        """
        with self._lock:
            if ticket in self._inflight or ticket in self._uncertain or ticket not in self._queued:
                return False
            for i, (t, p) in enumerate(self._pending):
                if t == ticket:
                    if p.key is not None:
                        if p.key in self._joined:
                            return False  # a retry of the same key joined it: it waits for it
                        self._live_keys.pop(p.key, None)
                    del self._pending[i]
                    self._queued.discard(ticket)
                    self._withdrawn.add(ticket)
                    self._waiting.discard(ticket)
                    return True
            return False

    def watch(self, ticket: int) -> bool:
        """Start keeping the committed entry of a queued ticket for :meth:`claim`.

        False if the ticket is no longer queued (committed or withdrawn already).
        """
        with self._lock:
            if ticket in self._inflight or ticket in self._queued:
                self._waiting.add(ticket)
                return True
            return False

    def forget(self, ticket: int) -> None:
        """Stop keeping the entry of ``ticket`` (its waiter gave up)."""
        with self._lock:
            self._waiting.discard(ticket)
            self._done.pop(ticket, None)
            self._followers.pop(ticket, None)
            self._lookups.pop(ticket, None)

    def hold_lease(self, owner: str, ttl_ms: int) -> None:
        """Record a lease for ``owner`` lasting ``ttl_ms`` with every commit from now on."""
        if not isinstance(owner, str) or not owner:
            raise InvalidArgumentError("owner", f"must be a non-empty string, not {owner!r}", session=self.ws.session)
        if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or ttl_ms <= 0:
            raise InvalidArgumentError("ttl_ms", f"must be a positive integer, not {ttl_ms!r}", session=self.ws.session)
        self.lease = LeasePlan(owner, ttl_ms)

    def release_lease(self) -> None:
        """Clear this writer's lease with the next commit (or :meth:`touch`)."""
        if self.lease is not None:
            self.lease = LeasePlan(self.lease.owner, None)

    def touch(self, on_conflict: OnConflict | None = None) -> Proc[CommitResult[S]]:
        """A commit that writes the head even with nothing pending: renews or releases a lease.

        ``on_conflict`` as for :meth:`commit`.
        """
        return self._commit(touch=True, on_conflict=on_conflict)

    def commit(self, on_conflict: OnConflict | None = None) -> Proc[CommitResult[S]]:
        """A procedure committing every entry pending when it starts, then applying the result.

        Only one may run at a time per writer (the drivers hold a lock around it). The
        first that carries a key (of a writer that opened a session written since its
        creation) lists the forks lost races made of the session, once
        (:func:`~s3log._protocol.fork.fork_keys`): an entry whose key one of them holds is answered
        with the entry there, not written.
        ``on_conflict``: what a conflict does in this commit only (``"fork"`` or
        ``"raise"``); None, the writer's :attr:`on_conflict` when the commit starts.
        """
        return self._commit(touch=False, on_conflict=on_conflict)

    def _commit(self, *, touch: bool, on_conflict: OnConflict | None) -> Proc[CommitResult[S]]:
        # Checked at the call, before the procedure is driven (as the attribute's setter).
        if on_conflict is not None:
            check_on_conflict(on_conflict, self.ws.session)
        return self._committing(touch, on_conflict)

    def _committing(self, touch: bool, on_conflict: OnConflict | None) -> Proc[CommitResult[S]]:
        with self._lock:
            keyed = any(p.key is not None for _, p in self._pending)
        if self._began is not None and keyed:
            # A crashed writer's commit of one of these keys may have lost a race and
            # forked, unknown to this writer: listed once, before anything is written.
            found = yield from fork_keys(self.layout, self._began)
            with self._lock:
                self._fork_keys, self._began = found, None
        if self._fork_keys and keyed:
            yield from self._answer_from_forks()
        with self._lock:
            batch = list(self._pending)
            ws = self.ws
            self._inflight = {t for t, _ in batch}
            lease = self.lease
            # Entries of a commit whose head PUT ended undecided may be stored already:
            # a prefix of the batch (what was queued since was never sent).
            maybe_landed = 0
            for t, _ in batch:
                if t not in self._in_doubt:
                    break
                maybe_landed += 1
            journal = CommitJournal(ws.session, forks=dict(self._fork_doubts))
            mode = self.on_conflict if on_conflict is None else on_conflict
        try:
            plan = CommitPlan(self.layout, self.config, self.reducer, ws, [p for _, p in batch], mode,
                              lease=lease, maybe_landed=maybe_landed, journal=journal)
            result = yield from (renew(plan) if touch else commit(plan))
        except ConflictError as err:
            # Entries found durable despite the conflict must not be committed again.
            self._settle(batch[: len(err.landed)], err.landed, ws)
            raise
        except BaseException:
            # Failed or abandoned (an async cancellation, a crash of the caller). The
            # journal says whether a head PUT of it may have landed: if so, these
            # entries stay queued as "uncertain" for the next commit, which finds them
            # landed (and adopts the head, or continues in the fork) or writes them,
            # and they can no longer be withdrawn. If not, nothing of it is stored and
            # they are simply pending again: a definite refusal (a 412 on a taken id)
            # must not make the next commit take another writer's equal entries for ours.
            with self._lock:
                if journal.in_doubt:
                    self._uncertain |= self._inflight
                    self._in_doubt |= self._inflight
                if journal.fork_sent:
                    self._uncertain |= self._inflight
                self._fork_doubts = journal.forks
                self._inflight = set()
            raise
        with self._lock:
            self._fork_doubts = {}
        if self.result_opener is not None:  # an encrypting writer's results hold plaintext, as reads do
            result = self.result_opener(result)
        self._settle(batch, result.acked, result._ws)
        wrote = touch or bool(result.entries)
        if lease is not None and lease.ttl_ms is None and self.lease is lease and wrote:
            self.lease = None  # released: later commits leave the head's lease alone
        for fork in result.forks or ((result.fork,) if result.fork is not None else ()):
            self.forks.append(fork)
            for listener in self._listeners:
                listener(fork)
        return result

    def _answer_from_forks(self) -> Proc[None]:
        """Take each queued entry whose key (with its kind and data) a fork lists out of the
        queue: its ticket stands for the entry stored there, read from that fork's head
        (or its segment). One gone since (the fork expired or deleted) is written here."""
        with self._lock:
            forks = self._fork_keys or {}
            found = [(t, p, forks[p.key]) for t, p in self._pending if p.key is not None and p.key in forks
                     and forks[p.key][0].digest == p.digest and t not in self._uncertain]
        for ticket, p, (mark, head) in found:
            entry = yield from stored_for_key(self.layout, head, mark)
            if entry is None:
                continue
            with self._lock:
                if ticket not in self._queued or ticket in self._inflight:
                    continue  # withdrawn meanwhile
                self._pending = [(t, q) for t, q in self._pending if t != ticket]
                self._queued.discard(ticket)
                self._live_keys.pop(str(p.key), None)
                self._joined.discard(str(p.key))
                self._remember(str(p.key), p.digest, entry)
                if ticket in self._waiting:
                    self._done[ticket] = entry
            _log.info("session %s: append key %r names entry %d of fork %s: not written again",
                      self.ws.session, p.key, entry.seq, entry.session_id)

    def _settle(self, batch: list[tuple[int, PendingEntry]], acked: Sequence[AckedEntry],
                ws: ChainPosition[S]) -> None:
        with self._lock:
            n = len(acked)
            self._queued.difference_update(t for t, _ in self._pending[:n])
            self._pending = self._pending[n:]
            self.ws = ws
            self._inflight = set()
            for ticket, _ in batch[:n]:
                self._uncertain.discard(ticket)
                self._in_doubt.discard(ticket)
            for (ticket, p), entry in zip(batch[:n], acked, strict=True):
                if ticket in self._waiting:
                    self._done[ticket] = entry
                if p.key is not None:
                    self._live_keys.pop(p.key, None)
                    self._joined.discard(p.key)
                    self._remember(p.key, p.digest, entry)


#: Keys of acknowledged appends a writer keeps in memory (at least; or its log's
#: ``append_key_window``), so a retry within the writer needs no read.
_ACKED_KEYS_KEPT = 256


def check_append_key(key: object, session: str | None) -> str:
    """An append's idempotency key: a non-empty string of at most
    :data:`~s3log._format.values.APPEND_KEY_MAX_BYTES` UTF-8 bytes (InvalidArgumentError otherwise)."""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError("key", f"must be a non-empty string, not {key!r}", session=session)
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError("key", f"{key!r} is not valid Unicode", session=session) from None
    if size > APPEND_KEY_MAX_BYTES:
        raise InvalidArgumentError("key", f"{key[:20]!r}... is {size} bytes, more than {APPEND_KEY_MAX_BYTES}",
                                   session=session)
    return key
