"""A scripted driver: runs a protocol procedure against an exact sequence of replies.

No store at all: each op the procedure yields is checked against the script and
answered with the scripted value (or the scripted error thrown in). Used to show a
decision of the commit protocol under replies a real store gives only rarely.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from s3log._drive.drivers import step
from s3log._protocol.ops import KeyOp, Op, Parallel, Proc, Sleep, call_key


@dataclass
class Step:
    """One expected op (``kind``: the op's class name; ``key``: a substring of its key) and its reply.

    ``reply`` is the value sent back, an error thrown in, or a function of the ops
    seen so far returning either (to echo back what the procedure wrote).
    """

    kind: str
    reply: Any = None
    key: str = ""
    check: Callable[[Op], None] | None = None


@dataclass
class Script:
    steps: list[Step]
    seen: list[Op] = field(default_factory=list)

    def run(self, proc: Proc[Any]) -> Any:
        value: Any = None
        error: BaseException | None = None
        while True:
            op, result = step(proc, value, error)
            if op is None:
                assert not self.steps, f"procedure ended with steps left: {self.steps}"
                return result
            self.seen.append(op)
            value, error = None, None
            if isinstance(op, Sleep):
                continue  # backoffs are not scripted
            if isinstance(op, KeyOp):
                try:  # nor are signatures: no store request
                    value = call_key(op)
                except Exception as exc:
                    error = exc
                continue
            assert self.steps, f"unexpected op {op!r}: the script is exhausted"
            want = self.steps.pop(0)
            assert type(op).__name__ == want.kind, f"expected {want.kind}, procedure yielded {op!r}"
            if want.key:
                keys = [o.key for o in op.ops] if isinstance(op, Parallel) else [op.key]  # type: ignore[union-attr]
                assert any(want.key in k for k in keys), f"expected a key with {want.key!r}, got {keys}"
            if want.check is not None:
                want.check(op)
            reply = want.reply(self.seen) if callable(want.reply) else want.reply
            if isinstance(reply, BaseException):
                error = reply
            else:
                value = reply


def recorded(proc: Proc[Any], seen: list[Op]) -> Generator[Op, Any, Any]:
    """Run ``proc`` under a real driver, appending each op it yields to ``seen``
    (backoff sleeps and signatures left out): one op is one round trip, so request counts and round
    trips can be asserted exactly."""
    value: Any = None
    error: BaseException | None = None
    while True:
        op, result = step(proc, value, error)
        if op is None:
            return result
        if not isinstance(op, (Sleep, KeyOp)):
            seen.append(op)
        try:
            value, error = (yield op), None
        except BaseException as exc:
            value, error = None, exc
