"""gc: it deletes only what no head can name any more.

An unreferenced segment is kept twice the commit deadline; a head is deleted only with
If-Match, so a takeover cannot be lost; a head that changed after the listing is kept; a
delete gc could not make is reported (and fails the command), naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log._format.codec import decode_head
from s3log._protocol import delete
from s3log.config import LogConfig
from s3log.env import Env
from s3log.errors import (
    PreconditionFailed,
    StoreError,
)
from tests.delete_hooks import Clock
from tests.helpers import DEADLINE, commit_until, deadline_log, head_of, writer_beside_gc
from tests.test_pending_hostile import ClockStore
from tests.tombstones import tombstone_idle


def test_gc_waits_twice_the_deadline_for_an_unreferenced_segment() -> None:
    """The bound itself: an orphan (a segment whose head never landed) is kept until it
    is older than landing_bound_ms, then collected."""
    clock = Clock()
    store = ClockStore(clock)
    log = deadline_log(store, clock, pending_max_bytes=0)
    w = log.create("s1")
    w.append("msg", {"text": "x" * 2000})
    lost: list[str] = []

    def never_lands(key: str, body: bytes) -> None:
        lost.append(decode_head(body, key).segments[-1])
        raise PreconditionFailed("another writer moved on", key=key)

    store.before_head = never_lands
    with pytest.raises(s3log.S3LogError):
        w.commit()
    store.before_head = lambda key, body: None
    assert lost and lost[0] in store.all_keys()
    clock.t += delete.landing_bound_ms(DEADLINE) - 1
    assert lost[0] not in log.gc(older_than_ms=0).deleted
    clock.t += 2
    assert lost[0] in log.gc(older_than_ms=0).deleted


def test_gc_decides_nothing_against_a_head_in_flight_past_the_deadline() -> None:
    clock = Clock()
    store = ClockStore(clock)
    _log, gc_store, gc_log, w = writer_beside_gc(store, clock, pending_max_bytes=0)
    ran: list[str] = []

    def slow(key: str, body: bytes) -> None:
        if ran or not decode_head(body, key).segments:
            return
        clock.t += DEADLINE + 1  # sent in time, lands past the deadline
        gc_log.gc(older_than_ms=0)  # gc reads the old head: the segment is unreferenced
        ran.append("ran")

    store.before_head = slow
    acked = commit_until(w, ran)
    assert ran == ["ran"]
    gc_store.apply()  # gc's DELETEs, sent before the head landed, arrive after the ack
    keys = set(store.all_keys())
    assert not [k for k in head_of(store).segments if k not in keys]
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]
    w.append("msg", {"i": 99})
    acked += w.commit().acked  # and the writer goes on
    assert [e.hash for e in s3log.Log(store).read("s1").entries] == [e.hash for e in acked]


class _RefusesMarkerDeletes(s3log.MemoryStore):
    """A store whose conditional DELETE of a fork marker is refused (access denied: a
    role without s3:GetObject on markers, which S3 requires for an If-Match DELETE)."""

    def delete_if_match(self, key: str, etag: str) -> None:
        if "/forks/" in key:
            self.requests.add("DELETE")
            raise StoreError("AccessDenied: Access Denied", key=key, code="AccessDenied", status=403)
        super().delete_if_match(key, etag)


def test_gc_reports_a_delete_it_could_not_make() -> None:
    # It left such a marker out of `deleted` and said nothing: gc looked done.
    store = _RefusesMarkerDeletes()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    w.commit()
    marker = f"{log.layout.forks_dir(w.session_id)}{'0' * 8}-0000-7000-8000-{'0' * 12}"
    store.put_raw(marker, b"", mtime_ms=0)  # dangling: no such child
    report = log.gc(older_than_ms=0)
    assert marker in report.unreferenced and marker not in report.deleted
    assert list(report.failed) == [marker] and "AccessDenied" in report.failed[marker]
    assert store.get(marker).body == b""  # still there
    assert log.gc(older_than_ms=0, dry_run=True).failed == {}


def test_gc_command_fails_naming_the_key_it_could_not_delete(env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from s3log.cli.app import app
    from tests.cli_env import log_of

    log = log_of(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    marker = f"{log.layout.forks_dir(w.session_id)}{'0' * 8}-0000-7000-8000-{'0' * 12}"
    log.store.client.put_object(Bucket=env["S3LOG_BUCKET"], Key=marker, Body=b"")

    def refuse(self: s3log.S3Store, key: str, etag: str) -> None:
        raise StoreError("AccessDenied: Access Denied", key=key, code="AccessDenied", status=403)

    monkeypatch.setattr(s3log.S3Store, "delete_if_match", refuse)
    # A day on: the marker is past gc's grace (twice the commit deadline at least).
    monkeypatch.setattr(s3log.env.Env, "now_ms", lambda self: self.clock_ms() + 86_400_000)
    result = CliRunner().invoke(app, ["gc", "--older-than", "0s", "--json"], env=env)
    assert result.exit_code == 1, result.output
    assert marker in result.output and "AccessDenied" in result.output


T0 = 1_800_000_000_000

DAY = 86_400_000


class _GetHook(ClockStore):
    """A MemoryStore on a virtual clock (objects stamped by it); runs ``hook`` once, after the first GET of ``key``."""

    def __init__(self, clock: Clock, key: str) -> None:
        super().__init__(clock)
        self.key = key
        self.hook: Callable[[], None] | None = None

    def get(self, key: str) -> Any:
        out = super().get(key)
        if key == self.key and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return out


def test_a_slow_gc_does_not_delete_a_head_that_changed_after_its_listing() -> None:
    clock = Clock(T0)
    store = _GetHook(clock, "s3log/sessions/thread-1/head")
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(3, clock)))
    w = log.create("thread-1")
    w.append("k", "old")
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["thread-1"]
    clock.t += 2 * DAY
    acked: list[s3log.Entry] = []

    def overlap() -> None:  # once this gc has read the tombstone: another gc, then the app
        store.delete("s3log/sessions/thread-1/head")
        again = log.create("thread-1")
        again.append("k", "new")
        acked.extend(again.commit().acked)

    store.hook = overlap
    log.gc(older_than_ms=3_600_000)
    assert [e.hash for e in log.read("thread-1").entries] == [e.hash for e in acked]


class _NoHeadDeletes(s3log.MemoryStore):
    def delete(self, key: str) -> None:
        assert not key.endswith("/head"), f"gc deleted the head {key}"
        super().delete(key)


def test_gc_deletes_a_head_only_with_if_match_so_a_takeover_cannot_be_lost() -> None:
    # gc deletes a tombstone only with If-Match on the ETag it read, never by key
    # (tests/test_retention.py races a takeover against that DELETE).
    clock, store = Clock(T0), _NoHeadDeletes()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, clock), tail_per_commit=0))
    w = log.create("thread-7")
    for i in range(3):
        w.append("k", {"i": i, "pad": "x" * 20_000})
        w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["thread-7"]
    acked = log.create("thread-7").append_durable("k", "after expiry")  # takes the id over
    clock.t += 2 * 3_600_000
    report = log.gc(older_than_ms=3_600_000)  # the expired session's segments; the head is the new one
    assert report.deleted and all("/seg/" in k for k in report.deleted)
    assert [e.hash for e in log.read("thread-7").entries] == [acked.hash]
