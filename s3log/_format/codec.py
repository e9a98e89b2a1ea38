"""Encoding and decoding of whole objects, segments and heads (formats v1 and v2).

Everything here is pure: bytes in, values out, or the reverse. An entry's hash is
SHA-256 over the deterministic encoding (RFC 8949 §4.2.1) of the map
``{seq, prev, kind, ts, data}``: its *record*. Format v1 stores each entry as that map
plus ``hash``, so a reader re-encodes every entry to check it; format v2 stores the
record itself as a byte string (a head's tail) or the columns it is rebuilt from (a
segment), so a reader hashes the stored bytes and decodes a whole object's entries in
one call, and never encodes anything. The hash of an entry is the same in both
formats, so one chain may mix v1 and v2 objects. The same encoding is used for whole
objects so the same content always gives the same bytes (and so the same key gives
the same body). The values are in :mod:`s3log._format.values`, the entries' records
in :mod:`s3log._format.entries` and :mod:`s3log._format.records`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add as _add
from operator import is_
from typing import Any, cast

from s3log._format.cbor import (
    _NULL,
    _array_head,
    _bytes_array,
    _bytes_head,
    _decode,
    _length_head,
    _map_with_raw,
    _seq_parts,
    _uint,
    _uint_parts,
    dumps,
)
from s3log._format.columns import LinkedRun, RunColumns, _LazyTail
from s3log._format.entries import (
    _BYTES32,
    _HASH_OF,
    _K_DATA,
    _K_KIND,
    _PREV_HASH,
    _PREV_OF,
    _R_SEQ,
    _R_TS,
    _entries_array,
    _hashes_array,
    data_cbor_column,
)
from s3log._format.records import _decode_items, _entry_from_map, _tail_from_records
from s3log._format.values import (
    _NEW_ENTRY,
    FORMAT_VERSION,
    HASH_LEN,
    READABLE_VERSIONS,
    AppendKey,
    Entry,
    Head,
    Lease,
    ParentRef,
    Pending,
    Signature,
    entry_record,
)
from s3log.errors import CorruptionError, FormatVersionError, InvalidArgumentError


def _check_version(obj: Any, key: str, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise CorruptionError(key, f"{what} is a {type(obj).__name__}, expected a map")
    v = obj.get("v")
    if type(v) is not int or v not in READABLE_VERSIONS:
        raise FormatVersionError(key, v, READABLE_VERSIONS)
    return obj


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


def _append_keys(value: Any, key: str) -> tuple[AppendKey, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CorruptionError(key, f"head field 'append_keys' is not an array: {value!r}")
    return tuple(AppendKey.from_list(item, key) for item in value)


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
