"""The command line, through typer's runner and through a real subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from typer.testing import CliRunner

import s3log
from s3log.cli.app import app
from s3log.testing.plugin import LocalS3
from tests.cli_env import log_of

runner = CliRunner()


def _log(env: dict[str, str]) -> s3log.Log:
    # The strict tail bound (decision 0033): the sizes below flush where the tests say.
    return log_of(env, s3log.LogConfig(tail_per_commit=0))


def _invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_ls_show_tail_fork_lineage_rm(env: dict[str, str]) -> None:
    log = _log(env)
    w = log.create(meta={"who": "cli"})
    for i in range(3):
        w.append("note", {"i": i})
    w.commit()
    sid = w.session_id
    code, out = _invoke(env, "ls", "--json")
    assert code == 0 and json.loads(out)[0]["session"] == sid
    code, out = _invoke(env, "show", sid, "--json")
    assert code == 0 and [e["data"]["i"] for e in json.loads(out)["entries"]] == [0, 1, 2]
    code, out = _invoke(env, "tail", sid, "-n", "1")
    assert code == 0 and '"i": 2' in out
    code, out = _invoke(env, "fork", sid, "--at-seq", "1")
    child = out.strip()
    assert code == 0 and log.read(child).parent.seq == 1  # type: ignore[union-attr]
    code, out = _invoke(env, "lineage", child, "--format", "mermaid")
    assert code == 0 and "-->" in out and child in out
    code, out = _invoke(env, "lineage", child)
    assert code == 0 and sid in out and child in out
    code, out = _invoke(env, "rm", child, "--yes")
    assert code == 0
    assert log.children(sid) == []


def test_errors_are_one_line_and_non_zero(env: dict[str, str]) -> None:
    code, out = _invoke(env, "show", "no-such-session")
    assert code == 1 and "not found" in out and "Traceback" not in out
    code, out = _invoke(env, "show", "bad/id")
    assert code == 2 and "invalid session id" in out  # a usage error, as click's are
    code, out = _invoke(env, "fork", "no-such", "--at-seq", "1")
    assert code == 1


def test_usage_errors_exit_2_before_any_request(env: dict[str, str], tmp_path: Any) -> None:
    """A malformed id, duration, time, choice or pair of options is the invocation's fault:
    exit 2 like click's own usage errors, never 1 (which scripts read as "the operation failed")."""
    log = _log(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    sid = w.session_id
    bad = [
        ["show", "bad/id"], ["tail", "bad/id"], ["lineage", "bad/id"], ["verify", "bad/id"], ["rm", "bad/id"],
        ["fork", "bad/id"], ["fork", sid, "--at-seq", "0", "--at-hash", "ab"], ["fork", sid, "--at-hash", "zz"],
        ["gc", "--older-than", "soon"], ["expire", "--idle", "0s"], ["expire", "--idle", "a while"],
        ["export", "--format", "xml", "--out", str(tmp_path / "x")],
        ["export", "--mode", "merge", "--out", str(tmp_path / "x")],
        ["export", "--since", "last week", "--out", str(tmp_path / "x")],
        ["query", "--from", str(tmp_path / "nowhere"), "SELECT 1"], ["query", "--until", "later", "SELECT 1"],
        ["ls", "--starting-token", "bad/id"], ["ls", "--label", "tenant"], ["ls", "--max-items", "-1"],
    ]
    before = log.store.requests.snapshot() if hasattr(log.store, "requests") else None
    for args in bad:
        code, out = _invoke(env, *args)
        assert code == 2, (args, out)
    assert before is None or log.store.requests.snapshot() == before
    assert not (tmp_path / "x").exists()


def test_verify_catches_a_flipped_byte_naming_key_and_seq(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = _log(env)
    w = log.create()
    for i in range(3):
        w.append("big", str(i) * 12000)  # 36 KB: past the default 32 KiB tail bound
    w.commit()
    w.append("small", 0)
    w.commit()  # references the segment written beside the previous head
    code, out = _invoke(env, "verify", "--all")
    assert code == 0 and "1 verified" in out
    key = log.head(w.session_id).segments[0]
    client = s3log_server.client()
    body = bytearray(client.get_object(Bucket=env["S3LOG_BUCKET"], Key=key)["Body"].read())
    body[body.index(b"2" * 50)] = ord("3")
    client.put_object(Bucket=env["S3LOG_BUCKET"], Key=key, Body=bytes(body))
    code, out = _invoke(env, "verify", w.session_id, "--json")
    report = json.loads(out)
    assert code == 1 and report["broken"][0]["key"] == key and report["broken"][0]["seq"] == 2


def test_gc_deletes_orphans_but_never_a_referenced_segment(env: dict[str, str], s3log_server: LocalS3) -> None:
    log = _log(env)
    a = log.create()
    a.append("big", "a" * 20000)
    a.commit()
    b = log.open(a.session_id)
    a.append("big", "x" * 20000)
    a.commit()  # a wins
    b.append("big", "y" * 20000)
    b.commit()  # b loses the head race: its segment is an orphan, b forks
    client = s3log_server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=env["S3LOG_BUCKET"])["Contents"]]
    # A pending segment (written beside its head, not yet referenced) is kept too.
    referenced = {k for sid in log.list_session_ids() for h in [log.head(sid)]
                  for k in (*h.segments, *([h.pending.key] if h.pending else []))}
    orphans = [k for k in keys if "/seg/" in k and k not in referenced]
    assert len(orphans) == 1
    code, out = _invoke(env, "gc", "--older-than", "1h", "--json")
    assert code == 0 and json.loads(out)["deleted"] == []  # inside the grace period
    time.sleep(1.1)
    # A second is past the grace period but not past the commit deadline: a commit in
    # flight could still reference a segment this young, so gc keeps it.
    code, out = _invoke(env, "gc", "--older-than", "1s", "--json")
    assert code == 0 and json.loads(out)["deleted"] == [] and json.loads(out)["kept_young"] == 1
    # Two hours later (the log's clock moved on), the orphan goes and nothing else does.
    later = s3log.Log(log.store, config=s3log.LogConfig(
        env=s3log.env.Env(clock_ms=lambda: s3log.env.wall_clock_ms() + 2 * 3_600_000)))
    assert later.gc(older_than_ms=3_600_000, dry_run=True).unreferenced == orphans
    assert later.gc(older_than_ms=3_600_000).deleted == orphans
    for sid in log.list_session_ids():
        log.verify(sid)
    left = {o["Key"] for o in client.list_objects_v2(Bucket=env["S3LOG_BUCKET"])["Contents"]}
    assert referenced <= left


