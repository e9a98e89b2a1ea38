"""A v2 tail's records read off their byte layout (``records._parse_linked_records``), attacked.

The claim: for any input the fast path either declines (None: the general path decides) or
returns exactly the entries the general path returns, and never accepts what the general
path refuses. Attacked with every length boundary, records holding the keys' own bytes,
crafted and mutated records, nesting limits, transparent tags and a kind cache cleared
under concurrent decoders.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cbor2
import pyarrow as pa
import pytest

import s3log
from s3log import analytics
from s3log._format import records as v2_records
from s3log._format.codec import decode_segment
from s3log._format.columns import LinkedRun, RunColumns
from s3log._format.entries import entry_data_cbor, make_entry
from s3log._format.records import _TAIL_KINDS, _decode_records
from s3log._format.values import Entry
from s3log.errors import CorruptionError

_KEY = "s3log/sessions/s/head"


_NULL = b"\xf6"


_H32 = b"\x58\x20"


def _d(value: Any) -> bytes:
    return cbor2.dumps(value, canonical=True)


def _sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _rec(ts: bytes, seq: bytes, data: bytes, kind: bytes, prev: bytes) -> bytes:
    """A record from the encodings of its five values (docs/format.md, "Format v2")."""
    return b"\xa5\x62ts" + ts + b"\x63seq" + seq + b"\x64data" + data + b"\x64kind" + kind + b"\x64prev" + prev


@contextmanager
def _fast_path_off() -> Iterator[None]:
    """The general path alone: the fast path always declines."""
    saved = v2_records._parse_linked_records
    v2_records._parse_linked_records = lambda *a: None
    try:
        yield
    finally:
        v2_records._parse_linked_records = saved


def _general(records: list[Any], digests: list[bytes]) -> tuple[Entry, ...] | CorruptionError:
    with _fast_path_off():
        try:
            return _decode_records(records, digests, _KEY)
        except CorruptionError as exc:
            return exc


def _data_key(value: Any) -> Any:
    try:
        return _d(value)
    except (RecursionError, ValueError, TypeError, cbor2.CBOREncodeError):
        return ("not re-encodable", type(value).__name__)


def _fields(entries: Any) -> list[tuple[Any, ...]]:
    return [(type(e), e.seq, e.prev, e.kind, e.ts, _data_key(e.data), e.hash, e.raw) for e in entries]


def _outcome(records: list[Any]) -> str:
    """``parsed`` or ``declined``; fails the test if the fast path raises, accepts what
    the general path refuses, or reads anything differently."""
    digests = [_sha(r) for r in records]
    general = _general(records, digests)
    fast = v2_records._parse_linked_records(records, digests, _KEY)
    if fast is None:
        return "declined"
    assert not isinstance(general, CorruptionError), f"fast path accepted what the general path refuses: {general}"
    assert type(fast) is LinkedRun and type(general) is LinkedRun
    assert _fields(fast) == _fields(general)
    return "parsed"


def _relink(records: list[bytes], i: int) -> list[bytes]:
    """Records after ``i`` re-pointed at the (changed) record before them, so that a
    change is not merely a broken link."""
    out = records[: i + 1]
    for old in records[i + 1 :]:
        out.append(old[:-32] + _sha(out[-1]) if len(old) > 39 and old[-34:-32] == _H32 else old)
    return out


def _chain(seq: int, n: int, *, ts: int = 1_767_225_600_000, kinds: list[str] | None = None,
           datas: list[Any] | None = None) -> list[bytes]:
    prev = None if seq == 0 else b"\x07" * 32
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)] if kinds else "k"
        data = datas[i % len(datas)] if datas else {"i": i}
        e = make_entry(seq + i, prev, kind, ts, data)
        out.append(e.raw)
        prev = e.hash
    return out


_BOUNDS = [0, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**64 - 1]


@pytest.mark.parametrize("bound", _BOUNDS[1:])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_seqs_across_every_length_boundary_are_parsed_as_the_general_path_reads_them(bound: int, n: int) -> None:
    # s0 .. s0+n-1 straddling the boundary (and 2**64-1 .. 2**64+5, beyond a uint).
    s0 = max(0, bound - n // 2)
    assert _outcome(_chain(s0, n)) == "parsed"


def test_seqs_past_64_bits_read_alike() -> None:
    # Records with bignum seqs (tag 2) are not written by s3log, but both paths agree:
    # a run starting below 2**64 and crossing it is parsed; one starting beyond declines.
    assert _outcome(_chain(2**64 - 2, 5)) == "parsed"
    assert _outcome(_chain(2**64, 2)) == "declined"
    assert type(_general(_chain(2**64, 2), [_sha(r) for r in _chain(2**64, 2)])) is LinkedRun


@pytest.mark.parametrize("ts", [*_BOUNDS, 2**64, -1, -(2**64) - 1])
def test_every_ts_width_reads_alike(ts: int) -> None:
    # Every unsigned width is parsed; a bignum or negative ts is declined (the general
    # path reads it: an int is all it asks of a ts).
    got = _outcome(_chain(0, 3, ts=ts))
    assert got == ("parsed" if 0 <= ts < 2**64 else "declined")


def test_mixed_ts_widths_are_declined_and_read_by_the_general_path() -> None:
    records = []
    prev = None
    for i, ts in enumerate([23, 24, 2**40]):
        e = make_entry(i, prev, "k", ts, i)
        records.append(e.raw)
        prev = e.hash
    assert _outcome(records) == "declined"
    assert [e.ts for e in _decode_records(records, [_sha(r) for r in records], _KEY)] == [23, 24, 2**40]


_AWKWARD_KINDS = ["", "dkind", "adkindbQR", "xdkind`", "a\x64kind\x61z", "\x64prev\xf6", "\x64prev\x58\x20" * 5,
                  "ünï", "x" * 23, "x" * 24, "x" * 300, "s3log.fork", "kind", "prev", "\x64kind\x60"]


_AWKWARD_DATA: list[Any] = [
    None, "", b"", 0, -1, 2**64, -(2**64) - 1, 1.5, float("inf"), "dkind", b"\x64kind\x61k", "\x64prev\xf6",
    b"\x64prev\x58\x20" + bytes(32), {"kind": "dkind", "prev": None}, [[[]]], "\x64kind\x67message",
    b"\xd9\xd9\xf7", b"\x50" * 17, True, False, {"a": {"b": ["\x64kind\x61z"]}},
]


@pytest.mark.parametrize("kind", _AWKWARD_KINDS)
def test_kinds_and_data_holding_the_keys_bytes_read_alike(kind: str) -> None:
    for seq in (0, 40):
        records = _chain(seq, len(_AWKWARD_DATA), kinds=[kind, "k", kind], datas=_AWKWARD_DATA)
        _outcome(records)
        # One record alone too (a 1-record tail: no link to lean on).
        for r in records[:3]:
            _outcome([r])


def test_a_hash_prev_whose_bytes_spell_a_kind_key_text_and_null_prev_reads_alike() -> None:
    """The first record's prev is a 32-byte string laid out as ``64 "kind" <20-byte
    text> 64 "prev" f6``: read from the end it looks like a record whose kind is that
    text and whose prev is null. Whatever the fast path takes, it must be what the
    bytes decode to."""
    fake = b"\x64kind" + b"\x74" + b"z" * 20 + b"\x64prev\xf6"
    assert len(fake) == 32
    for data in (b"\x01", b"\x58\x25", _d(b"\x01" * 5)):
        r = _rec(_d(5), _d(0), data, _d("k"), _H32 + fake)
        _outcome([r])
    # And a data item that swallows everything up to the fake kind key: a real record
    # with a null prev, data a 37-byte string; both read it so.
    body = b"\x01\x64kind\x61k\x64prev" + _H32
    r = b"\xa5\x62ts\x05\x63seq\x00\x64data" + bytes([0x40 | 24, len(body)]) + body + fake
    assert _outcome([r]) == "parsed"
    (e,) = _decode_records([r], [_sha(r)], _KEY)
    assert (e.data, e.kind, e.prev) == (body, "z" * 20, None)


def _one(ts: bytes = b"\x05", seq: bytes = b"\x00", data: bytes = b"\x01", kind: bytes = b"\x61k",
         prev: bytes = _NULL) -> bytes:
    return _rec(ts, seq, data, kind, prev)


_REFUSED = {
    "ts not shortest": _one(ts=b"\x18\x05"),
    "ts 1-byte form below 24": _one(ts=b"\x18\x17"),
    "ts 2-byte form of a 1-byte value": _one(ts=b"\x19\x00\xff"),
    "ts 4-byte form": _one(ts=b"\x1a\x00\x00\xff\xff"),
    "ts 8-byte form": _one(ts=b"\x1b\x00\x00\x00\x00\xff\xff\xff\xff"),
    "ts float": _one(ts=b"\xf9\x3c\x00"),
    "ts bool": _one(ts=b"\xf5"),
    "ts reserved head": _one(ts=b"\x1c"),
    "ts indefinite head": _one(ts=b"\x1f"),
    "seq not shortest": _one(seq=b"\x18\x00"),
    "seq float": _one(seq=b"\xfa\x00\x00\x00\x00"),
    "seq negative": _one(seq=b"\x20"),
    "seq tagged": _one(seq=b"\xd9\xd9\xf7\x00"),
    "kind not shortest": _one(kind=b"\x78\x01k"),
    "kind indefinite": _one(kind=b"\x7f\x61k\xff"),
    "kind tagged": _one(kind=b"\xd9\xd9\xf7\x61k"),
    "kind bytes": _one(kind=b"\x41k"),
    "kind int": _one(kind=b"\x01"),
    "kind not utf-8": _one(kind=b"\x62\xff\xfe"),
    "kind two texts": _one(kind=b"\x61k\x61k"),
    "kind missing": _one(kind=b""),
    "data two items": _one(data=b"\x01\x02"),
    "data empty": _one(data=b""),
    "data truncated": _one(data=b"\x18"),
    "data a break": _one(data=b"\xff"),
    "data ends with a break": _one(data=b"\x01\xff"),
    "data indefinite bytes": _one(data=b"\x5f\x41\x00\xff"),
    "data indefinite array": _one(data=b"\x9f\x01\xff"),
    "data indefinite map": _one(data=b"\xbf\xff"),
    "data shareable (28)": _one(data=b"\xd8\x1c\x01"),
    "data shared ref (29)": _one(data=b"\xd8\x1d\x00"),
    "data ends with tag 28": _one(data=b"\x01\xd8\x1c"),
    "data ends with a datetime tag": _one(data=b"\x01\xc0"),
    "data swallowing the kind key": _one(data=b"\x65"),
    "prev short string": _one(prev=b"\x58\x1f" + bytes(31)),
    "prev long form": _one(prev=b"\x59\x00\x20" + bytes(32)),
    "prev undefined": _one(prev=b"\xf7"),
    "prev tagged null": _one(prev=b"\xd9\xd9\xf7\xf6"),
    "byte after": _one() + b"\x00",
    "tag after": _one() + b"\xd9\xd9\xf7",
    "byte before": b"\x00" + _one(),
    "six-entry map head": b"\xa6" + _one()[1:],
    "four-entry map head": b"\xa4" + _one()[1:],
}


@pytest.mark.parametrize("name", sorted(_REFUSED))
def test_what_the_general_path_refuses_is_never_parsed(name: str) -> None:
    record = _REFUSED[name]
    assert v2_records._parse_linked_records([record], [_sha(record)], _KEY) is None
    assert isinstance(_general([record], [_sha(record)]), CorruptionError)
    # Also as the second record of an otherwise good tail (its prev the hash before).
    first = make_entry(0, None, "k", 5, 0).raw
    second = record.replace(b"\x63seq\x00", b"\x63seq\x01", 1)
    if second.endswith(b"\x64prev\xf6"):
        second = second[:-1] + _H32 + _sha(first)
    records = [first, second]
    assert _outcome(records) == "declined", name
    assert isinstance(_general(records, [_sha(r) for r in records]), CorruptionError)


@pytest.mark.parametrize("kind", [bytearray, memoryview, str])
@pytest.mark.parametrize("where", [0, 1])
def test_records_that_are_not_bytes_are_declined(kind: Callable[[bytes], Any], where: int) -> None:
    records: list[Any] = _chain(0, 2)
    digests = [_sha(r) for r in records]
    records[where] = kind(records[where]) if kind is not str else records[where].decode("latin-1")
    assert v2_records._parse_linked_records(records, digests, _KEY) is None


def test_an_empty_tail_is_empty() -> None:
    assert _decode_records([], [], _KEY) == ()


def test_the_fast_path_declines_an_empty_list() -> None:
    """The claim is "for ANY input, None or the general path's entries"; an empty list
    raises. Fix: ``if not records: return None`` first (or state the precondition)."""
    assert v2_records._parse_linked_records([], [], _KEY) is None


def test_records_that_are_not_linked_are_declined_and_left_to_the_verifier() -> None:
    a, b = _chain(0, 2)
    other = make_entry(1, b"\x09" * 32, "k", 1_767_225_600_000, {"i": 1}).raw  # seq 1, prev not a's hash
    assert _outcome([a, other]) == "declined"
    got = _general([a, other], [_sha(a), _sha(other)])
    assert type(got) is tuple and [e.seq for e in got] == [0, 1]
    # Records in the wrong order, and a gap in the seqs.
    assert _outcome([b, a]) == "declined"
    c = _chain(0, 3)
    gap = _relink([c[0], c[2].replace(b"\x63seq\x02", b"\x63seq\x03", 1)], 0)
    assert _outcome(gap) == "declined"


_GOOD_DATA: list[Any] = [*_AWKWARD_DATA, {"i": 1, "text": "lorem ipsum " * 6}, list(range(30)), 2**40]


_RAW_DATA = [b"\x18\x05", b"\xd9\xd9\xf7\x01", b"\x5f\x41\x00\xff", b"\x01\x02", b"", b"\x18", b"\xd8\x1c\x01",
             b"\xff", b"\x82\x01", b"\xa1\x01\x02\x01\x03", b"\xf7", b"\xf8\x10", b"\x01\xd8\x1c", b"\x01\xc0",
             b"\xd9\x01\x00\x82\x63abc\xd8\x19\x00", b"\x01\x64kind\x61k\x64prev\xf6", b"\x62ab\x64kind",
             b"\x65dkind", b"\xc1\x01", b"\x41", b"\x19\x00\x01", b"\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00"]


_RAW_KINDS = [b"\x78\x01k", b"\x7f\x61k\xff", b"\xd9\xd9\xf7\x61k", b"\x41k", b"\x01", b"\x62\xff\xfe",
              b"\x61k\x61k", b"", b"\x61", b"\xf6", b"\x64kind"]


def _near(rng: random.Random) -> int:
    return max(0, rng.choice(_BOUNDS) + rng.randint(-3, 3))


def _weird_uint(v: int, rng: random.Random) -> bytes:
    longer = [bytes([h]) + v.to_bytes(w, "big") for h, w in ((0x18, 1), (0x19, 2), (0x1A, 4), (0x1B, 8))
              if v < 256**w and 1 + w > len(_d(v))]
    return rng.choice([*longer[:1], _d(-1 - v), _d(float(v)), b"\xc2" + _d(v.to_bytes(9, "big")),
                       b"\xd9\xd9\xf7" + _d(v), b"\xf5", _d(v + 1), _d(max(0, v - 1)), b"\x1c"])


def _crafted(rng: random.Random) -> list[bytes]:
    """Linked records built from their five encodings, each now and then replaced by
    one an s3log writer never makes (``rate`` per component)."""
    rate = rng.choice([0.0, 0.01, 0.05, 0.3])
    n = rng.choice([1, 1, 2, 3, 6, 25])
    s0 = rng.choice([0, 0, _near(rng)])
    ts0 = _near(rng)
    kind0 = rng.choice(_AWKWARD_KINDS)
    out: list[bytes] = []
    for i in range(n):
        seq = s0 + i
        ts = ts0 if rng.random() < 0.9 else _near(rng)
        ts_enc = _d(ts) if rng.random() >= rate else _weird_uint(ts, rng)
        seq_enc = _d(seq) if rng.random() >= rate else _weird_uint(seq, rng)
        kind = kind0 if rng.random() < 0.8 else rng.choice(_AWKWARD_KINDS)
        kind_enc = _d(kind) if rng.random() >= rate else rng.choice(_RAW_KINDS)
        r = rng.random()
        data = (_d(rng.choice(_GOOD_DATA)) if r >= rate else rng.choice(_RAW_DATA) if r >= rate / 3
                else _d(rng.choice(_GOOD_DATA)) + rng.choice(_RAW_DATA))
        if i == 0:
            prev = rng.choice([_NULL if s0 == 0 else _H32 + rng.randbytes(32), _H32 + rng.randbytes(32), _NULL,
                               _H32 + rng.randbytes(26) + b"\x64prev\xf6"])
            if rng.random() < rate:
                prev = rng.choice([b"\x58\x1f" + bytes(31), b"\x40", b"\xd9\xd9\xf7\xf6", b"\xf7"])
        else:
            prev = _H32 + _sha(out[-1]) if rng.random() >= rate / 3 else rng.choice([_NULL, _H32 + rng.randbytes(32)])
        rec = _rec(ts_enc, seq_enc, data, kind_enc, prev)
        if rng.random() < rate / 5:
            rec = rng.choice([rec + b"\x00", b"\xa6" + rec[1:], rec[:-1]])
        out.append(rec)
    return out


_TOKENS = [b"\x00", b"\xf6", b"\xff", b"\xd9\xd9\xf7", b"\xd9\x01\x00", b"\xd8\x1c", b"\xd8\x1d", b"\x5f", b"\x7f",
           b"\x9f", b"\xbf", b"\x18", b"\x64kind", b"\x64prev", b"\x64prev\xf6", _H32, b"\x64data", b"\x63seq",
           b"\x62ts", b"\xa5", b"\x41", b"\x61", b"\x81", b"\xc0"]


def _boundaries(r: bytes) -> list[int]:
    """Where a record's fields meet (best effort: any record, well formed or not)."""
    marks = [0, 1, 4, 5, len(r) - 39, len(r) - 32, len(r) - 6, len(r) - 1, len(r)]
    for key in (b"\x63seq", b"\x64data", b"\x64kind", b"\x64prev"):
        at = r.rfind(key)
        if at >= 0:
            marks += [at, at + len(key), at + len(key) + 1]
    return [m for m in marks if 0 <= m <= len(r)]


