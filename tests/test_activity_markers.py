"""The activity index's daily markers: one per session per day, decided by integer arithmetic.
"""

from __future__ import annotations

import s3log
from s3log._protocol import activity

T0 = 1_767_225_600_000  # 2026-01-01


def test_same_day_by_integer_division_agrees_with_the_dates() -> None:
    day = activity.DAY_MS
    points = [0, 1, day - 1, day, day + 1, T0 - 1, T0, T0 + 1, T0 + day - 1, -1, -day, -day - 1,
              253_402_300_799_999]
    layout = s3log.Log(s3log.MemoryStore()).layout
    for prev in points:
        for now in points:
            marker = activity.marker_for(layout, "s", False, prev, now)
            assert (marker is None) == (activity.day_of(prev) == activity.day_of(now)), (prev, now)
            if marker is not None:
                assert activity.day_of(now) in marker.key
