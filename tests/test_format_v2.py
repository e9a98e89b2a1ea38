"""Format v2: entries stored as their hashed records; v1 stays readable; chains mix both."""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
from collections.abc import Sequence
from typing import Any

import cbor2
import pytest

import s3log
from s3log import analytics
from s3log._format import codec
from s3log._format.cbor import _RECORD_LOADS
from s3log._format.chain import PendingEntry, build_chain
from s3log._format.codec import decode_head, decode_segment
from s3log._format.entries import data_cbor_column, entry_bytes, entry_data_cbor, make_entry
from s3log._format.records import _entries_from_records
from s3log._format.values import Entry, entry_record
from s3log._protocol import read
from s3log.errors import CorruptionError, FormatVersionError, InvalidArgumentError

SMALL = 600  # a small tail bound, so a few commits flush segments


def _log(store: s3log.MemoryStore, version: int) -> s3log.Log:
    return s3log.Log(store, config=s3log.LogConfig(format_version=version, tail_per_commit=0, tail_max_bytes=SMALL))


def _write(w: s3log.Writer, start: int, n: int) -> None:
    for i in range(start, start + n):
        w.append("step", {"i": i, "text": f"marker-{i:04d}-" + "x" * 40})
        if i % 3 == 2:
            w.commit()
    w.commit()


def _versions(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> tuple[int, list[int]]:
    head = log.head(sid)
    raw = cbor2.loads(store.get(log.layout.head(sid)).body)
    return raw["v"], [cbor2.loads(store.get(k).body)["v"] for k in head.segments]


def _datas(entries: Sequence[Entry]) -> list[int]:
    return [e.data["i"] for e in entries]


def test_v2_is_the_default_and_stores_columns_and_hashes() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=SMALL))
    w = log.create()
    _write(w, 0, 12)
    head_v, seg_vs = _versions(store, log, w.session_id)
    assert head_v == 2 and seg_vs and set(seg_vs) == {2}
    key = log.head(w.session_id).segments[0]
    obj = cbor2.loads(store.get(key).body)
    entries = log.read(w.session_id).entries
    n = len(obj["data"])
    assert set(obj) == {"v", "session", "seq", "prev", "ts", "kinds", "data", "hashes"}
    assert (obj["seq"], obj["prev"]) == (entries[0].seq, entries[0].prev)
    assert obj["ts"] == [e.ts for e in entries[:n]] and obj["kinds"] == [e.kind for e in entries[:n]]
    for d, h, e in zip(obj["data"], obj["hashes"], entries, strict=False):
        assert d == cbor2.dumps(e.data, canonical=True)
        # The record a reader rebuilds is exactly the canonical map the hash is taken over.
        record = cbor2.dumps({"seq": e.seq, "prev": e.prev, "kind": e.kind, "ts": e.ts, "data": e.data},
                             canonical=True)
        assert e.raw == record and h == e.hash == hashlib.sha256(record).digest()


@pytest.mark.parametrize("first", [1, 2])
def test_a_session_written_in_one_format_and_continued_in_the_other_reads_back(first: int) -> None:
    store = s3log.MemoryStore()
    w = _log(store, first).create()
    sid = w.session_id
    _write(w, 0, 10)
    acked = {e.seq: e.hash for e in _log(store, first).read(sid).entries}
    second = 3 - first
    w2 = _log(store, second).open(sid)
    _write(w2, 10, 4)
    head_v, seg_vs = _versions(store, _log(store, second), sid)
    assert head_v == second and set(seg_vs) == {1, 2}  # one chain, both formats
    for version in (1, 2):  # whichever config reads, both formats are read
        entries = _log(store, version).read(sid).entries
        assert _datas(entries) == list(range(14))
        assert all(acked[e.seq] == e.hash for e in entries if e.seq in acked)
    # Merges rewrite older segments in the new format with the same hashes.
    _write(w2, 14, 40)
    entries = _log(store, first).read(sid).entries
    assert _datas(entries) == list(range(54))
    assert all(acked[e.seq] == e.hash for e in entries if e.seq in acked)
    assert _log(store, 2).verify(sid)


