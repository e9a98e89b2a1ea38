"""Two writers, nothing lost: the same race against any LangGraph checkpointer, any
OpenAI Agents SDK session, and s3log's ``AgentSession``, as a reusable check.

The race: a thread (session) holds one finished run; two workers, each with its own
saver (session) object, as two processes would have, both restore it, both run a turn
and both are acknowledged. Their steps alternate, one at a time, in a fixed order
(worker A, then B), so the outcome is the same on every run:

    A enters its guard, B enters its guard    (when a guard is given)
    A restores, B restores                    (get_tuple / get_items / restore)
    A writes its question, B writes its own   (put / add_items / user_input)
    A writes its answer, B writes its own
    A leaves its guard, B leaves its guard

A worker whose step raises one of ``refusals`` (:class:`~s3log.agent.SessionBusy`,
:class:`~s3log.ConflictError` by default) stops there: its run was refused, and what it
wrote before the refusal still counts as acknowledged. Then a fresh reader looks:

- **acknowledged**: the checkpoints (items) whose write returned;
- **reachable**: how many of them a restore finds, with the state that was written:
  a LangGraph thread's latest checkpoint and its parents (``get_tuple`` and
  ``parent_config``), an SDK session's ``get_items()``, an agent session's history (in
  the session each worker holds at the end: a run that continued in a fork is
  reachable through the fork id it was given);
- **interleaved**: whether the history a reader is shown mixes the two runs' entries
  (a LangGraph thread's ``list()``, which ``get_state_history`` shows; the session's
  items; each agent session's history): ``A, B, A, B`` rather than ``A, A, B, B``.

A row is clean when nothing acknowledged is unreachable and nothing interleaves.
Point it at your own saver or session in a test::

    from s3log.testing.conformance import race_checkpointers

    def test_my_saver_keeps_both_runs(tmp_path):
        result = race_checkpointers(lambda worker: MySaver(tmp_path / "db"))
        assert result.clean, result.summary()

:func:`race_sessions` is the same for an SDK session (a coroutine), and ``guard`` wraps
each worker's run in a context of the saver's or session's own (s3log's run lease:
``guard=lambda saver, config: saver.lease(config)``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from s3log.agent import AgentSession, SessionBusy
from s3log.errors import ConflictError
from s3log.log import Log

__all__ = ["REFUSALS", "RaceResult", "interleaved", "race_agent_sessions", "race_checkpointers", "race_sessions"]

#: What a refused run raises by default: a live lease, or a strict writer's conflict.
REFUSALS: tuple[type[BaseException], ...] = (SessionBusy, ConflictError)

WORKERS = ("A", "B")


@dataclass(frozen=True)
class RaceResult:
    """What the race left: see the module's docstring for each count."""

    acknowledged: int
    reachable: int
    interleaved: bool
    #: Runs refused (a refusal raised at one of their steps).
    refused: int = 0
    #: Runs whose writes went to a fork of the session (the worker holds its id).
    forked: int = 0

    @property
    def lost(self) -> int:
        """Acknowledged checkpoints (items) a restore does not find as written."""
        return self.acknowledged - self.reachable

    @property
    def clean(self) -> bool:
        """Nothing acknowledged lost, no run's history interleaved with another's."""
        return self.lost == 0 and not self.interleaved

    def summary(self) -> str:
        """One line: the counts, for an assertion's message or a table."""
        return (f"{self.reachable} of {self.acknowledged} acknowledged reachable, "
                f"{'interleaved' if self.interleaved else 'not interleaved'}, "
                f"{self.refused} run(s) refused, {self.forked} continued in a fork")


def interleaved(labels: Sequence[str]) -> bool:
    """Whether a history's run labels (oldest first) mix runs: ``A, B, A`` does, ``A, A, B`` does not."""
    runs = [label for i, label in enumerate(labels) if i == 0 or labels[i - 1] != label]
    return len(runs) != len(set(runs))


