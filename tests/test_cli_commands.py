"""Command-line output of hostile stored heads and odd data: one clear line or valid JSON, never a raw
Python error (huge times, NaN and Infinity, huge integers, huge durations).
"""

from __future__ import annotations

import json
import math

import pytest

from s3log.cli.common import dumps, jsonable, when
from s3log.testing import LocalS3
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


def test_jsonable_maps_non_finite_floats_to_strings() -> None:
    value = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "x": 1.5, "l": [math.nan], (1, math.inf): 0}
    assert jsonable(value) == {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity", "x": 1.5, "l": ["NaN"],
                               '[1, "Infinity"]': 0}
    assert strict_json(dumps(value))["inf"] == "Infinity"


def test_show_tail_and_ls_json_are_valid_json_with_nan_and_infinity(env: dict[str, str]) -> None:
    log = log_of(env)
    w = log.create(meta={"labels": {"tenant": "acme"}, "score": math.nan})
    w.append("k", {"nan": math.nan, "inf": math.inf, "ninf": -math.inf})
    w.append("plain", math.nan)
    w.commit()
    result = invoke(env, "show", w.session_id, "--json")
    assert result.exit_code == 0, result.output
    shown = strict_json(result.stdout)
    assert shown["meta"]["score"] == "NaN"
    assert shown["entries"][0]["data"] == {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity"}
    assert shown["entries"][1]["data"] == "NaN"
    result = invoke(env, "tail", w.session_id, "--json")
    assert result.exit_code == 0, result.output
    lines = [strict_json(line) for line in result.stdout.splitlines()]
    assert [e["data"] for e in lines] == [{"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity"}, "NaN"]
    result = invoke(env, "show", w.session_id)  # the plain line of an entry is JSON too
    assert result.exit_code == 0 and '"inf": "Infinity"' in result.stdout and "NaN" in result.stdout


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
