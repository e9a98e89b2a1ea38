"""Encoding of entries, segments and heads (format v1) as deterministic CBOR.

Everything here is pure: bytes in, values out, or the reverse. An entry's hash is
SHA-256 over the deterministic encoding (RFC 8949 §4.2.1) of the map
``{seq, prev, kind, ts, data}``; the same encoding is used for whole objects so the
same content always gives the same bytes (and so the same key gives the same body).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cbor2

from .errors import CorruptionError, FormatVersionError, InvalidEntryError

FORMAT_VERSION = 1
HASH_LEN = 32
#: Kinds starting with this prefix are written by s3log itself.
RESERVED_KIND_PREFIX = "s3log."
FORK_KIND = "s3log.fork"


def dumps(value: Any) -> bytes:
    """Deterministic CBOR encoding of ``value``."""
    return cbor2.dumps(value, canonical=True)


def loads(data: bytes) -> Any:
    """Decode one CBOR item."""
    return cbor2.loads(data)


@dataclass(frozen=True, slots=True)
class Entry:
    """One link of a session's chain."""

    seq: int
    prev: bytes | None
    kind: str
    ts: int
    data: Any
    hash: bytes
    #: The entry's deterministic encoding when it was built here (empty when decoded):
    #: segments and heads splice it instead of encoding the entry again.
    raw: bytes = field(default=b"", compare=False, repr=False)

    @property
    def hash_hex(self) -> str:
        """The hash as 64 lowercase hex digits."""
        return self.hash.hex()

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


# A CBOR map and an array of the same items differ only in the first byte (major type
# 5 vs 4, same length): encoding the key/value sequence as one canonical array in one
# C call, then swapping the header, gives the deterministic map with keys already in
# canonical order ("ts", "seq", "data", "hash", "kind", "prev": shorter keys first,
# then bytewise), without building and sorting a dict per entry.


_K_HASH = dumps("hash")


def entry_hash(seq: int, prev: bytes | None, kind: str, ts: int, data: Any) -> bytes:
    """SHA-256 of the deterministic CBOR map ``{seq, prev, kind, ts, data}``.

    Equal to hashing ``dumps({...})`` (``test_spliced_hash_equals_the_canonical_map``).
    """
    body = dumps(["ts", ts, "seq", seq, "data", data, "kind", kind, "prev", prev])
    return hashlib.sha256(b"\xa5" + body[1:]).digest()


def entry_bytes(e: Entry) -> bytes:
    """The deterministic encoding of an entry's full map (with ``hash``)."""
    if e.raw:
        return e.raw
    body = dumps(["ts", e.ts, "seq", e.seq, "data", e.data, "hash", e.hash, "kind", e.kind, "prev", e.prev])
    return b"\xa6" + body[1:]


def _array_head(n: int) -> bytes:
    """The header of a CBOR array of ``n`` items (major type 4, shortest length form)."""
    if n < 24:
        return bytes([0x80 | n])
    if n < 0x100:
        return b"\x98" + n.to_bytes(1, "big")
    if n < 0x10000:
        return b"\x99" + n.to_bytes(2, "big")
    if n < 0x100000000:
        return b"\x9a" + n.to_bytes(4, "big")
    return b"\x9b" + n.to_bytes(8, "big")


def _entries_array(entries: Sequence[Entry]) -> bytes:
    return _array_head(len(entries)) + b"".join(entry_bytes(e) for e in entries)


def _map_with_raw(fields: Mapping[str, Any], raw: Mapping[str, bytes]) -> bytes:
    """A deterministic CBOR map of ``fields`` plus already-encoded values ``raw``."""
    items = [(dumps(k), dumps(v)) for k, v in fields.items()]
    items += [(dumps(k), v) for k, v in raw.items()]
    items.sort(key=lambda kv: kv[0])
    n = len(items)
    head = bytes([0xA0 | n]) if n < 24 else b"\xb8" + n.to_bytes(1, "big")
    return head + b"".join(k + v for k, v in items)


def check_kind(kind: object, *, allow_reserved: bool = False) -> str:
    """Validate an entry kind: a non-empty string, not in the reserved namespace."""
    if not isinstance(kind, str) or not kind:
        raise InvalidEntryError(kind, "kind must be a non-empty string")
    if len(kind) > 256:
        raise InvalidEntryError(kind, "kind is longer than 256 characters")
    _check_text(kind, kind, None)
    if not allow_reserved and kind.startswith(RESERVED_KIND_PREFIX):
        raise InvalidEntryError(kind, f"kinds starting with {RESERVED_KIND_PREFIX!r} are reserved")
    return kind


