"""Agent sessions: an LLM worker's conversation, persisted, restored, forked and repaired.

An :class:`AgentSession` records what an agent loop does as s3log entries of the kinds
below, buffers them (write-behind) and commits at turn end. :func:`collect_state`
folds the entries back into a :class:`SessionState`; it is also the reducer the core
uses to seed forks, so an automatic fork carries the agent's whole state.

Items are plain CBOR-able dicts, so any client's messages fit. Two tool-call shapes are
understood for crash repair: Responses-style items (``{"type": "function_call",
"call_id": ...}`` answered by ``{"type": "function_call_output", "call_id": ...}``)
and Chat-style messages (``{"role": "assistant", "tool_calls": [{"id": ...}]}``
answered by ``{"role": "tool", "tool_call_id": ...}``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .codec import Entry, ParentRef
from .errors import ConflictError, S3LogError
from .log import Log, Writer
from .protocol import ForkInfo

# Entry kinds of an agent session.
SESSION_START = "agent.session_start"
USER_INPUT = "agent.user_input"
ASSISTANT_ITEMS = "agent.assistant_items"
TOOL_STARTED = "agent.tool_started"
TOOL_RESULTS = "agent.tool_results"
HOOK_ITEMS = "agent.hook_items"
TURN_END = "agent.turn_end"
CACHE_LOCKED = "agent.cache_locked"
CACHE_UNLOCKED = "agent.cache_unlocked"
OUTCOME = "agent.outcome"
CONFIG_CHANGED = "agent.config_changed"
REPAIRED = "agent.repaired"

KINDS = (
    SESSION_START, USER_INPUT, ASSISTANT_ITEMS, TOOL_STARTED, TOOL_RESULTS, HOOK_ITEMS, TURN_END,
    CACHE_LOCKED, CACHE_UNLOCKED, OUTCOME, CONFIG_CHANGED, REPAIRED,
)
_ITEM_KINDS = (USER_INPUT, ASSISTANT_ITEMS, TOOL_RESULTS, HOOK_ITEMS)

Status = Literal["finished", "paused", "limit_reached", "error"]
STATUSES: tuple[str, ...] = ("finished", "paused", "limit_reached", "error")

#: What a tool call left without a result is answered with after a crash.
UNKNOWN_OUTCOME = (
    "The worker running this tool call stopped before its result was recorded. Its outcome is "
    "unknown: it may or may not have taken effect. Check the current state before retrying it."
)
#: What a tool call that was requested but never started is answered with.
NOT_RUN = "This tool call was requested but never started: it was not run. It is safe to run it again."


@dataclass(frozen=True)
class SessionState:
    """An agent session rebuilt from its entries."""

    system_prompt: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    turn_count: int = 0
    locked_prefix_len: int | None = None
    last_run_interrupted: bool = False
    last_outcome: dict[str, Any] | None = None
    head_hash: str | None = None
    #: How many leading history items were inherited from a parent session.
    seed_len: int = 0
    #: Whether a turn was started and neither ended nor given an outcome.
    turn_open: bool = False
    #: Tool calls of the open turn without a result: call id -> "responses" | "chat".
    open_calls: dict[str, str] = field(default_factory=dict)
    #: Those of ``open_calls`` that were recorded as started.
    started_calls: frozenset[str] = frozenset()

    @property
    def paused(self) -> bool:
        """Whether the last run ended paused (waiting, not crashed)."""
        return bool(self.last_outcome and self.last_outcome.get("status") == "paused")

    @property
    def needs_repair(self) -> bool:
        """A turn was left open: the worker that ran it stopped without closing it."""
        return self.turn_open

    def to_seed(self) -> dict[str, Any]:
        """The seed of a fork of this state (CBOR-able)."""
        return {
            "system_prompt": self.system_prompt,
            "config": self.config,
            "history": self.history,
            "turn_count": self.turn_count,
            "locked_prefix_len": self.locked_prefix_len,
            "last_run_interrupted": self.last_run_interrupted,
            "last_outcome": self.last_outcome,
            "turn_open": self.turn_open,
            "open_calls": self.open_calls,
            "started_calls": sorted(self.started_calls),
        }

    @staticmethod
    def from_seed(seed: Any) -> SessionState:
        """The state a fork starts in."""
        if not isinstance(seed, Mapping):
            return SessionState()
        history = list(seed.get("history") or [])
        return SessionState(
            system_prompt=seed.get("system_prompt"),
            config=dict(seed.get("config") or {}),
            history=history,
            turn_count=int(seed.get("turn_count") or 0),
            locked_prefix_len=seed.get("locked_prefix_len"),
            last_run_interrupted=bool(seed.get("last_run_interrupted")),
            last_outcome=seed.get("last_outcome"),
            seed_len=len(history),
            turn_open=bool(seed.get("turn_open")),
            open_calls=dict(seed.get("open_calls") or {}),
            started_calls=frozenset(seed.get("started_calls") or ()),
        )


def _calls(item: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Tool calls an item requests: (call id, shape)."""
    if item.get("type") == "function_call" and item.get("call_id"):
        return [(str(item["call_id"]), "responses")]
    out = []
    for call in item.get("tool_calls") or ():
        if isinstance(call, Mapping) and call.get("id"):
            out.append((str(call["id"]), "chat"))
    return out


