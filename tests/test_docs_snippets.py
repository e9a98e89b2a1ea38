"""Every ``python`` block of README.md and docs/ runs as pasted, in order, one namespace
per document, against the local S3 (``AWS_ENDPOINT_URL`` points at it; the buckets the
docs name exist).

Documents whose snippets need more than that have a test of their own, which this file
names in :data:`OWN_TESTS` (and checks it exists). A block that truly cannot run here
(it needs AWS itself: KMS, a real account) is marked on the line before it with::

    <!-- snippet: not run (needs AWS: why) -->

and this test skips it; a marker with another reason is refused.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from s3log.testing.plugin import LocalS3

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Documents run by tests of their own (fixtures, namespaces, assertions on what they print).
OWN_TESTS = {
    "docs/agent.md": "tests/test_agent_docs.py",
    "docs/analytics.md": "tests/test_analytics_docs.py",
    "docs/integrations.md": "tests/test_langgraph_docs.py",
    "docs/operations.md": "tests/test_operations_docs.py",
}
#: The buckets snippets name.
BUCKETS = ("my-bucket", "agents")
_BLOCK = re.compile(r"(?:^(<!-- snippet: [^\n]*-->)\n)?^```python\n(.*?)^```", re.S | re.M)
_NOT_RUN = re.compile(r"<!-- snippet: not run \(needs AWS: [^)]+\) -->")


def blocks(doc: Path) -> list[tuple[str | None, str]]:
    """The ``python`` blocks of ``doc``, each with the marker on the line before it (or None)."""
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(doc.read_text(encoding="utf-8"))]


def _name(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


RUN_HERE = [d for d in DOCS if blocks(d) and _name(d) not in OWN_TESTS]


def test_every_document_with_snippets_is_run_by_a_test() -> None:
    with_snippets = {_name(d) for d in DOCS if blocks(d)}
    assert with_snippets == {*(_name(d) for d in RUN_HERE), *OWN_TESTS}
    assert {"README.md", "docs/stores.md"} <= {_name(d) for d in RUN_HERE}
    for test in OWN_TESTS.values():
        assert (ROOT / test).is_file(), test
    for doc in DOCS:
        for marker, _ in blocks(doc):
            assert marker is None or _NOT_RUN.fullmatch(marker), f"{_name(doc)}: {marker}"


@pytest.mark.parametrize("doc", RUN_HERE, ids=_name)
def test_the_snippets_of_a_document_run_as_pasted(doc: Path, s3log_server: LocalS3,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3log_server.endpoint_url)
    client = s3log_server.client()
    existing = {b["Name"] for b in client.list_buckets()["Buckets"]}
    for bucket in BUCKETS:
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
    # A real module: classes a snippet defines can be found by module and name.
    module = types.ModuleType(f"snippets_of_{doc.stem.lower()}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    ran = 0
    for i, (marker, code) in enumerate(blocks(doc)):
        if marker is not None:
            continue
        exec(compile(code, f"{_name(doc)} snippet {i + 1}", "exec"), module.__dict__)
        ran += 1
    assert ran
