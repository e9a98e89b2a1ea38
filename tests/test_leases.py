"""Leases on agent turns: a live worker's open turn is not a crash.

Clocks are injected (``LogConfig.env``): expiry is tested by moving a clock, never by
sleeping. Where a restore must be seen waiting, the shell's sleep is watched (and, with
an injected clock, replaced by moving that clock).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

import s3log
import s3log.agent.aio
import s3log.agent.sync
from s3log._format.values import Lease
from s3log.agent import (
    OUTCOME,
    TOOL_RESULTS,
    UNKNOWN_OUTCOME,
    AgentArgumentError,
    AgentSession,
    AsyncAgentSession,
    SessionBusy,
)
from s3log.testing.plugin import LocalS3
from tests.helpers import one_entry
from tests.test_agent import later

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_800_000_000_000  # an injected clock's start (ms)


class Clock:
    """A clock a test moves by hand."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


def clocked(store: Any, clock: Callable[[], int], *, seed: int = 7, prefix: str | None = None) -> s3log.Log:
    """A Log on ``store`` whose time is ``clock`` (and whose randomness follows ``seed``)."""
    return s3log.Log(store, prefix=prefix, config=s3log.LogConfig(env=s3log.env.Env.deterministic(seed, clock)))


def at(log: s3log.Log, now_ms: int) -> s3log.Log:
    """The same sessions seen from a log whose clock stands still at ``now_ms``."""
    env = s3log.env.Env.deterministic(11, lambda: now_ms)
    return s3log.Log(log.store, prefix=log.prefix, config=dataclasses.replace(log.config, env=env))


def _open_a_tool_call(s: AgentSession, text: str = "weather?") -> None:
    """A turn left open mid-tool-call: one call started (its outcome unknown), one never run."""
    s.user_input(text)
    s.assistant_items([
        {"type": "function_call", "call_id": "started", "name": "weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "never", "name": "weather", "arguments": "{}"},
    ])
    s.tool_started(["started"])


def _kinds(log: s3log.Log, sid: str) -> list[str]:
    return [e.kind for e in log.read(sid).entries]


def _user_texts(history: Any) -> list[str]:
    return [h["content"] for h in history if h.get("role") == "user"]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait a blocking restore makes (the sleeps between its looks at the head)."""
    seen: list[float] = []
    real = s3log.agent.sync.time

    def sleep(seconds: float) -> None:
        seen.append(seconds)
        real.sleep(seconds)

    monkeypatch.setattr(s3log.agent.sync, "time", types.SimpleNamespace(sleep=sleep, monotonic=real.monotonic))
    return seen


# ---------------------------------------------------------------- two processes over HTTP

WORKER_A = """
import os, sys
import s3log
from s3log.agent import AgentSession
endpoint, bucket, mode = sys.argv[1], sys.argv[2], sys.argv[3]
log = s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint))
s = AgentSession.create(log, system_prompt="sys", owner="worker-a", lease_ttl=120)
s.user_input("weather?")
s.assistant_items([
    {"type": "function_call", "call_id": "started", "name": "weather", "arguments": "{}"},
    {"type": "function_call", "call_id": "never", "name": "weather", "arguments": "{}"},
])
s.tool_started(["started"])  # durable; the tool call is running
print(s.session_id, flush=True)
if mode == "crash":
    os._exit(3)  # dies mid-tool-call: no exit hook, no turn end
