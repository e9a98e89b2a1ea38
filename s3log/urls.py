"""Open a log from one URL: ``s3log.open_log("s3://bucket/prefix?endpoint=...")``.

A URL names where the sessions are, so a configuration file, an environment
variable or a command line needs one string instead of a store class and its
arguments::

    s3://BUCKET[/PREFIX][?endpoint=URL][&region=NAME][&store=boto3|obstore]
    az://CONTAINER[/PREFIX][?account=NAME][&endpoint=URL]
    memory://[PREFIX]

- ``BUCKET`` is the S3 bucket. ``PREFIX`` is the key prefix, taken literally: the
  sessions are under ``PREFIX/sessions/``, and ``s3://BUCKET`` (no path) is the
  bucket's root. ``S3Store(bucket)`` and the command line default to the prefix
  ``s3log``, so their sessions are at ``s3://BUCKET/s3log``.
- ``endpoint``: an S3-compatible endpoint (``http://127.0.0.1:9000`` for a local
  server, MinIO...). Without it boto3's own resolution applies, ``AWS_ENDPOINT_URL``
  included.
- ``region``: the region to sign for (default: boto3's, ``AWS_REGION`` etc.).
- ``store``: ``boto3`` (the default: :class:`~s3log.S3Store` /
  :class:`~s3log.AsyncS3Store`) or ``obstore`` (:class:`~s3log.ObstoreStore` /
  :class:`~s3log.AsyncObstoreStore`, the ``fast`` extra).
- ``az://`` is an Azure Blob Storage container (:class:`~s3log.store.azure.AzureStore`,
  through obstore: the ``fast`` extra). ``account`` is the storage account (default:
  ``AZURE_STORAGE_ACCOUNT_NAME``); ``endpoint`` replaces
  ``https://ACCOUNT.blob.core.windows.net`` (an emulator's URL, say).
- ``memory://`` is a new, empty in-memory store (for tests); what follows ``//``
  is the prefix.

Credentials never go in the URL: they come from the standard AWS chain
(``AWS_ACCESS_KEY_ID``, profiles, instance roles), or for Azure the
``AZURE_STORAGE_*`` variables obstore reads (``AZURE_STORAGE_ACCOUNT_KEY``, a SAS...). A URL that cannot be used raises
:class:`InvalidURLError` (an :class:`~s3log.S3LogError` and a ``ValueError``) naming
the URL and what is wrong with it, before any request is made.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from s3log.errors import S3LogError
from s3log.store._checks import BUCKET_NAME

if TYPE_CHECKING:
    from s3log.aio import AsyncLog
    from s3log.config import LogConfig
    from s3log.log import Log
    from s3log.reducer import Reducer

__all__ = ["InvalidURLError", "LogURL", "open_async_log", "open_log", "parse_url"]

SCHEMES = ("s3", "az", "memory")
STORES = ("boto3", "obstore")
#: The parameters each scheme takes.
PARAMS = {"s3": ("endpoint", "region", "store"), "az": ("account", "endpoint"), "memory": ()}

_REGION = re.compile(r"[a-z0-9-]{1,64}")
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")
_ACCOUNT = re.compile(r"[a-z0-9]{3,24}")


class InvalidURLError(S3LogError, ValueError):
    """A log URL cannot be used: the message names the URL and what is wrong."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"invalid s3log URL {url!r}: {reason}")


@dataclass(frozen=True)
class LogURL:
    """A parsed log URL: which store to build and which prefix the log uses."""

    scheme: str
    bucket: str | None
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    store: str = "boto3"
    #: The Azure storage account (``az://`` only; None: obstore's default).
    account: str | None = None


def _redact(url: str) -> str:
    """The URL with any ``user:password@`` removed, so an error message leaks no secret."""
    return re.sub(r"(//)[^/@?#]*@", r"\1***@", url)


