"""The history checker (s3log.testing.history): hand-made histories with each breach
of the promise are reported, clean ones are not, and racing writers over the local
HTTP server under injected faults leave a clean history."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import s3log
from s3log.testing.faults import AsyncFaultyStore, FaultyStore, random_plan
from s3log.testing.history import (
    Ack,
    AsyncRecordingStore,
    Ended,
    Fork,
    HeadWrite,
    History,
    Invoke,
    Position,
    Read,
    RecordingStore,
    check,
    positions,
)
from s3log.testing.plugin import LocalS3

ROOT = Path(__file__).resolve().parents[1]


def pos(payload: str | None, session: str, seq: int) -> Position:
    """A position whose hash is derived from what it holds (equal positions, equal hashes)."""
    return Position(payload, session, seq, f"{session}/{seq}/{payload}".encode())


A0, A1, A2 = pos("a", "A", 0), pos("b", "A", 1), pos("c", "A", 2)


def clean() -> list[Any]:
    """Two commits to session A, each its head PUT, a read in between, a final read."""
    return [
        Invoke(1, "w1", "commit", "A"),
        HeadWrite(1, "w1", "A", "put_if_absent", None, '"e0"', seq=0),
        Ack(1, "w1", (A0,)),
        Invoke(2, "r1", "read", "A"),
        Read(2, "r1", "A", (A0,)),
        Invoke(3, "w1", "commit", "A"),
        HeadWrite(3, "w1", "A", "put_if_match", '"e0"', '"e1"', seq=1),
        Ack(3, "w1", (A1,)),
        Read(0, "end", "A", (A0, A1), final=True),
    ]


def rules(events: list[Any]) -> list[str]:
    return [v.rule for v in check(events)]


def test_a_clean_history_has_no_violation() -> None:
    assert check(clean()) == []
    h = History()
    for ev in clean():
        h.add(ev)
    assert check(h) == [] and len(h) == 9


def test_a_lost_acknowledgement_is_reported() -> None:
    events = clean()
    events.insert(-1, Ack(3, "w1", (A2,)))  # acknowledged at A@2, the final chain ends at 1
    found = check(events)
    assert [v.rule for v in found] == ["lost"]
    assert "c acknowledged at A@2" in found[0].message


def test_an_entry_acknowledged_where_another_is_stored_is_lost() -> None:
    events = clean()
    events[-1] = Read(0, "end", "A", (A0, pos("x", "A", 1)), final=True)
    assert rules(events) == ["lost"]


def test_an_entry_stored_twice_is_reported() -> None:
    events = clean()
    events.append(Read(0, "end", "B", (pos(None, "B", 0), pos("a", "B", 1)), final=True))
    found = check(events)
    assert [v.rule for v in found] == ["duplicated"]
    assert "a is stored 2 times" in found[0].message


def test_an_entry_acknowledged_twice_is_reported() -> None:
    events = clean()
    events.insert(-1, Ack(4, "w2", (A1,)))
    assert rules(events) == ["duplicated"]


def test_a_retry_answered_with_the_stored_entry_is_not_a_second_acknowledgement() -> None:
    # An append retried with its idempotency key is answered with the entry stored the
    # first time: acknowledged again, where it was, it is no duplicate; elsewhere it is.
    events = clean()
    events.insert(-1, Ack(4, "w2", (A1,), retry=True))
    assert rules(events) == []
    events = clean()
    events.insert(-1, Ack(4, "w2", (pos("b", "A", 0),), retry=True))
    assert "duplicated" in rules(events)


def test_an_acknowledged_entry_retention_ended_is_excused_but_not_stored_again() -> None:
    ended = [*clean()[:-1], Ended(9, "rt", "A", (A0, A1)), Read(0, "end", "A", (), final=True)]
    assert check(ended) == []
    again = [*ended, Read(0, "end", "B", (pos(None, "B", 0), pos("b", "B", 1)), final=True)]
    assert rules(again) == ["duplicated"]


def test_a_read_that_is_no_prefix_is_reported() -> None:
    events = clean()
    events.insert(5, Read(5, "r2", "A", (A0, pos("y", "A", 1))))
    found = check(events)
    assert [v.rule for v in found] == ["read"]
    assert "at seq 1 it read y, the chain holds b" in found[0].message


def test_a_read_of_a_chain_retention_ended_is_a_prefix_of_a_chain() -> None:
    gone = (A0, pos("z", "A", 1))
    events = [*clean()[:5], Ended(9, "rt", "A", gone), Read(0, "end", "A", (), final=True),
              Read(6, "r2", "A", gone)]
    assert "read" not in rules(events)


def fork_history(*competitor: Any, explicit: bool = False) -> list[Any]:
    """Session A at seq 1; writer w1 (operation 5) forks A@1 into B."""
    events = clean()
    events[-1:-1] = [
        Invoke(5, "w1", "fork" if explicit else "commit", "A"),
        *competitor,
        HeadWrite(5, "w1", "B", "put_if_absent", None, '"f0"', seq=1, parent=("A", 1), sent=len(events) + 1),
        Fork(5, "w1", "A", 1, "B"),
        Ack(5, "w1", (pos("d", "B", 1),)),
    ]
    events.append(Read(0, "end", "B", (pos(None, "B", 0), pos("d", "B", 1)), final=True))
    return events


def test_a_fork_with_no_lost_race_is_reported() -> None:
    found = check(fork_history())
    assert [v.rule for v in found] == ["fork"]
    assert "B forked from A@1" in found[0].message


def test_a_fork_after_a_lost_race_or_asked_for_is_not_reported() -> None:
    moved = HeadWrite(6, "w2", "A", "put_if_match", '"e1"', '"e2"', seq=2, sent=9)
    assert check(fork_history(moved)) == []
    expired = HeadWrite(7, "rt", "A", "put_if_match", '"e1"', '"t"', seq=1, tomb=True, sent=9)
    assert check(fork_history(expired)) == []
    assert check(fork_history(explicit=True)) == []
    # Its own write of the parent explains nothing; nor does one that did not move it.
    own = HeadWrite(5, "w1", "A", "put_if_match", '"e1"', '"e2"', seq=2, sent=9)
    still = HeadWrite(6, "w2", "A", "put_if_match", '"e1"', '"e2"', seq=1, sent=9)
    assert rules(fork_history(own)) == ["fork"]
    assert rules(fork_history(still)) == ["fork"]


def test_a_fork_created_but_never_reported_is_checked_too() -> None:
    events = [e for e in fork_history() if not isinstance(e, Fork)]
    assert rules(events) == ["fork"]


def test_two_heads_accepted_from_one_etag_are_reported() -> None:
    events = clean()
    # Another writer's PUT with the same If-Match as operation 3's was applied as well.
    events.insert(7, HeadWrite(4, "w2", "A", "put_if_match", '"e0"', '"e9"', seq=1))
    found = check(events)
    assert "etag" in [v.rule for v in found]
    assert "two writes of A's head accepted from ETag e0" in str(found[0])


def test_an_etag_written_again_may_be_matched_again() -> None:
    events = clean()
    events[-1:-1] = [HeadWrite(4, "w1", "A", "put_if_match", '"e1"', '"e0"', seq=1),
                     HeadWrite(5, "w1", "A", "put_if_match", '"e0"', '"e3"', seq=1)]
    assert "etag" not in rules(events)


def test_two_creates_of_one_head_are_reported_unless_deleted_between() -> None:
    twice = [HeadWrite(1, "w1", "A", "put_if_absent", None, '"e0"', seq=0),
             HeadWrite(2, "w2", "A", "put_if_absent", None, '"e5"', seq=0)]
    assert rules(twice) == ["etag"]
    deleted = [twice[0], HeadWrite(3, "rt", "A", "delete_if_match", '"e0"', None), twice[1]]
    assert rules(deleted) == []


def test_the_checker_imports_no_client_library() -> None:
    code = ("import json, sys; import s3log.testing.history, s3log.testing.sim; "
            "print(json.dumps([m for m in ('boto3', 'botocore', 'aioboto3', 'obstore', 'moto', 'pytest') "
            "if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_a_commit_result_is_recorded_where_each_entry_landed() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    w.append("k", "a")
    h = History()
    op = h.invoke("w", "commit", w.session_id)
    h.ack_result(op, "w", w.commit(), lambda e: str(e.data))
    h.read(0, "end", w.session_id, positions(w.session_id, log.read(w.session_id).entries, lambda e: str(e.data)),
           final=True)
    assert check(h) == []
    assert [p.payload for ev in h.events if isinstance(ev, Ack) for p in ev.positions] == ["a"]


# ------------------------------------------------------------------ the real server


def data_id(e: s3log.Entry) -> str | None:
    return f"{e.data['w']}.{e.data['i']}" if isinstance(e.data, dict) and "w" in e.data else None


WRITERS, COMMITS = 4, 8


def _race_ground(server: LocalS3) -> tuple[str, s3log.Log, str, History, s3log.LogConfig]:
    """A new bucket, a plain log on it holding one new session, an empty history and the
    racing writers' config (two attempts, short backoffs)."""
    bucket = server.create_bucket()
    plain = s3log.Log(s3log.S3Store(bucket, endpoint_url=server.endpoint_url))
    config = s3log.LogConfig(retry=s3log.RetryPolicy(attempts=2, initial=0.001, max_backoff=0.002))
    return bucket, plain, plain.create().session_id, History(), config