sys.stdin.readline()  # alive until the test says so; then it finishes its turn
s.tool_results({"type": "function_call_output", "call_id": "started", "output": "sunny"})
s.turn_end()
print(s.session_id, bool(s.forks), flush=True)
"""


def _start_worker_a(server: LocalS3, bucket: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, **server.env(), "PYTHONPATH": ROOT}  # this checkout's s3log
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORKER_A), server.endpoint_url, bucket, mode],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert proc.stdout is not None
    sid = proc.stdout.readline().strip()
    assert sid, proc.communicate(timeout=60)[1]
    return proc, sid


def test_another_process_live_turn_is_busy_then_expires(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    proc, sid = _start_worker_a(s3log_server, bucket, "alive")
    try:
        log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
        head = log.head(sid)
        assert head.lease is not None and head.lease.owner == "worker-a"
        assert head.lease.expires_at == head.updated_at + 120_000  # lease_ttl past its last commit
        before = head.version
        with pytest.raises(SessionBusy) as busy:
            AgentSession.restore(log, sid, owner="worker-b")
        assert (busy.value.session, busy.value.owner, busy.value.expires_at) == (sid, "worker-a", head.lease.expires_at)
        assert "worker-a" in str(busy.value) and str(head.lease.expires_at) in str(busy.value)
        assert isinstance(busy.value, s3log.S3LogError)
        again = pickle.loads(pickle.dumps(busy.value))  # a worker process's error reaches its parent whole
        assert (again.session, again.owner, again.expires_at) == (sid, "worker-a", head.lease.expires_at)
        assert log.head(sid).version == before  # nothing written
        # One millisecond before the expiry the turn is still A's; at the expiry it is a crash's.
        with pytest.raises(SessionBusy):
            AgentSession.restore(at(log, head.lease.expires_at - 1), sid, owner="worker-b")
        b = AgentSession.restore(at(log, head.lease.expires_at), sid, owner="worker-b")
        assert b.state.last_run_interrupted and not b.state.turn_open
        # A was alive after all (a tool call longer than its lease): its late records go to
        # a fork of its own, never into the repaired chain.
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        a_sid, a_forked = proc.stdout.readline().split()
        assert proc.wait(timeout=60) == 0
        assert a_forked == "True" and a_sid != sid
        kinds = _kinds(log, sid)
        assert kinds.count(TOOL_RESULTS) == 1 and kinds.count(OUTCOME) == 1  # the repair, once
        log.verify(sid)
        log.verify(a_sid)
        log.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_crashed_process_turn_is_repaired_once_its_lease_expires(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    proc, sid = _start_worker_a(s3log_server, bucket, "crash")
    assert proc.wait(timeout=60) == 3
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    lease = log.head(sid).lease
    assert lease is not None and lease.owner == "worker-a"
    with pytest.raises(SessionBusy) as busy:
        AgentSession.restore(log, sid)
    assert (busy.value.owner, busy.value.expires_at) == ("worker-a", lease.expires_at)
    past = at(log, lease.expires_at + 1)
    r = AgentSession.restore(past, sid)
    st = r.state
    assert st.last_run_interrupted and not st.turn_open and st.turn_count == 1
    results = {i.get("call_id"): i for i in st.history if i.get("type") == "function_call_output"}
    assert results["started"]["output"] == UNKNOWN_OUTCOME
    head = log.head(sid)
    AgentSession.restore(past, sid)  # already repaired: nothing more written
    assert log.head(sid).version == head.version
    log.close()


# ------------------------------------------------------------------- double invocation


def _load_worker() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("agent_worker_under_test", os.path.join(ROOT, "scripts",
                                                                                          "agent_worker.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_double_invocation_waits_and_continues_the_same_session(
    s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch, waits: list[float]
) -> None:
    bucket = s3log_server.create_bucket()
    worker = _load_worker()

    def container() -> s3log.Log:  # each invocation in its own container: its own Log and client
        return s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))

    sid = worker.handle(container(), None, "prompt 0")["session"]
    in_tool = threading.Event()
    real_tool = worker.run_tool

    def slow_tool(call: dict[str, Any]) -> dict[str, Any]:
        if "prompt 1" in call["arguments"]:
            in_tool.set()
            # The first invocation's tool runs until the second has found the turn busy.
            for _ in range(600):
                if waits:
                    break
                threading.Event().wait(0.05)
        return real_tool(call)  # type: ignore[no-any-return]

    monkeypatch.setattr(worker, "run_tool", slow_tool)
    results: dict[str, Any] = {}

    def invoke(prompt: str) -> None:
        try:
            results[prompt] = worker.handle(container(), sid, prompt)
        except BaseException as exc:
            results[prompt] = exc

    first = threading.Thread(target=invoke, args=("prompt 1",))
    first.start()
    assert in_tool.wait(120)
    second = threading.Thread(target=invoke, args=("prompt 2",))
    second.start()
    first.join(120)
    second.join(120)
    assert waits, "the second invocation never found the turn busy"
    one, two = results["prompt 1"], results["prompt 2"]
    assert isinstance(one, dict) and isinstance(two, dict), results
    assert one["session"] == two["session"] == sid and not one["forked"] and not two["forked"]
    assert (one["turns"], two["turns"]) == (2, 3)
    log = container()
    assert log.list_session_ids() == [sid] and log.children(sid) == []  # no fork
    st = AgentSession.restore(log, sid).state
    assert _user_texts(st.history) == ["prompt 0", "prompt 1", "prompt 2"]  # in order
    assert not st.last_run_interrupted and log.head(sid).lease is None
    log.verify(sid)


def test_the_lambda_handler_keeps_one_log_per_container(
    s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3log_server.create_bucket()
    for k, v in {**s3log_server.env(), "S3LOG_BUCKET": bucket, "S3LOG_PREFIX": "lambda"}.items():
        monkeypatch.setenv(k, v)
    worker = _load_worker()
    sid = worker.handler({"session": None, "prompt": "cold"})["session"]
    log = worker._LOG
    assert log is not None
    leases: list[tuple[Any, int]] = []
    real_tool = worker.run_tool

    def tool(call: dict[str, Any]) -> dict[str, Any]:  # look at the head mid-turn
        head = log.head(sid)
        leases.append((head.lease, head.updated_at))
        return real_tool(call)  # type: ignore[no-any-return]

    class Context:  # what Lambda passes: the invocation has 42 s left
        def get_remaining_time_in_millis(self) -> int:
            return 42_000

    monkeypatch.setattr(worker, "run_tool", tool)
    warm = worker.handler({"session": sid, "prompt": "warm"}, Context())
    assert worker._LOG is log and warm["session"] == sid and warm["turns"] == 2
    assert _user_texts(AgentSession.restore(log, sid).state.history) == ["cold", "warm"]
    # The turn is leased for as long as the invocation can live (plus a margin), no longer.
    [(lease, updated_at)] = leases
    assert lease is not None and lease.expires_at == updated_at + 47_000
    assert worker.lease_ttl_for(None) == worker.LEASE_TTL_SECONDS
    log.close()


# ------------------------------------------------------------------------ waiting


def test_waiting_for_a_crashed_turn_repairs_it_when_the_lease_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    log = clocked(s3log.MemoryStore(), clock)
    s = AgentSession.create(log, owner="a", lease_ttl=60)
    _open_a_tool_call(s)  # then the worker dies
    expires = T0 + 60_000
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the injected clock moves instead of time passing
        slept.append(seconds)
        clock.advance(seconds)

    monkeypatch.setattr(s3log.agent.sync, "time", types.SimpleNamespace(sleep=sleep))
    with pytest.raises(SessionBusy):  # waiting less than the lease has left
        AgentSession.restore(log, s.session_id, wait=10)
    assert clock.now == T0 + 10_000 and log.head(s.session_id).version == 1 + 1  # open, started: no repair
    r = AgentSession.restore(log, s.session_id, wait=600)
    assert clock.now == expires  # it waited exactly until the expiry, not a poll longer
    assert r.state.last_run_interrupted and r.session_id == s.session_id
    assert max(slept) <= s3log.agent.core.LEASE_POLL


def test_wait_must_be_a_number_of_seconds(log_memory: s3log.Log) -> None:
    s = AgentSession.create(log_memory)
    _open_a_tool_call(s)
    version = log_memory.head(s.session_id).version
    for bad in (-1, "10", True):
        with pytest.raises(AgentArgumentError, match="wait must be a number of seconds"):
            AgentSession.restore(later(log_memory), s.session_id, wait=bad)
    assert log_memory.head(s.session_id).version == version


@pytest.fixture
def log_memory() -> s3log.Log:
    return s3log.Log(s3log.MemoryStore())


# ------------------------------------------------------------------- renewing a lease


def test_renew_lease_extends_the_expiry_with_one_put(s3log_store: Any) -> None:
    clock = Clock()
    log = clocked(s3log_store, clock)
    s = AgentSession.create(log, owner="a", lease_ttl=60)
    _open_a_tool_call(s)
    assert log.head(s.session_id).lease == Lease("a", T0 + 60_000)
    clock.advance(50)  # a long tool call
    head = log.head(s.session_id)
    s3log_store.requests.reset()
    s.renew_lease()
    assert s3log_store.requests.snapshot() == {"GET": 0, "PUT": 1, "LIST": 0, "DELETE": 0}
    renewed = log.head(s.session_id)
    assert renewed.lease == Lease("a", T0 + 50_000 + 60_000)
    assert (renewed.seq, renewed.hash) == (head.seq, head.hash)  # nothing appended
    clock.advance(20)  # past the first expiry, inside the renewed one: still busy
    with pytest.raises(SessionBusy) as busy:
        AgentSession.restore(log, s.session_id)
    assert busy.value.expires_at == T0 + 110_000
    s.tool_results({"type": "function_call_output", "call_id": "started", "output": "sunny"})
    s.turn_end()  # the commit closing the turn releases the lease
    assert log.head(s.session_id).lease is None
    s3log_store.requests.reset()
    s.renew_lease()  # no open turn: nothing to renew, nothing sent
    assert s3log_store.requests.total == 0
    log.verify(s.session_id)


def test_every_commit_of_an_open_turn_extends_the_lease() -> None:
    clock = Clock()
    log = clocked(s3log.MemoryStore(), clock)
    s = AgentSession.create(log, owner="a", lease_ttl=60)
    s.user_input("hi")
    assert log.head(s.session_id).lease == Lease("a", T0 + 60_000)
    clock.advance(30)
    s.assistant_items({"role": "assistant", "content": "thinking"})
    s.flush()
    assert log.head(s.session_id).lease == Lease("a", T0 + 90_000)
    clock.advance(30)
    s.turn_end()
    assert log.head(s.session_id).lease is None


async def test_async_renew_lease_is_one_put(s3log_server: LocalS3, s3log_bucket: str) -> None:
    clock = Clock()
    store = s3log.AsyncS3Store(s3log_bucket, endpoint_url=s3log_server.endpoint_url)
    log = s3log.AsyncLog(store, config=s3log.LogConfig(env=s3log.env.Env.deterministic(3, clock)))
    try:
        s = await AsyncAgentSession.create(log, owner="a", lease_ttl=60)
        await s.user_input("hi")
        clock.advance(40)
        store.requests.reset()
        await s.renew_lease()
        assert store.requests.snapshot() == {"GET": 0, "PUT": 1, "LIST": 0, "DELETE": 0}
        assert (await log.head(s.session_id)).lease == Lease("a", T0 + 100_000)
        await s.turn_end()
        assert (await log.head(s.session_id)).lease is None
    finally:
        await store.aclose()


# --------------------------------------------------------------- force and own owner


def test_force_repairs_under_a_live_lease(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, owner="a")
    _open_a_tool_call(s)
    with pytest.raises(SessionBusy):
        AgentSession.restore(log, s.session_id, owner="b")
    r = AgentSession.restore(log, s.session_id, owner="b", force=True)
    assert r.state.last_run_interrupted and not r.state.turn_open and r.session_id == s.session_id
    kinds = _kinds(log, s.session_id)
    assert kinds.count(TOOL_RESULTS) == 1 and kinds.count(OUTCOME) == 1


def test_the_lease_owner_restoring_repairs_without_waiting(s3log_log: s3log.Log, waits: list[float]) -> None:
    log = s3log_log
    s = AgentSession.create(log, owner="lambda-42")
    _open_a_tool_call(s)  # the process died; the same worker id restarts
    r = AgentSession.restore(log, s.session_id, owner="lambda-42", wait=30)
    assert waits == [] and r.state.last_run_interrupted and r.owner == "lambda-42"
    r.user_input("again")  # its new turn is leased to it again
    assert log.head(s.session_id).lease.owner == "lambda-42"  # type: ignore[union-attr]


def test_a_repair_releases_the_lease_of_the_turn_it_closes(s3log_log: s3log.Log) -> None:
    log = s3log_log
    s = AgentSession.create(log, owner="a")
    _open_a_tool_call(s)
    AgentSession.restore(log, s.session_id, owner="b", force=True)
    # The repair closed the turn: nobody holds the session any more.
    assert log.head(s.session_id).lease is None
    t = AgentSession.create(log, owner="c")
    _open_a_tool_call(t)
    AgentSession.restore(later(log), t.session_id)
    assert log.head(t.session_id).lease is None


def test_owner_and_lease_ttl_are_session_options(log_memory: s3log.Log) -> None:
    s = AgentSession.create(log_memory, owner="w-1", lease_ttl=5)
    s.user_input("hi")
    head = log_memory.head(s.session_id)
    assert s.owner == "w-1" and head.lease == Lease("w-1", head.updated_at + 5000)
    s.turn_end()
    r = AgentSession.restore(log_memory, s.session_id, owner="w-2", lease_ttl=7)
    r.user_input("again")
    head = log_memory.head(s.session_id)
    assert r.owner == "w-2" and head.lease == Lease("w-2", head.updated_at + 7000)
    default = AgentSession.create(log_memory)
    host, pid, rand = default.owner.split(":")
    assert pid == str(os.getpid()) and len(rand) == 8 and host


@pytest.mark.parametrize("option", [{"lease_ttl": 0}, {"lease_ttl": -1.0}, {"lease_ttl": "60"},
                                    {"lease_ttl": True}, {"owner": ""}, {"owner": 7}])
def test_a_bad_lease_option_is_refused_before_a_restore_repairs(log_memory: s3log.Log, option: Any) -> None:
    s = AgentSession.create(log_memory)
    _open_a_tool_call(s)
    version = log_memory.head(s.session_id).version
    name = next(iter(option))
    with pytest.raises(AgentArgumentError, match=name):
        AgentSession.restore(later(log_memory), s.session_id, **option)  # past the lease: would repair
    assert log_memory.head(s.session_id).version == version
    with pytest.raises(AgentArgumentError, match=name):
        AgentSession.create(log_memory, **option)


# ---------------------------------------------------------------------- the writer


def test_writer_hold_and_release_lease() -> None:
    clock = Clock()
    log = clocked(s3log.MemoryStore(), clock)
    w = log.create()
    sid = w.session_id

    def lease_after(x: s3log.Writer[Any], data: int) -> Lease | None:
        """Commit ``data`` with ``x``: the head's lease then."""
        x.append("k", data)
        x.commit()
        return log.head(sid).lease

    w.hold_lease("a", 1000)
    assert w.lease_owner == "a"
    assert lease_after(w, 1) == Lease("a", T0 + 1000)
    clock.advance(0.5)
    assert lease_after(w, 2) == Lease("a", T0 + 1500)  # every commit extends it

    # A writer that never held a lease leaves another's alone, whatever the time.
    clock.advance(10)
    other = log.open(sid)
    assert other.lease_owner is None
    assert lease_after(other, 3) == Lease("a", T0 + 1500)

    # Releasing someone else's lease is not possible: a release clears only its own.
    b = log.open(sid)
    b.hold_lease("b", 1000)
    b.release_lease()
    assert b.lease_owner is None
    assert lease_after(b, 4) == Lease("a", T0 + 1500)

    a = log.open(sid)
    a.hold_lease("a", 1000)
    assert lease_after(a, 5) == Lease("a", clock.now + 1000)
    a.release_lease()
    assert a.lease_owner is None
    assert lease_after(a, 6) is None  # the release is written with this commit
    b = log.open(sid)
    b.hold_lease("b", 1000)
    b.append("k", 7)
    b.commit()
    a = log.open(sid)
    # Released before: later commits leave the head's lease alone.
    assert lease_after(a, 8) == Lease("b", clock.now + 1000)
    assert [e.data for e in log.read(sid).entries] == [1, 2, 3, 4, 5, 6, 7, 8]
    log.verify(sid)


