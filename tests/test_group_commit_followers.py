"""AsyncWriter's group commit: tasks waiting while a commit is in flight follow it
(each on a future of its own, resolved when it ends) and the next commit carries
every entry queued meanwhile. Timeouts and cancellations of some waiters lose nothing
acknowledged, duplicate nothing and leave no task behind, under random cancellations,
store faults, conflicting writers and a loop shut down mid-commit."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import threading
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

import s3log
from s3log._protocol.ops import Blob, ListPage
from s3log.config import LogConfig, RetryPolicy
from s3log.errors import ConflictError, InvalidArgumentError, S3LogError, StoreError
from s3log.store.memory import AsyncMemoryStore
from s3log.testing.faults import AsyncFaultyStore, Fault


class _SlowStore(AsyncMemoryStore):
    """Every PUT takes a while (drawn from ``rng``), as a round trip does."""

    def __init__(self, rng: random.Random, most: float) -> None:
        super().__init__()
        self.rng, self.most = rng, most

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        await asyncio.sleep(self.rng.random() * self.most)
        return await super().put_if_match(key, body, etag)

    async def put_if_absent(self, key: str, body: bytes) -> str:
        await asyncio.sleep(self.rng.random() * self.most)
        return await super().put_if_absent(key, body)


@pytest.mark.parametrize("seed", range(4))
def test_waiters_timing_out_at_random_lose_and_duplicate_nothing_acknowledged(seed: int) -> None:
    async def main() -> tuple[int, int]:
        rng = random.Random(seed)
        store = _SlowStore(rng, 0.003)
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        acked: list[tuple[int, int, int]] = []
        timed_out = 0

        async def appender(a: int) -> None:
            nonlocal timed_out
            for i in range(4):
                try:
                    e = await asyncio.wait_for(w.append_durable("k", {"a": a, "i": i}), timeout=rng.random() * 0.01)
                except TimeoutError:
                    timed_out += 1
                else:
                    acked.append((a, i, e.seq))

        await asyncio.wait_for(asyncio.gather(*(appender(a) for a in range(60))), 60)
        await w.commit()  # whatever a timed-out waiter left queued
        entries = (await alog.read(w.session_id)).entries
        stored = [(e.data["a"], e.data["i"]) for e in entries]
        assert len(stored) == len(set(stored))
        for a, i, seq in acked:
            assert entries[seq].data == {"a": a, "i": i}
        # No follower left waiting, no commit left running.
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        assert w._following == [] or all(f.done() for f in w._following)
        await alog.aclose()
        return len(acked), timed_out

    acked, timed_out = asyncio.run(main())
    assert acked and timed_out  # both kinds of outcome happened


def test_followers_of_one_commit_share_the_next() -> None:
    """64 tasks appending 5 entries each: each round of appends is carried by few
    commits, not one per task (request counts are exact)."""

    async def main() -> dict[str, Any]:
        store = _SlowStore(random.Random(1), 0.002)
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        store.sync.requests.reset()

        async def appender(a: int) -> None:
            for i in range(5):
                await w.append_durable("k", {"a": a, "i": i})

        await asyncio.gather(*(appender(a) for a in range(64)))
        got = {"puts": store.sync.requests["PUT"], "entries": (await alog.read(w.session_id)).head.entry_count}
        await alog.aclose()
        return got

    got = asyncio.run(main())
    assert got["entries"] == 320
    # A commit per round at most, plus a segment beside a head now and then.
    assert got["puts"] <= 2 * 5 + 4, got


T = TypeVar("T")


#: The longest any scenario may take before it counts as a hang.
HANG = 15.0


class JitterStore(s3log.AsyncMemoryStore):
    """Every request yields to the loop a seeded-random number of times (0-3), so the
    interleavings of tasks vary with the seed without wall-clock sleeps; PUTs may also
    sleep ``put_sleep`` seconds, and a closed gate holds head PUTs (``put_if_match``)."""

    def __init__(self, seed: int = 0, put_sleep: float = 0.0) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.put_sleep = put_sleep
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        #: When set, every request raises it (a store gone bad: a closed client, say).
        self.broken: StoreError | None = None

    async def _jitter(self) -> None:
        if self.broken is not None:
            raise self.broken
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)

    async def get(self, key: str) -> Blob:
        await self._jitter()
        return await super().get(key)

    async def put_if_absent(self, key: str, body: bytes) -> str:
        await self._jitter()
        if self.put_sleep:
            await asyncio.sleep(self.put_sleep)
        return await super().put_if_absent(key, body)

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.entered.set()
        await self.gate.wait()
        await self._jitter()
        if self.put_sleep:
            await asyncio.sleep(self.put_sleep)
        return await super().put_if_match(key, body, etag)

    async def list(self, prefix: str, **kw: Any) -> ListPage:
        await self._jitter()
        return await super().list(prefix, **kw)

    async def delete(self, key: str) -> None:
        await self._jitter()
        await super().delete(key)


def _fast_retry(attempts: int = 3) -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=attempts, initial=0.0002, max_backoff=0.001, max_time=2.0))


async def _bounded(aw: Awaitable[T], timeout: float = HANG) -> T:
    """``aw``, or a test failure (not a hung suite) if it takes longer than ``timeout``."""
    try:
        return await asyncio.wait_for(aw, timeout)
    except TimeoutError:
        pytest.fail(f"hang: not done within {timeout}s")


async def _held_commit(store: Any, w: Any, followers: int) -> tuple[asyncio.Task[Any], list[asyncio.Task[Any]]]:
    """A commit of "lead" held at its head PUT (``store.gate`` closed), then ``followers``
    tasks appending while it runs, let run until each follows it."""
    store.gate.clear()
    lead = asyncio.create_task(w.append_durable("k", "lead"))
    await _bounded(store.entered.wait())           # the commit of "lead" is held at its head PUT
    tasks = [asyncio.create_task(w.append_durable("k", f"f{i}")) for i in range(followers)]
    for _ in range(5):
        await asyncio.sleep(0)
    return lead, tasks


async def _no_stray_tasks() -> None:
    """Every task but this one ends (commit tasks included) once the callers are done."""
    me = asyncio.current_task()
    for _ in range(200):
        others = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not others:
            return
        await asyncio.sleep(0.001)
    pytest.fail(f"tasks left pending: {others!r}")


async def _stored(log: s3log.AsyncLog, kind: str = "k") -> tuple[Counter[Any], dict[Any, bytes]]:
    """How often each ``kind`` entry's data occurs over every session (forks included),
    and its hash; every session's chain is verified on the way."""
    counts: Counter[Any] = Counter()
    hashes: dict[Any, bytes] = {}
    for sid in await log.list_session_ids():
        await log.verify(sid)
        for e in (await log.read(sid)).entries:
            if e.kind == kind:
                counts[e.data] += 1
                hashes[e.data] = e.hash
    return counts, hashes