def _alternate(runs: Sequence[Iterator[None]], refusals: tuple[type[BaseException], ...]) -> int:
    """Step the runs in turn until each ends; the number refused."""
    live, refused = list(runs), 0
    while live:
        for run in list(live):
            try:
                next(run)
            except StopIteration:
                live.remove(run)
            except refusals:
                live.remove(run)
                refused += 1
    return refused


async def _aalternate(runs: Sequence[AsyncIterator[None]], refusals: tuple[type[BaseException], ...]) -> int:
    """:func:`_alternate` for async runs: each step awaited, one at a time."""

    async def step(run: AsyncIterator[None]) -> bool:
        """Whether the run goes on (False once it has ended)."""
        try:
            await run.__anext__()
        except StopAsyncIteration:
            return False
        return True

    live, refused = list(runs), 0
    while live:
        for run in list(live):
            try:
                going = await step(run)
            except refusals:
                going = False
                refused += 1
            if not going:
                live.remove(run)
    return refused


# ------------------------------------------------------------------ LangGraph


def _checkpoint(base: Any, messages: list[str], saver: Any) -> tuple[Any, Any]:
    """The next checkpoint after ``base`` with ``messages``, and its new channel versions."""
    from langgraph.checkpoint.base import create_checkpoint

    ckpt = create_checkpoint(base, None, 0)
    version = saver.get_next_version(base["channel_versions"].get("messages"), None)
    ckpt["channel_values"] = {**ckpt["channel_values"], "messages": messages}
    ckpt["channel_versions"] = {**ckpt["channel_versions"], "messages": version}
    return ckpt, {"messages": version}


def _lg_put(saver: Any, config: Any, base: Any, messages: list[str], who: str, step: int) -> tuple[Any, Any]:
    ckpt, versions = _checkpoint(base, messages, saver)
    meta: dict[str, Any] = {"source": "input" if step == 0 else "loop", "step": step, "parents": {}, "worker": who}
    return saver.put(config, ckpt, meta, versions), ckpt


def _lg_run(saver: Any, config: Any, who: str, written: dict[str, list[str]],
            guard: Callable[[Any, Any], contextlib.AbstractContextManager[Any]] | None) -> Iterator[None]:
    """One worker's run as a graph run makes its checkpointer calls: restore, then a
    checkpoint per step, each with the parent the run started from."""
    with guard(saver, config) if guard is not None else contextlib.nullcontext():
        yield
        tup = saver.get_tuple(config)
        yield
        at, ckpt = tup.config, tup.checkpoint
        messages = list(ckpt["channel_values"].get("messages", []))
        for step, text in enumerate((f"{who}: question", f"{who}: answer")):
            messages = [*messages, text]
            at, ckpt = _lg_put(saver, at, ckpt, messages, who, step)
            written[at["configurable"]["checkpoint_id"]] = messages
            yield


def race_checkpointers(
    make: Callable[[str], Any],
    *,
    thread_id: str = "two-writers",
    guard: Callable[[Any, Any], contextlib.AbstractContextManager[Any]] | None = None,
    refusals: tuple[type[BaseException], ...] = REFUSALS,
) -> RaceResult:
    """Race two workers on one thread of LangGraph checkpointers made by ``make(worker)``
    (``"seed"``, ``"A"``, ``"B"``, ``"reader"``: one saver object each, over one store).

    ``guard(saver, config)``: a context each worker runs inside (e.g. s3log's
    ``saver.lease(config)``). A checkpoint counts as reachable when it lies on the
    thread's latest checkpoint's parent chain and reads back with the state it was put with.
    """
    from langgraph.checkpoint.base import empty_checkpoint

    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    seed = make("seed")
    _lg_put(seed, config, empty_checkpoint(), ["seed"], "seed", 0)
    written: dict[str, list[str]] = {}
    refused = _alternate([_lg_run(make(w), config, w, written, guard) for w in WORKERS], refusals)
    reader = make("reader")
    chain: dict[str, Any] = {}
    tup = reader.get_tuple(config)
    while tup is not None:
        chain[tup.config["configurable"]["checkpoint_id"]] = tup.checkpoint["channel_values"].get("messages")
        tup = reader.get_tuple(tup.parent_config) if tup.parent_config else None
    reachable = sum(1 for cid, messages in written.items() if chain.get(cid) == messages)
    history = [t.config["configurable"]["checkpoint_id"] for t in reader.list(config)][::-1]
    labels = [written[cid][-1].split(":")[0] for cid in history if cid in written]
    return RaceResult(len(written), reachable, interleaved(labels), refused)