def test_writer_renew_lease_is_one_put_and_appends_nothing(s3log_store: Any) -> None:
    clock = Clock()
    log = clocked(s3log_store, clock)
    w = log.create()
    w.hold_lease("a", 1000)
    w.append("k", 1)
    w.commit()
    head = log.head(w.session_id)
    clock.advance(0.7)
    s3log_store.requests.reset()
    w.renew_lease()
    assert s3log_store.requests.snapshot() == {"GET": 0, "PUT": 1, "LIST": 0, "DELETE": 0}
    renewed = log.head(w.session_id)
    assert renewed.lease == Lease("a", T0 + 1700)
    assert (renewed.seq, renewed.hash, renewed.tail) == (head.seq, head.hash, head.tail)
    w.release_lease()
    w.renew_lease()  # a release written at once
    assert log.head(w.session_id).lease is None
    # A writer behind the stored head is told, not silently overwritten.
    stale = log.open(w.session_id)
    stale.hold_lease("s", 1000)
    w.append("k", 2)
    w.commit()
    with pytest.raises(s3log.ConflictError):
        stale.renew_lease()
    assert log.head(w.session_id).lease is None
    log.verify(w.session_id)


def test_writer_renew_lease_takes_a_conflict_mode_for_that_renewal_only() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = one_entry(log)
    other = log.open(w.session_id)
    other.append("k", 2)
    other.commit()
    w.hold_lease("a", 1000)
    w.append("k", 3)  # queued: the renewal commits it too, and meets the other writer's
    with pytest.raises(ValueError, match="on_conflict"):
        w.renew_lease(on_conflict="merge")  # type: ignore[arg-type]
    with pytest.raises(s3log.ConflictError):
        w.renew_lease(on_conflict="raise")
    assert (w.on_conflict, w.pending, w.forks) == ("fork", 1, [])  # nothing forked, nothing lost
    w.renew_lease()  # the writer's own mode: the entry goes to a fork
    assert w.session_id != other.session_id and w.pending == 0
    assert [e.data for e in log.read(w.session_id).entries if e.kind == "k"] == [3]
    assert [e.data for e in log.read(other.session_id).entries] == [1, 2]