@dataclass
class Outcomes:
    """What each append_durable saw: an entry (acknowledged), a cancellation, an error."""

    attempted: set[str] = field(default_factory=set)
    acked: dict[str, s3log.Entry] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    failed: dict[str, BaseException] = field(default_factory=dict)
    #: The ticket each append_durable that started took (to ask its status afterwards).
    tickets: dict[str, int] = field(default_factory=dict)
    #: The status of a cancelled append_durable's ticket right after it ended.
    after_cancel: dict[str, str] = field(default_factory=dict)


async def _appender(
    w: s3log.AsyncWriter[Any], name: str, out: Outcomes, rng: random.Random, rounds: int = 1
) -> None:
    """``rounds`` append_durable calls in turn, some under a random wait_for timeout;
    records each outcome. A cancellation of the task ends it (the canceller's doing)."""

    for j in range(rounds):
        data = f"{name}.{j}"
        out.attempted.add(data)

        async def durable(data: str = data) -> s3log.Entry:
            # append_durable queues its entry before it first suspends: this is its ticket.
            out.tickets[data] = w._core._next_ticket
            return await w.append_durable("k", data)

        try:
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
            if rng.random() < 0.25:
                entry = await asyncio.wait_for(durable(), rng.choice([0.0, 0.0002, 0.001, 0.003]))
            else:
                entry = await durable()
        except TimeoutError:
            out.cancelled.add(data)
            if data in out.tickets:
                out.after_cancel[data] = w.status(out.tickets[data])
            continue
        except asyncio.CancelledError:
            out.cancelled.add(data)
            if data in out.tickets:
                out.after_cancel[data] = w.status(out.tickets[data])
            return
        except S3LogError as exc:
            out.failed[data] = exc
            continue
        out.acked[data] = entry


