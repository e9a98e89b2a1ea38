"""One time parser (s3log._format.times.to_ms) behind the CLI's --since/--until, retention's
``since`` and analytics' ``since``/``until``: the same forms, the same rules, the same errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

import s3log
from s3log._format.times import duration_ms, to_ms
from s3log._protocol.retention import since_ms
from s3log.analytics import options
from s3log.cli.export import parse_time

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z
JAN31 = int(datetime(2026, 1, 31, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(("value", "expected"), [
    (JAN31, JAN31),
    (float(JAN31), JAN31),
    ("2026-01-31", JAN31),
    ("2026-01-31T00:00:00Z", JAN31),
    ("2026-01-31T02:00:00+02:00", JAN31),
    ("20260131T000000Z", JAN31),  # ISO-8601 basic form: dateutil's isoparse reads it
    (datetime(2026, 1, 31), JAN31),  # naive: UTC
    (datetime(2026, 1, 31, 1, tzinfo=timezone(timedelta(hours=1))), JAN31),
])
def test_every_caller_reads_a_time_alike(value: object, expected: int) -> None:
    assert to_ms(value) == expected
    assert options._ms(value) == expected  # type: ignore[arg-type]
    assert since_ms(value, NOW) == expected
    if isinstance(value, str):
        assert parse_time(value) == expected


def test_durations_and_timedeltas_count_back_from_the_callers_clock() -> None:
    assert to_ms("7d", now_ms=NOW) == since_ms("7d", NOW) == NOW - 7 * 86_400_000
    assert to_ms("1h30m", now_ms=NOW) == NOW - 5_400_000
    assert since_ms(timedelta(hours=2), NOW) == to_ms(timedelta(hours=2), now_ms=NOW) == NOW - 7_200_000
    assert duration_ms("36500d") == 36_500 * 86_400_000
    with pytest.raises(s3log.InvalidArgumentError, match="too long"):
        duration_ms("36501d")


@pytest.mark.parametrize("value", ["yesterday", "7d", "2026-13-01", float("nan"), True, None, -1, 2**63,
                                   timedelta(days=1)])
def test_what_is_not_a_time_is_refused_naming_the_argument(value: object) -> None:
    # Without a clock (analytics), a duration has no meaning: refused, not read as now.
    with pytest.raises(s3log.InvalidArgumentError, match="invalid argument since"):
        to_ms(value, "since")


def test_the_command_line_reports_a_bad_time_as_a_usage_error() -> None:
    import typer

    with pytest.raises(typer.BadParameter, match="not an ISO date or time or a duration ago"):
        parse_time("yesterday")