async def test_async_writer_renew_lease_takes_a_conflict_mode_for_that_renewal_only() -> None:
    log = s3log.AsyncLog(s3log.AsyncMemoryStore())
    w = await log.create()
    await w.append_durable("k", 1)
    other = await log.open(w.session_id)
    await other.append_durable("k", 2)
    w.hold_lease("a", 1000)
    w.append("k", 3)
    with pytest.raises(s3log.ConflictError):
        await w.renew_lease(on_conflict="raise")
    assert (w.on_conflict, w.pending, w.forks) == ("fork", 1, [])
    await w.renew_lease()
    assert w.session_id != other.session_id and w.pending == 0


@pytest.mark.parametrize(("owner", "ttl"), [("", 1000), (7, 1000), ("a", 0), ("a", -5), ("a", 1.5), ("a", True)])
def test_writer_hold_lease_refuses_bad_arguments(owner: Any, ttl: Any) -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    with pytest.raises(s3log.errors.InvalidArgumentError) as info:
        w.hold_lease(owner, ttl)
    assert isinstance(info.value, ValueError) and w.lease_owner is None


def test_a_lease_survives_the_head_codec() -> None:
    from s3log._format.cbor import dumps, loads
    from s3log._format.codec import decode_head, encode_head

    log = clocked(s3log.MemoryStore(), Clock())
    w = log.create()
    w.hold_lease("a", 1000)
    w.append("k", 1)
    w.commit()
    head = log.head(w.session_id)
    assert decode_head(encode_head(head), "k").lease == Lease("a", T0 + 1000)
    body = loads(encode_head(head))
    assert body["lease"] == {"owner": "a", "expires_at": T0 + 1000}
    for bad in ({"owner": "a"}, {"owner": 1, "expires_at": 2}, {"owner": "a", "expires_at": True}, "a"):
        body["lease"] = bad
        with pytest.raises(s3log.CorruptionError, match="lease"):
            decode_head(dumps(body), "k")
    del body["lease"]
    assert decode_head(dumps(body), "k").lease is None  # a head written before leases


