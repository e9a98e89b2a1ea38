"""Batch analytics: Arrow, Parquet, DuckDB and Dask read back exactly what was written."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import cbor2
import duckdb as duckdb_module
import pyarrow.dataset as ds
import pytest

import s3log
from s3log import analytics
from s3log.testing.plugin import LocalS3

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _populate(log: s3log.Log, sessions: int, entries: int) -> dict[str, list[Any]]:
    written: dict[str, list[Any]] = {}
    for s in range(sessions):
        w = log.create(meta={"n": s})
        for i in range(entries):
            kind = "tool_call" if i % 3 == 0 else "message"
            w.append(kind, {"s": s, "i": i, "ok": i % 5 != 0}, ts=T0 + (i % 3) * DAY + s)
            if i % 7 == 6:
                w.commit()
        w.commit()
        written[w.session_id] = [(kind, d) for kind, d in ((e.kind, e.data) for e in log.read(w.session_id).entries)]
    return written


@pytest.fixture
def mem() -> tuple[s3log.MemoryStore, dict[str, list[Any]]]:
    store = s3log.MemoryStore()
    return store, _populate(s3log.Log(store), 7, 20)


def test_scan_returns_exactly_what_was_written(mem: tuple[s3log.MemoryStore, dict[str, list[Any]]]) -> None:
    store, written = mem
    table = analytics.to_arrow(store)
    assert table.schema == analytics.SCHEMA
    assert table.num_rows == sum(len(v) for v in written.values())
    rows = table.to_pylist()
    got: dict[str, list[Any]] = {}
    for r in sorted(rows, key=lambda r: (r["session"], r["seq"])):
        assert cbor2.loads(r["data_cbor"]) == json.loads(r["data_json"])
        got.setdefault(r["session"], []).append((r["kind"], cbor2.loads(r["data_cbor"])))
    assert got == written


def test_scan_filters_by_time_kind_and_session(mem: tuple[s3log.MemoryStore, dict[str, list[Any]]]) -> None:
    store, written = mem
    sid = sorted(written)[0]
    t = analytics.to_arrow(store, sessions=[sid], kinds=["tool_call"])
    assert set(t.column("session").to_pylist()) == {sid}
    assert set(t.column("kind").to_pylist()) == {"tool_call"}
    assert t.num_rows == sum(1 for k, _ in written[sid] if k == "tool_call")
    day2 = analytics.to_arrow(store, since=T0 + DAY, until=T0 + 2 * DAY)
    assert day2.num_rows == sum(1 for v in written.values() for _, d in v if d["i"] % 3 == 1)


def test_sessions_outside_the_window_are_skipped_without_reading_segments() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    old = log.create()
    old.append("big", "x" * 20000)
    old.commit()
    store.requests.reset()
    far_future = 4_000_000_000_000
    assert analytics.to_arrow(store, [old.session_id], since=far_future).num_rows == 0
    assert store.requests["GET"] == 1  # the head only
    store.requests.reset()
    # Without a session list, the activity index says no session was committed to since.
    assert analytics.to_arrow(store, since=far_future).num_rows == 0
    assert store.requests.snapshot() == {"GET": 0, "PUT": 0, "LIST": 2, "DELETE": 0}


def test_memory_stays_bounded_on_a_prefix_larger_than_the_batch(
    mem: tuple[s3log.MemoryStore, dict[str, list[Any]]],
) -> None:
    store, written = mem
    batches = analytics.scan(store, batch_size=16, parallelism=2)
    first = next(batches)
    assert first.num_rows == 16
    # Only the first window of sessions was read before the first batch came out.
    assert store.requests["GET"] < len(written) * 2
    sizes = [first.num_rows, *(b.num_rows for b in batches)]
    assert all(n <= 16 for n in sizes) and sum(sizes) == sum(len(v) for v in written.values())


def test_corrupt_session_is_skipped_with_a_warning_or_fails_when_strict() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    good = log.create()
    good.append("k", "fine")
    good.commit()
    bad = log.create()
    bad.append("k", "original text")
    bad.commit()
    key = f"s3log/sessions/{bad.session_id}/head"
    store.put_raw(key, store.get(key).body.replace(b"original text", b"tampered text"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = analytics.to_arrow(store)
    assert t.column("session").to_pylist() == [good.session_id]
    assert any(bad.session_id in str(w.message) and "seq 0" in str(w.message) for w in caught)
    with pytest.raises(s3log.CorruptionError):
        analytics.to_arrow(store, strict=True)


def test_parquet_partitions_by_date_and_pruning_reads_only_one_day(
    mem: tuple[s3log.MemoryStore, dict[str, list[Any]]], tmp_path: Path,
) -> None:
    store, written = mem
    rows = analytics.to_parquet(store, str(tmp_path / "out"))
    assert rows == sum(len(v) for v in written.values())
    days = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert days == ["_sessions.parquet", "date=2026-01-01", "date=2026-01-02", "date=2026-01-03"]
    dataset = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive")
    day = ds.field("date") == "2026-01-02"
    files = [f.path for f in dataset.get_fragments(filter=day)]
    assert files and all("date=2026-01-02" in f for f in files)
    assert len(files) < len(list(dataset.get_fragments()))
    assert dataset.filter(day).count_rows() == sum(1 for v in written.values() for _, d in v if d["i"] % 3 == 1)


def test_parquet_to_s3_and_duckdb_view(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    written = _populate(s3log.Log(store), 3, 9)
    rows = analytics.to_parquet(store, f"s3://{bucket}/export")
    assert rows == 27
    keys = [o["Key"] for o in s3log_server.client().list_objects_v2(Bucket=bucket, Prefix="export/")["Contents"]]
    assert any("/date=2026-01-01/" in k for k in keys)
    con = duckdb_module.connect()
    analytics.duckdb(con, store)
    n, failed = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE json_extract(data_json, '$.ok') = 'false') FROM entries"
    ).fetchone()
    assert n == 27
    assert failed == sum(1 for v in written.values() for _, d in v if not d["ok"])
