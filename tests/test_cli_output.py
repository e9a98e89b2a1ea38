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


def on_tty(env: dict[str, str], *args: str, answer: bytes | None = None, prompt: bytes = b"?",
           columns: int = 200) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal (stdin, stdout and stderr); type ``answer`` at ``prompt``."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "s3log.cli", *args], env={**_proc_env(env), "COLUMNS": str(columns), "TERM": "xterm"},
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


def test_errors_quoting_user_input_are_literal(env: dict[str, str]) -> None:
    _, sid = _markup_session(env)
    p = cli(env, "fork", sid, "--at-hash", "[/INST]")  # a usage error: exit 2
    assert p.returncode == 2 and p.stdout == ""
    assert "'[/INST]'" in p.stderr and "Traceback" not in p.stderr
    code, out = on_tty(env, "show", "[/INST]")
    assert code == 2 and "invalid session id '[/INST]'" in out and "Traceback" not in out


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
    assert p.returncode == 0 and any(x.startswith(f"would delete {sid} (") for x in p.stdout.splitlines())
    log.head(sid)


def test_rm_dry_run_and_rm_agree_on_what_goes_and_what_is_left(env: dict[str, str], s3log_server: Any) -> None:
    log, sid = _markup_session(env)
    child = log.fork(sid)
    dry = cli(env, "rm", child, "--dry-run").stdout.splitlines()
    planned = json.loads(cli(env, "rm", child, "--dry-run", "--json").stdout)
    assert planned["keys"] == [f"s3log/sessions/{child}/head"]
    # Just forked: its own fork marker and today's activity marker stay, and say who removes them.
    assert planned["left_for_gc"] == [f"s3log/sessions/{sid}/forks/{child}"]
    assert [k.rsplit("/", 1)[-1] for k in planned["left_for_expire"]] == [child]
    assert dry[0] == planned["keys"][0] and dry[1] == f"would delete {child} (1 objects)"
    assert dry[2].startswith(f"left for gc: s3log/sessions/{sid}/forks/{child} (gc deletes it once older than 20m")
    assert dry[3].startswith(f"left for expire: {planned['left_for_expire'][0]} (expire prunes its day")
    p = cli(env, "rm", child, "--yes")
    assert p.returncode == 0
    assert p.stdout.splitlines() == [f"deleted {child} (1 objects)", *dry[2:]]
    client = s3log_server.client()
    left = {o["Key"] for o in client.list_objects_v2(Bucket=env["S3LOG_BUCKET"])["Contents"] if child in o["Key"]}
    assert left == {*planned["left_for_gc"], *planned["left_for_expire"]}


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
            # A value is named (FORMAT, SINCE, SQL), never by its Python type.
            assert not re.search(r"<(str|int|float|path|list\[[a-z]+\])>", text), (name, out)
    # A docstring's line ends are not the help's: a paragraph wraps at the terminal's width.
    export = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "200"}).output
    assert "DIR/_sessions.parquet (one row per session, labels and meta)" in export, export
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


# ------------------------------------------------------------------------ a reader that goes away


