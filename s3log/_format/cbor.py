"""The deterministic CBOR primitives the format is written and read with.

Encoding (RFC 8949 §4.2.1, so the same content always gives the same bytes): the
general encoder :func:`dumps`, and the heads, integers and maps laid out by hand where
a commit or a reader would otherwise call the encoder once per value. Decoding:
:func:`loads`, the decoder options that refuse what s3log never writes (indefinite
lengths, value sharing, tags read through), and :func:`_decode`, which takes a stored
object only when its body is exactly one CBOR item. Its own room because entries,
records, segments and heads all build on these and on nothing of one another.
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import add as _add
from operator import itemgetter
from typing import Any

import cbor2

from s3log.errors import CorruptionError


def dumps(value: Any) -> bytes:
    """Deterministic CBOR encoding of ``value``."""
    return cbor2.dumps(value, canonical=True)


def loads(data: bytes) -> Any:
    """Decode one CBOR item."""
    return cbor2.loads(data)


def _head_len(n: int) -> int:
    """Bytes of the CBOR head of an integer or a length ``n`` (shortest form)."""
    if n < 0:
        n = -1 - n
    return 1 if n < 24 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9


#: Bytes taken by an integer whose CBOR encoding starts with this byte (major types 0
#: and 1, the only ones a record's ts and seq may have); 0 for any other byte.
_INT_LEN = bytes(
    1 if (b & 0x1F) < 24 else {24: 2, 25: 3, 26: 5, 27: 9}.get(b & 0x1F, 0) if b < 0x40 else 0 for b in range(256)
)


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
_NULL = dumps(None)


def _uint(n: int) -> bytes:
    """The deterministic encoding of an integer: a major-type-0 head when in [0, 2**64)."""
    return _length_head(0x00, n) if 0 <= n < 2**64 else dumps(n)


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


def _loads_or_none(record: bytes) -> Any:
    try:
        return cbor2.loads(record, **_RECORD_LOADS)
    except Exception:  # cbor2 raises several types for garbage input
        return None


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


def _bytes_array(items: Sequence[bytes]) -> bytes:
    """A CBOR array of byte strings."""
    # One C call: a byte string has one deterministic encoding (its shortest length
    # head), which is what cbor2 writes; a Python call per item cost three times more.
    return dumps(items if type(items) is list else list(items))


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


def _bytes_head(n: int) -> bytes:
    """The head of a byte string of ``n`` bytes (major type 2, shortest length form)."""
    return _length_head(0x40, n)
