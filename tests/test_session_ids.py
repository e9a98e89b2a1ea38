"""Generated session ids: time-ordered, and one writer's clock cannot date the ids of others.
"""

from __future__ import annotations

DAY = 86_400_000


def test_an_id_on_a_far_future_clock_does_not_date_later_ids() -> None:
    import time

    from s3log.env import uuid7

    uuid7(int(time.time() * 1000) + 40 * DAY)
    now = int(time.time() * 1000)
    later = uuid7()
    ms = int(later.replace("-", "")[:12], 16)
    assert now - 1_000 <= ms <= now + 60_000
    # Ids of one clock stay ordered, within a millisecond and across a small step back.
    a, b = uuid7(now + 100), uuid7(now + 50)
    assert a < b
