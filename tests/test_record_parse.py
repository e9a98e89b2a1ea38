"""The fast reading of a v2 tail's records from their layout
(``records._parse_linked_records``) against the general path (each record decoded as a
map, then its layout checked): for any records, either the fast path declines (None)
or it yields exactly the entries the general path does, and never accepts what the
general path refuses."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import cbor2
import pytest

from s3log._format import records as v2_records
from s3log._format.columns import LinkedRun
from s3log._format.entries import _PREV_NULL, data_cbor_column, make_entry
from s3log._format.records import _decode_records
from s3log._format.values import Entry
from s3log.errors import CorruptionError

_KEY = "s3log/sessions/s/head"

#: Kinds that make reading the "kind" key from the end of a record ambiguous: text
#: holding the key's own bytes, a text header, unicode, a length past 23 bytes.
_KINDS = ["k", "message", "tool_call", "adkindbQR", "dkind", "xdkind`", "ünï", "x" * 30, "dkinda", "a\x64kind\x61z"]
_DATA: list[Any] = [None, 0, 1, -1, 2**40, 1.5, "", "dkind", "x\x64kind", b"\x64kind\x61k", b"\x64kind", [1, "dkind"],
         {"a": "\x64prev"}, {"s": 1, "text": "lorem ipsum " * 8}, [[[]]], "\x64kind\x67message"]
_TS = [0, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 1_700_000_000_000]


def _general(records: list[bytes], digests: list[bytes]) -> tuple[Entry, ...] | CorruptionError:
    """The general path alone (the fast one switched off)."""
    saved = v2_records._parse_linked_records
    v2_records._parse_linked_records = lambda *a: None
    try:
        return _decode_records(records, digests, _KEY)
    except CorruptionError as exc:
        return exc
    finally:
        v2_records._parse_linked_records = saved


def _fields(entries: Any) -> list[tuple[Any, ...]]:
    return [(e.seq, e.prev, e.kind, e.ts, cbor2.dumps(e.data, canonical=True), e.hash, e.raw) for e in entries]


def _chain(rng: random.Random, *, plain: bool = False) -> list[bytes]:
    """Linked records; ``plain``: as s3log's writers make them (one ts width, kinds
    without the "kind" key's bytes), else anything an s3log writer could store."""
    n = rng.choice([1, 2, 3, 30])
    seq = rng.choice([0, 0, 5, 20, 250, 65_530])
    prev = None if seq == 0 else rng.randbytes(32)
    ts_base = rng.choice(_TS)
    kinds = _KINDS[:3] if plain else _KINDS
    records = []
    for i in range(n):
        ts = ts_base if plain or rng.random() < 0.8 else rng.choice(_TS)
        e = make_entry(seq + i, prev, rng.choice(kinds), ts, rng.choice(_DATA))
        records.append(e.raw)
        prev = e.hash
    return records


def _mutate(rng: random.Random, records: list[bytes]) -> list[bytes]:
    """Change one record, then relink the ones after it (so the change is not just a
    broken link): a flipped, inserted or deleted byte, or a splice of two records."""
    i = rng.randrange(len(records))
    r = bytearray(records[i])
    how = rng.randrange(4)
    at = rng.randrange(len(r))
    if how == 0:
        r[at] ^= 1 << rng.randrange(8)
    elif how == 1:
        r.insert(at, rng.randrange(256))
    elif how == 2 and len(r) > 1:
        del r[at]
    else:
        other = records[rng.randrange(len(records))]
        cut = rng.randrange(len(other))
        r = r[:at] + bytearray(other[cut:])
    out = [*records[:i], bytes(r)]
    for old in records[i + 1 :]:
        prev = hashlib.sha256(out[-1]).digest()
        out.append(old[:-32] + prev if old.endswith(old[-32:]) and len(old) > 39 else old)
    return out


def _compare(records: list[bytes]) -> str:
    digests = [hashlib.sha256(r).digest() for r in records]
    general = _general(records, digests)
    fast = v2_records._parse_linked_records(records, digests, _KEY)
    if fast is None:
        return "declined"
    assert isinstance(fast, LinkedRun)
    assert not isinstance(general, CorruptionError), f"fast path accepted what the general path refuses: {general}"
    assert _fields(fast) == _fields(general)
    # The entries are ordinary frozen Entries, equal to the general path's.
    assert list(fast) == list(general) and all(type(e) is Entry for e in fast)
    return "parsed"


def test_records_s3log_writes_take_the_fast_path_and_read_as_the_general_path_reads_them() -> None:
    rng = random.Random(20261130)
    for _ in range(300):
        assert _compare(_chain(rng, plain=True)) == "parsed"
    # Mixed ts widths and kinds holding the "kind" key's bytes may be declined, and
    # are then read by the general path; whatever is parsed reads the same.
    outcomes = {"parsed": 0, "declined": 0}
    for _ in range(600):
        outcomes[_compare(_chain(rng))] += 1
    assert outcomes["parsed"] > 0 and outcomes["declined"] > 0, outcomes


