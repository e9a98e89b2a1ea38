"""Regression tests of the session-12 review of the command line and head decoding.

Hostile stored heads and odd data must give one clear line (or valid JSON), never a
raw Python error: a head time no date can hold (``ls`` failed with "[Errno 75]"),
NaN and Infinity in ``--json`` output (invalid JSON), a stray object under a
session's ``forks/`` (``lineage`` failed for the whole family), a malformed
``expired`` map or a parent naming no session id (read as expired, or the wrong
error), ``verify --json`` without the key of a format-version error, and a duration
too long for a date (``OverflowError``).
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import cbor2
import pytest
from typer.testing import CliRunner

import s3log
from s3log.cli.app import app
from s3log.cli.common import dumps, jsonable, when
from s3log.cli.maintenance import parse_duration
from s3log.errors import CorruptionError
from s3log.testing import LocalS3
from tests.cli_env import log_of

runner = CliRunner()
HUGE = 2**70


def _invoke(env: dict[str, str], *args: str) -> Any:
    return runner.invoke(app, list(args), env=env)


def _strict_json(text: str) -> Any:
    """JSON as a strict parser reads it: NaN, Infinity and -Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def _no_python_error(result: Any) -> None:
    assert "Traceback" not in result.output and "Errno" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


def _edit_head_s3(env: dict[str, str], s3log_server: LocalS3, sid: str, change: dict[str, Any]) -> str:
    key = f"s3log/sessions/{sid}/head"
    client = s3log_server.client()
    head = cbor2.loads(client.get_object(Bucket=env["S3LOG_BUCKET"], Key=key)["Body"].read())
    client.put_object(Bucket=env["S3LOG_BUCKET"], Key=key, Body=cbor2.dumps({**head, **change}, canonical=True))
    return key


def _edit_head_mem(store: s3log.MemoryStore, sid: str, change: dict[str, Any]) -> str:
    key = f"s3log/sessions/{sid}/head"
    head = cbor2.loads(store.get(key).body)
    store.put_raw(key, cbor2.dumps({**head, **change}, canonical=True))
    return key


# ------------------------------------------------------------ 1. head times beyond any date


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
    _edit_head_s3(env, s3log_server, w.session_id,
                  {"created_at": HUGE, "updated_at": HUGE, "ts_min": -HUGE, "ts_max": HUGE})
    result = _invoke(env, "ls")
    _no_python_error(result)
    assert result.exit_code == 0 and f"ms:{HUGE}" in result.stdout and good.session_id in result.stdout
    result = _invoke(env, "ls", "--json")
    _no_python_error(result)
    rows = {r["session"]: r for r in _strict_json(result.stdout)}
    assert rows[w.session_id]["created"] == f"ms:{HUGE}" and rows[w.session_id]["created_at"] == HUGE
    result = _invoke(env, "show", w.session_id)
    _no_python_error(result)
    assert result.exit_code == 0


# ------------------------------------------------------------ 2. NaN and Infinity in --json


def test_jsonable_maps_non_finite_floats_to_strings() -> None:
    value = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "x": 1.5, "l": [math.nan], (1, math.inf): 0}
    assert jsonable(value) == {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity", "x": 1.5, "l": ["NaN"],
                               '[1, "Infinity"]': 0}
    assert _strict_json(dumps(value))["inf"] == "Infinity"