async def _canceller(tasks: list[asyncio.Task[None]], rng: random.Random, rate: float) -> None:
    """Cancel a random live appender every few loop turns, at whatever await it is in;
    at most a fifth of them, so a waiter nobody wakes stays hung (and fails the test)."""
    budget = len(tasks) // 5
    while budget and not all(t.done() for t in tasks):
        for _ in range(rng.randrange(1, 6)):
            await asyncio.sleep(0)
        live = [t for t in tasks if not t.done()]
        if live and rng.random() < rate:
            rng.choice(live).cancel()
            budget -= 1


async def _settle_all(w: s3log.AsyncWriter[Any]) -> None:
    """Commit until nothing is queued (the entries of failed commits are recommitted)."""
    for _ in range(20):
        if w.pending == 0:
            return
        await w.commit()
    pytest.fail(f"{w.pending} entries still queued after 20 commits")


async def _check(log: s3log.AsyncLog, w: s3log.AsyncWriter[Any], out: Outcomes) -> None:
    """The promise, over everything stored: acknowledged exactly once (as acknowledged),
    nothing twice, nothing withdrawn stored, every outcome accounted for."""
    ends = [set(out.acked), out.cancelled, set(out.failed)]
    assert sum(map(len, ends)) == len(out.attempted) and set().union(*ends) == out.attempted
    counts, hashes = await _stored(log)
    dup = {d: c for d, c in counts.items() if c > 1}
    assert not dup, f"stored twice: {dup}"
    lost = [d for d in out.acked if counts[d] != 1]
    assert not lost, f"acknowledged but not stored: {lost}"
    wrong = [d for d, e in out.acked.items() if hashes[d] != e.hash]
    assert not wrong, f"acknowledged entry differs from the stored one: {wrong}"
    # A cancelled append_durable leaves its entry withdrawn, or carried by a commit
    # (committing, uncertain; unknown once committed and forgotten), never just queued.
    left = {d: st for d, st in out.after_cancel.items() if st == "pending"}
    assert not left, f"cancelled but neither withdrawn nor carried: {left}"
    withdrawn = {d for d, t in out.tickets.items() if w.status(t) == "withdrawn"}
    assert not withdrawn & set(out.acked)
    assert not withdrawn & set(counts), f"withdrawn yet stored: {withdrawn & set(counts)}"
    # A ticket no commit carried and nobody withdrew would be a leak of the queue.
    assert w.pending == 0