def _mutated(rng: random.Random, records: list[bytes]) -> list[bytes]:
    """One record changed where its fields meet (a token inserted or overwritten, bytes
    deleted, a bit flipped, a splice with another record), the rest relinked."""
    i = rng.randrange(len(records))
    r = records[i]
    at = min(len(r), max(0, rng.choice(_boundaries(r)) + rng.randint(-1, 1)))
    how = rng.randrange(7)
    token = rng.choice(_TOKENS)
    if how >= 5 and b"\x64data" in r and b"\x64kind" in r:  # another value in the same place: often still valid
        front, back = r.index(b"\x64data") + 5, r.rindex(b"\x64kind")
        if how == 5:
            r = r[:front] + _d(rng.choice(_GOOD_DATA)) + r[back:]
        else:
            end = len(r) - (6 if r.endswith(b"\x64prev\xf6") else 39)
            r = r[: back + 5] + _d(rng.choice(_AWKWARD_KINDS)) + r[end:]
    elif how == 0:
        r = r[:at] + token + r[at:]
    elif how == 1:
        r = r[:at] + token + r[at + len(token) :]
    elif how == 2:
        r = r[:at] + r[at + rng.randint(1, 3) :]
    elif how == 3 and at < len(r):
        r = r[:at] + bytes([r[at] ^ (1 << rng.randrange(8))]) + r[at + 1 :]
    else:
        other = rng.choice(records)
        r = r[:at] + other[rng.randrange(len(other)) :]
    return _relink([*records[:i], r, *records[i + 1 :]], i)


