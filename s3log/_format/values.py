"""The values of the format: an entry (its record and hash), a head and what a head holds.

An entry's hash is SHA-256 over the deterministic encoding (RFC 8949 §4.2.1) of the
map ``{seq, prev, kind, ts, data}``: its *record* (:func:`entry_record`). A head
(:class:`Head`) is a session's manifest and commit point: its parent pointer
(:class:`ParentRef`), signature (:class:`Signature`), lease, pending segment and
append keys. Their own room: every layer names these types, while their encodings
live in :mod:`s3log._format.entries` (entries, checked at ``append``),
:mod:`s3log._format.records` (v2 records read back) and :mod:`s3log._format.codec`
(whole segments and heads).
"""

from __future__ import annotations

import hashlib
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3log._format.cbor import dumps
from s3log._format.ids import validate_session_id
from s3log.errors import CorruptionError, InvalidSessionIdError

if TYPE_CHECKING:
    from s3log._format.columns import _LazyTail

#: The format this build writes by default (``LogConfig.format_version``).
FORMAT_VERSION = 2
#: Every format this build reads; anything else is refused with FormatVersionError.
READABLE_VERSIONS = (1, 2)
HASH_LEN = 32
#: Kinds starting with this prefix are written by s3log itself.
RESERVED_KIND_PREFIX = "s3log."
FORK_KIND = "s3log.fork"


#: Hex digits of a hash in reprs (8 bytes: unique among any log's entries in practice).
SHORT_HASH_HEX = 16


def short_hash(h: bytes | None) -> str:
    """A hash as reprs show it: its first :data:`SHORT_HASH_HEX` hex digits, or ``None``."""
    return "None" if h is None else bytes(h).hex()[:SHORT_HASH_HEX]


class _DataRepr(reprlib.Repr):
    """Reprs of entry data: bounded, bytes (hashes in a fork entry's seed) as short hex."""

    def repr_bytes(self, x: bytes, level: int) -> str:
        text = x.hex()
        return f"<{len(x)} bytes {text[:SHORT_HASH_HEX]}{'…' if len(text) > SHORT_HASH_HEX else ''}>"


#: An entry's data in its repr: nested levels, items and strings cut (a fork entry's seed is long).
_DATA_REPR = _DataRepr()
_DATA_REPR.maxlevel, _DATA_REPR.maxdict, _DATA_REPR.maxlist, _DATA_REPR.maxstring = 3, 6, 3, 80
_DATA_REPR.maxother = 80


