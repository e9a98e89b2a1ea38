"""Types live where their name says, I/O is typed, and the package stays readable.

``s3log.config`` holds the tunables, ``s3log.results`` what the verbs return,
``s3log._api.queue`` a writer's commit queue, ``s3log._api.core`` the log's procedures. The typed request helpers of
``s3log._protocol.ops`` return what both drivers send back.

No module is over :data:`MAX_MODULE_LINES` and no function over
:data:`MAX_FUNCTION_LINES` (docs/decisions/0046-folders-by-layer.md); the import
contracts in pyproject.toml (``make lint``) check what each layer may import.
"""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import s3log
from s3log import config, results
from s3log._api import core
from s3log._protocol import ops
from s3log.errors import ObjectNotFound, PreconditionFailed


def test_public_names_come_from_the_new_homes() -> None:
    for name in ("LogConfig", "RetryPolicy"):
        assert getattr(s3log, name) is getattr(config, name)
    for name in ("CommitResult", "ForkInfo", "LineageStep", "SessionInfo", "SessionView", "VerifyReport",
                 "ExpireReport"):
        assert getattr(s3log, name) is getattr(results, name)


def test_writers_are_built_on_the_shared_verbs() -> None:
    from s3log._api.writer import WriterVerbs

    assert issubclass(s3log.Writer, WriterVerbs) and issubclass(s3log.AsyncWriter, WriterVerbs)
    assert issubclass(s3log.Log, core.LogVerbs) and issubclass(s3log.AsyncLog, core.LogVerbs)


def _typed_requests() -> ops.Proc[list[object]]:
    # Every helper once, against a fresh store; each result is what its annotation says.
    etag = yield from ops.put_if_absent("k/a", b"one")
    try:
        yield from ops.put_if_absent("k/a", b"two")
    except PreconditionFailed:
        refused = True
    else:
        refused = False
    blob = yield from ops.get("k/a")
    replaced = yield from ops.put_if_match("k/a", b"three", blob.etag)
    page = yield from ops.list_page("k/", max_keys=10)
    got = yield from ops.parallel([ops.Get("k/a"), ops.Get("k/missing")])
    puts = yield from ops.parallel([ops.PutIfAbsent("k/b", b"b"), ops.PutIfAbsent("k/a", b"taken")])
    yield from ops.sleep(0)
    yield from ops.delete("k/b")
    yield from ops.delete("k/never-there")
    deleted = yield from ops.parallel([ops.Delete("k/a")])
    after = yield from ops.list_page("k/")
    return [etag, refused, blob, replaced, page, got, puts, deleted, after]


def _check(out: list[object]) -> None:
    etag, refused, blob, replaced, page, got, puts, deleted, after = out
    assert isinstance(etag, str) and refused is True
    assert isinstance(blob, ops.Blob) and blob.body == b"one" and blob.etag == etag
    assert isinstance(replaced, str) and replaced != etag
    assert isinstance(page, ops.ListPage) and [o.key for o in page.objects] == ["k/a"]
    assert isinstance(got, list) and isinstance(got[0], ops.Blob) and got[0].body == b"three"
    assert isinstance(got[1], ObjectNotFound)  # returned, not raised: the other outcome stays visible
    assert isinstance(puts, list) and isinstance(puts[0], str) and isinstance(puts[1], PreconditionFailed)
    assert deleted == [None]
    assert isinstance(after, ops.ListPage) and after.objects == []


def test_typed_requests_return_what_the_sync_driver_sends() -> None:
    with s3log.Log(s3log.MemoryStore()) as log:
        _check(log._run(_typed_requests()))


def test_typed_requests_return_what_the_async_driver_sends() -> None:
    async def main() -> list[object]:
        async with s3log.AsyncLog(s3log.AsyncMemoryStore()) as log:
            return await log._run(_typed_requests())

    _check(asyncio.run(main()))


def test_a_writer_carries_its_reducers_state() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create("typed", reducer=s3log.EntriesReducer())
    w.append("k", 1)
    result = w.commit()
    assert w.state == [e.to_map() for e in log.read("typed").entries]
    assert result._ws.state is w.state  # the queue's position is the commit's


TYPED = '''
from typing import Any
import s3log
from s3log.agent.state import AgentReducer, SessionState

log = s3log.Log(s3log.MemoryStore())
w = log.create(reducer=s3log.EntriesReducer())
history: list[dict[str, Any]] = w.state
agent = log.open("x", reducer=AgentReducer())
state: SessionState = agent.state
plain: s3log.Writer = log.create()
wrong: int = agent.state  # the only error: a SessionState is not an int
'''


def test_mypy_sees_the_state_type_of_a_writer(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    src = tmp_path / "typed_use.py"
    src.write_text(textwrap.dedent(TYPED).lstrip())
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--config-file", str(root / "pyproject.toml"), str(src)],
        capture_output=True, text=True, cwd=root, check=False,
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, proc.stdout
    assert "typed_use.py:11:" in errors[0] and '"SessionState"' in errors[0] and '"int"' in errors[0]


def test_the_layers_above_the_log_drive_it_through_its_public_verbs() -> None:
    """The agent sessions, the integrations and the CLI call public verbs of Log, AsyncLog
    and their writers only (decision 0045): no log runs a raw protocol procedure for them
    (``_run`` is private), and none reaches into a log's or writer's private attributes."""
    import ast

    assert not hasattr(s3log.Log, "run") and not hasattr(s3log.AsyncLog, "run")
    root = Path(s3log.__file__).parent
    reached = []
    for layer in ("agent", "integrations", "cli"):
        for path in sorted((root / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                # ``self._x``, ``cls._x`` and a session's own procedures are the layer's own.
                own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in ("self", "cls", "session")
                if isinstance(node, ast.Attribute) and not own and (
                        (node.attr in ("run", "layout") and ast.unparse(node.value) not in ("asyncio", "subprocess"))
                        or (node.attr.startswith("_") and not node.attr.startswith("__"))):
                    reached.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert reached == []


PACKAGE = Path(__file__).resolve().parent.parent / "s3log"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80
MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_over_the_limit(path: Path) -> None:
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines (at most {MAX_MODULE_LINES}): split it"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_function_is_over_the_limit(path: Path) -> None:
    tree = ast.parse(path.read_text())
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{_name(path)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def test_the_layers_are_folders() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"_format", "_protocol", "_drive", "_api", "store", "agent", "integrations", "analytics", "cli",
            "testing"} <= folders
