"""The argument checks of agent sessions: each refuses a malformed argument with an
error naming it, before anything is read or written.

Their own room: both shells and the procedures of :mod:`s3log.agent.core` check with
them, and they hold no decision of their own beyond what an argument may be.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from s3log.agent.errors import AgentArgumentError, AgentItemError, SessionScopeError
from s3log.agent.state import OUTCOME, STATUSES, TOOL_STARTED
from s3log.errors import InvalidEntryError


def items_arg(
    kind: str, value: Any, *, text: bool = False, session: str | None = None, name: str = "items",
) -> list[dict[str, Any]]:
    """The ``items`` argument of a recording verb as a list of plain dicts.

    One message dict or an iterable of them; a string too when ``text`` (it becomes
    one user message). Each item is checked by :func:`check_item`. Anything else is an
    :class:`AgentItemError` naming the argument (``name``).
    """
    if isinstance(value, str):
        if text:
            return [{"role": "user", "content": value}]
        raise AgentItemError(kind, f"argument {name!r} must be a message dict or a list of them, not a string",
                             session=session)
    if isinstance(value, Mapping):
        return [check_item(kind, value, repr(name), session)]
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        allowed = "a string, a message dict or a list of message dicts" if text else "a message dict or a list of them"
        raise AgentItemError(kind, f"argument {name!r} must be {allowed}, not {type(value).__name__}",
                             session=session)
    return [check_item(kind, item, f"{name!r}[{i}]", session) for i, item in enumerate(value)]


#: Fields of an item the agent state reads (roles group a turn's items, the others are
#: tool calls and their results: docs/agent.md): a string where present (None = absent).
_TEXT_FIELDS = ("role", "type", "call_id", "tool_call_id")


def check_item(kind: str, item: object, where: str, session: str | None) -> dict[str, Any]:
    """One history item as a plain dict: a message dict (string keys, as JSON has) whose
    fields the state reads have the shapes docs/agent.md gives them.

    Stored as given, ``{1: "x"}`` came back from the state with an integer key (a model
    client's JSON turns it into "1"), and a call id such as 7 or ``["a"]`` was matched
    by its text, so a restore answered a call the model never made.
    """
    if not isinstance(item, Mapping):
        raise AgentItemError(kind, f"argument {where} must be a message dict, not {type(item).__name__}",
                             session=session)
    for key in item:
        if not isinstance(key, str):
            raise AgentItemError(kind, f"argument {where} must have string keys (a message dict), "
                                 f"not {key!r}", session=session)
    for field in _TEXT_FIELDS:
        value = item.get(field)
        if value is not None and not isinstance(value, str):
            raise AgentItemError(kind, f"argument {where}[{field!r}] must be a string, not {value!r}",
                                 session=session)
    calls = item.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, (list, tuple)):
            raise AgentItemError(kind, f"argument {where}['tool_calls'] must be a list of tool calls, "
                                 f"not {type(calls).__name__}", session=session)
        for j, call in enumerate(calls):
            if not isinstance(call, Mapping) or any(not isinstance(k, str) for k in call):
                raise AgentItemError(kind, f"argument {where}['tool_calls'][{j}] must be a tool call dict "
                                     f"(string keys), not {call!r}", session=session)
            call_id = call.get("id")
            if call_id is not None and not isinstance(call_id, str):
                raise AgentItemError(kind, f"argument {where}['tool_calls'][{j}]['id'] must be a string, "
                                     f"not {call_id!r}", session=session)
    return dict(item)


def call_ids_arg(value: Any, *, session: str | None = None) -> list[str]:
    """The ``call_ids`` argument of ``tool_started``: one id or an iterable of ids."""
    if not isinstance(value, Iterable) or isinstance(value, (bytes, bytearray, Mapping)):
        raise AgentItemError(TOOL_STARTED, f"argument 'call_ids' must be a call id or a list of them, "
                             f"not {type(value).__name__}", session=session)
    out = [value] if isinstance(value, str) else list(value)
    for i, c in enumerate(out):
        if not isinstance(c, str):
            raise AgentItemError(TOOL_STARTED, f"argument 'call_ids'[{i}] must be a string, "
                                 f"not {type(c).__name__}", session=session)
        if not c:
            # A result is matched to its call by id: an empty one matches no call.
            raise AgentItemError(TOOL_STARTED, f"argument 'call_ids'[{i}] is empty: a call id names a call",
                                 session=session)
    return out


def log_arg(log: object, expected: type) -> None:
    """Refuse a ``log`` that is not of the ``expected`` class (an :class:`~s3log.Log` for
    an agent session, an :class:`~s3log.AsyncLog` for an async one): a bucket name, a
    store or the other kind of log, before anything is read or written."""
    if not isinstance(log, expected):
        raise AgentArgumentError(f"argument 'log' must be an s3log.{expected.__name__}, not "
                                 f"{type(log).__name__} {log!r:.60}")



SESSION_OPTIONS = frozenset({"max_buffer_entries", "max_buffer_bytes", "max_delay", "on_fork", "owner", "lease_ttl"})


def default_owner() -> str:
    """This process's worker id: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


#: The longest ``lease_ttl`` (seconds, about 31 years): a lease's ``expires_at`` (ms)
#: then stays far inside a 64-bit integer, which every reader of a head can decode.
MAX_LEASE_TTL = 10**9


def options_arg(options: Mapping[str, Any]) -> None:
    """Refuse unknown or malformed session options before anything is read or written (a restore may repair)."""
    unknown = sorted(set(options) - SESSION_OPTIONS)
    if unknown:
        raise AgentArgumentError(f"unknown agent session option(s) {unknown}; known: {sorted(SESSION_OPTIONS)}")
    session_args(**options)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def session_args(
    *,
    max_buffer_entries: Any = 64,
    max_buffer_bytes: Any = 256 * 1024,
    max_delay: Any = 2.0,
    on_fork: Any = None,
    owner: Any = None,
    lease_ttl: Any = 300.0,
) -> None:
    """Refuse a malformed session option with :class:`AgentArgumentError`.

    Checked when the session is made, before anything is read or written: a bad value
    found later (by the first record that hits the buffer limits, or the first fork)
    would fail a verb after its record was queued, or even after it was committed.
    """
    for name, value in (("max_buffer_entries", max_buffer_entries), ("max_buffer_bytes", max_buffer_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise AgentArgumentError(f"{name} must be an integer >= 0, not {value!r}")
    if not is_number(max_delay) or not max_delay >= 0:  # (NaN fails the comparison too)
        raise AgentArgumentError(f"max_delay must be a number of seconds >= 0, not {max_delay!r}")
    if on_fork is not None and not callable(on_fork):
        raise AgentArgumentError(f"on_fork must be a callable (session, info) or None, not {on_fork!r}")
    lease_args(owner, lease_ttl)


def lease_args(owner: Any, lease_ttl: Any) -> None:
    """Refuse a bad ``owner`` or ``lease_ttl`` option (checked before a restore may repair).

    ``lease_ttl`` must be at least a millisecond (the lease is recorded in whole ms) and
    finite (its expiry is an integer).
    """
    if not is_number(lease_ttl) or not 0.001 <= lease_ttl <= MAX_LEASE_TTL or int(lease_ttl * 1000) < 1:
        raise AgentArgumentError(
            f"lease_ttl must be a number of seconds from 0.001 to {MAX_LEASE_TTL}, not {lease_ttl!r}")
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise AgentArgumentError(f"owner must be a non-empty string, not {owner!r}")


def labels_arg(labels: Any) -> dict[str, Any] | None:
    """A ``labels`` scope argument: None (no scope) or a mapping of label names to values."""
    if labels is None:
        return None
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) for k in labels):
        raise AgentArgumentError(f"labels must be a mapping of label names (str) to values, not {labels!r}")
    return dict(labels)


def check_scope(session: str, meta: Mapping[str, Any], labels: Mapping[str, Any] | None) -> None:
    """Refuse a session whose header labels differ from ``labels`` (each given label must match)."""
    if labels is None:
        return
    found = meta.get("labels")
    found = found if isinstance(found, Mapping) else {}
    for name, expected in labels.items():
        if name not in found:
            raise SessionScopeError(session, name, expected, None, missing=True)
        if found[name] != expected:
            raise SessionScopeError(session, name, expected, found[name])


def in_scope(meta: Mapping[str, Any], labels: Mapping[str, Any] | None) -> bool:
    """Whether a header's labels match ``labels``."""
    try:
        check_scope("", meta, labels)
    except SessionScopeError:
        return False
    return True


def header(
    *,
    meta: Mapping[str, Any] | None,
    labels: Mapping[str, Any] | None,
    delegation_depth: int,
    parent_session: str | None,
) -> dict[str, Any]:
    """The header of a new agent session."""
    if meta is not None and not isinstance(meta, Mapping):
        raise AgentArgumentError(f"meta must be a mapping, not {meta!r}")
    if not isinstance(delegation_depth, int) or isinstance(delegation_depth, bool) or delegation_depth < 0:
        raise AgentArgumentError(f"delegation_depth must be an integer >= 0, not {delegation_depth!r}")
    if parent_session is not None and (not isinstance(parent_session, str) or not parent_session):
        raise AgentArgumentError(f"parent_session must be a session id (str) or None, not {parent_session!r}")
    out = dict(meta or {})
    out.setdefault("kind", "agent")
    given = labels_arg(labels)
    out["labels"] = given if given is not None else (labels_arg(out.get("labels")) or {})
    out["delegation_depth"] = delegation_depth
    out["parent"] = parent_session
    out["seed_len"] = 0
    return out


def check_status(status: str, session: str) -> None:
    """Refuse an outcome ``status`` that is not one of :data:`~s3log.agent.state.STATUSES`."""
    if status not in STATUSES:
        raise InvalidEntryError(OUTCOME, f"argument 'status' must be one of {STATUSES}, not {status!r}",
                                session=session)


def check_outcome(message: object, interrupted: object, session: str) -> None:
    """Refuse an outcome ``message`` that is not text (or None) and an ``interrupted``
    that is not a bool: the state and every reader take them as such."""
    if message is not None and not isinstance(message, str):
        raise InvalidEntryError(OUTCOME, f"argument 'message' must be text or None, not {type(message).__name__}",
                                session=session)
    if not isinstance(interrupted, bool):
        raise InvalidEntryError(OUTCOME, f"argument 'interrupted' must be a bool, not {interrupted!r}",
                                session=session)
