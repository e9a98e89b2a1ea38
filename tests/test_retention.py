"""Retention: the activity marker hook, expire (If-Match DELETEs), gc of expired sessions, the CLI."""

from __future__ import annotations

import importlib.util
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import s3log
from s3log._protocol import protocol
from s3log._protocol.activity import DAY_MS, day_of, marker_key
from s3log._protocol.ops import DeleteIfMatch, Op, Parallel, PutIfAbsent, PutIfMatch
from s3log.env import Env
from tests.scripted import recorded
from tests.tombstones import tombstone_idle

T0 = 1_800_000_000_000


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def _log(store: s3log.MemoryStore, clock: Clock, **kw: Any) -> s3log.Log:
    kw.setdefault("tail_per_commit", 0)  # the strict tail bound the flushes here are counted against
    return s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(11, clock), **kw))


def _commit(log: s3log.Log, w: s3log.Writer) -> list[Op]:
    seen: list[Op] = []
    log._run(recorded(w._core.commit(), seen))
    return seen


# ------------------------------------------------------------------ the activity hook


def test_the_days_first_commit_writes_its_marker_before_its_head() -> None:
    store, clock = s3log.MemoryStore(), Clock(T0)
    log = _log(store, clock, tail_max_bytes=1024)
    w = log.create("s1")  # creating marks the day
    assert marker_key(log.layout, day_of(T0), "s1") in store.all_keys()
    w.append("k", 1)
    assert [type(op) for op in _commit(log, w)] == [PutIfMatch], "same day: no marker, one round trip"
    clock.t += DAY_MS
    w.append("big", "x" * 4000)  # needs a segment, written beside the head
    ops = _commit(log, w)
    assert [type(op) for op in ops] == [Parallel, Parallel], "the marker first, then the segment and the head"
    assert [o.key for o in ops[0].ops] == [marker_key(log.layout, day_of(clock.t), "s1")]  # type: ignore[union-attr]
    assert isinstance(ops[1], Parallel) and {type(o) for o in ops[1].ops} == {PutIfAbsent, PutIfMatch}
    clock.t += DAY_MS
    w.append("k", 2)
    ops = _commit(log, w)
    # No segment: the marker goes first, alone (so a landed head always has its marker).
    assert [type(op) for op in ops] == [Parallel, PutIfMatch]
    assert [o.key for o in ops[0].ops] == [marker_key(log.layout, day_of(clock.t), "s1")]  # type: ignore[union-attr]


def test_a_marker_already_there_is_fine_and_the_index_can_be_turned_off() -> None:
    store, clock = s3log.MemoryStore(), Clock(T0)
    log = _log(store, clock)
    store.put_raw(marker_key(log.layout, day_of(T0), "s2"), b"someone else's bytes")
    w = log.create("s2")
    w.append("k", 1)
    w.commit()
    assert [e.data for e in log.read("s2")] == [1]
    off = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(activity_index=False))
    off.create("s3")
    assert not [k for k in off.store.all_keys() if "/activity/" in k]  # type: ignore[attr-defined]


def test_active_sessions_uses_the_index_only_once_it_covers_the_window() -> None:
    store, clock = s3log.MemoryStore(), Clock(T0)
    log = _log(store, clock)
    old = log.create("old")
    clock.t += 3 * DAY_MS
    log.create("new")
    old.append("k", 1)
    old.commit()  # an old session, committed to today
    clock.t += 1
    covered = log.active_sessions(since=T0 + DAY_MS)
    assert covered.indexed and sorted(covered.ids) == ["new", "old"]
    # The index's first day may predate it: a window starting that day reads every head.
    first = log.active_sessions(since=T0)
    assert not first.indexed and sorted(first.ids) == ["new", "old"]
    with pytest.raises(s3log.S3LogError, match="since"):
        log.active_sessions(since="yesterday")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- expire


def _world() -> tuple[s3log.MemoryStore, Clock, s3log.Log, dict[str, str]]:
    store, clock = s3log.MemoryStore(), Clock(T0)
    log = _log(store, clock, tail_max_bytes=1024)
    ids: dict[str, str] = {}
    for name, tenant in (("idle1", "t1"), ("idle2", "t2"), ("busy", "t1")):
        w = log.create(meta={"labels": {"tenant": tenant}})
        for i in range(3):
            w.append("big", f"{i}" * 900)
            w.commit()
        ids[name] = w.session_id
    clock.t += 40 * DAY_MS
    busy = log.open(ids["busy"])
    busy.append("k", "recent")
    busy.commit()
    return store, clock, log, ids