def test_crafted_records_never_read_differently_from_the_general_path() -> None:
    rng = random.Random(5_0501)
    outcomes = {"parsed": 0, "declined": 0}
    for _ in range(12_000):
        outcomes[_outcome(_crafted(rng))] += 1
    assert outcomes["parsed"] > 2_000 and outcomes["declined"] > 2_000, outcomes


def test_records_changed_where_their_fields_meet_never_read_differently() -> None:
    rng = random.Random(5_0502)
    outcomes = {"parsed": 0, "declined": 0}
    for _ in range(12_000):
        base = _crafted(rng) if rng.random() < 0.5 else _chain(
            rng.choice([0, 0, 22, 254, 65_534]), rng.choice([1, 2, 4, 12]), ts=_near(rng),
            kinds=rng.sample(_AWKWARD_KINDS, 3), datas=rng.sample(_GOOD_DATA, 4))
        for _ in range(rng.choice([1, 1, 2])):
            base = _mutated(rng, base)
        outcomes[_outcome(base)] += 1
    assert outcomes["parsed"] > 400 and outcomes["declined"] > 1_000, outcomes


def _depth_record(depth: int, seq: int = 0, prev: bytes = _NULL) -> bytes:
    return _rec(_d(5), _d(seq), b"\x81" * depth + b"\x00", _d("k"), prev)


