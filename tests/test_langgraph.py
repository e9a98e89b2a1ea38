"""The LangGraph checkpointer: the conformance suite over HTTP, and a real graph."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncGenerator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import s3log
from s3log.integrations.langgraph import S3LogSaver
from s3log.testing import LocalS3


def test_passes_langgraph_checkpoint_conformance(s3log_server: LocalS3) -> None:
    @checkpointer_test(name="S3LogSaver")
    async def factory() -> AsyncGenerator[S3LogSaver, None]:
        bucket = s3log_server.create_bucket()
        yield S3LogSaver(s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)))

    report = asyncio.run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if r.passed is False}
    assert not failures, failures
    for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread", "copy_thread"):
        assert report.results[cap].passed is True, cap


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    g = StateGraph(State)
    g.add_node("a", lambda s: {"steps": ["a"]})
    g.add_node("b", lambda s: {"steps": ["b"]})
    g.add_node("c", lambda s: {"steps": ["c"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")  # b and c run in parallel: concurrent put_writes
    g.add_edge("b", END)
    g.add_edge("c", END)
    return g.compile(checkpointer=saver)


def _history_shape(app: Any, thread: str) -> list[tuple[int, Any, tuple[str, ...]]]:
    out = []
    for snap in app.get_state_history({"configurable": {"thread_id": thread}}):
        out.append((snap.metadata["step"], snap.metadata["source"], tuple(sorted(snap.values.get("steps", [])))))
    return out


@pytest.mark.parametrize("thread", ["plain", "with/slash and spaces"])
def test_graph_time_travel_and_fork_match_the_in_memory_saver(s3log_server: LocalS3, thread: str) -> None:
    log = s3log.Log(s3log.S3Store(s3log_server.create_bucket(), endpoint_url=s3log_server.endpoint_url))
    shapes = []
    for saver in (S3LogSaver(log), InMemorySaver()):
        app = _graph(saver)
        cfg = {"configurable": {"thread_id": thread}}
        for _ in range(3):
            app.invoke({"steps": ["start"]}, cfg)
        history = list(app.get_state_history(cfg))
        # Time travel: fork from the checkpoint after the first invoke's "a" step.
        past = next(h for h in reversed(history) if h.values.get("steps") == ["start", "a"])
        forked = app.update_state(past.config, {"steps": ["edited"]})
        app.invoke(None, forked)
        shapes.append(_history_shape(app, thread))
        parents = [(h.config["configurable"]["checkpoint_id"], (h.parent_config or {}).get("configurable", {})
                    .get("checkpoint_id")) for h in app.get_state_history(cfg)]
        ids = {c for c, _ in parents}
        assert all(p is None or p in ids for _, p in parents)
    assert shapes[0] == shapes[1]
