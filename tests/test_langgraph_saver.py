"""The LangGraph savers: pending-write order, DeltaChannel-safe prune, delete_for_runs and history,
``list``'s filters, the async lock per event loop, strict runs, thread ids, ``copy_thread`` and
threads whose session expired.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

import s3log
from s3log.config import LogConfig
from s3log.env import Env
from s3log.integrations.langgraph import AsyncS3LogSaver, S3LogSaver
from tests.delete_hooks import Clock
from tests.helpers import one_node_graph


def _sync_saver() -> S3LogSaver:
    return S3LogSaver(s3log.Log(s3log.MemoryStore()))


def _cfg(tid: str, cid: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ""}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def _concat(state: Sequence[str], writes: Sequence[Sequence[str]]) -> list[str]:
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


def _delta_graph(saver: Any, *, snapshot_frequency: int, parallel: bool,
                 wait_for_c: threading.Event | None = None) -> Any:
    """START -> a -> (b, c) -> END (``parallel``), else a -> b -> c, all appending to a
    DeltaChannel whose reducer is order-sensitive. ``wait_for_c``: b returns only once
    it is set (c's writes stored first)."""

    # Functional form: the channel is built here, and annotations are strings in this module.
    State = TypedDict(  # noqa: UP013
        "State", {"log": Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=snapshot_frequency)]})

    def b(_: Any) -> dict[str, list[str]]:
        if wait_for_c is not None:
            wait_for_c.wait(30)  # a bound against a hang, not a timed assertion
        return {"log": ["b"]}

    g = StateGraph(State)
    g.add_node("a", lambda _: {"log": ["a"]})
    g.add_node("b", b)
    g.add_node("c", lambda _: {"log": ["c"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    if parallel:
        g.add_edge("a", "c")
        g.add_edge("b", END)
    else:
        g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=saver)


def _writes_in_reverse_arrival(saver: Any, call: Any) -> Any:
    cfg = call(saver.aput if isinstance(saver, AsyncS3LogSaver) else saver.put, _cfg("t"),
               generate_checkpoint(), generate_metadata(), {})
    put_writes = saver.aput_writes if isinstance(saver, AsyncS3LogSaver) else saver.put_writes
    # Arrival order: c's task, then b's, then an input write (no task path).
    call(put_writes, cfg, [("log", "c1"), ("log", "c2")], "task-9", "~__pregel_pull, c")
    call(put_writes, cfg, [("log", "b1")], "task-1", "~__pregel_pull, b")
    call(put_writes, cfg, [("log", "in")], "task-5", "")
    get = saver.aget_tuple if isinstance(saver, AsyncS3LogSaver) else saver.get_tuple
    return call(get, cfg)


def test_get_tuple_returns_pending_writes_in_writes_sort_key_order() -> None:
    tup = _writes_in_reverse_arrival(_sync_saver(), lambda fn, *a: fn(*a))
    assert [v for _, _, v in tup.pending_writes] == ["in", "b1", "c1", "c2"]


def test_aget_tuple_returns_pending_writes_in_writes_sort_key_order() -> None:
    async def main() -> Any:
        saver = AsyncS3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))

        async def call(fn: Any, *a: Any) -> Any:
            return await fn(*a)

        cfg = await saver.aput(_cfg("t"), generate_checkpoint(), generate_metadata(), {})
        await saver.aput_writes(cfg, [("log", "c1"), ("log", "c2")], "task-9", "~__pregel_pull, c")
        await saver.aput_writes(cfg, [("log", "b1")], "task-1", "~__pregel_pull, b")
        await saver.aput_writes(cfg, [("log", "in")], "task-5", "")
        return await saver.aget_tuple(cfg)

    tup = asyncio.run(main())
    assert [v for _, _, v in tup.pending_writes] == ["in", "b1", "c1", "c2"]


class _SignalsC(S3LogSaver):
    """Sets ``c_stored`` once c's writes are stored, so b's arrive after them."""

    c_stored: threading.Event

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        super().put_writes(config, writes, task_id, task_path)
        if any(v == ["c"] for _, v in writes):
            self.c_stored.set()