def _general_depth_limit() -> int:
    """The least array nesting of a record's data the general path refuses (cbor2's
    container depth limit, less the array and map the data sits in)."""
    lo, hi = 1, 4096  # accepted at lo, refused at hi
    assert not isinstance(_general([_depth_record(lo)], [_sha(_depth_record(lo))]), CorruptionError)
    assert isinstance(_general([_depth_record(hi)], [_sha(_depth_record(hi))]), CorruptionError)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        refused = isinstance(_general([_depth_record(mid)], [_sha(_depth_record(mid))]), CorruptionError)
        lo, hi = (lo, mid) if refused else (mid, hi)
    return hi


def test_data_at_the_decoders_nesting_limit_is_read_alike_by_both_paths() -> None:
    """The fast path decodes each data item inside _decode_items' array only; the
    general path decodes it inside that array *and* the record's map: one container
    level deeper. cbor2 refuses nesting past a fixed depth, so data one level short of
    the general path's limit is accepted by the fast path and refused by the general
    one (and so also by the fast path's own fallback: the same record reads or not
    depending on the other records of the tail, e.g. their ts widths).

    Fix: decode the fast path's data items at the record's depth, e.g. give
    ``_decode_items`` a ``nest`` argument that wraps the whole body in one more array
    (``b"\\x81" + body``, then ``[0]``) and pass ``nest=1`` from
    ``_parse_linked_records`` (or decline data whose span could exceed the limit)."""
    limit = _general_depth_limit()
    for depth in range(limit - 3, limit + 2):
        for records in ([_depth_record(depth)], _relink([*_chain(0, 1), _depth_record(depth, 1, _H32 + bytes(32))], 0)):
            digests = [_sha(r) for r in records]
            fast = v2_records._parse_linked_records(records, digests, _KEY)
            general = _general(records, digests)
            assert fast is None or not isinstance(general, CorruptionError), (depth, general)


