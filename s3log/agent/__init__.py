"""Agent sessions: an LLM worker's conversation, persisted, restored, forked and repaired.

An :class:`AgentSession` (blocking, over :class:`~s3log.Log`) or an
:class:`AsyncAgentSession` (asyncio, over :class:`~s3log.AsyncLog`) records what an
agent loop does as s3log entries of the kinds below, buffers them (write-behind) and
commits at turn end. :func:`collect_state` folds the entries back into a read-only
:class:`SessionState`; it is also the reducer the core uses to seed forks, so an
automatic fork carries the agent's whole state.

Items are plain CBOR-able dicts, so any client's messages fit. Two tool-call shapes are
understood for crash repair: Responses-style items (``{"type": "function_call",
"call_id": ...}`` answered by ``{"type": "function_call_output", "call_id": ...}``)
and Chat-style messages (``{"role": "assistant", "tool_calls": [{"id": ...}]}``
answered by ``{"role": "tool", "tool_call_id": ...}``).

The package: :mod:`~s3log.agent.state` (kinds, state, fold), :mod:`~s3log.agent.core`
(every decision, as I/O-free procedures of calls of the log's public verbs),
:mod:`~s3log.agent.args` (argument checks), :mod:`~s3log.agent.summary` (summaries
that keep history: the span checks), :mod:`~s3log.agent.errors`,
:mod:`~s3log.agent.registry` (live sessions, drained at close and exit), and
:mod:`~s3log.agent.sync` and :mod:`~s3log.agent.aio` (the shells that perform them,
through :mod:`s3log._upper`).
"""

from __future__ import annotations

from s3log.agent.aio import AsyncAgentSession, aclose, adrain
from s3log.agent.core import ForkCallback
from s3log.agent.errors import (
    AgentArgumentError,
    AgentItemError,
    RecordsLostWarning,
    SessionBusy,
    SessionScopeError,
    SummarySpanError,
)
from s3log.agent.state import (
    ASSISTANT_ITEMS,
    CACHE_LOCKED,
    CACHE_UNLOCKED,
    CONFIG_CHANGED,
    HOOK_ITEMS,
    KINDS,
    NOT_RUN,
    OUTCOME,
    REPAIRED,
    SESSION_START,
    STATUSES,
    SUMMARY,
    TOOL_RESULTS,
    TOOL_STARTED,
    TURN_END,
    UNKNOWN_OUTCOME,
    USER_INPUT,
    AgentReducer,
    ReadOnlyDict,
    ReadOnlyList,
    SessionState,
    Status,
    SummarySpan,
    collect_state,
    freeze,
    group_items,
    repair_items,
    repair_records,
    thaw,
)
from s3log.agent.sync import AgentSession, close, drain

__all__ = [
    "ASSISTANT_ITEMS", "CACHE_LOCKED", "CACHE_UNLOCKED", "CONFIG_CHANGED", "HOOK_ITEMS", "KINDS", "NOT_RUN",
    "OUTCOME", "REPAIRED", "SESSION_START", "STATUSES", "SUMMARY", "TOOL_RESULTS", "TOOL_STARTED", "TURN_END",
    "UNKNOWN_OUTCOME", "USER_INPUT", "AgentArgumentError", "AgentItemError", "AgentReducer", "AgentSession",
    "AsyncAgentSession", "ForkCallback", "ReadOnlyDict", "ReadOnlyList", "RecordsLostWarning", "SessionBusy",
    "SessionScopeError", "SessionState", "Status", "SummarySpan", "SummarySpanError", "aclose", "adrain",
    "close", "collect_state", "drain", "freeze", "group_items", "repair_items", "repair_records", "thaw",
]