def _answered(item: Mapping[str, Any]) -> str | None:
    """The call id a tool-result item answers, if any."""
    if item.get("type") == "function_call_output" and item.get("call_id"):
        return str(item["call_id"])
    if item.get("role") == "tool" and item.get("tool_call_id"):
        return str(item["tool_call_id"])
    return None


def _items(entry: Entry) -> list[dict[str, Any]]:
    data = entry.data
    items = data.get("items") if isinstance(data, Mapping) else None
    return [i for i in items or () if isinstance(i, dict)]


class AgentReducer:
    """The reducer of agent sessions: folds entries into a :class:`SessionState`."""

    def initial(self) -> SessionState:
        """An empty session."""
        return SessionState()

    def apply(self, state: SessionState, entry: Entry) -> SessionState:
        """The state after ``entry``; kinds this layer does not know leave it unchanged."""
        s = replace(state, head_hash=entry.hash.hex())
        data = entry.data if isinstance(entry.data, Mapping) else {}
        k = entry.kind
        if k == SESSION_START:
            return replace(
                s,
                system_prompt=data.get("system_prompt"),
                config=dict(data.get("config") or {}),
                history=list(data.get("history") or []),
            )
        if k in _ITEM_KINDS:
            items = _items(entry)
            calls = dict(s.open_calls)
            started = set(s.started_calls)
            for item in items:
                for call_id, shape in _calls(item):
                    calls[call_id] = shape
                answered = _answered(item)
                if answered is not None:
                    calls.pop(answered, None)
                    started.discard(answered)
            return replace(s, history=[*s.history, *items], turn_open=True, open_calls=calls,
                           started_calls=frozenset(started))
        if k == TOOL_STARTED:
            ids = {str(c) for c in data.get("call_ids") or ()}
            return replace(s, turn_open=True, started_calls=s.started_calls | ids)
        if k == TURN_END:
            return replace(s, turn_count=int(data.get("turn", s.turn_count + 1)), turn_open=False,
                           open_calls={}, started_calls=frozenset())
        if k == OUTCOME:
            return replace(
                s,
                last_outcome=dict(data),
                last_run_interrupted=bool(data.get("interrupted")),
                turn_open=False,
                # A paused run keeps its unanswered calls: they are answered on resume.
                open_calls=s.open_calls if data.get("status") == "paused" else {},
                started_calls=s.started_calls if data.get("status") == "paused" else frozenset(),
            )
        if k == CACHE_LOCKED:
            return replace(s, locked_prefix_len=int(data.get("prefix_len", 0)))
        if k == CACHE_UNLOCKED:
            return replace(s, locked_prefix_len=None)
        if k == CONFIG_CHANGED:
            return replace(s, config=dict(data.get("config") or {}))
        return s

    def to_seed(self, state: SessionState) -> Any:
        """The state as a fork seed."""
        return state.to_seed()

    def fork_meta(self, meta: dict[str, Any], parent: ParentRef, seed: Any) -> dict[str, Any]:
        """A fork's header: the parent's, saying where it came from and how much it inherited."""
        history = seed.get("history") if isinstance(seed, Mapping) else None
        return {**meta, "parent": parent.session, "seed_len": len(history or [])}

    def from_seed(self, seed: Any) -> SessionState:
        """The state a fork starts in."""
        return SessionState.from_seed(seed)


def collect_state(entries: Iterable[Entry]) -> SessionState:
    """Rebuild an agent session's state from its entries (a fork's seed included)."""
    from .reducer import replay

    entries = list(entries)
    state: SessionState = replay(AgentReducer(), entries)
    if entries:
        state = replace(state, head_hash=entries[-1].hash.hex())
    return state


def repair_items(state: SessionState) -> list[dict[str, Any]]:
    """Synthetic results for the tool calls an open turn left unanswered."""
    out = []
    for call_id, shape in state.open_calls.items():
        text = UNKNOWN_OUTCOME if call_id in state.started_calls else NOT_RUN
        if shape == "responses":
            out.append({"type": "function_call_output", "call_id": call_id, "output": text, "synthetic": True})
        else:
            out.append({"role": "tool", "tool_call_id": call_id, "content": text, "synthetic": True})
    return out


