"""analytics.scan and sessions_table: odd data (huge integers, times out of range, data_json without
orjson), expired sessions, and arguments checked eagerly.
"""

from __future__ import annotations

import json
import math
import warnings
from fractions import Fraction
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from cbor2 import CBORTag

import s3log
import s3log._format.entries as entries
from s3log import analytics
from s3log.analytics import columns, reading
from s3log.cli import export as export_cli
from s3log.config import LogConfig
from s3log.env import Env
from tests.helpers import expired_world, store_with

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")


T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


DAY = 86_400_000


@pytest.mark.parametrize("huge", [10**17, 2**62, 2**63 - 1, 9_223_372_036_854_776])  # the last: TS_RANGE[1] + 1
def test_a_session_with_a_ts_out_of_range_is_skipped_not_fatal(huge: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stored as an older build took it (append now refuses past TS_RANGE).
    monkeypatch.setattr(entries, "MAX_TS", 2**63 - 1)
    store, (good, bad) = store_with(T0, huge)
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
    store, _ = store_with(last)
    table = analytics.to_arrow(store, strict=True)
    assert table.column("ts").cast(pa.int64()).to_pylist() == [last]
    con = analytics.duckdb(duckdb.connect(), store, strict=True)
    assert con.sql("SELECT count(*), max(epoch_ms(ts)) FROM entries").fetchall() == [(1, last)]
    assert con.sql("SELECT count(*) FROM sessions").fetchall() == [(1,)]


def test_a_ts_beyond_int64_in_a_stored_session_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A writer that skipped the check (stored data is hostile): a raw OverflowError before.
    monkeypatch.setattr(entries, "MAX_TS", 2**70)
    store, (good, bad) = store_with(T0, 2**65)
    with pytest.warns(analytics.CorruptSessionWarning, match=bad):
        assert analytics.to_arrow(store).column("session").to_pylist() == [good]
    with pytest.warns(analytics.CorruptSessionWarning, match=bad):
        assert analytics.sessions_table(store).column("session").to_pylist() == [good]
    with pytest.raises(s3log.CorruptionError):
        analytics.sessions_table(store, strict=True)


def test_an_entry_ts_out_of_range_is_caught_even_if_the_head_hides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The entries are checked, not only the head's ts_min / ts_max (a head can lie).
    monkeypatch.setattr(reading, "_check_head_times", lambda head, key: None)
    monkeypatch.setattr(entries, "MAX_TS", 2**63 - 1)  # stored by an older build
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1, ts=T0)
    w.append("k", 2, ts=2**62)
    w.commit()
    with pytest.raises(s3log.CorruptionError) as info:
        analytics.to_arrow(store, strict=True)
    assert info.value.seq == 1


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
        assert columns._json_std(value) == text  # the json module alone: the same text


def test_jsonl_export_falls_back_to_data_cbor_when_data_json_is_null() -> None:
    row = {"session": "s", "seq": 0, "ts": T0, "kind": "k", "data_cbor": b"\x81\x01", "data_json": None}
    line = json.loads(export_cli._jsonl_row(dict(row)))
    assert line["data"] is None and bytes.fromhex(line["data_cbor"]) == b"\x81\x01"  # hex, as show prints bytes
    line = json.loads(export_cli._jsonl_row({**row, "data_json": "[1]"}))
    assert line["data"] == [1] and "data_cbor" not in line
    assert line["ts"] == "2026-01-01T00:00:00.000Z"  # as show --json prints "time"


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


def test_sessions_table_leaves_out_a_tombstone_as_head_expired_names_it() -> None:
    store, _, log = expired_world("gone")
    w = log.create("kept")
    w.append("k", 1)
    w.commit()
    heads = {r.session: r.head for r in log.heads(["gone", "kept"])}
    assert [sid for sid, h in heads.items() if h is not None and h.expired] == ["gone"]
    assert analytics.sessions_table(store).column("session").to_pylist() == ["kept"]


@pytest.mark.parametrize("since", [float("nan"), float("inf"), 1e30, -1e30, "garbage", 10**30, -1, True])
def test_time_arguments_are_checked_eagerly_naming_the_argument(since: Any) -> None:
    store, _ = store_with(T0)
    with pytest.raises(s3log.InvalidArgumentError, match="since"):
        analytics.scan(store, since=since)  # no batch taken: checked at the call
    with pytest.raises(s3log.InvalidArgumentError, match="until"):
        analytics.sessions(store, until=since)


def test_dask_read_entries_checks_prefix_and_times_when_planning() -> None:
    pytest.importorskip("dask.dataframe")
    from s3log.analytics.dask import read_entries

    with pytest.raises(s3log.InvalidPrefixError):
        read_entries("bucket", prefix="../x", sessions=["a"], endpoint_url="http://127.0.0.1:9")
    with pytest.raises(s3log.InvalidArgumentError, match="since"):
        read_entries("bucket", sessions=["a"], since=float("nan"), endpoint_url="http://127.0.0.1:9")
    with pytest.raises(s3log.InvalidArgumentError, match="until"):
        read_entries("bucket", sessions=["a"], until="garbage", endpoint_url="http://127.0.0.1:9")


HUGE = 10**5000  # more digits than str() converts (sys.get_int_max_str_digits(), 4300)


@pytest.mark.parametrize("data", [{HUGE: 1}, Fraction(HUGE, 3), CBORTag(5000, {HUGE: 1}), [{-HUGE: "x"}]],
                         ids=["int-key", "fraction", "tag-with-int-key", "negative-int-key"])
def test_a_scan_reads_entries_holding_integers_too_long_for_str(data: Any) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("big", data)
    w.append("small", {"a": 1})
    w.commit()
    table = analytics.to_arrow(store, strict=True)
    assert table.column("kind").to_pylist() == ["big", "small"]
    assert table.column("data_json").to_pylist()[1] == '{"a":1}'
    big = table.column("data_json").to_pylist()[0]
    assert big is None or "0x" in big  # NULL, or the key in hex


@pytest.mark.parametrize("meta", [{"labels": {"n": HUGE}}, {"labels": {"n": {HUGE: 1}}}, {"x": {HUGE: 1}},
                                  {"labels": {"f": Fraction(HUGE, 7)}}],
                         ids=["label-int", "label-int-key", "meta-int-key", "label-fraction"])
def test_sessions_table_reads_meta_holding_integers_too_long_for_str(meta: dict[str, Any]) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create(meta=meta)
    w.append("k", 1)
    w.commit()
    table = analytics.sessions_table(store)
    assert table.num_rows == 1
    assert table.column("entries").to_pylist() == [1]
