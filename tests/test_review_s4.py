"""Hostile review of the changes since 4634803: cached head layouts, hand-laid records,
segments decoded in the driver, Log.read_runs, the 32 KiB tail, the O(1) ticket set,
the integer same-day check.

Each test is an attack; those that found a defect say so in their docstring.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import hashlib
import random
import threading
from typing import Any

import cbor2
import pytest

import s3log
from s3log import activity, codec
from s3log.chain import PendingEntry, build_chain
from s3log.codec import Head, RunColumns, decode_head, dumps, encode_head, make_entry, normalize_data_cbor
from s3log.config import RetryPolicy
from s3log.drive import AsyncDriver, SyncDriver
from s3log.errors import CorruptionError
from s3log.ops import Blob, Get, Parallel, Proc
from s3log.protocol import empty_head
from s3log.sim import run_direct
from s3log.store.memory import AsyncMemoryStore

T0 = 1_767_225_600_000  # 2026-01-01


def _head(extra: dict[Any, Any], *, with_tail: bool = True) -> Head:
    entries = build_chain([PendingEntry("k", 5, {"i": i}) for i in range(3)], after_seq=-1, after_hash=None)
    return dataclasses.replace(empty_head("s", {}, None), extra=extra, tail=tuple(entries) if with_tail else ())


def _canonical(head: Head) -> bytes:
    return cbor2.dumps(head.to_map(), canonical=True)


# ------------------------------------------------------------------ 1. cached head layouts


@pytest.mark.parametrize("order", [(1, True, 1.0), (True, 1, 1.0), (1.0, True, 1), (0, False, 0.0, -0.0)])
def test_head_layouts_of_equal_keys_of_other_types_are_not_shared(order: tuple[Any, ...]) -> None:
    """DEFECT (fixed): the layout cache was keyed by the tuple of keys, and 1 == True ==
    1.0 in Python: a head whose extra field is keyed ``true`` (or ``1.0``) reused the
    layout of one keyed ``1``, and was written with the key ``1``, in another place in
    the map: a newer writer's field silently changed, bytes not the canonical map."""
    codec._LAYOUTS.clear()
    for key in order:
        head = _head({key: "newer writer's field"})
        body = encode_head(head)
        assert body == _canonical(head), key
        (back,) = decode_head(body, "k").extra
        assert type(back) is type(key) and back == key


def test_a_head_of_more_than_255_fields_encodes() -> None:
    """DEFECT (fixed; older than the cache): a map of 256 or more pairs was given a
    one-byte length (OverflowError, not an s3log error): a head carrying many fields of
    a newer writer could not be rewritten."""
    for n in (232, 233, 300, 70_000):
        head = _head({f"f{i}": i for i in range(n)})
        body = encode_head(head)
        assert body == _canonical(head)
        assert decode_head(body, "k").extra == head.extra


def test_head_layouts_beyond_the_cache_bound_from_many_threads() -> None:
    """More key sets than the cache holds, encoded from 8 threads at once: every head is
    the canonical map, cached or not."""
    codec._LAYOUTS.clear()
    failures: list[Any] = []
    rng = random.Random(4)
    pools: list[Any] = ["x", "y" * 30, 7, -3, 2**40, b"b", (1, "t"), 0.5, None, "tail_", "v1", "ts", "", "\u2603"]
    key_sets = [(*rng.sample(pools, rng.randint(0, 6)), f"n{i}") for i in range(600)]

    def work(part: int) -> None:
        for keys in key_sets[part::8]:
            head = _head({k: [k] for k in keys}, with_tail=part % 2 == 0)
            for v in (1, 2):
                h = dataclasses.replace(head, v=v)
                if encode_head(h) != _canonical(h) or encode_head(h) != _canonical(h):
                    failures.append(keys)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(codec._LAYOUTS) <= 256 + 8  # bounded (a race may add one per thread)