def test_parallel_nodes_rebuild_a_delta_channel_in_the_order_the_run_applied() -> None:
    saver = _SignalsC(s3log.Log(s3log.MemoryStore()))
    saver.c_stored = threading.Event()
    app = _delta_graph(saver, snapshot_frequency=100, parallel=True, wait_for_c=saver.c_stored)
    cfg = {"configurable": {"thread_id": "t"}}
    ran = app.invoke({"log": ["in"]}, cfg)
    memory = _delta_graph(InMemorySaver(), snapshot_frequency=100, parallel=True)
    expected = memory.invoke({"log": ["in"]}, cfg)
    assert ran == expected == {"log": ["in", "a", "b", "c"]}
    # Rebuilt from the stored writes (no snapshot yet): the same order as the run.
    assert app.get_state(cfg).values == expected


def _delta_thread(saver: Any, runs: int) -> tuple[Any, Any, list[str]]:
    app = _delta_graph(saver, snapshot_frequency=7, parallel=False)
    cfg = {"configurable": {"thread_id": "t"}}
    run_ids = [f"run-{i}" for i in range(runs)]
    for i, rid in enumerate(run_ids):
        app.invoke({"log": [f"in{i}"]}, {**cfg, "metadata": {"run_id": rid}})
    return app, cfg, run_ids


def _ids(saver: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": "t"}})]


def test_prune_keep_latest_keeps_the_ancestors_a_delta_channel_is_rebuilt_from() -> None:
    saver = _sync_saver()
    app, cfg, _ = _delta_thread(saver, 5)
    before = app.get_state(cfg).values
    assert before["log"][-4:] == ["in4", "a", "b", "c"]
    stored = _ids(saver)
    # The latest checkpoint holds no value for the channel: it is rebuilt from ancestors.
    assert "log" not in saver.get_tuple(cfg).checkpoint["channel_values"]
    saver.prune(["t"], keep=1)
    assert app.get_state(cfg).values == before
    # Only the chain back to the nearest snapshot is kept, not the whole thread.
    kept = _ids(saver)
    assert 1 < len(kept) < len(stored)
    # The thread goes on from there.
    app.invoke({"log": ["in5"]}, cfg)
    assert app.get_state(cfg).values["log"] == before["log"] + ["in5", "a", "b", "c"]


def test_aprune_keeps_the_ancestors_a_delta_channel_is_rebuilt_from() -> None:
    async def main() -> tuple[Any, Any]:
        saver = AsyncS3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))
        app = _delta_graph(saver, snapshot_frequency=7, parallel=False)
        cfg = {"configurable": {"thread_id": "t"}}
        for i in range(5):
            await app.ainvoke({"log": [f"in{i}"]}, cfg)
        before = (await app.aget_state(cfg)).values
        await saver.aprune(["t"], keep=1)
        return before, (await app.aget_state(cfg)).values

    before, after = asyncio.run(main())
    assert before["log"] and after == before


def test_delete_for_runs_keeps_what_a_surviving_delta_channel_needs() -> None:
    saver = _sync_saver()
    app, cfg, run_ids = _delta_thread(saver, 5)
    before = app.get_state(cfg).values
    stored = _ids(saver)
    saver.delete_for_runs(run_ids[:-1])
    assert app.get_state(cfg).values == before
    assert len(_ids(saver)) < len(stored)
    # Without delta channels, a run's checkpoints all go (as before).
    plain = _sync_saver()
    for i, rid in enumerate(["r0", "r1"]):
        plain.put(_cfg("t"), generate_checkpoint(), generate_metadata(step=i, run_id=rid), {})
    plain.delete_for_runs(["r0"])
    assert [t.metadata["run_id"] for t in plain.list(_cfg("t"))] == ["r1"]


