"""Helpers shared by the subject test files: logs on a virtual clock, stores that hold back
or hook requests, and small populated stores.

Fixtures live in tests/conftest.py; the command line's helpers in tests/cli_env.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import s3log
from s3log._format.codec import decode_head
from s3log.agent import AgentSession
from s3log.config import LogConfig
from s3log.env import Env
from s3log.errors import ObjectNotFound, PreconditionFailed
from tests.delete_hooks import Clock
from tests.test_pending_hostile import FAST
from tests.tombstones import tombstone_idle

T0 = 1_800_000_000_000
DAY = 86_400_000
#: The commit deadline of :func:`deadline_log` (gc's grace is twice that).
DEADLINE = 60_000
#: The session :class:`HookedMatch` watches.
SID = "thread-1"


def deadline_log(store: Any, clock: Clock, seed: int = 7, **kw: Any) -> s3log.Log:
    """A log on ``clock`` with a commit deadline of :data:`DEADLINE`, no tail per commit and
    no activity index, small heads (``tail_max_bytes`` 1024 unless given)."""
    kw.setdefault("tail_max_bytes", 1024)
    cfg = s3log.LogConfig(env=Env.deterministic(seed, clock), tail_per_commit=0, activity_index=False,
                          retry=FAST, commit_deadline_ms=DEADLINE, **kw)
    return s3log.Log(store, config=cfg)


def commit_until(w: s3log.Writer[Any], ran: list[str]) -> list[s3log.Entry]:
    """Commit ~300-byte entries one by one until ``ran`` holds something (a hook ran)."""
    acked: list[s3log.Entry] = []
    for i in range(12):
        w.append("msg", {"i": i, "text": "x" * 300})
        acked += w.commit().acked
        if ran:
            break
    return acked


def head_of(store: s3log.MemoryStore, sid: str = "s1") -> s3log.Head:
    """The decoded head of ``sid`` under the default prefix."""
    key = f"s3log/sessions/{sid}/head"
    return decode_head(store.get(key).body, key)


class DeferDeletes:
    """The objects of ``inner``; gc's DELETEs are held back until :meth:`apply`: a gc run
    decided, and its requests arrive later. With ``if_match`` False only the plain DELETEs
    are held back (the conditional ones go through at once)."""

    honours_preconditions = True

    def __init__(self, inner: s3log.MemoryStore, *, if_match: bool = True) -> None:
        self.inner = inner
        self.if_match = if_match
        self.deferred: list[tuple[str, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete(self, key: str) -> None:
        self.deferred.append((key, None))

    def delete_if_match(self, key: str, etag: str) -> None:
        if not self.if_match:
            self.inner.delete_if_match(key, etag)
            return
        self.deferred.append((key, etag))

    def apply(self) -> None:
        for key, etag in self.deferred:
            if etag is None:
                self.inner.delete(key)
            else:
                with contextlib.suppress(PreconditionFailed, ObjectNotFound):
                    self.inner.delete_if_match(key, etag)


def gc_beside(store: Any, clock: Clock, *, if_match: bool = False, **kw: Any) -> tuple[DeferDeletes, s3log.Log]:
    """A gc's view of ``store`` (another process, seed 8, :func:`deadline_log`'s config and
    ``kw``) whose DELETEs are held back until :meth:`DeferDeletes.apply`."""
    gc_store = DeferDeletes(store, if_match=if_match)
    return gc_store, deadline_log(gc_store, clock, seed=8, **kw)


def writer_beside_gc(store: Any, clock: Clock, **kw: Any) -> tuple[s3log.Log, DeferDeletes, s3log.Log,
                                                                     s3log.Writer[Any]]:
    """:func:`deadline_log` on ``store`` (config ``kw``), :func:`gc_beside` it, and a writer
    of a new session ``s1``."""
    log = deadline_log(store, clock, **kw)
    gc_store, gc_log = gc_beside(store, clock, **kw)
    return log, gc_store, gc_log, log.create("s1")


class HookedMatch(s3log.MemoryStore):
    """Runs ``hook`` once, just before the first If-Match PUT of :data:`SID`'s head."""

    hook: Any = None

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if key.endswith(f"/sessions/{SID}/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().put_if_match(key, body, etag)


def expired_world(sid: str = "thread-7") -> tuple[s3log.MemoryStore, Clock, s3log.Log]:
    """A session ``sid`` of one entry, expired 40 days later (a tombstone at its id)."""
    clock, store = Clock(T0), s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, clock)))
    w = log.create(sid)
    w.append("k", 1)
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [sid]
    return store, clock, log


