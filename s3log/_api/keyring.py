"""A log's data keys: created, adopted, fetched, rotated and shredded; and what turns
stored envelopes back into data.

:class:`Keyring` holds the data keys this log has unwrapped and hands out procedures
over the key store (``{prefix}/keys/{session}/{n:06d}``): :meth:`Keyring.current`
finds or creates a session's newest data key (a create-only PUT; a writer that loses
the race adopts the winner's key, so no entry is ever sealed under a key that was not
stored first), :meth:`Keyring.fetch` unwraps the keys a list of entries names. The key
provider is called through the ``Wrap`` and ``Unwrap`` ops, which the drivers perform.
Its own room: the API layer's side of encryption (decision 0049).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

from s3log._format.cbor import dumps
from s3log._format.chain import PendingEntry
from s3log._format.columns import RunColumns
from s3log._format.entries import normalize_data_cbor
from s3log._format.values import FORK_KIND, Entry, Head, append_digest, new_entry
from s3log._protocol import ops
from s3log._protocol.listing import list_all
from s3log.config import Selector
from s3log.encryption import Encryption
from s3log.encryption.envelope import (
    NONCE_LEN,
    DataKey,
    envelope_parts,
    is_envelope,
    key_object,
    key_ref,
    parse_key_object,
)
from s3log.errors import EncryptionError, ObjectNotFound, PreconditionFailed, SessionNotFound, SessionShredded
from s3log.reducer import Reducer
from s3log.results import AckedEntry, CommitResult, EntryRun

S = TypeVar("S")
#: The name, among a session's key objects, of the marker a shred leaves.
SHREDDED = "shredded"


class Keyring:
    """The data keys of one log, unwrapped as they are needed (thread-safe)."""

    def __init__(self, encryption: Encryption, prefix: str) -> None:
        self.encryption = encryption
        self.provider = encryption.provider
        self.base = f"{prefix}/keys/" if prefix else "keys/"
        self._keys: dict[str, DataKey] = {}
        self._lock = threading.Lock()

    def object_key(self, ref: str) -> str:
        """Where the key object of data key ``ref`` is stored."""
        return self.base + ref

    def newest(self, session: str) -> ops.Proc[DataKey | None]:
        """The newest stored data key of ``session``, or None if it has none.

        The key objects are listed every time, a key held or not: a session shredded
        by another process since is refused here (SessionShredded), not sealed into
        under a key no reader will find.
        """
        refs = yield from self.refs_of(session)
        if not refs:
            return None
        yield from self.fetch_refs([refs[-1]], session)
        return self._keys[refs[-1]]

    def current(self, session: str, named: Iterable[str] = ()) -> ops.Proc[DataKey]:
        """The newest data key of ``session``, created (the first) if it has none.

        ``named``: refs the session's stored entries name. One of this session's not
        stored is refused (SessionShredded) instead of made again with other material:
        its entries were sealed under a key this log cannot find (another
        ``key_store``, or key objects deleted by hand).
        """
        key = yield from self.newest(session)
        if key is not None:
            return key
        for ref in sorted(named):
            if ref.startswith(session + "/"):
                raise SessionShredded(session, ref)
        return (yield from self.create(session, 1))

    def rotate(self, session: str) -> ops.Proc[DataKey]:
        """A new data key for ``session``, after its newest (writers opened later use it)."""
        refs = yield from self.refs_of(session)
        return (yield from self.create(session, int(refs[-1].rsplit("/", 1)[1]) + 1 if refs else 1))

    def create(self, session: str, n: int) -> ops.Proc[DataKey]:
        """Store data key ``n`` of ``session`` (If-None-Match), or adopt the one a racing
        writer stored first. The key is durable before anything is sealed with it."""
        ref = key_ref(session, n)
        fresh = os.urandom(32)
        try:
            kek, wrapped = yield ops.Wrap(self.provider, ref, fresh)
        except EncryptionError as exc:
            raise EncryptionError(session, exc.reason, key_ref=ref) from None
        try:
            yield from ops.put_if_absent(self.object_key(ref), key_object(ref, kek, wrapped))
        except PreconditionFailed:
            yield from self.fetch_refs([ref], session)  # the winner's key: adopt it
            # Unless a shred stored its marker meanwhile: the winner deletes that key
            # (below), or the shred does; nothing is sealed with it here.
            yield from self._refuse_if_shredded(session)
            return self._keys[ref]
        # A shred whose listings missed this key stored its marker first: the key goes
        # again, unused, and the session is refused as shredded.
        try:
            yield from self._refuse_if_shredded(session)
        except SessionShredded:
            yield from ops.delete(self.object_key(ref))
            raise
        key = DataKey(ref, fresh)
        with self._lock:
            self._keys[ref] = key
        return key

    def holds(self, ref: str) -> bool:
        """Whether data key ``ref`` is unwrapped here."""
        return ref in self._keys

    def ready(self) -> ops.Proc[None]:
        """Nothing: run through a driver's probing (``LogCore.writing``), the key store
        is probed before a verb reads anything else."""
        return
        yield

    def _refuse_if_shredded(self, session: str) -> ops.Proc[None]:
        """SessionShredded if ``session``'s shred marker is stored (one LIST)."""
        yield from self.refs_of(session)

    def refs_of(self, session: str) -> ops.Proc[list[str]]:
        """The refs of ``session``'s stored data keys, oldest first. SessionShredded if
        the session was shredded: no key is made for it again (a new key under a ref
        its entries name would turn "shredded" into "wrong key")."""
        objects, _ = yield from list_all(self.base + session + "/")
        names = [o.key[len(self.base):] for o in objects]
        if f"{session}/{SHREDDED}" in names:
            raise SessionShredded(session, f"{session}/{SHREDDED}")
        # Only data keys ({n:06d}); anything else put there is not one.
        return sorted(r for r in names if r.rsplit("/", 1)[1].isdigit() and r.count("/") == 1)

    def fetch_refs(self, refs: Iterable[str], session: str) -> ops.Proc[None]:
        """Unwrap every key of ``refs`` not held yet. SessionShredded if one is gone."""
        for ref in refs:
            if ref in self._keys:
                continue
            where = self.object_key(ref)
            try:
                blob = yield from ops.get(where)
            except ObjectNotFound:
                raise SessionShredded(session, ref) from None
            kek, wrapped = parse_key_object(blob.body, where)
            try:
                raw = yield ops.Unwrap(self.provider, ref, kek, wrapped)
            except EncryptionError as exc:
                raise EncryptionError(session, exc.reason, key_ref=ref) from None
            with self._lock:
                self._keys[ref] = DataKey(ref, bytes(raw))

    def fetch(self, entries: Iterable[Entry], session: str) -> ops.Proc[None]:
        """Unwrap the keys ``entries`` are sealed with (a fork's seed included)."""
        yield from self.fetch_refs(sorted(refs_in(entries) - self._keys.keys()), session)

    def shred(self, session: str, stored: bool = True) -> ops.Proc[list[str]]:
        """Delete every data key of ``session``; return their refs. The shred marker is
        stored before the keys are listed for deleting, so no writer makes the session a
        key again once they are gone: a key created before the marker is in that listing,
        and its creator, listing after its PUT, sees the marker. ``stored``: whether the
        session's head is; a session with neither a head nor a key is not one (a typo),
        and no marker is left to refuse that id for ever."""
        try:
            refs = yield from self.refs_of(session)
        except SessionShredded:  # shredded before (or half way): finish deleting
            refs = []
        else:
            if not refs and not stored:
                raise SessionNotFound(session)
            with contextlib.suppress(PreconditionFailed):  # a concurrent shred stored it
                yield from ops.put_if_absent(self.object_key(f"{session}/{SHREDDED}"), dumps({"v": 1, "refs": refs}))
        objects, _ = yield from list_all(self.base + session + "/")
        listed = (o.key[len(self.base):] for o in objects)
        refs = sorted(set(refs) | {r for r in listed if not r.endswith("/" + SHREDDED)})
        for ref in refs:
            yield from ops.delete(self.object_key(ref))
        with self._lock:
            for ref in refs:
                self._keys.pop(ref, None)
        return refs

    def open_data(self, kind: str, data: Any, session: str) -> Any:
        """``data`` with its envelope opened (held keys only), or as it is if not sealed."""
        parts = envelope_parts(data)
        if parts is None:
            return data
        ref, nonce, ct = parts
        key = self._keys.get(ref)
        if key is None:
            raise SessionShredded(session, ref)
        return key.open(kind, nonce, ct, session)

    def open_entries(self, entries: Sequence[Entry], session: str) -> list[Entry]:
        """``entries`` with their data decrypted. The hash stays the stored one (over the
        sealed record); the record is dropped, so the data's bytes are the plaintext's."""
        out: list[Entry] = []
        for e in entries:
            data = self._open_entry_data(e, session)
            out.append(e if data is e.data else new_entry(e.seq, e.prev, e.kind, e.ts, data, e.hash, b""))
        return out

    def open_acked(self, entries: Sequence[AckedEntry], session: str) -> list[AckedEntry]:
        """A commit's acknowledged entries with their data decrypted, so they equal the
        same entries as read (one under a key not held, from another writer's fork, stays
        sealed: a commit result is no place to fetch keys)."""
        out: list[AckedEntry] = []
        keys = self._keys
        for e in entries:
            parts = envelope_parts(e.data)
            if parts is None and e.seq == 0 and e.kind == FORK_KIND:
                if refs_in([e]) - keys.keys():
                    out.append(e)
                    continue
            elif parts is None or parts[0] not in keys:
                out.append(e)
                continue
            data = self._open_entry_data(e, session)
            out.append(e if data is e.data else
                       AckedEntry(e.seq, e.prev, e.kind, e.ts, data, e.hash, b"", session_id=e.session_id))
        return out

    def open_result(self, result: CommitResult[S], session: str) -> CommitResult[S]:
        """A commit result whose entries hold plaintext, as the same entries read do."""
        acked = self.open_acked(result.acked, session)
        opened = {id(a): b for a, b in zip(result.acked, acked, strict=True)}
        entries = [opened.get(id(e)) or self.open_acked([e], session)[0] for e in result.entries]
        return CommitResult(result._ws, entries, acked, result.fork, result.forks)

    def open_runs(self, runs: Sequence[EntryRun], session: str) -> list[EntryRun]:
        """Bulk readers' runs (:meth:`s3log.Log.read_runs`) with their data decrypted."""
        out: list[EntryRun] = []
        for run in runs:
            if not isinstance(run, RunColumns):
                out.append(tuple(self.open_entries(run, session)))
                continue
            values = [self.open_data(k, v, session) for k, v in zip(run.kinds, run.values, strict=True)]
            data = [d if v is w else dumps(w) for d, v, w in zip(run.data, run.values, values, strict=True)]
            out.append(replace(run, data=data, values=values))
        return out

    def fetch_runs(self, runs: Sequence[EntryRun], session: str) -> ops.Proc[None]:
        """Unwrap the keys ``runs`` are sealed with."""
        refs: set[str] = set()
        for run in runs:
            if isinstance(run, RunColumns):
                refs.update(p[0] for p in map(envelope_parts, run.values) if p is not None)
            else:
                refs |= refs_in(run)
        yield from self.fetch_refs(sorted(refs - self._keys.keys()), session)

    def _open_entry_data(self, e: Entry, session: str) -> Any:
        if e.seq == 0 and e.kind == FORK_KIND and isinstance(e.data, dict) and is_envelope(e.data.get("seed")):
            return {**e.data, "seed": self.open_data(FORK_KIND, e.data["seed"], session)}
        return self.open_data(e.kind, e.data, session)

    def reducer(self, inner: Reducer[S], key: DataKey, session: str) -> SealingReducer[S]:
        """``inner`` folding decrypted entries, its fork seeds sealed under ``key``."""
        return SealingReducer(inner, self, key, session)