def test_list_filters_on_the_configs_checkpoint_id_and_limit_zero_yields_nothing() -> None:
    saver = _sync_saver()
    configs = [saver.put(_cfg("t"), generate_checkpoint(), generate_metadata(step=i), {}) for i in range(3)]
    middle = configs[1]["configurable"]["checkpoint_id"]
    got = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("t", middle))]
    assert got == [middle]
    assert [t.config["configurable"]["checkpoint_id"]
            for t in saver.list({"configurable": {"thread_id": "t", "checkpoint_id": middle}})] == [middle]
    assert list(saver.list(_cfg("t"), limit=0)) == []
    assert list(saver.list(_cfg("t"), limit=-1)) == []
    assert len(list(saver.list(_cfg("t"), limit=2))) == 2

    async def alist() -> tuple[list[Any], list[Any]]:
        asaver = AsyncS3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))
        cfgs = [await asaver.aput(_cfg("t"), generate_checkpoint(), generate_metadata(step=i), {})
                for i in range(2)]
        one = [t async for t in asaver.alist(cfgs[0])]
        none = [t async for t in asaver.alist(_cfg("t"), limit=0)]
        return [t.config for t in one], none

    one, none = asyncio.run(alist())
    assert len(one) == 1 and none == []


class _YieldingStore(s3log.AsyncMemoryStore):
    """Suspends in every conditional PUT, so a second task meets the saver's lock held."""

    async def put_if_match(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return await super().put_if_match(*args, **kwargs)

    async def put_if_absent(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return await super().put_if_absent(*args, **kwargs)


def test_async_saver_serves_contended_appends_on_one_loop_after_another() -> None:

    State = TypedDict("State", {"steps": Annotated[list[str], operator.add]})  # noqa: UP013
    g = StateGraph(State)
    g.add_node("b", lambda _: {"steps": ["b"]})
    g.add_node("c", lambda _: {"steps": ["c"]})
    g.add_edge(START, "b")
    g.add_edge(START, "c")
    g.add_edge("b", END)
    g.add_edge("c", END)
    saver = AsyncS3LogSaver(s3log.AsyncLog(_YieldingStore()))
    app = g.compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "t"}}

    async def request(i: int) -> Any:
        # Two put_writes at once on the thread's session: the second waits for the lock.
        cp = await saver.aget_tuple(cfg)
        assert cp is not None
        await asyncio.gather(saver.aput_writes(cp.config, [("x", i)], f"w{i}a", "~a"),
                             saver.aput_writes(cp.config, [("x", i)], f"w{i}b", "~b"))
        return await app.ainvoke({"steps": [str(i)]}, cfg)

    asyncio.run(app.ainvoke({"steps": ["start"]}, cfg))
    for i in range(3):  # a new loop each time
        out = asyncio.run(request(i))
        assert out["steps"][-3:] == [str(i), "b", "c"]
    # The locks of closed loops are not kept.
    assert len(saver._locks) <= 1


def _raw(store: Any, tid: str = "t") -> list[tuple[str, str]]:
    from s3log.integrations.langgraph import session_for

    view = s3log.Log(store).read(session_for(tid, ""))
    return [(e.kind, e.data.get("id") or e.data["checkpoint_id"]) for e in view.entries]


def test_strict_savers_taking_turns_on_a_thread_build_on_what_they_read() -> None:
    store = s3log.MemoryStore()
    apps = [one_node_graph(S3LogSaver(s3log.Log(store), strict=True)) for _ in range(2)]
    cfg = {"configurable": {"thread_id": "t"}}
    for i in range(4):  # A, B, A, B: never at once, each reading the thread first
        out = apps[i % 2].invoke({"steps": [f"req{i}"]}, cfg)
        assert out["steps"][-2:] == [f"req{i}", "a"]
    assert apps[0].get_state(cfg).values["steps"] == ["req0", "a", "req1", "a", "req2", "a", "req3", "a"]


class _Interleaved(S3LogSaver):
    """After its read of the thread, another server's saver appends a checkpoint."""

    other: S3LogSaver

    def get_tuple(self, config: Any) -> Any:
        tup = super().get_tuple(config)
        if tup is not None:
            self.other.put(tup.config, generate_checkpoint(), generate_metadata(), {})
        return tup


