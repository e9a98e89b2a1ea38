"""How the layers above the log drive it: procedures of public-verb calls, and the one
blocking and the one awaiting performer that run them.

The agent sessions (:mod:`s3log.agent`) and the LangGraph savers
(:mod:`s3log.integrations.langgraph`) write every decision once, as a generator that
yields a :class:`Call` of a public verb of :class:`~s3log.Log`, :class:`~s3log.AsyncLog`,
:class:`~s3log.Writer` or :class:`~s3log.AsyncWriter` (``log.open``, ``writer.commit``,
``log.compact``, ...) and receives what it returns, or has its error thrown in at that
yield. :func:`run` performs the calls blocking, :func:`arun` awaits them; a shell picks
one and nothing else differs. No protocol procedure is run here, and none is named:
every call goes through a verb, so the log's guarantees (and its probes, spans and
retries) hold above it unchanged. :func:`acall` is the same choice for plain asyncio
code over either kind of log (the OpenAI Agents session).

Its own room: the layers above the log import no ``s3log._api`` or ``s3log._protocol``
(pyproject's import contracts), and this is what they share instead.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """Call ``verb(*args, **kwargs)``: a public verb of a log or writer (or a function the
    shell supplies, such as its sleep). Result: what it returns, awaited by :func:`arun`
    when it is awaitable; the items of the iterator it returns, as a list, when
    ``listed``; None when it raised one of ``absent``."""

    verb: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    listed: bool = False
    absent: tuple[type[BaseException], ...] = ()


def call(verb: Callable[..., Any], *args: Any, **kwargs: Any) -> Call:
    """The :class:`Call` of ``verb(*args, **kwargs)``."""
    return Call(verb, args, kwargs)


@dataclass(frozen=True, slots=True)
class Each:
    """Several calls, whose results come back as a list in order: :func:`run` makes them
    one after another, :func:`arun` all at once (the first error is raised)."""

    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True)
class Locked:
    """Run ``proc`` holding ``lock`` (a ``threading.Lock`` under :func:`run`, an
    ``asyncio.Lock`` under :func:`arun`); result: what ``proc`` returns."""

    lock: Any
    proc: Proc[Any]


Op = Call | Each | Locked
#: A procedure: yields operations, gets their results, returns a ``T``.
Proc = Generator[Op, Any, T]


def _step(proc: Proc[T], value: Any, error: BaseException | None) -> tuple[Op | None, T | None]:
    """Advance ``proc`` with the last result (or throw the last error in at the yield
    that asked for it): the next operation, or None and what ``proc`` returned."""
    try:
        op = proc.throw(error) if error is not None else proc.send(value)
    except StopIteration as stop:
        return None, stop.value
    return op, None


def run(proc: Proc[T]) -> T:
    """Run ``proc``, performing its calls blocking."""
    value: Any = None
    error: BaseException | None = None
    while True:
        op, result = _step(proc, value, error)
        if op is None:
            return cast(T, result)  # the procedure returned: result is its value
        value, error = None, None
        try:
            value = _perform(op)
        except Exception as exc:  # thrown back into the procedure, which decides
            error = exc


def _perform(op: Op) -> Any:
    if isinstance(op, Locked):
        with op.lock:
            return run(op.proc)
    if isinstance(op, Each):
        return [_perform(c) for c in op.calls]
    try:
        result = op.verb(*op.args, **op.kwargs)
        return list(result) if op.listed else result
    except op.absent:
        return None


async def arun(proc: Proc[T]) -> T:
    """Run ``proc``, awaiting its calls."""
    value: Any = None
    error: BaseException | None = None
    while True:
        op, result = _step(proc, value, error)
        if op is None:
            return cast(T, result)
        value, error = None, None
        try:
            value = await _aperform(op)
        except Exception as exc:  # thrown back into the procedure, which decides
            error = exc


async def _aperform(op: Op) -> Any:
    if isinstance(op, Locked):
        async with op.lock:
            return await arun(op.proc)
    if isinstance(op, Each):
        return await asyncio.gather(*(_aperform(c) for c in op.calls))
    try:
        result = op.verb(*op.args, **op.kwargs)
        if op.listed:
            return [item async for item in result]
        return (await result) if inspect.isawaitable(result) else result
    except op.absent:
        return None


async def acall(verb: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``verb(*args, **kwargs)`` from asyncio code over either kind of log: a verb of an
    AsyncLog or AsyncWriter awaited, one of a Log or Writer (boto3 blocks) run in a
    worker thread."""
    if inspect.iscoroutinefunction(verb):
        return await verb(*args, **kwargs)
    return await asyncio.to_thread(verb, *args, **kwargs)
