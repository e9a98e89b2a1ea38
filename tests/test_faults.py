"""Faults: lost responses, throttling, 409s and crashes never lose or repeat a commit."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.testing.faults import AsyncFaultyStore, Crash, Fault, FaultyStore, random_plan
from s3log.testing.plugin import LocalS3
from tests.invariants import check_no_loss_no_duplicates

FAST = LogConfig(retry=RetryPolicy(attempts=12, initial=0.0005, max_backoff=0.002))


def scripted(faults: dict[tuple[str, int], Fault]) -> Any:
    """Inject ``faults[(method, n)]`` on the n-th call (from 1) of a method."""
    calls: dict[str, int] = {}

    def plan(method: str, key: str) -> Fault | None:
        calls[method] = calls.get(method, 0) + 1
        return faults.get((method, calls[method]))

    return plan


@pytest.mark.parametrize("fault", ["timeout-landed", "timeout-lost", "409", "503"])
def test_head_put_failure_is_resolved_without_loss_or_repeat(fault: Fault) -> None:
    mem = s3log.MemoryStore()
    log = s3log.Log(mem, config=FAST)
    sid = log.create().session_id
    store = FaultyStore(mem, scripted({("put_if_match", 1): fault}))
    w = s3log.Log(store, config=FAST).open(sid)
    w.append("k", "only-once")
    result = w.commit()
    assert result.fork is None and result.session_id == sid
    assert [e.data for e in log.read(sid).entries] == ["only-once"]
    assert store.injected == [("put_if_match", f"s3log/sessions/{sid}/head", fault)]
    w.append("k", "next")
    w.commit()
    assert [e.data for e in log.read(sid).entries] == ["only-once", "next"]


def test_landed_write_built_on_by_another_writer_is_acknowledged_not_forked() -> None:
    mem = s3log.MemoryStore()
    log = s3log.Log(mem, config=FAST)
    sid = log.create().session_id
    state = {"armed": False, "done": False}

    def plan(method: str, key: str) -> Fault | None:
        if method == "put_if_match" and not state["armed"]:
            state["armed"] = True
            return "timeout-landed"
        return None

    faulty = FaultyStore(mem, plan)
    real_get = faulty.get

    def get_after_interloper(key: str) -> s3log._protocol.ops.Blob:
        # Another writer commits on top of the landed head before ours re-reads it.
        if state["armed"] and not state["done"]:
            state["done"] = True
            o = log.open(sid)
            o.append("k", "interloper")
            o.commit()
        return real_get(key)

    faulty.get = get_after_interloper  # type: ignore[method-assign]
    w = s3log.Log(faulty, config=FAST).open(sid)
    w.append("k", "mine")
    result = w.commit()
    assert [e.data for e in result.acked] == ["mine"]
    assert result.fork is None
    assert [e.data for e in log.read(sid).entries] == ["mine", "interloper"]
    # The stale writer's next commit meets the conflict and forks.
    w.append("k", "later")
    r2 = w.commit()
    assert r2.fork is not None
    assert [m["data"] for m in log.read(r2.session_id).state()] == ["mine", "later"]


def test_crash_between_segment_and_head_leaves_the_session_intact() -> None:
    mem = s3log.MemoryStore()
    log = s3log.Log(mem, config=FAST)
    w0 = log.create()
    w0.append("k", "before")
    w0.commit()
    sid = w0.session_id
    store = FaultyStore(mem, scripted({("put_if_match", 1): "crash"}))
    w = s3log.Log(store, config=FAST).open(sid)
    w.append("big", "x" * 300_000)  # beyond pending_max_bytes: the segment goes first
    with pytest.raises(Crash):
        w.commit()
    segs = [k for k in mem.all_keys() if "/seg/" in k]
    assert len(segs) == 1  # the orphan segment
    view = log.read(sid)
    assert [e.data for e in view.entries] == ["before"]
    assert view.head.segments == ()
    w2 = log.open(sid)
    w2.append("k", "after")
    w2.commit()
    assert [e.data for e in log.read(sid).entries] == ["before", "after"]


def test_random_faults_over_http_keep_every_acknowledged_entry_once(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    plain = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url), config=FAST)
    sid = plain.create().session_id
    acked: list[Any] = []
    writers = []
    for n in range(3):
        store = FaultyStore(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url), random_plan(n, 0.25))
        writers.append(s3log.Log(store, config=FAST).open(sid))
    for i in range(12):
        for n, w in enumerate(writers):
            w.append("k", {"w": n, "i": i, "pad": "y" * (5000 * (i % 3))})
            try:
                r = w.commit()
            except s3log.StoreError:
                continue  # still pending: the next commit carries it
            acked.extend(e.data for e in r.acked)
    for w in writers:
        while w.pending:
            with contextlib.suppress(s3log.StoreError):
                acked.extend(e.data for e in w.commit().acked)
    assert len(acked) == 36
    check_no_loss_no_duplicates(plain, acked)


step = st.tuples(
    st.integers(0, 2),  # which writer
    st.integers(1, 3),  # entries appended
    st.booleans(),  # large entries (forces a segment)
    st.sampled_from([None, None, "409", "503", "timeout-landed", "timeout-lost"]),  # fault on its head PUT
    st.booleans(),  # re-open (restore) before appending, like a new invocation
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=25))
def test_random_interleavings_of_writers_and_faults_keep_every_invariant(steps: list[Any]) -> None:
    mem = s3log.MemoryStore()
    base = s3log.Log(mem, config=LogConfig(tail_per_commit=0, tail_max_bytes=2048, retry=FAST.retry))
    sid = base.create().session_id
    next_fault: list[Fault | None] = [None]

    def plan(method: str, key: str) -> Fault | None:
        if method == "put_if_match" and next_fault[0] is not None:
            f, next_fault[0] = next_fault[0], None
            return f
        return None

    flog = s3log.Log(FaultyStore(mem, plan), config=base.config)
    writers = [flog.open(sid) for _ in range(3)]
    acked: list[Any] = []
    counter = 0
    for who, n, large, fault, reopen in steps:
        if reopen and writers[who].pending == 0:
            writers[who] = flog.open(writers[who].session_id)
        for _ in range(n):
            counter += 1
            writers[who].append("k", {"n": counter, "pad": "z" * (900 if large else 5)})
        next_fault[0] = fault
        r = writers[who].commit()
        acked.extend(e.data for e in r.acked)
        assert r.session_id == writers[who].session_id
    assert len(acked) == counter
    sessions = check_no_loss_no_duplicates(base, acked)
    for sid_, entries in sessions.items():
        head = base.head(sid_)
        assert head.seq == len(entries) - 1


# ----------------------------------------------------------- the async fault wrapper


async def _async_faulty_writer(method: str, fault: Fault) -> tuple[s3log.MemoryStore, s3log.Log, str,
                                                                    AsyncFaultyStore, s3log.AsyncWriter[Any]]:
    """A session on a MemoryStore (read back through ``log``) and an async writer of it
    whose first ``method`` request meets ``fault``."""
    mem = s3log.MemoryStore()
    log = s3log.Log(mem, config=FAST)
    sid = log.create().session_id
    store = AsyncFaultyStore(s3log.AsyncMemoryStore(mem), scripted({(method, 1): fault}))
    return mem, log, sid, store, await s3log.AsyncLog(store, config=FAST).open(sid)


@pytest.mark.parametrize("fault", ["timeout-landed", "timeout-lost", "409", "503"])
async def test_async_head_put_failure_is_resolved_without_loss_or_repeat(fault: Fault) -> None:
    _mem, log, sid, store, w = await _async_faulty_writer("put_if_match", fault)
    w.append("k", "only-once")
    result = await w.commit()
    assert result.fork is None and result.session_id == sid
    assert [e.data for e in log.read(sid).entries] == ["only-once"]
    assert store.injected == [("put_if_match", f"s3log/sessions/{sid}/head", fault)]
    await w.append_durable("k", "next")
    assert [e.data for e in log.read(sid).entries] == ["only-once", "next"]


@pytest.mark.parametrize("fault", ["timeout-landed", "timeout-lost", "409", "503"])
async def test_async_segment_put_failure_is_resolved_without_loss_or_repeat(fault: Fault) -> None:
    # Beyond pending_max_bytes: the segment is written (and retried) before the head.
    mem, log, sid, store, w = await _async_faulty_writer("put_if_absent", fault)
    await w.append_durable("big", "x" * 300_000)
    assert [m for m, _, _ in store.injected] == ["put_if_absent"]
    assert [e.data for e in log.read(sid).entries] == ["x" * 300_000]
    assert len([k for k in mem.all_keys() if "/seg/" in k]) == 1


async def test_async_crash_propagates_and_leaves_the_session_intact() -> None:
    _mem, log, sid, store, w = await _async_faulty_writer("put_if_match", "crash")
    w.append("k", "lost-with-the-process")
    with pytest.raises(Crash):
        await w.commit()
    assert log.read(sid).entries == []
    # The crash struck before the PUT: the wrapper never reached the store.
    assert store.injected == [("put_if_match", f"s3log/sessions/{sid}/head", "crash")]


def test_faulty_stores_carry_no_prefix_and_the_inner_bucket() -> None:
    mem = s3log.MemoryStore(bucket="b1")
    assert not hasattr(FaultyStore(mem, random_plan(0)), "prefix")
    assert not hasattr(AsyncFaultyStore(s3log.AsyncMemoryStore(mem), random_plan(0)), "prefix")
    assert FaultyStore(mem, random_plan(0)).bucket == "b1"
