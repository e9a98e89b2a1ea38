"""Session 8's hostile review: each test failed before its fix.

- A commit refused definitively (nothing of it stored) left its entries "uncertain", so
  the next commit took another writer's equal entries for its own (decision 0025).
- A fork whose child's head PUT ended undecided was forked a second time by the next
  commit: the entries were stored in two sessions.
- Entries that landed in the parent were folded into the writer's own state before the
  commit was over: when it then failed, the next commit folded them again, and a fork's
  seed carried them twice.
- ``append_latest`` wrote onto the tombstone of an expired session (entries acknowledged,
  unreadable, then collected with it).
- ``Log.delete`` listed the session's folder after deleting its head, and so deleted a
  session created again under the same id meanwhile.
- ``expire`` stamped every tombstone with the time its sweep began, so a long sweep left
  readers no grace; a reader meeting a session expired or deleted under it was told the
  chain was corrupt.
- ``s3log verify --all`` called every expired session broken.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import pytest

import s3log
from s3log import decide
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import SessionExists, StoreError
from s3log.faults import AsyncFaultyStore, FaultyStore
from s3log.testing import LocalS3
from tests.tombstones import tombstone_idle

T0 = 1_800_000_000_000
DAY = 86_400_000
MIN = 60_000


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def _fast(attempts: int = 2) -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=attempts, initial=0.0001, max_backoff=0.0002, max_time=1.0))


# ------------------------------------------------------------ which replies leave doubt


@pytest.mark.parametrize(("reply", "applied"), [
    (decide.Reply.PRECONDITION, False),
    (decide.Reply.CONFLICT, False),
    (decide.Reply.NOT_FOUND, False),
    (decide.Reply.UNKNOWN, True),
    (decide.Reply.FATAL, True),
])
def test_which_replies_say_a_put_was_not_applied(reply: decide.Reply, applied: bool) -> None:
    assert decide.may_have_applied(reply) is applied


# ------------------------------------------------------------ definite refusals (0025)


def test_entries_refused_by_session_exists_stay_pending() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log_a, log_b = s3log.AsyncLog(store), s3log.AsyncLog(store)
        sid = log_a.config.env.new_id()
        w_a = await log_a.create(sid, lazy=True)
        w_b = await log_b.create(sid, lazy=True)
        await w_b.append_durable("pop", {"item": 1}, ts=1_000)
        t = w_a.submit("pop", {"item": 1}, ts=1_000)
        with pytest.raises(SessionExists):
            await w_a.wait(t)  # definite: A stored nothing
        assert w_a.status(t) == "pending"
        # Waiting again must not return B's equal entry as A's (nor adopt B's session).
        with pytest.raises(SessionExists):
            await w_a.wait(t)
        assert w_a.withdraw(t)

    asyncio.run(main())


def lost_head_reply(armed: Callable[[], bool]) -> Any:
    """A fault plan: while ``armed()``, a head If-Match PUT lands with its reply lost and
    re-reading the head fails (503): the commit ends with its outcome unknown."""

    def plan(method: str, key: str) -> Any:
        if not armed():
            return None
        if method == "put_if_match":
            return "timeout-landed"
        return "503" if method == "get" and key.endswith("/head") else None

    return plan


def test_a_store_error_on_the_head_put_still_leaves_the_entries_uncertain() -> None:
    # A lost reply, and the re-read fails too: the PUT may have been applied.
    inner = s3log.MemoryStore()
    state = {"on": False}
    plan = lost_head_reply(lambda: state["on"])

    log = s3log.Log(FaultyStore(inner, plan), config=_fast(1))
    w = log.create()
    w.append("k", 0)
    w.commit()
    t = w.submit("k", 1)
    state["on"] = True
    with pytest.raises(StoreError):
        w.commit()
    assert w.status(t) == "uncertain"
    assert not w.withdraw(t)
    state["on"] = False
    assert w.wait(t).data == 1
    assert [e.data for e in s3log.Log(inner).read(w.session_id).entries] == [0, 1]


# ------------------------------------------------------------ a fork left undecided


def _everywhere(entries_of: Callable[[str], list[s3log.Entry]], ids: list[str], data: Any) -> list[str]:
    return [s for s in ids for e in entries_of(s) if e.kind == "k" and e.data == data]


def test_a_fork_whose_head_landed_unacknowledged_is_not_forked_again() -> None:
    async def main() -> None:
        inner = s3log.AsyncMemoryStore()
        log_b = s3log.AsyncLog(inner, config=_fast())
        armed: dict[str, Any] = {"on": False, "child_head": None, "gets": 0}

        def plan(method: str, key: str) -> Any:
            if not armed["on"]:
                return None
            if method == "put_if_absent" and key.endswith("/head") and armed["child_head"] is None \
                    and sid not in key:
                armed["child_head"] = key
                return "timeout-landed"  # the fork's head lands, its reply is lost
            if method == "get" and key == armed["child_head"] and armed["gets"] < 4:
                armed["gets"] += 1
                return "503"  # ...and re-reading it fails
            return None

        log_a = s3log.AsyncLog(AsyncFaultyStore(inner, plan), config=_fast())
        w_a = await log_a.create()
        sid = w_a.session_id
        await w_a.append_durable("k", "a0")
        w_b = await log_b.open(sid)
        await w_b.append_durable("k", "b0")  # A is behind: its next commit forks
        armed["on"] = True
        t = w_a.submit("k", "x")
        with pytest.raises(StoreError):
            await w_a.wait(t)
        assert w_a.status(t) == "uncertain"
        armed["on"] = False
        later = w_a.submit("k", "y")  # queued after the undecided fork: goes on in that child
        assert (await w_a.wait(t)).data == "x"
        assert (await w_a.wait(later)).data == "y"
        ids = await log_b.list_session_ids()
        stored = {s: (await log_b.read(s)).entries for s in ids}
        assert _everywhere(stored.__getitem__, ids, "x") == [w_a.session_id]
        assert _everywhere(stored.__getitem__, ids, "y") == [w_a.session_id]
        assert len(await log_b.children(sid)) == 1

    asyncio.run(main())


class _HangAfterChildHead(s3log.AsyncMemoryStore):
    """The create-only PUT of a fork child's head lands, then its reply never comes."""

    def __init__(self) -> None:
        super().__init__()
        self.parent = "?"
        self.armed = False
        self.landed = asyncio.Event()

    async def put_if_absent(self, key: str, body: bytes) -> str:
        etag = await super().put_if_absent(key, body)
        if self.armed and key.endswith("/head") and self.parent not in key:
            self.landed.set()
            await asyncio.Event().wait()  # in flight when the loop closes
        return etag