def test_a_tail_at_the_nesting_limit_reads_as_without_the_fast_path() -> None:
    store = s3log.MemoryStore()
    sid, hkey = _session(store)
    head = cbor2.loads(store.get(hkey).body)
    tail = list(head["tail"])
    limit = _general_depth_limit()
    r = tail[-1]
    front = r.index(b"\x64data") + 5
    back = r.rindex(b"\x64kind")
    tail[-1] = r[:front] + b"\x81" * limit + b"\x00" + r[back:]
    _store_tail(store, hkey, head, tail)
    assert _outcomes_on(store, sid) == _outcomes_off(store, sid)


_TRANSPARENT_TAG_HEADS = [b"\xd9\xd9\xf7", b"\xda\x00\x00\xd9\xf7", b"\xdb" + (55799).to_bytes(8, "big"),
                          b"\xd9\x01\x00", b"\xda\x00\x00\x01\x00", b"\xdb" + (256).to_bytes(8, "big")]


@pytest.mark.parametrize("tag", _TRANSPARENT_TAG_HEADS, ids=lambda t: t.hex())
def test_data_followed_by_a_transparent_tag_head_is_refused_in_a_tail(tag: bytes) -> None:
    """``01 d9d9f7`` as a record's data: cbor2 decodes tag 55799 (and 256) as the value
    it wraps, so inside the record the tag wraps the "kind" key (still "kind"), and
    inside _decode_items' array it wraps the random delimiter (still the delimiter).
    Both paths accept the record with data 1 although its data span is not one item;
    _check_layout compares only what is before and after the span. The entry's
    ``data_cbor`` slice is then not the encoding of its data, and a format-v1 writer
    continuing the session writes a segment whose hashes no longer verify (see the
    end-to-end test below).

    Fix: in ``_decode_items`` (used by the fast path's data, v2 segments' data and the
    general path's records), after the one-call decode, decode alone every chunk that
    ends with one of these six heads (``bytes.endswith`` with a tuple: one C call per
    chunk) with ``cbor2.CBORDecoder(io.BytesIO(chunk), **_RECORD_LOADS)`` and refuse it
    unless ``fp.tell() == len(chunk)`` (a byte string that merely ends with those bytes
    passes); and have the general tail path run the same check on each record's data
    span ``record[len(front):len(record) - len(back)]`` in ``_check_layout`` (the tag
    there wraps the "kind" key, not a delimiter). Overriding tags 55799/256 with
    semantic decoders is not enough: 256 then loses its namespace, and s3log writes
    both tags when an appender passes a CBORTag."""
    e = make_entry(0, None, "k", 5, 1)
    cut = e.raw.rindex(b"\x64kind")
    record = e.raw[:cut] + tag + e.raw[cut:]
    assert v2_records._parse_linked_records([record], [_sha(record)], _KEY) is None
    assert isinstance(_general([record], [_sha(record)]), CorruptionError)