def test_hashes_and_entries_are_identical_in_both_formats() -> None:
    chain = build_chain([PendingEntry(f"k{i}", 5 + i, {"i": i, "b": b"\0\1", "f": 1.5, "n": None, "l": [i] * i})
                         for i in range(20)], after_seq=-1, after_hash=None)
    from s3log._format.codec import encode_segment

    v1 = decode_segment(encode_segment("s", chain, 1), "k1").entries
    v2 = decode_segment(encode_segment("s", chain, 2), "k2").entries
    assert list(v1) == list(v2) == chain
    assert [e.hash for e in v1] == [e.hash for e in v2]
    for e1, e2 in zip(v1, v2, strict=True):
        assert not e1.raw and entry_record(e1) == e2.raw  # v1 entries get their record by encoding
        assert entry_bytes(e2) == entry_bytes(e1) == cbor2.dumps(e1.to_map(), canonical=True)
        assert entry_data_cbor(e2) == entry_data_cbor(e1) == cbor2.dumps(e1.data, canonical=True)


def test_decoded_entries_are_ordinary_frozen_entries() -> None:
    e = make_entry(0, None, "k", 1, {"a": 1})
    assert type(e) is Entry and e == Entry(0, None, "k", 1, {"a": 1}, e.hash)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.seq = 5  # type: ignore[misc]
    assert dataclasses.replace(e, seq=0) == e


def test_a_v2_session_through_every_read_path() -> None:
    store = s3log.MemoryStore()
    log = _log(store, 2)
    w = log.create()
    sid = w.session_id
    _write(w, 0, 30)
    w = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=8192)).open(sid)
    w.append("step", {"i": 30, "text": "marker-0030-" + "x" * 40})
    w.commit()  # one entry inline in the head
    head = log.head(sid)
    assert len(head.segments) >= 2 and head.tail
    assert _datas(log.read(sid).entries) == list(range(31))
    data = log._run(read.load(log.layout, sid, upto_seq=7))
    assert _datas(data.entries) == list(range(8))
    got_head, suffix = log._run(read.load_suffix(log.layout, sid, lambda es: len(es) >= 5))
    assert got_head == head and _datas(suffix) == list(range(suffix[0].seq, 31)) and len(suffix) >= 5
    for seq in (0, 4, 29, 30):
        e = log._run(read.entry_at(log.layout, head, seq))
        assert e is not None and e.seq == seq and e.data["i"] == seq
    child = log.fork(sid, at_seq=12)
    fork_entry = log.read(child).entries[0]
    assert fork_entry.data["parent"]["hash"] == log.read(sid).entries[12].hash
    assert [m["data"]["i"] for m in fork_entry.data["seed"]] == list(range(13))
    table = analytics.to_arrow(store, sessions=[sid])
    assert table.column("data_cbor").to_pylist() == [
        cbor2.dumps({"i": i, "text": f"marker-{i:04d}-" + "x" * 40}, canonical=True) for i in range(31)
    ]
    assert table.column("hash").to_pylist() == [e.hash.hex() for e in log.read(sid).entries]