def test_a_fork_abandoned_with_the_loop_is_continued_not_forked_again() -> None:
    box: dict[str, Any] = {}

    async def first() -> None:
        store = _HangAfterChildHead()
        w = await s3log.AsyncLog(store).create()
        store.parent = w.session_id
        other = await s3log.AsyncLog(store).open(w.session_id)
        await other.append_durable("k", "other")
        store.armed = True
        t = w.submit("k", "x")
        asyncio.get_running_loop().create_task(w.wait(t))
        await store.landed.wait()
        box.update(store=store, w=w, t=t)

    asyncio.run(first())

    async def second() -> None:
        store, w, t = box["store"], box["w"], box["t"]
        store.armed = False
        assert w.status(t) == "uncertain"
        await w.wait(t)
        log = s3log.AsyncLog(store)
        ids = await log.list_session_ids()
        stored = {s: (await log.read(s)).entries for s in ids}
        assert _everywhere(stored.__getitem__, ids, "x") == [w.session_id]

    asyncio.run(second())


def test_entries_landed_before_a_failed_fork_are_in_the_seed_once() -> None:
    inner = s3log.MemoryStore()
    faults = {"lost": False, "marker": False}

    def plan(method: str, key: str) -> Any:
        if faults["lost"]:  # the head PUT lands, its reply is lost, re-reading fails
            if method == "put_if_match":
                return "timeout-landed"
            if method == "get" and key.endswith("/head"):
                return "503"
        if faults["marker"] and method == "put_if_absent" and "/forks/" in key:
            return "503"  # the fork's marker cannot be written: that commit raises
        return None

    log = s3log.Log(FaultyStore(inner, plan), config=_fast(2))
    w = log.create()
    w.append("k", "a0")
    w.commit()
    t = w.submit("k", "x")
    faults["lost"] = True
    with pytest.raises(StoreError):
        w.commit()  # x is stored; this writer does not know it
    faults["lost"] = False
    b = s3log.Log(inner).open(w.session_id)
    b.append("k", "b0")
    b.commit()  # another writer builds on x
    w.append("k", "y")
    faults["marker"] = True
    with pytest.raises(StoreError):
        w.commit()  # finds x landed, forks for y, and fails to
    faults["marker"] = False
    assert w.wait(t).data == "x"
    w.commit()
    child = s3log.Log(inner).read(w.session_id)
    assert child.head.parent is not None and child.head.parent.session == b.session_id
    seed = [m["data"] for m in child.entries[0].data["seed"]]
    assert seed == ["a0", "x"]
    assert [m["data"] for m in w.state] == ["a0", "x", "y"]


