"""Encoding of entries, segments and heads (formats v1 and v2) as deterministic CBOR.

Everything here is pure: bytes in, values out, or the reverse. An entry's hash is
SHA-256 over the deterministic encoding (RFC 8949 §4.2.1) of the map
``{seq, prev, kind, ts, data}``: its *record*. Format v1 stores each entry as that map
plus ``hash``, so a reader re-encodes every entry to check it; format v2 stores the
record itself as a byte string, so a reader hashes the stored bytes and decodes the
records of a whole segment in one call, and never encodes anything. The hash of an
entry is the same in both formats, so one chain may mix v1 and v2 objects. The same
encoding is used for whole objects so the same content always gives the same bytes
(and so the same key gives the same body).
"""

from __future__ import annotations

import hashlib
import io
import reprlib
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import add as _add
from operator import attrgetter, is_, itemgetter
from operator import lt as _lt
from operator import sub as _sub
from typing import TYPE_CHECKING, Any, cast

import cbor2

from s3log._format.ids import validate_session_id
from s3log.errors import (
    CorruptionError,
    FormatVersionError,
    InvalidArgumentError,
    InvalidEntryError,
    InvalidSessionIdError,
)

#: The format this build writes by default (``LogConfig.format_version``).
FORMAT_VERSION = 2
#: Every format this build reads; anything else is refused with FormatVersionError.
READABLE_VERSIONS = (1, 2)
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


# A CBOR map and an array of the same items differ only in the first byte (major type
# 5 vs 4, same length): encoding the key/value sequence as one canonical array in one
# C call, then swapping the header, gives the deterministic map with keys already in
# canonical order ("ts", "seq", "data", "kind", "prev", and "hash" between "data" and
# "kind" in a v1 entry: shorter keys first, then bytewise), without building and
# sorting a dict per entry.


_K_HASH = dumps("hash")
#: How a record ends after its data: the "kind" key, then the kind, then "prev".
_K_KIND = dumps("kind")
_K_DATA = dumps("data")
_K_PREV = dumps("prev")
_PREV_NULL = dumps("prev") + dumps(None)
#: A record up to its ts value, and the "seq" key (see the layout in docs/format.md).
_R_TS = b"\xa5" + dumps("ts")
_R_SEQ = dumps("seq")
_BYTES32 = b"\x58\x20"  # the head of a 32-byte string
_PREV_HASH = dumps("prev") + b"\x58\x20"  # a 32-byte string follows


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


def _head_len(n: int) -> int:
    """Bytes of the CBOR head of an integer or a length ``n`` (shortest form)."""
    if n < 0:
        n = -1 - n
    return 1 if n < 24 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9


def _kind_offset(e: Entry) -> int:
    """Where the "kind" key starts in the entry's record (just after its data)."""
    k = len(e.kind) if e.kind.isascii() else len(e.kind.encode("utf-8"))
    return len(e.raw) - (len(_PREV_NULL) if e.prev is None else len(_PREV_HASH) + HASH_LEN) - k - _head_len(k) - 5


#: Bytes taken by an integer whose CBOR encoding starts with this byte (major types 0
#: and 1, the only ones a record's ts and seq may have); 0 for any other byte.
_INT_LEN = bytes(
    1 if (b & 0x1F) < 24 else {24: 2, 25: 3, 26: 5, 27: 9}.get(b & 0x1F, 0) if b < 0x40 else 0 for b in range(256)
)


def entry_data_cbor(e: Entry) -> bytes:
    """The deterministic encoding of ``e.data``: a slice of the record when there is one."""
    return data_cbor_column([e])[0]


def data_cbor_column(entries: Sequence[Entry]) -> list[bytes]:
    """:func:`entry_data_cbor` of many entries (the analytics ``data_cbor`` column)."""
    columns = getattr(entries, "columns", None)  # a LinkedRun read off its records
    if columns is not None:
        return list(columns.data)
    out: list[bytes] = []
    kind_len: dict[str, int] = {}
    k_data, k_kind, int_len = _K_DATA, _K_KIND, _INT_LEN
    for e in entries:
        raw = e.raw
        if raw:
            # a5 62"ts" <ts> 63"seq" <seq> 64"data" <data> 64"kind" <kind> 64"prev" <prev>
            p = 4 + int_len[raw[4]]
            q = p + 4 + int_len[raw[p + 4]] if len(raw) > p + 4 else 0
            k = kind_len.get(e.kind)
            if k is None:
                n = len(e.kind.encode("utf-8"))
                k = kind_len[e.kind] = 5 + _head_len(n) + n
            end = len(raw) - (6 if e.prev is None else 39) - k
            # A record not in the shape s3log writes falls back to encoding the data
            # rather than returning a wrong slice.
            if raw[q : q + 5] == k_data and raw[end : end + 5] == k_kind and q + 5 < end:
                out.append(raw[q + 5 : end])
                continue
        out.append(dumps(e.data))
    return out


def entry_bytes(e: Entry) -> bytes:
    """The deterministic encoding of an entry's full map (with ``hash``): format v1."""
    if e.raw:
        cut = _kind_offset(e)
        return b"\xa6" + e.raw[1:cut] + _K_HASH + b"\x58\x20" + e.hash + e.raw[cut:]
    body = dumps(["ts", e.ts, "seq", e.seq, "data", e.data, "hash", e.hash, "kind", e.kind, "prev", e.prev])
    return b"\xa6" + body[1:]


def _array_head(n: int) -> bytes:
    """The header of a CBOR array of ``n`` items (major type 4, shortest length form)."""
    return _length_head(0x80, n)


def _length_head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major | n])
    if n < 0x100:
        return bytes([major | 24]) + n.to_bytes(1, "big")
    if n < 0x10000:
        return bytes([major | 25]) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes([major | 26]) + n.to_bytes(4, "big")
    return bytes([major | 27]) + n.to_bytes(8, "big")


def _entries_array(entries: Sequence[Entry]) -> bytes:
    """Format v1: the entries as an array of full maps (with ``hash``)."""
    return _array_head(len(entries)) + b"".join(entry_bytes(e) for e in entries)


def _hashes_array(entries: Sequence[Entry]) -> bytes:
    """Format v2: the entries' hashes as an array of 32-byte strings."""
    return _array_head(len(entries)) + _hash_items(entries)


def _hash_items(entries: Iterable[Entry]) -> bytes:
    """The entries' hashes as the items of a CBOR array (32-byte strings), no array head."""
    return b"".join(map(_add, repeat(_BYTES32), map(_HASH_OF, entries)))


#: A map's layout (see :func:`_map_layout`), by its plain and raw keys: a head has the
#: same few key sets commit after commit.
_LAYOUTS: dict[tuple[tuple[Any, ...], tuple[Any, ...]], tuple[bytes, tuple[tuple[bool, Any, Any], ...]]] = {}


def _map_layout(plain: tuple[Any, ...], raw: tuple[Any, ...]) -> tuple[bytes, tuple[tuple[bool, Any, Any], ...]]:
    """The head of a map with these keys, then its pieces in key order: ``(True,
    encoded key, key)`` for a raw value, ``(False, keys, None)`` for a run of plain keys
    between raw ones."""
    layout = _LAYOUTS.get((plain, raw))
    if layout is not None:
        return layout
    keys = sorted([(dumps(k), k, False) for k in plain] + [(dumps(k), k, True) for k in raw], key=_encoded_order)
    pieces: list[tuple[bool, Any, Any]] = []
    run: list[Any] = []
    for encoded, k, is_raw in keys:
        if is_raw:
            if run:
                pieces.append((False, tuple(run), None))
                run = []
            pieces.append((True, encoded, k))
        else:
            run.append(k)
    if run:
        pieces.append((False, tuple(run), None))
    layout = (_length_head(0xA0, len(keys)), tuple(pieces))
    # Only key sets of text are cached: keys of other types (an extra field of a newer
    # writer) can be equal and hash alike while their encodings differ (1, 1.0, True),
    # so one would be written with the other's key and place in the map.
    if len(_LAYOUTS) < 256 and all(type(k) is str for k in plain):  # bounded: extra fields vary
        _LAYOUTS[(plain, raw)] = layout
    return layout


def _map_with_raw(fields: Mapping[Any, Any], raw: Mapping[Any, bytes]) -> bytes:
    """A deterministic CBOR map of ``fields`` plus already-encoded values ``raw``.

    The keys are in the deterministic order (their encodings, shorter first, then
    bytewise; a head's own keys are short text, an extra field kept from a newer
    writer may be anything). The plain key/value pairs between two raw values are
    encoded as one array in one C call (a deterministic encoding is the same alone or
    nested) whose head is cut off: a commit encodes its head in a few calls, not two
    per field.
    """
    head, pieces = _map_layout(tuple(fields), tuple(raw))
    out = [head]
    for is_raw, a, b in pieces:
        if is_raw:
            out.append(a)
            out.append(raw[b])
        else:
            flat: list[Any] = [None] * (2 * len(a))
            flat[0::2] = a
            flat[1::2] = map(fields.__getitem__, a)
            out.append(dumps(flat)[_head_len(len(flat)):])
    return b"".join(out)