@dataclass(frozen=True, slots=True)
class Entry:
    """One link of a session's chain."""

    seq: int
    prev: bytes | None
    kind: str
    ts: int
    data: Any
    hash: bytes
    #: The entry's record, the deterministic encoding of ``{seq, prev, kind, ts, data}``
    #: whose SHA-256 is ``hash`` (empty when decoded from a v1 object). Set only by
    #: :func:`make_entry` and the v2 decoder, which derive ``hash`` from it, so an entry
    #: with a record needs no re-encoding to be verified or written again.
    raw: bytes = field(default=b"", compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        # By value, whatever the class: an acknowledged entry (s3log.results.AckedEntry,
        # which also says where it is stored) equals the same entry as read.
        if not isinstance(other, Entry):
            return NotImplemented
        return (self.seq == other.seq and self.hash == other.hash and self.prev == other.prev
                and self.kind == other.kind and self.ts == other.ts and self.data == other.data)

    def __repr__(self) -> str:
        return f"Entry({self._repr_fields()})"

    def _repr_fields(self) -> str:
        """Seq, kind, ts, short hashes and a bounded view of the data: what a person
        reading a log line or a debugger needs (``raw``, the cached record, is left out)."""
        return (f"seq={self.seq}, kind={self.kind!r}, ts={self.ts}, hash={short_hash(self.hash)}, "
                f"prev={short_hash(self.prev)}, data={_DATA_REPR.repr(self.data)}")

    def to_map(self) -> dict[str, Any]:
        """The entry as the CBOR map stored in segments and heads."""
        return {
            "seq": self.seq,
            "prev": self.prev,
            "kind": self.kind,
            "ts": self.ts,
            "data": self.data,
            "hash": self.hash,
        }


if TYPE_CHECKING:
    # What the type checker sees: calling _NewEntry gives an Entry (its __init__ turns
    # the object into one), with Entry's fields in the same order.
    _NewEntry = Entry
else:

    class _NewEntry:
        """Makes an :class:`Entry` in one plain ``__init__`` (hot paths only).

        A frozen dataclass sets each field through ``object.__setattr__``, which costs
        more than hashing a small entry. This class has the same slots; its ``__init__``
        assigns them directly and then turns the object into an ``Entry`` (CPython allows
        ``__class__`` assignment between classes with the same slot layout and raises
        TypeError otherwise, so a change to Entry's fields cannot go unnoticed). The result is
        an ordinary frozen Entry.
        """

        __slots__ = ("seq", "prev", "kind", "ts", "data", "hash", "raw")  # noqa: RUF023 - Entry's order

        def __init__(self, seq: int, prev: bytes | None, kind: str, ts: int, data: Any, h: bytes, raw: bytes) -> None:
            self.seq = seq
            self.prev = prev
            self.kind = kind
            self.ts = ts
            self.data = data
            self.hash = h
            self.raw = raw
            self.__class__ = Entry


#: :class:`_NewEntry`, for ``map``.
_NEW_ENTRY: Callable[..., Entry] = _NewEntry


def _new_entry(seq: int, prev: bytes | None, kind: str, ts: int, data: Any, h: bytes, raw: bytes) -> Entry:
    return _NewEntry(seq, prev, kind, ts, data, h, raw)


#: For the protocol: an :class:`Entry` of fields already checked, made without the
#: frozen dataclass's per-field ``object.__setattr__``.
new_entry = _new_entry


def entry_hash(seq: int, prev: bytes | None, kind: str, ts: int, data: Any) -> bytes:
    """SHA-256 of the deterministic CBOR map ``{seq, prev, kind, ts, data}``.

    Equal to hashing ``dumps({...})`` (``test_spliced_hash_equals_the_canonical_map``).
    """
    return hashlib.sha256(_record(seq, prev, kind, ts, data)).digest()


def _record(seq: int, prev: bytes | None, kind: str, ts: int, data: Any) -> bytes:
    return b"\xa5" + dumps(["ts", ts, "seq", seq, "data", data, "kind", kind, "prev", prev])[1:]


def entry_record(e: Entry) -> bytes:
    """The entry's record: the deterministic encoding of ``{seq, prev, kind, ts, data}``."""
    return e.raw or _record(e.seq, e.prev, e.kind, e.ts, e.data)


# --------------------------------------------------------------------------------- head


@dataclass(frozen=True, slots=True)
class ParentRef:
    """Where a fork came from: the parent session and the last entry it inherited."""

    session: str
    seq: int
    hash: bytes | None
    reason: str

    def to_map(self) -> dict[str, Any]:
        """The parent pointer as stored."""
        return {"session": self.session, "seq": self.seq, "hash": self.hash, "reason": self.reason}

    @staticmethod
    def from_map(obj: Any, key: str) -> ParentRef:
        """Decode a stored parent pointer."""
        if not isinstance(obj, Mapping):
            raise CorruptionError(key, "parent is not a map")
        session, seq, h, reason = obj.get("session"), obj.get("seq"), obj.get("hash"), obj.get("reason")
        if not isinstance(session, str) or type(seq) is not int or not isinstance(reason, str) or "hash" not in obj:
            raise CorruptionError(key, f"parent pointer is malformed: {dict(obj)!r}")
        if h is not None and not (isinstance(h, bytes) and len(h) == HASH_LEN):
            raise CorruptionError(key, "parent hash is not a 32-byte string")
        try:
            validate_session_id(session)
        except InvalidSessionIdError as exc:  # a key of it would leave the prefix, or none is valid
            raise CorruptionError(key, f"parent session is not a session id: {exc}") from None
        return ParentRef(session, seq, h, reason)


@dataclass(frozen=True, slots=True)
class Signature:
    """A head's signature (see docs/format.md, "Signed heads" and :mod:`s3log.signing`)."""

    alg: str
    key_id: str
    value: bytes

    def to_map(self) -> dict[str, Any]:
        """The signature as stored in the head's ``sig`` field."""
        return {"alg": self.alg, "key_id": self.key_id, "value": self.value}

    @staticmethod
    def from_map(obj: Any, key: str) -> Signature:
        """Decode a stored signature (shape only: :mod:`s3log.signing` checks it)."""
        if not isinstance(obj, Mapping):
            raise CorruptionError(key, "head sig is not a map")
        alg, key_id, value = obj.get("alg"), obj.get("key_id"), obj.get("value")
        if not isinstance(alg, str) or not isinstance(key_id, str) or not isinstance(value, bytes):
            raise CorruptionError(key, "head sig must hold alg and key_id strings and a value byte string")
        return Signature(alg, key_id, value)
@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's claim on a session, recorded in the head by its commits.

    Advisory: the log never refuses a commit because of it; the agent layer reads it
    to tell a live worker's open turn from a crashed one (docs/agent.md, leases).
    """

    owner: str
    expires_at: int

    def live(self, now_ms: int) -> bool:
        """Whether the lease has not expired at ``now_ms``."""
        return now_ms < self.expires_at

    def to_map(self) -> dict[str, Any]:
        """The lease as stored."""
        return {"owner": self.owner, "expires_at": self.expires_at}

    @staticmethod
    def from_map(obj: Any, key: str) -> Lease:
        """Decode a stored lease."""
        if not isinstance(obj, Mapping):
            raise CorruptionError(key, "lease is not a map")
        owner, expires = obj.get("owner"), obj.get("expires_at")
        if not isinstance(owner, str) or not isinstance(expires, int) or isinstance(expires, bool):
            raise CorruptionError(key, f"lease is malformed: {dict(obj)!r}")
        return Lease(owner, expires)


@dataclass(frozen=True, slots=True)
class Pending:
    """A segment written in the same round trip as the head that names it here.

    The head keeps the segment's entries inline as well: it does not *reference* the
    segment (no reader reads it) until a later commit, whose writer has confirmed the
    segment is stored, moves it into ``segments``. ``key`` holds the entries from the
    first seq its name carries through ``last``; promoted, it replaces the last
    ``take`` segments of the manifest and the tail entries up to ``last``, at merge
    level ``level``.
    """

    key: str
    last: int
    level: int
    take: int

    def to_map(self) -> dict[str, Any]:
        """The pending segment as stored in the head."""
        return {"key": self.key, "last": self.last, "level": self.level, "take": self.take}

    @staticmethod
    def from_map(obj: Any, key: str) -> Pending:
        """Decode a head's ``pending`` field."""
        if not isinstance(obj, Mapping):
            raise CorruptionError(key, "head field 'pending' is not a map")
        seg, last, level, take = obj.get("key"), obj.get("last"), obj.get("level"), obj.get("take")
        ints = (last, level, take)
        if not isinstance(seg, str) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ints):
            raise CorruptionError(key, f"head field 'pending' is malformed: {dict(obj)!r}")
        assert isinstance(last, int) and isinstance(level, int) and isinstance(take, int)
        if level < 0 or take < 0:
            raise CorruptionError(key, f"head field 'pending' is malformed: {dict(obj)!r}")
        return Pending(seg, last, level, take)