async def _stress(
    w: s3log.AsyncWriter[Any], seed: int, n: int, cancel_rate: float, rounds: int = 1,
    rival: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> Outcomes:
    rng = random.Random(seed)
    out = Outcomes()
    tasks = [asyncio.create_task(_appender(w, f"e{i}", out, random.Random(rng.random()), rounds))
             for i in range(n)]
    side = [asyncio.create_task(_canceller(tasks, random.Random(rng.random()), cancel_rate))]
    if rival is not None:
        side.append(asyncio.create_task(rival()))
    await _bounded(asyncio.gather(*tasks, *side))
    return out


@pytest.mark.parametrize("seed", range(6))
async def test_random_cancellations_lose_nothing_acknowledged_and_store_nothing_withdrawn(seed: int) -> None:
    store = JitterStore(seed)
    log = s3log.AsyncLog(store)
    w = await log.create()
    n = 64 + seed * 80  # 64 .. 464 appenders at once
    out = await _stress(w, seed, n, cancel_rate=0.1, rounds=3)
    await _settle_all(w)
    await _no_stray_tasks()
    await _check(log, w, out)
    assert out.acked and out.cancelled, "the scenario must both acknowledge and cancel"
    assert w.forks == []
    # Follower lists: only the last commit's is held, and it is fully resolved.
    assert all(f.done() for f in w._following)


@pytest.mark.parametrize("seed", range(4))
async def test_random_cancellations_with_store_faults_and_exhausted_retries(seed: int) -> None:
    inner = JitterStore(seed)
    on = [True]
    plan_rng = random.Random(seed)
    faults: tuple[Fault, ...] = ("409", "503", "timeout-landed", "timeout-lost")

    def plan(method: str, key: str) -> Fault | None:
        if on[0] and plan_rng.random() < 0.5:
            return plan_rng.choice(faults)
        return None

    faulty = AsyncFaultyStore(inner, plan)
    log = s3log.AsyncLog(faulty, config=_fast_retry(attempts=2))
    w = await _bounded(_create_retrying(log))
    n = 64
    out = await _stress(w, seed, n, cancel_rate=0.05, rounds=8)
    on[0] = False
    await _settle_all(w)
    await _no_stray_tasks()
    await _check(log, w, out)
    assert faulty.injected, "faults must have struck"
    assert all(isinstance(e, StoreError) for e in out.failed.values())


async def _create_retrying(log: s3log.AsyncLog) -> s3log.AsyncWriter[Any]:
    for _ in range(50):
        with contextlib.suppress(StoreError):
            return await log.create()
    pytest.fail("could not create a session")


@pytest.mark.parametrize("seed", range(4))
async def test_random_cancellations_against_a_conflicting_writer_fork_and_keep_everything(seed: int) -> None:
    store = JitterStore(seed)
    # No wall-clock backoff: append_latest waits one after a lost race, and the rival's
    # interleavings with w must come from the seeded store alone.
    log = s3log.AsyncLog(store, config=s3log.LogConfig(retry=s3log.RetryPolicy(initial=0.0)))
    w = await log.create()
    rng = random.Random(seed + 100)
    rival_acked: list[str] = []

    async def rival() -> None:
        # Another writer appends on top of whatever session w is on now (never forking
        # itself): w's next commit meets a 412 and forks.
        for j in range(12):
            for _ in range(rng.randrange(2, 12)):
                await asyncio.sleep(0)
            await log.append_latest(w.session_id, [("r", f"r{j}")])
            rival_acked.append(f"r{j}")

    n = 100
    out = await _stress(w, seed, n, cancel_rate=0.05, rounds=4, rival=rival)
    await _settle_all(w)
    await _no_stray_tasks()
    await _check(log, w, out)
    assert w.forks, "the rival must have made w fork"
    rivals, _ = await _stored(log, "r")
    assert sorted(rivals) == sorted(rival_acked) and set(rivals.values()) == {1}
    # Each acknowledged entry is in the session of the fork w was on when it was committed.
    sessions = {w.session_id} | {f.child for f in w.forks} | {f.parent.session for f in w.forks}
    for sid in sessions:
        for e in (await log.read(sid)).entries:
            if e.kind == "k" and e.data in out.acked:
                assert out.acked[e.data].hash == e.hash


async def test_on_conflict_raise_every_waiter_ends_and_nothing_is_stored_twice() -> None:
    store = JitterStore(7)
    log = s3log.AsyncLog(store)
    w = await log.create(on_conflict="raise")
    other = await log.open(w.session_id)
    await other.append_durable("r", "first")   # w's next commit meets a 412
    out = Outcomes()
    rng = random.Random(7)
    tasks = [asyncio.create_task(_appender(w, f"e{i}", out, random.Random(rng.random()))) for i in range(80)]
    await _bounded(asyncio.gather(*tasks))
    await _no_stray_tasks()
    assert out.failed and all(isinstance(e, ConflictError) for e in out.failed.values())
    assert not out.acked
    counts, _ = await _stored(log)
    assert not counts  # nothing of w's landed: its head never matched


async def test_commit_cancelled_wakes_followers_who_recommit_everything_once() -> None:
    store = JitterStore(1)
    log = s3log.AsyncLog(store)
    w = await log.create()
    first, followers = await _held_commit(store, w, 50)
    commits = [t for t in asyncio.all_tasks() if "_commit_task" in repr(t.get_coro())]
    assert len(commits) == 1 and len(w._following) == 50
    commits[0].cancel()                            # e.g. by a supervisor, not by any waiter
    await asyncio.sleep(0)
    store.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await _bounded(first)                      # the leader awaited that very commit
    entries = await _bounded(asyncio.gather(*followers))
    assert [e.data for e in entries] == [f"f{i}" for i in range(50)]
    await _settle_all(w)                           # "lead" is uncertain: recommitted once
    await _no_stray_tasks()
    counts, _ = await _stored(log)
    assert counts == Counter({"lead": 1, **{f"f{i}": 1 for i in range(50)}})


async def test_commit_raising_wakes_followers_none_hangs_and_nothing_doubles() -> None:
    store = JitterStore(2)
    log = s3log.AsyncLog(store, config=_fast_retry(attempts=1))
    w = await log.create()
    lead, followers = await _held_commit(store, w, 40)
    # The store goes bad (as a closed client would): the commit in flight and every
    # commit a woken follower leads raise.
    store.broken = StoreError("store closed", key="", code="Closed")
    store.gate.set()
    results = await _bounded(asyncio.gather(lead, *followers, return_exceptions=True))
    assert all(isinstance(r, StoreError) for r in results), results
    await _no_stray_tasks()
    store.broken = None
    await _settle_all(w)
    counts, _ = await _stored(log)
    assert set(counts.values()) <= {1}
    # Entries whose waiter gave up before any commit carried them are withdrawn.
    assert counts["lead"] == 1


def test_loop_shutdown_mid_commit_ends_every_waiter() -> None:
    """asyncio.run returning while 60 waiters follow a commit held at its head PUT: the
    shutdown cancels them all, and must finish (no follower left waiting forever)."""
    box: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        store = JitterStore(3)
        log = s3log.AsyncLog(store)
        w = await log.create()
        box["store"], box["sid"] = store.sync, w.session_id
        store.gate.clear()
        for i in range(60):
            asyncio.create_task(w.append_durable("k", f"e{i}"))  # noqa: RUF006 - left to the shutdown
        await store.entered.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        box["following"] = len(w._following)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), "loop shutdown hung"
    assert box["following"] == 59 and errors == []

    async def after() -> None:
        log = s3log.AsyncLog(s3log.AsyncMemoryStore(box["store"]))
        assert (await log.read(box["sid"])).entries == []   # the cancelled commit never PUT
        w = await log.open(box["sid"])
        await w.append_durable("k", "later")                # the session still takes commits
        counts, _ = await _stored(log)
        assert counts == Counter({"later": 1})

    asyncio.run(after())