def _encoded_order(item: tuple[bytes, Any, bool]) -> tuple[int, bytes]:
    return len(item[0]), item[0]


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
#: The largest ``ts`` (ms since the epoch) ``append`` takes: the latest time every reader
#: holds, 294247-01-10 UTC (DuckDB's ``TIMESTAMPTZ``, microseconds in a signed 64-bit
#: integer; Arrow's ``timestamp[ms]`` and Parquet's INT64 hold more). Up to 2**63-1 was
#: taken before, and an entry past this bound, once acknowledged, made every scan skip
#: its whole session as corrupt (``analytics.TS_RANGE``). The format still allows any
#: uint: such entries already stored read back through :meth:`s3log.Log.read`.
MAX_TS = (2**63 - 2) // 1000


def check_ts(kind: object, ts: object, *, session: str | None = None) -> int:
    """Validate an entry's ``ts``: an int of milliseconds from 0 to :data:`MAX_TS`."""
    if not isinstance(ts, int) or isinstance(ts, bool) or not 0 <= ts <= MAX_TS:
        raise InvalidEntryError(
            kind, f"ts must be an integer of milliseconds from 0 to {MAX_TS} (294247-01-10 UTC), not {ts!r}",
            session=session,
        )
    return ts


#: Scalars whose deterministic encoding decodes to an equal value that encodes to the
#: same bytes again (see :func:`normalize_data_cbor`).
_PLAIN_SCALARS = frozenset({int, float, bool, bytes, type(None)})


def _check_tree(kind: str, data: Any, session: str | None, max_depth: int) -> bool:
    """Refuse data that would not read back: too deep, or strings that are not UTF-8.
    Return whether it holds only maps, arrays, text and plain scalars.

    Iterative (an explicit stack), so hostile depth cannot exhaust Python's stack either.
    """
    if type(data) is dict and max_depth > 0 and _flat_map_ok(kind, data, session):
        return True
    plain = True
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii():  # ASCII text is always valid Unicode
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
        elif type(value) not in _PLAIN_SCALARS:
            plain = False
            # A tag and a set nest too: the decoder counts a tag as a level (a set is
            # tag 258 around an array), so what they hold is checked and counted as well.
            # Unchecked, a tag chain or tuples in a set nested ~400 deep were acknowledged
            # and the session could not be decoded.
            if isinstance(value, cbor2.CBORTag):
                if depth >= max_depth:
                    raise InvalidEntryError(kind, f"data nests deeper than {max_depth} levels", session=session)
                stack.append((value.value, depth + 1))
            elif isinstance(value, (set, frozenset)):
                if depth + 1 >= max_depth:
                    raise InvalidEntryError(kind, f"data nests deeper than {max_depth} levels", session=session)
                stack.extend((v, depth + 2) for v in value)
    return plain


def _flat_map_ok(kind: str, data: dict[Any, Any], session: str | None) -> bool:
    """Whether ``data`` is a map of text and plain scalars only (the common entry), each
    text valid Unicode: then :func:`_check_tree` is done in one pass, with no stack. A
    key or value of any other type (a nested map or array, a tag...) returns False and
    the whole tree is checked the general way."""
    for k, v in data.items():
        tk, tv = type(k), type(v)
        if tk is str:
            if not k.isascii():
                _check_text(kind, k, session)
        elif tk not in _PLAIN_SCALARS:
            return False
        if tv is str:
            if not v.isascii():
                _check_text(kind, v, session)
        elif tv not in _PLAIN_SCALARS:
            return False
    return True


def _check_text(kind: str, text: str, session: str | None) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEntryError(
            kind, f"a string is not valid Unicode (lone surrogate at index {exc.start})", session=session
        ) from None


def normalize_data(kind: str, data: Any, *, session: str | None = None, max_depth: int = MAX_DATA_DEPTH) -> Any:
    """:func:`normalize_data_cbor` without the encoding."""
    return normalize_data_cbor(kind, data, session=session, max_depth=max_depth)[0]


def normalize_data_cbor(
    kind: str, data: Any, *, session: str | None = None, max_depth: int = MAX_DATA_DEPTH
) -> tuple[Any, bytes]:
    """Return ``data`` as a reader will see it after a round trip through CBOR.

    Raises :class:`InvalidEntryError` naming the kind when CBOR cannot encode it, when
    it nests deeper than :data:`MAX_DATA_DEPTH` or holds a string that is not valid
    Unicode, so bad input is refused at ``append`` time, before anything is written,
    and never poisons a later commit. The round trip also makes the writer's in-memory
    entries equal to what readers decode (a tuple becomes a list, for instance), so a
    hash is computed over exactly what is stored.
    """
    plain = _check_tree(kind, data, session, max_depth)
    try:
        encoded = dumps(data)
        # Also the data's bytes in the record (a deterministic encoding is the same
        # alone or nested), so a commit need not encode the data again.
        value = loads(encoded)
        # Other values (a tag, a datetime, a set...) must come back as something that
        # encodes to the same bytes: else a version 1 reader, which hashes the data as
        # encoded again, or a reader that refuses a tag s3log does not write (28, 29,
        # 55799, 256), could not read the entry once acknowledged.
        stable = plain or dumps(value) == encoded
    except (cbor2.CBOREncodeError, cbor2.CBORDecodeError, TypeError, ValueError, OverflowError,
            RecursionError) as exc:
        raise InvalidEntryError(kind, f"data cannot be encoded as CBOR: {exc}", session=session) from exc
    if not stable:
        raise InvalidEntryError(
            kind, "data does not read back as written: it holds a value that CBOR gives back in another form "
            "(a tag read through or shared, such as 55799, 256, 28 or 29, or a tag 1 time); store the value "
            "it stands for instead", session=session)
    return value, encoded


#: The end of a record after its data, up to prev's value, by kind (see make_entry).
_KIND_TAILS: dict[str, bytes] = {}
_NULL = dumps(None)


def _uint(n: int) -> bytes:
    """The deterministic encoding of an integer: a major-type-0 head when in [0, 2**64)."""
    return _length_head(0x00, n) if 0 <= n < 2**64 else dumps(n)


def make_entry(seq: int, prev: bytes | None, kind: str, ts: int, data: Any, data_cbor: bytes = b"") -> Entry:
    """Build an entry with its record and hash. ``data`` must already be normalized;
    ``data_cbor``, if given, is its deterministic encoding (spliced into the record)."""
    if data_cbor:
        # The record laid out by hand around the data's bytes (docs/format.md, "Entry"
        # and "Format v2"): no encoder call per entry. The kind's part is the same every time.
        tail = _KIND_TAILS.get(kind)
        if tail is None:
            tail = _K_KIND + dumps(kind) + _K_PREV
            if len(_KIND_TAILS) < 4096:  # kinds are few; a flood of new ones is not cached
                _KIND_TAILS[kind] = tail
        raw = b"".join((_R_TS, _uint(ts), _R_SEQ, _uint(seq), _K_DATA, data_cbor, tail,
                        _NULL if prev is None else _BYTES32 + prev if len(prev) == HASH_LEN else dumps(prev)))
    else:
        raw = _record(seq, prev, kind, ts, data)
    return _new_entry(seq, prev, kind, ts, data, hashlib.sha256(raw).digest(), raw)


def _entry_from_map(obj: Any, key: str) -> Entry:
    # The hot path of every read: exact type checks (cbor2 decodes maps to dict, ints
    # to int), one branch for the common shape, the detailed diagnosis only on failure.
    if type(obj) is dict:
        seq, prev, kind, ts, h = obj.get("seq"), obj.get("prev"), obj.get("kind"), obj.get("ts"), obj.get("hash")
        if (
            type(seq) is int and seq >= 0 and type(ts) is int and type(kind) is str
            and type(h) is bytes and len(h) == HASH_LEN
            and (prev is None or (type(prev) is bytes and len(prev) == HASH_LEN))
            and "data" in obj and "prev" in obj
        ):
            return _new_entry(seq, prev, kind, ts, obj["data"], h, b"")
    raise _entry_error(obj, key)


