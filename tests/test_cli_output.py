"""What the command line prints, run as a real process: piped (plain) and on a terminal (a pty).

Covered: rich markup in user data, wrapped and truncated piped
output, Python reprs instead of JSON, a missing ``--json``, ``rm`` without a
confirmation, ``local-s3`` without a bucket, errors that named neither bucket nor
endpoint, slow failures on a wrong endpoint, and help with ``<bool>`` and RST.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import s3log
from s3log.cli.app import PANELS, app
from s3log.cli.common import CLI_RETRY, Settings, jsonable, open_log, when
from s3log.cli.sessions import rm_decision
from s3log.errors import StoreError
from tests.cli_env import log_of

ROOT = Path(__file__).resolve().parents[1]
TS0 = 1_796_031_600_123  # 2026-11-30T09:40:00.123Z
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _proc_env(env: dict[str, str]) -> dict[str, str]:
    # A narrow terminal width: piped output must not be wrapped or cut to it.
    return {**os.environ, **env, "COLUMNS": "40", "PYTHONPATH": str(ROOT)}


def cli(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m s3log.cli ARGS`` with stdout and stderr piped."""
    return subprocess.run(
        [sys.executable, "-m", "s3log.cli", *args], env=_proc_env(env), cwd=ROOT, capture_output=True, text=True,
        input=stdin if stdin is not None else "", timeout=120,
    )