class SuffixProbe:
    """``enough`` of a suffix read, over decrypted entries. A reducer-like callback does
    no I/O: an entry under a key not held yet stops the read (``missing``), and the
    caller fetches the key and reads again."""

    def __init__(self, ring: Keyring, session: str, enough: Callable[[Sequence[Entry]], bool]) -> None:
        self.ring = ring
        self.session = session
        self.enough = enough
        self.missing: set[str] = set()

    def __call__(self, entries: Sequence[Entry]) -> bool:
        missing = refs_in(entries) - self.ring._keys.keys()
        if missing:
            self.missing |= missing
            return True
        return self.enough(self.ring.open_entries(entries, self.session))


def seal_pending(pending: Sequence[PendingEntry], key: DataKey) -> list[PendingEntry]:
    """``pending`` sealed under ``key``: a keyed one deterministically, its digest over
    what is stored (as :meth:`s3log._api.queue.CommitQueue.add` does)."""
    out: list[PendingEntry] = []
    for p in pending:
        encoded = p.data_cbor or dumps(p.data)
        nonce = os.urandom(NONCE_LEN) if p.key is None else key.synthetic_nonce(p.key, p.kind, encoded)
        value, sealed = key.seal_cbor(p.kind, encoded, nonce, p.data)
        out.append(PendingEntry(p.kind, p.ts, value, sealed, p.key,
                                p.digest if p.key is None else append_digest(p.kind, sealed)))
    return out


