"""`s3log doctor`: the precondition probe from the command line, through a real process."""

from __future__ import annotations

import json

from tests.test_cli_output import cli


def test_doctor_reports_a_store_that_honours_conditional_writes(env: dict[str, str]) -> None:
    proc = cli(env, "doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] and report["if_none_match"] and report["if_match"]
    plain = cli(env, "doctor")
    assert plain.returncode == 0 and "If-None-Match: honoured; If-Match: honoured" in plain.stdout
