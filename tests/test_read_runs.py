"""``Log.read_runs``: a session's entries as verified column runs, refusing what ``Log.read`` refuses.

From every driver (one that decodes in the driver, one that does not) the same runs and the
same errors: missing, corrupt, foreign, swapped or repeated segments, pending segments.
"""

from __future__ import annotations

import asyncio
from typing import Any

import cbor2
import pytest

import s3log
from s3log._format.cbor import dumps
from s3log._format.columns import RunColumns
from s3log._protocol.ops import Proc
from s3log.errors import CorruptionError
from s3log.store.memory import AsyncMemoryStore
from s3log.testing.sim import run_direct

T0 = 1_767_225_600_000  # 2026-01-01


def _plain_run(store: s3log.MemoryStore, proc: Proc[Any]) -> Any:
    """A driver that does not decode (the simulator's own): every Get gives the blob."""
    return run_direct(store, proc)


def _twins(version: int = 2) -> tuple[s3log.MemoryStore, s3log.Log, str, str]:
    """Two sessions of the same shape (segments from seq 0 and 20, a tail from 25)."""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600, format_version=version))
    a, b = log.create(), log.create()
    for w, dt in ((a, 0), (b, 1)):
        for i in range(30):
            w.append("k", {"i": i, "t": "x" * (i % 37)}, ts=T0 + dt + i)
            if i % 5 == 4:
                w.commit()
        w.commit()
    ha, hb = log.head(a.session_id), log.head(b.session_id)
    assert len(ha.segments) >= 2 and [k.rsplit("/", 1)[1][:30] for k in ha.segments] != [
        k.rsplit("/", 1)[1][:30] for k in hb.segments]
    return store, log, a.session_id, b.session_id