def sealing_selector(select: Selector, key: DataKey, session: str) -> Selector:
    """``select`` (a compaction's) whose kept maps have their data sealed under ``key``:
    it sees plaintext (the history of a :class:`SealingReducer`), and a compaction must
    not store what it returns in the clear. Items that are not entry maps pass as they
    are, for the compaction to refuse by name."""

    def sealed(history: list[dict[str, Any]], head: Head) -> list[dict[str, Any]] | None:
        kept = select(history, head)
        if kept is None or not isinstance(kept, list):
            return kept
        out: list[Any] = []
        for m in kept:
            if isinstance(m, dict) and isinstance(m.get("kind"), str) and "data" in m:
                _, encoded = normalize_data_cbor(m["kind"], m["data"], session=session)
                m = {**m, "data": key.seal(m["kind"], encoded, os.urandom(NONCE_LEN))}
            out.append(m)
        return out

    return sealed


def refs_in(entries: Iterable[Entry]) -> set[str]:
    """The data keys ``entries`` are sealed with (a fork entry's sealed seed included)."""
    refs: set[str] = set()
    for e in entries:
        data = e.data
        if e.seq == 0 and e.kind == FORK_KIND and isinstance(data, dict):
            data = data.get("seed")
        parts = envelope_parts(data)
        if parts is not None:
            refs.add(parts[0])
    return refs


