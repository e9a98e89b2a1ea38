"""Compaction: what a selector keeps must be entries append accepts, checked before anything is written.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import s3log
from s3log.errors import InvalidArgumentError, InvalidEntryError
from tests.helpers import sessions_log


@pytest.mark.parametrize("bad", [
    {"kind": "summary", "ts": time.time_ns(), "data": 1},  # past MAX_TS: every scan skipped it
    {"kind": "summary", "ts": "yesterday", "data": 1},  # unreadable
    {"kind": "summary", "ts": True, "data": 1},  # unreadable
    {"kind": "summary", "ts": -1, "data": 1},
    {"kind": 5, "ts": 1, "data": 1},  # unreadable
    {"kind": "s3log.fork", "ts": 1, "data": 1},  # unreadable: a fork entry in a root chain
    {"kind": "", "ts": 1, "data": 1},
    {"kind": "k", "ts": 1, "data": object()},  # was a raw CBOREncodeError
], ids=["ts-ns", "ts-text", "ts-bool", "ts-negative", "kind-int", "kind-reserved", "kind-empty", "data"])
def test_a_compaction_keeping_an_entry_append_refuses_is_refused_before_anything_is_written(bad: Any) -> None:
    store = s3log.MemoryStore()
    log = sessions_log(store, "s1")
    before = {k: store.get(k).body for k in store.all_keys()}
    with pytest.raises(InvalidEntryError, match="session s1"):
        log.compact("s1", lambda history, head: [*history, bad])
    assert {k: store.get(k).body for k in store.all_keys()} == before
    assert [(e.kind, e.data) for e in log.read("s1").entries] == [("k", "s1")]


@pytest.mark.parametrize("kept", [[{"ts": 1, "data": 1}], [["k", 1, 1]], "k", {"kind": "k", "ts": 1}])
def test_a_selector_returning_something_else_than_entry_maps_is_an_argument_error(kept: Any) -> None:
    store = s3log.MemoryStore()
    log = sessions_log(store, "s1")
    with pytest.raises(InvalidArgumentError, match="select"):
        log.compact("s1", lambda history, head: kept)
    assert [e.data for e in log.read("s1").entries] == ["s1"]


def test_a_compaction_keeping_new_well_formed_entries_reads_and_scans_back() -> None:
    log = sessions_log(s3log.MemoryStore(), "s1")
    assert log.compact("s1", lambda history, head: [*history, {"kind": "summary", "ts": 5, "data": {"n": (1, 2)}}])
    assert [(e.kind, e.ts, e.data) for e in log.read("s1").entries][1:] == [("summary", 5, {"n": [1, 2]})]
    assert log.compact("s1", lambda history, head: (e for e in history[:1]))  # any iterable
    assert [e.kind for e in log.read("s1").entries] == ["k"]
