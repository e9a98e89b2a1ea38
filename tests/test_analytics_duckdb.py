"""DuckDB over s3log: arguments checked when registering, a scan's error kept, sessions views filtered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

import s3log
import s3log._format.entries as entries
from s3log import analytics
from s3log.cli.app import app
from tests.helpers import store_with

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

DAY = 86_400_000

runner = CliRunner()


def _invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("bad", [
    {"since": "garbage"}, {"batch_size": 0}, {"sessions": ["bad id!"]}, {"bogus": 1}, {"kinds": "k"},
])
def test_duckdb_checks_its_arguments_when_registering(bad: dict[str, Any]) -> None:
    store, _ = store_with(T0)
    with pytest.raises(s3log.S3LogError):
        analytics.duckdb(duckdb.connect(), store, **bad)


def test_duckdb_keeps_the_error_that_ended_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entries, "MAX_TS", 2**63 - 1)  # stored by an older build
    store, (_, bad) = store_with(T0, 2**62)
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


def test_duckdb_parquet_sessions_view_follows_the_filters(tmp_path: Path) -> None:
    store, (old, new) = store_with(T0 - 10 * DAY, T0)
    out = tmp_path / "x"
    analytics.to_parquet(store, str(out))
    for kwargs, want in [({"sessions": []}, []), ({"since": T0 - DAY}, [new]), ({"until": T0 - DAY}, [old]),
                         ({"sessions": [old]}, [old]), ({}, sorted([old, new]))]:
        s3 = analytics.duckdb(duckdb.connect(), store, **kwargs)
        pq = analytics.duckdb_parquet(duckdb.connect(), str(out), **kwargs)
        for con in (s3, pq):
            assert sorted(r[0] for r in con.sql("SELECT session FROM sessions").fetchall()) == want, kwargs