@dataclass(frozen=True, slots=True)
class RunColumns:
    """A v2 segment's entries as the columns it stores, verified as its entries would be.

    Made only by :func:`decode_segment_columns`, after the same checks as the entries
    :func:`decode_segment` makes (every record rebuilt and hashed, the hashes equal to
    the stored ones, so the run is linked; each data item exactly one CBOR item), and
    by the decoder of a v2 head's tail beside its entries (:attr:`LinkedRun.columns`). The
    seqs run from ``seq``; the first entry's prev is ``prev``, each other's the hash
    before it. ``data`` holds each entry's data item as stored (its deterministic CBOR
    encoding, the bytes its record was hashed over), ``values`` the same decoded. For a
    columnar reader (s3log.analytics): no Entry is made, no record sliced.
    """

    seq: int
    prev: bytes | None
    ts: list[int]
    kinds: list[str]
    data: list[bytes]
    hashes: list[bytes]
    values: list[Any]


class LinkedRun(tuple[Entry, ...]):
    """Entries decoded from one v2 object whose links the decoder has already checked.

    Made only by the v2 decoder, after checking that the seqs run without a gap, that
    every entry's ``prev`` is the hash of the entry before it and that every hash is
    the SHA-256 of the record it was read from. :class:`s3log._format.chain.ChainVerifier`
    then checks only where the run joins the chain (its first seq and ``prev``),
    instead of every entry again. An ordinary tuple otherwise.
    """

    # No __slots__ (a tuple subclass can have none but the empty ones): an instance
    # may carry its columns.

    #: The same entries as columns, when the decoder had them anyway (a head's tail read
    #: off its records): a columnar reader takes them instead of the entries' fields.
    #: None otherwise. Not to be modified.
    columns: RunColumns | None = None


def _entries_from_records(records: Any, hashes: Any, key: str) -> tuple[Entry, ...]:
    return cast(tuple[Entry, ...], _decode_records(records, hashes, key))


def _tail_from_records(records: Any, hashes: Any, key: str) -> tuple[Entry, ...] | _LazyTail:
    """A v2 head's tail: its entries, or when read off the layout s3log writes, a
    :class:`_LazyTail` (the same checks made, the entries made when first asked for)."""
    return _decode_records(records, hashes, key, lazy=True)


def _refuse_shared(value: Any, immutable: bool) -> Any:
    raise ValueError("value sharing (tags 28 and 29) is not allowed in an entry record")


#: Options for decoding records. Records are decoded together, in one call, and cbor2
#: shares the "shareable value" table (tags 28/29) across everything one call decodes,
#: so a record could refer to a value inside another record: refuse both tags (s3log
#: never writes them). cbor2 < 6 takes neither option: there the records' hashes and
#: the chain still hold, only a crafted record that no s3log writer makes could decode
#: differently alone than beside the others.
_RECORD_LOADS: dict[str, Any] = {
    "semantic_decoders": {28: _refuse_shared, 29: _refuse_shared},
    # A deterministic encoding has no indefinite lengths.
    "allow_indefinite": False,
}
try:
    cbor2.loads(b"\x00", **_RECORD_LOADS)
except TypeError:  # pragma: no cover - cbor2 < 6
    _RECORD_LOADS = {}


def _refuse_tag(*args: Any) -> Any:
    raise ValueError("tags 28, 29, 55799 and 256 are not allowed in a head or segment")


#: Options for decoding a head or a segment (:func:`_decode`): as records, and tags
#: 55799 (self-described CBOR) and 256 (a stringref namespace), which cbor2 would read
#: through, are refused too: s3log never writes them, and where an object holds them a
#: decoder that keeps tags as tags reads other types than cbor2 does (docs/format.md).
#: Version 2 data items are byte strings in their objects: this does not reach them.
_OBJECT_LOADS: dict[str, Any] = (
    {**_RECORD_LOADS, "semantic_decoders": dict.fromkeys((28, 29, 55799, 256), _refuse_tag)} if _RECORD_LOADS
    else {}
)

#: The five values of a record map, in the order Entry takes them (a C call per record).
_RECORD_VALUES = itemgetter("seq", "prev", "kind", "ts", "data")


#: The heads of the tags cbor2 decodes as the item they wrap (55799, self-described
#: CBOR; 256, a stringref namespace), in every length form. A chunk ending with one
#: would take the item after it (a delimiter below, a record's "kind" key) as what the
#: tag wraps and still decode as expected: such a chunk is decoded alone as well.
_TRANSPARENT_TAG_HEADS = tuple(
    head + tag.to_bytes(width, "big")
    for tag in (55799, 256) for head, width in ((b"\xd9", 2), (b"\xda", 4), (b"\xdb", 8))
)

#: The last byte of each of those heads.
_TAG_HEAD_LAST = frozenset(h[-1] for h in _TRANSPARENT_TAG_HEADS)
_LAST_BYTE = itemgetter(-1)


def _one_item(chunk: bytes) -> str | None:
    """None if ``chunk`` decodes on its own as exactly one CBOR data item, else what is wrong."""
    fp = io.BytesIO(chunk)
    try:
        cbor2.CBORDecoder(fp, **_RECORD_LOADS).decode()
    except Exception as exc:  # cbor2 raises several types for garbage input
        return f"not valid CBOR: {exc}"
    return None if fp.tell() == len(chunk) else "not exactly one CBOR data item"


#: The delimiter that ends each chunk :func:`_decode_items` decodes, and each object
#: :func:`_decode` decodes: a 16-byte string (head ``0x50``) of random bytes drawn when
#: this module is loaded, so that no stored byte was written knowing it. Its value
#: changes no result (only that no chunk can hold it), so it is no input a caller must
#: inject: ``secrets``, not the log's ``env``, whose seeded generator would be predictable.
_DELIMITER = b"\x50" + secrets.token_bytes(16)


def _decode_items(chunks: list[bytes], key: str, what: str, *, records: bool = False, nest: int = 0) -> list[Any]:
    """Decode each chunk as exactly one CBOR data item on its own, all in one C call.

    Decoding the plain concatenation of the chunks would let a malformed chunk end early
    or late, so that an item made of bytes of two chunks, or a chunk with bytes after its
    item, decodes as something its hash was not taken over. So each chunk is followed by
    a delimiter that no chunk can forge: :data:`_DELIMITER`, a byte string of 16 random
    bytes. The whole is decoded as one array and every second item must be that byte
    string. It can only be decoded from a delimiter's own bytes (nothing written before
    the draw holds them) starting at its first byte: the 16-byte string head ``0x50``
    cannot be reached any other way, and an indefinite-length string holding it would
    have to end on a ``0xff`` just after it, where the next chunk starts (refused below
    for every cbor2; cbor2 >= 6 also refuses indefinite lengths outright). With as many
    delimiters as chunks, each item therefore spans exactly its chunk, unless a chunk
    ends with the head of a tag cbor2 reads through (:data:`_TRANSPARENT_TAG_HEADS`),
    which is checked alone. ``records``: the chunks are entry records, which must start
    with 0xa5 (a 5-entry map). ``nest``: decode the items that many arrays deeper, so
    that cbor2's nesting limit falls where it falls for items decoded inside something
    (a data item inside its record). What is wrong is found by decoding chunks alone, so
    the error does not depend on the delimiter drawn.
    """
    n = len(chunks)
    sep = _DELIMITER
    mark = sep[1:]
    # One copy: the array head joined to the first chunk, a delimiter after each.
    parts = list(chunks)
    parts.append(b"")
    try:
        parts[0] = b"\x81" * nest + _array_head(2 * n) + parts[0]
        body = sep.join(parts)
    except TypeError:
        raise CorruptionError(key, f"{what} is not an array of byte strings") from None
    if records:
        if chunks[0][:1] != b"\xa5" or body.count(sep + b"\xa5") != n - 1:
            raise _first_record_error(chunks, key)
    elif body.count(sep + b"\xff"):
        raise CorruptionError(key, f"an item of {what} starts with a break (0xff)")
    try:
        items = cbor2.loads(body, **_RECORD_LOADS)
        for _ in range(nest):
            items = items[0]
    except Exception as exc:  # cbor2 raises several types for garbage input
        raise _item_error(chunks, key, what, records) or CorruptionError(
            key, f"{what} are not valid CBOR: {exc}") from exc
    values = items[0::2]
    delimiters = items[1::2]
    if delimiters.count(mark) != n:
        raise _item_error(chunks, key, what, records) or CorruptionError(
            key, f"{what} are not each exactly one CBOR data item")
    # Every such head ends with 0xf7 or 0x00: a C call per chunk rules most chunks out.
    if not _TAG_HEAD_LAST.isdisjoint(map(_LAST_BYTE, chunks)) and any(
            map(bytes.endswith, chunks, repeat(_TRANSPARENT_TAG_HEADS))):
        error = _item_error(chunks, key, what, records)  # else: a byte string ending with those bytes
        if error is not None:
            raise error
    out: list[Any] = values
    return out