def _segment(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> tuple[str, dict[str, object]]:
    key = log.head(sid).segments[0]
    return key, cbor2.loads(store.get(key).body)


def _v2_session(store: s3log.MemoryStore) -> tuple[s3log.Log, str]:
    log = _log(store, 2)
    w = log.create()
    _write(w, 0, 12)
    return log, w.session_id


def _refused(store: s3log.MemoryStore, log: s3log.Log, sid: str, key: str, body: bytes,
             exc: type[Exception] = CorruptionError, match: str | None = None) -> Any:
    """Store ``body`` at ``key``: reading ``sid`` raises ``exc`` (matching ``match``); the error."""
    store.put_raw(key, body)
    with pytest.raises(exc, match=match) as info:
        log.read(sid)
    return info.value


def test_a_flipped_byte_in_a_record_names_the_key_and_the_entry() -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    key = log.head(sid).segments[0]
    body = bytearray(store.get(key).body)
    pos = body.index(b"marker-0001-")
    body[pos] = ord("M")
    error = _refused(store, log, sid, key, bytes(body))
    assert error.key == key and error.seq == 1 and "hashes to" in str(error)


def test_a_flipped_byte_in_a_stored_hash_names_the_key_and_the_entry() -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    key, obj = _segment(store, log, sid)
    hashes = list(obj["hashes"])  # type: ignore[call-overload]
    hashes[2] = bytes([hashes[2][0] ^ 1]) + hashes[2][1:]
    error = _refused(store, log, sid, key, cbor2.dumps({**obj, "hashes": hashes}, canonical=True))
    assert error.key == key and error.seq == 2


def test_a_changed_prev_and_hash_still_break_the_chain() -> None:
    # Rewriting an entry consistently (new record, matching hash) breaks the next link.
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    key, obj = _segment(store, log, sid)
    data, hashes = list(obj["data"]), list(obj["hashes"])  # type: ignore[call-overload]
    old = decode_segment(store.get(key).body, key).entries[1]
    forged = make_entry(old.seq, old.prev, old.kind, old.ts, {"i": 1, "text": "forged"})
    data[1], hashes[1] = cbor2.dumps(forged.data, canonical=True), forged.hash
    error = _refused(store, log, sid, key, cbor2.dumps({**obj, "data": data, "hashes": hashes}, canonical=True))
    # Entry 2's record is rebuilt with the forged hash as its prev: it no longer hashes
    # to the stored hash of entry 2.
    assert error.key == key and error.seq == 2 and "hashes to" in str(error)


def test_reordered_records_are_corruption_naming_the_key_and_seq() -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    key, obj = _segment(store, log, sid)
    moved = {name: list(obj[name]) for name in ("ts", "kinds", "data", "hashes")}  # type: ignore[call-overload]
    for column in moved.values():
        column[1], column[2] = column[2], column[1]
    error = _refused(store, log, sid, key, cbor2.dumps({**obj, **moved}, canonical=True))
    # Seqs are positions: what sits at seq 1 is entry 2's content, not what hash 1 names.
    assert error.key == key and error.seq == 1 and "hashes to" in str(error)


def test_a_flipped_byte_in_the_heads_tail_names_the_head() -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    w = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=8192)).open(sid)
    w.append("step", {"i": 99, "text": "marker-tail-"})
    w.commit()
    seq = log.head(sid).seq
    hkey = log.layout.head(sid)
    body = bytearray(store.get(hkey).body)
    pos = body.index(b"marker-tail-")
    body[pos] = ord("M")
    error = _refused(store, log, sid, hkey, bytes(body))
    assert error.key == hkey and error.seq == seq


