"""Times and durations as milliseconds: the one parser behind every ``since`` and ``until``.

The command line (``--since 7d``, ``--until 2026-01-31``), retention (``active_sessions``)
and analytics (``scan(since=...)``) take the same forms with the same rules:

- ms since the epoch (an ``int``, or a finite ``float``);
- a ``datetime``; a naive one is UTC;
- an ISO-8601 date or time string, parsed by dateutil's ``isoparse`` (python-dateutil
  comes with botocore, so it is always installed): ``2026-01-31``,
  ``2026-01-31T10:00Z``, ``2026-01-31T12:00+02:00``; no zone is UTC;
- where the caller has a clock (``now_ms``): a ``timedelta`` or a duration string
  (``90s``, ``15m``, ``1h30m``, ``7d``) back from now.

Anything else, or a time outside what an entry's ``ts`` can hold, is an
:class:`~s3log.InvalidArgumentError` naming the argument.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from s3log._format.entries import MAX_TS
from s3log.errors import InvalidArgumentError

_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

#: The longest duration taken: 100 years (a time that long ago is still a date).
MAX_DURATION_MS = 36_500 * _UNIT_MS["d"]


def duration_ms(text: str, name: str = "duration") -> int:
    """``90s``, ``15m``, ``1h``, ``2d`` (or a sum like ``1h30m``) in ms, at most 100 years."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise InvalidArgumentError(name, f"not a duration: {text!r} (try 90s, 15m, 1h, 2d)")
    ms = sum(int(n) * _UNIT_MS[u] for n, u in parts)
    if ms > MAX_DURATION_MS:
        raise InvalidArgumentError(name, f"too long: {text!r} (at most 36500d, 100 years)")
    return ms


def _from_datetime(value: datetime, shown: str, name: str) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.timestamp() * 1000
    except (OverflowError, ValueError, OSError):
        raise InvalidArgumentError(name, f"a time out of range: {shown}") from None


def _from_text(text: str, shown: str, name: str, now_ms: int | None) -> float:
    # Imported here: dateutil's parser costs ~10 ms of every cold start that parses no time.
    from dateutil.parser import isoparse

    try:
        return _from_datetime(isoparse(text), shown, name)
    except (ValueError, OverflowError):
        pass
    if now_ms is not None and _DURATION.match(text):
        return now_ms - duration_ms(text, name)
    ago = " or a duration ago (7d, 12h)" if now_ms is not None else ""
    raise InvalidArgumentError(name, f"not an ISO date or time{ago}: {shown}")


def to_ms(value: object, name: str = "time", *, now_ms: int | None = None) -> int:
    """``value`` as ms since the epoch (see the module's forms), checked to lie in what
    an entry's ``ts`` can hold; :class:`~s3log.InvalidArgumentError` naming ``name`` otherwise.

    ``now_ms``: the caller's clock (``cfg.env.now_ms()``), for a ``timedelta`` or a
    duration string back from now; without it those are refused.
    """
    shown = repr(value)
    if isinstance(value, str):
        value = _from_text(value, shown, name, now_ms)
    elif isinstance(value, datetime):
        value = _from_datetime(value, shown, name)
    elif isinstance(value, timedelta) and now_ms is not None:
        value = now_ms - value / timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int | float):
        ago = ", a timedelta" if now_ms is not None else ""
        raise InvalidArgumentError(
            name, f"a time must be ms since the epoch, a datetime{ago} or an ISO string, not {shown}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(name, f"a time must be finite, not {shown}")
    if not 0 <= value <= MAX_TS + 1:
        raise InvalidArgumentError(
            name, f"{shown} is out of range: ms since the epoch from 0 to {MAX_TS + 1} "
                  "(1970-01-01 to 294247-01-10 UTC)")
    return int(value)
