"""analytics.scan from v2 segments' verified columns: same rows as the entries, same refusals."""

from __future__ import annotations

import datetime
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import cbor2
import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa

import s3log
from s3log import analytics
from s3log._format.cbor import _seq_parts, _uint_heads, dumps
from s3log._format.codec import decode_segment, decode_segment_columns
from s3log._format.columns import LinkedRun, RunColumns
from s3log._format.entries import data_cbor_column
from s3log.analytics import columns
from s3log.env import Env
from s3log.errors import CorruptionError

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01


def _env() -> Env:
    clock = itertools.count(T0, 7)
    return Env.deterministic(7, lambda: next(clock))


def _log(store: s3log.MemoryStore, version: int, env: Env) -> s3log.Log:
    return s3log.Log(store, config=s3log.LogConfig(format_version=version, env=env,
                                                   tail_per_commit=0, tail_max_bytes=600))


def _data(i: int) -> Any:
    if i % 11 == 0:  # values orjson's plain form does not take, and a nested one
        return {"i": i, 3: "int key", "b": b"\x00\xff", "big": 2**70, "l": [1.5, None, True]}
    return {"i": i, "text": "x" * (i % 37)}


def _fill(w: s3log.Writer, start: int, n: int, *, every: int, ts: Callable[[int], int]) -> None:
    for i in range(start, start + n):
        w.append("tool" if i % 3 == 0 else "message", _data(i), ts=ts(i))
        if i % every == every - 1:
            w.commit()
    w.commit()


def _mixed_store() -> tuple[s3log.MemoryStore, list[str]]:
    """Sessions of v1 only, v2 only, v1 then v2 in one chain, a fork, one entry;
    times near the epoch, across midnights and far apart."""
    store = s3log.MemoryStore()
    env = _env()
    v1, v2 = _log(store, 1, env), _log(store, 2, env)
    ids: list[str] = []
    w = v1.create()
    _fill(w, 0, 70, every=9, ts=lambda i: DAY - 5_000 + i * 100)  # near the epoch, across a midnight
    ids.append(w.session_id)
    w = v2.create()
    _fill(w, 0, 300, every=25, ts=lambda i: T0 + i * 3_600_000)  # seqs across 24 and 256
    ids.append(w.session_id)
    mixed = v1.create()
    _fill(mixed, 0, 40, every=10, ts=lambda i: T0 + i)
    w = v2.open(mixed.session_id)
    _fill(w, 40, 12, every=4, ts=lambda i: T0 + DAY - 45 + i * 10)  # v2 segments beside the v1 one
    ids.append(mixed.session_id)
    child = v2.fork(ids[1], at_seq=150)
    w = v2.open(child)
    _fill(w, 151, 60, every=20, ts=lambda i: T0 + 2 * DAY + i)
    ids.append(child)
    w = v2.create()
    w.append("one", None, ts=T0)
    w.commit()
    ids.append(w.session_id)
    return store, ids


def _rows_from_entries(store: s3log.MemoryStore, ids: list[str]) -> list[dict[str, Any]]:
    """The rows scan gives, built one by one from what Log.read returns."""
    log = s3log.Log(store)
    out = []
    listed = log.list_session_ids()  # scan reads sessions in the order they are listed
    assert sorted(listed) == sorted(ids)
    for sid in listed:
        view = log.read(sid)
        for e in view.entries:
            out.append({
                "session": sid, "seq": e.seq, "ts": e.ts, "kind": e.kind, "hash": e.hash.hex(),
                "prev": e.prev.hex() if e.prev is not None else None,
                "parent_session": view.head.parent.session if view.head.parent else None,
                "data_cbor": dumps(e.data), "data_json": columns._json(e.data),
                "date": _day(e.ts),
            })
    return out