def test_strict_refuses_a_run_whose_thread_moved_since_its_read_and_stores_none_of_its_writes() -> None:
    store = s3log.MemoryStore()
    plain = one_node_graph(S3LogSaver(s3log.Log(store), strict=True))
    cfg = {"configurable": {"thread_id": "t"}}
    plain.invoke({"steps": ["first"]}, cfg)
    saver = _Interleaved(s3log.Log(store), strict=True)
    saver.other = S3LogSaver(s3log.Log(store))
    before = _raw(store)
    with pytest.raises(s3log.ConflictError):
        one_node_graph(saver).invoke({"steps": ["second"]}, cfg)
    after = _raw(store)
    stored = {cid for kind, cid in after if kind == "lg.checkpoint"}
    # The other server's checkpoint only: nothing of the refused run, no orphan writes.
    assert len(after) == len(before) + 1 and after[-1][0] == "lg.checkpoint"
    assert all(cid in stored for kind, cid in after if kind == "lg.writes")


def test_strict_refuses_the_writes_of_a_refused_checkpoint() -> None:
    store = s3log.MemoryStore()
    a = S3LogSaver(s3log.Log(store), strict=True)
    b = S3LogSaver(s3log.Log(store))
    first = a.put(_cfg("t"), generate_checkpoint(), generate_metadata(), {})
    assert a.get_tuple(_cfg("t")) is not None  # a read the thread here
    b.put(first, generate_checkpoint(), generate_metadata(), {})
    refused = generate_checkpoint()
    with pytest.raises(s3log.ConflictError):
        a.put(first, refused, generate_metadata(), {})
    with pytest.raises(s3log.ConflictError, match="refused"):
        a.put_writes(_cfg("t", refused["id"]), [("x", 1)], "task", "~a")
    assert [kind for kind, _ in _raw(store)] == ["lg.checkpoint", "lg.checkpoint"]
    # Having read the thread again, a builds on it.
    assert a.get_tuple(_cfg("t")) is not None
    a.put(first, generate_checkpoint(), generate_metadata(), {})
    assert len(_raw(store)) == 3


class _FailOnce(s3log.MemoryStore):
    """Refuses the next conditional PUT of a head with an error no commit retries."""

    armed = False

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if self.armed:
            self.armed = False
            raise PermissionError("injected: AccessDenied")
        return super().put_if_match(key, body, etag)


def test_strict_saver_drops_its_writer_after_a_failed_commit() -> None:
    store = _FailOnce()
    saver = S3LogSaver(s3log.Log(store), strict=True)
    first = saver.put(_cfg("t"), generate_checkpoint(), generate_metadata(), {})
    store.armed = True
    failed = generate_checkpoint()
    with pytest.raises(PermissionError):
        saver.put(first, failed, generate_metadata(), {})
    ok = generate_checkpoint()
    saver.put(first, ok, generate_metadata(), {})
    # The failed put is not stored by the next one's commit.
    assert [cid for _, cid in _raw(store)] == [first["configurable"]["checkpoint_id"], ok["id"]]


@pytest.mark.parametrize("tid", [None, "\ud800", 42], ids=["None", "lone-surrogate", "int"])
def test_bad_thread_ids_are_refused_naming_the_argument_before_anything_is_written(tid: Any) -> None:
    from s3log.integrations import IntegrationError

    store = s3log.MemoryStore()
    saver = S3LogSaver(s3log.Log(store))
    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    with pytest.raises(IntegrationError, match="thread_id"):
        saver.put(cfg, generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(IntegrationError, match="thread_id"):
        saver.get_tuple(cfg)
    if not isinstance(tid, int):  # LangGraph passes a graph's int thread id on as text
        with pytest.raises(IntegrationError, match="thread_id"):
            one_node_graph(saver).invoke({"steps": ["x"]}, {"configurable": {"thread_id": tid}})
    saver.put(_cfg("src"), generate_checkpoint(), generate_metadata(), {})
    objects = dict(store._objects)
    with pytest.raises(IntegrationError, match="target_thread_id"):
        saver.copy_thread("src", tid)
    with pytest.raises(IntegrationError, match="thread_ids"):
        saver.prune(["src", tid])
    with pytest.raises(IntegrationError, match="checkpoint_ns"):
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": tid}}, generate_checkpoint(),
                  generate_metadata(), {})
    assert store._objects == objects  # nothing written
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["src"]