def on_tty(env: dict[str, str], *args: str, answer: bytes | None = None, prompt: bytes = b"?") -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal (stdin, stdout and stderr); type ``answer`` at ``prompt``."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3log.cli", *args], env={**_proc_env(env), "COLUMNS": "200", "TERM": "xterm"},
        cwd=ROOT, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
    )
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if answer is not None and prompt in out:
                os.write(master, answer)
                answer = None
        code = proc.wait(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, ANSI.sub("", out.decode()).replace("\r\n", "\n")


def _markup_session(env: dict[str, str]) -> tuple[s3log.Log, str]:
    log = log_of(env)
    w = log.create(meta={"model": "[/INST]", "blob": b"\x01\x02"})
    w.append("msg", {"t": "[INST] hi [/INST] ok"}, ts=TS0)
    w.append("msg", "[bold]x[/bold]", ts=TS0 + 1)
    w.append("raw", {"blob": b"\x00\xff", 7: [1, 2]}, ts=TS0 + 2)
    w.commit()
    return log, w.session_id


# ------------------------------------------------------------------------ user data is text


def test_show_and_tail_print_markup_like_data_literally_as_json(env: dict[str, str]) -> None:
    log, sid = _markup_session(env)
    version = log.head(sid).version
    lines = [
        '     0  2026-11-30T09:40:00.123Z  msg  {"t": "[INST] hi [/INST] ok"}',
        '     1  2026-11-30T09:40:00.124Z  msg  "[bold]x[/bold]"',
        '     2  2026-11-30T09:40:00.125Z  raw  {"7": [1, 2], "blob": "00ff"}',
    ]
    p = cli(env, "show", sid)
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout == "\n".join([
        f"{sid}  entries=3  version={version}", 'meta: {"blob": "0102", "model": "[/INST]"}', *lines, ""])
    p = cli(env, "tail", sid, "-n", "2")
    assert (p.returncode, p.stdout) == (0, "\n".join([*lines[1:], ""]))
    p = cli(env, "tail", sid, "-n", "0")
    assert (p.returncode, p.stdout) == (0, "")


def test_show_on_a_terminal_does_not_interpret_markup(env: dict[str, str]) -> None:
    _, sid = _markup_session(env)
    code, out = on_tty(env, "show", sid)
    assert code == 0, out
    assert '{"t": "[INST] hi [/INST] ok"}' in out and '"[bold]x[/bold]"' in out
    assert "Traceback" not in out and "MarkupError" not in out
    code, out = on_tty(env, "tail", sid)
    assert code == 0 and '"[bold]x[/bold]"' in out


def test_errors_quoting_user_input_are_literal_and_one_line(env: dict[str, str]) -> None:
    _, sid = _markup_session(env)
    p = cli(env, "fork", sid, "--at-hash", "[/INST]")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and "[/INST]" in p.stderr
    code, out = on_tty(env, "show", "[/INST]")
    assert code == 1 and "invalid session id '[/INST]'" in out and "Traceback" not in out


# ------------------------------------------------------------------------ piped output is plain


def test_piped_ls_and_lineage_are_plain_full_and_one_record_per_line(env: dict[str, str]) -> None:
    log = log_of(env)
    w = log.create()
    w.append("k", 1, ts=TS0)
    w.commit()
    root = w.session_id
    child = log.fork(root)
    grandchild = log.fork(child)
    p = cli(env, "ls")
    assert p.returncode == 0
    rows = p.stdout.splitlines()
    assert rows[0].split() == ["session", "entries", "created", "updated", "parent"]
    assert {r.split()[0] for r in rows[1:]} == {root, child, grandchild}  # full ids at COLUMNS=40
    by_id = {r.split()[0]: r.split() for r in rows[1:]}
    assert by_id[grandchild][4] == child
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", by_id[root][2])
    assert not any(c in p.stdout for c in "┏│━…")
    p = cli(env, "lineage", grandchild, "--format", "mermaid")
    assert p.stdout.splitlines() == [
        "graph TD",
        f'  s{root.replace("-", "")}["{root}"] --> s{child.replace("-", "")}["{child}"]',
        f'  s{child.replace("-", "")}["{child}"] --> s{grandchild.replace("-", "")}["{grandchild}"]',
    ]
    p = cli(env, "lineage", grandchild, "--format", "dot")
    assert p.stdout.splitlines() == [
        "digraph lineage {", f'  "{root}" -> "{child}";', f'  "{child}" -> "{grandchild}";', "}"]
    p = cli(env, "lineage", child)
    assert p.stdout.splitlines() == [root, f"  {child} *", f"    {grandchild}"]


def test_iso_timestamps() -> None:
    assert when(TS0) == "2026-11-30T09:40:00.123Z"
    assert when(0) == "1970-01-01T00:00:00.000Z"


def test_jsonable_renders_bytes_as_hex_and_any_key_as_a_string() -> None:
    assert jsonable({b"\x01": b"\xab", 3: (b"", None), "s": {1.5: True}}) == {"01": "ab", "3": ["", None],
                                                                             "s": {"1.5": True}}


# ------------------------------------------------------------------------ --json everywhere


def test_json_from_lineage_fork_rm_and_tail(env: dict[str, str]) -> None:
    log, sid = _markup_session(env)
    p = cli(env, "fork", sid, "--at-seq", "1", "--json")
    forked = json.loads(p.stdout)
    child = forked["session"]
    assert forked["parent"]["session"] == sid and forked["parent"]["seq"] == 1
    assert log.read(child).parent.seq == 1  # type: ignore[union-attr]
    lineage = json.loads(cli(env, "lineage", child, "--json").stdout)
    assert lineage["root"] == sid and lineage["edges"] == [{"parent": sid, "child": child}]
    assert [a["session"] for a in lineage["ancestors"]] == [child, sid]
    tail = [json.loads(x) for x in cli(env, "tail", sid, "-n", "2", "--json").stdout.splitlines()]
    assert [t["data"] for t in tail] == ["[bold]x[/bold]", {"7": [1, 2], "blob": "00ff"}]
    assert tail[0]["time"] == "2026-11-30T09:40:00.124Z"
    p = cli(env, "rm", child, "--dry-run", "--json")
    planned = json.loads(p.stdout)
    assert planned["dry_run"] is True and planned["deleted"] == 0
    assert f"s3log/sessions/{child}/head" in planned["keys"]
    log.head(child)  # still there
    p = cli(env, "rm", child, "--yes", "--json")
    assert json.loads(p.stdout)["deleted"] >= 1
    assert log.children(sid) == []
    assert "session" in json.loads(cli(env, "ls", "--json").stdout)[0]


# ------------------------------------------------------------------------ rm asks first


def test_rm_decision() -> None:
    def never() -> bool:
        raise AssertionError("must not ask")

    assert rm_decision(yes=False, dry_run=True, stdin_is_tty=False, ask=never) == "dry-run"
    assert rm_decision(yes=True, dry_run=False, stdin_is_tty=False, ask=never) == "delete"
    assert rm_decision(yes=False, dry_run=False, stdin_is_tty=False, ask=never) == "refuse"
    assert rm_decision(yes=False, dry_run=False, stdin_is_tty=True, ask=lambda: True) == "delete"
    assert rm_decision(yes=False, dry_run=False, stdin_is_tty=True, ask=lambda: False) == "declined"


def test_rm_without_a_terminal_or_yes_refuses_and_deletes_nothing(env: dict[str, str]) -> None:
    log, sid = _markup_session(env)
    p = cli(env, "rm", sid, stdin="y\n")  # piped "y" is not a confirmation
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "--yes" in p.stderr and sid in p.stderr
    log.head(sid)
    p = cli(env, "rm", sid, "--dry-run")
    assert p.returncode == 0 and p.stdout.splitlines()[-1].startswith(f"would delete {sid} (")
    log.head(sid)


def test_rm_on_a_terminal_asks_and_obeys(env: dict[str, str]) -> None:
    log, sid = _markup_session(env)
    code, out = on_tty(env, "rm", sid, answer=b"n\n")
    assert code == 1 and f"Delete session {sid}" in out and "nothing deleted" in out
    log.head(sid)
    code, out = on_tty(env, "rm", sid, answer=b"y\n")
    assert code == 0 and f"deleted {sid}" in out
    with pytest.raises(s3log.SessionNotFound):
        log.head(sid)


# ------------------------------------------------------------------------ reaching the store


def test_local_s3_with_bucket_then_ls_works_as_the_readme_says() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3log.cli", "local-s3", "--bucket", "my-bucket"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("local S3 listening on http://127.0.0.1:")
        exported: dict[str, str] = {}
        while "S3LOG_BUCKET" not in exported:
            line = proc.stdout.readline()
            assert line.startswith("export "), line
            k, v = line.removeprefix("export ").strip().split("=", 1)
            exported[k] = v
        assert exported["S3LOG_BUCKET"] == "my-bucket"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3LOG_"))}
        p = subprocess.run([sys.executable, "-m", "s3log.cli", "ls"], env={**env, **exported}, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert (p.returncode, p.stderr) == (0, ""), p.stderr
        assert p.stdout.split() == ["session", "entries", "created", "updated", "parent"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_missing_bucket_is_one_line_naming_it(env: dict[str, str]) -> None:
    p = cli({**env, "S3LOG_BUCKET": "no-such-bucket-here"}, "ls")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1
    assert p.stderr.startswith(f"error: bucket no-such-bucket-here does not exist at {env['AWS_ENDPOINT_URL']}")


def test_unreachable_endpoint_is_one_line_naming_it(env: dict[str, str]) -> None:
    p = cli(env, "--endpoint-url", "http://127.0.0.1:1", "ls")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1
    assert p.stderr.startswith("error: could not reach the S3 endpoint http://127.0.0.1:1 ")


def test_the_cli_log_gives_up_after_few_attempts() -> None:
    """The library retries a failing LIST for up to 30 s; the CLI tries twice."""
    ctx = typer.Context(typer.main.get_command(app))
    ctx.obj = Settings(bucket="b", endpoint_url="http://127.0.0.1:1")
    with ctx:
        log = open_log(ctx)
        with pytest.raises(StoreError):
            log.list_session_ids()
        assert log.store.requests["LIST"] == CLI_RETRY.attempts == 2
        assert CLI_RETRY.max_time <= 5


def test_profile_and_region_reach_the_client(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.write_text("[profile elsewhere]\nregion = eu-west-3\n")
    creds = tmp_path / "credentials"
    creds.write_text("[elsewhere]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    files = {"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(creds)}
    ctx = typer.Context(typer.main.get_command(app))
    ctx.obj = Settings(bucket=env["S3LOG_BUCKET"], endpoint_url=env["AWS_ENDPOINT_URL"], profile="elsewhere")
    for k, v in files.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    with ctx:
        assert open_log(ctx).store.client.meta.region_name == "eu-west-3"
        ctx.obj.region = "ap-south-1"
        assert open_log(ctx).store.client.meta.region_name == "ap-south-1"
    p = cli({**env, **files}, "--profile", "nope", "ls")
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "nope" in p.stderr


# ------------------------------------------------------------------------ options and help


def test_version(env: dict[str, str]) -> None:
    p = cli(env, "--version")
    assert (p.returncode, p.stdout) == (0, f"s3log {s3log.__version__}\n")


def test_help_has_panels_no_bool_metavars_and_no_rst() -> None:
    runner = CliRunner()
    top = runner.invoke(app, ["--help"], env={"COLUMNS": "120"}).output
    positions = [top.index(panel) for panel in PANELS]
    assert positions == sorted(positions)
    group: Any = typer.main.get_command(app)
    for name in group.list_commands(None):
        out = runner.invoke(app, [name, "--help"], env={"COLUMNS": "120"}).output
        assert "Usage:" in out, out
        for text in (out, top):
            assert "<bool>" not in text and "``" not in text and ":func:" not in text, (name, out)
    assert set(group.list_commands(None)) == {n for names in PANELS.values() for n in names}


def test_every_command_closes_its_log(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    _, sid = _markup_session(env)
    opened: list[Any] = []
    closed: list[Any] = []
    real_init, real_close = s3log.Log.__init__, s3log.Log.close

    def init(self: Any, *a: Any, **kw: Any) -> None:
        opened.append(self)
        real_init(self, *a, **kw)

    def close(self: Any) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(s3log.Log, "__init__", init)
    monkeypatch.setattr(s3log.Log, "close", close)
    runner = CliRunner()
    for args in (["ls"], ["show", sid], ["tail", sid], ["verify", sid], ["lineage", sid], ["fork", sid],
                 ["rm", sid, "--dry-run"], ["gc", "--dry-run"], ["show", "no-such-session"]):
        before = len(opened)
        result = runner.invoke(app, args, env=env)
        assert result.exit_code in (0, 1), (args, result.output)
        assert len(opened) == before + 1 and opened[-1] in closed, args


def test_a_404_listing_names_bucket_and_endpoint(env: dict[str, str]) -> None:
    """An endpoint that is not S3 (or not this bucket's) answers a LIST with a bare 404."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotS3(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"Not Found")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        p = cli(env, "--endpoint-url", url, "--bucket", "b1", "ls")
    finally:
        server.shutdown()
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert p.stderr.startswith(f"error: bucket b1 not found at {url} (HTTP 404")
