"""analytics' Arrow column builders against straightforward references, on random input.

The builders (hash and prev as views of one hex text, dates through the distinct days,
data_json cut from one orjson call, batches cut from gathered chunks) must give the
same values, nulls and batch sizes as building each value on its own.
"""

from __future__ import annotations

import datetime
import itertools
import random
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa

import s3log
from s3log import analytics
from s3log._format.cbor import dumps
from s3log.analytics import columns
from s3log.env import Env

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01
LO, HI = columns._DATE32_MS  # the first ms whose day fits a date32, and the first after


# ----------------------------------------------------------------------- hash and prev


def _ref_hash_columns(hashes: list[bytes], prevs: list[bytes | None]) -> tuple[pa.Array, pa.Array]:
    return (pa.array([h.hex() for h in hashes], pa.string()),
            pa.array([None if p is None else p.hex() for p in prevs], pa.string()))


def _chains(rng: random.Random, n: int, *, odd_lengths: bool = False) -> tuple[list[bytes], list[bytes | None]]:
    """Rows of several sessions as scan gathers them: each prev the hash before it
    (the same object) except where a session starts (None: a root; a hash: a fork, or
    a window that starts after seq 0) or rows were dropped (a filter)."""
    hashes: list[bytes] = []
    prevs: list[bytes | None] = []
    while len(hashes) < n:
        start = rng.choice([None, None, "fork", "old"])
        prev: bytes | None = None
        if start == "fork":
            prev = rng.randbytes(32)
        elif start == "old" and hashes:
            prev = rng.choice(hashes)  # equal to an earlier row's hash, not the one before
        for _ in range(min(n - len(hashes), rng.choice([1, 2, 5, 100]))):
            h = rng.randbytes(32)
            if odd_lengths and rng.random() < 0.01:
                h = rng.randbytes(rng.choice([0, 31, 33]))
            r = rng.random()
            if r < 0.05 and hashes:  # rows dropped before this one
                prev = rng.randbytes(32)
            elif r < 0.1 and prev is not None:  # equal bytes, another object
                prev = bytes(bytearray(prev))
            hashes.append(h)
            prevs.append(prev)
            prev = h
    return hashes, prevs


def _check_hash_columns(hashes: list[bytes], prevs: list[bytes | None]) -> None:
    hashed, prev = columns._hash_columns(hashes, prevs)
    want_hash, want_prev = _ref_hash_columns(hashes, prevs)
    hashed.validate(full=True)
    prev.validate(full=True)
    assert hashed.type == prev.type == pa.string()
    assert hashed.equals(want_hash)
    assert prev.equals(want_prev)
    assert prev.null_count == prevs.count(None)
    # What a consumer does with a batch: slice it, combine it with others.
    if hashes:
        k = len(hashes) // 3
        both = pa.concat_arrays([prev.slice(k), hashed, prev])
        assert both.to_pylist() == [*want_prev.to_pylist()[k:], *want_hash.to_pylist(), *want_prev.to_pylist()]


@pytest.mark.parametrize("seed", range(40))
def test_hash_columns_equal_the_hex_of_each_value(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 7, 64, 100, 257, 4096, 4200])
    _check_hash_columns(*_chains(rng, n))


@pytest.mark.parametrize("seed", range(10))
def test_hashes_and_prevs_of_other_lengths_give_their_hex_too(seed: int) -> None:
    rng = random.Random(1000 + seed)
    hashes, prevs = _chains(rng, 300, odd_lengths=True)
    if seed % 2:  # a prev of another length, the hashes all 32 bytes
        hashes = [h if len(h) == 32 else rng.randbytes(32) for h in hashes]
        prevs[rng.randrange(1, 300)] = b"\x01" * 20
    _check_hash_columns(hashes, prevs)


@pytest.mark.parametrize("seed", range(12))
def test_hash_columns_of_rows_a_filter_thinned(seed: int) -> None:
    # A kinds filter keeps one row in a few: most prevs are not the hash before
    # (some rows a session's first, some after a row kept), on either side of the
    # share where the prevs are laid out as their own text.
    rng = random.Random(2000 + seed)
    hashes, prevs = _chains(rng, rng.choice([10, 300, 4096]))
    keep = rng.choice([0.1, 0.3, 0.7, 0.85, 0.95])
    rows = [i for i in range(len(hashes)) if i == 0 or rng.random() < keep]
    _check_hash_columns([hashes[i] for i in rows], [prevs[i] for i in rows])


