"""The activity index: which sessions were committed to on which (UTC) day.

``{P}/activity/{YYYY-MM-DD}/{sid}``: a tiny create-only object written by the first
commit of a session on a day (a commit whose previous head was written on an earlier
day, or that creates the session). It is written *before* the head, alongside the
segment when the commit writes one (the same parallel round trip), so every commit
that landed on a day has its day's marker: "sessions active since T" lists the
markers of the days since T instead of every session (:mod:`s3log._protocol.retention`).

A marker that already exists is fine (another writer of the session, or an earlier
attempt of this commit, wrote it): the index only needs the key to exist. A marker
whose commit then failed only costs a reader one GET of a head that turns out idle.

That includes a marker an earlier session at the id left: a session created again
the same day (after a delete, or over an expired one's tombstone) meets it, writes
nothing and relies on it. Its bytes are the same, so no ETag tells the two apart, and
its head may land up to the landing bound after its marker PUT. ``Log.delete``
therefore deletes only the markers of days no new session at the id can commit on
(:func:`split_by_day`) and leaves the others, which name a session with no head until
``expire`` prunes their day.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from s3log._format.cbor import dumps
from s3log._format.layout import Layout
from s3log._protocol.ops import PutIfAbsent

DAY_MS = 86_400_000


def activity_prefix(layout: Layout) -> str:
    """``{P}/activity/``: where the day folders of the index live."""
    return f"{layout.prefix}/activity/" if layout.prefix else "activity/"


def day_of(ms: int) -> str:
    """The UTC date of a time in ms, as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def days_between(lo_ms: int, hi_ms: int) -> list[str]:
    """Every UTC day from the day of ``lo_ms`` to the day of ``hi_ms``, inclusive."""
    first = date.fromisoformat(day_of(lo_ms))
    last = date.fromisoformat(day_of(hi_ms))
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def day_dir(layout: Layout, day: str) -> str:
    """``{P}/activity/{day}/``."""
    return f"{activity_prefix(layout)}{day}/"


def marker_key(layout: Layout, day: str, session: str) -> str:
    """``{P}/activity/{day}/{sid}``."""
    return day_dir(layout, day) + session


#: Days of markers :func:`markers_of` names for one session: older ones are pruned by expire.
MAX_MARKER_DAYS = 400


def markers_of(layout: Layout, session: str, created_ms: int, updated_ms: int) -> list[str]:
    """The marker keys a session may have: one per day from its creation to its last commit.

    Deleting a missing key succeeds (and DELETE requests are free on S3), so deleting a
    session deletes all of these without listing the index.
    """
    days = days_between(max(created_ms, updated_ms - MAX_MARKER_DAYS * DAY_MS), max(created_ms, updated_ms))
    return [marker_key(layout, d, session) for d in days]


def split_by_day(keys: list[str], first_day_ms: int) -> tuple[list[str], list[str]]:
    """Marker keys of one session (:func:`markers_of`) as (those of the day of
    ``first_day_ms`` or later, those of earlier days)."""
    first = day_of(first_day_ms)
    # {P}/activity/{day}/{sid}: a session id holds no "/".
    late = [k for k in keys if k.rsplit("/", 2)[-2] >= first]
    return late, [k for k in keys if k.rsplit("/", 2)[-2] < first]


def marker_for(layout: Layout, session: str, creating: bool, previous_ms: int, now_ms: int) -> PutIfAbsent | None:
    """The marker a commit at ``now_ms`` writes before its head, or None.

    ``creating``: the commit stores the session's first head; ``previous_ms``: when the
    head it replaces was written. Same-day commits write nothing extra. The body is
    the same for every writer of the session that day, so a repeat confirms as ours.
    """
    # Unix time has no leap seconds: a UTC day is exactly DAY_MS of it, so the common
    # case (same day) is one integer division, not two date formattings per commit.
    if not creating and previous_ms // DAY_MS == now_ms // DAY_MS:
        return None
    day = day_of(now_ms)
    return PutIfAbsent(marker_key(layout, day, session), dumps({"v": 1, "session": session, "day": day}))