@pytest.mark.parametrize("tag", _TRANSPARENT_TAG_HEADS[:1] + _TRANSPARENT_TAG_HEADS[3:4], ids=lambda t: t.hex())
def test_data_followed_by_a_transparent_tag_head_is_refused_in_a_segment(tag: bytes) -> None:
    e = make_entry(0, None, "k", 5, 1)
    cut = e.raw.rindex(b"\x64kind")
    record = e.raw[:cut] + tag + e.raw[cut:]
    body = _d({"v": 2, "session": "s", "seq": 0, "prev": None, "ts": [5], "kinds": ["k"],
               "data": [_d(1) + tag], "hashes": [_sha(record)]})
    with pytest.raises(CorruptionError):
        decode_segment(body, "s3log/sessions/s/seg/x")


def test_a_tail_s3log_reads_stays_readable_when_a_v1_writer_continues_it() -> None:
    store = s3log.MemoryStore()
    sid, hkey = _session(store)
    head = cbor2.loads(store.get(hkey).body)
    tail = list(head["tail"])
    r = tail[-1]
    front = r.index(b"\x64data") + 5
    tail[-1] = r[:front] + b"\x01\xd9\xd9\xf7" + r[r.rindex(b"\x64kind") :]
    _store_tail(store, hkey, head, tail)
    try:
        s3log.Log(store).read(sid)
    except CorruptionError:
        return  # refused up front: the fix
    w = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600, format_version=1)).open(sid)
    for i in range(30):
        w.append("k", {"i": i, "pad": "x" * 30})
        w.commit()
    s3log.Log(store).read(sid)