def _errors_alike(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> CorruptionError:
    """The error of Log.read, and that read_runs gives the same from every driver."""
    with pytest.raises(CorruptionError) as read_err:
        log.read(sid)
    expected = (type(read_err.value), read_err.value.key, read_err.value.seq, str(read_err.value))
    for name, run in (
        ("sync", lambda: log.read_runs(sid)),
        ("async", lambda: asyncio.run(s3log.AsyncLog(AsyncMemoryStore(store)).read_runs(sid))),
        ("plain", lambda: _plain_run(store, log._core.read_runs(sid, None, None))),
    ):
        with pytest.raises(CorruptionError) as err:
            run()
        assert (type(err.value), err.value.key, err.value.seq, str(err.value)) == expected, name
    # Log.read from a driver that does not decode says the same too.
    with pytest.raises(CorruptionError) as plain_read:
        _plain_run(store, log._core.read(sid))
    assert str(plain_read.value) == str(read_err.value)
    return read_err.value


def _foreign_first_segment(store: s3log.MemoryStore, log: s3log.Log, a: str, b: str) -> str:
    """b's first segment, relabelled as a's, under a's key: it decodes, but breaks the chain."""
    key = log.head(a).segments[0]
    obj = cbor2.loads(store.get(log.head(b).segments[0]).body)
    obj["session"] = a
    store.put_raw(key, dumps(obj))
    return key


@pytest.mark.parametrize("version", [1, 2])
def test_read_runs_names_the_segment_log_read_names_when_one_is_foreign_and_another_garbage(version: int) -> None:
    """from a driver that does not decode (the simulator's, a scripted
    one), read_runs decoded each segment as it verified it, so the first segment's
    broken chain was raised before the second's garbage; Log.read decodes every segment
    first and names the second. The two drivers of s3log agreed with Log.read."""
    store, log, a, b = _twins(version)
    _foreign_first_segment(store, log, a, b)
    garbage = log.head(a).segments[1]
    store.put_raw(garbage, b"\xff not cbor")
    err = _errors_alike(store, log, a)
    assert err.key == garbage and "not valid CBOR" in str(err)


def test_read_runs_with_a_missing_segment_then_a_corrupt_one() -> None:
    store, log, a, _ = _twins()
    first, second = log.head(a).segments[:2]
    store.delete(first)
    store.put_raw(second, b"\xff")
    err = _errors_alike(store, log, a)
    assert err.key == first and "missing" in str(err)


def test_read_runs_with_a_corrupt_segment_then_a_missing_one() -> None:
    store, log, a, _ = _twins()
    first, second = log.head(a).segments[:2]
    obj = cbor2.loads(store.get(first).body)
    obj["ts"][4] += 1
    store.put_raw(first, dumps(obj))
    store.delete(second)
    err = _errors_alike(store, log, a)
    assert err.key == first and err.seq == 4


def test_read_runs_refuses_a_head_with_its_segments_swapped() -> None:
    store, log, a, _ = _twins()
    head_key = log.layout.head(a)
    obj = cbor2.loads(store.get(head_key).body)
    obj["segments"] = obj["segments"][::-1]
    store.put_raw(head_key, dumps(obj))
    err = _errors_alike(store, log, a)
    assert err.key == obj["segments"][0] and "key says first seq 20" not in str(err)


def test_read_runs_refuses_a_segment_listed_twice() -> None:
    store, log, a, _ = _twins()
    head_key = log.layout.head(a)
    obj = cbor2.loads(store.get(head_key).body)
    obj["segments"] = [obj["segments"][0], *obj["segments"]]
    obj["levels"] = [0, *obj["levels"]]
    store.put_raw(head_key, dumps(obj))
    err = _errors_alike(store, log, a)
    assert err.key == obj["segments"][0] and err.seq == 0


def test_read_runs_refuses_a_tampered_v1_segment_in_a_mixed_chain() -> None:
    store = s3log.MemoryStore()
    v1 = s3log.Log(store, config=s3log.LogConfig(format_version=1, tail_per_commit=0, tail_max_bytes=600))
    v2 = s3log.Log(store, config=s3log.LogConfig(format_version=2, tail_per_commit=0, tail_max_bytes=600))
    w = v1.create()
    for i in range(20):
        w.append("k", {"i": i, "t": "x" * 30}, ts=T0 + i)
        w.commit()
    w = v2.open(w.session_id)
    for i in range(20, 40):
        w.append("k", {"i": i, "t": "x" * 30}, ts=T0 + i)
        w.commit()
    sid = w.session_id
    head = v2.head(sid)
    kinds = [cbor2.loads(store.get(k).body)["v"] for k in head.segments]
    assert 1 in kinds and 2 in kinds
    _, runs = v2.read_runs(sid)  # type: ignore[misc]
    assert any(isinstance(r, RunColumns) for r in runs) and any(not isinstance(r, RunColumns) for r in runs)
    key = head.segments[kinds.index(1)]
    obj = cbor2.loads(store.get(key).body)
    obj["entries"][2]["data"]["i"] = 99
    store.put_raw(key, dumps(obj))
    err = _errors_alike(store, v2, sid)
    assert err.key == key and err.seq == obj["entries"][2]["seq"]


def _parallel_head(store: s3log.MemoryStore) -> tuple[s3log.Log, str, str]:
    """A session whose head names a pending segment (written beside it, not yet listed)."""
    log = s3log.Log(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=600))
    w = log.create()
    for i in range(8):
        w.append("k", {"i": i, "t": "x" * 60}, ts=T0 + i)
        w.commit()
        head = log.head(w.session_id)
        if head.pending is not None:
            return log, w.session_id, head.pending.key
    raise AssertionError("no pending segment written")


@pytest.mark.parametrize("change", ["garbage", "deleted", "foreign", "truncated run"])
def test_read_runs_ignores_the_pending_segment_whatever_it_holds(change: str) -> None:
    store = s3log.MemoryStore()
    log, sid, pending = _parallel_head(store)
    expected = log.read(sid).entries
    body = store.get(pending).body
    if change == "garbage":
        store.put_raw(pending, b"\xff")
    elif change == "deleted":
        store.delete(pending)
    elif change == "foreign":
        obj = cbor2.loads(body)
        obj["session"] = "someone-else"
        store.put_raw(pending, dumps(obj))
    else:
        obj = cbor2.loads(body)
        for col in ("ts", "kinds", "data", "hashes"):
            obj[col] = obj[col][:1]
        store.put_raw(pending, dumps(obj))
    assert log.read(sid).entries == expected
    for runs in (log.read_runs(sid), _plain_run(store, log._core.read_runs(sid, None, None)),
                 asyncio.run(s3log.AsyncLog(AsyncMemoryStore(store)).read_runs(sid))):
        head, got = runs
        assert head.pending is not None
        assert [h for r in got for h in (r.hashes if isinstance(r, RunColumns) else [e.hash for e in r])] == [
            e.hash for e in expected]