async def test_renew_lease_commit_submit_wait_and_status_interleaved() -> None:
    store = JitterStore(4)
    log = s3log.AsyncLog(store)
    w = await log.create()
    w.hold_lease("me", 60_000)
    rng = random.Random(4)
    out = Outcomes()
    tickets: dict[int, str] = {}

    async def renewer() -> None:
        for _ in range(15):
            for _ in range(rng.randrange(1, 8)):
                await asyncio.sleep(0)
            await w.renew_lease()

    async def committer() -> None:
        # Explicit commits replace the running commit (and its follower list) mid-flight.
        for _ in range(15):
            for _ in range(rng.randrange(1, 8)):
                await asyncio.sleep(0)
            await w.commit()

    async def submitter(i: int) -> None:
        t = w.submit("k", f"s{i}")
        tickets[t] = f"s{i}"
        assert w.status(t) in ("pending", "committing", "committed")
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
        if rng.random() < 0.3:
            # A wait that times out changes nothing: the entry stays queued.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(w.wait(t), 0)
            assert w.status(t) in ("pending", "committing", "committed")
        entry = await w.wait(t)
        assert entry.data == f"s{i}" and w.status(t) == "committed"
        out.acked[f"s{i}"] = entry

    appenders = [asyncio.create_task(_appender(w, f"e{i}", out, random.Random(i))) for i in range(60)]
    submitters = [asyncio.create_task(submitter(i)) for i in range(60)]
    await _bounded(asyncio.gather(renewer(), committer(), *appenders, *submitters))
    await _settle_all(w)
    await _no_stray_tasks()
    counts, hashes = await _stored(log)
    assert set(counts.values()) <= {1}
    assert all(counts[d] == 1 and hashes[d] == e.hash for d, e in out.acked.items())
    assert len([d for d in out.acked if d.startswith("s")]) == 60
    assert w.head.lease is not None and w.head.lease.owner == "me"