def test_a_malformed_tail_is_refused_the_same_way_on_every_read() -> None:
    """Record 1's prev head says 34 bytes (``58 22``) instead of 32: decoding it reads
    two bytes of _decode_items' random delimiter, and what the rest of the random
    bytes decode to decides the error: "item 1 ... is not exactly one CBOR data item"
    at seq 1, or "not valid CBOR: premature end of stream ..." (various byte counts)
    with no seq. Not the fast path's doing (it declines); but a refusal is meant to
    name the key and the seq, and the same object should always be refused the same
    way (logs, alerts, tests comparing errors).

    Fix: when the one-call decode fails (the ``except`` and the delimiter count in
    ``_decode_items``), diagnose chunk by chunk: decode each alone with
    ``cbor2.CBORDecoder(io.BytesIO(chunk), **_RECORD_LOADS)`` until one raises or
    stops short of its end, and raise naming that chunk (for records: the seq it
    decodes to, else the seq its position implies, else none) - deterministic, and
    only on the failure path."""
    records = _chain(0, 3)
    r = records[1]
    records = _relink([records[0], r[:-34] + b"\x58\x22" + r[-32:], records[2]], 1)
    digests = [_sha(x) for x in records]
    seen = set()
    for _ in range(40):
        got = _general(records, digests)
        assert isinstance(got, CorruptionError)
        seen.add((got.seq, got.reason))
    assert len(seen) == 1, seen


def _session(store: s3log.MemoryStore) -> tuple[str, str]:
    """A v2 session with segments and a tail of awkward data (kinds the fast path takes:
    one holding the "kind" key's bytes would send every read to the general path)."""
    w = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600)).create()
    for i in range(9):
        w.append("step", {"i": i, "pad": "x" * 40})
        if i % 3 == 2:
            w.commit()
    w.commit()
    w = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=65_536)).open(w.session_id)
    for i, kind in enumerate(["tool_call", "message", "x" * 30, "ünï", "k", "tool_call", "step"]):
        w.append(kind, _AWKWARD_DATA[(3 * i) % len(_AWKWARD_DATA)])
    w.commit()
    log = s3log.Log(store)
    head = log.head(w.session_id)
    assert head.segments and len(head.tail) == 7
    return w.session_id, log.layout.head(w.session_id)


def _store_tail(store: s3log.MemoryStore, hkey: str, head: dict[str, Any], tail: list[bytes]) -> None:
    hashes = [_sha(r) for r in tail]
    store.put_raw(hkey, _d({**head, "tail": tail, "tail_hashes": hashes, "hash": hashes[-1]}))


def _error(exc: CorruptionError) -> tuple[Any, ...]:
    # Not the seq nor the message: for a malformed record the general path's own
    # diagnosis varies from read to read (see the nondeterminism test below).
    return (type(exc).__name__, exc.key)


def _run(run: Any) -> Any:
    """A run as its rows (seq, prev, kind, ts, data item, hash), whether it comes as
    columns or entries (a tail read off its records comes as columns)."""
    if isinstance(run, RunColumns):
        n = len(run.hashes)
        return list(zip(range(run.seq, run.seq + n), [run.prev, *run.hashes[:-1]], run.kinds, run.ts, run.data,
                        run.hashes, strict=True))
    return [(e.seq, e.prev, e.kind, e.ts, entry_data_cbor(e), e.hash) for e in run]


def _outcomes(store: s3log.MemoryStore, sid: str) -> list[Any]:
    """What each read path makes of the session (fresh Logs: nothing cached)."""
    out: list[Any] = []
    try:
        out.append(_fields(s3log.Log(store).read(sid).entries))
    except CorruptionError as exc:
        out.append(_error(exc))
    try:
        got = s3log.Log(store).read_runs(sid)
        out.append(None if got is None else [_run(r) for r in got[1]])
    except CorruptionError as exc:
        out.append(_error(exc))
    try:
        out.append(_scanned(store, [sid], 1))
    except CorruptionError as exc:
        out.append(_error(exc))
    return out


def _scanned(store: s3log.MemoryStore, sids: list[str], parallelism: int) -> list[dict[str, list[Any]]]:
    # Timestamps as ints: a changed ts may lie outside what a datetime can hold.
    return [{name: (col.cast(pa.int64()) if pa.types.is_timestamp(col.type) else col).to_pylist()
             for name, col in zip(b.schema.names, b.columns, strict=True)}
            for b in analytics.scan(store, sessions=sids, strict=True, parallelism=parallelism)]


