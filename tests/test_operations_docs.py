"""The snippets of docs/operations.md outside its signing section (which
tests/test_signing.py runs against the local server) run, and do what the text says;
every Python block of the page is run by one test or the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import s3log
from tests.helpers import stale_writer

DOC = Path(__file__).parent.parent / "docs" / "operations.md"


def _section(title: str) -> str:
    return DOC.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _snippets(title: str) -> list[str]:
    return [block.split("```", 1)[0] for block in _section(title).split("```python\n")[1:]]


def _group_commit_puts(log: s3log.Log, entries: int = 64) -> int:
    """PUTs of one commit carrying ``entries`` ~1 KB entries, on a session with a
    commit of one such entry before it (so it does not create the session)."""
    store: Any = log.store
    w = log.create()
    w.append("event", {"role": "assistant", "content": "x" * 950})
    w.commit()
    store.requests.reset()
    for i in range(entries):
        w.append("event", {"i": i, "role": "assistant", "content": "x" * 950})
    w.commit()
    puts = int(store.requests["PUT"])
    assert [e.data.get("i") for e in log.read(w.session_id).entries[1:]] == list(range(entries))
    return puts


def test_many_appenders_snippet_runs_and_a_group_stays_one_put() -> None:
    (code,) = _snippets("Many appenders on one writer")
    ns: dict[str, Any] = {}
    exec(compile(code, "docs/operations.md", "exec"), ns)
    config, log = ns["config"], ns["log"]
    assert config.tail_per_commit == 0
    # What the section says: by default the head holds a group of 64 ~1 KB entries,
    # one PUT; with the strict bound it is a head and a segment.
    assert _group_commit_puts(s3log.Log(s3log.MemoryStore())) == 1
    assert _group_commit_puts(log) == 2


def test_active_sessions_snippet_runs_and_prints_what_it_says(capsys: Any) -> None:
    section = DOC.read_text().split("### Sessions active since a time\n", 1)[1].split("\n### ", 1)[0]
    (code,) = [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]
    ns: dict[str, Any] = {}
    exec(compile(code, "docs/operations.md", "exec"), ns)
    # One session, found by listing (the index does not cover a window starting on its first day).
    assert capsys.readouterr().out.split() == ["False", "1"]
    assert ns["recent"].indexed is False


def test_observability_snippet_routes_a_fork_record_by_its_attributes(capsys: Any) -> None:
    import logging

    (code,) = _snippets("Observability")
    logger = logging.getLogger("s3log")
    level, handlers = logger.level, list(logger.handlers)
    try:
        exec(compile(code, "docs/operations.md", "exec"), {})
        a, b = stale_writer(s3log.Log(s3log.MemoryStore()))
        fork = b.commit().fork
        assert fork is not None
        assert capsys.readouterr().out == f"{a.session_id} forked into {fork.child} (conflict)\n"
    finally:
        logger.setLevel(level)
        logger.handlers[:] = handlers


def test_encrypted_sessions_snippet_reads_verifies_rotates_and_shreds(capsys: Any) -> None:
    (code,) = _snippets("Encrypted sessions")
    ns: dict[str, Any] = {}
    exec(compile(code, "docs/operations.md", "exec"), ns)
    sid = ns["sid"]
    assert capsys.readouterr().out.split("\n")[:4] == [
        "my card", "True", str([f"{sid}/000001", f"{sid}/000002"]), "SessionShredded True"]


def test_every_python_block_of_the_page_is_run_by_a_test() -> None:
    # The sections above, and the three of "Signed heads and checkpoints" that
    # tests/test_signing.py::test_operations_doc_snippets_run runs: a new block needs a test.
    run = (len(_snippets("Many appenders on one writer")) + len(_snippets("Signed heads and checkpoints")) + 1
           + len(_snippets("Observability")) + len(_snippets("Encrypted sessions")))
    assert DOC.read_text().count("```python\n") == run == 7