def _into_a_closed_pipe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with stdout a pipe whose reader has gone (``| head -1`` once it has its line)."""
    read, write = os.pipe()
    os.close(read)  # every write to stdout now fails with EPIPE
    try:
        return subprocess.run([sys.executable, "-m", "s3log.cli", *args], env=_proc_env(env), cwd=ROOT,
                              stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              timeout=120)
    finally:
        os.close(write)


def test_every_command_stops_quietly_with_0_when_its_reader_goes(env: dict[str, str]) -> None:
    log, sid = _markup_session(env)
    log.fork(sid)
    for args in (["show", sid], ["show", sid, "--json"], ["ls"], ["ls", "--json"], ["tail", sid],
                 ["lineage", sid], ["verify", sid], ["fork", sid]):
        p = _into_a_closed_pipe(env, *args)
        assert (p.returncode, p.stderr) == (0, ""), args


def test_a_broken_pipe_that_is_not_stdout_is_an_error(env: dict[str, str]) -> None:
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        def broken(*a: Any, **k: Any) -> Any:
            raise BrokenPipeError(32, "Broken pipe")

        mp.setattr(s3log.Log, "list_sessions", broken)
        result = runner.invoke(app, ["ls"], env=env)
    assert result.exit_code == 1 and "Broken pipe" in result.output


# ------------------------------------------------------------------------ ls: pages, widths, callers


def test_piped_ls_lists_every_session_and_a_cut_says_how_to_go_on(env: dict[str, str]) -> None:
    log = log_of(env)
    made = [log.create(f"s{i:03d}").session_id for i in range(53)]  # more than a terminal's 50
    p = cli(env, "ls")
    assert (p.returncode, p.stderr) == (0, "")
    assert sorted(r.split()[0] for r in p.stdout.splitlines()[1:]) == made
    assert len(json.loads(cli(env, "ls", "--json").stdout)) == 53
    shown: list[str] = []
    token: list[str] = []
    while True:
        p = cli(env, "ls", "--max-items", "20", *token)
        assert p.returncode == 0
        shown += [r.split()[0] for r in p.stdout.splitlines()[1:]]
        if not p.stderr:
            break
        # aws s3api's way: the cut is said on stderr, with the token to go on from.
        assert p.stderr.count("\n") == 1 and "--max-items 20 --starting-token " in p.stderr
        token = ["--starting-token", p.stderr.split("--starting-token ")[1].strip()]
    assert len(shown) == 53 and sorted(shown) == made  # pages of 20, 20, 13: none twice, none missed
    p = cli(env, "ls", "--max-items", "53")
    assert p.stderr == ""  # exactly all of them: not a cut


def test_ls_on_a_terminal_of_80_columns_folds_and_drops_nothing(env: dict[str, str]) -> None:
    log = log_of(env)
    w = log.create(meta={"openai_agents": {"session_id": "chat 42"}})
    w.append("k", 1, ts=TS0)
    w.commit()
    child = log.fork(w.session_id)
    code, out = on_tty(env, "ls", columns=80)
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), out
    assert lines[0].split() == ["session", "entries", "created", "updated", "parent", "caller"]
    for sid in (w.session_id, child):
        assert any(line.startswith(sid) for line in lines), out  # ids whole, on one line

    def column(name: str, end: str | None = None) -> str:
        a, b = lines[0].index(name), lines[0].index(end) if end else None
        return "".join(line[a:b].strip() for line in lines[2:])

    assert column("parent", "caller") == w.session_id  # folded, every character there
    assert column("caller") == "chat42chat42"  # both rows: "chat 42" folded at its space
    assert len(re.findall(r"\d{4}-\d\d-\d\d", column("created", "updated"))) == 2
    assert len(re.findall(r"\d\d:\d\d:\d\dZ", column("updated", "parent"))) == 2
    assert column("entries", "created") == "11"


def test_ls_shows_the_callers_own_id_of_integration_sessions(env: dict[str, str]) -> None:
    log = log_of(env)
    log.create("oa-" + "a" * 40, meta={"openai_agents": {"session_id": "user@example.com/chat 1"}})
    log.create("lg-" + "b" * 32 + "-" + "c" * 16, meta={"langgraph": {"thread_id": "t-1", "checkpoint_ns": ""}})
    log.create("lg-" + "b" * 32 + "-" + "d" * 16, meta={"langgraph": {"thread_id": "t-1", "checkpoint_ns": "sub"}})
    log.create("plain")
    log.create("same-id", meta={"openai_agents": {"session_id": "same-id"}})
    p = cli(env, "ls")
    rows = {r.split()[0]: r for r in p.stdout.splitlines()[1:]}
    assert p.stdout.splitlines()[0].split()[-1] == "caller"
    assert rows["oa-" + "a" * 40].endswith("user@example.com/chat 1")
    assert rows["lg-" + "b" * 32 + "-" + "c" * 16].endswith("  t-1")
    assert rows["lg-" + "b" * 32 + "-" + "d" * 16].endswith("t-1 ns=sub")
    assert rows["plain"].split() == ["plain", "0", *rows["plain"].split()[2:4]]
    assert len(rows["same-id"].split()) == 4  # the caller's id is the session id: nothing to add
    listed = {r["session"]: r["caller"] for r in json.loads(cli(env, "ls", "--json").stdout)}
    assert listed["oa-" + "a" * 40] == {"integration": "openai-agents", "session_id": "user@example.com/chat 1"}
    assert listed["lg-" + "b" * 32 + "-" + "d" * 16] == {"integration": "langgraph", "thread_id": "t-1",
                                                           "checkpoint_ns": "sub"}
    assert listed["plain"] is None