def _check_final_reads(h: History, plain: s3log.Log) -> None:
    """Record a final read of every session, then check the whole history: no violation."""
    for s in plain.list_session_ids():
        h.read(0, "end", s, positions(s, plain.read(s).entries, data_id), final=True)
    assert check(h) == []


def test_racing_writers_over_http_under_faults_leave_a_clean_history(s3log_server: LocalS3) -> None:
    bucket, plain, sid, h, config = _race_ground(s3log_server)

    stores: list[FaultyStore] = []

    def writer(n: int) -> None:
        # One log per thread: its recording store knows whose request it records.
        rec = RecordingStore(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url), h, f"w{n}")
        faulty = FaultyStore(rec, random_plan(100 + n, 0.25))
        stores.append(faulty)
        log = s3log.Log(faulty, config=config)
        w = _open(log, sid)
        for i in range(COMMITS):
            w.append("k", {"w": n, "i": i})
            _commit(h, rec, w)
            if n == 0:
                _read(h, rec, log, w.session_id)
        while w.pending:
            _commit(h, rec, w)

    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            writer(n)
        except BaseException as exc:  # a thread's exception would otherwise only be printed
            errors.append(exc)
            raise

    threads = [threading.Thread(target=run, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    _check_final_reads(h, plain)
    acked = [p for ev in h.events if isinstance(ev, Ack) for p in ev.positions]
    assert len(acked) == WRITERS * COMMITS
    assert any(isinstance(ev, Fork) for ev in h.events)  # the race really forked, and was checked
    assert sum(len(f.injected) for f in stores) > 0
    assert any(isinstance(ev, Read) and not ev.final and ev.entries for ev in h.events)


async def test_racing_async_writers_over_http_under_faults_leave_a_clean_history(s3log_server: LocalS3) -> None:
    bucket, plain, sid, h, config = _race_ground(s3log_server)
    stores: list[AsyncFaultyStore] = []
    inner = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)  # one client: they are slow to start

    async def writer(n: int) -> None:
        # One log per task: its recording store knows whose request it records.
        rec = AsyncRecordingStore(inner, h, f"a{n}")
        faulty = AsyncFaultyStore(rec, random_plan(200 + n, 0.25))
        stores.append(faulty)
        log = s3log.AsyncLog(faulty, config=config)
        w = await _open_async(log, sid)
        for i in range(COMMITS):
            w.append("k", {"w": n, "i": i})
            await _commit_async(h, rec, w)
        while w.pending:
            await _commit_async(h, rec, w)

    try:
        await asyncio.gather(*(writer(n) for n in range(WRITERS)))
    finally:
        await inner.aclose()
    _check_final_reads(h, plain)
    assert len([p for ev in h.events if isinstance(ev, Ack) for p in ev.positions]) == WRITERS * COMMITS
    assert any(isinstance(ev, HeadWrite) for ev in h.events) and sum(len(f.injected) for f in stores) > 0


async def _open_async(log: s3log.AsyncLog, sid: str) -> Any:
    for _ in range(20):
        with contextlib.suppress(s3log.StoreError):
            return await log.open(sid)
    return await log.open(sid)


async def _commit_async(h: History, rec: AsyncRecordingStore, w: Any) -> None:
    rec.op = op = h.invoke(rec.client, "commit", w.session_id)
    try:
        result = await w.commit()
    except s3log.StoreError as exc:
        h.fail(op, rec.client, type(exc).__name__)
        return
    h.ack_result(op, rec.client, result, data_id)


def _open(log: s3log.Log, sid: str) -> Any:
    for _ in range(20):
        with contextlib.suppress(s3log.StoreError):
            return log.open(sid)
    return log.open(sid)


def _commit(h: History, rec: RecordingStore, w: Any) -> None:
    rec.op = op = h.invoke(rec.client, "commit", w.session_id)
    try:
        result = w.commit()
    except s3log.StoreError as exc:
        h.fail(op, rec.client, type(exc).__name__)  # still pending: a later commit carries it
        return
    h.ack_result(op, rec.client, result, data_id)


def _read(h: History, rec: RecordingStore, log: s3log.Log, sid: str) -> None:
    rec.op = op = h.invoke(rec.client, "read", sid)
    with contextlib.suppress(s3log.StoreError):
        h.read(op, rec.client, sid, positions(sid, log.read(sid).entries, data_id))


@pytest.mark.parametrize("rule", ["lost", "duplicated", "read", "fork", "etag"])
def test_every_rule_has_a_history_that_breaks_it(rule: str) -> None:
    breaking = {
        "lost": [*clean()[:-1], Ack(3, "w1", (A2,)), clean()[-1]],
        "duplicated": [*clean(), Read(0, "end", "B", (pos("a", "B", 0),), final=True)],
        "read": [*clean(), Read(7, "r", "A", (A1,))],
        "fork": fork_history(),
        "etag": [*clean(), HeadWrite(8, "w2", "A", "put_if_match", '"e0"', '"e7"', seq=1)],
    }
    assert rule in rules(breaking[rule])