def _rehashed(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The segment with ``changes`` and the hashes of the records they give, so that
    only their shape is wrong."""
    new = {**obj, **changes}
    hashes, prev = [], new["prev"]
    for i, (ts, kind, data) in enumerate(zip(new["ts"], new["kinds"], new["data"], strict=True)):
        hashes.append(hashlib.sha256(_raw_record(new["seq"] + i, prev, data, kind, ts)).digest())
        prev = hashes[-1]
    return {**new, "hashes": hashes}


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda o: {**o, "hashes": o["hashes"][:-1]}, "hashes is not an array"),
        (lambda o: {**o, "data": [d + b"\0" for d in o["data"]]}, "hashes to"),
        (lambda o: _rehashed(o, data=[d + b"\0" for d in o["data"]]), "exactly one CBOR data item"),
        (lambda o: _rehashed(o, data=[b"\x82\x01", *o["data"][1:]]), "not valid CBOR"),
        (lambda o: {**o, "data": [1] * len(o["data"])}, "data holds items that are not bytes"),
        (lambda o: {**o, "kinds": [1] * len(o["kinds"])}, "kinds holds items that are not str"),
        (lambda o: {**o, "ts": [True] * len(o["ts"])}, "ts holds items that are not int"),
        (lambda o: {**o, "seq": -1}, "seq is -1"),
        (lambda o: {**o, "seq": True}, "seq is True"),
        (lambda o: {**o, "prev": b"x"}, "prev is not null or a 32-byte hash"),
        (lambda o: {k: v for k, v in o.items() if k != "kinds"}, "kinds is not an array"),
        (lambda o: {**o, "data": []}, "data is not a non-empty array"),
        (lambda o: {"v": 2, "session": o["session"], "entries": [b"\xa5"], "hashes": [b"\0" * 32]},
         "pre-release layout"),
    ],
)
def test_malformed_v2_segments_are_corruption(mutate: object, reason: str) -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    key, obj = _segment(store, log, sid)
    error = _refused(store, log, sid, key, cbor2.dumps(mutate(obj), canonical=True), CorruptionError, match=reason)  # type: ignore[operator]
    assert error.key == key
    assert gc.isenabled()  # the collector, paused while records decode, is back on


def test_decoding_leaves_a_disabled_collector_disabled() -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    gc.disable()
    try:
        assert _datas(log.read(sid).entries) == list(range(12))
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("version", [3, 0, True, "2", None])
def test_a_format_this_build_cannot_read_is_refused(version: object) -> None:
    store = s3log.MemoryStore()
    log, sid = _v2_session(store)
    key, obj = _segment(store, log, sid)
    error = _refused(store, log, sid, key, cbor2.dumps({**obj, "v": version}, canonical=True), FormatVersionError)
    assert error.key == key and error.found == version
    hkey = log.layout.head(sid)
    head_obj = cbor2.loads(store.get(hkey).body)
    store.put_raw(hkey, cbor2.dumps({**head_obj, "v": version}, canonical=True))
    with pytest.raises(FormatVersionError, match="reads version 1, 2"):
        decode_head(store.get(hkey).body, hkey)


@pytest.mark.parametrize("version", [0, 3, True, "2"])
def test_a_format_this_build_cannot_write_is_refused_up_front(version: object) -> None:
    with pytest.raises(InvalidArgumentError, match="format_version") as info:
        s3log.LogConfig(format_version=version)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------ items decoded one by one
# A v2 reader decodes all records of a head's tail (all data items of a segment) in one
# call. Each must still decode as if alone: exactly one CBOR item, from its own bytes,
# referring to nothing outside itself. Each crafted object below has valid hashes and
# links, so only that rule stands between it and a reader taking, as an entry, something
# its hash was not taken over.


def _raw_record(seq: int, prev: bytes | None, data: bytes, kind: str = "k", ts: int = 0) -> bytes:
    """A record with ``data`` as its data bytes, laid out as s3log lays records out."""
    head = cbor2.dumps(["ts", ts, "seq", seq, "data"], canonical=True)[1:]
    tail = cbor2.dumps(["kind", kind, "prev", prev], canonical=True)[1:]
    return b"\xa5" + head + data + tail


def _tail(records: list[bytes]) -> tuple[Entry, ...]:
    """Decode ``records`` as a v2 head's tail (the record layout)."""
    return _entries_from_records(records, [hashlib.sha256(r).digest() for r in records], _KEY)


def _segment_of(datas: list[bytes], first_seq: int = 0, prev: bytes | None = None) -> bytes:
    """A v2 segment holding ``datas`` as its data bytes, with the hashes they give."""
    obj = _rehashed({"v": 2, "session": "s", "seq": first_seq, "prev": prev, "ts": [0] * len(datas),
                     "kinds": ["k"] * len(datas), "data": datas})
    return cbor2.dumps(obj, canonical=True)


_KEY = "s3log/sessions/s/seg/000000000000-" + "0" * 64 + "-0000000000000000.cbor"


def test_a_record_with_bytes_after_its_map_is_refused() -> None:
    good = make_entry(0, None, "k", 0, {"a": 1}).raw
    # The extra bytes end like the record does, so a check of its last bytes alone passes.
    with pytest.raises(CorruptionError, match="exactly one CBOR data item") as info:
        _tail([good + b"\x64prev\xf6"])
    assert info.value.key == _KEY and info.value.seq == 0


def test_a_record_reaching_into_the_next_record_is_refused() -> None:
    # r1's data claims 7 bytes but holds 6: read together, it swallows the first byte of
    # r2 and r2's first bytes finish r1's map, so both "decode" with valid hashes and links.
    r1 = _raw_record(0, None, b"\x58\x07")[:-len(b"\x64kind\x61k\x64prev\xf6")] + b"\x64prev\xf6"
    rest = make_entry(1, hashlib.sha256(r1).digest(), "k", 0, 0).raw
    r2 = b"\xa5" + b"\x64kind\x61k\x64prev\xf6" + rest
    joined = cbor2.loads(b"\x82" + r1 + r2)  # what reading the concatenation gives
    assert [m["seq"] for m in joined] == [0, 1] and joined[0]["data"] == b"dprev\xf6\xa5"
    with pytest.raises(CorruptionError, match="CBOR") as info:
        _tail([r1, r2])
    assert info.value.key == _KEY


def test_a_data_item_reaching_into_the_next_is_refused() -> None:
    # 0x82 (an array of two) takes the next item as its second: one "item" over two chunks.
    with pytest.raises(CorruptionError, match=r"exactly one CBOR data item|not valid CBOR") as info:
        decode_segment(_segment_of([b"\x82\x01", b"\x02"]), _KEY)
    assert info.value.key == _KEY


@pytest.mark.skipif(not _RECORD_LOADS, reason="cbor2 < 6 cannot refuse value sharing")
def test_an_item_cannot_refer_to_a_value_in_another() -> None:
    shared, ref = b"\xd8\x1c\x81\x01", b"\xd8\x1d\x00"  # tag 28: shareable [1]; tag 29: shared value 0
    assert cbor2.loads(b"\x82" + shared + ref) == [[1], [1]]
    r1 = _raw_record(0, None, shared)
    with pytest.raises(CorruptionError, match=r"semantic tag 2[89]|value sharing"):
        _tail([r1, _raw_record(1, hashlib.sha256(r1).digest(), ref)])
    with pytest.raises(CorruptionError, match=r"semantic tag 2[89]|value sharing"):
        decode_segment(_segment_of([shared, ref]), _KEY)


@pytest.mark.skipif(not _RECORD_LOADS, reason="cbor2 < 6 cannot refuse indefinite lengths")
def test_an_item_with_an_indefinite_length_is_refused() -> None:
    # Never in a deterministic encoding; its hash is over bytes no s3log writer makes.
    chunks = b"\x7f\x61a\xff"  # the text "a" in chunks
    assert cbor2.loads(_raw_record(0, None, chunks))["data"] == "a"
    with pytest.raises(CorruptionError, match="indefinite"):
        _tail([_raw_record(0, None, chunks)])
    with pytest.raises(CorruptionError, match="indefinite"):
        decode_segment(_segment_of([chunks]), _KEY)


def test_a_data_item_starting_with_a_break_is_refused() -> None:
    # What would let an indefinite-length string swallow a delimiter, on any cbor2.
    with pytest.raises(CorruptionError, match="starts with a break"):
        decode_segment(_segment_of([b"\x01", b"\xff\x01"]), _KEY)


def test_a_record_whose_prev_is_not_last_is_refused() -> None:
    # The same map with "kind" after "prev": not how records are laid out (nor canonical).
    raw = b"\xa5" + cbor2.dumps(["ts", 0, "seq", 0, "data", 1, "prev", None, "kind", "k"], canonical=True)[1:]
    assert cbor2.loads(raw) == {"ts": 0, "seq": 0, "data": 1, "prev": None, "kind": "k"}
    with pytest.raises(CorruptionError, match="end with its prev"):
        _tail([raw])


def test_a_record_not_starting_as_a_five_entry_map_is_refused() -> None:
    canonical = make_entry(0, None, "k", 0, 1).raw
    long_head = b"\xb8\x05" + canonical[1:]  # the same map with a non-shortest length
    with pytest.raises(CorruptionError, match="0xa5"):
        _tail([long_head])


@pytest.mark.parametrize(
    "raw",
    [
        b"\xa5\x62ts\x18\x05" + make_entry(0, None, "k", 5, 1).raw[5:],  # ts 5 in two bytes
        b"\xa5" + cbor2.dumps(["seq", 0, "ts", 5, "data", 1, "kind", "k", "prev", None])[1:],  # key order
        make_entry(0, None, "k", 5, 1).raw[:-13] + b"\x64kind\x78\x01k\x64prev\xf6",  # kind's length in two bytes
    ],
    ids=["long-ts", "key-order", "long-kind"],
)
def test_a_tail_record_not_laid_out_deterministically_is_refused(raw: bytes) -> None:
    # A writer storing this entry in a segment would rebuild a different record (other
    # bytes, another hash): refused where it is read instead.
    assert cbor2.loads(raw) == {"ts": 5, "seq": 0, "data": 1, "kind": "k", "prev": None}
    with pytest.raises(CorruptionError, match="laid out") as info:
        _tail([raw])
    assert info.value.seq == 0


@pytest.mark.parametrize(
    "data",
    [None, {}, [], "", b"", 0, {"a": {"b": [1, {"c": None}]}}, [[[[[[[[[[]]]]]]]]]],
     {"deep": functools.reduce(lambda acc, _: [acc], range(250), 1)}],
    ids=["null", "empty-map", "empty-list", "empty-text", "empty-bytes", "zero", "nested", "nested-lists", "deep"],
)
def test_empty_and_nested_data_read_back_in_both_formats_and_mixed(data: Any) -> None:
    store = s3log.MemoryStore()
    w = _log(store, 1).create()
    sid = w.session_id
    for i in range(6):
        w.append("step", data if i % 2 else {"i": i, "text": "x" * 200})
        w.commit()
    w2 = _log(store, 2).open(sid)
    for i in range(6, 12):
        w2.append("step", data if i % 2 else {"i": i, "text": "x" * 200})
        w2.commit()
    _, seg_vs = _versions(store, _log(store, 2), sid)
    assert set(seg_vs) == {1, 2}  # a mixed chain
    for version in (1, 2):
        entries = _log(store, version).read(sid).entries
        assert [e.data for e in entries[1::2]] == [data] * 6
        for e in entries:
            assert e.hash == hashlib.sha256(
                cbor2.dumps({"seq": e.seq, "prev": e.prev, "kind": e.kind, "ts": e.ts, "data": e.data},
                            canonical=True)).digest()
    # Written again in either format (a merge), entries keep their records and hashes.
    entries = _log(store, 2).read(sid).entries
    for version in (1, 2):
        again = decode_segment(codec.encode_segment(sid, entries, version), _KEY).entries
        assert list(again) == entries
        assert [entry_record(e) for e in again] == [entry_record(e) for e in entries]


def test_a_linked_run_is_checked_where_it_joins_the_chain() -> None:
    from s3log._format.chain import ChainVerifier
    from s3log._format.codec import encode_segment
    from s3log._format.columns import LinkedRun

    entries = build_chain([PendingEntry("k", 1, {"i": i}) for i in range(5)], after_seq=-1, after_hash=None)
    seg = decode_segment(encode_segment("s", entries[2:]), _KEY)
    assert type(seg.entries) is LinkedRun and list(seg.entries) == entries[2:]
    ok = ChainVerifier("s")
    ok.feed("a", entries[:2])
    ok.feed("b", seg.entries)
    assert (ok.next_seq, ok.last_hash) == (5, entries[-1].hash)
    gap = ChainVerifier("s")
    gap.feed("a", entries[:1])
    with pytest.raises(CorruptionError, match="expected seq 1, found 2") as info:
        gap.feed("b", seg.entries)
    assert info.value.key == "b" and info.value.seq == 2
    forked = ChainVerifier("s", start_seq=2, start_hash=entries[0].hash)
    with pytest.raises(CorruptionError, match="prev is") as info:
        forked.feed("b", seg.entries)
    assert info.value.seq == 2


def test_tail_records_that_are_not_linked_are_left_to_the_verifier() -> None:
    entries = build_chain([PendingEntry("k", 1, {"i": i}) for i in range(4)], after_seq=-1, after_hash=None)
    records = [e.raw for e in entries]
    records[1], records[2] = records[2], records[1]
    got = _tail(records)
    assert type(got) is tuple and [e.seq for e in got] == [0, 2, 1, 3]


def test_a_segment_is_written_only_for_a_linked_run() -> None:
    from s3log._format.codec import encode_segment

    entries = build_chain([PendingEntry("k", 1, {"i": i}) for i in range(4)], after_seq=-1, after_hash=None)
    with pytest.raises(ValueError, match="consecutive and linked"):
        encode_segment("s", [entries[0], entries[2]])
    with pytest.raises(ValueError, match="at least one entry"):
        encode_segment("s", [])


@pytest.mark.parametrize(
    ("first", "count", "ts"),
    [(0, 30, 5), (0, 300, 1_700_000_000_000), (250, 10, 2**32 - 3), (65_530, 12, 0), (1_000, 5, 2**40)],
    ids=["seq-0-to-29", "across-24-and-256", "ts-across-2**32", "seq-across-65536", "one-band"],
)
def test_data_cbor_is_each_datas_deterministic_encoding(first: int, count: int, ts: int) -> None:
    prev = None if first == 0 else b"\7" * 32
    kinds = ["k", "tool_call", "ünïcode", "x" * 30]
    pending = [PendingEntry(kinds[i % 4], ts + i, [i, {"t": "y" * (i % 7)}] if i % 3 else None) for i in range(count)]
    entries = build_chain(pending, after_seq=first - 1, after_hash=prev)
    expected = [cbor2.dumps(e.data, canonical=True) for e in entries]
    assert data_cbor_column(entries) == expected
    # Read back from a segment (records rebuilt), and without records (format v1).
    v2 = decode_segment(codec.encode_segment("s", entries, 2), _KEY).entries
    v1 = decode_segment(codec.encode_segment("s", entries, 1), _KEY).entries
    assert data_cbor_column(v2) == data_cbor_column(v1) == expected
    assert data_cbor_column([*v1[:2], *v2[2:]]) == expected


@pytest.mark.parametrize("data", [None, 0, -1, 2**40, 1.5, "x" * 300, {"b": [1, {"z": None}], "a": "é"}, [[]], b"\x00"])
@pytest.mark.parametrize(("seq", "ts"), [(0, 0), (23, 1_800_000_000_000), (2**33, 2**62)])
def test_a_record_spliced_from_the_appended_data_bytes_equals_the_encoded_record(data: Any, seq: int, ts: int) -> None:
    """A commit splices the data bytes encoded at append into the record: the record
    (and so the hash) must be the one encoding the whole map gives."""
    from s3log._format.cbor import dumps
    from s3log._format.entries import make_entry, normalize_data_cbor

    value, encoded = normalize_data_cbor("k", data)
    prev = None if seq == 0 else bytes(range(32))
    spliced = make_entry(seq, prev, "kind.x", ts, value, encoded)
    whole = make_entry(seq, prev, "kind.x", ts, value)
    assert spliced.raw == whole.raw == dumps({"seq": seq, "prev": prev, "kind": "kind.x", "ts": ts, "data": value})
    assert spliced.hash == whole.hash
