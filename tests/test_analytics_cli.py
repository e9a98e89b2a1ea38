"""``s3log export`` and ``s3log query``: modes, filters that cut reads, --from, progress only on a terminal."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import s3log
from s3log.cli import export as export_cli
from s3log.cli.app import app
from s3log.testing.plugin import LocalS3
from tests.cli_env import log_of

runner = CliRunner()
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000


def _sessions(env: dict[str, str], n: int = 3) -> list[str]:
    log = log_of(env)
    ids = []
    for s in range(n):
        w = log.create(meta={"labels": {"tenant": f"t{s}"}})
        for i in range(4):
            w.append("tool_call" if i % 2 else "message", {"i": i}, ts=T0 + (i % 2) * DAY + s)
        w.commit()
        ids.append(w.session_id)
    log.close()
    return ids


def _invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, " ".join(result.output.split()) if result.exit_code else result.output


def test_export_refuses_a_non_empty_dir_then_overwrites_without_stale_partitions(
    env: dict[str, str], tmp_path: Path,
) -> None:
    _sessions(env)
    out = tmp_path / "p"
    code, text = _invoke(env, "export", "--out", str(out), "--until", "2026-01-02")
    assert code == 0 and "exported 6 entries" in text
    code, text = _invoke(env, "export", "--out", str(out))
    assert code == 1 and "not empty" in text and "overwrite" in text
    code, text = _invoke(env, "export", "--out", str(out), "--since", "2026-01-02", "--mode", "overwrite")
    assert code == 0 and "exported 6 entries" in text
    assert sorted(p.name for p in out.iterdir()) == ["_sessions.parquet", "date=2026-01-02"]
    code, text = _invoke(env, "export", "--out", str(out), "--since", "2026-01-02", "--mode", "append", "-q")
    assert code == 0 and text == ""
    code, text = _invoke(env, "query", "SELECT count(*) AS n FROM entries", "--from", str(out), "--json")
    assert code == 0 and json.loads(text) == [{"n": 12}]
    code, text = _invoke(env, "export", "--out", str(tmp_path / "j"), "--format", "jsonl", "--mode", "sideways")
    assert code == 2 and "unknown mode" in text  # a usage error


def test_query_filters_cut_requests_and_sessions_view_joins(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = _sessions(env)
    stores: list[Any] = []
    original = export_cli.open_log

    def counting() -> Any:
        log = original()
        stores.append(log.store)
        return log

    monkeypatch.setattr(export_cli, "open_log", counting)
    code, text = _invoke(env, "query", "SELECT count(*) AS n, min(date) AS d FROM entries", "--json",
                         "--session", ids[1], "--kind", "tool_call")
    assert code == 0 and json.loads(text) == [{"n": 2, "d": "2026-01-02"}]
    # The one session named: its head, no LIST (every entry is in the head's tail here).
    assert stores[-1].requests.snapshot() == {"GET": 1, "PUT": 0, "LIST": 0, "DELETE": 0}
    code, text = _invoke(env, "query", "SELECT count(*) AS n FROM entries", "--json", "--since", "2027-01-01")
    assert code == 0 and json.loads(text) == [{"n": 0}]
    # No session was committed to since then: the activity index says so (s3log._protocol.retention).
    assert stores[-1].requests.snapshot() == {"GET": 0, "PUT": 0, "LIST": 2, "DELETE": 0}
    code, text = _invoke(env, "query", "SELECT s.labels['tenant'] AS t, count(*) AS n FROM entries e "
                         "JOIN sessions s USING (session) GROUP BY t ORDER BY t", "--json")
    assert code == 0 and json.loads(text) == [{"t": f"t{i}", "n": 4} for i in range(3)]
    code, text = _invoke(env, "query", "SELECT nope FROM entries")
    assert code == 1 and "query failed" in text and "Traceback" not in text


def test_progress_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from s3log.analytics import ScanProgress

    tty = io.StringIO()
    monkeypatch.setattr(export_cli, "err_console", Console(file=tty, force_terminal=True, width=120))
    with export_cli.scan_progress("exporting", quiet=False) as update:
        assert update is not None
        update(ScanProgress(2, 4, 1000, 0.5))
    assert "2/4" in tty.getvalue() and "2,000/s" in tty.getvalue()
    with export_cli.scan_progress("exporting", quiet=True) as update:
        assert update is None
    pipe = io.StringIO()
    monkeypatch.setattr(export_cli, "err_console", Console(file=pipe, force_terminal=False))
    with export_cli.scan_progress("exporting", quiet=False) as update:
        assert update is None
    assert pipe.getvalue() == ""


def test_piped_query_output_is_plain_and_unwrapped(s3log_server: LocalS3) -> None:
    # Piped, `query` printed a rich table wrapped at 80 columns: rows must stay whole.
    import subprocess
    import sys

    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    w = log.create()
    long_kind = "k" + "x" * 150
    w.append(long_kind, 1)
    w.commit()
    env = {**os.environ, **s3log_server.env(), "S3LOG_BUCKET": bucket, "COLUMNS": "40"}
    proc = subprocess.run(
        [sys.executable, "-m", "s3log.cli", "query", "--quiet",
         "SELECT kind, count(*) AS n FROM entries GROUP BY kind"],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["kind", "n"]
    assert lines[1].split() == [long_kind, "1"]
    assert "│" not in proc.stdout and "┃" not in proc.stdout


@pytest.mark.parametrize("sql", ["", "  ", ";", "/* nothing */"], ids=["empty", "blank", "semicolon", "comment"])
def test_query_of_no_sql_statement_is_a_usage_error(env: dict[str, str], sql: str) -> None:
    """SQL holding no statement is a usage error (exit 2) naming the SQL argument."""
    code, text = _invoke(env, "query", sql)
    assert code == 2 and "Invalid value for SQL" in text, text
