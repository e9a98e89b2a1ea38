"""Session 8's second hostile review, of the commit journal (decision 0031): each
test failed on the commit that introduced it.

- A doubt about a fork's child made the next commit look for the entries in the parent,
  where it took another writer's equal entry for its own (decision 0025 again).
- An entry queued after an undecided commit was looked for as if that commit had
  carried it, and another writer's equal entry was taken for it.
- A commit continuing in a doubted child treated the rest of its batch as never sent
  there, although an earlier continuation's PUT could still land: forked twice.
- A doubted child expired meanwhile (its head a tombstone with our creator) wedged the
  writer for ever.
- A commit that continued in a doubted child and forked again from there reported only
  the last fork.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import SessionExists, StoreError, TransientStoreError
from s3log.faults import FaultyStore
from tests.tombstones import tombstone_idle

from .test_review_s8 import lost_head_reply

T0 = 1_800_000_000_000
DAY = 86_400_000


def _fast(attempts: int = 2) -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=attempts, initial=0.0001, max_backoff=0.0002, max_time=1.0))


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t



def _undecided_fork(box: dict[str, Any]) -> Any:
    """A fault plan: while ``box["on"]``, a fork child's head lands with its reply lost and
    re-reading it fails (the fork is undecided); the session ``box["sid"]`` is left alone."""

    def plan(method: str, key: str) -> Any:
        if not box["on"] or not key.endswith("/head") or box["sid"] in key:
            return None
        if method == "put_if_absent":
            return "timeout-landed"  # the fork child's head lands, its reply is lost
        if method == "get":
            return "503"  # ...and re-reading it fails: the fork is undecided
        return None

    return plan


# ------------------------------------------------------------ f1_fork_doubt_adopts_equal_entries
# F1: an undecided *fork* makes the next commit look for its entries in the *parent*.

def test_undecided_fork_then_equal_entry_in_parent_is_not_acked_twice() -> None:
    inner = s3log.MemoryStore()
    box: dict[str, Any] = {"on": False, "sid": None}
    plan = _undecided_fork(box)

    log_a = s3log.Log(FaultyStore(inner, plan), config=_fast())
    w_a = log_a.create()
    sid = box["sid"] = w_a.session_id
    w_a.append("k", "a0")
    w_a.commit()

    w_b = s3log.Log(inner).open(sid)
    b_entry = w_b.append_durable("pop", {"item": 1}, ts=1_000)  # B pops item 1

    t = w_a.submit("pop", {"item": 1}, ts=1_000)  # A pops item 1 too (equal entry)
    box["on"] = True
    with pytest.raises(StoreError):
        w_a.wait(t)  # parent: definite 412; fork child: undecided
    box["on"] = False

    a_entry = w_a.wait(t)
    # A's entry must not be B's stored entry (acknowledged to two writers).
    assert not (w_a.session_id == sid and a_entry.hash == b_entry.hash and a_entry.seq == b_entry.seq), \
        "A was acknowledged B's entry as its own"
    # And A's payload is stored once across all sessions (B's copy is B's).
    plain = s3log.Log(inner)
    holders = [s for s in plain.list_session_ids() if s != sid
               for e in plain.read(s).entries if e.kind == "pop"]
    assert holders == [w_a.session_id]


# ------------------------------------------------------------ f1b_uncertainty_is_batch_wide
# F1b: "maybe landed" is decided for the whole batch, not per entry.

def test_entry_queued_after_an_undecided_commit_is_not_taken_from_another_writer() -> None:
    inner = s3log.MemoryStore()
    on = {"v": False}
    plan = lost_head_reply(lambda: on["v"])

    w_a = s3log.Log(FaultyStore(inner, plan), config=_fast(1)).create()
    sid = w_a.session_id
    w_a.append("k", "a0")
    w_a.commit()
    t1 = w_a.submit("pop", {"item": 1}, ts=1_000)
    on["v"] = True
    with pytest.raises(StoreError):
        w_a.commit()  # item 1 landed; A does not know
    on["v"] = False

    w_b = s3log.Log(inner).open(sid)  # B sees item 1 and pops item 2
    b_entry = w_b.append_durable("pop", {"item": 2}, ts=2_000)

    t2 = w_a.submit("pop", {"item": 2}, ts=2_000)  # A pops item 2 too, never sent before
    w_a.wait(t1)
    a_entry = w_a.wait(t2)
    assert a_entry.hash != b_entry.hash or w_a.session_id != sid, \
        "item 2 acknowledged to both writers"


# ------------------------------------------------------------ f2_continue_in_child_ghost
# F2: continuing in a doubted fork child with ``uncertain=False`` forks a landed entry again.

class GhostStore(s3log.MemoryStore):
    """Scripted faults on fork-child heads (keys outside ``parent``)."""

    def __init__(self) -> None:
        super().__init__()
        self.parent = "?"
        self.mode: str | None = None
        self.ghost: tuple[str, bytes, str] | None = None
        self.child_gets_fail = 0
        self.puts_lost = 0

    def _child_head(self, key: str) -> bool:
        return key.endswith("/head") and self.parent not in key

    def get(self, key: str) -> Any:
        if self._child_head(key) and self.child_gets_fail:
            self.child_gets_fail -= 1
            raise TransientStoreError("injected 503", key=key, code="SlowDown", status=503)
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        etag = super().put_if_absent(key, body)
        if self.mode == "fork-undecided" and self._child_head(key):
            self.mode = None
            self.child_gets_fail = 10  # the re-read fails too: undecided
            raise TransientStoreError("injected timeout (landed)", key=key, code="RequestTimeout")
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if self._child_head(key):
            if self.mode == "hold":  # in flight: lands later (or never)
                self.mode = "lose"
                self.ghost = (key, body, etag)
                raise TransientStoreError("injected timeout (in flight)", key=key, code="RequestTimeout")
            if self.mode == "lose":
                self.mode = None
                raise TransientStoreError("injected timeout (lost)", key=key, code="RequestTimeout")
            if self.mode == "land-ghost-first" and self.ghost is not None:
                self.mode = None
                g, self.ghost = self.ghost, None
                super().put_if_match(*g)  # the old request lands just now
        return super().put_if_match(key, body, etag)


def test_entry_continued_in_a_doubted_child_is_not_forked_again() -> None:
    store = GhostStore()
    log = s3log.Log(store, config=_fast())
    w = log.create()
    store.parent = sid = w.session_id
    w.append("k", "a0")
    w.commit()
    other = s3log.Log(store).open(sid)
    other.append("k", "b0")
    other.commit()  # w is behind: its next commit forks

    tx = w.submit("k", "x")
    store.mode = "fork-undecided"
    with pytest.raises(StoreError):
        w.commit()  # forks into C = [fork, x]; undecided
    store.child_gets_fail = 0

    ty = w.submit("k", "y")
    store.mode = "hold"
    with pytest.raises(StoreError):
        w.commit()  # continues in C: its PUT of y is in flight, then given up
    assert w.status(ty) == "uncertain"

    store.mode = "land-ghost-first"
    assert w.wait(tx).data == "x"
    assert w.wait(ty).data == "y"

    plain = s3log.Log(store)
    holders = sorted(s for s in plain.list_session_ids()
                     for e in plain.read(s).entries if e.kind == "k" and e.data == "y")
    assert holders == [w.session_id], f"y stored in {len(holders)} sessions"


# ------------------------------------------------------------ f3_doubted_child_expired_is_stuck
# F3: a doubted fork child that was expired meanwhile wedges the writer forever.

def test_writer_recovers_when_its_doubted_fork_child_was_expired() -> None:
    clock = Clock(T0)
    inner = s3log.MemoryStore()
    box: dict[str, Any] = {"on": False, "sid": "?"}

    def plan(method: str, key: str) -> Any:
        if not box["on"] or not key.endswith("/head") or box["sid"] in key:
            return None
        if method == "put_if_absent":
            return "timeout-landed"
        return "503" if method == "get" else None

    cfg = LogConfig(env=Env.deterministic(1, clock),
                    retry=RetryPolicy(attempts=2, initial=0.0001, max_backoff=0.0002, max_time=1.0))
    log = s3log.Log(FaultyStore(inner, plan), config=cfg)
    w = log.create()
    box["sid"] = sid = w.session_id
    w.append("k", "a0")
    w.commit()
    other = s3log.Log(inner, config=LogConfig(env=Env.deterministic(2, clock))).open(sid)
    other.append("k", "b0")
    other.commit()

    t = w.submit("k", "x")
    box["on"] = True
    with pytest.raises(StoreError):
        w.commit()  # the fork's child head lands; this writer does not know
    box["on"] = False

    clock.t += 40 * DAY
    sweeper = s3log.Log(inner, config=LogConfig(env=Env.deterministic(3, clock)))
    assert len(tombstone_idle(sweeper, idle_for=timedelta(days=30)).expired) == 2  # parent and child

    # The writer must be able to make x durable somewhere readable (fork anew), not be
    # wedged with an uncertain entry it can neither commit nor withdraw.
    for _ in range(3):
        try:
            entry = w.wait(t)
            break
        except StoreError:
            continue
    else:
        pytest.fail(f"wedged: every commit raises; ticket is {w.status(t)!r}, withdraw={w.withdraw(t)}")
    assert entry.data == "x"
    assert [e.data for e in sweeper.read(w.session_id).entries][-1] == "x"


# ------------------------------------------------------------ f4_one_commit_two_forks_reports_one
# F4 (minor, API): a commit that continues in a doubted child and then forks again

def test_every_fork_of_a_commit_is_reported() -> None:
    store = GhostStore()
    seen: list[s3log.ForkInfo] = []
    log = s3log.Log(store, config=_fast())
    w = log.create(on_fork=seen.append)
    store.parent = sid = w.session_id
    w.append("k", "a0")
    w.commit()
    other = s3log.Log(store).open(sid)
    other.append("k", "b0")
    other.commit()
    tx = w.submit("k", "x")
    store.mode = "fork-undecided"
    with pytest.raises(StoreError):
        w.commit()
    store.child_gets_fail = 0
    # Someone else writes to the child (it is a readable session) before w retries.
    child = s3log.Log(store).children(sid)[0]
    c = s3log.Log(store).open(child)
    c.append("k", "c0")
    c.commit()
    ty = w.submit("k", "y")
    w.wait(tx)
    w.wait(ty)
    assert w.session_id not in (sid, child)  # forked twice: sid -> child -> grandchild
    assert [f.parent.session for f in seen] == [sid, child]


# ------------------------------------------------------------ gc and a tombstone taken over
# gc deleted a tombstone by key after reading it: a session that took the id over (If-Match
# on the tombstone) in between lost its head and its acknowledged entries.


class _NoHeadDeletes(s3log.MemoryStore):
    def delete(self, key: str) -> None:
        assert not key.endswith("/head"), f"gc deleted the head {key}"
        super().delete(key)


def test_gc_deletes_a_head_only_with_if_match_so_a_takeover_cannot_be_lost() -> None:
    # Session 8: gc deleted tombstones by key; session 9: only with If-Match on the
    # ETag it read (tests/test_retention.py races a takeover against that DELETE).
    clock, store = Clock(T0), _NoHeadDeletes()
    log = s3log.Log(store, config=LogConfig(env=Env.deterministic(1, clock), tail_per_commit=0))
    w = log.create("thread-7")
    for i in range(3):
        w.append("k", {"i": i, "pad": "x" * 20_000})
        w.commit()
    clock.t += 40 * DAY
    assert log.expire(idle_for=timedelta(days=30)).expired == ["thread-7"]
    acked = log.create("thread-7").append_durable("k", "after expiry")  # takes the id over
    clock.t += 2 * 3_600_000
    report = log.gc(older_than_ms=3_600_000)  # the expired session's segments; the head is the new one
    assert report.deleted and all("/seg/" in k for k in report.deleted)
    assert [e.hash for e in log.read("thread-7").entries] == [acked.hash]


# ------------------------------------------------------------ the third review
# A doubt about a child was replaced by one about a grandchild (doubts are now kept per
# parent position); entries never sent to a doubted child were looked for there and
# matched to another writer's equal entry (a doubt now says how many its PUTs carried).


def test_fork_doubt_of_the_child_survives_a_grandchild_fork() -> None:
    inner = s3log.MemoryStore()
    box: dict[str, Any] = {"on": False, "spare": ()}

    def plan(method: str, key: str) -> Any:
        if not box["on"] or not key.endswith("/head") or any(s in key for s in box["spare"]):
            return None
        if method == "put_if_absent":
            return "timeout-landed"  # a new child's head lands, its reply is lost
        if method == "get":
            return "503"  # ...and re-reading it fails: the fork is undecided
        return None

    log_a = s3log.Log(FaultyStore(inner, plan), config=_fast())
    w_a = log_a.create()
    p = w_a.session_id
    w_a.append("k", "a0")
    w_a.commit()

    plain = s3log.Log(inner)
    plain.open(p).append_durable("k", "b0")  # B moves the parent: A's next commit forks

    t1 = w_a.submit("k", "e1")
    box.update(on=True, spare=(p,))
    with pytest.raises(StoreError):
        w_a.commit()  # parent 412; fork child C1 holds [fork, e1], undecided
    box["on"] = False
    assert w_a.status(t1) == "uncertain"
    (c1,) = plain.children(p)
    plain.open(c1).append_durable("k", "d0")  # D writes in C1 after A's entries

    t2 = w_a.submit("k", "e2")
    box.update(on=True, spare=(p, c1))
    with pytest.raises(StoreError):
        # parent 412 -> C1 again (finds [fork, e1]) -> continue e2 there -> 412 (D) ->
        # fork from C1 into grandchild G: its head lands, undecided.
        w_a.commit()
    box["on"] = False

    w_a.wait(t1)
    w_a.wait(t2)

    holders: dict[str, list[str]] = {}
    for sid in plain.list_session_ids():
        for e in plain.read(sid).entries:
            if e.kind == "k" and e.data in ("e1", "e2"):
                holders.setdefault(e.data, []).append(sid)
    assert all(len(v) == 1 for v in holders.values()), f"entries stored in several sessions: {holders}"


def test_entry_never_sent_to_a_doubted_child_is_not_taken_from_another_writer_there() -> None:
    inner = s3log.MemoryStore()
    box: dict[str, Any] = {"on": False, "sid": None}
    plan = _undecided_fork(box)

    w_a = s3log.Log(FaultyStore(inner, plan), config=_fast()).create()
    p = box["sid"] = w_a.session_id
    w_a.append("k", "a0")
    w_a.commit()
    plain = s3log.Log(inner)
    plain.open(p).append_durable("k", "b0")  # the parent moves: A's next commit forks

    t1 = w_a.submit("pop", {"item": 1}, ts=1_000)
    box["on"] = True
    with pytest.raises(StoreError):
        w_a.commit()  # child C1 holds [fork, item 1]; A does not know
    box["on"] = False

    (c1,) = plain.children(p)
    w_d = plain.open(c1)  # D works in C1: sees item 1 popped, pops item 2
    d_entry = w_d.append_durable("pop", {"item": 2}, ts=2_000)

    t2 = w_a.submit("pop", {"item": 2}, ts=2_000)  # A pops item 2 too: never sent anywhere
    w_a.wait(t1)
    a_entry = w_a.wait(t2)
    assert not (w_a.session_id == c1 and a_entry.hash == d_entry.hash and a_entry.seq == d_entry.seq), \
        "D's entry in the child was acknowledged to A as its own"


# ------------------------------------------------------------ ids after a virtual clock
# An id minted on a clock far ahead (a test's virtual one) made every later id of the
# process carry that future time: sessions created after it looked young to expire.


def test_an_id_on_a_far_future_clock_does_not_date_later_ids() -> None:
    import time

    from s3log.ids import uuid7

    uuid7(int(time.time() * 1000) + 40 * DAY)
    now = int(time.time() * 1000)
    later = uuid7()
    ms = int(later.replace("-", "")[:12], 16)
    assert now - 1_000 <= ms <= now + 60_000
    # Ids of one clock stay ordered, within a millisecond and across a small step back.
    a, b = uuid7(now + 100), uuid7(now + 50)
    assert a < b


# ------------------------------------------------------------ the fourth review
# A create (lazy, or taking over an expired id, or append_latest's takeover) whose PUT
# never landed, while another creator wrote an equal first entry: the other creator's
# head has another creator nonce, which proves ours never landed, but the commit looked
# for its entries there and acknowledged the other writer's as its own.


def _cfg_seeded(clock: Clock, seed: int) -> LogConfig:
    return LogConfig(env=Env.deterministic(seed, clock), activity_index=False,
                     retry=RetryPolicy(attempts=3, initial=0.0001, max_backoff=0.0002, max_time=1.0))


def _expired_by(sid: str) -> tuple[Clock, s3log.MemoryStore]:
    clock, store = Clock(T0), s3log.MemoryStore()
    log = s3log.Log(store, config=_cfg_seeded(clock, 1))
    w = log.create(sid)
    w.append("k", "old")
    w.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [sid]
    return clock, store


def _racing(
    store: s3log.MemoryStore, sid: str, b_does: Any, methods: tuple[str, ...] = ("put_if_match",)
) -> FaultyStore:
    box = {"armed": True}

    def plan(method: str, key: str) -> Any:
        # A's If-Match PUT replacing the tombstone (the takeover) is the one intercepted.
        if box["armed"] and method in methods and key.endswith(f"/{sid}/head"):
            box["armed"] = False
            b_does()  # B takes the id over just before A's PUT ...
            return "timeout-lost"  # ... which never reaches the store; A sees a timeout
        return None

    return FaultyStore(store, plan)


def _assert_not_shared(a_acked: list[s3log.Entry], b_acked: list[s3log.Entry]) -> None:
    shared = {(e.seq, e.hash) for e in a_acked} & {(e.seq, e.hash) for e in b_acked}
    assert not shared, f"one stored entry acknowledged to both writers: {shared}"


@pytest.mark.parametrize(("sid", "batch"), [
    ("thread-1", [("msg", "hello"), ("msg", "two")]),  # another creator's prefix: not adopted
    ("thread-2", [("msg", "hello")]),  # another creator's equal batch: not acknowledged
])
def test_append_latest_takeover_undecided_does_not_ack_another_creators_equal_batch(
    sid: str, batch: list[tuple[str, Any]]
) -> None:
    clock, store = _expired_by(sid)
    b_acked: list[s3log.Entry] = []
    log_b = s3log.Log(store, config=_cfg_seeded(clock, 2))
    faulty = _racing(store, sid, lambda: b_acked.extend(
        log_b.append_latest(sid, [("msg", "hello")], create_meta={}).acked))
    log_a = s3log.Log(faulty, config=_cfg_seeded(clock, 3))
    a = log_a.append_latest(sid, batch, create_meta={})
    _assert_not_shared(a.acked, b_acked)


def test_lazy_create_over_a_tombstone_undecided_does_not_ack_another_creators_equal_batch() -> None:
    sid = "thread-3"
    clock, store = _expired_by(sid)
    b_acked: list[s3log.Entry] = []
    log_b = s3log.Log(store, config=_cfg_seeded(clock, 2))

    def b_takes_over() -> None:
        wb = log_b.create(sid, lazy=True)
        wb.append("msg", "hello")
        b_acked.extend(wb.commit().acked)

    faulty = _racing(store, sid, b_takes_over)
    # A's first PUT is its create-only one (it meets the tombstone, 412); the If-Match
    # takeover PUT after it is the one the plan intercepts.
    log_a = s3log.Log(faulty, config=_cfg_seeded(clock, 3))
    wa = log_a.create(sid, lazy=True)
    wa.append("msg", "hello")
    with pytest.raises(SessionExists):  # our takeover never landed: the id is B's now
        wa.commit()
    assert b_acked


def test_lazy_create_undecided_does_not_ack_another_creators_equal_batch() -> None:
    """The same without a tombstone (a plain lazy create; older than this session)."""
    clock, store = Clock(T0), s3log.MemoryStore()
    sid = "thread-4"
    b_acked: list[s3log.Entry] = []
    log_b = s3log.Log(store, config=_cfg_seeded(clock, 2))

    def b_creates() -> None:
        wb = log_b.create(sid, lazy=True)
        wb.append("msg", "hello")
        b_acked.extend(wb.commit().acked)

    faulty = _racing(store, sid, b_creates, methods=("put_if_absent",))
    wa = s3log.Log(faulty, config=_cfg_seeded(clock, 3)).create(sid, lazy=True)
    wa.append("msg", "hello")
    with pytest.raises(SessionExists):  # our create never landed: the id is B's
        wa.commit()
    assert b_acked


# A tombstone written under a signer kept the old head's signature, which no longer
# matched: a verifying reader called the expired session corrupt, and the id could not be
# taken over. read_suffix reported corruption when its session expired or went under it.


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

    def sweep_and_collect() -> None:  # between the reader's head GET and its segment GET
        assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == ["s000"]
        for key in [k for k in store.all_keys() if "/seg/" in k]:
            store.delete(key)
        if then == "deleted":
            store.delete(log.layout.head("s000"))

    store.on_segment = sweep_and_collect
    with pytest.raises(s3log.SessionExpired if then == "expired" else s3log.SessionNotFound):
        log.read_suffix("s000", lambda entries: len(entries) >= 3)