#: The longest idempotency key an append takes, in UTF-8 bytes (a UUID or a
#: SHA-256 in hex fits): the head keeps the newest keys, so each one is bounded.
APPEND_KEY_MAX_BYTES = 64
#: Bytes of an append key's digest of the entry's kind and data.
APPEND_DIGEST_LEN = 16


def append_digest(kind: str, data_cbor: bytes) -> bytes:
    """What an append key remembers of its entry: a digest of its kind and data (not its
    ts, which a retry need not repeat), so a key reused for other content is refused."""
    return hashlib.sha256(dumps(kind) + data_cbor).digest()[:APPEND_DIGEST_LEN]


@dataclass(frozen=True, slots=True)
class AppendKey:
    """An idempotency key the head remembers: the entry appended with it is ``seq`` of
    ``session`` (None: the head's own session; else an ancestor the head forked from),
    with kind and data of ``digest`` (:func:`append_digest`). See docs/format.md."""

    key: str
    seq: int
    digest: bytes
    session: str | None = None

    def to_list(self) -> list[Any]:
        """The key as stored in the head's ``append_keys``."""
        out: list[Any] = [self.key, self.seq, self.digest]
        if self.session is not None:
            out.append(self.session)
        return out

    @staticmethod
    def from_list(obj: Any, key: str) -> AppendKey:
        """Decode one item of a head's ``append_keys``."""
        if not isinstance(obj, list) or len(obj) not in (3, 4):
            raise CorruptionError(key, f"head field 'append_keys' holds {obj!r}, not [key, seq, digest(, session)]")
        k, seq, digest = obj[0], obj[1], obj[2]
        session = obj[3] if len(obj) == 4 else None
        if not (type(k) is str and k and type(seq) is int and seq >= 0 and type(digest) is bytes
                and len(digest) == APPEND_DIGEST_LEN and (session is None or type(session) is str)):
            raise CorruptionError(key, f"head field 'append_keys' holds a malformed item {obj!r}")
        return AppendKey(k, seq, digest, session)


class _HeadSlots:
    """Where a decoded :class:`Head` keeps its tail until the entries are first asked
    for (a :class:`_LazyTail`). A slot outside the dataclass's fields: not compared,
    copied, pickled or shown, as the tail it stands for is."""

    __slots__ = ("_lazy_tail",)


#: The head field a compaction writes (``s3log._protocol.compact.compact_session``): the end of
#: the chain it replaced and the hashes of its last entries. A writer settling a lost
#: reply decides from it, so a signature covers it (``s3log.signing.compacted_digest``).
COMPACTED_FIELD = "compacted"