@pytest.mark.parametrize("prevs", [
    [None, None, None], [b"\x09" * 32, None, b"\x08" * 32], [None, "h0", "h1"], [b"\x07" * 32, "h0", "h1"],
    [None, "h0", "h0"], [None, "h1", "h0"], [b"\x07" * 31, "h0", "h1"], [None, "h0", b"\x07" * 33],
])
def test_hash_columns_edge_rows(prevs: list[Any]) -> None:
    hashes = [bytes([i + 1]) * 32 for i in range(3)]
    resolved = [hashes[int(p[1])] if isinstance(p, str) else p for p in prevs]
    _check_hash_columns(hashes, resolved)


def test_hash_columns_of_no_rows_and_of_hashes_that_only_sum_to_32_bytes_each() -> None:
    _check_hash_columns([], [])
    # 31 + 33 bytes: the total is two hashes' worth, the rows are not.
    _check_hash_columns([b"\x01" * 31, b"\x02" * 33], [None, b"\x01" * 31])


def test_prev_is_a_view_of_the_hash_text_within_sessions() -> None:
    # Roots and runs of one session each: the prev column needs no text of its own.
    hashes = [bytes([i]) * 32 for i in range(10)]
    prevs: list[bytes | None] = [None, *hashes[:4], None, *hashes[5:9]]
    hashed, prev = columns._hash_columns(hashes, prevs)
    assert prev.buffers()[2].address == hashed.buffers()[2].address
    # A fork's first row names a hash not in the text: written into a copy.
    prevs[5] = b"\xee" * 32
    hashed, prev = columns._hash_columns(hashes, prevs)
    assert prev.buffers()[2].address != hashed.buffers()[2].address
    assert prev[5].as_py() == "ee" * 32 and prev[6].as_py() == hashes[5].hex()


def test_the_views_read_back_the_same_through_ipc_and_parquet() -> None:
    # The hash column's offsets start past the first prev, the prev column's nulls lie
    # over other rows' text: both must survive what consumers do with a batch.
    import io

    import pyarrow.parquet as pq

    hashes, prevs = _chains(random.Random(9), 500)
    hashed, prev = columns._hash_columns(hashes, prevs)
    table = pa.table({"hash": hashed, "prev": prev})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    assert pa.ipc.open_stream(sink.getvalue()).read_all().equals(table)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    assert pq.read_table(io.BytesIO(sink.getvalue())).equals(table)
    want_hash, want_prev = _ref_hash_columns(hashes, prevs)
    assert table.equals(pa.table({"hash": want_hash, "prev": want_prev}))


# ------------------------------------------------------------------------------- dates


def _ref_day(t: int) -> str:
    # Python's date where it has one, else Arrow's text of that day number, made on its
    # own (years before 1 and after 9999).
    day = t // DAY
    try:
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()
    except OverflowError:
        text: str = pa.array([day], pa.int32()).cast(pa.date32()).cast(pa.string())[0].as_py()
        return text


def _ref_dates(tss: list[int]) -> pa.Array:
    return pa.array([_ref_day(t) for t in tss], pa.string())


def _dates(tss: list[int]) -> pa.Array:
    ts = pa.array(tss, pa.int64()).cast(columns._TS)
    return columns._date_column(ts, tss)


@pytest.mark.parametrize("seed", range(20))
def test_date_column_is_the_utc_day_of_each_time(seed: int) -> None:
    rng = random.Random(seed)
    edges = [-DAY - 1, -DAY, -1, 0, 1, DAY - 1, DAY, T0 - 1, T0, 253_402_300_799_999, 253_402_300_800_000,
             -62_135_596_800_001, LO, LO + 1, HI - 1, HI - DAY]
    spans = [(T0 - 3 * DAY, T0 + 3 * DAY), (-5 * DAY, 5 * DAY), (LO, HI - 1)]
    n = rng.choice([1, 2, 13, columns._DAYS_BY_DICT_ROWS - 1, columns._DAYS_BY_DICT_ROWS, 5000])
    lo, hi = rng.choice(spans)
    tss = [rng.choice(edges) if rng.random() < 0.05 else rng.randint(lo, hi) for _ in range(n)]
    got = _dates(tss)
    got.validate(full=True)
    assert got.type == pa.string() and got.null_count == 0
    assert got.equals(_ref_dates(tss))