async def test_cancelled_follower_resolved_nothing_else_cancelled() -> None:
    """Cancelling one follower (its future cancelled) must not cancel the commit, the
    other followers, or break _release (which skips done futures)."""
    store = JitterStore(5)
    log = s3log.AsyncLog(store)
    w = await log.create()
    lead, tasks = await _held_commit(store, w, 30)
    following = list(w._following)
    assert len(following) == 30
    for t in tasks[::3]:
        t.cancel()
    await asyncio.gather(*tasks[::3], return_exceptions=True)
    assert sum(f.cancelled() for f in following) == 10
    store.gate.set()
    assert (await _bounded(lead)).data == "lead"
    kept = [t for i, t in enumerate(tasks) if i % 3]
    assert [e.data for e in await _bounded(asyncio.gather(*kept))] == [f"f{i}" for i in range(30) if i % 3]
    assert all(f.done() for f in following)
    await _no_stray_tasks()
    counts, _ = await _stored(log)
    assert counts == Counter({"lead": 1, **{f"f{i}": 1 for i in range(30) if i % 3}})


async def test_follower_lists_of_finished_commits_are_not_kept() -> None:
    store = JitterStore(6)
    log = s3log.AsyncLog(store)
    w = await log.create()
    early: list[weakref.ref[asyncio.Future[None]]] = []
    for round_ in range(100):
        held = round_ < 5
        if held:  # hold the first rounds' commits at their head PUT to see their followers
            store.gate.clear()
            store.entered.clear()
        tasks = [asyncio.create_task(w.append_durable("k", f"{round_}.{i}")) for i in range(8)]
        if held:
            await _bounded(store.entered.wait())
            for _ in range(5):
                await asyncio.sleep(0)
            early.extend(weakref.ref(f) for f in w._following)
            store.gate.set()
        await _bounded(asyncio.gather(*tasks))
    assert len(early) == 5 * 7, "the held commits must have had 7 followers each"
    assert len(w._following) <= 8
    del tasks
    gc.collect()
    assert all(r() is None for r in early), "futures of finished commits are still referenced"