@dataclass(frozen=True, slots=True)
class Head(_HeadSlots):
    """A session's head: its manifest and commit point.

    ``seq``/``hash`` name the last committed entry (``-1``/``None`` while empty).
    ``segments`` lists every segment of the chain in order and ``levels`` their merge
    levels; ``tail`` holds the newest entries inline. ``version`` counts commits.
    """

    session: str
    version: int
    seq: int
    hash: bytes | None
    segments: tuple[str, ...]
    levels: tuple[int, ...]
    tail: tuple[Entry, ...]
    parent: ParentRef | None
    meta: dict[str, Any]
    created_at: int
    updated_at: int
    writer: str
    #: The smallest and largest entry ``ts`` of the session (None while empty), so a
    #: scan over a time window can skip a session from its head alone.
    ts_min: int | None = None
    ts_max: int | None = None
    #: When a commit last removed segments from the manifest (a merge), in ms: gc keeps
    #: unreferenced segments of a session until this is older than its grace period,
    #: so a reader holding the previous head can still read them.
    retired_at: int | None = None
    #: A nonce of the writer that created the session (None for heads written before it
    #: existed): lets that writer recognise its own create whose response was lost.
    creator: str | None = None
    #: The worker holding the session, if any (see :class:`Lease`).
    lease: Lease | None = None
    v: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    #: The writer's signature over the head's identity (see :mod:`s3log.signing`); None unsigned.
    sig: Signature | None = None
    #: A segment written alongside this head and not yet part of the manifest (see
    #: :class:`Pending`); readers ignore it, every entry it holds is also listed here.
    pending: Pending | None = None
    #: The newest idempotency keys of appends (oldest first, a bounded window): a retry
    #: of one of them is answered with the stored entry, not stored again.
    append_keys: tuple[AppendKey, ...] = ()

    if not TYPE_CHECKING:  # (hidden from mypy: it would type every misspelt attribute Any)

        def __getattr__(self, name: str) -> Any:
            # Called only for a slot holding nothing: a decoded head's tail not made yet.
            if name != "tail":
                # Python calls this also when a property raised AttributeError: looking
                # again raises that error (or the plain one), not one naming the property.
                return object.__getattribute__(self, name)
            lazy = getattr(self, "_lazy_tail", None)
            if lazy is None:  # another thread made it meanwhile (it sets the tail first)
                return object.__getattribute__(self, "tail")
            tail = lazy.entries()
            object.__setattr__(self, "tail", tail)
            object.__setattr__(self, "_lazy_tail", None)
            return tail

    @property
    def entry_count(self) -> int:
        """How many entries the session holds."""
        return self.seq + 1

    @property
    def expired(self) -> bool:
        """Whether this head is the tombstone of an expired session: it lists no entries,
        and readers report the session as expired (docs/format.md, ``expired``)."""
        return isinstance(self.extra.get("expired"), dict)

    @property
    def tail_first_seq(self) -> int:
        """The seq the tail starts at (== seq + 1 when the tail is empty)."""
        lazy: _LazyTail | None = getattr(self, "_lazy_tail", None)
        if lazy is not None:
            return lazy.columns.seq
        return self.tail[0].seq if self.tail else self.seq + 1

    def summary(self) -> dict[str, Any]:
        """A short description used in conflict errors and reports."""
        return {
            "version": self.version,
            "seq": self.seq,
            "hash": self.hash.hex() if self.hash else None,
            "writer": self.writer,
        }

    def to_map(self) -> dict[str, Any]:
        """The head as stored."""
        out = self._fields()
        if self.v == 1:
            out["tail"] = [e.to_map() for e in self.tail]
        else:
            out["tail"] = [entry_record(e) for e in self.tail]
            out["tail_hashes"] = [e.hash for e in self.tail]
        return out

    def _fields(self) -> dict[str, Any]:
        """Every stored field but the tail."""
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "v": self.v,
                "session": self.session,
                "version": self.version,
                "seq": self.seq,
                "hash": self.hash,
                "segments": list(self.segments),
                "levels": list(self.levels),
                "parent": self.parent.to_map() if self.parent else None,
                "meta": self.meta,
                "created_at": self.created_at,
                "updated_at": self.updated_at,
                "writer": self.writer,
                "ts_min": self.ts_min,
                "ts_max": self.ts_max,
            }
        )
        if self.retired_at is not None:
            out["retired_at"] = self.retired_at
        if self.creator is not None:
            out["creator"] = self.creator
        if self.sig is not None:
            out["sig"] = self.sig.to_map()
        if self.lease is not None:
            out["lease"] = self.lease.to_map()
        if self.pending is not None:
            out["pending"] = self.pending.to_map()
        if self.append_keys:
            out["append_keys"] = [k.to_list() for k in self.append_keys]
        return out