@pytest.mark.parametrize("rows", [3, columns._DAYS_BY_DICT_ROWS + 1])
@pytest.mark.parametrize("bad", [LO - 1, HI, -(2**63), 2**63 - 1])
def test_a_day_outside_date32_is_refused_as_before(bad: int, rows: int) -> None:
    tss = [T0 + i for i in range(rows)]
    tss[rows // 2] = bad
    with pytest.raises(pa.ArrowInvalid):
        _dates(tss)


def test_date_column_of_no_rows() -> None:
    assert _dates([]).equals(pa.array([], pa.string()))


# ------------------------------------------------------------------------------- json


#: Enough rows for data_json to be made in one orjson call, and a few rows less.
_MANY = columns._JSON_ONE_CALL_ROWS


def _ref_json(values: list[Any]) -> pa.Array:
    return pa.array([columns._json(v) for v in values], pa.string())


def _nested(depth: int) -> Any:
    v: Any = 1
    for _ in range(depth):
        v = [v]
    return v


def _value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth < 3 and r < 0.2:
        return {rng.choice(["a", "b", "é", "\x00", ",\x00,", ""]) + str(i): _value(rng, depth + 1)
                for i in range(rng.randint(0, 4))}
    if depth < 3 and r < 0.3:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([
        None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, -0.0, 1e300, "", "x",
        "lorem ipsum " * rng.randint(0, 9), "\x00", ",\x00,", '"],[', "日本語 🎉", "\\u0000",
    ])


@pytest.mark.parametrize("seed", range(30))
def test_json_array_equals_the_json_of_each_value(seed: int) -> None:
    rng = random.Random(seed)
    values = [_value(rng) for _ in range(rng.choice([1, 2, 50, _MANY - 1, _MANY, 4096]))]
    if seed % 3 == 1:  # one value orjson's plain form refuses: the whole column takes the other path
        values[rng.randrange(len(values))] = rng.choice([{1: "int key"}, b"\x00\xff", 2**70, {"s": {1, 2}}])
    # A typical row's data size picks the way (the same text either way).
    got = columns._json_array(values, rng.choice([0, 100, columns._JSON_ONE_CALL_MAX_BYTES + 1]))
    got.validate(full=True)
    assert got.equals(_ref_json(values))


@pytest.mark.parametrize("rows", [1, _MANY - 1, _MANY, 3 * _MANY + 1])
def test_json_array_edges(rows: int) -> None:
    cases: list[list[Any]] = [[None], [{}], [[]], [""], ["\x00"], [",\x00,"], [{"a": ",\x00,"}, {"b": "\x00"}]]
    for case in cases:
        values = (case * rows)[:rows]
        assert columns._json_array(values).equals(_ref_json(values)), values
    mixed: list[Any] = [None, "a\x00b", {"k": [1, 2]}] * rows
    assert columns._json_array(mixed).to_pylist() == ["null", '"a\\u0000b"', '{"k":[1,2]}'] * rows
    assert columns._json_array([]).equals(pa.array([], pa.string()))


def test_json_array_of_values_nested_to_the_limit() -> None:
    # The deepest value orjson takes alone is one level too deep inside the list the
    # column is made from: then it is made value by value, the same text.
    deepest = next(d for d in range(200, 1000) if _refused(_nested(d + 1)))
    values = [{"a": 1}, _nested(deepest), *["x"] * _MANY]
    assert columns._json_array(values).equals(_ref_json(values))


def test_json_text_that_holds_the_row_separator_is_made_value_by_value() -> None:
    # orjson never writes a NUL byte of its own; a value that brings its own text (a
    # Fragment, written verbatim) can. The cut then finds more pieces than rows, and
    # the column is made value by value instead.
    import orjson

    values: list[Any] = [{"a": i} for i in range(_MANY)]
    values[5] = orjson.Fragment(b'"a",\x00,"b"')
    got = columns._json_array(values)
    # The fragment is text orjson writes verbatim (no data read from CBOR is one); the
    # other rows are the reference's.
    expected = _ref_json(values).to_pylist()
    expected[5] = '"a",\x00,"b"'
    assert got.to_pylist() == expected


def _refused(value: Any) -> bool:
    import orjson

    try:
        orjson.dumps(value)
    except TypeError:
        return True
    return False


# ----------------------------------------------------------------------------- batches


def _chunk(start: int, n: int) -> pa.RecordBatch:
    rows = [{"session": f"s{(start + i) // 7}", "seq": start + i, "ts": T0 + start + i, "kind": "k",
             "hash": "ab" * 32, "prev": None if (start + i) % 7 == 0 else "cd" * 32,
             "parent_session": None, "data_cbor": dumps(start + i), "data_json": str(start + i),
             "date": "2026-01-01"} for i in range(n)]
    return pa.RecordBatch.from_pylist(rows, schema=analytics.SCHEMA)


@pytest.mark.parametrize("seed", range(25))
def test_take_and_rest_cut_exactly_batch_size_rows_then_one_last_batch(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([1, 2, 3, 7, 64, 100, 4096, 10_000])
    cols = columns._Columns()
    got: list[pa.RecordBatch] = []
    total = 0
    for _ in range(rng.randint(0, 8)):
        n = rng.choice([1, 5, 99, 500, 4100])
        cols.chunks.append(_chunk(total, n))
        cols.rows += n
        total += n
        got += cols.take(size)
        assert cols.rows == total - size * len(got) < size
    got += cols.rest()
    assert cols.rows == 0 and not cols.chunks
    sizes = [b.num_rows for b in got]
    assert all(s == size for s in sizes[:-1])
    assert (not got and total == 0) or 0 < sizes[-1] <= size
    for b in got:
        b.validate(full=True)
        assert b.schema == analytics.SCHEMA
    assert pa.Table.from_batches(got, schema=analytics.SCHEMA).equals(
        pa.Table.from_batches([_chunk(0, total)], schema=analytics.SCHEMA))


# ----------------------------------------------------------------------- whole scans


def _store() -> tuple[s3log.MemoryStore, list[str]]:
    """Many short sessions (rows of several gathered into each chunk), forks among them,
    times across midnights, from the epoch to the year 9999."""
    store = s3log.MemoryStore()
    clock = itertools.count(T0, 7)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(3, lambda: next(clock))))
    rng = random.Random(5)
    ids: list[str] = []
    for s in range(120):
        if ids and s % 7 == 3:
            parent = rng.choice(ids)
            at = rng.randrange(log.head(parent).entry_count)
            w = log.open(log.fork(parent, at_seq=at))
            start = at + 1
        else:
            w = log.create()
            start = 0
        base = rng.choice([T0 - DAY // 2, DAY - 3_000_000, 0, 253_402_300_000_000])  # up to 9999-12-31
        for i in range(rng.choice([1, 3, 40, 150])):
            w.append("tool" if i % 3 == 0 else "message", {"s": s, "i": start + i, "t": "x" * (i % 5)},
                     ts=base + i * 600_000)
            if i % 20 == 19:
                w.commit()
        w.commit()
        ids.append(w.session_id)
    return store, ids


def _expected(store: s3log.MemoryStore, keep: Any) -> list[dict[str, Any]]:
    log = s3log.Log(store)
    out = []
    for sid in log.list_session_ids():
        view = log.read(sid)
        for e in view.entries:
            if keep(e):
                out.append({
                    "session": sid, "seq": e.seq, "ts": e.ts, "kind": e.kind, "hash": e.hash.hex(),
                    "prev": None if e.prev is None else e.prev.hex(),
                    "parent_session": view.head.parent.session if view.head.parent else None,
                    "data_cbor": dumps(e.data), "data_json": columns._json(e.data),
                    "date": _ref_day(e.ts),
                })
    return out


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    table = pa.Table.from_batches(batches, schema=analytics.SCHEMA)
    # ts as ms since the epoch, as entries hold it (Python has no datetime after 9999).
    i = table.schema.get_field_index("ts")
    rows: list[dict[str, Any]] = table.set_column(i, "ts", table["ts"].cast(pa.int64())).to_pylist()
    return rows


@pytest.mark.parametrize(("batch_size", "window"), [
    (65_536, None), (1, None), (4096, None), (4097, "kinds"), (333, "time"), (7, "both"),
])
def test_scan_equals_the_entries_rows(batch_size: int, window: str | None) -> None:
    store, _ = _store()
    kinds = ["tool"] if window in ("kinds", "both") else None
    since, until = (T0 - DAY // 2 + 3_000_000, T0) if window in ("time", "both") else (None, None)

    def keep(e: Any) -> bool:
        return ((kinds is None or e.kind in kinds) and (since is None or e.ts >= since)
                and (until is None or e.ts < until))

    batches = list(analytics.scan(store, since=since, until=until, kinds=kinds, batch_size=batch_size,
                                  parallelism=1))
    sizes = [b.num_rows for b in batches]
    assert all(s == batch_size for s in sizes[:-1]) and 0 < sizes[-1] <= batch_size
    for b in batches:
        b.validate(full=True)
        assert b.schema == analytics.SCHEMA
    expected = _expected(store, keep)
    assert len(expected) > 4096 or window is not None  # rows of many sessions in one chunk
    assert _rows(batches) == expected


def test_scan_of_nothing_yields_no_batch() -> None:
    store, _ = _store()
    assert list(analytics.scan(s3log.MemoryStore())) == []
    assert list(analytics.scan(store, kinds=["none such"])) == []


def test_owner_columns_equal_one_value_per_row() -> None:
    """The session and parent columns made from each session's rows (taken from one
    value per session) equal the columns of one value per row."""
    import random

    from s3log.analytics.columns import _owner_columns

    rng = random.Random(6)
    for _ in range(200):
        owners = [(f"s{rng.randrange(5)}", rng.choice([None, None, f"p{rng.randrange(3)}"]), rng.randrange(1, 9))
                  for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.3:
            owners = [(s, None, rows) for s, _, rows in owners]
        n = sum(rows for *_, rows in owners)
        sessions, parents = _owner_columns(owners, n)
        assert sessions.equals(pa.array([s for s, _, rows in owners for _ in range(rows)], pa.string()))
        assert parents.equals(pa.array([p for _, p, rows in owners for _ in range(rows)], pa.string()))