def test_changed_records_are_never_read_differently_from_the_general_path() -> None:
    rng = random.Random(7)
    outcomes = {"parsed": 0, "declined": 0}
    for _ in range(3000):
        outcomes[_compare(_mutate(rng, _chain(rng)))] += 1
    # Some changes keep a valid record (another data value, ts or kind): both paths read it alike.
    assert outcomes["parsed"] > 0 and outcomes["declined"] > 0, outcomes


@pytest.mark.parametrize("kind", ["dkind", "adkindbQR", "xdkind`", "a\x64kind\x61z"])
def test_a_kind_holding_the_kind_keys_bytes_reads_back(kind: str) -> None:
    a = make_entry(0, None, kind, 5, "dkind")
    b = make_entry(1, a.hash, kind, 6, {"k": "\x64kind"})
    got = _decode_records([a.raw, b.raw], [a.hash, b.hash], _KEY)
    assert [(e.kind, e.data) for e in got] == [(kind, "dkind"), (kind, {"k": "\x64kind"})]


def test_a_null_prev_after_seq_0_is_left_to_the_general_path() -> None:
    # Not a chain s3log writes; the verifier names it (the decoder does not).
    e = make_entry(3, None, "k", 0, 1)
    assert v2_records._parse_linked_records([e.raw], [e.hash], _KEY) is None
    assert _decode_records([e.raw], [e.hash], _KEY)[0].prev is None


def test_a_hash_prev_ending_like_a_null_prev_is_read_as_the_hash() -> None:
    # A prev whose last bytes are `64 "prev" f6`: the record ends like one whose prev is null.
    prev = bytes(26) + b"\x64prev\xf6"
    e = make_entry(0, prev, "k", 0, 1)
    assert e.raw.endswith(_PREV_NULL)
    got = _decode_records([e.raw], [e.hash], _KEY)
    assert got[0].prev == prev and got[0].seq == 0


def _widened(e: Entry, field: str) -> bytes:
    """``e``'s record with its ts or seq in the next longer integer form (same value)."""
    value = getattr(e, field)
    short = cbor2.dumps(value)
    for head, width in ((0x18, 1), (0x19, 2), (0x1A, 4), (0x1B, 8)):
        if len(short) < 1 + width:
            longer = bytes([head]) + value.to_bytes(width, "big")
            break
    key = cbor2.dumps(field)
    at = e.raw.index(key) + len(key)
    return bytes(e.raw[:at] + longer + e.raw[at + len(short) :])


@pytest.mark.parametrize("field", ["ts", "seq"])
@pytest.mark.parametrize("value", [5, 30, 300, 70_000])
def test_an_integer_not_in_its_shortest_form_is_refused_by_both_paths(field: str, value: int) -> None:
    records: list[bytes] = []
    prev = None if field == "ts" else b"\1" * 32
    for i in range(3):
        seq, ts = (i, value) if field == "ts" else (value + i, 7)
        e = make_entry(seq, prev, "k", ts, i)
        # Every ts widened (one form for all, as the fast path requires); the first seq.
        records.append(_widened(e, field) if field == "ts" or i == 0 else e.raw)
        prev = hashlib.sha256(records[-1]).digest()
    digests = [hashlib.sha256(r).digest() for r in records]
    assert v2_records._parse_linked_records(records, digests, _KEY) is None
    with pytest.raises(CorruptionError, match="laid out"):
        _decode_records(records, digests, _KEY)


def test_a_tail_read_off_its_records_carries_columns_equal_to_its_entries() -> None:
    rng = random.Random(3)
    for _ in range(50):
        records = _chain(rng, plain=True)
        digests = [hashlib.sha256(r).digest() for r in records]
        run = _decode_records(records, digests, _KEY)
        assert isinstance(run, LinkedRun) and run.columns is not None
        cols = run.columns
        assert cols.seq == run[0].seq and cols.prev == run[0].prev
        assert (cols.ts, cols.kinds, cols.hashes) == ([e.ts for e in run], [e.kind for e in run], [e.hash for e in run])
        assert cols.values == [e.data for e in run]
        assert cols.data == [cbor2.dumps(e.data, canonical=True) for e in run] == data_cbor_column(run)
        # A copy: whoever extends the column does not change the run's.
        assert data_cbor_column(run) is not cols.data


def test_read_runs_hands_a_tail_read_off_its_records_as_columns() -> None:
    import s3log
    from s3log._format.columns import RunColumns

    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    for i in range(30):
        w.append("k", {"i": i})
    w.commit()
    got = log.read_runs(w.session_id)
    assert got is not None
    head, runs = got
    assert runs and isinstance(runs[-1], RunColumns)
    assert runs[-1].values == [{"i": i} for i in range(30)] and runs[-1].hashes == [e.hash for e in head.tail]
    assert [e.data for e in log.read(w.session_id)] == runs[-1].values
    log.close()
