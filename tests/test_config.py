"""``LogConfig``: bad sizes and fan-outs are named before anything is written.
"""

from __future__ import annotations

import pytest

import s3log
from s3log._format.layout import MAX_SEGMENTS
from s3log._format.manifest import max_manifest_length
from s3log.config import MAX_FANOUT
from s3log.errors import InvalidArgumentError


def test_the_fanout_is_bounded_so_no_head_lists_more_segments_than_readers_accept() -> None:
    assert max_manifest_length(2**64, MAX_FANOUT) <= MAX_SEGMENTS
    assert s3log.LogConfig(fanout=MAX_FANOUT).fanout == MAX_FANOUT
    for bad in (MAX_FANOUT + 1, 100_000, 1, 0, -3, 4.0, "4", True):
        with pytest.raises(InvalidArgumentError, match="fanout"):
            s3log.LogConfig(fanout=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "bad"), [
    ("tail_max_bytes", -1), ("tail_max_bytes", 1.5), ("pending_max_bytes", -1), ("tail_per_commit", -2),
    ("cache_levels", -1), ("cache_levels", None), ("max_parallel", 0), ("commit_deadline_ms", 0),
    ("commit_deadline_ms", 60.0),
])
def test_log_config_names_a_bad_size_before_anything_is_written(name: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=name) as info:
        s3log.LogConfig(**{name: bad})  # type: ignore[arg-type]
    assert info.value.argument == name
    # Zero is a valid size where it has a meaning (always flush, never cache, strict bound).
    s3log.LogConfig(tail_max_bytes=0, pending_max_bytes=0, tail_per_commit=0, cache_levels=0)
