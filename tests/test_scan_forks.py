"""A scan's session and parent columns (one value per session) and its fork check, over forks of
forks, empty sessions, filters and fork entries held in v2 segments.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

import s3log
from s3log import analytics
from s3log._format import codec
from s3log._format.entries import make_entry
from s3log._format.values import Entry
from s3log._protocol import read
from s3log.analytics import columns, reading
from s3log.env import Env
from tests.baseline import baseline_module

pytest.importorskip("pyarrow")

T0 = 1_767_225_600_000  # 2026-01-01


def test_first_entry_of_columns_equals_the_dataclass_entry() -> None:
    """``_first_entry`` of a column run: an ordinary Entry equal to the one its
    constructor makes (type, fields, hash of a hashable one, frozen)."""
    entries = [make_entry(0, None, "s3log.fork", T0, {"parent": {"session": "p"}}),]
    entries.append(make_entry(1, entries[0].hash, "m", T0 + 1, "x"))
    body = codec.encode_segment("s", entries, 2)
    _, run = codec.decode_segment_columns(body, "k")
    assert isinstance(run, codec.RunColumns)
    got = read._first_entry([(), run])
    want = codec.Entry(0, None, "s3log.fork", T0, {"parent": {"session": "p"}}, entries[0].hash)
    assert type(got) is codec.Entry and got == want and got.raw == b""
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.seq = 1  # type: ignore[misc]
    e2 = read._first_entry([codec.decode_segment_columns(codec.encode_segment("s", entries[1:], 2), "k")[1]])
    assert e2 is not None and hash(e2) == hash(codec.Entry(1, entries[0].hash, "m", T0 + 1, "x", entries[1].hash))


def _store(n_short: int = 500, n_long: int = 30) -> tuple[s3log.MemoryStore, list[str]]:
    """Short and long sessions, forks (of forks), empty sessions, several kinds and times."""
    store = s3log.MemoryStore()
    clock = itertools.count(T0, 5)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(9, lambda: next(clock))))
    rng = random.Random(17)
    ids: list[str] = []
    for s in range(n_short + n_long):
        if ids and s % 5 == 2:
            parent = rng.choice(ids)
            count = log.head(parent).entry_count
            w = log.open(log.fork(parent, at_seq=rng.randrange(count))) if count else log.create()
        else:
            w = log.create()
        rows = 0 if s % 23 == 0 else (rng.choice([100, 150, 250]) if s % 18 == 0 else rng.randrange(1, 9))
        base = T0 + rng.randrange(10) * 3_600_000
        for i in range(rows):
            w.append(rng.choice(["message", "tool", "rare"]), {"s": s, "i": i}, ts=base + i * 60_000)
            if i % 40 == 39:
                w.commit()
        w.commit()
        ids.append(w.session_id)
    return store, ids


@pytest.fixture(scope="module")
def scan_store() -> tuple[s3log.MemoryStore, list[str]]:
    return _store()


def _reference(store: s3log.MemoryStore, ids: list[str], keep: Callable[[int, str], bool]) -> tuple[list[Any], ...]:
    """The session and parent column of each row kept, one value per row."""
    log = s3log.Log(store)
    sessions: list[str] = []
    parents: list[str | None] = []
    listed = reading._session_ids(log, None)  # the order a scan reads them in
    assert sorted(listed) == sorted(ids)
    for sid in listed:
        try:
            view = log.read(sid)
        except s3log.SessionNotFound:
            continue
        head = log.head(sid)
        for e in view.entries:
            if keep(e.ts, e.kind):
                sessions.append(sid)
                parents.append(head.parent.session if head.parent else None)
    return sessions, parents


FILTERS: list[dict[str, Any]] = [
    {},
    {"kinds": ["rare"]},
    {"kinds": ["none such"]},
    {"since": T0 + 4 * 3_600_000},
    {"until": T0 + 2 * 3_600_000 + 120_000},
    {"since": T0 + 3 * 3_600_000 + 60_000, "until": T0 + 6 * 3_600_000, "kinds": ["tool", "rare"]},
]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: "-".join(f) or "all")
def test_scan_equals_the_per_row_owner_scan_and_the_reference(
    baseline: ModuleType, scan_store: tuple[s3log.MemoryStore, list[str]], flt: dict[str, Any]
) -> None:
    """Every batch of a scan of forks, empty sessions and sessions a filter leaves
    without a row equals the baseline build's, at batch sizes 7, 4096, 4097 and the default; the
    session and parent columns equal one value per row."""
    oa = baseline_module("analytics")
    store, ids = scan_store
    lo, hi, kinds = flt.get("since"), flt.get("until"), flt.get("kinds")

    def keep(ts: int, kind: str) -> bool:
        return (lo is None or ts >= lo) and (hi is None or ts < hi) and (kinds is None or kind in kinds)

    want_sessions, want_parents = _reference(store, ids, keep)
    for batch_size in (7, 4096, 4097, 65_536):
        new = list(analytics.scan(store, batch_size=batch_size, parallelism=1, **flt))
        was = list(oa.scan(store, batch_size=batch_size, parallelism=1, **flt))
        assert [b.num_rows for b in new] == [b.num_rows for b in was]
        for a, b in zip(new, was, strict=True):
            a.validate(full=True)
            assert a.equals(b)
        table = pa.Table.from_batches(new, schema=analytics.SCHEMA)
        assert table.column("session").to_pylist() == want_sessions
        assert table.column("parent_session").to_pylist() == want_parents
    assert analytics.to_arrow(store, **flt).equals(oa.to_arrow(store, **flt))


def test_scan_batches_of_one_equal_the_per_row_owner_scan(baseline: ModuleType) -> None:
    """batch_size=1 over a small store with forks and a filter: row by row the same."""
    oa = baseline_module("analytics")
    store, _ = _store(n_short=40, n_long=2)
    flts: list[dict[str, Any]] = [{}, {"kinds": ["tool"]}]
    for flt in flts:
        new = list(analytics.scan(store, batch_size=1, parallelism=2, **flt))
        was = list(oa.scan(store, batch_size=1, parallelism=2, **flt))
        assert len(new) == len(was) > 0
        assert all(a.equals(b) for a, b in zip(new, was, strict=True))


def _with_parent_named(store: s3log.MemoryStore, log: s3log.Log, sid: str, name: str) -> None:
    """Rewrite a fork (all of it in its head's tail) so its parent pointer names
    ``name``: the fork entry and every hash after it made again, a consistent chain."""
    head = log.head(sid)
    assert head.parent is not None and head.segments == ()
    parent = dataclasses.replace(head.parent, session=name)
    entries: list[Entry] = []
    prev = None
    for e in head.tail:
        data = dict(e.data, parent=parent.to_map()) if e.seq == 0 else e.data
        entries.append(make_entry(e.seq, prev, e.kind, e.ts, data))
        prev = entries[-1].hash
    new = dataclasses.replace(head, parent=parent, tail=tuple(entries), hash=prev)
    store.put_raw(log.layout.head(sid), codec.encode_head(new))


def test_scan_skips_a_fork_whose_parent_names_no_session(baseline: ModuleType) -> None:
    """A fork whose stored parent pointer names "" (the chain otherwise consistent).
    A parent naming no session id makes the head corrupt (docs/format.md, "Head"):
    reading it raises CorruptionError naming the head, and a scan skips the session
    with a warning."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("m", 1)
    w.commit()
    fork = log.fork(w.session_id)
    fw = log.open(fork)
    fw.append("m", 2)
    fw.commit()
    _with_parent_named(store, log, fork, "")
    with pytest.raises(s3log.CorruptionError, match="parent session is not a session id") as err:
        log.read(fork)
    assert err.value.key == log.layout.head(fork)
    with pytest.warns(analytics.CorruptSessionWarning):
        assert analytics.to_arrow(store, sessions=[fork]).num_rows == 0


def test_owner_columns_of_empty_names() -> None:
    """The helper itself: parents "" (falsy) among Nones keep their rows' ""."""
    sessions, parents = columns._owner_columns([("a", "", 2), ("b", None, 1)], 3)
    assert sessions.to_pylist() == ["a", "a", "b"]
    assert parents.to_pylist() == ["", "", None]


def test_fork_check_from_segment_columns_as_from_entries(baseline: ModuleType) -> None:
    """Forks whose fork entry lies in a v2 segment (read as columns, the first entry
    made by ``new_entry``): scanned as the baseline build scans them, and a head whose parent
    pointer no longer matches that entry refused with the same error."""
    oa = baseline_module("analytics")
    store = s3log.MemoryStore()
    clock = itertools.count(T0, 3)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(4, lambda: next(clock)),
                                                  tail_per_commit=0, tail_max_bytes=300))
    w = log.create()
    for i in range(30):
        w.append("m", {"i": i})
        w.commit()
    forks = [log.fork(w.session_id, at_seq=at) for at in (0, 7, 29)]
    for sid in forks:
        fw = log.open(sid)
        for i in range(25):
            fw.append("n", {"i": i, "pad": "y" * 20})
            fw.commit()
        assert log.head(sid).segments, "the fork entry is in a segment"
    assert analytics.to_arrow(store, batch_size=5).equals(oa.to_arrow(store, batch_size=5))
    sid = forks[1]
    head = log.head(sid)
    assert head.parent is not None
    tampered = dataclasses.replace(head, parent=dataclasses.replace(head.parent, seq=head.parent.seq + 1))
    store.put_raw(log.layout.head(sid), codec.encode_head(tampered))
    with pytest.raises(s3log.CorruptionError) as new:
        log.read_runs(sid)
    with pytest.raises(Exception) as was:
        baseline.Log(store).read_runs(sid)
    assert type(was.value).__name__ == "CorruptionError" and str(new.value) == str(was.value)
    assert "fork entry's parent differs" in str(new.value)