async def test_cancelled_followers_do_not_accumulate_during_one_long_commit() -> None:
    store = JitterStore(8)
    log = s3log.AsyncLog(store)
    w = await log.create()
    store.gate.clear()
    lead = asyncio.create_task(w.append_durable("k", "lead"))
    await _bounded(store.entered.wait())
    t = w.submit("k", "polled")
    for _ in range(500):
        # A caller polling for its entry with a short timeout while the commit is stuck.
        poll = asyncio.create_task(w.wait(t))
        for _ in range(3):
            await asyncio.sleep(0)
        poll.cancel()
        await asyncio.gather(poll, return_exceptions=True)
    grown = len(w._following)
    store.gate.set()
    await _bounded(lead)
    assert (await _bounded(w.wait(t))).data == "polled"
    assert grown <= 1, f"{grown} futures of cancelled waiters kept by one commit"


async def test_group_commit_still_groups_64_appenders_times_10() -> None:
    store = JitterStore(9, put_sleep=0.003)
    log = s3log.AsyncLog(store)
    w = await log.create()
    store.requests.reset()

    async def appender(i: int) -> list[s3log.Entry]:
        return [await w.append_durable("k", f"{i}.{j}") for j in range(10)]

    got = await _bounded(asyncio.gather(*(appender(i) for i in range(64))))
    heads = store.requests["PUT"]
    # 640 entries: each round of 64 goes in one commit (a head PUT, a few segment PUTs
    # as the tail flushes); one commit per entry would be 640 PUTs.
    assert heads <= 20, f"{heads} PUTs for 640 entries: group commit no longer groups"
    seqs = sorted(e.seq for es in got for e in es)
    assert seqs == list(range(640))
    await _no_stray_tasks()
    counts, _ = await _stored(log)
    assert len(counts) == 640 and set(counts.values()) == {1}


async def test_second_wait_on_a_claimed_ticket_returns_or_raises() -> None:
    log = s3log.AsyncLog(s3log.AsyncMemoryStore())
    w = await log.create()
    t = w.submit("k", "x")
    first = await _bounded(w.wait(t))
    try:
        again = await asyncio.wait_for(w.wait(t), 2.0)
    except InvalidArgumentError:
        return
    except TimeoutError:
        pytest.fail("second wait on a committed ticket never returned")
    assert again == first


async def test_two_tasks_waiting_on_one_ticket_both_end() -> None:
    store = JitterStore(10)
    log = s3log.AsyncLog(store)
    w = await log.create()
    t = w.submit("k", "x")
    a = asyncio.create_task(w.wait(t))
    b = asyncio.create_task(w.wait(t))
    _, pending = await asyncio.wait([a, b], timeout=2.0)
    for p in pending:
        p.cancel()
    await asyncio.gather(a, b, return_exceptions=True)
    assert not pending, "a waiter on a committed ticket never ended"


async def test_one_attempt_writer_recovers_after_an_undecided_head_put() -> None:
    script: list[tuple[str, Fault]] = []

    def plan(method: str, key: str) -> Fault | None:
        if script and script[0][0] == method:
            return script.pop(0)[1]
        return None

    faulty = AsyncFaultyStore(s3log.AsyncMemoryStore(), plan)
    log = s3log.AsyncLog(faulty, config=_fast_retry(attempts=1))
    w = await log.create()
    script[:] = [("put_if_match", "timeout-landed"), ("get", "503")]
    with pytest.raises(StoreError):
        await w.append_durable("k", "a")           # landed, but the writer could not tell
    assert not script
    for i in range(3):                             # no fault any more
        with contextlib.suppress(StoreError):
            await _bounded(w.append_durable("k", f"b{i}"))
            break
    counts, _ = await _stored(log)
    assert counts["a"] == 1 and sum(counts[f"b{i}"] for i in range(3)) >= 1, counts


async def test_fault_injecting_store_serves_paged_listings() -> None:
    log = s3log.AsyncLog(AsyncFaultyStore(s3log.AsyncMemoryStore(), lambda method, key: None))
    ids = [(await log.create()).session_id for _ in range(3)]
    after = sorted(ids)[1]
    got = [info.session_id async for info in log.list_sessions(after=after)]
    assert got and after not in got