def _item_error(chunks: list[bytes], key: str, what: str, records: bool) -> CorruptionError | None:
    """Which chunk is not exactly one CBOR data item, found by decoding each alone (the
    first that fails is the one the delimiters found out); None if each is one."""
    for i, chunk in enumerate(chunks):
        wrong = _one_item(chunk)
        if wrong is not None:
            m = _loads_or_none(chunk) if records else None
            seq = m.get("seq") if type(m) is dict and type(m.get("seq")) is int else None
            return CorruptionError(key, f"item {i} of {what} is {wrong}", seq=seq)
    return None


def _loads_or_none(record: bytes) -> Any:
    try:
        return cbor2.loads(record, **_RECORD_LOADS)
    except Exception:  # cbor2 raises several types for garbage input
        return None


def _first_record_error(records: list[bytes], key: str) -> CorruptionError:
    """Say what is wrong with the first record that does not start with 0xa5."""
    i = next((i for i, r in enumerate(records) if r[:1] != b"\xa5"), 0)
    try:
        m = cbor2.loads(records[i], **_RECORD_LOADS)
    except Exception as exc:  # cbor2 raises several types for garbage input
        return CorruptionError(key, f"entry record {i} is not valid CBOR: {exc}")
    if type(m) is not dict or len(m) != 5:
        return _entry_error(m, key, record=True)
    return CorruptionError(key, f"entry record {i} does not start with the head of a 5-entry map (0xa5)",
                           seq=m["seq"] if type(m.get("seq")) is int else None)


def _decode_records(records: Any, hashes: Any, key: str, *, lazy: bool = False) -> tuple[Entry, ...] | _LazyTail:
    """Decode the entries of a v2 object from their records, checking each stored hash.

    Each record is decoded on its own (:func:`_decode_items`, one C call for all) and
    hashed as stored: nothing is encoded again. Every record must end with its own
    ``prev`` (the "prev" key and the value the entry decodes to). The common case is
    checked column-wise, a few C calls per object rather than a Python loop per entry;
    when the records are also linked to one another the result is a :class:`LinkedRun`.
    Anything else takes the per-entry loop, which says what is wrong with which entry,
    and leaves the links to the verifier (and its messages).
    """
    if type(records) is not list:
        raise CorruptionError(key, "entries is not an array of byte strings (format v2 records)")
    if type(hashes) is not list or len(hashes) != len(records):
        raise CorruptionError(key, f"hashes is not an array of {len(records)} hashes, one per entry")
    n = len(records)
    if n == 0:
        return ()
    sha = hashlib.sha256
    try:
        digests = [sha(r).digest() for r in records]
    except TypeError:
        raise CorruptionError(key, "entries is not an array of byte strings (format v2 records)") from None
    if digests != hashes:
        # Before anything is decoded: a changed byte is named as such, with the seq its
        # record claims when it still decodes (for the message only).
        i = next(i for i, (h, d) in enumerate(zip(hashes, digests, strict=True)) if h != d)
        h, m = hashes[i], _loads_or_none(records[i])
        seq = m.get("seq") if type(m) is dict and type(m.get("seq")) is int else None
        shown = h.hex() if type(h) is bytes else repr(h)
        raise CorruptionError(key, f"hash is {shown}, record hashes to {digests[i].hex()}", seq=seq)
    run = _parse_linked_records(records, digests, key, lazy)  # positional: tests stand in for it
    if run is not None:
        return run
    maps = _decode_items(records, key, "entry records", records=True)
    try:
        # A dict with these five keys and no other is a record map; anything else
        # (a missing key, an array, a string) goes to the loop below for a diagnosis.
        fields = list(map(_RECORD_VALUES, maps)) if set(map(type, maps)) == {dict} else None
    except KeyError:
        fields = None
    if fields is not None and set(map(len, maps)) == {5}:
        seqs, prevs, kinds, tss, datas = zip(*fields, strict=True)
        s0, p0, r0 = seqs[0], prevs[0], records[0]
        if (
            set(map(type, seqs)) == {int} and s0 >= 0 and set(map(type, tss)) == {int}
            and set(map(type, kinds)) == {str}
            and (r0.endswith(_PREV_NULL) if p0 is None
                 else type(p0) is bytes and len(p0) == HASH_LEN and r0.endswith(_PREV_HASH + p0))
            # Linked: contiguous seqs, each prev the hash of the record before (so a
            # 32-byte string) and each record ending with it.
            and seqs == tuple(range(s0, s0 + n))
            and list(prevs[1:]) == digests[:-1]
            and all(map(bytes.endswith, records[1:], map(_add, repeat(_PREV_HASH), digests[:-1])))
        ):
            _check_layout(records, seqs, prevs, kinds, tss, key)
            return LinkedRun(map(_NEW_ENTRY, seqs, prevs, kinds, tss, datas, digests, records))
    out: list[Any] = []  # of Entry: _NewEntry turns itself into one
    append, new_entry = out.append, _NewEntry
    for raw, digest, m in zip(records, digests, maps, strict=True):
        if type(m) is dict and len(m) == 5 and "data" in m and "prev" in m and "seq" in m:
            seq, prev, kind, ts = m["seq"], m["prev"], m.get("kind"), m.get("ts")
            if (
                type(seq) is int and seq >= 0 and type(ts) is int and type(kind) is str
                and (raw.endswith(_PREV_NULL) if prev is None
                     else type(prev) is bytes and len(prev) == HASH_LEN and raw.endswith(_PREV_HASH + prev))
            ):
                append(new_entry(seq, prev, kind, ts, m["data"], digest, raw))
                continue
        raise _entry_error(m, key, record=True)
    _check_layout(records, [e.seq for e in out], [e.prev for e in out], [e.kind for e in out],
                  [e.ts for e in out], key)
    return tuple(out)


#: The least value an unsigned integer with this head byte (additional information
#: 24..27) may hold in its deterministic (shortest) form.
_UINT_MIN = {0x18: 24, 0x19: 0x100, 0x1A: 0x10000, 0x1B: 0x100000000}
#: Kind tails met in records (the "kind" key, the kind's deterministic encoding, the
#: "prev" key and the head of a 32-byte string), and the kind each holds; bounded
#: (cleared when full) since a store may hold any number of kinds.
_TAIL_KINDS: dict[bytes, str] = {}
_TAIL_KINDS_MAX = 4096


def _tail_kind(tail: bytes) -> str | None:
    """The kind a record's kind tail holds, or None if it is not one (see _TAIL_KINDS)."""
    if not (tail.startswith(_K_KIND) and tail.endswith(_PREV_HASH)):
        return None
    enc = tail[len(_K_KIND) : -len(_PREV_HASH)]
    try:
        kind = cbor2.loads(enc)
    except Exception:  # cbor2 raises several types for garbage input
        return None
    if type(kind) is not str or dumps(kind) != enc:
        return None
    if len(_TAIL_KINDS) >= _TAIL_KINDS_MAX:
        _TAIL_KINDS.clear()
    _TAIL_KINDS[tail] = kind
    return kind


#: How a record goes on after its ts: the "seq" key, the seq, the "data" key; for seqs
#: 0.. (a tuple, replaced whole when grown, so concurrent readers never see it change).
_SEQ_FRONTS: tuple[bytes, ...] = ()
_SEQ_FRONTS_MAX = 4096


def _seq_fronts(s0: int, n: int) -> Sequence[bytes]:
    """The fronts (see _SEQ_FRONTS) of seqs ``s0 .. s0 + n - 1``."""
    global _SEQ_FRONTS
    end = s0 + n
    if end > _SEQ_FRONTS_MAX:
        seq_head, seq_rest = _seq_parts(s0, n)
        return list(map(b"".join, zip(repeat(_R_SEQ + seq_head), seq_rest, repeat(_K_DATA), strict=False)))
    table = _SEQ_FRONTS
    if len(table) < end:
        size = max(end, min(2 * len(table), _SEQ_FRONTS_MAX))
        table = _SEQ_FRONTS = tuple(_R_SEQ + dumps(i) + _K_DATA for i in range(size))
    return table[s0:end]


