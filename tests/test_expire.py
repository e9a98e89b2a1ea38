"""Expiry: tombstones, the grace period, readers and verifiers of a session that expires under them,
and ids taken over once expired, signed or not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig
from s3log.env import Env
from s3log.errors import (
    InvalidArgumentError,
    SessionExists,
)
from tests.cli_env import log_of
from tests.delete_hooks import Clock
from tests.helpers import expired_world
from tests.test_pending_hostile import ClockStore
from tests.tombstones import tombstone_idle


@pytest.mark.parametrize("idle_for", [timedelta(days=999_999_999), 10**30])
def test_expire_refuses_an_idle_threshold_past_what_a_date_holds(idle_for: Any) -> None:
    """``Log.expire`` with a huge ``idle_for`` raised a raw ValueError / OverflowError
    from the day index; it is an InvalidArgumentError naming the argument."""
    log = s3log.Log(s3log.MemoryStore())
    log.create().append_durable("k", 1)
    with pytest.raises(InvalidArgumentError, match="idle_for"):
        log.expire(idle_for=idle_for, dry_run=True)


T0 = 1_800_000_000_000

DAY = 86_400_000

MIN = 60_000


class _SlowHeads(ClockStore):
    """A MemoryStore on a virtual clock (objects stamped by it); while ``slow``, each head GET takes that many ms."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.slow = 0
        self.on_segment: Callable[[], None] | None = None

    def get(self, key: str) -> Any:
        if key.endswith("/head"):
            self.clock.t += self.slow
        if "/seg/" in key and self.on_segment is not None:
            hook, self.on_segment = self.on_segment, None
            hook()
        return super().get(key)


def _sweeper(log: s3log.Log, store: s3log.MemoryStore, then: str) -> Callable[[], None]:
    """What runs between a reader's head GET and its segment GETs: session s000 expires and
    its segments are collected (with ``then`` "deleted", its tombstone too)."""
    def sweep_and_collect() -> None:
        assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["s000"]
        for key in [k for k in store.all_keys() if "/seg/" in k]:
            store.delete(key)
        if then == "deleted":
            store.delete(log.layout.head("s000"))
    return sweep_and_collect


def _segmented(clock: Clock, n: int) -> tuple[_SlowHeads, s3log.Log, list[str]]:
    store = _SlowHeads(clock)
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(5, clock), tail_per_commit=0, tail_max_bytes=256,
                                            pending_max_bytes=0))
    ids = []
    for i in range(n):
        w = log.create(f"s{i:03d}")
        for j in range(3):
            w.append("k", {"j": j, "pad": "x" * 300})  # every commit writes a segment
            w.commit()
        ids.append(w.session_id)
    return store, log, ids


@pytest.mark.parametrize("then", ["expired", "deleted"])
def test_a_reader_whose_session_goes_under_it_is_told_so_not_corrupt(then: str) -> None:
    clock = Clock(T0)
    store, log, _ = _segmented(clock, 1)
    clock.t += 40 * DAY

    store.on_segment = _sweeper(log, store, then)
    with pytest.raises(s3log.SessionExpired if then == "expired" else s3log.SessionNotFound):
        log.read("s000")


def test_verify_all_does_not_call_an_expired_session_broken(env: dict[str, str]) -> None:
    from typer.testing import CliRunner

    from s3log.cli.app import app

    clock = Clock(T0)
    log = log_of(env, LogConfig(env=Env.deterministic(3, clock)))
    old = log.create()
    old.append("k", 1)
    old.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [old.session_id]
    live = log.create()
    live.append("k", 2)
    live.commit()
    result = CliRunner().invoke(app, ["verify", "--all", "--json"], env=env)
    report = json.loads(result.output)
    assert report["broken"] == [] and report["verified"] == 1, report
    assert report["expired_or_deleted"] == [old.session_id]
    assert result.exit_code == 0
    # Asked for by name, an expired session is still an error.
    named = CliRunner().invoke(app, ["verify", old.session_id, "--json"], env=env)
    assert named.exit_code == 1


