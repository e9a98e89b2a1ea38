"""Get.decode: a driver decodes each object of a Parallel as soon as it arrives.

The procedure names a pure function of the blob; both drivers apply it inside the
Parallel (so decoding one segment overlaps the transfer of the others) and hand back
what it returns, or the exception it raised for the procedure to raise in key order.
A driver that does not decode (the simulator, a scripted test) returns the blob and
the procedure decodes it itself: the results are the same either way. An interrupt inside
a decode is raised, not handed back as a result, and decoding from many pool threads leaves
the garbage collector as it found it.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import cbor2
import pytest

import s3log
from s3log._drive import gcpause as _gcpause
from s3log._drive.drivers import AsyncDriver, SyncDriver
from s3log._format.codec import Segment
from s3log._protocol import protocol
from s3log._protocol.ops import Blob, Get, Parallel, Proc
from s3log.config import RetryPolicy
from s3log.errors import CorruptionError, ObjectNotFound
from s3log.store.memory import AsyncMemoryStore


def _store() -> s3log.MemoryStore:
    store = s3log.MemoryStore()
    store.put_raw("a", b"body-a")
    store.put_raw("b", b"body-b")
    return store


def _boom(blob: Blob) -> Any:
    raise ValueError(f"cannot decode {blob.body!r}")


def _proc() -> Proc[list[Any]]:
    threads: list[str] = []

    def upper(blob: Blob) -> bytes:
        threads.append(threading.current_thread().name)
        return blob.body.upper()

    results: list[Any] = yield Parallel((Get("a", upper), Get("b"), Get("b", _boom), Get("missing", upper)))
    return [*results, threads]


def _check(results: list[Any]) -> None:
    upper_a, plain_b, boom, missing, _ = results
    assert upper_a == b"BODY-A"
    assert isinstance(plain_b, Blob) and plain_b.body == b"body-b"  # no decode: the blob
    assert isinstance(boom, ValueError) and "body-b" in str(boom)  # handed back, not raised
    assert isinstance(missing, ObjectNotFound)  # a store error is not decoded


def test_the_sync_driver_decodes_in_the_worker_that_fetched() -> None:
    driver = SyncDriver(_store(), RetryPolicy(), 4)
    try:
        results = driver.run(_proc())
    finally:
        driver.close()
    _check(results)
    assert all(name.startswith("s3log") for name in results[-1])  # in the pool, beside the transfers


def test_the_async_driver_decodes_as_each_get_completes() -> None:
    driver = AsyncDriver(AsyncMemoryStore(_store()), RetryPolicy(), 4)
    _check(asyncio.run(driver.run(_proc())))


def _session(store: s3log.MemoryStore) -> tuple[s3log.Log, str, str]:
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=256))
    w = log.create()
    for i in range(40):
        w.append("k", {"i": i, "pad": "x" * 40})
        w.commit()
    head = log.head(w.session_id)
    assert len(head.segments) >= 2
    return log, w.session_id, head.segments[-1]


def test_a_segment_fetched_plain_or_decoded_gives_the_same_entries() -> None:
    store = s3log.MemoryStore()
    log, sid, _ = _session(store)
    head = log.head(sid)
    decoded = log._run(protocol.fetch_segments(log.layout, sid, head.segments))
    assert all(isinstance(s, Segment) for s in decoded.values())
    # The same results as blobs (a driver that does not decode): decoded by the procedure.
    blobs = [store.get(k) for k in head.segments]
    assert protocol._decoded_segments(sid, head.segments, blobs) == decoded


@pytest.mark.parametrize("use_async", [False, True])
def test_a_corrupt_segment_decoded_in_the_driver_is_raised_naming_its_key(use_async: bool) -> None:
    store = s3log.MemoryStore()
    log, sid, key = _session(store)
    obj = cbor2.loads(store.get(key).body)
    obj["data"] = [b"\x01", *obj["data"][1:]]  # a changed data item: its hash no longer matches
    store.put_raw(key, cbor2.dumps(obj, canonical=True))
    with pytest.raises(CorruptionError, match="hash") as info:
        if use_async:
            asyncio.run(s3log.AsyncLog(AsyncMemoryStore(store)).read(sid))
        else:
            log.read(sid)
    assert info.value.key == key


def test_a_read_ahead_segment_of_an_unknown_format_is_skipped_by_either_path() -> None:
    """A segment read ahead for the next merge (beside a head PUT that may already have
    landed) that this build cannot read is skipped, not raised, whether the driver
    decoded it (the error comes back as the result) or not (the plain blob): the merge
    reads it again when it needs it, and refuses it then, before writing anything."""
    store = s3log.MemoryStore()
    _, _, key = _session(store)
    obj = cbor2.loads(store.get(key).body)
    blob = Blob(cbor2.dumps({**obj, "v": 99}, canonical=True), "e")
    assert protocol._fetched_ahead([key], [blob]) == {}
    decoded = protocol._segment_decoder(key)
    try:
        result: object = decoded(blob)
    except Exception as exc:  # what the drivers hand back in its place
        result = exc
    assert protocol._fetched_ahead([key], [result]) == {}


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
            assert _gcpause.depth() == 0
        finally:
            gc.enable()
    log.close()