def _day(ts: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=ts // DAY)).isoformat()


def _table_rows(table: pa.Table) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    for r in rows:  # ts back to ms since the epoch, as entries hold it
        r["ts"] = (r["ts"] - epoch) // datetime.timedelta(milliseconds=1)
    return rows


@pytest.mark.parametrize("batch_size", [65_536, 37])
def test_scan_of_mixed_sessions_equals_the_entries_log_read_returns(batch_size: int) -> None:
    store, ids = _mixed_store()
    log = s3log.Log(store)
    # The store holds what this test is about: v1 and v2 segments, and a chain of both.
    versions = {sid: {cbor2.loads(store.get(k).body)["v"] for k in log.head(sid).segments} for sid in ids}
    assert versions[ids[0]] == {1} and versions[ids[1]] == {2} and versions[ids[2]] == {1, 2}
    batches = list(analytics.scan(store, batch_size=batch_size, parallelism=2))
    assert all(b.schema == analytics.SCHEMA for b in batches)
    sizes = [b.num_rows for b in batches]
    assert all(n == batch_size for n in sizes[:-1]) and 0 < sizes[-1] <= batch_size
    for b in batches:
        b.validate(full=True)
    table = pa.Table.from_batches(batches, schema=analytics.SCHEMA)
    assert _table_rows(table) == _rows_from_entries(store, ids)


def test_filters_keep_the_rows_of_the_entries_they_select() -> None:
    store, ids = _mixed_store()
    expected = [r for r in _rows_from_entries(store, ids)
                if r["kind"] == "tool" and T0 + 10 * 3_600_000 <= r["ts"] < T0 + DAY + 30]
    listed = s3log.Log(store).list_session_ids()
    table = analytics.to_arrow(store, listed, since=T0 + 10 * 3_600_000, until=T0 + DAY + 30, kinds=["tool"],
                               batch_size=5)
    assert expected and _table_rows(table) == expected
    for col in table.columns:
        for chunk in col.chunks:
            chunk.validate(full=True)


def test_segment_columns_describe_the_entries_decode_segment_makes() -> None:
    store, ids = _mixed_store()
    log = s3log.Log(store)
    for sid in ids:
        for key in log.head(sid).segments:
            body = store.get(key).body
            segment = decode_segment(body, key)
            session, run = decode_segment_columns(body, key)
            assert session == segment.session == sid
            if cbor2.loads(body)["v"] == 1:
                assert run == segment.entries
                continue
            entries = segment.entries
            assert type(entries) is LinkedRun and isinstance(run, RunColumns)
            assert run.seq == entries[0].seq and run.prev == entries[0].prev
            assert run.ts == [e.ts for e in entries] and run.kinds == [e.kind for e in entries]
            assert run.hashes == [e.hash for e in entries] and run.values == [e.data for e in entries]
            assert run.data == [dumps(e.data) for e in entries] == data_cbor_column(entries)


def test_segment_columns_are_refused_as_the_entries_are() -> None:
    store, ids = _mixed_store()
    key, _ = _segment_with(store, ids[1], _flip_data_byte)
    body = store.get(key).body
    with pytest.raises(CorruptionError) as entries_err:
        decode_segment(body, key)
    with pytest.raises(CorruptionError) as columns_err:
        decode_segment_columns(body, key)
    assert str(columns_err.value) == str(entries_err.value)


def _segment_with(store: s3log.MemoryStore, sid: str, change: Callable[[dict[str, Any]], int]) -> tuple[str, int]:
    """Rewrite a v2 segment of ``sid`` in place through ``change`` (returns the changed index)."""
    log = s3log.Log(store)
    key = next(k for k in log.head(sid).segments if cbor2.loads(store.get(k).body)["v"] == 2)
    obj = cbor2.loads(store.get(key).body)
    i = change(obj)
    store.put_raw(key, dumps(obj))
    return key, obj["seq"] + i


def _flip_data_byte(obj: dict[str, Any]) -> int:
    d = obj["data"][1]
    obj["data"][1] = d[:-1] + bytes([d[-1] ^ 1])
    return 1


def _shift_ts(obj: dict[str, Any]) -> int:
    obj["ts"][3] += 1
    return 3


def _rename_kind(obj: dict[str, Any]) -> int:
    obj["kinds"][2] = "tool" if obj["kinds"][2] != "tool" else "message"
    return 2


@pytest.mark.parametrize("change", [_flip_data_byte, _shift_ts, _rename_kind], ids=["data", "ts", "kind"])
def test_a_tampered_v2_segment_is_refused_naming_key_and_seq(change: Callable[[dict[str, Any]], int]) -> None:
    store, ids = _mixed_store()
    bad = ids[2]  # the v1-then-v2 chain
    key, seq = _segment_with(store, bad, change)
    with pytest.raises(CorruptionError) as read_err:
        s3log.Log(store).read(bad)
    with pytest.raises(CorruptionError) as scan_err:
        analytics.to_arrow(store, strict=True)
    assert scan_err.value.key == key and scan_err.value.seq == seq
    assert str(scan_err.value) == str(read_err.value) and "record hashes to" in str(scan_err.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = analytics.to_arrow(store)
    assert bad not in set(table.column("session").to_pylist())
    assert set(table.column("session").to_pylist()) == set(ids) - {bad}
    assert [str(w.message) for w in caught] == [f"skipping session {bad}: {read_err.value}"]


def _twins() -> tuple[s3log.MemoryStore, s3log.Log, str, str]:
    """Two sessions of the same shape (segments from seq 0 and 20, a tail from 25) whose
    entries differ (other times): each object of one verifies alone, but not in the other."""
    store = s3log.MemoryStore()
    log = _log(store, 2, _env())
    a, b = log.create(), log.create()
    _fill(a, 0, 30, every=5, ts=lambda i: T0 + i)
    _fill(b, 0, 30, every=5, ts=lambda i: T0 + 1 + i)
    for sid in (a.session_id, b.session_id):
        head = log.head(sid)
        assert [k.rsplit("/", 1)[1][:12] for k in head.segments] == ["000000000000", "000000000020"]
        assert head.tail[0].seq == 25
    return store, log, a.session_id, b.session_id


def _refused_alike(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> CorruptionError:
    with pytest.raises(CorruptionError) as read_err:
        log.read(sid)
    with pytest.raises(CorruptionError) as scan_err:
        analytics.to_arrow(store, [sid], strict=True)
    assert str(scan_err.value) == str(read_err.value)
    return scan_err.value


def test_a_broken_join_between_segment_and_tail_is_refused() -> None:
    store, log, a, b = _twins()
    head_key = log.layout.head(a)
    head, twin = cbor2.loads(store.get(head_key).body), cbor2.loads(store.get(log.layout.head(b)).body)
    head["tail"], head["tail_hashes"] = twin["tail"], twin["tail_hashes"]  # b's tail (it verifies alone) in a's head
    store.put_raw(head_key, dumps(head))
    err = _refused_alike(store, log, a)
    last_segment = cbor2.loads(store.get(log.head(a).segments[-1]).body)
    assert err.key == head_key and err.seq == 25
    assert err.reason.startswith("prev is ") and err.reason.endswith(f"expected {last_segment['hashes'][-1].hex()}")


def test_a_broken_join_between_two_segments_is_refused() -> None:
    store, log, a, b = _twins()
    key = log.head(a).segments[1]
    swapped = cbor2.loads(store.get(log.head(b).segments[1]).body)
    swapped["session"] = a
    store.put_raw(key, dumps(swapped))  # b's second segment under a's key
    err = _refused_alike(store, log, a)
    first = cbor2.loads(store.get(log.head(a).segments[0]).body)
    assert err.key == key and err.seq == 20
    assert err.reason.startswith("prev is ") and err.reason.endswith(f"expected {first['hashes'][-1].hex()}")


def test_seq_and_int_encodings_equal_cbor_across_every_length_boundary() -> None:
    for s0, n in [(0, 1), (0, 800), (20, 10), (23, 2), (250, 10), (65_530, 20), (2**32 - 3, 6),
                  (2**64 - 2, 4), (2**64 + 5, 3)]:
        head, rest = _seq_parts(s0, n)
        assert [head + r for r in rest] == [dumps(v) for v in range(s0, s0 + n)], (s0, n)
    for values in [[0, 23], [24, 255], [0, 24], [256, 65_535], [2**40, 2**63 - 1], [-1, 5], [-5, -1],
                   [2**64, 2**65], [T0]]:
        assert _uint_heads(values, min(values), max(values)) == [dumps(v) for v in values]


def test_hash_columns_equal_the_hex_of_each_value() -> None:
    hashes = [bytes([i]) * 32 for i in range(1, 6)]
    for prevs in ([None, *hashes[:-1]], [b"\x09" * 32, *hashes[:-1]], [None, *hashes[1:]],
                  [None, None, *hashes[2:]]):
        hashed, prev = columns._hash_columns(hashes, prevs)
        hashed.validate(full=True)
        prev.validate(full=True)
        assert hashed.to_pylist() == [h.hex() for h in hashes]
        assert prev.to_pylist() == [p.hex() if p else None for p in prevs]
        assert prev.null_count == prevs.count(None)
        # What a consumer does with a batch: slice it, combine it with others.
        both = pa.concat_arrays([prev.slice(1), prev])
        assert both.to_pylist() == [p.hex() if p else None for p in [*prevs[1:], *prevs]]


def test_date_column_floors_to_the_utc_day() -> None:
    tss = [-DAY - 1, -DAY, -1, 0, DAY - 1, DAY, T0 - 1, T0, 253_402_300_799_999]  # up to 9999-12-31
    ts = pa.array(tss, pa.int64()).cast(columns._TS)
    assert columns._date_column(ts, tss).to_pylist() == [_day(t) for t in tss]


def test_a_segment_of_another_session_is_refused() -> None:
    store, log, a, b = _twins()
    key = log.head(a).segments[1]
    store.put_raw(key, store.get(log.head(b).segments[1]).body)  # b's own segment, under a's key
    err = _refused_alike(store, log, a)
    assert err.key == key and err.reason == f"segment belongs to session {b}, expected {a}"


def test_a_missing_segment_is_refused_as_log_read_refuses_it() -> None:
    store, log, a, _ = _twins()
    key = log.head(a).segments[0]
    store.delete(key)
    err = _refused_alike(store, log, a)
    assert err.key == key and "missing" in err.reason


def test_a_fork_whose_head_names_another_origin_is_refused() -> None:
    store, ids = _mixed_store()
    log = s3log.Log(store)
    child = ids[3]
    first = log.head(child).segments[0]
    assert cbor2.loads(store.get(first).body)["v"] == 2  # the fork entry is read from columns
    head_key = log.layout.head(child)
    head = cbor2.loads(store.get(head_key).body)
    head["parent"]["reason"] = "not what the fork entry says"
    store.put_raw(head_key, dumps(head))
    err = _refused_alike(store, log, child)
    assert err.key == head_key and err.seq == 0 and "parent differs" in err.reason


def test_a_head_naming_another_last_entry_is_refused() -> None:
    store, log, a, _ = _twins()
    head_key = log.layout.head(a)
    head = cbor2.loads(store.get(head_key).body)
    head["hash"] = bytes(32)
    store.put_raw(head_key, dumps(head))
    err = _refused_alike(store, log, a)
    assert err.key == head_key and err.reason.startswith("head names seq 29 hash 0000")


def test_parallelism_one_reads_in_the_calling_thread_and_stops_when_closed() -> None:
    """``parallelism=1`` reads one session at a time in the caller's thread (no thread
    to hand each session over from), in order; closing the scan reads nothing more."""
    import threading

    from s3log import analytics

    class Recording(s3log.MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.threads: set[str] = set()
            self.heads_read = 0

        def get(self, key: str) -> Any:
            self.threads.add(threading.current_thread().name)
            self.heads_read += key.endswith("/head")
            return super().get(key)

    store = Recording()
    log = s3log.Log(store)
    sids = []
    for s in range(6):
        w = log.create()
        for i in range(3):
            w.append("k", {"s": s, "i": i})
        w.commit()
        sids.append(w.session_id)
    store.threads.clear()
    rows = [b for b in analytics.scan(store, sids, parallelism=1, batch_size=2)]
    assert sum(b.num_rows for b in rows) == 18 and store.threads == {threading.current_thread().name}
    got = [s for b in rows for s in b.column("session").to_pylist()]
    assert got == [s for s in sids for _ in range(3)]  # in order
    store.heads_read = 0
    scan = analytics.scan(store, sids, parallelism=1, batch_size=3)
    next(scan)
    scan.close()
    assert store.heads_read == 1  # the first session's 3 rows made a batch; no other head was read