def test_expire_deletes_idle_sessions_and_keeps_active_ones() -> None:
    store, _clock, log, ids = _world()
    dry = log.expire(idle_for=timedelta(days=30), dry_run=True)
    assert sorted(dry.expired) == sorted([ids["idle1"], ids["idle2"]]) and dry.dry_run
    assert log.read(ids["idle1"]).entries  # a dry run changes nothing
    only_t2 = log.expire(idle_for=timedelta(days=30), labels={"tenant": "t2"})
    assert only_t2.expired == [ids["idle2"]] and only_t2.skipped_labels == 1
    store.requests.reset()
    report = log.expire(idle_for=timedelta(days=30))
    assert report.expired == [ids["idle1"]] and report.examined == 3 and report.kept == 1 and not report.errors
    # Three LISTs (sessions, the activity index, its day folders), the three heads, one
    # If-Match DELETE of the idle head (the old day was pruned by the sweep above): no PUT.
    assert store.requests.snapshot() == {"GET": 3, "PUT": 0, "LIST": 3, "DELETE": 1}
    with pytest.raises(s3log.SessionNotFound):
        log.read(ids["idle1"])
    assert ids["idle1"] not in [i.session_id for i in log.list_sessions()]
    assert log.read(ids["busy"]).entries[-1].data == "recent"
    # The sweep's summary counts list fields (scripts/sweep_lambda.py).
    spec = importlib.util.spec_from_file_location("sweep", Path(__file__).parents[1] / "scripts" / "sweep_lambda.py")
    assert spec is not None and spec.loader is not None
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert sweep._summary(report)["expired"] == 1


def test_expire_and_gc_write_nothing_so_the_sweep_role_cannot_forge_history() -> None:
    # What the sweep role may do is what expire and gc send: with no PUT among them, its
    # policy grants none (tests/test_terraform.py), and no head it could write (a forged
    # one, with an inline tail from seq 0, would verify) exists to be written.
    _store, clock, log, ids = _world()
    seen: list[Op] = []
    core = log._core
    log._run(recorded(core.expire(timedelta(days=30), None, False, None), seen))
    clock.t += 2 * 3_600_000
    log._run(recorded(protocol.gc(core.layout, older_than_ms=3_600_000, now=clock.t, dry_run=False), seen))
    flat = [o for op in seen for o in (op.ops if isinstance(op, Parallel) else (op,))]
    assert {type(o).__name__ for o in flat} == {"Get", "ListKeys", "DeleteIfMatch", "Delete"}, flat
    assert sorted(o.key for o in flat if isinstance(o, DeleteIfMatch)) == sorted(
        log.layout.head(ids[n]) for n in ("idle1", "idle2"))
    assert not [k for k in _store.all_keys() if ids["idle1"] in k or ids["idle2"] in k]


def test_a_session_committed_to_during_the_sweep_is_kept() -> None:
    store, _clock, log, ids = _world()
    writer = log.open(ids["idle1"])

    real = store.delete_if_match
    fired: list[bool] = []

    def racing(key: str, etag: str) -> None:
        if not fired:
            fired.append(True)
            writer.append("k", "just in time")
            writer.commit()  # lands between the sweep's read and its DELETE
        real(key, etag)

    store.delete_if_match = racing  # type: ignore[method-assign]
    report = log.expire(idle_for=timedelta(days=30), labels={"tenant": "t1"})
    assert report.raced == [ids["idle1"]] and report.expired == []
    assert log.read(ids["idle1"]).entries[-1].data == "just in time"


