"""Drop-in persistence for agent frameworks (LangGraph, OpenAI Agents SDK)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, overload
from urllib.parse import parse_qs, urlsplit

from ..errors import S3LogError
from ..layout import DEFAULT_PREFIX

if TYPE_CHECKING:
    from ..aio import AsyncLog
    from ..log import Log

__all__ = ["IntegrationError"]

_URL_PARAMS = ("endpoint", "region")


class IntegrationError(S3LogError, ValueError):
    """An integration was given something it cannot use (a bad URL, serializer, log or type)."""


@overload
def _log_from_url(url: str, async_: Literal[False] = False) -> Log: ...


@overload
def _log_from_url(url: str, async_: Literal[True]) -> AsyncLog: ...


def _log_from_url(url: str, async_: bool = False) -> Log | AsyncLog:
    """A :class:`~s3log.Log` (or :class:`~s3log.AsyncLog`) for ``s3://bucket/prefix``.

    Query parameters: ``endpoint`` (an S3-compatible endpoint URL) and ``region``.
    Without ``endpoint`` the standard AWS configuration applies (``AWS_ENDPOINT_URL``
    included). Without a prefix the default prefix is used. The caller owns the log:
    close it (``log.close()``, or ``await log.store.aclose()`` for the async one).
    """
    if not isinstance(url, str):
        raise IntegrationError(f"an s3:// URL must be a string, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme != "s3":
        raise IntegrationError(f"URL {url!r}: the scheme must be s3:// (s3://bucket/prefix?endpoint=...)")
    if not parts.netloc or "@" in parts.netloc or ":" in parts.netloc:
        raise IntegrationError(f"URL {url!r}: expected a bucket name after s3://")
    if parts.fragment:
        raise IntegrationError(f"URL {url!r}: a fragment (#...) has no meaning here")
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise IntegrationError(f"URL {url!r}: malformed query: {exc}") from None
    unknown = sorted(set(query) - set(_URL_PARAMS))
    if unknown:
        raise IntegrationError(f"URL {url!r}: unknown parameter(s) {', '.join(unknown)}; known: endpoint, region")
    params: dict[str, str] = {}
    for key, values in query.items():
        if len(values) != 1 or not values[0]:
            raise IntegrationError(f"URL {url!r}: parameter {key} must be given once, with a value")
        params[key] = values[0]
    prefix = parts.path.strip("/") or DEFAULT_PREFIX
    if async_:
        from ..aio import AsyncLog
        from ..store.aio_s3 import AsyncS3Store

        return AsyncLog(AsyncS3Store(parts.netloc, endpoint_url=params.get("endpoint"),
                                     region_name=params.get("region")), prefix=prefix)
    from ..log import Log
    from ..store.s3 import S3Store

    return Log(S3Store(parts.netloc, endpoint_url=params.get("endpoint"), region_name=params.get("region")),
               prefix=prefix)
