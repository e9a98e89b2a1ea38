"""Forks: a fork whose outcome is unknown is continued, never forked again, and every fork of a
commit is reported; forks into an explicit child id can be retried, and refuse an id taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import SessionExists, StoreError, TransientStoreError
from s3log.testing.faults import AsyncFaultyStore, FaultyStore
from tests.delete_hooks import Clock
from tests.helpers import drive
from tests.tombstones import tombstone_idle, tombstone_proc


def _parent(store: Any) -> s3log.Log:
    log = s3log.Log(store, config=s3log.LogConfig(retry=s3log.RetryPolicy(attempts=2, initial=0.001)))
    w = log.create("p1")
    w.append("k", 1)
    w.commit()
    return log


@pytest.mark.parametrize("fault", ["503", "timeout-lost"])
def test_a_fork_into_an_explicit_id_whose_head_never_landed_can_be_retried(fault: str) -> None:
    on = [True]
    store = FaultyStore(s3log.MemoryStore(), lambda method, key: fault if on[0] and method == "put_if_absent"
                        and key.endswith("/c1/head") else None)
    on[0] = False
    log = _parent(store)
    on[0] = True
    with pytest.raises(StoreError):
        log.fork("p1", child_id="c1")  # the marker is stored, the head never
    on[0] = False
    assert store.inner.get("s3log/sessions/p1/forks/c1").body
    assert log.children("p1") == []
    assert log.fork("p1", child_id="c1") == "c1"  # was: SessionExists for a session that is not there
    assert [e.kind for e in log.read("c1").entries] == ["s3log.fork"]
    assert log.children("p1") == ["c1"]
    with pytest.raises(SessionExists):  # now it is there
        log.fork("p1", child_id="c1")


def test_a_fork_into_an_explicit_id_cancelled_before_its_head_can_be_retried() -> None:
    class HoldChildHead(s3log.AsyncMemoryStore):
        hold = True

        async def put_if_absent(self, key: str, body: bytes) -> str:
            if self.hold and key.endswith("/c1/head"):
                await asyncio.sleep(3600)
            return await super().put_if_absent(key, body)

    store = HoldChildHead()
    log = s3log.AsyncLog(store)

    async def go() -> list[str]:
        w = await log.create("p1")
        await w.append_durable("k", 1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(log.fork("p1", child_id="c1"), 0.05)
        store.hold = False
        assert await log.fork("p1", child_id="c1") == "c1"
        return [e.kind for e in (await log.read("c1")).entries]

    assert asyncio.run(go()) == ["s3log.fork"]


def test_an_explicit_child_id_freed_by_log_delete_can_be_forked_into_again() -> None:
    log = _parent(s3log.MemoryStore())
    log.fork("p1", child_id="c1")
    log.delete("c1")  # leaves its young marker under p1 to gc
    assert log.fork("p1", child_id="c1") == "c1"
    assert log.children("p1") == ["c1"]
    assert [e.kind for e in log.read("c1").entries] == ["s3log.fork"]


def test_a_key_holding_something_else_than_a_marker_of_that_fork_still_refuses_the_child_id() -> None:
    store = s3log.MemoryStore()
    log = _parent(store)
    for planted in (b"not cbor", s3log._format.cbor.dumps({"v": 1, "child": "c2", "parent": {"session": "p1"}}),
                    s3log._format.cbor.dumps({"v": 1, "child": "c1", "parent": {"session": "p0"}})):
        key = "s3log/sessions/p1/forks/c1"
        store.delete(key)
        store.put_if_absent(key, planted)
        with pytest.raises(SessionExists):
            log.fork("p1", child_id="c1")
        assert store.get(key).body == planted  # left alone
        with pytest.raises(s3log.SessionNotFound):
            log.read("c1")


def test_an_earlier_fork_head_landing_late_keeps_the_id_and_the_retry_is_refused() -> None:
    # The first attempt's head PUT is on its way; the retry replaces the marker, then its
    # own create-only head PUT meets the landed one: SessionExists, and the child is the
    # first attempt's alone.
    late: list[tuple[str, bytes]] = []

    class Late(s3log.MemoryStore):
        def put_if_absent(self, key: str, body: bytes) -> str:
            if key.endswith("/c1/head") and not late:
                late.append((key, body))
                raise TransientStoreError("lost", key=key)
            if key.endswith("/c1/head") and late and late[0][0] == key and len(late) == 1:
                late.append((key, body))
                super().put_if_absent(*late[0])  # the first attempt's PUT lands now
            return super().put_if_absent(key, body)

    store = Late()
    log = s3log.Log(store, config=s3log.LogConfig(retry=s3log.RetryPolicy(attempts=1, initial=0.001)))
    w = log.create("p1")
    w.append("k", 1)
    w.commit()
    with pytest.raises(StoreError):
        log.fork("p1", child_id="c1")
    with pytest.raises(SessionExists):
        log.fork("p1", child_id="c1")
    assert [e.kind for e in log.read("c1").entries] == ["s3log.fork"]
    assert log.children("p1") == ["c1"]


def _fast(attempts: int = 2) -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=attempts, initial=0.0001, max_backoff=0.0002, max_time=1.0))


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


T0 = 1_800_000_000_000

DAY = 86_400_000


def _undecided_fork(box: dict[str, Any]) -> Any:
    """A fault plan: while ``box["on"]``, a fork child's head lands with its reply lost and
    re-reading it fails (the fork is undecided); the sessions in ``box["spare"]`` are left alone."""

    def plan(method: str, key: str) -> Any:
        if not box["on"] or not key.endswith("/head") or any(s in key for s in box["spare"]):
            return None
        if method == "put_if_absent":
            return "timeout-landed"  # the fork child's head lands, its reply is lost
        if method == "get":
            return "503"  # ...and re-reading it fails: the fork is undecided
        return None

    return plan


def _undecided_world() -> tuple[s3log.MemoryStore, dict[str, Any], s3log.Log]:
    """A store, the switch of its undecided-fork plan (:func:`_undecided_fork`) and a log over both."""
    inner = s3log.MemoryStore()
    box: dict[str, Any] = {"on": False, "spare": ()}
    return inner, box, s3log.Log(FaultyStore(inner, _undecided_fork(box)), config=_fast())


def test_undecided_fork_then_equal_entry_in_parent_is_not_acked_twice() -> None:
    inner, box, log_a = _undecided_world()
    w_a = log_a.create()
    sid = w_a.session_id
    box["spare"] = (sid,)
    w_a.append("k", "a0")
    w_a.commit()

    w_b = s3log.Log(inner).open(sid)
    b_entry = w_b.append_durable("pop", {"item": 1}, ts=1_000)  # B pops item 1

    t = w_a.submit("pop", {"item": 1}, ts=1_000)  # A pops item 1 too (equal entry)
    box["on"] = True
    with pytest.raises(StoreError):
        w_a.wait(t)  # parent: definite 412; fork child: undecided
    box["on"] = False

    a_entry = w_a.wait(t)
    # A's entry must not be B's stored entry (acknowledged to two writers).
    assert not (w_a.session_id == sid and a_entry.hash == b_entry.hash and a_entry.seq == b_entry.seq), \
        "A was acknowledged B's entry as its own"
    # And A's payload is stored once across all sessions (B's copy is B's).
    plain = s3log.Log(inner)
    holders = [s for s in plain.list_session_ids() if s != sid
               for e in plain.read(s).entries if e.kind == "pop"]
    assert holders == [w_a.session_id]


class GhostStore(s3log.MemoryStore):
    """Scripted faults on fork-child heads (keys outside ``parent``)."""

    def __init__(self) -> None:
        super().__init__()
        self.parent = "?"
        self.mode: str | None = None
        self.ghost: tuple[str, bytes, str] | None = None
        self.child_gets_fail = 0
        self.puts_lost = 0

    def _child_head(self, key: str) -> bool:
        return key.endswith("/head") and self.parent not in key

    def get(self, key: str) -> Any:
        if self._child_head(key) and self.child_gets_fail:
            self.child_gets_fail -= 1
            raise TransientStoreError("injected 503", key=key, code="SlowDown", status=503)
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        etag = super().put_if_absent(key, body)
        if self.mode == "fork-undecided" and self._child_head(key):
            self.mode = None
            self.child_gets_fail = 10  # the re-read fails too: undecided
            raise TransientStoreError("injected timeout (landed)", key=key, code="RequestTimeout")
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if self._child_head(key):
            if self.mode == "hold":  # in flight: lands later (or never)
                self.mode = "lose"
                self.ghost = (key, body, etag)
                raise TransientStoreError("injected timeout (in flight)", key=key, code="RequestTimeout")
            if self.mode == "lose":
                self.mode = None
                raise TransientStoreError("injected timeout (lost)", key=key, code="RequestTimeout")
            if self.mode == "land-ghost-first" and self.ghost is not None:
                self.mode = None
                g, self.ghost = self.ghost, None
                super().put_if_match(*g)  # the old request lands just now
        return super().put_if_match(key, body, etag)


def test_entry_continued_in_a_doubted_child_is_not_forked_again() -> None:
    store = GhostStore()
    log = s3log.Log(store, config=_fast())
    w = log.create()
    store.parent = sid = w.session_id
    w.append("k", "a0")
    w.commit()
    other = s3log.Log(store).open(sid)
    other.append("k", "b0")
    other.commit()  # w is behind: its next commit forks

    tx = w.submit("k", "x")
    store.mode = "fork-undecided"
    with pytest.raises(StoreError):
        w.commit()  # forks into C = [fork, x]; undecided
    store.child_gets_fail = 0

    ty = w.submit("k", "y")
    store.mode = "hold"
    with pytest.raises(StoreError):
        w.commit()  # continues in C: its PUT of y is in flight, then given up
    assert w.status(ty) == "uncertain"

    store.mode = "land-ghost-first"
    assert w.wait(tx).data == "x"
    assert w.wait(ty).data == "y"

    plain = s3log.Log(store)
    holders = sorted(s for s in plain.list_session_ids()
                     for e in plain.read(s).entries if e.kind == "k" and e.data == "y")
    assert holders == [w.session_id], f"y stored in {len(holders)} sessions"


def test_writer_recovers_when_its_doubted_fork_child_was_expired() -> None:
    clock = Clock(T0)
    inner = s3log.MemoryStore()
    box: dict[str, Any] = {"on": False, "spare": ()}
    plan = _undecided_fork(box)

    cfg = LogConfig(env=Env.deterministic(1, clock),
                    retry=RetryPolicy(attempts=2, initial=0.0001, max_backoff=0.0002, max_time=1.0))
    log = s3log.Log(FaultyStore(inner, plan), config=cfg)
    w = log.create()
    sid = w.session_id
    box["spare"] = (sid,)
    w.append("k", "a0")
    w.commit()
    other = s3log.Log(inner, config=LogConfig(env=Env.deterministic(2, clock))).open(sid)
    other.append("k", "b0")
    other.commit()

    t = w.submit("k", "x")
    box["on"] = True
    with pytest.raises(StoreError):
        w.commit()  # the fork's child head lands; this writer does not know
    box["on"] = False

    clock.t += 40 * DAY
    sweeper = s3log.Log(inner, config=LogConfig(env=Env.deterministic(3, clock)))
    assert len(tombstone_idle(sweeper, idle_for=timedelta(days=30)).expired) == 2  # parent and child

    # The writer must be able to make x durable somewhere readable (fork anew), not be
    # wedged with an uncertain entry it can neither commit nor withdraw.
    for _ in range(3):
        try:
            entry = w.wait(t)
            break
        except StoreError:
            continue
    else:
        pytest.fail(f"wedged: every commit raises; ticket is {w.status(t)!r}, withdraw={w.withdraw(t)}")
    assert entry.data == "x"
    assert [e.data for e in sweeper.read(w.session_id).entries][-1] == "x"


def test_every_fork_of_a_commit_is_reported() -> None:
    store = GhostStore()
    seen: list[s3log.ForkInfo] = []
    log = s3log.Log(store, config=_fast())
    w = log.create(on_fork=seen.append)
    store.parent = sid = w.session_id
    w.append("k", "a0")
    w.commit()
    other = s3log.Log(store).open(sid)
    other.append("k", "b0")
    other.commit()
    tx = w.submit("k", "x")
    store.mode = "fork-undecided"
    with pytest.raises(StoreError):
        w.commit()
    store.child_gets_fail = 0
    # Someone else writes to the child (it is a readable session) before w retries.
    child = s3log.Log(store).children(sid)[0]
    c = s3log.Log(store).open(child)
    c.append("k", "c0")
    c.commit()
    ty = w.submit("k", "y")
    w.wait(tx)
    w.wait(ty)
    assert w.session_id not in (sid, child)  # forked twice: sid -> child -> grandchild
    assert [f.parent.session for f in seen] == [sid, child]


def test_fork_doubt_of_the_child_survives_a_grandchild_fork() -> None:
    inner, box, log_a = _undecided_world()
    w_a = log_a.create()
    p = w_a.session_id
    w_a.append("k", "a0")
    w_a.commit()

    plain = s3log.Log(inner)
    plain.open(p).append_durable("k", "b0")  # B moves the parent: A's next commit forks

    t1 = w_a.submit("k", "e1")
    box.update(on=True, spare=(p,))
    with pytest.raises(StoreError):
        w_a.commit()  # parent 412; fork child C1 holds [fork, e1], undecided
    box["on"] = False
    assert w_a.status(t1) == "uncertain"
    (c1,) = plain.children(p)
    plain.open(c1).append_durable("k", "d0")  # D writes in C1 after A's entries

    t2 = w_a.submit("k", "e2")
    box.update(on=True, spare=(p, c1))
    with pytest.raises(StoreError):
        # parent 412 -> C1 again (finds [fork, e1]) -> continue e2 there -> 412 (D) ->
        # fork from C1 into grandchild G: its head lands, undecided.
        w_a.commit()
    box["on"] = False

    w_a.wait(t1)
    w_a.wait(t2)

    holders: dict[str, list[str]] = {}
    for sid in plain.list_session_ids():
        for e in plain.read(sid).entries:
            if e.kind == "k" and e.data in ("e1", "e2"):
                holders.setdefault(e.data, []).append(sid)
    assert all(len(v) == 1 for v in holders.values()), f"entries stored in several sessions: {holders}"


def test_entry_never_sent_to_a_doubted_child_is_not_taken_from_another_writer_there() -> None:
    inner, box, log_a = _undecided_world()
    w_a = log_a.create()
    p = w_a.session_id
    box["spare"] = (p,)
    w_a.append("k", "a0")
    w_a.commit()
    plain = s3log.Log(inner)
    plain.open(p).append_durable("k", "b0")  # the parent moves: A's next commit forks

    t1 = w_a.submit("pop", {"item": 1}, ts=1_000)
    box["on"] = True
    with pytest.raises(StoreError):
        w_a.commit()  # child C1 holds [fork, item 1]; A does not know
    box["on"] = False

    (c1,) = plain.children(p)
    w_d = plain.open(c1)  # D works in C1: sees item 1 popped, pops item 2
    d_entry = w_d.append_durable("pop", {"item": 2}, ts=2_000)

    t2 = w_a.submit("pop", {"item": 2}, ts=2_000)  # A pops item 2 too: never sent anywhere
    w_a.wait(t1)
    a_entry = w_a.wait(t2)
    assert not (w_a.session_id == c1 and a_entry.hash == d_entry.hash and a_entry.seq == d_entry.seq), \
        "D's entry in the child was acknowledged to A as its own"


SID = "thread-1"


def _writer_on_a_clock() -> tuple[list[int], LogConfig, s3log.MemoryStore, Any, Any]:
    """A clock (ms, to move by hand), its config, a store, a LogCore on it and the
    commit queue of a writer of session SID, created."""
    from s3log._api.core import LogCore

    clock = [1_700_000_000_000]
    cfg = LogConfig(env=Env.deterministic(5, lambda: clock[0]))
    store = s3log.MemoryStore()
    core = LogCore(store, "p", cfg, None)
    w = core.writer(drive(store, core.create(core.new_session(SID, {}, None))), None, "fork", None)
    return clock, cfg, store, core, w


def _sessions_holding(store: s3log.MemoryStore, core: Any) -> dict[str, list[str]]:
    """Each payload ``p`` stored under ``core``'s prefix, with the sessions holding it
    (expired ones skipped)."""
    from s3log._protocol import listing, read

    stored: dict[str, list[str]] = {}
    for sid in drive(store, listing.list_session_ids(core.layout)):
        try:
            data = drive(store, read.load(core.layout, sid))
        except s3log.SessionNotFound:
            continue  # expired
        for e in data.entries:
            if isinstance(e.data, dict) and "p" in e.data:
                stored.setdefault(e.data["p"], []).append(sid)
    return stored


@pytest.mark.parametrize("end", ["expire", "delete"])
def test_a_fork_left_undecided_with_nothing_landed_is_continued_after_the_parent_ended(end: str) -> None:
    """A writer's commit loses a race with nothing of its batch landed, forks from where
    the writer stands and is abandoned once the child's head landed (the fork's doubt).
    The parent then expires, or is deleted. The next commit wrote to the parent again:
    after a delete it raised SessionNotFound, the batch stored in the child all the same
    (a writer whose PUT meets no race there, the session written again up to where it
    stands, stored it twice: simulator seed 11864, tests/test_sim.py). It reads the head
    first, and goes on in that child."""
    from s3log._protocol.ops import PutIfAbsent, PutIfMatch

    clock, cfg, store, core, w = _writer_on_a_clock()
    head_key = core.layout.head(SID)
    other = core.writer(drive(store, core.open(SID, None)), None, "fork", None)
    other.add("k", {"p": "x"}, None)
    drive(store, other.commit())  # the head moves on: w's next PUT loses
    clock[0] += 10_000
    w.add("k", {"p": "a"}, None)
    drive(store, w.commit(), stop=lambda o: isinstance(o, (PutIfAbsent, PutIfMatch)) and o.key.endswith("/head")
           and o.key != head_key)  # lost, forked from seq -1; abandoned once the child's head landed
    clock[0] += 1_000
    if end == "expire":
        assert drive(store, tombstone_proc(core.layout, cfg, 5_000)).expired == [SID]
    else:
        drive(store, core.delete(SID))
    result = drive(store, w.commit())
    assert [e.data["p"] for e in result.acked] == ["a"] and result.session_id != SID
    stored = _sessions_holding(store, core)
    assert stored["a"] == [result.session_id], stored


@pytest.mark.parametrize("end", ["expire", "delete-and-recreate"])
def test_fork_left_undecided_is_continued_after_the_parent_expired(end: str) -> None:
    """A writer's commit finds part of its batch landed (an earlier, abandoned commit's
    head), forks from there and is abandoned once the child's head landed (the fork's
    doubt). The parent then expires (or is deleted and its id created again). The next
    commit meets a head with none of its entries: it forked again from its own older
    position, into a new child, and the rest of the batch was stored twice (the first
    child holds it too). Found by simulator seeds 40358 (expire) and 40848 (delete, then
    the creator took the id over)."""
    from s3log._protocol.ops import PutIfAbsent, PutIfMatch

    clock, cfg, store, core, w = _writer_on_a_clock()
    head_key = core.layout.head(SID)
    w.add("k", {"p": "a"}, None)
    drive(store, w.commit())  # a@0, acknowledged
    w.add("k", {"p": "b"}, None)
    # b's head lands; the commit is abandoned before its reply: b@1 stored, unacknowledged.
    drive(store, w.commit(), stop=lambda o: isinstance(o, PutIfMatch) and o.key == head_key)
    other = core.writer(drive(store, core.open(SID, None)), None, "fork", None)
    other.add("k", {"p": "x"}, None)
    drive(store, other.commit())  # x@2 on top of b
    clock[0] += 10_000  # SID idle from here on; the child below is young
    w.add("k", {"p": "c"}, None)
    # Lost race: b found landed, the rest (c) forked from SID@1; abandoned once the
    # child's head landed.
    drive(store, w.commit(), stop=lambda o: isinstance(o, (PutIfAbsent, PutIfMatch)) and o.key.endswith("/head")
           and o.key != head_key)
    clock[0] += 1_000
    if end == "expire":
        # A tombstone (what a sweep with write access stores): Log.expire deletes the
        # head instead, and the writer then meets 404 as after Log.delete.
        assert drive(store, tombstone_proc(core.layout, cfg, 5_000)).expired == [SID]
    else:
        drive(store, core.delete(SID))
        drive(store, core.create(core.new_session(SID, {}, None)))
    result = drive(store, w.commit())
    assert [e.data["p"] for e in result.acked] == ["b", "c"]
    stored = _sessions_holding(store, core)
    assert stored["c"] == [result.session_id], stored
