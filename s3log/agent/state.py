"""What an agent session is made of: entry kinds, the state they fold into, the fold.

Nothing here does I/O. The state is read-only all the way down: items are
:class:`ReadOnlyDict` / :class:`ReadOnlyList` (subclasses of ``dict`` and ``list``, so
JSON encoders, CBOR and model clients take them as they are) that refuse changes, so
code that reads ``session.state.history`` cannot change what the loop sends next or
what the next commit stores. :func:`thaw` gives a mutable deep copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NoReturn, overload

from s3log._format.values import Entry, ParentRef

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
#: A summary standing for a span of the session's own chain (see :class:`SummarySpan`):
#: the state after it is the one it carries, so a restore starts there.
SUMMARY = "agent.summary"

KINDS = (
    SESSION_START, USER_INPUT, ASSISTANT_ITEMS, TOOL_STARTED, TOOL_RESULTS, HOOK_ITEMS, TURN_END,
    CACHE_LOCKED, CACHE_UNLOCKED, OUTCOME, CONFIG_CHANGED, REPAIRED, SUMMARY,
)
ITEM_KINDS = (USER_INPUT, ASSISTANT_ITEMS, TOOL_RESULTS, HOOK_ITEMS)

Status = Literal["finished", "paused", "limit_reached", "error"]
STATUSES: tuple[str, ...] = ("finished", "paused", "limit_reached", "error")

#: What a tool call left without a result is answered with after a crash.
UNKNOWN_OUTCOME = (
    "The worker running this tool call stopped before its result was recorded. Its outcome is "
    "unknown: it may or may not have taken effect. Check the current state before retrying it."
)
#: What a tool call that was requested but never started is answered with.
NOT_RUN = "This tool call was requested but never started: it was not run. It is safe to run it again."

_READ_ONLY = (
    "agent session state is read-only (changing it would change what the loop sends and "
    "what the next commit stores): take a mutable copy with s3log.agent.thaw(...) or copy.deepcopy(...)"
)


class _ReadOnly:
    """What the read-only containers share: every change refused, copies and pickles plain."""

    __slots__ = ()
    #: The plain container a copy, a deep copy or a pickle gives.
    _plain: type[Any]

    def __init_subclass__(cls, *, plain: type[Any], refuse: tuple[str, ...], **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._plain = plain
        for name in refuse:
            setattr(cls, name, cls._refuse)

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(_READ_ONLY)

    def __copy__(self) -> Any:
        return self._plain(self)

    def __deepcopy__(self, memo: Any) -> Any:
        return thaw(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles (and unpickles) as the plain container: the read-only view is for in-process readers.
        return (self._plain, (self._plain(self),))


class ReadOnlyDict(_ReadOnly, dict[str, Any], plain=dict, refuse=(
        "__setitem__", "__delitem__", "__ior__", "clear", "pop", "popitem", "setdefault", "update")):
    """A ``dict`` that refuses every change (``TypeError``); ``copy.deepcopy`` gives a plain one."""

    __slots__ = ()


class ReadOnlyList(_ReadOnly, list[Any], plain=list, refuse=(
        "__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop", "remove",
        "clear", "sort", "reverse")):
    """A ``list`` that refuses every change (``TypeError``); ``copy.deepcopy`` gives a plain one."""

    __slots__ = ()


def freeze(obj: Any) -> Any:
    """A read-only deep copy of ``obj`` (mappings and lists; scalars are kept)."""
    if isinstance(obj, (ReadOnlyDict, ReadOnlyList)):
        return obj  # only ever built by freeze: already read-only all the way down
    if isinstance(obj, Mapping):
        return ReadOnlyDict({k: freeze(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return ReadOnlyList(freeze(v) for v in obj)
    return obj


@overload
def thaw(obj: Mapping[str, Any]) -> dict[str, Any]: ...
@overload
def thaw(obj: list[Any] | tuple[Any, ...]) -> list[Any]: ...
@overload
def thaw(obj: Any) -> Any: ...


def thaw(obj: Any) -> Any:
    """A mutable deep copy of ``obj``: plain dicts and lists."""
    if isinstance(obj, Mapping):
        return {k: thaw(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [thaw(v) for v in obj]
    return obj


_EMPTY: Any = ReadOnlyDict()


@dataclass(frozen=True)
class SummarySpan:
    """The span of a session's chain a summary stands for: its first and last entry,
    by seq and hash (hex), both inclusive; ``seq`` / ``hash`` are the summary's own
    entry (None before it is committed)."""

    first_seq: int
    first_hash: str
    last_seq: int
    last_hash: str
    seq: int | None = None
    hash: str | None = None

    def to_data(self) -> dict[str, Any]:
        """The span as stored in the summary entry."""
        return {"first_seq": self.first_seq, "first_hash": self.first_hash,
                "last_seq": self.last_seq, "last_hash": self.last_hash}

    @staticmethod
    def from_entry(entry: Entry) -> SummarySpan | None:
        """The span a summary entry names (None if it names none in the stored shape)."""
        data = entry.data if isinstance(entry.data, Mapping) else {}
        span = data.get("span")
        if not isinstance(span, Mapping):
            return None
        try:
            return SummarySpan(int(span["first_seq"]), str(span["first_hash"]), int(span["last_seq"]),
                               str(span["last_hash"]), entry.seq, entry.hash.hex())
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class SessionState:
    """An agent session rebuilt from its entries. Read-only, items included."""

    system_prompt: str | None = None
    config: Mapping[str, Any] = field(default_factory=ReadOnlyDict)
    history: Sequence[Mapping[str, Any]] = field(default_factory=ReadOnlyList)
    turn_count: int = 0
    locked_prefix_len: int | None = None
    last_run_interrupted: bool = False
    last_outcome: Mapping[str, Any] | None = None
    head_hash: str | None = None
    #: How many leading history items were inherited from a parent session.
    seed_len: int = 0
    #: Whether a turn was started and neither ended nor given an outcome.
    turn_open: bool = False
    #: Tool calls of the open turn without a result: call id -> "responses" | "chat".
    open_calls: Mapping[str, str] = field(default_factory=ReadOnlyDict)
    #: Those of ``open_calls`` that were recorded as started.
    started_calls: frozenset[str] = frozenset()
    #: The newest summary folded in (its span and its own entry), if any.
    summary: SummarySpan | None = None

    def __post_init__(self) -> None:
        # A state built by hand gets the same read-only guarantee as a folded one.
        for name in ("config", "history", "last_outcome", "open_calls"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (ReadOnlyDict, ReadOnlyList)):
                object.__setattr__(self, name, freeze(value))

    @property
    def paused(self) -> bool:
        """Whether the last run ended paused (waiting, not crashed)."""
        return bool(self.last_outcome and self.last_outcome.get("status") == "paused")

    @property
    def needs_repair(self) -> bool:
        """A turn was left open: the worker that ran it stopped without closing it."""
        return self.turn_open

    def to_seed(self) -> dict[str, Any]:
        """The seed of a fork of this state (plain, CBOR-able)."""
        return {
            "system_prompt": self.system_prompt,
            "config": thaw(self.config),
            "history": thaw(self.history),
            "turn_count": self.turn_count,
            "locked_prefix_len": self.locked_prefix_len,
            "last_run_interrupted": self.last_run_interrupted,
            "last_outcome": thaw(self.last_outcome),
            "turn_open": self.turn_open,
            "open_calls": thaw(self.open_calls),
            "started_calls": sorted(self.started_calls),
        }

    @staticmethod
    def from_seed(seed: Any) -> SessionState:
        """The state a fork starts in."""
        if not isinstance(seed, Mapping):
            return SessionState()
        history = freeze(list(seed.get("history") or []))
        return SessionState(
            system_prompt=seed.get("system_prompt"),
            config=freeze(dict(seed.get("config") or {})),
            history=history,
            turn_count=int(seed.get("turn_count") or 0),
            locked_prefix_len=seed.get("locked_prefix_len"),
            last_run_interrupted=bool(seed.get("last_run_interrupted")),
            last_outcome=freeze(seed.get("last_outcome")),
            seed_len=len(history),
            turn_open=bool(seed.get("turn_open")),
            open_calls=freeze(dict(seed.get("open_calls") or {})),
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


def _items(entry: Entry) -> list[Any]:
    data = entry.data
    items = data.get("items") if isinstance(data, Mapping) else None
    return [freeze(i) for i in items or () if isinstance(i, Mapping)]


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
                config=freeze(dict(data.get("config") or {})),
                history=freeze(list(data.get("history") or [])),
            )
        if k in ITEM_KINDS:
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
            return replace(s, history=ReadOnlyList([*s.history, *items]), turn_open=True,
                           open_calls=ReadOnlyDict(calls), started_calls=frozenset(started))
        if k == TOOL_STARTED:
            ids = {str(c) for c in data.get("call_ids") or ()}
            return replace(s, turn_open=True, started_calls=s.started_calls | ids)
        if k == TURN_END:
            return replace(s, turn_count=int(data.get("turn", s.turn_count + 1)), turn_open=False,
                           open_calls=_EMPTY, started_calls=frozenset())
        if k == OUTCOME:
            paused = data.get("status") == "paused"
            return replace(
                s,
                last_outcome=freeze(dict(data)),
                last_run_interrupted=bool(data.get("interrupted")),
                turn_open=False,
                # A paused run keeps its unanswered calls: they are answered on resume.
                open_calls=s.open_calls if paused else _EMPTY,
                started_calls=s.started_calls if paused else frozenset(),
            )
        if k == CACHE_LOCKED:
            return replace(s, locked_prefix_len=int(data.get("prefix_len", 0)))
        if k == CACHE_UNLOCKED:
            return replace(s, locked_prefix_len=None)
        if k == CONFIG_CHANGED:
            return replace(s, config=freeze(dict(data.get("config") or {})))
        if k == SUMMARY and isinstance(data.get("state"), Mapping):
            # Everything is the summary's: the state before it is not needed (restarts).
            return replace(SessionState.from_seed(data.get("state")), head_hash=s.head_hash, seed_len=0,
                           summary=SummarySpan.from_entry(entry))
        return s

    def restarts(self, entry: Entry) -> bool:
        """Whether the state after ``entry`` depends on no entry before it (a summary):
        ``Log.open`` and so a restore read the chain back only to the newest one."""
        return entry.kind == SUMMARY and isinstance(entry.data, Mapping) \
            and isinstance(entry.data.get("state"), Mapping)

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
    from s3log.reducer import replay

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


def repair_records(state: SessionState) -> list[tuple[str, dict[str, Any]]]:
    """The records that close a turn a stopped worker left open (none if nothing is open)."""
    if not state.needs_repair:
        return []
    fixes = repair_items(state)
    out: list[tuple[str, dict[str, Any]]] = []
    if fixes:
        out.append((TOOL_RESULTS, {"items": fixes, "synthetic": True}))
    out.append((OUTCOME, {"status": "error", "message": "worker stopped mid-turn", "interrupted": True}))
    out.append((TURN_END, {"turn": state.turn_count + 1, "interrupted": True}))
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