def _parse_linked_records(
    records: list[bytes], digests: list[bytes], key: str, lazy: bool = False
) -> LinkedRun | _LazyTail | None:
    """The entries of a v2 object's records, parsed from their layout, when they are
    in the shape every s3log writer makes; None for anything else.

    That shape: linked records (each after the first ends with the "prev" key and the
    hash of the record before it), contiguous seqs, timestamps sharing one unsigned
    integer form. Instead of decoding each record as a map and then checking that it is
    laid out as docs/format.md says around its data (:func:`_check_layout`), the
    layout is read off the bytes: the fixed front (``ts``, then the seq this position
    must hold), the kind and prev behind, and between them the data item, which alone
    is decoded. Every byte is accounted for: the front and the seq are compared with
    their deterministic encodings, the kind tail (the "kind" key, the kind, the "prev"
    key) must hold the deterministic encoding of a text, each prev is compared with the
    hash before it and the data must be exactly one CBOR item filling its span. A
    record that passes is thus a deterministic 5-entry map, and since the decoding of a
    CBOR item is unique it holds exactly the values read here (the general path's,
    which is what anything that does not pass is left to, errors and all). See
    docs/decisions/0028. ``lazy``: return the verified columns and records as a
    :class:`_LazyTail`, the entries not made (a head's tail, docs/decisions/0029).
    """
    n = len(records)
    if not n:
        return None
    r0 = records[0]
    if type(r0) is not bytes or len(r0) < 16 or not r0.startswith(_R_TS) or r0[4] >= 0x1C:
        return None
    head = r0[4]
    width = _INT_LEN[head]
    try:
        # Every record starts with the same map head, "ts" key and ts head byte.
        if not all(map(bytes.startswith, records, repeat(r0[:5]))):
            return None
    except TypeError:  # not byte strings: the general path says so
        return None
    if width == 1:
        tss = [head] * n
    else:
        tss = list(map(int.from_bytes, map(bytes.__getitem__, records, repeat(slice(5, 4 + width)))))
        if min(tss) < _UINT_MIN[head]:  # not the shortest form
            return None
    at = 4 + width  # where the "seq" key starts
    b = r0[at + 4] if len(r0) > at + 4 else 0xFF
    if b >= 0x1C:
        return None
    s0 = b if b < 24 else int.from_bytes(r0[at + 5 : at + 4 + _INT_LEN[b]])
    fronts = _seq_fronts(s0, n)
    if not all(map(bytes.startswith, records, fronts, repeat(at))):
        return None
    # Where each record's data item starts: one offset for all when every seq of the
    # run has the same width (most runs; it saves two passes over the run).
    start0 = at + len(fronts[0])
    same = len(fronts[0]) == len(fronts[-1])
    starts = None if same else list(map(_add, map(len, fronts), repeat(at)))
    # The first record's prev is null (seq 0) or a hash; each other's is the hash of
    # the record before it, its last bytes (the "prev" key before them is checked with
    # its kind, below).
    if n > 1 and not all(map(bytes.endswith, records[1:], digests[:-1])):
        return None
    hashed = len(_PREV_HASH) + HASH_LEN
    if s0 == 0 and r0.endswith(_PREV_NULL):
        p0 = None
    elif r0[-hashed:-HASH_LEN] == _PREV_HASH:
        p0 = r0[-HASH_LEN:]
    else:
        return None
    # The "kind" key: the last one before prev (a kind holding those bytes itself
    # leaves a span after it that is not its encoding, or a data span that is not one
    # item, and goes to the general path).
    kinds_at = list(map(bytes.rfind, records, repeat(_K_KIND), starts or repeat(start0), repeat(-hashed)))
    # Each record's kind tail: the "kind" key, the kind, the "prev" key and a hash's head.
    tails = list(map(bytes.__getitem__, records, map(slice, kinds_at, repeat(-HASH_LEN))))
    if p0 is None:
        kinds_at[0] = r0.rfind(_K_KIND, start0, -len(_PREV_NULL))
        tails[0] = r0[kinds_at[0] : -len(_PREV_NULL)] + _PREV_HASH  # as if its prev were a hash
    # An empty data span, or no "kind" key (-1).
    if not (min(kinds_at) > start0 if starts is None else all(map(_lt, starts, kinds_at))):
        return None
    got = list(map(_TAIL_KINDS.get, tails))
    if None in got:
        for tail in set(tails):
            if tail not in _TAIL_KINDS and _tail_kind(tail) is None:
                return None
        # Each tail reads as a kind now (checked above; the cache may have been cleared since).
        got = [k if (k := _TAIL_KINDS.get(tail)) is not None else _tail_kind(tail) for tail in tails]
    kinds = cast(list[str], got)
    datas = list(map(bytes.__getitem__, records, map(slice, starts or repeat(start0), kinds_at)))
    try:
        # One array deeper: inside its record (the general path) a data item sits in a map.
        values = _decode_items(datas, key, "entry data", nest=1)
    except CorruptionError:
        return None
    # The columns were made anyway: kept for a columnar reader (a scan). A head read by
    # a writer holds them (and the data items' bytes) until its next commit.
    lazy_tail = _LazyTail(RunColumns(s0, p0, tss, kinds, datas, digests, values), records)
    return lazy_tail if lazy else lazy_tail.entries()


class _LazyTail:
    """A v2 head's tail read off its records and verified, its entries not yet made.

    Making an :class:`Entry` costs ~0.3 µs, about a fourteenth of a scan's time per
    entry, and a columnar reader (a scan) never needs one. A decoded head holds this
    instead of its ``tail`` until the tail is first read (see :class:`Head`), and
    :func:`tail_run` hands the columns to such a reader (docs/decisions/0029).
    """

    __slots__ = ("columns", "records")

    def __init__(self, columns: RunColumns, records: list[bytes]) -> None:
        self.columns = columns
        self.records = records

    def entries(self) -> LinkedRun:
        """The entries (the checks were made when the columns were read)."""
        c = self.columns
        s0, n = c.seq, len(c.hashes)
        run = LinkedRun(map(_NEW_ENTRY, range(s0, s0 + n), [c.prev, *c.hashes[:-1]], c.kinds, c.ts, c.values,
                            c.hashes, self.records))
        run.columns = c
        return run


def _check_layout(records: Sequence[bytes], seqs: Sequence[int], prevs: Sequence[bytes | None],
                  kinds: Sequence[str], tss: Sequence[int], key: str) -> None:
    """Each record must be laid out exactly as docs/format.md says, around its data.

    That is: ``ts``, ``seq``, the "data" key in front and the "kind" key, kind, "prev"
    key and prev behind, each in its deterministic encoding, as rebuilt here from the
    values the record decodes to. With the record decoded as exactly one 5-entry map,
    the bytes between them are then exactly its data item, so a writer that stores the
    entry again (a v2 segment stores the data bytes and rebuilds the rest) stores the
    same record, under the same hash.
    """
    kind_tails = {k: _K_KIND + dumps(k) + _K_PREV for k in set(kinds)}
    ts_head, ts_rest = _uint_parts(tss, min(tss), max(tss))
    n = len(seqs)
    # The seqs of a linked run (a head's tail) are contiguous: laid out a stretch at a
    # time even across a length boundary (0..99), not encoded one by one.
    contiguous = n and list(seqs) == list(range(seqs[0], seqs[0] + n)) and seqs[0] >= 0
    seq_head, seq_rest = _seq_parts(seqs[0], n) if contiguous else _uint_parts(seqs, min(seqs), max(seqs))
    fronts = list(map(b"".join, zip(
        repeat(_R_TS + ts_head), ts_rest, repeat(_R_SEQ + seq_head), seq_rest, repeat(_K_DATA), strict=False)))
    # A 32-byte prev (what the callers let through, besides null) is its string head and itself.
    rest = prevs[1:]
    if set(map(type, rest)) <= {bytes} and set(map(len, cast(Sequence[bytes], rest))) <= {HASH_LEN}:
        prev_encodings = [_prev_encoding(prevs[0]), *map(_add, repeat(_BYTES32), rest)] if n else []
    else:
        prev_encodings = list(map(_prev_encoding, prevs))
    backs = list(map(_add, map(kind_tails.__getitem__, kinds), prev_encodings))
    ends = list(map(_sub, map(len, records), map(len, backs)))  # where each data span ends
    if not (all(map(bytes.startswith, records, fronts)) and all(map(bytes.endswith, records, backs))
            and all(map(_lt, map(len, fronts), ends))):
        i = next(i for i, (r, f, b) in enumerate(zip(records, fronts, backs, strict=True))
                 if not (r.startswith(f) and r.endswith(b) and len(f) + len(b) < len(r)))
        raise CorruptionError(key, "entry record is not laid out as format v2 says (deterministic ts, seq, "
                              "kind and prev around its data)", seq=seqs[i])
    # The record decoded as one 5-entry map, but a data item followed by a transparent
    # tag's head (which then wraps the "kind" key) would leave bytes in the data span
    # that are not its item: such a span is decoded alone.
    if any(map(bytes.endswith, records, repeat(_TRANSPARENT_TAG_HEADS), repeat(0), ends)):
        for i, (r, f, end) in enumerate(zip(records, fronts, ends, strict=True)):
            wrong = _one_item(r[len(f) : end]) if r.endswith(_TRANSPARENT_TAG_HEADS, 0, end) else None
            if wrong is not None:
                raise CorruptionError(key, f"entry record's data is {wrong}", seq=seqs[i])


