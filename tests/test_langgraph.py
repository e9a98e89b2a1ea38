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
from s3log.integrations import IntegrationError, _log_from_url
from s3log.integrations.langgraph import AsyncS3LogSaver, S3LogSaver, SyncCallError
from s3log.testing.plugin import LocalS3


async def _sync_saver(server: LocalS3) -> AsyncGenerator[Any, None]:
    yield S3LogSaver(s3log.Log(s3log.S3Store(server.create_bucket(), endpoint_url=server.endpoint_url)))


async def _async_saver(server: LocalS3) -> AsyncGenerator[Any, None]:
    store = s3log.AsyncS3Store(server.create_bucket(), endpoint_url=server.endpoint_url)
    try:
        yield AsyncS3LogSaver(s3log.AsyncLog(store))
    finally:
        await store.aclose()


@pytest.mark.parametrize("make", [_sync_saver, _async_saver], ids=["S3LogSaver", "AsyncS3LogSaver"])
def test_passes_langgraph_checkpoint_conformance(s3log_server: LocalS3, make: Any) -> None:
    @checkpointer_test(name=make.__name__)
    async def factory() -> AsyncGenerator[Any, None]:
        async for saver in make(s3log_server):
            yield saver

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


def _shape(history: list[Any]) -> list[tuple[int, Any, tuple[str, ...]]]:
    return [(h.metadata["step"], h.metadata["source"], tuple(sorted(h.values.get("steps", [])))) for h in history]


def test_graph_on_from_conn_string_savers_sync_and_async(s3log_server: LocalS3,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3log_server.create_bucket()
    cfg = {"configurable": {"thread_id": "t"}}
    reference = _graph(InMemorySaver())
    for _ in range(2):
        reference.invoke({"steps": ["start"]}, cfg)
    expected = _shape(list(reference.get_state_history(cfg)))

    async def run_async() -> list[Any]:
        url = f"s3://{bucket}/lg-async?endpoint={s3log_server.endpoint_url}"
        async with AsyncS3LogSaver.from_conn_string(url) as saver:
            await saver.setup()
            app = _graph(saver)
            for _ in range(2):
                await app.ainvoke({"steps": ["start"]}, cfg)
            return [h async for h in app.aget_state_history(cfg)]

    assert _shape(asyncio.run(run_async())) == expected

    # The endpoint from the environment, and a prefix of its own: a separate history.
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3log_server.endpoint_url)
    with S3LogSaver.from_conn_string(f"s3://{bucket}/lg-sync") as saver:
        saver.setup()
        app = _graph(saver)
        for _ in range(2):
            app.invoke({"steps": ["start"]}, cfg)
        assert _shape(list(app.get_state_history(cfg))) == expected
    # Both histories are stored where the URLs said.
    for prefix in ("lg-async", "lg-sync"):
        log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url), prefix=prefix)
        assert len(list(S3LogSaver(log).list(cfg))) == len(expected)


def test_async_saver_reads_and_writes_through_the_async_log(s3log_server: LocalS3,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The async saver awaits its AsyncLog: no worker threads."""
    bucket = s3log_server.create_bucket()
    cfg = {"configurable": {"thread_id": "t"}}

    def no_threads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the async saver ran something in a thread")

    async def main() -> None:
        store = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)
        try:
            saver = AsyncS3LogSaver(s3log.AsyncLog(store))
            await _graph(saver).ainvoke({"steps": ["x"]}, cfg)
            assert store.requests["PUT"] > 0  # the writes went through the async store
            store.requests.reset()
            with monkeypatch.context() as m:
                m.setattr(asyncio, "to_thread", no_threads)
                m.setattr(asyncio.get_running_loop(), "run_in_executor", no_threads)
                latest = await saver.aget_tuple(cfg)
                history = [t async for t in saver.alist(cfg)]
                await saver.aput_writes(latest.config, [("steps", ["w"])], "task-1")
                await saver.acopy_thread("t", "t2")
                await saver.adelete_thread("t2")
            assert latest is not None and sorted(latest.checkpoint["channel_values"]["steps"]) == ["a", "b", "c", "x"]
            assert len(history) == 4
            assert store.requests["GET"] > 0
        finally:
            await store.aclose()

    asyncio.run(main())


def test_async_saver_sync_methods_only_from_another_thread(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    cfg = {"configurable": {"thread_id": "t"}}

    async def main() -> None:
        store = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)
        try:
            saver = AsyncS3LogSaver(s3log.AsyncLog(store))
            app = _graph(saver)
            await app.ainvoke({"steps": ["x"]}, cfg)
            with pytest.raises(SyncCallError, match="async interface"):
                saver.get_tuple(cfg)  # on the loop's own thread: would deadlock
            with pytest.raises(asyncio.InvalidStateError):
                app.get_state(cfg)
            # From a worker thread the sync methods submit to the loop and wait.
            state = await asyncio.to_thread(app.get_state, cfg)
            assert sorted(state.values["steps"]) == ["a", "b", "c", "x"]
            assert len(await asyncio.to_thread(lambda: list(saver.list(cfg)))) == 4
        finally:
            await store.aclose()

    asyncio.run(main())
    # No loop running at all: refused, instead of waiting forever.
    saver = AsyncS3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))
    with pytest.raises(SyncCallError):
        _graph(saver).invoke({"steps": ["x"]}, cfg)


def test_a_saver_refuses_the_other_kind_of_log_at_construction() -> None:
    with pytest.raises(IntegrationError, match="AsyncS3LogSaver"):
        S3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))  # type: ignore[arg-type]
    with pytest.raises(IntegrationError, match="S3LogSaver"):
        AsyncS3LogSaver(s3log.Log(s3log.MemoryStore()))  # type: ignore[arg-type]
    with pytest.raises(IntegrationError, match=r"s3log\.Log"):
        S3LogSaver(s3log.MemoryStore())  # type: ignore[arg-type]


def test_log_from_url() -> None:
    log = _log_from_url("s3://my-bucket/some/prefix?endpoint=http://127.0.0.1:9/&region=eu-west-3")
    assert isinstance(log, s3log.Log)
    assert (log.store.bucket, log.prefix) == ("my-bucket", "some/prefix")  # the log owns the prefix
    assert log.store.client.meta.endpoint_url == "http://127.0.0.1:9/"
    assert log.store.client.meta.region_name == "eu-west-3"
    assert _log_from_url("s3://b").prefix == ""  # a URL's path is the prefix, literally (s3log.open_log)
    alog = _log_from_url("s3://b/p", async_=True)
    assert isinstance(alog, s3log.AsyncLog) and alog.prefix == "p"


@pytest.mark.parametrize("url", [
    "http://bucket/prefix", "s3://", "s3:///prefix", "s3://b/p?endpoint=", "s3://b/p?bogus=1",
    "s3://b/p?region=a&region=b", "s3://user@b/p", "s3://b/p#frag", "bucket/prefix",
])
def test_log_from_url_refuses_bad_urls(url: str) -> None:
    with pytest.raises(IntegrationError, match="URL"):
        _log_from_url(url)
    with pytest.raises(IntegrationError, match="URL"), S3LogSaver.from_conn_string(url):
        pass