def test_a_rewritten_head_keeps_a_newer_writers_field_keyed_true() -> None:
    """DEFECT (fixed), end to end: session A's head carries a newer writer's field keyed
    ``1``, session B's one keyed ``true`` (same key set otherwise). A writer committing
    to A then to B wrote B's field under the key ``1``."""
    codec._LAYOUTS.clear()  # as in a fresh process (other tests may have filled it)
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    ids = []
    for key in (1, True):
        w = log.create()
        w.append("k", 1)
        w.commit()
        head_key = log.layout.head(w.session_id)
        obj = cbor2.loads(store.get(head_key).body)
        obj[key] = "added by a newer writer"
        store.put_raw(head_key, dumps(obj))
        ids.append(w.session_id)
    for sid in ids:
        w = log.open(sid)
        w.append("k", 2)
        w.commit()
    for sid, key in zip(ids, (1, True), strict=True):
        obj = cbor2.loads(store.get(log.layout.head(sid)).body)
        (field,) = (k for k in obj if not isinstance(k, str))
        assert type(field) is type(key)
        assert log.read(sid).head.extra == {key: "added by a newer writer"}


# ------------------------------------------------------------------ 2. hand-laid records

_INTS = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**63 - 1]
_KINDS = ["a", "é", "k" * 23, "k" * 24, "k" * 255, "\u2603" * 256, "\U0001f600", "s3log.fork", "a\x00b"]


def test_hand_laid_records_are_the_canonical_map_at_every_boundary() -> None:
    for ts in _INTS:
        for seq in _INTS:
            for kind in _KINDS:
                for prev in (None, b"\x07" * 32):
                    data, data_cbor = normalize_data_cbor(kind, {"d": [ts, seq]})
                    e = make_entry(seq, prev, kind, ts, data, data_cbor)
                    record = dumps({"seq": seq, "prev": prev, "kind": kind, "ts": ts, "data": data})
                    assert e.raw == record and e.hash == hashlib.sha256(record).digest(), (ts, seq, kind, prev)
                    assert e == make_entry(seq, prev, kind, ts, data)  # the encoder's own record


def test_hand_laid_records_past_the_kind_cache_bound() -> None:
    codec._KIND_TAILS.clear()
    for i in range(4200):
        kind = f"kind-{i}-" + "é" * (i % 30)
        data, data_cbor = normalize_data_cbor(kind, i)
        e = make_entry(i, None, kind, T0 + i, data, data_cbor)
        assert e.raw == dumps({"seq": i, "prev": None, "kind": kind, "ts": T0 + i, "data": data})
    assert len(codec._KIND_TAILS) == 4096
    # Cached kinds still give the same records.
    data, data_cbor = normalize_data_cbor("kind-3-ééé", None)
    assert make_entry(9, b"\x01" * 32, "kind-3-ééé", 0, data, data_cbor).raw == dumps(
        {"seq": 9, "prev": b"\x01" * 32, "kind": "kind-3-ééé", "ts": 0, "data": None})


# ------------------------------------------------------- 3./4. decoded in the driver, read_runs


def _plain_run(store: s3log.MemoryStore, proc: Proc[Any]) -> Any:
    """A driver that does not decode (the simulator's own): every Get gives the blob."""
    return run_direct(store, proc)


def _twins(version: int = 2) -> tuple[s3log.MemoryStore, s3log.Log, str, str]:
    """Two sessions of the same shape (segments from seq 0 and 20, a tail from 25)."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600, format_version=version))
    a, b = log.create(), log.create()
    for w, dt in ((a, 0), (b, 1)):
        for i in range(30):
            w.append("k", {"i": i, "t": "x" * (i % 37)}, ts=T0 + dt + i)
            if i % 5 == 4:
                w.commit()
        w.commit()
    ha, hb = log.head(a.session_id), log.head(b.session_id)
    assert len(ha.segments) >= 2 and [k.rsplit("/", 1)[1][:30] for k in ha.segments] != [
        k.rsplit("/", 1)[1][:30] for k in hb.segments]
    return store, log, a.session_id, b.session_id


def _errors_alike(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> CorruptionError:
    """The error of Log.read, and that read_runs gives the same from every driver."""
    with pytest.raises(CorruptionError) as read_err:
        log.read(sid)
    expected = (type(read_err.value), read_err.value.key, read_err.value.seq, str(read_err.value))
    for name, run in (
        ("sync", lambda: log.read_runs(sid)),
        ("async", lambda: asyncio.run(s3log.AsyncLog(AsyncMemoryStore(store)).read_runs(sid))),
        ("plain", lambda: _plain_run(store, log._core.read_runs(sid, None, None))),
    ):
        with pytest.raises(CorruptionError) as err:
            run()
        assert (type(err.value), err.value.key, err.value.seq, str(err.value)) == expected, name
    # Log.read from a driver that does not decode says the same too.
    with pytest.raises(CorruptionError) as plain_read:
        _plain_run(store, log._core.read(sid))
    assert str(plain_read.value) == str(read_err.value)
    return read_err.value


def _foreign_first_segment(store: s3log.MemoryStore, log: s3log.Log, a: str, b: str) -> str:
    """b's first segment, relabelled as a's, under a's key: it decodes, but breaks the chain."""
    key = log.head(a).segments[0]
    obj = cbor2.loads(store.get(log.head(b).segments[0]).body)
    obj["session"] = a
    store.put_raw(key, dumps(obj))
    return key


