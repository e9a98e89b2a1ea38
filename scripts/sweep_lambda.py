"""Scheduled retention sweep as a Lambda handler: expire idle sessions, then gc.

Configured by the environment (terraform/examples/lambda-worker sets it):

- ``S3LOG_BUCKET`` (required), ``S3LOG_PREFIX`` (default ``s3log``);
- ``S3LOG_IDLE_DAYS`` (default 30): sessions with no commit for this long are expired
  (their head is deleted with If-Match; gc deletes their segments);
- ``S3LOG_GC_OLDER_THAN_MINUTES`` (default 60): gc's grace period;
- ``S3LOG_DRY_RUN`` (``1`` to report without deleting).

Needs the s3log-bucket module's sweep policy: LIST the session folders and the activity
index, GET heads, delete under ``{prefix}/sessions/`` (a head only with If-Match) and
``{prefix}/activity/``. It writes no session object: its only writes are the
precondition probe's, before anything is deleted (conditional PUTs and If-Match DELETEs
of its own keys under ``{prefix}/sessions/_probe/``), which refuses a store that ignores
conditions, on PUT or DELETE (docs/decisions/0034).
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta
from typing import Any

import s3log
from s3log._format.layout import DEFAULT_PREFIX

# One Log (one boto3 client and connection pool) per container: warm invocations reuse it.
_LOG: s3log.Log | None = None


def _log() -> s3log.Log:
    global _LOG
    if _LOG is None:
        store = s3log.S3Store(bucket=os.environ["S3LOG_BUCKET"])
        _LOG = s3log.Log(store, prefix=os.environ.get("S3LOG_PREFIX", DEFAULT_PREFIX))
    return _LOG


class SweepConfigError(s3log.S3LogError, ValueError):
    """An environment setting of the sweep is not usable; raised before anything is deleted."""


class SweepIncomplete(s3log.S3LogError, RuntimeError):
    """gc could not delete some objects (access denied, a fault past the retries): the
    invocation fails, naming them, so a scheduled sweep does not look done."""


def _int_setting(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SweepConfigError(f"{name} must be a whole number, got {raw!r}") from None
    # 0 would expire every session / collect segments of commits still in flight.
    if value < 1:
        raise SweepConfigError(f"{name} must be at least 1, got {value}")
    return value


def _summary(report: Any) -> Any:
    """A report as a small JSON-able dict: lists of keys or ids become their counts."""
    if not dataclasses.is_dataclass(report) or isinstance(report, type):
        return report
    out: dict[str, Any] = {}
    for f in dataclasses.fields(report):
        value = getattr(report, f.name)
        out[f.name] = len(value) if isinstance(value, list | tuple | set | frozenset | dict) else value
    return out


def handler(event: dict[str, Any] | None = None, context: Any = None) -> dict[str, Any]:
    """Lambda entry point (the event is ignored): expire, then gc; return what each did."""
    idle_days = _int_setting("S3LOG_IDLE_DAYS", 30)
    grace_minutes = _int_setting("S3LOG_GC_OLDER_THAN_MINUTES", 60)
    dry_run_raw = os.environ.get("S3LOG_DRY_RUN", "0")
    if dry_run_raw not in ("0", "1"):
        raise SweepConfigError(f"S3LOG_DRY_RUN must be 0 or 1, got {dry_run_raw!r}")
    dry_run = dry_run_raw == "1"
    log = _log()
    expired: Any = None
    # Log.expire is newer than Log.gc: on an s3log without it the sweep still collects.
    expire = getattr(log, "expire", None)
    if expire is not None:
        expired = _summary(expire(idle_for=timedelta(days=idle_days), dry_run=dry_run))
    collected = log.gc(older_than_ms=grace_minutes * 60_000, dry_run=dry_run)
    failed = getattr(collected, "failed", None) or {}
    if failed:
        shown = "; ".join(f"{k}: {why}" for k, why in list(failed.items())[:10])
        raise SweepIncomplete(f"gc could not delete {len(failed)} objects ({shown})")
    return {"expire": expired, "gc": _summary(collected), "dry_run": dry_run}