def refuse_sealed(entries: Iterable[Entry], session: str, *, sealed: bool = False) -> None:
    """EncryptionError if any of ``entries`` is sealed (or ``sealed``): this log has no
    key provider."""
    if sealed or refs_in(entries):
        raise EncryptionError(session, "the session is encrypted and this log has no key provider: "
                              "pass LogConfig(encryption=Encryption(provider))")


class PlainOnly(Generic[S]):
    """``inner``, for a log with no key provider: an entry it folds that is sealed raises
    EncryptionError naming the session (a fork of an encrypted session is refused before
    anything is written, not seeded with envelopes)."""

    def __init__(self, inner: Reducer[S], session: str) -> None:
        self.inner = inner
        self.session = session

    def initial(self) -> S:
        """The inner reducer's initial state."""
        return self.inner.initial()

    def apply(self, state: S, entry: Entry) -> S:
        """Fold ``entry``; EncryptionError if it is sealed."""
        refuse_sealed((entry,), self.session)
        return self.inner.apply(state, entry)

    def to_seed(self, state: S) -> Any:
        """The inner seed."""
        return self.inner.to_seed(state)

    def from_seed(self, seed: Any) -> S:
        """The inner state of a seed; EncryptionError if it is sealed."""
        if is_envelope(seed):
            refuse_sealed((), self.session, sealed=True)
        return self.inner.from_seed(seed)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # before __init__ set it (a copy): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


class SealingReducer(Generic[S]):
    """A reducer over plaintext: it opens each entry before ``inner`` folds it, and
    seals the seed a fork of its state carries (the seed is the state: plaintext)."""

    def __init__(self, inner: Reducer[S], keyring: Keyring, key: DataKey, session: str) -> None:
        self.inner = inner
        self.keyring = keyring
        self.key = key
        self.session = session

    def initial(self) -> S:
        """The inner reducer's initial state."""
        return self.inner.initial()

    def apply(self, state: S, entry: Entry) -> S:
        """Fold ``entry``, its data decrypted."""
        data = self.keyring.open_data(entry.kind, entry.data, self.session)
        if data is not entry.data:
            entry = new_entry(entry.seq, entry.prev, entry.kind, entry.ts, data, entry.hash, b"")
        return self.inner.apply(state, entry)

    def to_seed(self, state: S) -> Any:
        """The inner seed, sealed."""
        seed = self.inner.to_seed(state)
        return None if seed is None else self.key.seal(FORK_KIND, dumps(seed), os.urandom(NONCE_LEN))

    def from_seed(self, seed: Any) -> S:
        """The inner state of a (sealed or plain) seed."""
        return self.inner.from_seed(self.keyring.open_data(FORK_KIND, seed, self.session))

    def __getattr__(self, name: str) -> Any:
        # Optional hooks of the inner reducer (fork_meta...) pass through; "inner" itself
        # is looked up here only before __init__ set it (a copy): no recursion then.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
