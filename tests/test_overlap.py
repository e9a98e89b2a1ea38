"""Two procedures at once (``_protocol.overlap.overlapped``): their store requests share
round trips, each gets exactly the results (and errors) it would have got alone, and an
error in either ends both, the other's cleanup run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import s3log
from s3log._drive.drivers import AsyncDriver, SyncDriver
from s3log._protocol import ops
from s3log._protocol.ops import Blob, Get, Op, Parallel, Proc, PutIfAbsent
from s3log._protocol.overlap import overlapped
from s3log.config import RetryPolicy
from s3log.errors import ObjectNotFound, PreconditionFailed, StoreError
from s3log.store.memory import AsyncMemoryStore
from tests.scripted import recorded


def _store() -> s3log.MemoryStore:
    store = s3log.MemoryStore()
    for key in ("a", "b", "c", "d"):
        store.put_raw(key, key.encode())
    return store


def _reader(keys: list[str], trace: list[str]) -> Proc[list[bytes]]:
    """A lone GET, then the rest at once; a missing key read alone is caught."""
    first = keys[0]
    try:
        blob = yield from ops.get(first)
        got = [blob.body]
    except ObjectNotFound:
        got = [b"missing"]
    trace.append(f"read {first}")
    rest = yield from ops.parallel([Get(k) for k in keys[1:]])
    return got + [r.body if isinstance(r, Blob) else b"missing" for r in rest]


def _writer(trace: list[str]) -> Proc[list[str]]:
    """Two creates at once, then one lone create of a key that exists (412, caught)."""
    out = yield from ops.parallel([PutIfAbsent("x", b"1"), PutIfAbsent("y", b"2")])
    try:
        yield from ops.put_if_absent("a", b"again")
    except PreconditionFailed:
        trace.append("412 on a")
    return [type(r).__name__ for r in out]


def _driver() -> SyncDriver:
    return SyncDriver(_store(), RetryPolicy(), 8)


def _run(proc: Proc[Any]) -> tuple[Any, list[Op]]:
    """``proc``'s value on a fresh store, and the round trips it took (a Parallel is one)."""
    driver, rounds = _driver(), []
    try:
        return driver.run(recorded(proc, rounds)), rounds
    finally:
        driver.close()


def test_two_procedures_take_the_round_trips_of_the_longer_with_their_own_results_and_errors() -> None:
    alone: list[str] = []
    reading, reader_rounds = _run(_reader(["missing", "b", "c"], alone))
    written, writer_rounds = _run(_writer(alone))
    assert len(reader_rounds) == len(writer_rounds) == 2
    together: list[str] = []
    both, rounds = _run(overlapped(_reader(["missing", "b", "c"], together), _writer(together)))
    assert both == (reading, written) == ([b"missing", b"b", b"c"], ["str", "str"])
    assert len(rounds) == 2 and all(isinstance(op, Parallel) for op in rounds)
    assert sorted(together) == sorted(alone) == ["412 on a", "read missing"]


def test_the_async_driver_runs_them_the_same() -> None:
    trace: list[str] = []

    async def main() -> Any:
        driver = AsyncDriver(AsyncMemoryStore(_store()), RetryPolicy(), 8)
        return await driver.run(overlapped(_reader(["a", "b"], trace), _writer(trace)))

    assert asyncio.run(main()) == ([b"a", b"b"], ["str", "str"])
    assert sorted(trace) == ["412 on a", "read a"]


def _sleeper(log: list[str]) -> Proc[str]:
    yield from ops.sleep(0)
    log.append("slept")
    blob = yield from ops.get("a")
    return blob.body.decode()


def _lone_get(log: list[str]) -> Proc[str]:
    blob = yield from ops.get("b")
    log.append("got b")
    blob = yield from ops.get("c")
    return blob.body.decode()


def test_an_op_that_cannot_share_a_round_trip_goes_alone_and_the_other_waits() -> None:
    trace: list[str] = []
    value, rounds = _run(overlapped(_sleeper(trace), _lone_get(trace)))
    assert value == ("a", "c")
    # The sleep alone (not counted), then GET a beside GET b, then GET c alone.
    assert [sorted(o.key for o in op.ops) if isinstance(op, Parallel) else op.key  # type: ignore[union-attr]
            for op in rounds] == [["a", "b"], "c"]


def test_a_lone_get_gets_its_blob_not_its_decoders_result() -> None:
    def decoded_alone() -> Proc[Any]:
        result = yield Get("a", lambda blob: "decoded")
        return result

    (first, second), _ = _run(overlapped(decoded_alone(), _lone_get([])))
    assert isinstance(first, Blob) and first.body == b"a" and second == "c"


class Boom(Exception):
    pass


@pytest.mark.parametrize("which", ["first", "second"])
def test_an_error_in_either_ends_both_and_the_other_is_closed(which: str) -> None:
    closed: list[str] = []

    def failing() -> Proc[None]:
        yield from ops.get("a")
        raise Boom

    def long(name: str) -> Proc[None]:
        try:
            for key in "abcd":
                yield from ops.get(key)
        finally:
            closed.append(name)

    procs = (failing(), long("other")) if which == "first" else (long("other"), failing())
    with pytest.raises(Boom):
        _run(overlapped(*procs))
    assert closed == ["other"]


def test_a_store_error_thrown_into_the_combined_procedure_reaches_the_lane_that_waited_alone() -> None:
    def lone_put() -> Proc[str]:
        yield from ops.sleep(0)  # alone: the error comes back as a driver throws it
        try:
            yield from ops.put_if_absent("a", b"z")
        except StoreError as exc:
            return type(exc).__name__
        return "written"

    assert _run(overlapped(lone_put(), _lone_get([])))[0] == ("PreconditionFailed", "c")