@pytest.mark.parametrize("version", [1, 2])
def test_read_runs_names_the_segment_log_read_names_when_one_is_foreign_and_another_garbage(version: int) -> None:
    """DEFECT (fixed): from a driver that does not decode (the simulator's, a scripted
    one), read_runs decoded each segment as it verified it, so the first segment's
    broken chain was raised before the second's garbage; Log.read decodes every segment
    first and names the second. The two drivers of s3log agreed with Log.read."""
    store, log, a, b = _twins(version)
    _foreign_first_segment(store, log, a, b)
    garbage = log.head(a).segments[1]
    store.put_raw(garbage, b"\xff not cbor")
    err = _errors_alike(store, log, a)
    assert err.key == garbage and "not valid CBOR" in str(err)


def test_read_runs_with_a_missing_segment_then_a_corrupt_one() -> None:
    store, log, a, _ = _twins()
    first, second = log.head(a).segments[:2]
    store.delete(first)
    store.put_raw(second, b"\xff")
    err = _errors_alike(store, log, a)
    assert err.key == first and "missing" in str(err)


def test_read_runs_with_a_corrupt_segment_then_a_missing_one() -> None:
    store, log, a, _ = _twins()
    first, second = log.head(a).segments[:2]
    obj = cbor2.loads(store.get(first).body)
    obj["ts"][4] += 1
    store.put_raw(first, dumps(obj))
    store.delete(second)
    err = _errors_alike(store, log, a)
    assert err.key == first and err.seq == 4


def test_read_runs_refuses_a_head_with_its_segments_swapped() -> None:
    store, log, a, _ = _twins()
    head_key = log.layout.head(a)
    obj = cbor2.loads(store.get(head_key).body)
    obj["segments"] = obj["segments"][::-1]
    store.put_raw(head_key, dumps(obj))
    err = _errors_alike(store, log, a)
    assert err.key == obj["segments"][0] and "key says first seq 20" not in str(err)


def test_read_runs_refuses_a_segment_listed_twice() -> None:
    store, log, a, _ = _twins()
    head_key = log.layout.head(a)
    obj = cbor2.loads(store.get(head_key).body)
    obj["segments"] = [obj["segments"][0], *obj["segments"]]
    obj["levels"] = [0, *obj["levels"]]
    store.put_raw(head_key, dumps(obj))
    err = _errors_alike(store, log, a)
    assert err.key == obj["segments"][0] and err.seq == 0


def test_read_runs_refuses_a_tampered_v1_segment_in_a_mixed_chain() -> None:
    store = s3log.MemoryStore()
    v1 = s3log.Log(store, config=s3log.LogConfig(format_version=1, tail_per_commit=0, tail_max_bytes=600))
    v2 = s3log.Log(store, config=s3log.LogConfig(format_version=2, tail_per_commit=0, tail_max_bytes=600))
    w = v1.create()
    for i in range(20):
        w.append("k", {"i": i, "t": "x" * 30}, ts=T0 + i)
        w.commit()
    w = v2.open(w.session_id)
    for i in range(20, 40):
        w.append("k", {"i": i, "t": "x" * 30}, ts=T0 + i)
        w.commit()
    sid = w.session_id
    head = v2.head(sid)
    kinds = [cbor2.loads(store.get(k).body)["v"] for k in head.segments]
    assert 1 in kinds and 2 in kinds
    _, runs = v2.read_runs(sid)  # type: ignore[misc]
    assert any(isinstance(r, RunColumns) for r in runs) and any(not isinstance(r, RunColumns) for r in runs)
    key = head.segments[kinds.index(1)]
    obj = cbor2.loads(store.get(key).body)
    obj["entries"][2]["data"]["i"] = 99
    store.put_raw(key, dumps(obj))
    err = _errors_alike(store, v2, sid)
    assert err.key == key and err.seq == obj["entries"][2]["seq"]


