"""Drop-in persistence for agent frameworks (LangGraph, OpenAI Agents SDK)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from s3log.errors import S3LogError

if TYPE_CHECKING:
    from s3log.aio import AsyncLog
    from s3log.log import Log

__all__ = ["IntegrationError", "caller_id"]


class IntegrationError(S3LogError, ValueError):
    """An integration was given something it cannot use (a bad URL, serializer, log or type)."""


@overload
def _log_from_url(url: str, async_: Literal[False] = False) -> Log: ...


@overload
def _log_from_url(url: str, async_: Literal[True]) -> AsyncLog: ...


def _log_from_url(url: str, async_: bool = False) -> Log | AsyncLog:
    """A :class:`~s3log.Log` (or :class:`~s3log.AsyncLog`) for ``s3://bucket/prefix``.

    The URL is :func:`s3log.open_log`'s (``endpoint``, ``region``, ``store`` query
    parameters; the path is the prefix, taken literally). A URL that cannot be used is
    an :class:`IntegrationError` naming it. The caller owns the log: close it.
    """
    from s3log.urls import InvalidURLError, open_async_log, open_log

    if isinstance(url, str) and not url.startswith("s3://"):
        raise IntegrationError(f"URL {url!r}: the scheme must be s3:// (s3://bucket/prefix?endpoint=...)")
    try:
        return open_async_log(url) if async_ else open_log(url)
    except InvalidURLError as exc:
        raise IntegrationError(str(exc)) from None


def caller_id(meta: Mapping[str, Any]) -> dict[str, str] | None:
    """The id the application gave an integration for this session, from the session's meta.

    The integrations store a session under an id of their own (``oa-<hash>`` for an
    OpenAI Agents session id that is not a safe s3log id, ``lg-<thread>-<ns>`` for a
    LangGraph thread and namespace) and keep the caller's id in the meta they create
    it with. Returns ``{"integration": "openai-agents", "session_id": ...}``,
    ``{"integration": "langgraph", "thread_id": ..., "checkpoint_ns": ...}``, or None for
    a session no integration made.
    """
    oa = meta.get("openai_agents")
    if isinstance(oa, Mapping) and isinstance(oa.get("session_id"), str):
        return {"integration": "openai-agents", "session_id": oa["session_id"]}
    lg = meta.get("langgraph")
    if isinstance(lg, Mapping) and isinstance(lg.get("thread_id"), str):
        ns = lg.get("checkpoint_ns")
        return {"integration": "langgraph", "thread_id": lg["thread_id"],
                "checkpoint_ns": ns if isinstance(ns, str) else ""}
    return None
