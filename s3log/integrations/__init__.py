"""Drop-in persistence for agent frameworks (LangGraph, OpenAI Agents SDK)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload

from ..errors import S3LogError

if TYPE_CHECKING:
    from ..aio import AsyncLog
    from ..log import Log

__all__ = ["IntegrationError"]


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
    from ..urls import InvalidURLError, open_async_log, open_log

    if isinstance(url, str) and not url.startswith("s3://"):
        raise IntegrationError(f"URL {url!r}: the scheme must be s3:// (s3://bucket/prefix?endpoint=...)")
    try:
        return open_async_log(url) if async_ else open_log(url)
    except InvalidURLError as exc:
        raise IntegrationError(str(exc)) from None
