"""Command-line output of hostile stored heads and odd data: one clear line or valid JSON, never a raw
Python error (huge times, NaN and Infinity, huge integers, huge durations).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from s3log.cli.common import dumps, jsonable, when
from s3log.testing.plugin import LocalS3
from tests.cli_env import edit_head_s3, invoke, log_of, no_python_error, strict_json

HUGE = 2**70


@pytest.mark.parametrize("ms", [HUGE, -HUGE, 2**62, 253_402_300_800_000, -62_135_596_800_001])
def test_when_prints_a_time_no_date_can_hold_as_its_integer(ms: int) -> None:
    assert when(ms) == f"ms:{ms}"


def test_when_still_prints_dates_at_both_ends_of_the_range() -> None:
    assert when(0) == "1970-01-01T00:00:00.000Z"
    assert when(-5) == "1969-12-31T23:59:59.995Z"
    assert when(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"
    assert when(-62_135_596_800_000) == "0001-01-01T00:00:00.000Z"


def test_ls_and_show_list_a_head_with_huge_times(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    good = log.create()
    good.append("k", 2)
    good.commit()
    edit_head_s3(env, s3log_server, w.session_id,
                  {"created_at": HUGE, "updated_at": HUGE, "ts_min": -HUGE, "ts_max": HUGE})
    result = invoke(env, "ls")
    no_python_error(result)
    assert result.exit_code == 0 and f"ms:{HUGE}" in result.stdout and good.session_id in result.stdout
    result = invoke(env, "ls", "--json")
    no_python_error(result)
    rows = {r["session"]: r for r in strict_json(result.stdout)}
    assert rows[w.session_id]["created"] == f"ms:{HUGE}" and rows[w.session_id]["created_at"] == HUGE
    result = invoke(env, "show", w.session_id)
    no_python_error(result)
    assert result.exit_code == 0


def test_jsonable_maps_non_finite_floats_to_null() -> None:
    value = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "x": 1.5, "l": [math.nan], (1, math.inf): 0}
    assert jsonable(value) == {"nan": None, "inf": None, "ninf": None, "x": 1.5, "l": [None], "[1, null]": 0}
    assert strict_json(dumps(value))["inf"] is None


ODD = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "b": b"\x01\xab", "k": {b"\xff": 1, 2: [3]},
       "big": 10**5000}
#: ODD by the one JSON rule (s3log._format.jsonform): null for non-finite floats, hex for bytes and huge ints.
ODD_JSON = {"nan": None, "inf": None, "ninf": None, "b": "01ab", "k": {"ff": 1, "2": [3]}, "big": hex(10**5000)}


def test_show_tail_export_and_query_print_data_by_one_json_rule(env: dict[str, str], tmp_path: Any) -> None:
    log = log_of(env)
    w = log.create(meta={"labels": {"tenant": "acme"}, "score": math.nan})
    w.append("k", ODD, ts=1_796_031_600_123)
    w.append("plain", math.nan, ts=1_796_031_600_124)
    w.commit()
    result = invoke(env, "show", w.session_id, "--json")
    assert result.exit_code == 0, result.output
    shown = strict_json(result.stdout)
    assert shown["meta"]["score"] is None
    assert [e["data"] for e in shown["entries"]] == [ODD_JSON, None]
    result = invoke(env, "tail", w.session_id, "--json")
    assert [strict_json(line)["data"] for line in result.stdout.splitlines()] == [ODD_JSON, None]
    result = invoke(env, "show", w.session_id)  # the plain line of an entry is JSON too
    assert result.exit_code == 0 and '"inf": null' in result.stdout and "NaN" not in result.stdout
    result = invoke(env, "export", "--format", "jsonl", "--out", str(tmp_path / "j"), "--quiet")
    assert result.exit_code == 0, result.output
    rows = [strict_json(x) for x in (tmp_path / "j" / "entries.jsonl").read_text().splitlines()]
    assert [r["data"] for r in rows] == [ODD_JSON, None]
    assert [r["ts"] for r in rows] == [e["time"] for e in shown["entries"]] == [
        "2026-11-30T09:40:00.123Z", "2026-11-30T09:40:00.124Z"]
    result = invoke(env, "query", "SELECT ts, hash, data_json, data_cbor FROM entries ORDER BY seq", "--json",
                    "--quiet")
    assert result.exit_code == 0, result.output
    queried = strict_json(result.stdout)
    assert [q["ts"] for q in queried] == [e["time"] for e in shown["entries"]]
    assert [json.loads(q["data_json"]) for q in queried] == [ODD_JSON, None]
    assert [q["hash"] for q in queried] == [e["hash"] for e in shown["entries"]]
    assert all(isinstance(q["data_cbor"], str) and bytes.fromhex(q["data_cbor"]) for q in queried)


def test_query_prints_times_and_bytes_as_show_does_not_python_reprs(env: dict[str, str]) -> None:
    log = log_of(env)
    w = log.create()
    w.append("k", {"x": 1}, ts=1_796_031_600_123)
    w.commit()
    result = invoke(env, "query", "SELECT ts, data_cbor, 1.5::DOUBLE AS f, 'nan'::DOUBLE AS n, NULL AS z "
                    "FROM entries", "--quiet")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == ["ts", "data_cbor", "f", "n", "z"]
    cells = row.split()
    assert cells[0] == "2026-11-30T09:40:00.123Z" and cells[2:] == ["1.5", "null", "null"]
    assert bytes.fromhex(cells[1])
    assert "datetime" not in result.stdout and "b'" not in result.stdout and "+00:00" not in result.stdout


def test_parse_duration_refuses_more_than_a_hundred_years() -> None:
    # Imported once the command line is loaded (tests.cli_env): its modules import each other.
    from s3log.cli.maintenance import parse_duration

    assert parse_duration("36500d") == 36_500 * 86_400_000
    with pytest.raises(Exception, match="too long"):
        parse_duration("36501d")


@pytest.mark.parametrize("args", [("expire", "--idle", "99999999999999999999999d"),
                                  ("expire", "--idle", "99999999999999999999999d", "--dry-run"),
                                  ("gc", "--older-than", "99999999999999999999999d", "--dry-run")])
def test_a_huge_duration_is_an_error_naming_the_option(env: dict[str, str], args: tuple[str, ...]) -> None:
    result = invoke(env, *args)
    no_python_error(result)
    assert result.exit_code == 2 and args[1] in result.output and "too long" in result.output, result.output
    assert "OverflowError" not in result.output


def test_cli_json_of_an_integer_past_the_str_limit_is_its_hex_text() -> None:
    # `s3log show` / `tail` (JSON or not) failed with "Exceeds the limit (4300 digits)
    # for integer string conversion" on an acknowledged entry holding such an integer.

    from s3log.cli.common import dumps, jsonable

    big = 10**5000
    data = {"n": big, big: "key", "l": [big, -big], "small": 2**64, "t": True}
    out = json.loads(dumps(data))
    assert out == {"n": hex(big), hex(big): "key", "l": [hex(big), hex(-big)], "small": 2**64, "t": True}
    assert jsonable(big - big) == 0 and jsonable(False) is False