def _parallel_head(store: s3log.MemoryStore) -> tuple[s3log.Log, str, str]:
    """A session whose head names a pending segment (written beside it, not yet listed)."""
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600))
    w = log.create()
    for i in range(8):
        w.append("k", {"i": i, "t": "x" * 60}, ts=T0 + i)
        w.commit()
        head = log.head(w.session_id)
        if head.pending is not None:
            return log, w.session_id, head.pending.key
    raise AssertionError("no pending segment written")


@pytest.mark.parametrize("change", ["garbage", "deleted", "foreign", "truncated run"])
def test_read_runs_ignores_the_pending_segment_whatever_it_holds(change: str) -> None:
    store = s3log.MemoryStore()
    log, sid, pending = _parallel_head(store)
    expected = log.read(sid).entries
    body = store.get(pending).body
    if change == "garbage":
        store.put_raw(pending, b"\xff")
    elif change == "deleted":
        store.delete(pending)
    elif change == "foreign":
        obj = cbor2.loads(body)
        obj["session"] = "someone-else"
        store.put_raw(pending, dumps(obj))
    else:
        obj = cbor2.loads(body)
        for col in ("ts", "kinds", "data", "hashes"):
            obj[col] = obj[col][:1]
        store.put_raw(pending, dumps(obj))
    assert log.read(sid).entries == expected
    for runs in (log.read_runs(sid), _plain_run(store, log._core.read_runs(sid, None, None)),
                 asyncio.run(s3log.AsyncLog(AsyncMemoryStore(store)).read_runs(sid))):
        head, got = runs
        assert head.pending is not None
        assert [h for r in got for h in (r.hashes if isinstance(r, RunColumns) else [e.hash for e in r])] == [
            e.hash for e in expected]


def test_a_decode_raising_a_base_exception_is_not_handed_back_as_a_result() -> None:
    """``decoded`` hands back Exceptions only: an interrupt inside a decode is raised by
    the driver (and the procedure closed), not taken for a corrupt object."""
    store = s3log.MemoryStore()
    store.put_raw("a", b"x")

    def interrupt(blob: Blob) -> Any:
        raise KeyboardInterrupt

    closed: list[bool] = []

    def proc() -> Proc[Any]:
        try:
            return (yield Parallel((Get("a"), Get("a", interrupt))))
        finally:
            closed.append(True)

    driver = SyncDriver(store, RetryPolicy(), 4)
    try:
        with pytest.raises(KeyboardInterrupt):
            driver.run(proc())
    finally:
        driver.close()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(AsyncDriver(AsyncMemoryStore(store), RetryPolicy(), 4).run(proc()))
    assert closed == [True, True]
    assert gc.isenabled()


def test_segments_decoded_by_many_pool_threads_leave_the_collector_as_it_was() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=300, max_parallel=16, fanout=64))
    w = log.create()
    for i in range(60):
        w.append("k", {"i": i, "t": "x" * 200})
        w.commit()
    sid = w.session_id
    assert len(log.head(sid).segments) >= 16
    expected = log.read(sid).entries
    for enabled in (True, False):
        if not enabled:
            gc.disable()
        try:
            errors: list[BaseException] = []

            def reader() -> None:
                try:
                    for _ in range(5):
                        assert log.read(sid).entries == expected
                        log.read_runs(sid)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=reader) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors
            assert gc.isenabled() is enabled
            assert codec._gc_depth == 0
        finally:
            gc.enable()
    log.close()


class _SlowStore(AsyncMemoryStore):
    """Gets of segments wait until released, so a read can be cancelled mid-Parallel."""

    def __init__(self, store: s3log.MemoryStore) -> None:
        super().__init__(store)
        self.release = asyncio.Event()
        self.started = 0

    async def get(self, key: str) -> Blob:
        if "/seg" in key or "segments" in key:
            self.started += 1
            if self.started > 1:  # the first arrives (and is decoded), the rest wait
                await self.release.wait()
        return await super().get(key)