def _prev_encoding(p: bytes | None) -> bytes:
    return _BYTES32 + p if type(p) is bytes and len(p) == HASH_LEN else dumps(p)


_RECORD_FIELDS = frozenset({"seq", "prev", "kind", "ts", "data"})


def _entry_error(obj: Any, key: str, *, record: bool = False) -> CorruptionError:
    """Say what is wrong with an entry map (``record``: a v2 record, which has no hash)."""
    what = "entry record" if record else "entry"
    if not isinstance(obj, Mapping):
        return CorruptionError(key, f"{what} is a {type(obj).__name__}, expected a map")
    seq = obj.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return CorruptionError(key, f"{what} seq is {seq!r}, expected an integer >= 0")
    prev = obj.get("prev")
    if prev is not None and not (isinstance(prev, bytes) and len(prev) == HASH_LEN):
        return CorruptionError(key, f"{what} prev is not null or a 32-byte hash", seq=seq)
    if not isinstance(obj.get("kind"), str):
        return CorruptionError(key, f"{what} kind is not a string", seq=seq)
    ts = obj.get("ts")
    if not isinstance(ts, int) or isinstance(ts, bool):
        return CorruptionError(key, f"{what} ts is not an integer", seq=seq)
    if not record:
        h = obj.get("hash")
        if not (isinstance(h, bytes) and len(h) == HASH_LEN):
            return CorruptionError(key, "entry hash is not a 32-byte string", seq=seq)
    if "data" not in obj:
        return CorruptionError(key, f"{what} has no data field", seq=seq)
    if "prev" not in obj:  # null at seq 0, but present (docs/format.md, "Entry")
        return CorruptionError(key, f"{what} has no prev field", seq=seq)
    if not record:
        return CorruptionError(key, "entry is malformed", seq=seq)
    extra = set(obj) - _RECORD_FIELDS
    if extra:
        return CorruptionError(
            key, f"entry record has fields besides seq, prev, kind, ts, data: {sorted(map(str, extra))}", seq=seq
        )
    return CorruptionError(key, "entry record does not end with its prev field", seq=seq)