# ------------------------------------------------------------ retention and deletion


def _expired_world(sid: str = "thread-7") -> tuple[s3log.MemoryStore, Clock, s3log.Log]:
    clock, store = Clock(T0), s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, clock)))
    w = log.create(sid)
    w.append("k", 1)
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [sid]
    return store, clock, log


def test_append_latest_does_not_write_onto_a_tombstone() -> None:
    _store, clock, log = _expired_world()
    with pytest.raises(s3log.SessionExpired):
        log.append_latest("thread-7", [("msg", "after expiry")])
    # With create_meta the id starts again, readable, and survives gc.
    result = log.append_latest("thread-7", [("msg", "again")], create_meta={"n": 1})
    assert [e.data for e in log.read("thread-7").entries] == ["again"]
    clock.t += 2 * 3_600_000
    log.gc(older_than_ms=3_600_000)
    view = log.read("thread-7")
    assert [e.hash for e in view.entries] == [e.hash for e in result.acked]
    assert view.head.meta == {"n": 1}


def test_append_latest_with_a_hint_from_before_the_sweep_starts_the_id_again() -> None:
    clock, store = Clock(T0), s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, clock)))
    hint = log.append_latest("thread-8", [("msg", "first")], create_meta={})
    clock.t += 40 * DAY
    assert log.expire(idle_for=timedelta(days=30)).expired == ["thread-8"]
    result = log.append_latest("thread-8", [("msg", "second")], after=hint, create_meta={})
    assert [e.hash for e in log.read("thread-8").entries] == [e.hash for e in result.acked]


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def _one_node_graph(saver: Any) -> Any:
    """A LangGraph graph of one node appending "a" to ``steps``, checkpointed by ``saver``."""
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(State)
    g.add_node("a", lambda s: {"steps": ["a"]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def test_a_langgraph_thread_used_after_expiry_persists_its_checkpoints() -> None:
    pytest.importorskip("langgraph")
    from s3log.integrations.langgraph import S3LogSaver

    graph = _one_node_graph

    clock = Clock(T0)
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(env=Env.deterministic(1, clock)))
    cfg = {"configurable": {"thread_id": "t1"}}
    graph(S3LogSaver(log)).invoke({"steps": ["start"]}, cfg)
    clock.t += 40 * DAY
    assert len(log.expire(idle_for=timedelta(days=30)).expired) == 1
    app = graph(S3LogSaver(log))
    app.invoke({"steps": ["again"]}, cfg)
    assert app.get_state(cfg).values == {"steps": ["again", "a"]}


class _DeleteHook(s3log.MemoryStore):
    """Runs ``hook`` once, right after the head of ``sid`` is deleted."""

    def __init__(self, sid: str) -> None:
        super().__init__()
        self.sid = sid
        self.hook: Callable[[], None] | None = None

    def delete(self, key: str) -> None:
        super().delete(key)
        self._deleted(key)

    def delete_if_match(self, key: str, etag: str) -> None:
        super().delete_if_match(key, etag)  # the head goes conditionally (Log.delete)
        self._deleted(key)

    def _deleted(self, key: str) -> None:
        if key.endswith(f"/sessions/{self.sid}/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()


def test_delete_never_removes_a_session_created_again_under_its_id() -> None:
    store = _DeleteHook("thread-1")
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=1024, pending_max_bytes=0))
    old = log.create("thread-1")
    for i in range(4):
        old.append("k", {"old": i, "pad": "x" * 400})
        old.commit()
    acked: list[s3log.Entry] = []

    def recreate() -> None:  # another worker starts the thread again as soon as it is gone
        w = log.create("thread-1")
        for i in range(5):
            w.append("k", {"i": i, "pad": "x" * 400})
            acked.extend(w.commit().acked)

    store.hook = recreate
    log.delete("thread-1")
    assert len(acked) == 5
    assert [e.hash for e in log.read("thread-1").entries] == [e.hash for e in acked]