def test_cli_end_to_end_in_a_subprocess(env: dict[str, str]) -> None:
    log = _log(env)
    w = log.create()
    w.append("k", "hello")
    w.commit()
    proc = subprocess.run(
        [sys.executable, "-m", "s3log.cli", "verify", w.session_id],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 verified, 0 broken" in proc.stdout


def test_demo_finishes_and_reports_zero_loss(env: dict[str, str]) -> None:
    from s3log.cli.demo import run_demo

    report = run_demo(bucket=env["S3LOG_BUCKET"], endpoint=env["AWS_ENDPOINT_URL"], workers=3, turns=4, sessions=2)
    assert report.ok, (report.missing, report.duplicated, report.corrupt)
    assert report.acked == 3 * 4 * 3
    assert report.commits == 12
    assert report.entries == report.acked + report.fork_entries  # what "stored" adds to "acknowledged"


def test_the_demo_shows_the_race_on_its_first_run(env: dict[str, str]) -> None:
    """Every worker's first commit is on the head they all read: all but one fork, cold or not."""
    from s3log.cli.demo import run_demo

    report = run_demo(bucket=env["S3LOG_BUCKET"], endpoint=env["AWS_ENDPOINT_URL"], workers=3, turns=1, sessions=1)
    assert report.ok and report.commits == 3
    assert report.conflicts == 2 and report.sessions == 3 and report.fork_entries == 2
    assert report.entries == report.acked + 2


def test_demo_command_through_the_runner(env: dict[str, str]) -> None:
    code, out = _invoke(env, "demo", "--workers", "2", "--turns", "2", "--sessions", "1")
    assert code == 0, out
    assert "lost: 0; duplicated: 0" in out and "every chain verified: yes" in out
    # It says where it writes: the bucket and the prefix it was given (S3LOG_PREFIX here).
    assert f"target: bucket {env['S3LOG_BUCKET']}, prefix {env['S3LOG_PREFIX']}/, on {env['AWS_ENDPOINT_URL']}" in out
    # The first turns race at a barrier: one fork. The second turns race only if they
    # happen to overlap (a loaded machine): one more fork each time they do.
    found = re.search(r"conflicts resolved by forking: (\d+) ", out)
    assert found is not None, out
    forks = int(found.group(1))
    assert forks in (1, 2), out
    stored = next(line for line in out.splitlines() if line.startswith("entries stored: "))
    assert stored.startswith(f"entries stored: {12 + forks} = 12 acknowledged to workers + {forks} fork entries "
                             "(each fork opens"), out
    assert len(_log(env).list_session_ids()) == 1 + forks  # under the prefix given


def test_demo_writes_under_its_own_prefix_unless_given_one(env: dict[str, str]) -> None:
    bare = {k: v for k, v in env.items() if k != "S3LOG_PREFIX"}
    code, out = _invoke(bare, "demo", "--workers", "1", "--turns", "1", "--sessions", "1")
    assert code == 0 and "prefix s3log-demo/" in out, out
    assert s3log.Log(_log(env).store, prefix="s3log-demo").list_session_ids()
    code, out = _invoke(bare, "--prefix", "mine", "demo", "--workers", "1", "--turns", "1", "--sessions", "1")
    assert code == 0 and "prefix mine/" in out, out
    assert len(s3log.Log(_log(env).store, prefix="mine").list_session_ids()) == 1


def test_demo_refuses_a_remote_bucket_it_did_not_create_unless_yes() -> None:
    remote = {"S3LOG_BUCKET": "someone-elses-bucket", "AWS_ENDPOINT_URL": "https://s3.eu-west-1.amazonaws.com"}
    code, out = _invoke(remote, "demo")
    assert code == 2 and "someone-elses-bucket" in out and "--yes" in out and "did not create" in out
    code, out = _invoke({"S3LOG_BUCKET": "someone-elses-bucket", "AWS_ENDPOINT_URL": ""}, "demo")
    assert code == 2 and "at AWS" in " ".join(out.split())


def test_local_s3_serves_until_interrupted() -> None:
    import signal

    import boto3

    proc = subprocess.Popen(
        [sys.executable, "-m", "s3log.cli", "local-s3"], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        endpoint = line.strip().rsplit(" ", 1)[-1]
        assert endpoint.startswith("http://127.0.0.1:")
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="x", aws_secret_access_key="x",
                              region_name="us-east-1")
        client.create_bucket(Bucket="from-cli")
        assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["from-cli"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


@pytest.mark.parametrize("how", ["sigint-inherited-ignored", "sigterm"])
def test_local_s3_stops_on_ctrl_c_even_started_in_the_background_and_on_sigterm(how: str) -> None:
    """A shell without job control starts background commands with SIGINT ignored, and a
    supervisor stops with SIGTERM: the server stops either way, exit 0."""
    import signal

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        [sys.executable, "-m", "s3log.cli", "local-s3"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env={**os.environ, "COLUMNS": "200"}, preexec_fn=ignore_sigint,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("local S3 listening on http://127.0.0.1:")
        proc.send_signal(signal.SIGINT if how.startswith("sigint") else signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_export_and_query(env: dict[str, str], tmp_path: Any) -> None:
    log = _log(env)
    for _ in range(3):
        w = log.create()
        for i in range(4):
            w.append("tool_call" if i % 2 else "message", {"i": i, "ok": i != 3}, ts=1_767_225_600_000 + i)
        w.commit()
    for fmt in ("parquet", "jsonl", "csv"):
        code, out = _invoke(env, "export", "--format", fmt, "--out", str(tmp_path / fmt))
        assert code == 0 and "exported 12 entries" in out, out
    assert (tmp_path / "parquet" / "date=2026-01-01").is_dir()
    lines = (tmp_path / "jsonl" / "entries.jsonl").read_text().splitlines()
    assert len(lines) == 12 and {json.loads(x)["data"]["i"] for x in lines} == {0, 1, 2, 3}
    code, out = _invoke(env, "export", "--format", "jsonl", "--out", str(tmp_path / "k"), "--kind", "tool_call")
    assert "exported 6 entries" in out
    code, out = _invoke(env, "query", "SELECT kind, count(*) AS n FROM entries GROUP BY kind ORDER BY kind", "--json")
    assert code == 0 and json.loads(out) == [{"kind": "message", "n": 6}, {"kind": "tool_call", "n": 6}]
    code, out = _invoke(env, "query", "SELECT nope FROM entries")
    assert code == 1 and "Traceback" not in out


def test_demo_json_report(env: dict[str, str]) -> None:
    code, out = _invoke(env, "demo", "--workers", "1", "--turns", "1", "--sessions", "1", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["missing"] == [] and report["commits"] == 1
