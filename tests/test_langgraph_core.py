"""The savers' shared core: how appends meet other writers, for both shells alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

import s3log
from s3log.integrations.langgraph import AsyncS3LogSaver, S3LogSaver, session_for


class SyncPair:
    """Two sync savers on one log, with the verbs called plainly."""

    def __init__(self, strict: bool = False) -> None:
        self.store = s3log.MemoryStore()
        log = s3log.Log(self.store)
        self.a = S3LogSaver(log, strict=strict)
        self.b = S3LogSaver(log)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def checkpoints(self, tid: str) -> list[str]:
        """The checkpoint ids stored in the thread's session, in order (read past the savers)."""
        view = s3log.Log(self.store).read(session_for(tid, ""))
        return [e.data["id"] for e in view.entries if e.kind == "lg.checkpoint"]


class AsyncPair:
    """Two async savers on one log, each verb awaited on a loop of its own."""

    def __init__(self, strict: bool = False) -> None:
        self.store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(self.store)
        self.a = AsyncS3LogSaver(log, strict=strict)
        self.b = AsyncS3LogSaver(log)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the async twin of a sync verb (``put`` -> ``aput``) of the same saver."""
        return asyncio.run(getattr(fn.__self__, "a" + fn.__name__)(*args))

    def checkpoints(self, tid: str) -> list[str]:
        """The checkpoint ids stored in the thread's session, in order (read past the savers)."""
        view = s3log.Log(self.store.sync).read(session_for(tid, ""))
        return [e.data["id"] for e in view.entries if e.kind == "lg.checkpoint"]


PAIRS = [pytest.param(SyncPair, id="S3LogSaver"), pytest.param(AsyncPair, id="AsyncS3LogSaver")]


def _put(pair: Any, saver: Any, tid: str) -> Any:
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    return pair.call(saver.put, cfg, generate_checkpoint(), generate_metadata(), {})


def _id(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


def _latest(pair: Any, tid: str) -> str:
    return _id(pair.call(pair.b.get_tuple, {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}).config)


@pytest.mark.parametrize("make", PAIRS)
def test_a_saver_appending_alone_costs_one_put_and_no_read(make: Any) -> None:
    pair = make()
    _put(pair, pair.a, "t")
    pair.store.requests.reset()
    _put(pair, pair.a, "t")
    assert (pair.store.requests["PUT"], pair.store.requests["GET"], pair.store.requests["LIST"]) == (1, 0, 0)


@pytest.mark.parametrize("make", PAIRS)
def test_another_writer_in_between_is_met_by_appending_on_top(make: Any) -> None:
    pair = make()
    ours = _put(pair, pair.a, "t")
    theirs = _put(pair, pair.b, "t")
    last = _put(pair, pair.a, "t")  # a's view of the head is stale: it re-reads and appends
    assert pair.checkpoints("t") == [_id(ours), _id(theirs), _id(last)]
    assert _latest(pair, "t") == _id(last)


@pytest.mark.parametrize("make", PAIRS)
def test_a_thread_deleted_elsewhere_is_started_afresh_by_the_next_put(make: Any) -> None:
    pair = make()
    _put(pair, pair.a, "t")
    _put(pair, pair.a, "t")
    pair.call(pair.b.delete_thread, "t")  # a still knows the head it wrote last
    last = _put(pair, pair.a, "t")
    assert pair.checkpoints("t") == [_id(last)]
    assert _latest(pair, "t") == _id(last)


@pytest.mark.parametrize("make", PAIRS)
def test_strict_raises_conflict_when_another_writer_moved_the_thread(make: Any) -> None:
    pair = make(strict=True)
    ours = _put(pair, pair.a, "t")
    theirs = _put(pair, pair.b, "t")
    with pytest.raises(s3log.ConflictError):
        _put(pair, pair.a, "t")
    # Nothing of the refused put was stored; the next one builds on the head as it is now.
    assert pair.checkpoints("t") == [_id(ours), _id(theirs)]
    again = _put(pair, pair.a, "t")
    assert pair.checkpoints("t") == [_id(ours), _id(theirs), _id(again)]


def test_the_savers_use_public_log_verbs_only() -> None:
    """No protocol procedure is run through ``log.run``: prune's rewrite is ``Log.compact``."""
    import ast
    from pathlib import Path

    import s3log.integrations.langgraph as package

    runs = []
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                runs += [(path.name, fn.name) for node in ast.walk(fn) if isinstance(node, ast.Call)
                         and isinstance(node.func, ast.Attribute) and node.func.attr == "run"]
    assert runs == []