class _SlowHeads(s3log.MemoryStore):
    """A MemoryStore on a virtual clock; while ``slow``, each head GET takes that many ms."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.slow = 0
        self.on_segment: Callable[[], None] | None = None

    def get(self, key: str) -> Any:
        if key.endswith("/head"):
            self.clock.t += self.slow
        if "/seg/" in key and self.on_segment is not None:
            hook, self.on_segment = self.on_segment, None
            hook()
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        etag = super().put_if_absent(key, body)
        self.put_raw(key, body, mtime_ms=self.clock())
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        new = super().put_if_match(key, body, etag)
        self.put_raw(key, body, mtime_ms=self.clock())
        return new


def _segmented(clock: Clock, n: int) -> tuple[_SlowHeads, s3log.Log, list[str]]:
    store = _SlowHeads(clock)
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(5, clock), tail_per_commit=0, tail_max_bytes=256,
                                            pending_max_bytes=0))
    ids = []
    for i in range(n):
        w = log.create(f"s{i:03d}")
        for j in range(3):
            w.append("k", {"j": j, "pad": "x" * 300})  # every commit writes a segment
            w.commit()
        ids.append(w.session_id)
    return store, log, ids


@pytest.mark.parametrize("then", ["expired", "deleted"])
def test_a_reader_whose_session_goes_under_it_is_told_so_not_corrupt(then: str) -> None:
    clock = Clock(T0)
    store, log, _ = _segmented(clock, 1)
    clock.t += 40 * DAY

    def sweep_and_collect() -> None:  # between the reader's head GET and its segment GETs
        assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["s000"]
        for key in [k for k in store.all_keys() if "/seg/" in k]:
            store.delete(key)
        if then == "deleted":
            store.delete(log.layout.head("s000"))

    store.on_segment = sweep_and_collect
    with pytest.raises(s3log.SessionExpired if then == "expired" else s3log.SessionNotFound):
        log.read("s000")


def test_verify_all_does_not_call_an_expired_session_broken(s3log_server: LocalS3) -> None:
    from typer.testing import CliRunner

    from s3log.cli.app import app

    bucket = s3log_server.create_bucket()
    env = {**s3log_server.env(), "S3LOG_BUCKET": bucket, "S3LOG_PREFIX": "s3log"}
    clock = Clock(T0)
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url),
                    config=LogConfig(env=Env.deterministic(3, clock)))
    old = log.create()
    old.append("k", 1)
    old.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [old.session_id]
    live = log.create()
    live.append("k", 2)
    live.commit()
    result = CliRunner().invoke(app, ["verify", "--all", "--json"], env=env)
    report = json.loads(result.output)
    assert report["broken"] == [] and report["verified"] == 1, report
    assert report["expired_or_deleted"] == [old.session_id]
    assert result.exit_code == 0
    # Asked for by name, an expired session is still an error.
    named = CliRunner().invoke(app, ["verify", old.session_id, "--json"], env=env)
    assert named.exit_code == 1


class _GetHook(s3log.MemoryStore):
    """A MemoryStore on a virtual clock; runs ``hook`` once, after the first GET of ``key``."""

    def __init__(self, clock: Clock, key: str) -> None:
        super().__init__()
        self.clock, self.key = clock, key
        self.hook: Callable[[], None] | None = None

    def get(self, key: str) -> Any:
        out = super().get(key)
        if key == self.key and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return out

    def put_if_absent(self, key: str, body: bytes) -> str:
        etag = super().put_if_absent(key, body)
        self.put_raw(key, body, mtime_ms=self.clock())
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        new = super().put_if_match(key, body, etag)
        self.put_raw(key, body, mtime_ms=self.clock())
        return new


def test_a_slow_gc_does_not_delete_a_head_that_changed_after_its_listing() -> None:
    clock = Clock(T0)
    store = _GetHook(clock, "s3log/sessions/thread-1/head")
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(3, clock)))
    w = log.create("thread-1")
    w.append("k", "old")
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["thread-1"]
    clock.t += 2 * DAY
    acked: list[s3log.Entry] = []

    def overlap() -> None:  # once this gc has read the tombstone: another gc, then the app
        store.delete("s3log/sessions/thread-1/head")
        again = log.create("thread-1")
        again.append("k", "new")
        acked.extend(again.commit().acked)

    store.hook = overlap
    log.gc(older_than_ms=3_600_000)
    assert [e.hash for e in log.read("thread-1").entries] == [e.hash for e in acked]


# ------------------------------------------------------------ an expired id used again


def test_creating_an_expired_id_takes_it_over_lazy_or_not() -> None:
    _store, _clock, log = _expired_world("thread-7")
    eager = log.create("thread-7")  # was SessionExists until gc removed the tombstone
    eager.append("k", "eager")
    eager.commit()
    assert [e.data for e in log.read("thread-7").entries] == ["eager"]
    _store2, _clock2, log2 = _expired_world("thread-9")
    lazy = log2.create("thread-9", lazy=True)
    lazy.append("k", "lazy")
    lazy.commit()  # its create-only PUT meets the tombstone
    assert [e.data for e in log2.read("thread-9").entries] == ["lazy"]
    # A live id is still taken.
    with pytest.raises(SessionExists):
        log.create("thread-7")


def test_a_strict_langgraph_saver_starts_an_expired_thread_afresh() -> None:
    pytest.importorskip("langgraph")
    from s3log.integrations.langgraph import S3LogSaver

    graph = _one_node_graph

    clock = Clock(T0)
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(env=Env.deterministic(1, clock)))
    cfg = {"configurable": {"thread_id": "t1"}}
    graph(S3LogSaver(log, strict=True)).invoke({"steps": ["start"]}, cfg)
    clock.t += 40 * DAY
    assert len(log.expire(idle_for=timedelta(days=30)).expired) == 1
    app = graph(S3LogSaver(log, strict=True))
    app.invoke({"steps": ["again"]}, cfg)  # looped for ever: Open said expired, Create said taken
    assert app.get_state(cfg).values == {"steps": ["again", "a"]}


def test_an_openai_session_on_an_expired_id_starts_afresh() -> None:
    pytest.importorskip("agents")
    from s3log.integrations.openai_agents import S3LogSession

    clock = Clock(T0)
    log = s3log.AsyncLog(s3log.AsyncMemoryStore(), config=LogConfig(env=Env.deterministic(1, clock)))

    async def main() -> None:
        first = S3LogSession("conv-1", log)
        await first.add_items([{"role": "user", "content": "hi"}])
        clock.t += 40 * DAY
        assert len((await log.expire(idle_for=timedelta(days=30))).expired) == 1
        again = S3LogSession("conv-1", log)
        assert await again.get_items() == []
        await asyncio.wait_for(again.add_items([{"role": "user", "content": "again"}]), 10)  # looped for ever
        assert await again.get_items() == [{"role": "user", "content": "again"}]

    asyncio.run(main())
