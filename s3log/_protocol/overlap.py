"""Two procedures at once, sans-IO: their store requests share round trips.

:func:`overlapped` steps two procedures side by side. When both wait for store
requests, it yields one :class:`~s3log._protocol.ops.Parallel` holding the requests of
both and hands each its own results, so the two take the round trips of the longer
one, not the sum. A writer's first open uses it to send the precondition probe beside
its reads (docs/decisions/0051).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from s3log._protocol.ops import (
    Delete,
    DeleteIfMatch,
    Get,
    ListKeys,
    Op,
    Parallel,
    Proc,
    PutIfAbsent,
    PutIfMatch,
    StoreOp,
)
from s3log.errors import StoreError

A = TypeVar("A")
B = TypeVar("B")

#: The ops of :data:`~s3log._protocol.ops.StoreOp`: requests a Parallel may hold.
_STORE_OPS = (Get, PutIfAbsent, PutIfMatch, ListKeys, Delete, DeleteIfMatch)


@dataclass
class _Lane:
    """One procedure being stepped: the op it waits on, or the value it returned."""

    proc: Proc[Any]
    op: Op | None = None
    done: bool = False
    value: Any = None

    def resume(self, value: Any, error: BaseException | None) -> None:
        try:
            self.op = self.proc.throw(error) if error is not None else self.proc.send(value)
        except StopIteration as stop:
            self.op, self.done, self.value = None, True, stop.value

    def requests(self) -> tuple[StoreOp, ...] | None:
        """The store requests of the op it waits on (a lone request as one), or None if
        that op cannot share a round trip (a key's call, a backoff, a nested Parallel)."""
        op = self.op
        if isinstance(op, Parallel):
            ops = [o for o in op.ops if isinstance(o, _STORE_OPS)]
            return tuple(ops) if len(ops) == len(op.ops) else None
        if isinstance(op, _STORE_OPS):
            # Alone, a GET's result is its blob: without its decoder, it gets that here too.
            return (Get(op.key),) if isinstance(op, Get) else (op,)
        return None

    def deliver(self, results: list[Any]) -> None:
        """Resume with the results of its requests, as a driver would have given them."""
        if isinstance(self.op, Parallel):
            self.resume(results, None)
            return
        (result,) = results
        if isinstance(result, StoreError):
            self.resume(None, result)  # a lone request's error is thrown in, as a driver does
        else:
            self.resume(result, None)


def overlapped(first: Proc[A], second: Proc[B]) -> Proc[tuple[A, B]]:
    """Run ``first`` and ``second`` together; return both their values.

    Each round, the store requests both wait on go out as one Parallel (a lone request
    that fails is thrown into its procedure, with the driver's retries done, as if it had
    been sent alone). An op that cannot share a round trip (a backoff, a key's call) is
    performed alone, the other procedure waiting. When one procedure ends, the other
    goes on alone. An error raised by either ends both: the other is closed (its
    cleanup runs) and the error propagates.
    """
    lanes = (_Lane(first), _Lane(second))
    try:
        for lane in lanes:
            lane.resume(None, None)
        while True:
            live = [lane for lane in lanes if not lane.done]
            if not live:
                return lanes[0].value, lanes[1].value
            shared = [lane.requests() for lane in live]
            if len(live) == 2 and shared[0] is not None and shared[1] is not None:
                results: list[Any] = yield Parallel((*shared[0], *shared[1]))
                cut = len(shared[0])
                live[0].deliver(results[:cut])
                live[1].deliver(results[cut:])
                continue
            # One alone: the one whose op cannot share (or the only one left).
            lane = live[0] if len(live) == 1 or shared[0] is None else live[1]
            assert lane.op is not None
            value: Any = None
            error: BaseException | None = None
            try:
                value = yield lane.op
            except Exception as exc:  # what the driver throws in: the procedure decides
                error = exc
            lane.resume(value, error)
    finally:
        for lane in lanes:
            lane.proc.close()