def test_a_writer_that_commits_after_expiry_is_told_the_session_is_gone() -> None:
    store, clock, log, ids = _world()
    writer = log.open(ids["idle1"])
    child = log.fork(ids["idle1"], meta={"labels": {"tenant": "x"}})
    clock.t += 40 * DAY_MS
    busy = log.open(child)
    busy.append("k", "child lives")
    busy.commit()
    assert ids["idle1"] in log.expire(idle_for=timedelta(days=30), labels={"tenant": "t1"}).expired
    writer.append("k", "late")
    with pytest.raises(s3log.SessionNotFound):
        writer.commit()  # its If-Match PUT meets 404: nothing stored, nothing acknowledged
    assert log.layout.head(ids["idle1"]) not in store.all_keys()
    # Forks of the expired session stay readable; their lineage ends at the parent.
    steps = log.lineage(child)
    assert [(s.session, s.parent) for s in steps][1] == (ids["idle1"], None)
    assert log.read(child).entries[-1].data == "child lives"
    # The id is free: a new session may start there, and its leftovers go to gc.
    again = log.create(ids["idle1"])
    acked = again.append_durable("k", "new life")
    clock.t += 2 * 3_600_000
    log.gc(older_than_ms=3_600_000)
    assert [e.hash for e in log.read(ids["idle1"]).entries] == [acked.hash]


def test_gc_collects_an_expired_session() -> None:
    store, _clock, log, ids = _world()
    sid = ids["idle1"]
    segments = log.head(sid).segments
    assert segments
    log.expire(idle_for=timedelta(days=30), labels={"tenant": "t1"})
    # No head: its segments are unreferenced, and older than any grace.
    assert set(segments) <= set(log.gc(older_than_ms=3_600_000).deleted)
    assert not [k for k in store.all_keys() if f"/sessions/{sid}/" in k]
    with pytest.raises(s3log.SessionNotFound):
        log.read(sid)


class _NoConditionalDelete(s3log.MemoryStore):
    """A store that cannot make a DELETE conditional, as obstore cannot."""

    def delete_if_match(self, key: str, etag: str) -> None:
        raise s3log.errors.ConditionalDeleteUnsupported("no If-Match on DELETE here", key=key)


def _idle_on(store: s3log.MemoryStore) -> tuple[Clock, s3log.Log]:
    clock = Clock(T0)
    log = _log(store, clock)
    w = log.create("idle")
    w.append("k", {"pad": "x" * 50_000})
    w.commit()
    w.append("k", 2)
    w.commit()
    clock.t += 40 * DAY_MS
    return clock, log


def test_expire_refuses_a_store_without_conditional_delete_and_deletes_nothing() -> None:
    # A DELETE by key would delete a commit acknowledged since the head was read.
    store = _NoConditionalDelete()
    _clock, log = _idle_on(store)
    before = sorted(store.all_keys())
    store.requests.reset()
    with pytest.raises(s3log.errors.ConditionalDeleteUnsupported, match="expire needs"):
        log.expire(idle_for=timedelta(days=30))
    assert store.requests.snapshot()["DELETE"] == 0 and sorted(store.all_keys()) == before
    assert log.read("idle").entries


def test_gc_keeps_a_tombstone_on_a_store_without_conditional_delete() -> None:
    store = _NoConditionalDelete()
    clock, log = _idle_on(store)
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["idle"]
    clock.t += 2 * 3_600_000
    report = log.gc(older_than_ms=3_600_000)
    assert log.layout.head("idle") in report.unreferenced and log.layout.head("idle") not in report.deleted
    assert [k for k in store.all_keys() if "/sessions/idle/" in k] == [log.layout.head("idle")]
    with pytest.raises(s3log.SessionExpired):
        log.read("idle")
    assert log.delete("idle") == 1