def test_show_tail_and_ls_json_are_valid_json_with_nan_and_infinity(env: dict[str, str]) -> None:
    log = log_of(env)
    w = log.create(meta={"labels": {"tenant": "acme"}, "score": math.nan})
    w.append("k", {"nan": math.nan, "inf": math.inf, "ninf": -math.inf})
    w.append("plain", math.nan)
    w.commit()
    result = _invoke(env, "show", w.session_id, "--json")
    assert result.exit_code == 0, result.output
    shown = _strict_json(result.stdout)
    assert shown["meta"]["score"] == "NaN"
    assert shown["entries"][0]["data"] == {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity"}
    assert shown["entries"][1]["data"] == "NaN"
    result = _invoke(env, "tail", w.session_id, "--json")
    assert result.exit_code == 0, result.output
    lines = [_strict_json(line) for line in result.stdout.splitlines()]
    assert [e["data"] for e in lines] == [{"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity"}, "NaN"]
    result = _invoke(env, "show", w.session_id)  # the plain line of an entry is JSON too
    assert result.exit_code == 0 and '"inf": "Infinity"' in result.stdout and "NaN" in result.stdout


# ------------------------------------------------------------ 3. stray objects under forks/


def test_children_skip_a_stray_object_under_forks(caplog: pytest.LogCaptureFixture) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    w.commit()
    child = log.fork(w.session_id)
    for stray in ("notes..txt", "bad id", "..", "a/b"):
        store.put_raw(f"s3log/sessions/{w.session_id}/forks/{stray}", b"hello")
    with caplog.at_level(logging.WARNING, logger="s3log"):
        assert log.children(w.session_id) == [child]
    assert "notes..txt" in caplog.text and "not a valid session id" in caplog.text
    assert [s.session for s in log.lineage(child)] == [child, w.session_id]


def test_lineage_command_with_a_stray_object_under_forks(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    child = log.fork(w.session_id)
    s3log_server.client().put_object(Bucket=env["S3LOG_BUCKET"], Key=f"s3log/sessions/{w.session_id}/forks/notes..txt",
                                     Body=b"x")
    result = _invoke(env, "lineage", child)
    _no_python_error(result)
    assert result.exit_code == 0 and child in result.stdout and w.session_id in result.stdout
    assert "notes..txt" not in result.stdout


# ------------------------------------------------------------ 4. hostile heads, typed


@pytest.mark.parametrize("bad", [5, "x", [1, 2], {}, {"at": "yesterday"}, True,
                                 {"at": 1, "seq": 0, "hash": b"short", "idle_for_ms": 1},
                                 {"at": -1, "seq": 0, "hash": None, "idle_for_ms": 1},
                                 {"at": 1, "seq": 0, "hash": None, "idle_for_ms": "5"}])
def test_a_malformed_expired_field_makes_the_head_corrupt(bad: Any) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    w.commit()
    key = _edit_head_mem(store, w.session_id, {"expired": bad})
    with pytest.raises(CorruptionError, match="expired") as info:
        log.read(w.session_id)
    assert info.value.key == key


def test_a_well_formed_or_null_expired_field_reads_as_before() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    w.commit()
    _edit_head_mem(store, w.session_id, {"expired": None})
    assert len(log.read(w.session_id)) == 1
    _edit_head_mem(store, w.session_id, {"expired": {"at": 1, "seq": 0, "hash": None, "idle_for_ms": 5}})
    with pytest.raises(s3log.SessionExpired):
        log.read(w.session_id)


def test_verify_counts_a_malformed_tombstone_as_broken(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    key = _edit_head_s3(env, s3log_server, w.session_id, {"expired": {"at": "yesterday"}})
    result = _invoke(env, "verify", "--all", "--json")
    report = _strict_json(result.stdout)
    assert result.exit_code == 1 and report["expired_or_deleted"] == []
    assert [(b["session"], b["key"]) for b in report["broken"]] == [(w.session_id, key)]


def test_a_parent_naming_no_session_id_is_corruption_naming_the_head() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    w.commit()
    child = log.fork(w.session_id)
    head = cbor2.loads(store.get(f"s3log/sessions/{child}/head").body)
    key = _edit_head_mem(store, child, {"parent": {**head["parent"], "session": "../../x"}})
    for call in (log.lineage, log.read):
        with pytest.raises(CorruptionError, match="session id") as info:
            call(child)
        assert info.value.key == key


def test_verify_json_names_the_key_of_a_format_version_error(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = log_of(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    key = _edit_head_s3(env, s3log_server, w.session_id, {"v": 3})
    result = _invoke(env, "verify", w.session_id, "--json")
    report = _strict_json(result.stdout)
    assert result.exit_code == 1 and report["broken"][0]["key"] == key
    assert "format version" in report["broken"][0]["error"]


# ------------------------------------------------------------ 5. durations too long for a date


def test_parse_duration_refuses_more_than_a_hundred_years() -> None:
    assert parse_duration("36500d") == 36_500 * 86_400_000
    with pytest.raises(Exception, match="too long"):
        parse_duration("36501d")


@pytest.mark.parametrize("args", [("expire", "--idle", "99999999999999999999999d"),
                                  ("expire", "--idle", "99999999999999999999999d", "--dry-run"),
                                  ("gc", "--older-than", "99999999999999999999999d", "--dry-run")])
def test_a_huge_duration_is_an_error_naming_the_option(env: dict[str, str], args: tuple[str, ...]) -> None:
    result = _invoke(env, *args)
    _no_python_error(result)
    assert result.exit_code == 2 and args[1] in result.output and "too long" in result.output, result.output
    assert "OverflowError" not in result.output