# ------------------------------------------------------------ OpenAI Agents SDK


async def _oa_run(session: Any, who: str, acked: list[str],
                  guard: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None) -> AsyncIterator[None]:
    """One worker's run as the SDK's ``Runner.run`` makes its session calls: the items
    so far, then the turn's input, then its output."""
    async with guard(session) if guard is not None else contextlib.nullcontext():
        yield
        await session.get_items()
        yield
        for role, text in (("user", f"{who}: question"), ("assistant", f"{who}: answer")):
            await session.add_items([{"role": role, "content": text}])
            acked.append(text)
            yield


async def race_sessions(
    make: Callable[[str], Any],
    *,
    guard: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
    refusals: tuple[type[BaseException], ...] = REFUSALS,
) -> RaceResult:
    """Race two workers on one conversation of OpenAI Agents SDK sessions made by
    ``make(worker)`` (``"seed"``, ``"A"``, ``"B"``, ``"reader"``: one session object each,
    same session id, one store). ``guard(session)``: an async context each worker runs
    inside (e.g. s3log's ``session.lease()``). Items must keep their ``content``."""
    await make("seed").add_items([{"role": "user", "content": "seed"}])
    acked: list[str] = []
    refused = await _aalternate([_oa_run(make(w), w, acked, guard) for w in WORKERS], refusals)
    stored = [item.get("content") for item in await make("reader").get_items() if isinstance(item, dict)]
    reachable = sum(1 for text in acked if text in stored)
    labels = [text.split(":")[0] for text in stored if text in acked]
    return RaceResult(len(acked), reachable, interleaved(labels), refused)


# ---------------------------------------------------------------- AgentSession


def _agent_run(log: Log, session_id: str, who: str, acked: list[str], holds: dict[str, str]) -> Iterator[None]:
    session = AgentSession.restore(log, session_id, owner=who)
    yield
    session.user_input(f"{who}: question")
    yield
    session.assistant_items({"role": "assistant", "content": f"{who}: answer"})
    session.turn_end()
    session.flush()
    acked.extend((f"{who}: question", f"{who}: answer"))
    holds[who] = session.session_id


def race_agent_sessions(make: Callable[[str], Log], *,
                        refusals: tuple[type[BaseException], ...] = REFUSALS) -> RaceResult:
    """Race two workers on one :class:`~s3log.agent.AgentSession`, each over its own
    :class:`~s3log.Log` from ``make(worker)`` (one store). The late run's turn forks, as
    docs/agent.md says; it is reachable through the session id its worker holds."""
    seed = AgentSession.create(make("seed"), owner="seed")
    seed.user_input("seed")
    seed.assistant_items({"role": "assistant", "content": "seed"})
    seed.turn_end()
    seed.flush()
    acked: list[str] = []
    holds: dict[str, str] = {}
    refused = _alternate([_agent_run(make(w), seed.session_id, w, acked, holds) for w in WORKERS], refusals)
    reader = make("reader")
    seen: set[str] = set()
    mixed = False
    for sid in set(holds.values()):
        history = [h.get("content") for h in AgentSession.restore(reader, sid, owner="reader").state.history]
        seen.update(text for text in history if isinstance(text, str))
        mixed |= interleaved([text.split(":")[0] for text in history if text in acked])
    reachable = sum(1 for text in acked if text in seen)
    forked = sum(1 for sid in holds.values() if sid != seed.session_id)
    return RaceResult(len(acked), reachable, mixed, refused, forked)
