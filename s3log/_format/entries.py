"""An entry's encodings, and the checks that make ``append``'s input storable.

The record's fixed parts (the keys around the data), an entry built with its record
and hash in one pass (:func:`make_entry`), its data's bytes sliced out of the record
(:func:`entry_data_cbor`, the analytics ``data_cbor`` column), its full v1 map
(:func:`entry_bytes`); and what ``append`` refuses before anything is written (a
reserved or malformed kind, a ts out of range, data that would not read back as
written: :func:`check_kind`, :func:`check_ts`, :func:`normalize_data_cbor`). Its own
room: the writer's side of an entry, apart from the readers' (:mod:`s3log._format.records`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import add as _add
from operator import attrgetter
from typing import Any

import cbor2

from s3log._format.cbor import _INT_LEN, _NULL, _array_head, _head_len, _length_head, _uint, dumps, loads
from s3log._format.values import HASH_LEN, RESERVED_KIND_PREFIX, Entry, _new_entry, _record
from s3log.errors import InvalidEntryError

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


def _kind_offset(e: Entry) -> int:
    """Where the "kind" key starts in the entry's record (just after its data)."""
    k = len(e.kind) if e.kind.isascii() else len(e.kind.encode("utf-8"))
    return len(e.raw) - (len(_PREV_NULL) if e.prev is None else len(_PREV_HASH) + HASH_LEN) - k - _head_len(k) - 5


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


def _entries_array(entries: Sequence[Entry]) -> bytes:
    """Format v1: the entries as an array of full maps (with ``hash``)."""
    return _array_head(len(entries)) + b"".join(entry_bytes(e) for e in entries)


def _hashes_array(entries: Sequence[Entry]) -> bytes:
    """Format v2: the entries' hashes as an array of 32-byte strings."""
    return _array_head(len(entries)) + _hash_items(entries)


def _hash_items(entries: Iterable[Entry]) -> bytes:
    """The entries' hashes as the items of a CBOR array (32-byte strings), no array head."""
    return b"".join(map(_add, repeat(_BYTES32), map(_HASH_OF, entries)))


def check_kind(kind: object, *, allow_reserved: bool = False, session: str | None = None) -> str:
    """Validate an entry kind: a non-empty string, not in the reserved namespace."""
    if not isinstance(kind, str) or not kind:
        raise InvalidEntryError(kind, "kind must be a non-empty string", session=session)
    if len(kind) > 256:
        raise InvalidEntryError(kind, "kind is longer than 256 characters", session=session)
    _check_text(kind, kind, session)
    if not allow_reserved and kind.startswith(RESERVED_KIND_PREFIX):
        raise InvalidEntryError(kind, f"kinds starting with {RESERVED_KIND_PREFIX!r} are reserved", session=session)
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
    if type(data) is dict and max_depth > 0:
        flat = _flat_map_cbor(kind, data, session)
        if flat is not None:
            return flat
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


#: Scalars a flat map's values may be for :func:`_flat_map_cbor` (floats apart: see there).
_FLAT_SCALARS = frozenset({int, bool, bytes, type(None)})
#: A flat map's layout by its keys (in the caller's order), for :func:`_flat_map_cbor`:
#: the keys in canonical order, the map's head, and how many bytes the head of an
#: array of twice as many items takes.
_FLAT_LAYOUTS: dict[tuple[Any, ...], tuple[tuple[str, ...], bytes, int]] = {}


def _flat_layout(keys: tuple[Any, ...]) -> tuple[tuple[str, ...], bytes, int] | None:
    """The layout of a map with these keys, if all are ASCII text (else None)."""
    if not all(type(k) is str and k.isascii() for k in keys):
        return None
    # ASCII text encodes to a head growing with its length, then its bytes: the
    # deterministic order (shorter encodings first, then bytewise) is by length, then text.
    order = tuple(sorted(keys, key=lambda k: (len(k), k)))
    layout = (order, _length_head(0xA0, len(keys)), _head_len(2 * len(keys)))
    if len(_FLAT_LAYOUTS) < 4096:  # key sets are few; a flood of new ones is not cached
        _FLAT_LAYOUTS[keys] = layout
    return layout


def _flat_map_cbor(kind: str, data: dict[Any, Any], session: str | None) -> tuple[Any, bytes] | None:
    """:func:`normalize_data_cbor` of the common entry without the general encoder's
    map and a decode: a map of ASCII text keys to text, ints, bools, bytes, None and
    floats other than NaN. None for any other map (the general way then decides).

    Its keys and values go to the encoder as one array in canonical key order (one C
    call, no sorting of a map there) and the array's head is swapped for the map's, as
    records are made (see above). What a decode would give back is built directly: the
    same keys in canonical order, the same values (each of these types decodes to an
    equal value of its own type; a NaN might come back as another NaN, so it is left to
    the general way). tests/test_encoding_layouts.py checks both against the general way.
    """
    keys = tuple(data)
    layout = _FLAT_LAYOUTS.get(keys) or _flat_layout(keys)
    if layout is None:
        return None
    for v in data.values():
        tv = type(v)
        if tv is str:
            if not v.isascii():
                _check_text(kind, v, session)
        elif tv is float:
            if v != v:
                return None
        elif tv not in _FLAT_SCALARS:
            return None
    order, map_head, array_head_len = layout
    # The value's keys are the layout's (plain str, even when the caller's keys only
    # compare equal to them), as a decode would give.
    value = {k: data[k] for k in order}
    return value, map_head + dumps([x for kv in value.items() for x in kv])[array_head_len:]


#: The end of a record after its data, up to prev's value, by kind (see make_entry).
_KIND_TAILS: dict[str, bytes] = {}


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


_PREV_OF, _HASH_OF = attrgetter("prev"), attrgetter("hash")
