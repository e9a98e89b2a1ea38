"""What every analytics entry point takes, checked before any request is made.

The store: an :class:`~s3log.store.base.ObjectStore`, or a log URL (``s3://bucket/prefix``)
opened with deltalake-style ``storage_options`` (:func:`open_store`, :func:`storage_kwargs`,
:func:`boto3_store`, also what :mod:`s3log.analytics.dask`'s workers open); and the
options (times, counts, session ids, kinds, a verifier) each checked into an
:class:`~s3log.InvalidArgumentError` naming it. Its own room because the scan, the
exports, the DuckDB views and the Dask frames all check the same arguments the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from s3log._format.ids import validate_session_id
from s3log._format.times import to_ms
from s3log.config import LogConfig
from s3log.encryption import Encryption
from s3log.errors import InvalidArgumentError
from s3log.signing import Verifier
from s3log.store.base import ObjectStore

# ----------------------------------------------------------------- storage_options


#: ``storage_options`` keys, as deltalake, obstore and pyarrow users write them (any case,
#: with or without ``aws_``), and the boto3 argument each sets.
_STORAGE_KEYS = {
    "endpoint": "endpoint_url", "endpoint_url": "endpoint_url", "endpoint_url_s3": "endpoint_url",
    "region": "region_name", "default_region": "region_name", "region_name": "region_name",
    "access_key_id": "aws_access_key_id", "secret_access_key": "aws_secret_access_key",
    "session_token": "aws_session_token", "token": "aws_session_token",
    "profile": "profile_name", "profile_name": "profile_name",
}
#: Accepted and needing nothing here: boto3 speaks http to an http:// endpoint as given.
_STORAGE_IGNORED = ("allow_http",)


def storage_kwargs(storage_options: object) -> dict[str, str]:
    """``storage_options`` (``{"AWS_ENDPOINT_URL": ..., "AWS_REGION": ...}``) as boto3's
    session and client arguments; an unknown key or a value that is not a string is an
    :class:`~s3log.InvalidArgumentError` naming it."""
    if not isinstance(storage_options, dict):
        raise InvalidArgumentError("storage_options", f"must be a dict of strings, not {storage_options!r}")
    out: dict[str, str] = {}
    for key, value in storage_options.items():
        name = key.lower() if isinstance(key, str) else ""
        name = name[4:] if name.startswith("aws_") else name
        if name in _STORAGE_IGNORED:
            continue
        if name not in _STORAGE_KEYS:
            known = ", ".join(sorted("AWS_" + k.upper() for k in (*_STORAGE_KEYS, *_STORAGE_IGNORED)))
            raise InvalidArgumentError("storage_options", f"unknown key {key!r}: expected one of {known}")
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError("storage_options", f"{key!r} must be a non-empty string, not {value!r}")
        out[_STORAGE_KEYS[name]] = value
    return out


def open_store(
    store: ObjectStore | str, storage_options: dict[str, str] | None = None, prefix: str | None = None
) -> tuple[ObjectStore, str | None]:
    """The store and prefix an analytics entry point reads: ``store`` itself, or the
    store a log URL (``s3://bucket/prefix``, see :mod:`s3log.urls`) names, opened with
    ``storage_options`` (endpoint, region, credentials, profile). ``prefix`` given
    wins over the URL's. Checked before any request is made."""
    if not isinstance(store, str):
        # Duck-typed, as the Log takes it (a store may lack delete_if_match); None, a
        # number or a path object fail here, naming the argument.
        if not all(callable(getattr(store, m, None)) for m in ("get", "list", "put_if_absent")):
            raise InvalidArgumentError("store", f"must be an ObjectStore or an s3:// log URL, not {store!r}")
        if storage_options is not None:
            raise InvalidArgumentError(
                "storage_options", "opens the store a URL names: pass s3://bucket/prefix instead of a store")
        return store, prefix
    from s3log.urls import parse_url

    spec = parse_url(store)
    if spec.scheme != "s3" or spec.store != "boto3":
        raise InvalidArgumentError("store", f"analytics opens s3:// URLs read with boto3, not {store!r}")
    kwargs = storage_kwargs(storage_options if storage_options is not None else {})
    if spec.endpoint:
        kwargs.setdefault("endpoint_url", spec.endpoint)
    if spec.region:
        kwargs.setdefault("region_name", spec.region)
    return boto3_store(str(spec.bucket), kwargs), spec.prefix if prefix is None else prefix


def boto3_store(bucket: str, kwargs: dict[str, str]) -> ObjectStore:
    """An :class:`~s3log.S3Store` on a client made from :func:`storage_kwargs`' arguments."""
    from s3log.store._s3common import boto3_session, client_config
    from s3log.store.s3 import S3Store

    session_keys = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token", "profile_name")
    session = boto3_session(**{k: v for k, v in kwargs.items() if k in session_keys})
    client = session.client("s3", config=client_config(),
                            **{k: v for k, v in kwargs.items() if k not in session_keys})
    return S3Store(bucket, client=client)


def _opened(store: ObjectStore | str, kwargs: dict[str, Any]) -> ObjectStore:
    """``store`` opened once (a URL with ``kwargs``' ``storage_options``): the prefix a
    URL names goes into ``kwargs``, so every scan made from them reads the same store."""
    opened, prefix = open_store(store, kwargs.pop("storage_options", None), kwargs.get("prefix"))
    if prefix is not None:
        kwargs["prefix"] = prefix
    return opened


# --------------------------------------------------------------------------- arguments


def _ms(value: int | float | datetime | str | None, name: str = "time") -> int | None:
    """``value`` (ms since the epoch, a datetime, naive as UTC, or an ISO string) in ms,
    checked (:func:`s3log._format.times.to_ms`); None stays None."""
    return None if value is None else to_ms(value, name)


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(name, f"must be a positive int, not {value!r}")
    return value


def _names(name: str, values: object, what: str) -> list[str]:
    """``values`` as a list of strings: one string, or anything not iterable, is refused."""
    if isinstance(values, str | bytes):
        raise InvalidArgumentError(name, f"must be a list of {what}, not one string ({values!r})")
    if not isinstance(values, Iterable):
        raise InvalidArgumentError(name, f"must be a list of {what}, not {values!r}")
    out = list(values)
    for v in out:
        if not isinstance(v, str):
            raise InvalidArgumentError(name, f"must be a list of {what} (strings), not one holding {v!r}")
    return out


def _session_list(sessions: object) -> list[str] | None:
    """Checked session ids (None: all of them); a bad id fails here, before anything is read."""
    if sessions is None:
        return None
    return [validate_session_id(s) for s in _names("sessions", sessions, "session ids")]


def _check_verifier(verifier: object) -> None:
    if verifier is not None and not isinstance(verifier, Verifier):
        raise InvalidArgumentError("verifier", f"must be a s3log.signing.Verifier, not {verifier!r}")


def _config(parallelism: int, verifier: Verifier | None, log_id: str | None,
            encryption: Encryption | None = None) -> LogConfig:
    # LogConfig checks log_id (InvalidArgumentError naming it) at the call, before any read.
    if encryption is not None and not isinstance(encryption, Encryption):
        raise InvalidArgumentError("encryption", f"must be a s3log.encryption.Encryption, not {encryption!r}")
    return LogConfig(max_parallel=parallelism, verifier=verifier, log_id=log_id, encryption=encryption)