# ------------------------------------------------------------------------- asyncio


async def test_async_restore_raises_busy_and_waits_like_sync(
    s3log_async_log: s3log.AsyncLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = s3log_async_log
    waiting = asyncio.Event()
    real = s3log.agent.aio.asyncio

    async def sleep(seconds: float) -> None:
        waiting.set()
        await real.sleep(seconds)

    proxy = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    proxy.sleep = sleep
    monkeypatch.setattr(s3log.agent.aio, "asyncio", proxy)

    a = await AsyncAgentSession.create(log, owner="a", lease_ttl=120)
    await a.user_input("first")
    await a.assistant_items({"type": "function_call", "call_id": "c1", "name": "x", "arguments": "{}"})
    await a.tool_started("c1")
    sid = a.session_id
    with pytest.raises(SessionBusy) as busy:
        await AsyncAgentSession.restore(log, sid, owner="b")
    lease = (await log.head(sid)).lease
    assert lease is not None and (busy.value.owner, busy.value.expires_at) == ("a", lease.expires_at)
    assert not waiting.is_set()

    b_task = asyncio.ensure_future(AsyncAgentSession.restore(log, sid, owner="b", wait=120))
    await asyncio.wait_for(waiting.wait(), 120)  # b found the turn busy and waits
    await a.tool_results({"type": "function_call_output", "call_id": "c1", "output": "done"})
    await a.turn_end()
    b = await asyncio.wait_for(b_task, 120)
    assert b.session_id == sid and not b.state.last_run_interrupted and b.state.turn_count == 1
    await b.user_input("second")
    await b.turn_end()
    st = (await AsyncAgentSession.restore(log, sid)).state
    assert _user_texts(st.history) == ["first", "second"] and await log.list_session_ids() == [sid]

    c = await AsyncAgentSession.create(log, owner="a")
    await c.user_input("crashes")
    with pytest.raises(SessionBusy):
        await AsyncAgentSession.restore(log, c.session_id, owner="b")
    forced = await AsyncAgentSession.restore(log, c.session_id, owner="b", force=True)
    assert forced.state.last_run_interrupted
    own = await AsyncAgentSession.create(log, owner="a")
    await own.user_input("crashes too")
    again = await AsyncAgentSession.restore(log, own.session_id, owner="a")  # its own: no wait
    assert again.state.last_run_interrupted and again.owner == "a"


def test_clock_helpers_are_what_they_say() -> None:
    # later() and at() only change the clock: same store, same prefix.
    log = s3log.Log(s3log.MemoryStore(), prefix="p")
    ahead = later(log)
    assert ahead.store is log.store and ahead.prefix == "p"
    assert ahead.config.env.now_ms() - s3log.env.wall_clock_ms() >= 3_599_000
    assert at(log, 5).config.env.now_ms() == 5 and at(log, 5).prefix == "p"


# ------------------------------------------------- a handler that fails mid-turn


class ToolFailed(Exception):
    pass


@pytest.mark.parametrize("buffered", [False, True])
def test_a_turn_abandoned_by_an_exception_is_not_left_leased(log_memory: s3log.Log, buffered: bool) -> None:
    # A handler that raises mid-turn (a failing tool) is done with the turn: a retry
    # must repair it at once, not find it busy for the rest of the lease.
    with pytest.raises(ToolFailed), AgentSession.create(log_memory, owner="first") as s:
        _open_a_tool_call(s)
        if buffered:
            s.hook_items({"role": "system", "content": "about to fail"})
        raise ToolFailed("the tool raised")
    head = log_memory.head(s.session_id)
    assert head.lease is None and s.buffered == 0
    retry = AgentSession.restore(log_memory, s.session_id, owner="retry")
    assert retry.state.last_run_interrupted and not retry.state.turn_open
    assert ("about to fail" in str(retry.state.history)) == buffered


async def test_an_async_turn_abandoned_by_an_exception_is_not_left_leased() -> None:
    log = s3log.AsyncLog(s3log.AsyncMemoryStore())
    with pytest.raises(ToolFailed):
        async with await AsyncAgentSession.create(log, owner="first") as s:
            await s.user_input("hi")
            raise ToolFailed("the tool raised")
    assert (await log.head(s.session_id)).lease is None
    retry = await AsyncAgentSession.restore(log, s.session_id, owner="retry")
    assert retry.state.last_run_interrupted


def test_a_closed_session_with_its_turn_still_open_keeps_its_lease(log_memory: s3log.Log) -> None:
    # Closing without an error is not giving the turn up (the caller may go on with it).
    s = AgentSession.create(log_memory, owner="first")
    with s:
        s.user_input("hi")
    lease = log_memory.head(s.session_id).lease
    assert lease is not None and lease.owner == "first"
    with pytest.raises(SessionBusy):
        AgentSession.restore(log_memory, s.session_id)


def test_wait_and_follow_forks_combine(log_memory: s3log.Log, waits: list[float]) -> None:
    # Two invocations restored the idle session before either opened its turn: the
    # second lost the race and forked. The next invocation, keeping only the original
    # id, finds that fork, and waits for its turn like any other.
    log = log_memory
    s = AgentSession.create(log)
    s.user_input("zero")
    s.turn_end()
    winner = AgentSession.restore(log, s.session_id, owner="winner")
    loser = AgentSession.restore(log, s.session_id, owner="loser")
    winner.user_input("one")
    winner.turn_end()
    loser.user_input("two")  # the turn-open commit loses the race: forked, and leased there
    assert loser.forks and loser.session_id != s.session_id
    with pytest.raises(SessionBusy) as busy:
        AgentSession.restore(log, s.session_id, follow_forks=True)
    assert (busy.value.session, busy.value.owner) == (loser.session_id, "loser")

    def finish() -> None:
        for _ in range(3000):  # until the restore below waits (bounded: a failure must not hang)
            if waits:
                break
            threading.Event().wait(0.01)
        loser.turn_end()

    t = threading.Thread(target=finish)
    t.start()
    nxt = AgentSession.restore(log, s.session_id, follow_forks=True, wait=60)
    t.join()
    assert waits and nxt.session_id == loser.session_id and not nxt.state.last_run_interrupted
    assert _user_texts(nxt.state.history) == ["zero", "two"]


def test_renewing_a_lease_taken_over_raises_conflict_and_the_turn_goes_on_in_a_fork(log_memory: s3log.Log) -> None:
    log = log_memory
    a = AgentSession.create(log, owner="a")
    _open_a_tool_call(a)
    sid = a.session_id
    AgentSession.restore(log, sid, owner="b", force=True)  # someone took the turn over
    with pytest.raises(s3log.ConflictError):
        a.renew_lease()  # tells the worker it no longer holds the turn
    assert log.head(sid).lease is None  # nothing of a's written over the repair
    a.tool_results({"type": "function_call_output", "call_id": "started", "output": "late"})
    a.turn_end()
    assert a.session_id != sid and [e.kind for e in log.read(a.session_id).entries] == [
        "s3log.fork", "agent.tool_results", "agent.turn_end"]
    assert _kinds(log, sid).count(TOOL_RESULTS) == 1  # only the repair's


def test_an_open_turn_without_a_lease_is_a_crash(log_memory: s3log.Log) -> None:
    # Written before leases existed (or by a worker that holds none): repaired at once.
    log = log_memory
    s = AgentSession.create(log, owner="old")
    _open_a_tool_call(s)
    w = log.open(s.session_id)
    w.hold_lease("old", 1)
    w.release_lease()
    w.renew_lease()  # strips the lease, leaves the turn open
    assert log.head(s.session_id).lease is None
    r = AgentSession.restore(log, s.session_id)
    assert r.state.last_run_interrupted and not r.state.turn_open


def test_wait_is_bounded_by_the_time_waited_even_if_the_clock_stands_still(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A simulator's (or a test's) clock need not move while a restore sleeps: the wait
    # must still end after ``wait`` seconds of sleeping, with SessionBusy.
    log = clocked(s3log.MemoryStore(), Clock())  # never advanced
    s = AgentSession.create(log, owner="a", lease_ttl=60)
    _open_a_tool_call(s)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) > 1000:
            raise RuntimeError("the restore never stopped waiting")

    monkeypatch.setattr(s3log.agent.sync, "time", types.SimpleNamespace(sleep=sleep))
    with pytest.raises(SessionBusy):
        AgentSession.restore(log, s.session_id, wait=2)
    assert sum(slept) == pytest.approx(2.0)