def parse_url(url: str) -> LogURL:
    """Parse and check a log URL (see the module docstring); raise :class:`InvalidURLError`."""
    if not isinstance(url, str):
        raise InvalidURLError(repr(url), f"expected a string, got {type(url).__name__}")
    shown = _redact(url)

    def bad(reason: str) -> InvalidURLError:
        return InvalidURLError(shown, reason)

    if not url.strip():
        raise bad("the URL is empty")
    if "://" not in url:
        raise bad(f"no scheme: expected one of {', '.join(s + '://' for s in SCHEMES)}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(str(exc)) from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise bad(f"unknown scheme {parts.scheme!r}: expected one of {', '.join(s + '://' for s in SCHEMES)}")
    if parts.fragment:
        raise bad(f"a fragment (#{parts.fragment}) has no meaning here")
    if "@" in parts.netloc:
        raise bad("credentials do not belong in the URL: use the AWS_* variables or a profile")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise bad(f"malformed query string: {exc}") from None
    params: dict[str, str] = {}
    for key, value in pairs:
        if key not in PARAMS[scheme]:
            if not PARAMS[scheme]:
                raise bad(f"{scheme}:// takes no parameters, got {key!r}")
            raise bad(f"unknown parameter {key!r}: expected {', '.join(PARAMS[scheme])}")
        if key in params:
            raise bad(f"parameter {key!r} is given twice")
        if not value:
            raise bad(f"parameter {key!r} is empty")
        params[key] = value

    if scheme == "memory":
        return LogURL("memory", None, unquote(parts.netloc + parts.path).strip("/"))
    endpoint = params.get("endpoint")
    if endpoint is not None:
        try:
            ep = urlsplit(endpoint)
            _ = ep.port  # a port that is not a number raises here
        except ValueError as exc:  # an unclosed [IPv6 address, say
            raise bad(f"endpoint {endpoint!r} is not a URL: {exc}") from None
        if ep.scheme not in ("http", "https") or not ep.hostname:
            raise bad(f"endpoint {endpoint!r} is not an http:// or https:// URL")
    if scheme == "az":
        container = parts.netloc
        if not _CONTAINER.fullmatch(container):
            raise bad(f"{container!r} is not an Azure container name: expected az://CONTAINER[/PREFIX], 3 to 63 "
                      "lowercase letters, digits and single hyphens")
        account = params.get("account")
        if account is not None and not _ACCOUNT.fullmatch(account):
            raise bad(f"account {account!r} is not an Azure storage account name (3 to 24 lowercase letters "
                      "and digits)")
        return LogURL("az", container, unquote(parts.path).strip("/"), endpoint, store="obstore", account=account)

    bucket = parts.netloc
    if not bucket:
        raise bad("no bucket: expected s3://BUCKET[/PREFIX]")
    if ":" in bucket:
        raise bad(f"{bucket!r} is not a bucket name (a port belongs in ?endpoint=)")
    if not BUCKET_NAME.fullmatch(bucket):
        raise bad(f"{bucket!r} is not a valid bucket name")
    region = params.get("region")
    if region is not None and not _REGION.fullmatch(region):
        raise bad(f"region {region!r} is not a region name")
    store = params.get("store", "boto3")
    if store not in STORES:
        raise bad(f"store {store!r} is not one of {', '.join(STORES)}")
    return LogURL("s3", bucket, unquote(parts.path).strip("/"), endpoint, region, store)


def _store_kwargs(spec: LogURL) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if spec.endpoint:
        kwargs["endpoint_url"] = spec.endpoint
    if spec.region:
        kwargs["region_name"] = spec.region
    return kwargs


def open_log(url: str, *, log_config: LogConfig | None = None, reducer: Reducer[Any] | None = None) -> Log:
    """A :class:`~s3log.Log` on the store and prefix ``url`` names.

    ``log_config`` and ``reducer`` are passed to the Log. Raises
    :class:`InvalidURLError` for a URL that cannot be used.
    """
    spec = parse_url(url)
    from s3log.log import Log

    store = _store_for(spec, asynchronous=False)
    # The prefix belongs to the Log, not to the store.
    return Log(store, prefix=spec.prefix, config=log_config, reducer=reducer)


def open_async_log(
    url: str, *, log_config: LogConfig | None = None, reducer: Reducer[Any] | None = None
) -> AsyncLog:
    """An :class:`~s3log.AsyncLog` on the store and prefix ``url`` names (see :func:`open_log`).

    The boto3 store is :class:`~s3log.AsyncS3Store` (the ``async`` extra); close it
    with ``await log.store.aclose()``.
    """
    spec = parse_url(url)
    from s3log.aio import AsyncLog

    store = _store_for(spec, asynchronous=True)
    return AsyncLog(store, prefix=spec.prefix, config=log_config, reducer=reducer)


#: The store class of each kind of URL, blocking and awaited: (module, class) pairs,
#: imported only when used (each needs its own extra).
_STORES = {
    "memory": (("s3log.store.memory", "MemoryStore"), ("s3log.store.memory", "AsyncMemoryStore")),
    "az": (("s3log.store.azure", "AzureStore"), ("s3log.store.azure", "AsyncAzureStore")),
    "obstore": (("s3log.store.obstore", "ObstoreStore"), ("s3log.store.obstore", "AsyncObstoreStore")),
    "s3": (("s3log.store.s3", "S3Store"), ("s3log.store.aio_s3", "AsyncS3Store")),
}


def _store_for(spec: LogURL, *, asynchronous: bool) -> Any:
    """The store ``spec`` names, blocking or awaited."""
    kind = spec.scheme if spec.scheme in ("memory", "az") else "obstore" if spec.store == "obstore" else "s3"
    module, name = _STORES[kind][asynchronous]
    cls = getattr(importlib.import_module(module), name)
    if kind == "memory":
        return cls()
    if kind == "az":
        return cls(str(spec.bucket), account=spec.account, endpoint=spec.endpoint)
    return cls(str(spec.bucket), **_store_kwargs(spec))