def test_a_read_cancelled_mid_parallel_leaves_no_pause_and_reads_again() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=300, fanout=64))
    w = log.create()
    for i in range(30):
        w.append("k", {"i": i, "t": "x" * 200})
        w.commit()
    sid = w.session_id
    expected = log.read(sid).entries
    assert len(log.head(sid).segments) >= 4

    async def main() -> None:
        slow = _SlowStore(store)
        alog = s3log.AsyncLog(slow)
        for verb in (alog.read, alog.read_runs):
            slow.started = 0
            task = asyncio.ensure_future(verb(sid))
            while slow.started < 2:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert gc.isenabled() and codec._gc_depth == 0
        slow.release.set()
        assert (await alog.read(sid)).entries == expected

    asyncio.run(main())


# ------------------------------------------------------------------ 5. the 32 KiB tail


@pytest.mark.parametrize("signed", [False, True])
def test_heads_near_the_pending_bound_with_a_lease_read_back_whole(signed: bool) -> None:
    """Default bounds, big commits: heads past the tail bound, near the pending one,
    carrying a lease (and a signature): every entry read back, by read and read_runs."""
    store = s3log.MemoryStore()
    signer = verifier = None
    if signed:
        pytest.importorskip("cryptography")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from s3log.signing import Ed25519Signer, PublicKeyVerifier

        signer = Ed25519Signer(Ed25519PrivateKey.generate())
        verifier = PublicKeyVerifier([signer.public_key])
    log = s3log.Log(store, config=s3log.LogConfig(signer=signer, verifier=verifier))
    w = log.create()
    w.hold_lease("worker", 60_000)
    sizes = [30_000, 3_000, 200_000, 10, 250_000, 40_000, 1]
    for n, size in enumerate(sizes):
        for j in range(max(1, size // 10_000)):
            w.append("k", {"n": n, "j": j, "pad": "x" * min(size, 10_000)})
        w.commit()
        head_bytes = len(store.get(log.layout.head(w.session_id)).body)
        assert head_bytes <= log._core.config.pending_max_bytes
    got = log.read(w.session_id).entries
    assert [e.data["n"] for e in got] == [n for n, s in enumerate(sizes) for _ in range(max(1, s // 10_000))]
    head, runs = log.read_runs(w.session_id)  # type: ignore[misc]
    assert sum(len(r.hashes) if isinstance(r, RunColumns) else len(r) for r in runs) == len(got)
    assert head.lease is not None and head.lease.owner == "worker"


# ------------------------------------------------------------------ 6. the ticket set


def test_status_and_withdraw_never_lie_under_threads() -> None:
    """Submitters withdraw at random while others commit: a withdrawn entry is never
    stored, every other one is stored once, and status agrees at every step."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    withdrawn: set[int] = set()
    kept: set[int] = set()
    lies: list[str] = []
    lock = threading.Lock()

    def submitter(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(150):
            t = w.submit("k", {"seed": seed, "n": rng.random()})
            st = w.status(t)
            if st not in ("pending", "committing", "committed"):
                lies.append(f"fresh ticket {t} is {st}")
            if rng.random() < 0.5 and w.withdraw(t):
                if w.status(t) != "withdrawn" or w.withdraw(t):
                    lies.append(f"withdrawn ticket {t} is {w.status(t)}")
                with lock:
                    withdrawn.add(t)
                continue
            entry = w.wait(t)
            if w.status(t) != "committed" or w.withdraw(t):
                lies.append(f"committed ticket {t} is {w.status(t)}")
            with lock:
                kept.add(t)
            assert entry.data["seed"] == seed

    def committer() -> None:
        for _ in range(60):
            w.commit()

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=committer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.commit()
    assert not lies
    entries = log.read(w.session_id).entries
    assert len(entries) == len(kept) and len(kept) + len(withdrawn) == 600
    assert len({(e.data["seed"], e.data["n"]) for e in entries}) == len(entries)
    assert w.pending == 0


def test_async_withdraw_during_a_commit_is_refused_for_what_it_carries() -> None:
    async def main() -> None:
        store = _SlowHeadStore(s3log.MemoryStore())
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        carried = [w.submit("k", i) for i in range(3)]
        store.hold.clear()
        commit = asyncio.ensure_future(w.commit())
        while not store.waiting:
            await asyncio.sleep(0)
        later = w.submit("k", "later")
        assert [w.status(t) for t in carried] == ["committing"] * 3
        assert not any(w.withdraw(t) for t in carried)
        assert w.status(later) == "pending" and w.withdraw(later) and w.status(later) == "withdrawn"
        store.hold.set()
        await commit
        assert [w.status(t) for t in carried] == ["committed"] * 3
        assert [e.data for e in (await alog.read(w.session_id)).entries] == [0, 1, 2]

    asyncio.run(main())


class _SlowHeadStore(AsyncMemoryStore):
    """Conditional head PUTs wait until ``hold`` is set (after landing, with ``land_first``)."""

    def __init__(self, store: s3log.MemoryStore, *, land_first: bool = False) -> None:
        super().__init__(store)
        self.hold = asyncio.Event()
        self.hold.set()
        self.waiting = False
        self.land_first = land_first

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.waiting = True
        if self.land_first:
            etag = await super().put_if_match(key, body, etag)
            await self.hold.wait()
            return etag
        await self.hold.wait()
        return await super().put_if_match(key, body, etag)


def test_a_cancelled_async_commit_still_carries_its_tickets() -> None:
    """Cancelling the caller of an async commit does not abandon it (it is shielded):
    its tickets stay "committing" and cannot be withdrawn; they end committed once."""

    async def main() -> None:
        mem = s3log.MemoryStore()
        store = _SlowHeadStore(mem)
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        carried = [w.submit("k", i) for i in range(3)]
        store.hold.clear()
        commit = asyncio.ensure_future(w.commit())
        while not store.waiting:
            await asyncio.sleep(0)
        commit.cancel()
        with pytest.raises(asyncio.CancelledError):
            await commit
        assert [w.status(t) for t in carried] == ["committing"] * 3
        assert not any(w.withdraw(t) for t in carried)
        store.hold.set()
        assert [e.data for e in [await w.wait(t) for t in carried]] == [0, 1, 2]
        await w.commit()
        entries = (await s3log.AsyncLog(AsyncMemoryStore(mem)).read(w.session_id)).entries
        assert [e.data for e in entries] == [0, 1, 2]

    asyncio.run(main())


class _BrokenHeadStore(s3log.MemoryStore):
    """A head PUT fails with an error the protocol cannot judge (after landing, with ``land``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: bool | None = None  # None: healthy; False: fail before; True: land, then fail

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if self.fail is None:
            return super().put_if_match(key, body, etag)
        if self.fail:
            super().put_if_match(key, body, etag)
        raise RuntimeError("connection reset by the caller's runtime")


@pytest.mark.parametrize("landed", [False, True])
def test_a_failed_commit_leaves_its_tickets_uncertain_then_stored_once(landed: bool) -> None:
    """A commit that failed with its outcome unknown (its head landed or not): its
    tickets are "uncertain", cannot be withdrawn, can be watched; an entry queued after
    it is "pending" and can be; the next commit stores each carried entry once."""
    store = _BrokenHeadStore()
    log = s3log.Log(store)
    w = log.create()
    carried = [w.submit("k", i) for i in range(3)]
    store.fail = landed
    with pytest.raises(RuntimeError):
        w.commit()
    store.fail = None
    later, gone = w.submit("k", "later"), w.submit("k", "gone")
    assert [w.status(t) for t in carried] == ["uncertain"] * 3
    assert not any(w.withdraw(t) for t in carried)
    assert all(w._core.watch(t) for t in carried)
    assert w.status(later) == "pending" and w.withdraw(gone) and w.status(gone) == "withdrawn"
    w.commit()
    assert [w.status(t) for t in [*carried, later]] == ["committed"] * 4
    assert not w.withdraw(later) and not w.withdraw(carried[0])
    assert [e.data for e in log.read(w.session_id).entries] == [0, 1, 2, "later"]


# ------------------------------------------------------------------ 7. same-day check


def test_same_day_by_integer_division_agrees_with_the_dates() -> None:
    day = activity.DAY_MS
    points = [0, 1, day - 1, day, day + 1, T0 - 1, T0, T0 + 1, T0 + day - 1, -1, -day, -day - 1,
              253_402_300_799_999]
    layout = s3log.Log(s3log.MemoryStore()).layout
    for prev in points:
        for now in points:
            marker = activity.marker_for(layout, "s", False, prev, now)
            assert (marker is None) == (activity.day_of(prev) == activity.day_of(now)), (prev, now)
            if marker is not None:
                assert activity.day_of(now) in marker.key