class _TakeoverBeforeDelete(s3log.MemoryStore):
    """Runs ``hook`` once just before a head is deleted: what another process does
    between gc's read of a tombstone and its DELETE of it."""

    hook = None

    def delete_if_match(self, key: str, etag: str) -> None:
        if key.endswith("/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().delete_if_match(key, etag)


def _expired_past_grace(store: s3log.MemoryStore) -> s3log.Log:
    """A log over ``store`` whose session "thread-7" was tombstoned over an hour ago (gc's grace)."""
    clock = Clock(T0)
    log = _log(store, clock)
    log.create("thread-7").append_durable("k", "old")
    clock.t += 40 * DAY_MS
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["thread-7"]
    clock.t += 2 * 3_600_000
    return log


def test_gc_never_deletes_a_session_that_took_over_a_tombstone_it_read() -> None:
    store = _TakeoverBeforeDelete()
    log = _expired_past_grace(store)
    acked: list[s3log.Entry] = []
    store.hook = lambda: acked.append(log.create("thread-7").append_durable("k", "after expiry"))
    report = log.gc(older_than_ms=3_600_000)
    assert acked and log.layout.head("thread-7") not in report.deleted
    assert [e.hash for e in log.read("thread-7").entries] == [acked[0].hash]


def test_expire_refuses_bad_arguments_before_reading_anything() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    for bad in (0, -5, timedelta(0), "30d", None):
        with pytest.raises(s3log.S3LogError, match="idle_for"):
            log.expire(idle_for=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="labels"):
        log.expire(idle_for=1000, labels=["tenant"])  # type: ignore[arg-type]
    assert store.requests.total == 0


def test_expired_activity_days_are_pruned() -> None:
    store, _clock, log, _ids = _world()
    report = log.expire(idle_for=timedelta(days=30))
    assert report.pruned_days == [day_of(T0)]
    assert not [k for k in store.all_keys() if f"/activity/{day_of(T0)}/" in k]


async def test_async_expire_and_listing() -> None:
    store, clock, log, ids = _world()
    alog = s3log.AsyncLog(s3log.AsyncMemoryStore(store), config=log.config)
    newest = [i.session_id async for i in alog.list_sessions(limit=2)]
    assert newest == sorted(ids.values(), reverse=True)[:2]
    report = await alog.expire(idle_for=timedelta(days=30))
    assert sorted(report.expired) == sorted([ids["idle1"], ids["idle2"]])
    assert (await alog.active_sessions(since=clock.t - DAY_MS)).ids == [ids["busy"]]


def test_cli_expire_and_ls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3log_server: Any) -> None:
    from s3log.cli.app import app

    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    made = [log.create(meta={"labels": {"tenant": f"t{i % 2}"}}).session_id for i in range(4)]
    env = {"S3LOG_BUCKET": bucket, "AWS_ENDPOINT_URL": s3log_server.endpoint_url}
    runner = CliRunner()
    out = runner.invoke(app, ["ls", "--max-items", "2", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert [r["session"] for r in json.loads(out.stdout)] == made[::-1][:2]
    out = runner.invoke(app, ["ls", "--label", "tenant=t1", "--json"], env=env)
    assert sorted(r["session"] for r in json.loads(out.stdout)) == sorted(made[1::2])
    out = runner.invoke(app, ["expire", "--idle", "1ms", "--label", "tenant=t0", "--dry-run", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert sorted(json.loads(out.stdout)["expired"]) == sorted(made[0::2])
    out = runner.invoke(app, ["expire", "--idle", "1ms", "--label", "tenant0"], env=env)
    assert out.exit_code != 0 and "NAME=VALUE" in out.output
    out = runner.invoke(app, ["expire", "--idle", "1ms"], env=env)
    assert out.exit_code == 0 and "expired 4" in out.stdout


class _GcBeforeHeadPut(s3log.MemoryStore):
    """Runs ``hook`` once just before a head is replaced with If-Match."""

    hook = None

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if key.endswith("/head") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return super().put_if_match(key, body, etag)


def test_a_takeover_whose_tombstone_gc_deletes_first_creates_the_session() -> None:
    store = _GcBeforeHeadPut()
    log = _expired_past_grace(store)
    reports: list[s3log.GcReport] = []
    store.hook = lambda: reports.append(log.gc(older_than_ms=3_600_000))
    acked = log.create("thread-7").append_durable("k", "new")  # its If-Match PUT meets 404
    assert reports and log.layout.head("thread-7") in reports[0].deleted
    assert [e.hash for e in log.read("thread-7").entries] == [acked.hash]


def test_the_public_activity_keep_days_is_the_one_expire_prunes_by() -> None:
    """``s3log.config.ACTIVITY_KEEP_DAYS`` (what ``s3log rm`` tells) is retention's own."""
    from s3log._protocol import retention
    from s3log.config import ACTIVITY_KEEP_DAYS

    assert ACTIVITY_KEEP_DAYS == retention.ACTIVITY_KEEP_DAYS