#: How deep entry data may nest. Stored objects wrap data in a few more levels (the
#: entry map, the entries array, the segment or head map) and the decoder must read
#: them back (cbor2 stops at 400 levels), so the bound leaves room for that; it also keeps
#: the C encoder far from the stack depth at which it crashes the process.
MAX_DATA_DEPTH = 256
#: What s3log's own entries may nest: a fork's seed wraps user data in a few levels.
MAX_INTERNAL_DEPTH = MAX_DATA_DEPTH + 16
#: The range of ``ts`` (ms since the epoch): a signed 64-bit integer, as every reader
#: (Arrow timestamp[ms], Parquet INT64) stores it.
MAX_TS = 2**63 - 1


def _check_tree(kind: str, data: Any, session: str | None, max_depth: int) -> None:
    """Refuse data that would not read back: too deep, or strings that are not UTF-8.

    Iterative (an explicit stack), so hostile depth cannot exhaust Python's stack either.
    """
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(kind, value, session)
            continue
        if isinstance(value, (dict, list, tuple)):
            if depth >= max_depth:
                raise InvalidEntryError(kind, f"data nests deeper than {max_depth} levels", session=session)
            if isinstance(value, dict):
                for k, v in value.items():
                    stack.append((k, depth + 1))
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in value)


def _check_text(kind: str, text: str, session: str | None) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEntryError(
            kind, f"a string is not valid Unicode (lone surrogate at index {exc.start})", session=session
        ) from None


def normalize_data(kind: str, data: Any, *, session: str | None = None, max_depth: int = MAX_DATA_DEPTH) -> Any:
    """Return ``data`` as a reader will see it after a round trip through CBOR.

    Raises :class:`InvalidEntryError` naming the kind when CBOR cannot encode it, when
    it nests deeper than :data:`MAX_DATA_DEPTH` or holds a string that is not valid
    Unicode, so bad input is refused at ``append`` time, before anything is written,
    and never poisons a later commit. The round trip also makes the writer's in-memory
    entries equal to what readers decode (a tuple becomes a list, for instance), so a
    hash is computed over exactly what is stored.
    """
    _check_tree(kind, data, session, max_depth)
    try:
        return loads(dumps(data))
    except (cbor2.CBOREncodeError, cbor2.CBORDecodeError, TypeError, ValueError, OverflowError,
            RecursionError) as exc:
        raise InvalidEntryError(kind, f"data cannot be encoded as CBOR: {exc}", session=session) from exc


def make_entry(seq: int, prev: bytes | None, kind: str, ts: int, data: Any) -> Entry:
    """Build an entry with its hash and encoding. ``data`` must already be normalized."""
    # The hashed map and the stored map share every item but "hash": encode them once.
    front = dumps(["ts", ts, "seq", seq, "data", data])[1:]
    back = dumps(["kind", kind, "prev", prev])[1:]
    h = hashlib.sha256(b"\xa5" + front + back).digest()
    return Entry(seq, prev, kind, ts, data, h, b"\xa6" + front + _K_HASH + dumps(h) + back)


def _entry_from_map(obj: Any, key: str) -> Entry:
    # The hot path of every read: exact type checks (cbor2 decodes maps to dict, ints
    # to int), one branch for the common shape, the detailed diagnosis only on failure.
    if type(obj) is dict:
        seq, prev, kind, ts, h = obj.get("seq"), obj.get("prev"), obj.get("kind"), obj.get("ts"), obj.get("hash")
        if (
            type(seq) is int and seq >= 0 and type(ts) is int and type(kind) is str
            and type(h) is bytes and len(h) == HASH_LEN
            and (prev is None or (type(prev) is bytes and len(prev) == HASH_LEN))
            and "data" in obj
        ):
            return Entry(seq, prev, kind, ts, obj["data"], h)
    raise _entry_error(obj, key)


def _entry_error(obj: Any, key: str) -> CorruptionError:
    if not isinstance(obj, Mapping):
        return CorruptionError(key, f"entry is a {type(obj).__name__}, expected a map")
    seq = obj.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return CorruptionError(key, f"entry seq is {seq!r}, expected an integer >= 0")
    prev = obj.get("prev")
    if prev is not None and not (isinstance(prev, bytes) and len(prev) == HASH_LEN):
        return CorruptionError(key, "entry prev is not null or a 32-byte hash", seq=seq)
    if not isinstance(obj.get("kind"), str):
        return CorruptionError(key, "entry kind is not a string", seq=seq)
    ts = obj.get("ts")
    if not isinstance(ts, int) or isinstance(ts, bool):
        return CorruptionError(key, "entry ts is not an integer", seq=seq)
    h = obj.get("hash")
    if not (isinstance(h, bytes) and len(h) == HASH_LEN):
        return CorruptionError(key, "entry hash is not a 32-byte string", seq=seq)
    return CorruptionError(key, "entry has no data field", seq=seq)


