"""`s3log doctor`: the precondition probe from the command line, one line per property."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import s3log.cli.common
import s3log.store.s3
from s3log.cli.app import app
from tests.test_cli_output import cli
from tests.test_probe import CheckThenAct, IfMatchMeansExists, IgnoresIfMatchOnDelete, NoConditionalDelete

PROPERTIES = ["if_none_match", "if_match", "stale_if_match", "racing_if_match", "racing_creates", "delete_if_match"]


def test_doctor_reports_a_store_that_honours_conditional_writes(env: dict[str, str]) -> None:
    proc = cli(env, "doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] and all(report[p] is True for p in PROPERTIES), report
    plain = cli(env, "doctor")
    assert plain.returncode == 0
    lines = plain.stdout.splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines[:6]] == ["honoured"] * 6, plain.stdout
    assert lines[2] == "If-Match with a stale ETag: honoured"
    assert lines[5] == "If-Match on DELETE (a stale ETag deletes nothing): honoured"


@pytest.mark.parametrize(("store_type", "ignored"), [
    (IfMatchMeansExists, ["If-Match with a stale ETag", "racing If-Match PUTs on one ETag (one wins)"]),
    (lambda: CheckThenAct("put_if_absent"), ["racing creates (If-None-Match) of one key (one wins)"]),
    (IgnoresIfMatchOnDelete, ["If-Match on DELETE (a stale ETag deletes nothing)"]),
], ids=["if-match-means-exists", "racing-creates", "if-match-on-delete"])
def test_doctor_names_each_property_a_store_ignores_and_exits_1(
    store_type: object, ignored: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_type()  # type: ignore[operator]
    client = SimpleNamespace(meta=SimpleNamespace(endpoint_url="http://127.0.0.1:1"))
    monkeypatch.setattr(s3log.cli.common, "_s3_client", lambda s: client)
    monkeypatch.setattr(s3log.store.s3, "S3Store", lambda bucket, client: store)
    result = CliRunner().invoke(app, ["doctor"], env={"S3LOG_BUCKET": "b"})
    assert result.exit_code == 1, result.output
    shown = dict(line.rsplit(": ", 1) for line in result.output.splitlines()[:6])
    assert sorted(k for k, v in shown.items() if v == "IGNORED") == sorted(ignored), result.output
    assert all(v == "honoured" for k, v in shown.items() if k not in ignored)


def test_doctor_says_a_store_cannot_delete_conditionally_and_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    # obstore cannot send a DELETE with If-Match: "unsupported", which is not "IGNORED".
    store = NoConditionalDelete()
    client = SimpleNamespace(meta=SimpleNamespace(endpoint_url="http://127.0.0.1:1"))
    monkeypatch.setattr(s3log.cli.common, "_s3_client", lambda s: client)
    monkeypatch.setattr(s3log.store.s3, "S3Store", lambda bucket, client: store)
    result = CliRunner().invoke(app, ["doctor"], env={"S3LOG_BUCKET": "b"})
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[5] == "If-Match on DELETE (a stale ETag deletes nothing): unsupported"
    result = CliRunner().invoke(app, ["doctor", "--json"], env={"S3LOG_BUCKET": "b"})
    assert json.loads(result.output)["delete_if_match"] == "unsupported"