def store_with(*tss: int) -> tuple[s3log.MemoryStore, list[str]]:
    """One session per ts (one entry each), labelled by its position."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    ids = []
    for i, ts in enumerate(tss):
        w = log.create(meta={"labels": {"n": str(i)}})
        w.append("k", {"i": i}, ts=ts)
        w.commit()
        ids.append(w.session_id)
    return store, ids


def one_entry(log: s3log.Log) -> s3log.Writer[Any]:
    """The writer of a new session holding one committed entry (kind ``k``, data 1)."""
    w = log.create()
    w.append("k", 1)
    w.commit()
    return w


def parent_and_fork(log: s3log.Log) -> tuple[str, str]:
    """A new session of one entry and a fork of it: their ids."""
    w = one_entry(log)
    return w.session_id, log.fork(w.session_id)


def sessions_log(store: s3log.MemoryStore, *sids: str) -> s3log.Log:
    """A log on ``store`` holding a session of one entry (its own id) at each of ``sids``."""
    log = s3log.Log(store)
    for sid in sids:
        w = log.create(sid)
        w.append("k", sid)
        w.commit()
    return log


def agent_turn(s: AgentSession, text: str) -> None:
    """One whole turn: the user's ``text`` and the assistant's reply to it."""
    s.user_input(text)
    s.assistant_items([{"role": "assistant", "content": f"re: {text}"}])
    s.turn_end()


def kinds(log: s3log.Log, sid: str) -> list[str]:
    """The kinds of ``sid``'s entries, in order."""
    return [e.kind for e in log.read(sid).entries]


class GatedHeads(s3log.AsyncMemoryStore):
    """Head PUTs wait for ``gate`` while it is cleared; ``entered`` says one is waiting, so a
    test can cancel or time out callers while a commit is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.entered.set()
        await self.gate.wait()
        return await super().put_if_match(key, body, etag)


def run_threads(target: Callable[..., Any], n: int = 8) -> None:
    """Run ``target(i)`` for i in range(n), each on its own thread, and wait for them all."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def race_writers(log: s3log.Log, sid: str, writers: int, commits: int) -> tuple[list[Any], list[tuple[str, int]]]:
    """``writers`` threads, each with its own writer of ``sid``, commit one entry at a time
    ``commits`` times: every acknowledged entry's data, and each commit's (session, head
    version)."""
    acked: list[Any] = []
    versions: list[tuple[str, int]] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        w = log.open(sid)
        for i in range(commits):
            w.append("k", {"w": n, "i": i})
            r = w.commit()
            with lock:
                acked.extend(e.data for e in r.acked)
                versions.append((r.session_id, r.head.version))

    run_threads(worker, writers)
    return acked, versions


def stale_writer(log: s3log.Log) -> tuple[s3log.Writer[Any], s3log.Writer[Any]]:
    """Two writers of one new session: ``a`` committed an entry after ``b`` opened it, and
    ``b`` holds an entry of its own, so ``b``'s next commit forks (a conflict)."""
    a = log.create()
    b = log.open(a.session_id)
    a.append("k", 1)
    a.commit()
    b.append("k", 2)
    return a, b


def one_node_graph(saver: Any) -> Any:
    """A LangGraph graph of one node appending "a" to ``steps``, checkpointed by ``saver``."""
    import operator
    from typing import Annotated, TypedDict

    from langgraph.graph import END, START, StateGraph

    State = TypedDict("State", {"steps": Annotated[list[str], operator.add]})  # noqa: UP013
    g = StateGraph(State)
    g.add_node("a", lambda s: {"steps": ["a"]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def drive(store: Any, proc: Any, *, before: Any = None, stop: Any = None) -> Any:
    """Run a protocol procedure directly on ``store`` (no retries; sleeps are skipped) and
    return its result. ``before(op)`` runs before each request; ``stop(op)`` true after
    performing ``op`` abandons the procedure there (an async commit cancelled once that
    request landed), and None is returned."""
    from s3log._protocol.ops import Parallel, Sleep, call_store

    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = proc.throw(error) if error is not None else proc.send(value)
        except StopIteration as done:
            return done.value
        if before is not None:
            before(op)
        value, error = None, None
        if isinstance(op, Sleep):
            continue
        ops = op.ops if isinstance(op, Parallel) else (op,)
        results: list[Any] = []
        for o in ops:
            try:
                results.append(call_store(store, o))
            except s3log.StoreError as exc:
                results.append(exc)
        if stop is not None and any(stop(o) for o in ops):
            proc.close()
            return None
        if isinstance(op, Parallel):
            value = results
        elif isinstance(results[0], BaseException):
            error = results[0]
        else:
            value = results[0]


def load_script(name: str) -> ModuleType:
    """The module ``scripts/<name>.py`` (scripts are no package), imported once per process."""
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
