"""Every Python snippet of docs/agent.md runs as written."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "docs", "agent.md"), encoding="utf-8") as f:
    SNIPPETS = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_the_doc_has_snippets() -> None:
    assert len(SNIPPETS) >= 6


@pytest.mark.parametrize("code", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(code: str) -> None:
    exec(compile(code, "docs/agent.md", "exec"), {"__name__": "docs_agent"})
