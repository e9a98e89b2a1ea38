"""The scan's columns built many rows at a time equal the row-by-row forms."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import s3log
from s3log import analytics
from s3log.analytics import columns


@pytest.mark.parametrize(
    "values",
    [
        [{"a": 1, "b": [1.5, None, True]}, "text", 3, None, [], {}],  # all plain JSON: the C path
        [{"a": 1}, {1: "int key"}],  # an int key: orjson needs an option
        [b"\x00\x01", "x"],  # bytes: shown as hex
        [2**70, 1],  # beyond 64 bits
        [{"when": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)}, math.nan],
    ],
    ids=["plain", "int-key", "bytes", "big-int", "datetime-nan"],
)
def test_json_column_equals_json_of_each_value(values: list[Any]) -> None:
    assert columns._json_column(values) == [columns._json(v) for v in values]


def test_scan_columns_match_the_entries() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    for i in range(40):
        w.append("a" if i % 2 else "b", {i: "int key"} if i == 7 else {"i": i})
    w.commit()
    entries = log.read(w.session_id).entries
    table = analytics.to_arrow(store)
    assert table.column("seq").to_pylist() == [e.seq for e in entries]
    assert table.column("data_json").to_pylist() == [columns._json(e.data) for e in entries]
    assert table.column("prev").to_pylist() == [e.prev.hex() if e.prev else None for e in entries]
