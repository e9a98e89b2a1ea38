"""What ``append`` accepts: data nested within the bound (through tags and sets too) and times a
scan can hold; what it refuses is refused before anything is written.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from cbor2 import CBORTag

import s3log
from s3log import analytics
from s3log._format.entries import normalize_data
from s3log.errors import InvalidEntryError


def _tags(n: int) -> Any:
    x: Any = 1
    for _ in range(n):
        x = CBORTag(4000, x)
    return x


def _tuples_in_a_set(n: int) -> Any:
    x: Any = 1
    for _ in range(n):
        x = (x,)
    return frozenset([x])


def _tags_and_lists(n: int) -> Any:
    x: Any = 1
    for i in range(n):
        x = CBORTag(4000, x) if i % 2 else [x]
    return x


@pytest.mark.parametrize("format_version", [1, 2])
@pytest.mark.parametrize("data", [_tags(399), _tuples_in_a_set(395), _tags(300), _tags_and_lists(300)],
                         ids=["tags-399", "set-of-tuples-395", "tags-300", "tags-and-lists-300"])
def test_data_nested_through_tags_or_sets_past_the_bound_is_refused_before_anything_is_written(
    format_version: int, data: Any
) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(format_version=format_version))
    w = log.create()
    before = store.requests.snapshot()
    with pytest.raises(InvalidEntryError, match="nests deeper than 256 levels") as info:
        w.append("deep", data)
    assert info.value.kind == "deep"
    w.append("ok", 1)
    w.commit()  # nothing of the refused entry was queued
    assert store.requests.snapshot()["PUT"] == before["PUT"] + 1
    assert [e.kind for e in log.read(w.session_id).entries] == ["ok"]


@pytest.mark.parametrize("format_version", [1, 2])
@pytest.mark.parametrize("data", [_tags(256), _tuples_in_a_set(254), _tags_and_lists(256),
                                  {"k": [_tags(254)]}],
                         ids=["tags-256", "set-of-tuples-254", "tags-and-lists-256", "map-of-tags-254"])
def test_data_nested_through_tags_or_sets_within_the_bound_reads_back_everywhere(
    format_version: int, data: Any
) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(format_version=format_version, tail_max_bytes=64))
    w = log.create()
    w.append("deep", data)
    w.commit()
    for _ in range(4):  # the tail flushed and merged into segments
        w.append("pad", "x" * 100)
        w.commit()
    want = normalize_data("deep", data)  # as CBOR gives it back (arrays in tags as tuples)
    assert log.read(w.session_id).entries[0].data == want
    child = log.fork(w.session_id)
    assert log.open(child).state[0]["data"] == want
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = analytics.to_arrow(store, strict=True)
    assert table.num_rows == 5 + 1  # the parent's entries and the child's fork entry


@pytest.mark.parametrize("ts", [analytics.TS_RANGE[1] + 1, 1_700_000_000_000_000_000, 2**63 - 1],
                         ids=["first-past-the-range", "time_ns-by-mistake", "max"])
def test_a_ts_a_scan_cannot_hold_is_refused_at_append_not_acknowledged_and_skipped(ts: int) -> None:
    # One such entry made every scan skip the whole session (every other entry with it)
    # as corrupt: acknowledged, and then unreadable to analytics.
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    with pytest.raises(InvalidEntryError, match="ts"):
        w.append("k", 2, ts=ts)
    w.commit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert analytics.to_arrow(store, strict=True).num_rows == 1