def test_copy_thread_onto_a_target_holding_one_namespace_copies_nothing() -> None:
    saver = _sync_saver()
    for ns in ("", "sub:1", "sub:2"):
        saver.put({"configurable": {"thread_id": "src", "checkpoint_ns": ns}}, generate_checkpoint(),
                  generate_metadata(), {})
    saver.put({"configurable": {"thread_id": "dst", "checkpoint_ns": "sub:2"}}, generate_checkpoint(),
              generate_metadata(), {})
    with pytest.raises(s3log.SessionExists):
        saver.copy_thread("src", "dst")
    assert [t.config["configurable"]["checkpoint_ns"] for t in saver.list({"configurable": {"thread_id": "dst"}})
            ] == ["sub:2"]
    saver.copy_thread("src", "fresh")
    assert len(list(saver.list({"configurable": {"thread_id": "fresh"}}))) == 3


@pytest.mark.parametrize("runs", [3, 12])
def test_delta_channel_history_is_upstreams_answer_from_one_read(runs: int) -> None:
    """LangGraph's default ``get_delta_channel_history`` calls ``get_tuple`` per ancestor,
    and each reads the whole session: GETs grew with the square of the thread (31 for
    10 invocations, 484 for 40). The saver's own walk answers the same from one read."""
    from langgraph.checkpoint.base import BaseCheckpointSaver

    store = s3log.MemoryStore()
    saver = S3LogSaver(s3log.Log(store))
    app, cfg, _ = _delta_thread(saver, runs)
    ids = _ids(saver)
    for cid in (None, ids[len(ids) // 2], ids[-1]):
        conf = _cfg("t", cid)
        upstream = BaseCheckpointSaver.get_delta_channel_history(saver, config=conf, channels=["log", "other"])
        store.requests.reset()
        ours = saver.get_delta_channel_history(config=conf, channels=["log", "other"])
        assert ours == upstream
        assert store.requests.snapshot().get("GET", 0) <= 2  # the head, and a segment if any
    assert saver.get_delta_channel_history(config=_cfg("t"), channels=[]) == {}
    assert saver.get_delta_channel_history(config=_cfg("nobody"), channels=["log"]) == {"log": {"writes": []}}
    assert app.get_state(cfg).values["log"][-3:] == ["a", "b", "c"]


def test_async_delta_channel_history_is_upstreams_answer() -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    async def main() -> None:
        saver = AsyncS3LogSaver(s3log.AsyncLog(s3log.AsyncMemoryStore()))
        app = _delta_graph(saver, snapshot_frequency=3, parallel=True)
        cfg = {"configurable": {"thread_id": "t"}}
        for i in range(4):
            await app.ainvoke({"log": [f"in{i}"]}, cfg)
        upstream = await BaseCheckpointSaver.aget_delta_channel_history(saver, config=_cfg("t"), channels=["log"])
        assert await saver.aget_delta_channel_history(config=_cfg("t"), channels=["log"]) == upstream
        assert upstream["log"]["writes"]

    asyncio.run(main())


T0 = 1_800_000_000_000
DAY = 86_400_000


def _run_across_expiry(strict: bool) -> Any:
    """A one-node graph run on thread t1, its session expired 40 days later, then the graph
    run again through a new saver: the state the thread ends with."""
    from s3log.integrations.langgraph import S3LogSaver

    clock = Clock(T0)
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(env=Env.deterministic(1, clock)))
    cfg = {"configurable": {"thread_id": "t1"}}
    one_node_graph(S3LogSaver(log, strict=strict)).invoke({"steps": ["start"]}, cfg)
    clock.t += 40 * DAY
    assert len(log.expire(idle_for=timedelta(days=30)).expired) == 1
    app = one_node_graph(S3LogSaver(log, strict=strict))
    app.invoke({"steps": ["again"]}, cfg)
    return app.get_state(cfg).values


def test_a_langgraph_thread_used_after_expiry_persists_its_checkpoints() -> None:
    pytest.importorskip("langgraph")
    assert _run_across_expiry(strict=False) == {"steps": ["again", "a"]}


def test_a_strict_langgraph_saver_starts_an_expired_thread_afresh() -> None:
    pytest.importorskip("langgraph")
    # A strict saver must not loop for ever (Open saying expired, Create saying taken).
    assert _run_across_expiry(strict=True) == {"steps": ["again", "a"]}