def _check_version(obj: Any, key: str, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise CorruptionError(key, f"{what} is a {type(obj).__name__}, expected a map")
    v = obj.get("v")
    if type(v) is not int or v not in READABLE_VERSIONS:
        raise FormatVersionError(key, v, READABLE_VERSIONS)
    return obj


def _decode(body: bytes, key: str, what: str) -> Any:
    """Decode a stored object (a head, a segment): exactly one CBOR item.

    cbor2 decodes the first item of its input and ignores what follows, so the body is
    decoded as the first of a two-item array whose second item must be
    :data:`_DELIMITER` (as each chunk of :func:`_decode_items`): bytes after the object,
    or an object cut short, leave it elsewhere. Indefinite lengths and tags 28, 29, 55799 and 256 are refused
    (:data:`_OBJECT_LOADS`).
    """
    try:
        got = cbor2.loads(b"\x82" + body + _DELIMITER, **_OBJECT_LOADS)
    except Exception as exc:  # cbor2 raises several types for garbage input
        raise CorruptionError(key, f"{what} is not valid CBOR: {exc}") from exc
    if type(got) is not list or len(got) != 2 or got[1] != _DELIMITER[1:]:
        raise CorruptionError(key, f"{what} is not exactly one CBOR data item (bytes after it, or cut short)")
    return got[0]


# ----------------------------------------------------------------------------- segments


@dataclass(frozen=True, slots=True)
class Segment:
    """An immutable run of consecutive entries of one session."""

    session: str
    entries: tuple[Entry, ...]


def encode_segment(session: str, entries: Sequence[Entry], version: int = FORMAT_VERSION) -> bytes:
    """The bytes of a segment object in format ``version`` (1 or 2)."""
    if check_format_version(version) == 1:
        return _map_with_raw({"v": 1, "session": session}, {"entries": _entries_array(entries)})
    if not entries:
        raise ValueError("a segment holds at least one entry")
    first = entries[0]
    # The reader rebuilds each record from these columns, taking each prev from the hash
    # before: a run that is not one linked chain would be written unreadable.
    if [e.seq for e in entries] != list(range(first.seq, first.seq + len(entries))) or list(
        map(_PREV_OF, entries[1:])
    ) != list(map(_HASH_OF, entries[:-1])):
        raise ValueError("a segment's entries must be consecutive and linked")
    return _map_with_raw(
        {"v": version, "session": session, "seq": first.seq, "prev": first.prev,
         "ts": [e.ts for e in entries], "kinds": [e.kind for e in entries]},
        {"data": _bytes_array(data_cbor_column(entries)), "hashes": _hashes_array(entries)},
    )


_PREV_OF, _HASH_OF = attrgetter("prev"), attrgetter("hash")


def _bytes_array(items: Sequence[bytes]) -> bytes:
    """A CBOR array of byte strings."""
    # One C call: a byte string has one deterministic encoding (its shortest length
    # head), which is what cbor2 writes; a Python call per item cost three times more.
    return dumps(items if type(items) is list else list(items))


def check_format_version(version: object) -> int:
    """Refuse a format version this build cannot write (ValueError naming it)."""
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise InvalidArgumentError("format_version", f"must be one of {READABLE_VERSIONS}, not {version!r}")
    return version


def decode_segment(body: bytes, key: str) -> Segment:
    """Decode and shape-check a segment (the chain is verified by :mod:`s3log._format.chain`)."""
    session, obj = _segment_map(body, key)
    if obj["v"] == 2:
        return Segment(session, _decode_columns(obj, key))
    return Segment(session, _v1_entries(obj, key))


def decode_segment_columns(body: bytes, key: str) -> tuple[str, RunColumns | tuple[Entry, ...]]:
    """:func:`decode_segment` for a columnar reader: the session, and a v2 segment's
    entries as its :class:`RunColumns` (checked the same way, with the same errors,
    but no Entry made); a v1 segment's as entries. Its links to the rest of the chain
    are checked by :meth:`s3log._format.chain.ChainVerifier.feed_columns` / ``feed_segment``."""
    session, obj = _segment_map(body, key)
    if obj["v"] == 2:
        return session, _verified_columns(obj, key)[0]
    return session, _v1_entries(obj, key)


def _segment_map(body: bytes, key: str) -> tuple[str, Mapping[str, Any]]:
    obj = _check_version(_decode(body, key, "segment"), key, "segment")
    session = obj.get("session")
    if not isinstance(session, str):
        raise CorruptionError(key, "segment session is not a string")
    return session, obj


def _v1_entries(obj: Mapping[str, Any], key: str) -> tuple[Entry, ...]:
    entries = obj.get("entries")
    if not isinstance(entries, list) or not entries:
        raise CorruptionError(key, "segment entries is not a non-empty array")
    return tuple(_entry_from_map(e, key) for e in entries)


#: The head byte and width of an unsigned integer's deterministic encoding, by the
#: bound below which it applies (major type 0; below 24 the value is its own head).
_UINT_FORMS = ((24, b"", 1), (0x100, b"\x18", 1), (0x10000, b"\x19", 2), (2**32, b"\x1a", 4), (2**64, b"\x1b", 8))


def _uint_form(lo: int, hi: int) -> tuple[bytes, int] | None:
    """The head byte and width every integer in [lo, hi] (lo >= 0) is encoded with, or
    None when their encodings differ in length (or do not fit 64 bits)."""
    floor = 0
    for bound, head, width in _UINT_FORMS:
        if hi < bound:
            return (head, width) if lo >= floor else None
        floor = bound
    return None


def _uint_parts(values: Sequence[int], lo: int, hi: int) -> tuple[bytes, list[bytes]]:
    """The deterministic encodings of integers that all lie in [lo, hi], as a head
    shared by all and each one's remaining bytes (the whole encodings, head b"", when
    their lengths differ).

    One C call per value either way; when they share a length (timestamps in ms, the
    seqs of a segment) the head byte is known and the value is only laid out as bytes,
    so a caller joining the encodings into records adds the head to what precedes them.
    """
    form = _uint_form(lo, hi) if lo >= 0 else None
    if form is None:
        return b"", list(map(dumps, values))
    return form[0], list(map(int.to_bytes, values, repeat(form[1])))


def _uint_heads(values: Sequence[int], lo: int, hi: int) -> list[bytes]:
    """The deterministic encodings of integers that all lie in [lo, hi] (:func:`_uint_parts`)."""
    head, rest = _uint_parts(values, lo, hi)
    return list(map(_add, repeat(head), rest)) if head else rest


def _seq_parts(s0: int, n: int) -> tuple[bytes, list[bytes]]:
    """:func:`_uint_parts` of ``s0 .. s0 + n - 1`` (s0 >= 0); a run across a length
    boundary (0..799) is encoded a stretch of one length at a time, not a call per value."""
    end = s0 + n
    if _uint_form(s0, end - 1) is not None:
        return _uint_parts(range(s0, end), s0, end - 1)
    rest: list[bytes] = []
    floor = 0
    for bound, _, _ in _UINT_FORMS:
        lo, hi = max(s0, floor), min(end, bound)
        if lo < hi:
            rest += _uint_heads(range(lo, hi), lo, hi - 1)
        floor = bound
    if end > floor:  # beyond 64 bits: not a seq s3log writes, encoded as the ints they are
        rest += list(map(dumps, range(max(s0, floor), end)))
    return b"", rest


def _decode_columns(obj: Mapping[str, Any], key: str) -> LinkedRun:
    """The entries of a v2 segment (:func:`_verified_columns`), each with its record."""
    cols, records = _verified_columns(obj, key)
    hashes = cols.hashes
    return LinkedRun(map(_NEW_ENTRY, range(cols.seq, cols.seq + len(hashes)), [cols.prev, *hashes[:-1]],
                         cols.kinds, cols.ts, cols.values, hashes, records))


def _verified_columns(obj: Mapping[str, Any], key: str) -> tuple[RunColumns, list[bytes]]:
    """The columns of a v2 segment and its entries' records, rebuilt from them and hashed.

    Every record is laid out by this function from the segment's values (seq, ts, kind,
    prev in their deterministic encodings, the data bytes as stored) and hashed; the
    hashes must equal the stored ones. Each entry's prev is the stored hash of the entry
    before, so equal hashes also mean a linked run. Only then are the data items decoded,
    each as exactly one CBOR item, so what an entry holds is what its record encodes.
    """
    s0, prev0, tss, kinds, data, hashes = (
        obj.get("seq"), obj.get("prev"), obj.get("ts"), obj.get("kinds"), obj.get("data"), obj.get("hashes"))
    if type(data) is not list or not data:
        if "entries" in obj:  # written by a pre-release build of format v2
            raise CorruptionError(key, "v2 segment in the pre-release layout (entries as records): not readable "
                                  "by this build, which reads v2 segments as columns (docs/format.md)")
        raise CorruptionError(key, "segment data is not a non-empty array")
    n = len(data)
    if type(s0) is not int or s0 < 0:
        raise CorruptionError(key, f"segment seq is {s0!r}, expected an integer >= 0")
    if "prev" not in obj:  # null for a segment starting at seq 0, but present
        raise CorruptionError(key, "segment has no prev field", seq=s0)
    if prev0 is not None and not (type(prev0) is bytes and len(prev0) == HASH_LEN):
        raise CorruptionError(key, "segment prev is not null or a 32-byte hash", seq=s0)
    for name, column, typ in (("ts", tss, int), ("kinds", kinds, str), ("data", data, bytes),
                              ("hashes", hashes, bytes)):
        if type(column) is not list or len(column) != n:
            raise CorruptionError(key, f"segment {name} is not an array of {n} items, one per entry")
        if set(map(type, column)) != {typ}:
            raise CorruptionError(key, f"segment {name} holds items that are not {typ.__name__}")
    tss, kinds, hashes = cast(list[int], tss), cast(list[str], kinds), cast(list[bytes], hashes)
    # Each record's constant parts are joined ahead: the head of its ts and seq when all
    # share one, and each kind's tail up to the 32-byte string head of a prev.
    ts_head, ts_rest = _uint_parts(tss, min(tss), max(tss))
    seq_head, seq_rest = _seq_parts(s0, n)
    kind_tails = {k: _K_KIND + dumps(k) + _PREV_HASH for k in set(kinds)}
    records = list(map(b"".join, zip(
        repeat(_R_TS + ts_head), ts_rest, repeat(_R_SEQ + seq_head), seq_rest, repeat(_K_DATA), data,
        map(kind_tails.__getitem__, kinds), [b"", *hashes[:-1]], strict=False,
    )))
    # The first record's prev is the segment's own (null, or a hash): rebuilt once.
    records[0] = records[0][: -len(_BYTES32)] + dumps(prev0)
    sha = hashlib.sha256
    digests = [sha(r).digest() for r in records]
    if digests != hashes:
        i = next(i for i, (h, d) in enumerate(zip(hashes, digests, strict=True)) if h != d)
        raise CorruptionError(key, f"hash is {hashes[i].hex()}, record hashes to {digests[i].hex()}", seq=s0 + i)
    values = _decode_items(data, key, "segment data")
    return RunColumns(s0, prev0, tss, kinds, cast(list[bytes], data), digests, values), records


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


def _append_keys(value: Any, key: str) -> tuple[AppendKey, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CorruptionError(key, f"head field 'append_keys' is not an array: {value!r}")
    return tuple(AppendKey.from_list(item, key) for item in value)


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


def encode_head(head: Head) -> bytes:
    """The bytes of a head object (equal to ``dumps(head.to_map())``)."""
    if check_format_version(head.v) == 1:
        return _map_with_raw(head._fields(), {"tail": _entries_array(head.tail)})
    n, records, hashes = _tail_arrays(head.tail)
    if head.extra or type(head.extra) is not dict:  # a newer writer's fields (of any type): the general encoder
        return _map_with_raw(head._fields(), {"tail": b"".join((n, *records)), "tail_hashes": b"".join((n, *hashes))})
    # Every commit encodes its head: laid out by hand in the deterministic key order
    # (that of _HK), each value by the shortest route. The values a head carries
    # unchanged from commit to commit (the session, segments, levels, parent) are
    # encoded once per object; the rest are a few integers and strings.
    k = _HK
    out = [b"", k["v"], _enc_int(head.v), k["seq"], _enc_int(head.seq)]
    if head.sig is not None:
        out += (k["sig"], dumps(head.sig.to_map()))
    h = head.hash
    out += (k["hash"], _NULL if h is None else _BYTES32 + h if type(h) is bytes and len(h) == HASH_LEN else dumps(h),
            k["meta"], _EMPTY_MAP if not head.meta and type(head.meta) is dict else dumps(head.meta),
            k["tail"], n, *records)
    if head.lease is not None:
        out += (k["lease"], dumps(head.lease.to_map()))
    parent = head.parent
    out += (k["levels"], _enc_array(head.levels), k["parent"], _enc_parent(parent),
            k["ts_max"], _enc_int(head.ts_max), k["ts_min"], _enc_int(head.ts_min), k["writer"], _enc_str(head.writer))
    if head.creator is not None:
        out += (k["creator"], _enc_str(head.creator))
    if head.pending is not None:
        out += (k["pending"], dumps(head.pending.to_map()))
    out += (k["session"], _enc_once(head.session), k["version"], _enc_int(head.version),
            k["segments"], _enc_array(head.segments), k["created_at"], _enc_int(head.created_at))
    if head.retired_at is not None:
        out += (k["retired_at"], _enc_int(head.retired_at))
    out += (k["updated_at"], _enc_int(head.updated_at))
    if head.append_keys:
        out += (k["append_keys"], dumps([a.to_list() for a in head.append_keys]))
    out += (k["tail_hashes"], n, *hashes)
    # One piece per key and per value, but the two tail arrays' items.
    out[0] = _length_head(0xA0, (len(out) - 1 - len(records) - len(hashes)) >> 1)
    return b"".join(out)


#: The encoded keys of a format 2 head, and their deterministic order (shorter
#: encodings first, then bytewise), which :func:`encode_head` follows.
_HK = {name: dumps(name) for name in (
    "v", "seq", "sig", "hash", "meta", "tail", "lease", "levels", "parent", "ts_max", "ts_min", "writer",
    "creator", "pending", "session", "version", "segments", "created_at", "retired_at", "updated_at",
    "append_keys", "tail_hashes")}
assert tuple(sorted(_HK, key=lambda n: (len(_HK[n]), _HK[n]))) == tuple(_HK), "encode_head's key order"
_EMPTY_MAP = dumps({})
_SMALL_UINTS = tuple(_length_head(0x00, n) for n in range(24))


def _enc_int(n: Any) -> bytes:
    """A head's integer field (or None, or anything else the general encoder takes)."""
    if type(n) is int and 0 <= n < 24:
        return _SMALL_UINTS[n]
    return _uint(n) if type(n) is int else _NULL if n is None else dumps(n)


def _enc_str(s: Any) -> bytes:
    """A head's text field."""
    if type(s) is str and s.isascii() and len(s) < 24:
        return bytes((0x60 | len(s),)) + s.encode("ascii")
    return dumps(s)


#: Encodings of the immutable values a writer's heads carry unchanged (a session id,
#: segments, levels, parent), by the id of the value and holding it, so the id is not
#: reused while cached. Only values immutable all the way down are cached (text, a
#: tuple of text or integers, a ParentRef of such fields): another value's contents
#: could change between two encodings. Many writers just miss.
_ONCE: dict[int, tuple[Any, bytes]] = {}


def _enc_once(value: Any) -> bytes:
    """A value as the general encoder writes it, from the cache when it may be."""
    hit = _cached(value)
    if hit is not None:
        return hit
    encoded = dumps(value)
    if type(value) is str or (type(value) is tuple and all(type(x) in _ATOMS for x in value)):
        _remember(value, encoded)
    return encoded


def _enc_array(value: Any) -> bytes:
    """A head's ``segments`` or ``levels``: stored as an array, whatever the sequence."""
    return _enc_once(value) if type(value) is tuple else dumps(list(value))


def _enc_parent(parent: Any) -> bytes:
    """A head's ``parent`` as :meth:`Head.to_map` stores it (null when there is none)."""
    if not parent:
        return _NULL
    hit = _cached(parent)
    if hit is not None:
        return hit
    encoded = dumps(parent.to_map())
    if type(parent) is ParentRef and type(parent.session) is str and type(parent.seq) is int \
            and type(parent.reason) is str and (parent.hash is None or type(parent.hash) is bytes):
        _remember(parent, encoded)
    return encoded


def _cached(value: Any) -> bytes | None:
    """The encoding :func:`_remember` kept for this very object, if any."""
    hit = _ONCE.get(id(value))
    return hit[1] if hit is not None and hit[0] is value else None


def _remember(value: Any, encoded: bytes) -> None:
    if len(_ONCE) >= 256:
        _ONCE.clear()
    _ONCE[id(value)] = (value, encoded)


_ATOMS = frozenset({str, int})


#: The encoded items of recent heads' tail arrays (their pieces, without the array
#: heads), by the id of the tail's first entry: a writer's next head has the same tail
#: plus its new entries, so only those are encoded again. Pieces, not one string: each
#: head is then joined in one copy. Holding the tail keeps its first entry alive, so
#: its id is not reused while cached.
_TAILS: dict[int, tuple[tuple[Entry, ...], list[bytes], list[bytes]]] = {}


def _tail_arrays(tail: tuple[Entry, ...]) -> tuple[bytes, list[bytes], list[bytes]]:
    """A head's ``tail`` (the entries' records as byte strings) and ``tail_hashes``
    arrays: the head both arrays share (their length), then the pieces of the items of each."""
    if not tail:
        return _array_head(0), [], []
    # A tuple of entries cannot change; a list where a tuple belongs could (not cached).
    cached = _TAILS.get(id(tail[0])) if type(tail) is tuple else None
    done: int = 0
    records: list[bytes] = []
    hashes: list[bytes] = []
    if cached is not None:
        old, old_records, old_hashes = cached
        # Same objects, not equal ones: an entry is immutable, so its bytes are the same.
        if len(old) <= len(tail) and all(map(is_, old, tail)):
            done, records, hashes = len(old), old_records, old_hashes
    new = tail[done:]
    if new:
        records = records + [_bytes_head(len(r)) + r for r in map(entry_record, new)]
        hashes = hashes + list(map(_add, repeat(_BYTES32), map(_HASH_OF, new)))
        if type(tail) is tuple:
            if len(_TAILS) >= 64:  # a few writers' tails; many writers just miss
                _TAILS.clear()
            _TAILS[id(tail[0])] = (tail, records, hashes)
    return _array_head(len(tail)), records, hashes


def _bytes_head(n: int) -> bytes:
    """The head of a byte string of ``n`` bytes (major type 2, shortest length form)."""
    return _length_head(0x40, n)


_HEAD_FIELDS = frozenset(
    {"v", "session", "version", "seq", "hash", "segments", "levels", "tail", "tail_hashes", "parent",
     "meta", "created_at", "updated_at", "writer", "ts_min", "ts_max", "retired_at", "creator", "sig", "lease",
     "pending", "append_keys"}
)


#: The fields :func:`decode_head` requires, and their types as decoded.
_HEAD_NEEDS = ("segments", "tail", "session", "version", "seq", "created_at", "updated_at", "writer")
_HEAD_NEED_TYPES = (list, list, str, int, int, int, int, str)


def _opt_int(value: Any, key: str, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptionError(key, f"head field {name!r} is {value!r}")
    return value


def _check_expired(value: Any, key: str) -> None:
    """A tombstone's ``expired`` map (docs/format.md, "Head"), typed; null reads as absent."""
    if value is None:
        return
    if not isinstance(value, dict) or not {"at", "seq", "hash", "idle_for_ms"} <= value.keys():
        raise CorruptionError(key, f"head field 'expired' is not a map of at, seq, hash and idle_for_ms: {value!r}")
    at, seq, h, idle = value["at"], value["seq"], value["hash"], value["idle_for_ms"]
    if not (type(at) is int and at >= 0 and type(seq) is int and type(idle) is int and idle >= 0
            and (h is None or (type(h) is bytes and len(h) == HASH_LEN))):
        raise CorruptionError(key, f"head field 'expired' is malformed: {value!r}")


def decode_head(body: bytes, key: str) -> Head:
    """Decode and shape-check a head object."""
    obj = _check_version(_decode(body, key, "head"), key, "head")

    # Every required field of the exact type a decoder gives (the common case, in one
    # comparison): then each need() below passes without checking its field again.
    checked = tuple(map(type, map(obj.get, _HEAD_NEEDS))) == _HEAD_NEED_TYPES

    def need(name: str, typ: type | tuple[type, ...]) -> Any:
        value = obj.get(name)
        if not checked and (not isinstance(value, typ) or isinstance(value, bool)):
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
    if not all(type(x) is int and x >= 0 for x in levels):  # unsigned, and no booleans
        raise CorruptionError(key, f"head levels must be integers >= 0, not {levels!r}")
    parent = obj.get("parent")
    meta = obj.get("meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise CorruptionError(key, "head meta is not a map")
    # Checked in the order of Head's fields, as they were when the tail was read inside
    # the call below: a head wrong in two fields is named by the same one.
    session, version, seq = need("session", str), need("version", int), need("seq", int)
    read = (tuple(_entry_from_map(e, key) for e in need("tail", list)) if obj["v"] == 1
            else _tail_from_records(need("tail", list), obj.get("tail_hashes"), key))
    lazy, tail = (read, ()) if isinstance(read, _LazyTail) else (None, read)
    created_at, updated_at = need("created_at", int), need("updated_at", int)
    # Unsigned in docs/format.md: a commit counter, times in ms since the epoch.
    if version < 0 or created_at < 0 or updated_at < 0:
        wrong = "version" if version < 0 else "created_at" if created_at < 0 else "updated_at"
        raise CorruptionError(key, f"head field {wrong!r} is {obj[wrong]!r}")
    if "expired" in obj:
        _check_expired(obj["expired"], key)
    head = Head(
        session=session,
        version=version,
        seq=seq,
        hash=h,
        segments=tuple(segments),
        levels=tuple(levels),
        tail=tail,
        parent=ParentRef.from_map(parent, key) if parent is not None else None,
        meta=meta,
        created_at=created_at,
        updated_at=updated_at,
        writer=need("writer", str),
        ts_min=_opt_int(obj.get("ts_min"), key, "ts_min"),
        ts_max=_opt_int(obj.get("ts_max"), key, "ts_max"),
        retired_at=_opt_int(obj.get("retired_at"), key, "retired_at"),
        creator=obj["creator"] if isinstance(obj.get("creator"), str) else None,
        lease=Lease.from_map(obj["lease"], key) if obj.get("lease") is not None else None,
        v=obj["v"],
        # Fields a newer minor writer added are kept, so rewriting a head never drops them.
        extra={k: v for k, v in obj.items() if k not in _HEAD_FIELDS} if not obj.keys() <= _HEAD_FIELDS else {},
        sig=Signature.from_map(obj["sig"], key) if obj.get("sig") is not None else None,
        pending=Pending.from_map(obj["pending"], key) if obj.get("pending") is not None else None,
        append_keys=_append_keys(obj.get("append_keys"), key),
    )
    if lazy is not None:
        # Verified already: the entries are made when the tail is first read.
        object.__setattr__(head, "_lazy_tail", lazy)
        object.__delattr__(head, "tail")
    return head


def tail_run(head: Head) -> tuple[Entry, ...] | RunColumns:
    """A head's tail for a columnar reader: its verified columns when the decoder kept
    them (no Entry is made), else its entries."""
    lazy: _LazyTail | None = getattr(head, "_lazy_tail", None)
    if lazy is not None:
        return lazy.columns
    tail = head.tail
    return tail.columns if type(tail) is LinkedRun and tail.columns is not None else tail
