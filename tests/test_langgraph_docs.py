"""Every snippet of docs/integrations.md runs (in order, in one namespace) on the local S3."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from agents import set_tracing_disabled

from s3log.testing.plugin import LocalS3

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"

set_tracing_disabled(True)


def _snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_doc_has_snippets_for_every_documented_verb() -> None:
    text = "\n".join(_snippets())
    for name in ("S3LogSaver.from_conn_string", "AsyncS3LogSaver.from_conn_string", "allowed_types=",
                 "strict_serializer", "S3LogSession.from_url", "ainvoke", "afork"):
        assert name in text, name


def test_every_snippet_of_integrations_md_runs(s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bucket = s3log_server.create_bucket()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3log_server.endpoint_url)
    # A real module, so that classes defined in snippets can be found by module and name
    # (which is how allowlisted types are rebuilt).
    module = types.ModuleType("integrations_doc_snippets")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for i, source in enumerate(_snippets()):
        # The docs use a bucket named "agents"; run them on a fresh one.
        code = compile(source.replace("s3://agents/", f"s3://{bucket}/"), f"{DOC.name} snippet {i + 1}", "exec")
        exec(code, module.__dict__)
    out = capsys.readouterr().out
    assert "{'steps': ['a', 'b']}" in out
    assert "[{'role': 'assistant', 'content': 'Hello!'}]" in out
