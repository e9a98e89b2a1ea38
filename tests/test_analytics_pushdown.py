"""Lazy DuckDB views: filters cut requests (exact counts), sessions table, date, progress, export modes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest

import s3log
from s3log import analytics

DAY = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PAD = "x" * 3000  # big enough that every commit after the first few moves entries to a segment


def _populate(store: s3log.MemoryStore) -> dict[str, Any]:
    """3 sessions, each 3 days x 4 entries (2 kinds), with segments; labels per tenant."""
    # A small tail bound, so these few entries make segments (whose reads are counted).
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=8 * 1024))
    out: dict[str, Any] = {}
    for s in range(3):
        w = log.create(meta={"labels": {"tenant": f"t{s % 2}", "model": "m1"}, "agent": "a"})
        for day in range(3):
            for i in range(4):
                w.append("tool_call" if i % 2 else "message", {"s": s, "i": i, "pad": PAD}, ts=T0 + day * DAY + i)
            w.commit()
        out[w.session_id] = log.head(w.session_id)
    log.close()
    return out


@pytest.fixture
def populated() -> tuple[s3log.MemoryStore, dict[str, Any]]:
    store = s3log.MemoryStore()
    heads = _populate(store)
    assert all(h.segments for h in heads.values())  # the counts below include segment reads
    store.requests.reset()
    return store, heads


def _reads(heads: dict[str, Any], sids: list[str]) -> int:
    return sum(1 + len(heads[s].segments) for s in sids)


def test_registering_reads_nothing_and_every_query_streams_a_fresh_scan(
    populated: tuple[s3log.MemoryStore, dict[str, Any]],
) -> None:
    store, heads = populated
    con = analytics.duckdb(duckdb.connect(), store)
    assert store.requests.total == 0  # lazy: nothing is read until a query runs
    assert con.execute("SELECT count(*) FROM entries").fetchone() == (36,)
    assert store.requests.snapshot() == {"GET": _reads(heads, list(heads)), "PUT": 0, "LIST": 1, "DELETE": 0}
    # A session written after registration is seen by the next query: nothing was cached.
    w = s3log.Log(store).create()
    w.append("late", {})
    w.commit()
    assert con.execute("SELECT count(*) FROM entries").fetchone() == (37,)


def test_session_filter_reads_only_those_heads_and_segments(
    populated: tuple[s3log.MemoryStore, dict[str, Any]],
) -> None:
    store, heads = populated
    sid = sorted(heads)[1]
    con = analytics.duckdb(duckdb.connect(), store, sessions=[sid], sessions_view=None)
    assert con.execute("SELECT count(*), min(session), max(session) FROM entries").fetchone() == (12, sid, sid)
    # No LIST, one head and its segments: the other sessions are never touched.
    assert store.requests.snapshot() == {"GET": 1 + len(heads[sid].segments), "PUT": 0, "LIST": 0, "DELETE": 0}


def test_time_window_outside_every_session_reads_heads_only(
    populated: tuple[s3log.MemoryStore, dict[str, Any]],
) -> None:
    store, heads = populated
    con = analytics.duckdb(duckdb.connect(), store, since="2027-01-01", sessions_view=None)
    assert con.execute("SELECT count(*) FROM entries").fetchone() == (0,)
    # The activity index (s3log._protocol.retention) lists no session committed to since then.
    assert store.requests.snapshot() == {"GET": 0, "PUT": 0, "LIST": 2, "DELETE": 0}
    store.requests.reset()
    con = analytics.duckdb(duckdb.connect(), store, sessions=sorted(heads), since="2027-01-01", sessions_view=None)
    assert con.execute("SELECT count(*) FROM entries").fetchone() == (0,)
    assert store.requests.snapshot() == {"GET": len(heads), "PUT": 0, "LIST": 0, "DELETE": 0}  # heads only


def test_time_window_and_kind_cut_rows_with_dates_in_the_output(
    populated: tuple[s3log.MemoryStore, dict[str, Any]],
) -> None:
    store, _ = populated
    con = analytics.duckdb(duckdb.connect(), store, since=T0 + DAY, until=T0 + 2 * DAY, kinds=["tool_call"])
    rows = con.execute("SELECT DISTINCT date, kind FROM entries").fetchall()
    assert rows == [("2026-01-02", "tool_call")]
    assert con.execute("SELECT count(*) FROM entries").fetchone() == (6,)


def test_sessions_view_has_labels_meta_and_joins_on_session(
    populated: tuple[s3log.MemoryStore, dict[str, Any]],
) -> None:
    store, heads = populated
    con = analytics.duckdb(duckdb.connect(), store)
    got = con.execute(
        "SELECT s.labels['tenant'] AS tenant, json_extract_string(s.meta_json, '$.agent') AS agent, count(*) "
        "FROM entries e JOIN sessions s USING (session) GROUP BY ALL ORDER BY tenant"
    ).fetchall()
    assert got == [("t0", "a", 24), ("t1", "a", 12)]
    one = analytics.sessions_table(store, [sorted(heads)[0]]).to_pylist()[0]
    head = heads[sorted(heads)[0]]
    assert one["entries"] == 12 and one["parent"] is None
    assert int(one["ts_min"].timestamp() * 1000) == head.ts_min == T0
    assert int(one["created_at"].timestamp() * 1000) == head.created_at
    assert dict(one["labels"]) == {"tenant": "t0", "model": "m1"}


def test_pandas_ts_compares_with_a_string_and_date_is_a_column(
    populated: tuple[s3log.MemoryStore, dict[str, Any]],
) -> None:
    store, _ = populated
    df = analytics.to_arrow(store).to_pandas()
    assert str(df.ts.dtype) == "datetime64[ms, UTC]"
    assert len(df[df.ts > "2026-01-02"]) == 3 * 3 + 3 * 4  # day 2 after midnight (3 a session), and day 3
    assert sorted(df.date.unique()) == ["2026-01-01", "2026-01-02", "2026-01-03"]


def test_progress_counts_sessions_and_entries(populated: tuple[s3log.MemoryStore, dict[str, Any]]) -> None:
    store, _ = populated
    seen: list[analytics.ScanProgress] = []
    total = sum(b.num_rows for b in analytics.scan(store, progress=seen.append, kinds=["message"]))
    assert [p.sessions_done for p in seen] == [1, 2, 3]
    assert {p.sessions_total for p in seen} == {3}
    assert seen[-1].entries == total == 18
    assert seen[-1].entries_per_s > 0


def test_bad_filters_fail_before_any_request(populated: tuple[s3log.MemoryStore, dict[str, Any]]) -> None:
    store, _ = populated
    with pytest.raises(s3log.InvalidSessionIdError):
        analytics.scan(store, sessions=["../etc"])
    with pytest.raises(ValueError, match="not one string"):
        analytics.scan(store, kinds="message")
    with pytest.raises(ValueError, match="ISO"):
        analytics.scan(store, since="yesterday-ish")
    assert store.requests.total == 0


def test_export_modes_error_overwrite_append(populated: tuple[s3log.MemoryStore, dict[str, Any]],
                                             tmp_path: Path) -> None:
    store, _ = populated
    out = tmp_path / "out"
    assert analytics.to_parquet(store, str(out), until=T0 + DAY) == 12  # only 2026-01-01
    with pytest.raises(analytics.OutputExistsError, match="not empty"):
        analytics.to_parquet(store, str(out))
    # overwrite: a re-export with a different window leaves no stale partition behind.
    assert analytics.to_parquet(store, str(out), since=T0 + 2 * DAY, mode="overwrite") == 12
    assert sorted(p.name for p in out.iterdir()) == ["_sessions.parquet", "date=2026-01-03"]
    # append: new files beside the old ones.
    assert analytics.to_parquet(store, str(out), since=T0 + 2 * DAY, mode="append") == 12
    assert ds.dataset(out, format="parquet", partitioning="hive").count_rows() == 24
    with pytest.raises(ValueError, match="unknown mode"):
        analytics.to_parquet(store, str(tmp_path / "other"), mode="replace")  # type: ignore[arg-type]


def test_duckdb_over_an_export_filters_by_directory(populated: tuple[s3log.MemoryStore, dict[str, Any]],
                                                    tmp_path: Path) -> None:
    store, _ = populated
    root = tmp_path / "x"
    analytics.to_parquet(store, str(root))
    # Day 1's files are made unreadable: a query whose window excludes them never opens them.
    for f in (root / "date=2026-01-01").iterdir():
        f.write_bytes(b"not parquet")
    con = analytics.duckdb_parquet(duckdb.connect(), str(root), since="2026-01-02", until="2026-01-03",
                                   kinds=["message"])
    got = con.execute("SELECT count(*), min(date), max(date) FROM entries").fetchone()
    assert got == (6, "2026-01-02", "2026-01-02")
    assert con.execute("SELECT count(*) FROM sessions").fetchone() == (3,)
    with pytest.raises(duckdb.Error):  # the same export without the window does open them
        analytics.duckdb_parquet(duckdb.connect(), str(root)).execute("SELECT count(*) FROM entries").fetchone()
    live = analytics.duckdb(duckdb.connect(), store)
    cols_live = [d[0] for d in live.execute("SELECT * FROM entries").description]
    cols_file = [d[0] for d in con.execute("SELECT * FROM entries").description]
    assert cols_live == cols_file == analytics.SCHEMA.names