def _check_version(obj: Any, key: str, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise CorruptionError(key, f"{what} is a {type(obj).__name__}, expected a map")
    v = obj.get("v")
    if v != FORMAT_VERSION:
        raise FormatVersionError(key, v, FORMAT_VERSION)
    return obj


def _decode(body: bytes, key: str, what: str) -> Any:
    try:
        return loads(body)
    except Exception as exc:  # cbor2 raises several types for garbage input
        raise CorruptionError(key, f"{what} is not valid CBOR: {exc}") from exc


# ----------------------------------------------------------------------------- segments


@dataclass(frozen=True, slots=True)
class Segment:
    """An immutable run of consecutive entries of one session."""

    session: str
    entries: tuple[Entry, ...]


def encode_segment(session: str, entries: Sequence[Entry]) -> bytes:
    """The bytes of a segment object."""
    return _map_with_raw({"v": FORMAT_VERSION, "session": session}, {"entries": _entries_array(entries)})


def decode_segment(body: bytes, key: str) -> Segment:
    """Decode and shape-check a segment (the chain is verified by :mod:`s3log.chain`)."""
    obj = _check_version(_decode(body, key, "segment"), key, "segment")
    session = obj.get("session")
    entries = obj.get("entries")
    if not isinstance(session, str):
        raise CorruptionError(key, "segment session is not a string")
    if not isinstance(entries, list) or not entries:
        raise CorruptionError(key, "segment entries is not a non-empty array")
    return Segment(session, tuple(_entry_from_map(e, key) for e in entries))


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
        if not isinstance(session, str) or not isinstance(seq, int) or not isinstance(reason, str):
            raise CorruptionError(key, f"parent pointer is malformed: {dict(obj)!r}")
        if h is not None and not (isinstance(h, bytes) and len(h) == HASH_LEN):
            raise CorruptionError(key, "parent hash is not a 32-byte string")
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
class Head:
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

    @property
    def entry_count(self) -> int:
        """How many entries the session holds."""
        return self.seq + 1

    @property
    def tail_first_seq(self) -> int:
        """The seq the tail starts at (== seq + 1 when the tail is empty)."""
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
                "tail": [e.to_map() for e in self.tail],
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
        return out


def encode_head(head: Head) -> bytes:
    """The bytes of a head object (equal to ``dumps(head.to_map())``)."""
    fields = head.to_map()
    del fields["tail"]
    return _map_with_raw(fields, {"tail": _entries_array(head.tail)})


_HEAD_FIELDS = frozenset(
    {"v", "session", "version", "seq", "hash", "segments", "levels", "tail", "parent",
     "meta", "created_at", "updated_at", "writer", "ts_min", "ts_max", "retired_at", "creator", "sig", "lease"}
)


def _opt_int(value: Any, key: str, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptionError(key, f"head field {name!r} is {value!r}")
    return value


def decode_head(body: bytes, key: str) -> Head:
    """Decode and shape-check a head object."""
    obj = _check_version(_decode(body, key, "head"), key, "head")

    def need(name: str, typ: type | tuple[type, ...]) -> Any:
        value = obj.get(name)
        if not isinstance(value, typ) or isinstance(value, bool):
            raise CorruptionError(key, f"head field {name!r} is {value!r}")
        return value

    h = obj.get("hash")
    if h is not None and not (isinstance(h, bytes) and len(h) == HASH_LEN):
        raise CorruptionError(key, "head hash is not null or a 32-byte string")
    segments = need("segments", list)
    levels = obj.get("levels", [0] * len(segments))
    if not isinstance(levels, list) or len(levels) != len(segments):
        raise CorruptionError(key, "head levels do not match its segments")
    if not all(isinstance(s, str) for s in segments) or not all(isinstance(x, int) for x in levels):
        raise CorruptionError(key, "head segments must be strings and levels integers")
    parent = obj.get("parent")
    meta = obj.get("meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise CorruptionError(key, "head meta is not a map")
    return Head(
        session=need("session", str),
        version=need("version", int),
        seq=need("seq", int),
        hash=h,
        segments=tuple(segments),
        levels=tuple(levels),
        tail=tuple(_entry_from_map(e, key) for e in need("tail", list)),
        parent=ParentRef.from_map(parent, key) if parent is not None else None,
        meta=meta,
        created_at=need("created_at", int),
        updated_at=need("updated_at", int),
        writer=need("writer", str),
        ts_min=_opt_int(obj.get("ts_min"), key, "ts_min"),
        ts_max=_opt_int(obj.get("ts_max"), key, "ts_max"),
        retired_at=_opt_int(obj.get("retired_at"), key, "retired_at"),
        creator=obj["creator"] if isinstance(obj.get("creator"), str) else None,
        lease=Lease.from_map(obj["lease"], key) if obj.get("lease") is not None else None,
        # Fields a newer minor writer added are kept, so rewriting a head never drops them.
        extra={k: v for k, v in obj.items() if k not in _HEAD_FIELDS},
        sig=Signature.from_map(obj["sig"], key) if obj.get("sig") is not None else None,
    )