def test_creating_an_expired_id_takes_it_over_lazy_or_not() -> None:
    _store, _clock, log = expired_world("thread-7")
    eager = log.create("thread-7")  # was SessionExists until gc removed the tombstone
    eager.append("k", "eager")
    eager.commit()
    assert [e.data for e in log.read("thread-7").entries] == ["eager"]
    _store2, _clock2, log2 = expired_world("thread-9")
    lazy = log2.create("thread-9", lazy=True)
    lazy.append("k", "lazy")
    lazy.commit()  # its create-only PUT meets the tombstone
    assert [e.data for e in log2.read("thread-9").entries] == ["lazy"]
    # A live id is still taken.
    with pytest.raises(SessionExists):
        log.create("thread-7")


def _signed_world() -> tuple[Clock, s3log.Log]:
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer, PublicKeyVerifier

    key = Ed25519PrivateKey.generate()
    clock = Clock(T0)
    cfg = LogConfig(env=Env.deterministic(1, clock), signer=Ed25519Signer(key),
                    verifier=PublicKeyVerifier([key.public_key()]))
    log = s3log.Log(s3log.MemoryStore(), config=cfg)
    w = log.create("thread-1")
    w.append("k", 1)
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["thread-1"]
    clock.t += 2 * DAY
    log.gc(older_than_ms=3 * DAY)  # within its grace the tombstone stays
    return clock, log


def test_a_verifying_reader_of_an_expired_session_is_told_expired_not_corrupt() -> None:
    _clock, log = _signed_world()
    with pytest.raises(s3log.SessionExpired):
        log.read("thread-1")


def test_an_expired_id_can_be_created_again_under_a_verifying_log() -> None:
    _clock, log = _signed_world()
    w = log.create("thread-1")
    w.append("k", 2)
    w.commit()
    assert [e.data for e in log.read("thread-1").entries] == [2]


def test_append_latest_takes_over_an_expired_id_under_a_verifying_log() -> None:
    _clock, log = _signed_world()
    log.append_latest("thread-1", [("msg", "again")], create_meta={})
    assert [e.data for e in log.read("thread-1").entries] == ["again"]


class _SegmentHook(s3log.MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.on_segment: Callable[[], None] | None = None

    def get(self, key: str) -> Any:
        if "/seg/" in key and self.on_segment is not None:
            hook, self.on_segment = self.on_segment, None
            hook()
        return super().get(key)


@pytest.mark.parametrize("then", ["expired", "deleted"])
def test_read_suffix_of_a_session_collected_under_it_is_not_corrupt(then: str) -> None:
    clock = Clock(T0)
    store = _SegmentHook()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(5, clock), tail_per_commit=0, tail_max_bytes=256,
                                            pending_max_bytes=0))
    w = log.create("s000")
    for j in range(3):
        w.append("k", {"j": j, "pad": "x" * 300})
        w.commit()
    assert log.head("s000").segments
    clock.t += 40 * DAY

    store.on_segment = _sweeper(log, store, then)
    with pytest.raises(s3log.SessionExpired if then == "expired" else s3log.SessionNotFound):
        log.read_suffix("s000", lambda entries: len(entries) >= 3)


def test_a_tombstone_head_says_it_is_expired_and_a_live_one_does_not() -> None:
    """``Head.expired``: what a caller walking heads (an agent's ``follow_forks``) skips."""
    clock = Clock()
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(env=Env.deterministic(7, clock)))
    old = log.create("old")
    old.append("k", 1)
    old.commit()
    clock.t += 31 * 86_400_000
    live = log.create("live")
    live.append("k", 2)
    live.commit()
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["old"]
    rows = {r.session: r.head for r in log.heads(["old", "live"])}
    assert rows["old"] is not None and rows["old"].expired
    assert rows["live"] is not None and not rows["live"].expired