def group_items(items: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Split a turn's new history items into runs of (kind, items), in order."""
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    for item in items:
        role, typ = item.get("role"), item.get("type")
        if _answered(item) is not None:
            kind = TOOL_RESULTS
        elif item.get("hook") or typ == "hook":
            kind = HOOK_ITEMS
        elif role == "user":
            kind = USER_INPUT
        else:
            kind = ASSISTANT_ITEMS  # assistant messages, tool calls, reasoning
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(dict(item))
        else:
            runs.append((kind, [dict(item)]))
    return runs


ForkCallback = Callable[["AgentSession", ForkInfo], None]


class AgentSession:
    """One agent conversation on s3log, with write-behind buffering.

    Records are buffered and committed at turn end, on :meth:`flush`, when the buffer
    passes ``max_buffer_entries`` or ``max_buffer_bytes``, or when a record arrives more
    than ``max_delay`` seconds after the oldest buffered one. :meth:`close` (and the
    context manager) drain it. A failed automatic commit keeps the batch; the next
    :meth:`flush` retries it and raises if it fails again.
    """

    def __init__(
        self,
        log: Log,
        writer: Writer,
        *,
        max_buffer_entries: int = 64,
        max_buffer_bytes: int = 256 * 1024,
        max_delay: float = 2.0,
        on_fork: ForkCallback | None = None,
    ) -> None:
        self.log = log
        self._writer = writer
        self.max_buffer_entries = max_buffer_entries
        self.max_buffer_bytes = max_buffer_bytes
        self.max_delay = max_delay
        self._on_fork = on_fork
        self._buffered_bytes = 0
        self._oldest: float | None = None
        self.last_error: BaseException | None = None
        self._pending_state: SessionState = writer.state
        self._reducer = AgentReducer()
        writer.on_fork(self._forked)

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        log: Log,
        *,
        system_prompt: str | None = None,
        config: Mapping[str, Any] | None = None,
        history: Sequence[Mapping[str, Any]] = (),
        meta: Mapping[str, Any] | None = None,
        labels: Mapping[str, Any] | None = None,
        delegation_depth: int = 0,
        parent_session: str | None = None,
        session_id: str | None = None,
        **options: Any,
    ) -> AgentSession:
        """Start a session lazily: nothing is stored until the first commit."""
        header = dict(meta or {})
        header.setdefault("kind", "agent")
        header["labels"] = dict(labels or header.get("labels") or {})
        header["delegation_depth"] = delegation_depth
        header["parent"] = parent_session
        header["seed_len"] = 0
        writer = log.create(session_id, meta=header, reducer=AgentReducer(), lazy=True)
        session = cls(log, writer, **options)
        session._record(SESSION_START, {
            "system_prompt": system_prompt, "config": dict(config or {}), "history": [dict(h) for h in history],
        })
        return session

    @classmethod
    def restore(cls, log: Log, session_id: str, **options: Any) -> AgentSession:
        """Rebuild a session's state; close (durably, once) a turn a crashed worker left open."""
        while True:
            writer = log.open(session_id, reducer=AgentReducer(), on_conflict="raise")
            state: SessionState = writer.state
            if not state.needs_repair:
                break
            fixes = repair_items(state)
            if fixes:
                writer.append(TOOL_RESULTS, {"items": fixes, "synthetic": True})
            writer.append(OUTCOME, {"status": "error", "message": "worker stopped mid-turn", "interrupted": True})
            writer.append(TURN_END, {"turn": state.turn_count + 1, "interrupted": True})
            try:
                writer.commit()
                break
            except ConflictError:
                continue  # another worker changed it (maybe repaired it): look again
        writer.on_conflict = "fork"
        return cls(log, writer, **options)

    @classmethod
    def fork_at(
        cls,
        log: Log,
        session_id: str,
        *,
        at_hash: bytes | str | None = None,
        at_seq: int | None = None,
        labels: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AgentSession:
        """A new session continuing ``session_id`` from a stored point (an unknown point is an error)."""
        head = log.head(session_id)
        meta = dict(head.meta)
        if labels is not None:
            meta["labels"] = dict(labels)
        child = log.fork(session_id, at_seq=at_seq, at_hash=at_hash, reducer=AgentReducer(), meta=meta)
        return cls.restore(log, child, **options)

    def fork(self, **options: Any) -> AgentSession:
        """A new session continuing from this one's current state (buffered records are flushed first)."""
        self.flush()
        return AgentSession.fork_at(self.log, self.session_id, at_hash=self._writer.head.hash, **options)

    # ------------------------------------------------------------------- properties

    @property
    def session_id(self) -> str:
        """The session recorded to (changes after an automatic fork)."""
        return self._writer.session_id

    @property
    def state(self) -> SessionState:
        """The state including buffered records."""
        return self._pending_state

    @property
    def committed_state(self) -> SessionState:
        """The state of what is durable."""
        return self._writer.state  # type: ignore[no-any-return]

    @property
    def meta(self) -> dict[str, Any]:
        """The session header."""
        return self._writer.head.meta

    @property
    def forks(self) -> list[ForkInfo]:
        """Automatic forks this session made."""
        return self._writer.forks

    @property
    def buffered(self) -> int:
        """Records not yet committed."""
        return self._writer.pending

    # -------------------------------------------------------------------- recording

    def user_input(self, items: str | Sequence[Mapping[str, Any]]) -> None:
        """Record user input (a string becomes one user message)."""
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        self._record(USER_INPUT, {"items": [dict(i) for i in items]})

    def assistant_items(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Record assistant output: messages, tool calls, reasoning."""
        self._record(ASSISTANT_ITEMS, {"items": [dict(i) for i in items]})

    def tool_started(self, call_ids: Sequence[str]) -> None:
        """Record that tool calls began executing (so a crash can tell "unknown" from "not run")."""
        self._record(TOOL_STARTED, {"call_ids": list(call_ids)})
        self.flush()  # a side effect is about to happen: make the fact durable first

    def tool_results(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Record tool results."""
        self._record(TOOL_RESULTS, {"items": [dict(i) for i in items]})

    def hook_items(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Record items a hook injected into the history."""
        self._record(HOOK_ITEMS, {"items": [dict(i) for i in items]})

    def turn_end(self) -> None:
        """Close the turn and commit."""
        self._record(TURN_END, {"turn": self._pending_state.turn_count + 1})
        self.flush()

    def outcome(self, status: Status, *, message: str | None = None, interrupted: bool = False) -> None:
        """Record how a run ended (finished, paused, limit_reached, error) and commit."""
        if status not in STATUSES:
            raise S3LogError(f"outcome status must be one of {STATUSES}, not {status!r}")
        self._record(OUTCOME, {"status": status, "message": message, "interrupted": interrupted})
        self.flush()

    def config_changed(self, config: Mapping[str, Any]) -> None:
        """Record the request config now in force."""
        self._record(CONFIG_CHANGED, {"config": dict(config)})

    def cache_locked(self, prefix_len: int) -> None:
        """Record that the first ``prefix_len`` history items are pinned (prompt cache)."""
        self._record(CACHE_LOCKED, {"prefix_len": int(prefix_len)})

    def cache_unlocked(self) -> None:
        """Record that the prompt-cache prefix is released."""
        self._record(CACHE_UNLOCKED, {})

    def record_turn(
        self,
        new_items: Sequence[Mapping[str, Any]],
        *,
        outcome: Status | None = None,
        message: str | None = None,
    ) -> None:
        """Record a whole turn's new history items, grouped by kind, then end the turn."""
        for kind, items in group_items(new_items):
            self._record(kind, {"items": items})
        if outcome is not None:
            self._record(OUTCOME, {"status": outcome, "message": message, "interrupted": False})
        self.turn_end()

    # ------------------------------------------------------------------- committing

    def flush(self) -> None:
        """Commit every buffered record. Raises if the commit fails (the batch is kept)."""
        if self._writer.pending == 0 and self._writer.head.version > 0:
            self.last_error = None
            return
        self._writer.commit()
        self.last_error = None
        self._buffered_bytes = 0
        self._oldest = None
        if self._writer.pending == 0:
            self._pending_state = self._writer.state

    def close(self) -> None:
        """Drain the buffer."""
        self.flush()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # The original error matters more; a failed commit leaves the batch in the writer.
        with contextlib.suppress(S3LogError):
            self.close()

    def _record(self, kind: str, data: dict[str, Any]) -> None:
        from .codec import dumps

        self._writer.append(kind, data)
        self._pending_state = self._reducer.apply(self._pending_state, _provisional(kind, data))
        self._buffered_bytes += len(dumps(data))
        now = time.monotonic()
        if self._oldest is None:
            self._oldest = now
        if (
            self._writer.pending >= self.max_buffer_entries
            or self._buffered_bytes >= self.max_buffer_bytes
            or now - self._oldest >= self.max_delay
        ):
            try:
                self.flush()
            except S3LogError as exc:
                self.last_error = exc  # kept: the next flush retries and raises

    def _forked(self, info: ForkInfo) -> None:
        if self._on_fork is not None:
            self._on_fork(self, info)


def _provisional(kind: str, data: Any) -> Entry:
    # The buffered state is folded with a placeholder hash; the real one comes at commit.
    return Entry(-1, None, kind, 0, data, b"\0" * 32)
