"""Format v2 entry records read back: decoded, hashed as stored, and their layout checked.

A v2 object stores each entry's record as a byte string, so a reader hashes the stored
bytes and decodes the records of a whole object in one call (:func:`_decode_items`),
and never encodes anything. Records in the shape every s3log writer makes are read
off their byte layout (:func:`_parse_linked_records`, docs/decisions/0028); anything
else takes the general path (:func:`_decode_records`), which says what is wrong with
which entry. A v1 entry map is read here too (:func:`_entry_from_map`). Its own room:
the most adversarial input the format meets, kept apart from the objects around it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import add as _add
from operator import itemgetter
from operator import lt as _lt
from operator import sub as _sub
from typing import Any, cast

import cbor2

from s3log._format.cbor import (
    _DELIMITER,
    _INT_LEN,
    _LAST_BYTE,
    _RECORD_LOADS,
    _TAG_HEAD_LAST,
    _TRANSPARENT_TAG_HEADS,
    _array_head,
    _loads_or_none,
    _one_item,
    _seq_parts,
    _uint_parts,
    dumps,
)
from s3log._format.columns import LinkedRun, RunColumns, _LazyTail
from s3log._format.entries import _BYTES32, _K_DATA, _K_KIND, _K_PREV, _PREV_HASH, _PREV_NULL, _R_SEQ, _R_TS
from s3log._format.values import _NEW_ENTRY, HASH_LEN, Entry, _new_entry, _NewEntry
from s3log.errors import CorruptionError


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


def _entries_from_records(records: Any, hashes: Any, key: str) -> tuple[Entry, ...]:
    return cast(tuple[Entry, ...], _decode_records(records, hashes, key))


def _tail_from_records(records: Any, hashes: Any, key: str) -> tuple[Entry, ...] | _LazyTail:
    """A v2 head's tail: its entries, or when read off the layout s3log writes, a
    :class:`_LazyTail` (the same checks made, the entries made when first asked for)."""
    return _decode_records(records, hashes, key, lazy=True)

#: The five values of a record map, in the order Entry takes them (a C call per record).
_RECORD_VALUES = itemgetter("seq", "prev", "kind", "ts", "data")


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
    read = _read_fronts(records) if n else None
    if read is None:
        return None
    tss, s0, at, fronts = read
    r0 = records[0]
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


def _read_fronts(records: list[bytes]) -> tuple[list[int], int, int, Sequence[bytes]] | None:
    """The fronts of records laid out as :func:`_parse_linked_records` reads them: each
    record's ts, the first seq, where the "seq" key starts and each record's front from
    there (the "seq" key, its seq, the "data" key); None when they are not in that shape.

    The fronts are compared with their deterministic encodings: every ts in the one
    unsigned integer form the first record's head byte names (shortest form), and
    contiguous seqs from the first.
    """
    n = len(records)
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
    return tss, s0, at, fronts


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
