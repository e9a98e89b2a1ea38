"""Analytics: arguments checked before an export is deleted, sessions with times out of
range skipped, data_json defined without orjson, filters on the sessions views."""

from __future__ import annotations

import base64
import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

import duckdb
import pyarrow as pa
from typer.testing import CliRunner

import s3log
import s3log.codec as codec
from s3log import analytics
from s3log.cli import export as export_cli
from s3log.cli.app import app
from s3log.config import LogConfig
from s3log.env import Env
from tests.cli_env import log_of

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000
runner = CliRunner()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _store_with(*tss: int) -> tuple[s3log.MemoryStore, list[str]]:
    """One session per ts (one entry each)."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    ids = []
    for i, ts in enumerate(tss):
        w = log.create(meta={"labels": {"n": str(i)}})
        w.append("k", {"i": i}, ts=ts)
        w.commit()
        ids.append(w.session_id)
    return store, ids


# ------------------------------------------------------ 1. overwrite deletes nothing on bad input


@pytest.mark.parametrize("bad", [
    {"batch_size": 0}, {"sessions": ["bad id!"]}, {"kinds": "k"}, {"since": "garbage"}, {"bogus": 1},
    {"parallelism": 0}, {"until": float("nan")}, {"prefix": "../x"},
])
def test_to_parquet_overwrite_checks_every_argument_before_deleting(tmp_path: Path, bad: dict[str, Any]) -> None:
    store, _ = _store_with(T0)
    out = tmp_path / "export"
    assert analytics.to_parquet(store, str(out)) == 1
    before = _files(out)
    with pytest.raises(s3log.S3LogError):
        analytics.to_parquet(store, str(out), mode="overwrite", **bad)
    assert _files(out) == before


def test_to_parquet_overwrite_keeps_the_export_when_the_store_fails(tmp_path: Path) -> None:
    store, _ = _store_with(T0)
    out = tmp_path / "export"
    analytics.to_parquet(store, str(out))
    before = _files(out)

    class Gone(s3log.MemoryStore):
        def list(self, *args: Any, **kwargs: Any) -> Any:
            raise s3log.StoreError("no such bucket", key="s3log/", code="NoSuchBucket", status=404)

    with pytest.raises(s3log.StoreError):
        analytics.to_parquet(Gone(), str(out), mode="overwrite")
    assert _files(out) == before


def _invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, " ".join(result.output.split())


def _populate(env: dict[str, str]) -> str:
    log = log_of(env)
    w = log.create()
    w.append("k", {"a": 1}, ts=T0)
    w.commit()
    log.close()
    return w.session_id


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_cli_export_overwrite_deletes_nothing_on_a_bad_option_or_bucket(
    env: dict[str, str], tmp_path: Path, fmt: str,
) -> None:
    _populate(env)
    out = tmp_path / fmt
    code, text = _invoke(env, "export", "--format", fmt, "--out", str(out), "-q")
    assert code == 0, text
    before = _files(out)
    assert before
    code, text = _invoke(env, "export", "--format", fmt, "--out", str(out), "--mode", "overwrite",
                         "--session", "bad id!")
    assert code == 1 and "bad id!" in text and "Traceback" not in text
    assert _files(out) == before
    missing = {**env, "S3LOG_BUCKET": "no-such-bucket-s12"}
    code, text = _invoke(missing, "export", "--format", fmt, "--out", str(out), "--mode", "overwrite")
    assert code == 1 and "no-such-bucket-s12" in text
    assert _files(out) == before


# ------------------------------------------------------------ 2. ts out of range: skipped


@pytest.mark.parametrize("huge", [10**17, 2**62, 2**63 - 1, 9_223_372_036_854_776])  # the last: TS_RANGE[1] + 1
def test_a_session_with_a_ts_out_of_range_is_skipped_not_fatal(huge: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stored as a build before session 13 took it (append now refuses past TS_RANGE).
    monkeypatch.setattr(codec, "MAX_TS", 2**63 - 1)
    store, (good, bad) = _store_with(T0, huge)
    with pytest.warns(analytics.CorruptSessionWarning, match=bad):
        table = analytics.to_arrow(store)
    assert table.column("session").to_pylist() == [good]
    with pytest.raises(s3log.CorruptionError) as info:
        analytics.to_arrow(store, strict=True)
    assert bad in info.value.key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", analytics.CorruptSessionWarning)
        con = analytics.duckdb(duckdb.connect(), store)
        assert con.sql("SELECT session, ts FROM entries").fetchall()[0][0] == good
        assert [r[0] for r in con.sql("SELECT session FROM sessions").fetchall()] == [good]


def test_the_last_ts_of_the_range_is_read_and_queried() -> None:
    last = analytics.TS_RANGE[1]
    store, _ = _store_with(last)
    table = analytics.to_arrow(store, strict=True)
    assert table.column("ts").cast(pa.int64()).to_pylist() == [last]
    con = analytics.duckdb(duckdb.connect(), store, strict=True)
    assert con.sql("SELECT count(*), max(epoch_ms(ts)) FROM entries").fetchall() == [(1, last)]
    assert con.sql("SELECT count(*) FROM sessions").fetchall() == [(1,)]


def test_a_ts_beyond_int64_in_a_stored_session_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A writer that skipped the check (stored data is hostile): a raw OverflowError before.
    monkeypatch.setattr(codec, "MAX_TS", 2**70)
    store, (good, bad) = _store_with(T0, 2**65)
    with pytest.warns(analytics.CorruptSessionWarning, match=bad):
        assert analytics.to_arrow(store).column("session").to_pylist() == [good]
    with pytest.warns(analytics.CorruptSessionWarning, match=bad):
        assert analytics.sessions_table(store).column("session").to_pylist() == [good]
    with pytest.raises(s3log.CorruptionError):
        analytics.sessions_table(store, strict=True)


def test_an_entry_ts_out_of_range_is_caught_even_if_the_head_hides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The entries are checked, not only the head's ts_min / ts_max (a head can lie).
    monkeypatch.setattr(analytics, "_check_head_times", lambda head, key: None)
    monkeypatch.setattr(codec, "MAX_TS", 2**63 - 1)  # stored by a build before session 13
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1, ts=T0)
    w.append("k", 2, ts=2**62)
    w.commit()
    with pytest.raises(s3log.CorruptionError) as info:
        analytics.to_arrow(store, strict=True)
    assert info.value.seq == 1


# ----------------------------------------------------------- 4. duckdb checks eagerly


@pytest.mark.parametrize("bad", [
    {"since": "garbage"}, {"batch_size": 0}, {"sessions": ["bad id!"]}, {"bogus": 1}, {"kinds": "k"},
])
def test_duckdb_checks_its_arguments_when_registering(bad: dict[str, Any]) -> None:
    store, _ = _store_with(T0)
    with pytest.raises(s3log.S3LogError):
        analytics.duckdb(duckdb.connect(), store, **bad)


def test_duckdb_keeps_the_error_that_ended_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "MAX_TS", 2**63 - 1)  # stored by a build before session 13
    store, (_, bad) = _store_with(T0, 2**62)
    con = analytics.duckdb(duckdb.connect(), store, strict=True)
    with pytest.raises(duckdb.Error):
        con.sql("SELECT count(*) FROM entries").fetchall()
    err = analytics.stream_error(con)
    assert isinstance(err, s3log.CorruptionError) and bad in err.key


def test_cli_query_reports_a_scan_error_on_one_line(env: dict[str, str]) -> None:
    missing = {**env, "S3LOG_BUCKET": "no-such-bucket-s12q"}
    code, text = _invoke(missing, "query", "SELECT count(*) FROM entries")
    assert code == 1
    assert "no-such-bucket-s12q" in text and "does not exist" in text
    assert "Traceback" not in text and "query failed" not in text


# ------------------------------------------------------------------- 5. data_json


def test_data_json_is_defined_for_any_key_and_the_same_without_orjson() -> None:
    cases: list[tuple[Any, str]] = [
        ({b"k": 1}, '{"6b":1}'),
        ({(1, 2): 3}, '{"[1, 2]":3}'),
        ({1: "a"}, '{"1":"a"}'),
        (float("nan"), "null"),
        (float("inf"), "null"),
        ([1.5, -math.inf], "[1.5,null]"),
        (b"\x00\xff", '"00ff"'),
        (2**70, str(2**70)),
    ]
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    for value, _ in cases:
        w.append("v", value)
    w.commit()
    got = analytics.to_arrow(store).column("data_json").to_pylist()
    assert got == [text for _, text in cases]
    for value, text in cases:
        assert analytics._json_std(value) == text  # the json module alone: the same text


def test_jsonl_export_falls_back_to_data_cbor_when_data_json_is_null() -> None:
    row = {"session": "s", "seq": 0, "ts": T0, "kind": "k", "data_cbor": b"\x81\x01", "data_json": None}
    line = json.loads(export_cli._jsonl_row(dict(row)))
    assert line["data"] is None and base64.b64decode(line["data_cbor"]) == b"\x81\x01"
    line = json.loads(export_cli._jsonl_row({**row, "data_json": "[1]"}))
    assert line["data"] == [1] and "data_cbor" not in line
    assert line["ts"] == "2026-01-01T00:00:00+00:00"


# -------------------------------------------------------- 6. expired sessions dropped


def test_sessions_table_leaves_out_expired_sessions() -> None:
    now = [T0]
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, lambda: now[0])))
    ids = []
    for n in ("a", "b"):
        w = log.create(meta={"labels": {"n": n}})
        w.append("k", n, ts=T0)
        w.commit()
        ids.append(w.session_id)
    now[0] += DAY
    assert log.expire(idle_for=1000, labels={"n": "a"}).expired == [ids[0]]
    assert analytics.sessions_table(store).column("session").to_pylist() == [ids[1]]
    con = analytics.duckdb(duckdb.connect(), store)
    assert con.sql("SELECT s.session, s.entries, count(e.seq) FROM sessions s LEFT JOIN entries e "
                   "USING (session) GROUP BY ALL").fetchall() == [(ids[1], 1, 1)]


# ---------------------------------------------- 7. duckdb_parquet's sessions view filters


def test_duckdb_parquet_sessions_view_follows_the_filters(tmp_path: Path) -> None:
    store, (old, new) = _store_with(T0 - 10 * DAY, T0)
    out = tmp_path / "x"
    analytics.to_parquet(store, str(out))
    for kwargs, want in [({"sessions": []}, []), ({"since": T0 - DAY}, [new]), ({"until": T0 - DAY}, [old]),
                         ({"sessions": [old]}, [old]), ({}, sorted([old, new]))]:
        s3 = analytics.duckdb(duckdb.connect(), store, **kwargs)
        pq = analytics.duckdb_parquet(duckdb.connect(), str(out), **kwargs)
        for con in (s3, pq):
            assert sorted(r[0] for r in con.sql("SELECT session FROM sessions").fetchall()) == want, kwargs


# ------------------------------------------------------------ 8. time arguments


@pytest.mark.parametrize("since", [float("nan"), float("inf"), 1e30, -1e30, "garbage", 10**30, -1, True])
def test_time_arguments_are_checked_eagerly_naming_the_argument(since: Any) -> None:
    store, _ = _store_with(T0)
    with pytest.raises(s3log.InvalidArgumentError, match="since"):
        analytics.scan(store, since=since)  # no batch taken: checked at the call
    with pytest.raises(s3log.InvalidArgumentError, match="until"):
        analytics.sessions(store, until=since)


def test_dask_read_entries_checks_prefix_and_times_when_planning() -> None:
    pytest.importorskip("dask.dataframe")
    from s3log.dask import read_entries

    with pytest.raises(s3log.InvalidPrefixError):
        read_entries("bucket", prefix="../x", sessions=["a"], endpoint_url="http://127.0.0.1:9")
    with pytest.raises(s3log.InvalidArgumentError, match="since"):
        read_entries("bucket", sessions=["a"], since=float("nan"), endpoint_url="http://127.0.0.1:9")
    with pytest.raises(s3log.InvalidArgumentError, match="until"):
        read_entries("bucket", sessions=["a"], until="garbage", endpoint_url="http://127.0.0.1:9")