def _outcomes_off(store: s3log.MemoryStore, sid: str) -> list[Any]:
    with _fast_path_off():
        return _outcomes(store, sid)


def _outcomes_on(store: s3log.MemoryStore, sid: str) -> list[Any]:
    return _outcomes(store, sid)


def test_a_mutated_tail_reads_through_every_path_exactly_as_without_the_fast_path() -> None:
    store = s3log.MemoryStore()
    sid, hkey = _session(store)
    original = store.get(hkey).body
    head = cbor2.loads(original)
    assert _d(head) == original  # re-encoding the head changes nothing but what we change
    parsed = 0
    real = v2_records._parse_linked_records

    def spy(*args: Any) -> LinkedRun | None:
        nonlocal parsed
        got = real(*args)
        parsed += got is not None
        return got

    rng = random.Random(5_0503)
    refused = 0
    for case in range(90):
        tail = list(head["tail"])
        for _ in range(rng.choice([1, 1, 2])):
            tail = _mutated(rng, tail)
        i = rng.randrange(len(tail))
        r = tail[i]
        if case % 3 == 0 and b"\x64data" in r and b"\x64kind" in r:  # a record rebuilt around other data
            data = _d(rng.choice(_GOOD_DATA)) if rng.random() < 0.7 else rng.choice(_RAW_DATA)
            tail = _relink([*tail[:i], r[: r.index(b"\x64data") + 5] + data + r[r.rindex(b"\x64kind") :],
                            *tail[i + 1 :]], i)
        _store_tail(store, hkey, head, tail)
        off = _outcomes_off(store, sid)
        v2_records._parse_linked_records = spy  # type: ignore[assignment]
        try:
            on = _outcomes_on(store, sid)
        finally:
            v2_records._parse_linked_records = real
        assert on == off, (case, [r.hex() for r in tail])
        # A refusal names the head (and, the key being the head, its three paths agree).
        if isinstance(on[0], tuple):
            refused += 1
            assert on[0][1] == hkey and on[1] == on[0] and on[2] == on[0]
    assert parsed > 20 and 10 < refused < 90, (parsed, refused)


@contextmanager
def _tiny_kind_cache() -> Iterator[None]:
    saved_max, saved_interval = v2_records._TAIL_KINDS_MAX, sys.getswitchinterval()
    v2_records._TAIL_KINDS_MAX = 3  # cleared all the time
    _TAIL_KINDS.clear()
    sys.setswitchinterval(1e-6)  # threads switch as often as the interpreter allows
    try:
        yield
    finally:
        sys.setswitchinterval(saved_interval)
        v2_records._TAIL_KINDS_MAX = saved_max
        _TAIL_KINDS.clear()


def test_the_kind_cache_cleared_under_concurrent_decoders_never_gives_a_wrong_kind() -> None:
    # (A kind holding the "kind" key's bytes, such as "dkind", always takes the general path.)
    kinds = [f"kind-{i}" for i in range(40)] + ["", "ünï", "x" * 30]
    tails = [_chain(s, 24, kinds=random.Random(s).sample(kinds, 9)) for s in range(0, 160, 20)]
    expected = [_fields(_general(t, [_sha(r) for r in t])) for t in tails]
    assert all(_outcome(t) == "parsed" for t in tails)
    failures: list[str] = []

    def decode(k: int) -> None:
        try:
            for j in range(150):
                t = tails[(k + j) % len(tails)]
                got = v2_records._parse_linked_records(t, [_sha(r) for r in t], _KEY)
                if got is None or _fields(got) != expected[(k + j) % len(tails)]:
                    failures.append(f"thread {k} round {j}: {'declined' if got is None else 'differs'}")
        except Exception as exc:  # an escaping error is a failure too
            failures.append(f"thread {k}: {exc!r}")

    with _tiny_kind_cache():
        threads = [threading.Thread(target=decode, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:5]


def test_a_parallel_scan_with_a_cache_cleared_all_the_time_reads_as_a_serial_one() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=65_536))
    sids = []
    for s in range(10):
        w = log.create()
        for i in range(30):
            w.append(f"kind-{(s * 7 + i) % 23}", {"s": s, "i": i})
        w.commit()
        sids.append(w.session_id)
    serial = _scanned(store, sids, 1)
    with _tiny_kind_cache():
        parallel = _scanned(store, sids, 8)
    assert parallel == serial and sum(len(b["seq"]) for b in serial) == 300
