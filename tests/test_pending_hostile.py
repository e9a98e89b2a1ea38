"""Pending segments under attack (one round trip per commit, docs/decisions/0024).

A flushing commit writes its segment beside the head; the head keeps the entries
inline and names the segment as ``pending`` until a writer that saw it stored moves
it into the manifest. These tests attack that: races between two promoting writers,
responses lost on either PUT of the pair, gc between a drop and a stale promotion,
merges promoted under readers holding the old head, heads forged or mangled by
someone with write access, format v1 writers, compaction, expiry, forks, async
cancellation. Each asserts what s3log promises: nothing acknowledged is lost or
duplicated, every stored chain reads, and no head ever lists a segment that is not
stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import s3log
from s3log._format.codec import decode_head, decode_segment, encode_head, encode_segment
from s3log._format.values import Pending
from s3log._protocol import delete, read, state
from s3log.config import RetryPolicy
from s3log.env import Env
from s3log.errors import CorruptionError, StoreError, TransientStoreError
from tests.delete_hooks import Clock
from tests.tombstones import tombstone_idle

TAIL = 1024
#: Backoffs are real sleeps in the blocking driver: keep them negligible.
FAST = RetryPolicy(initial=0.0001, max_backoff=0.0001)


class ClockStore(s3log.MemoryStore):
    """A MemoryStore stamping objects with a virtual clock (so gc's ages follow it),
    with a hook called before each conditional head PUT (it may raise to inject a fault)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.before_head: Callable[[str, bytes], None] = lambda key, body: None
        self.before_create: Callable[[str, bytes], None] = lambda key, body: None

    def put_if_absent(self, key: str, body: bytes) -> str:
        self.before_create(key, body)
        etag = super().put_if_absent(key, body)
        self.put_raw(key, body, mtime_ms=self.clock())
        return etag

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.before_head(key, body)
        new = super().put_if_match(key, body, etag)
        self.put_raw(key, body, mtime_ms=self.clock())
        return new


def _log(store: Any, clock: Clock, seed: int = 7, **kw: Any) -> s3log.Log:
    # Heads with a pending segment bounded at twice the tail bound, as the sizes here assume.
    kw.setdefault("pending_max_bytes", 2 * kw.get("tail_max_bytes", TAIL))
    cfg = s3log.LogConfig(env=Env.deterministic(seed, clock), tail_per_commit=0,
                          tail_max_bytes=kw.pop("tail_max_bytes", TAIL),
                          activity_index=False, retry=FAST, **kw)
    return s3log.Log(store, config=cfg)


def _head(store: s3log.MemoryStore, sid: str = "s1") -> s3log.Head:
    key = f"s3log/sessions/{sid}/head"
    return decode_head(store.get(key).body, key)


def _fill(w: s3log.Writer[Any], tag: str, n: int = 1, size: int = 300) -> None:
    for i in range(n):
        w.append("msg", {"tag": tag, "i": i, "text": "x" * size})


def _world(**kw: Any) -> tuple[Clock, ClockStore, s3log.Log, s3log.Writer[Any]]:
    """A log on a :class:`ClockStore` (config ``kw``) and a writer of a new session ``s1``."""
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock, **kw)
    return clock, store, log, log.create("s1")


def _two_logs() -> tuple[Clock, ClockStore, s3log.Log, s3log.Log, s3log.Writer[Any]]:
    """Two processes' logs (seeds 1 and 2) on one :class:`ClockStore`; the first's writer of ``s1``."""
    clock = Clock()
    store = ClockStore(clock)
    log_a, log_b = _log(store, clock, seed=1), _log(store, clock, seed=2)
    return clock, store, log_a, log_b, log_a.create("s1")


def _until_pending(store: s3log.MemoryStore, w: s3log.Writer[Any], tag: str, sid: str = "s1",
                   want: Callable[[s3log.Head], bool] = lambda h: True) -> list[s3log.Entry]:
    """Commit until the stored head names a pending segment (that ``want`` accepts)."""
    acked: list[s3log.Entry] = []
    for i in range(200):
        _fill(w, f"{tag}{i}")
        acked += w.commit().acked
        h = _head(store, sid)
        if h.pending is not None and want(h):
            return acked
    raise AssertionError("no commit wrote a segment beside its head")


def _sound(store: s3log.MemoryStore, log: s3log.Log, *sids: str) -> dict[str, list[s3log.Entry]]:
    """Every head lists only stored segments, and every chain reads; the chains."""
    keys = set(store.all_keys())
    out = {}
    for sid in sids:
        h = _head(store, sid)
        missing = [k for k in h.segments if k not in keys]
        assert not missing, f"head of {sid} lists segments that are not stored: {missing}"
        out[sid] = list(log.read(sid).entries)
    return out


def _payloads(entries: list[s3log.Entry]) -> list[tuple[str, int]]:
    return [(e.data["tag"], e.data["i"]) for e in entries if isinstance(e.data, dict) and "tag" in e.data]


# ------------------------------------------------------------------ the commit deadline


def test_a_head_put_retried_past_the_commit_deadline_never_leaves_a_promoted_segment_missing() -> None:
    """Defect: the parallel pair's head PUT was retried with no deadline.

    The segment lands beside a head PUT whose outcome is unknown (it never arrived);
    the head is retried later than the commit deadline, by which time gc rightly
    collected the segment (unreferenced, older than the deadline). The late head named
    it as pending and the writer, holding the 2xx of its PUT, promoted it: the session's
    head listed a segment that did not exist and the whole session became unreadable.
    Now a parallel commit, like a sequential one, gives up at its deadline.
    """
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock)
    gc_log = _log(store, clock, seed=8)
    w = log.create("s1")
    attempts: list[str] = []
    collected: list[str] = []

    def head_put(key: str, body: bytes) -> None:
        if decode_head(body, key).pending is None:
            return
        if attempts:  # a later attempt: gc ran meanwhile (its grace is the commit deadline)
            if not collected:
                collected.extend(gc_log.gc(older_than_ms=0).deleted)
            attempts.append("retry")
            return
        attempts.append("lost")
        clock.t += log.config.commit_deadline_ms + 1_000  # the request hangs; time passes
        raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")

    store.before_head = head_put
    acked: list[s3log.Entry] = []
    while not attempts:
        _fill(w, "a")
        try:
            acked += w.commit().acked
        except StoreError as exc:
            assert "deadline" in str(exc)
    store.before_head = lambda key, body: None
    for i in range(6):
        _fill(w, f"b{i}")
        acked += w.commit().acked
        assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]
    w2 = log.open("s1")  # a restoring writer too
    _fill(w2, "c")
    acked += w2.commit().acked
    assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]


# ------------------------------------------------------------------ the head's bound


def test_a_head_naming_a_pending_segment_stays_within_twice_the_tail_bound() -> None:
    """Defect: the mode was chosen from the head's size *before* the ``pending`` field
    was added, so a head just under twice the bound landed ~150 bytes over it."""
    worst = 0
    for size in range(1200, 2050, 5):
        clock = Clock()
        store = s3log.MemoryStore()
        log = _log(store, clock)
        w = log.create("s1")
        w.append("msg", {"tag": "t", "i": 0, "text": "x" * size})
        w.commit()
        body = store.get(log.layout.head("s1")).body
        worst = max(worst, len(body))
        assert len(body) <= 2 * TAIL, f"a {size}-byte entry left a {len(body)}-byte head"
        assert [e.data["i"] for e in log.read("s1").entries] == [0]
    assert worst > TAIL, "some heads held the entry inline beside a pending segment"


# ------------------------------------------------------------------ two writers, one pending segment


def test_two_writers_that_both_confirmed_a_pending_segment_cannot_both_promote_it() -> None:
    _clock, store, log_a, log_b, wa = _two_logs()
    acked = _until_pending(store, wa, "a")
    pending = _head(store).pending
    assert pending is not None and wa._core.ws.confirmed == pending.key  # its own PUT's 2xx
    wb = log_b.open("s1")
    assert wb._core.ws.confirmed == pending.key  # a GET verified against the chain
    _fill(wb, "b")
    acked += wb.commit().acked
    assert pending.key in _head(store).segments
    _fill(wa, "late")
    result = wa.commit()
    # A held the same head ETag: its promotion (and entries) could not land there.
    assert result.fork is not None and result.session_id != "s1"
    chains = _sound(store, log_a, "s1", result.session_id)
    assert _payloads(chains["s1"]) == _payloads(acked)
    assert _payloads(chains[result.session_id]) == [("late", 0)]


def test_a_promotion_by_a_lease_touch_is_adopted_by_the_writer_whose_entries_it_holds() -> None:
    """B restores, confirms A's pending segment and renews a lease (no entries): the head
    moved but ends with A's entries, so A adopts it and commits on top, no fork."""
    _clock, store, log_a, log_b, wa = _two_logs()
    acked = _until_pending(store, wa, "a")
    pending = _head(store).pending
    assert pending is not None
    wb = log_b.open("s1")
    wb._core.lease = state.LeasePlan("b", 60_000)
    wb.renew_lease()
    assert pending.key in _head(store).segments and _head(store).seq == acked[-1].seq
    _fill(wa, "after")
    result = wa.commit()
    assert result.fork is None and result.session_id == "s1"
    acked += result.acked
    assert _payloads(_sound(store, log_a, "s1")["s1"]) == _payloads(acked)


# ------------------------------------------------------------------ lost responses on the pair


@pytest.mark.parametrize("lose", ["segment", "head", "both"])
def test_lost_responses_on_the_parallel_pair_lose_nothing_and_reference_only_stored_segments(lose: str) -> None:
    """Both PUTs land, their responses are lost: the head is found by its nonce (or
    adopted); a segment whose 2xx was not seen is never trusted, and nothing dangles."""
    _clock, store, log, w = _world()
    # One flag per request: the pair goes out concurrently, in either order.
    armed = {"seg": True, "head": True}
    real_absent, real_match = store.put_if_absent, store.put_if_match

    def absent(key: str, body: bytes) -> str:
        etag = real_absent(key, body)
        if armed["seg"] and "/seg/" in key and lose in ("segment", "both"):
            raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")
        return etag

    def match(key: str, body: bytes, etag: str) -> str:
        new = real_match(key, body, etag)
        if armed["head"] and decode_head(body, key).pending is not None and lose in ("head", "both"):
            armed["head"] = False
            raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")
        return new

    store.put_if_absent = absent  # type: ignore[method-assign]
    store.put_if_match = match  # type: ignore[method-assign]
    acked = _until_pending(store, w, "a")
    armed["seg"] = armed["head"] = False
    pending = _head(store).pending
    assert pending is not None and pending.key in store.all_keys()
    if lose == "head":
        assert w._core.ws.confirmed == pending.key  # its 2xx was seen, the head found by nonce
    else:
        assert w._core.ws.confirmed is None  # 2xx not seen: a retry met 412 at best
    for i in range(5):
        _fill(w, f"b{i}")
        acked += w.commit().acked
    assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]


def test_a_crash_after_the_head_lands_beside_a_failed_segment_loses_nothing_on_restore() -> None:
    _clock, store, log, w = _world()

    def refuse(key: str, body: bytes) -> None:
        if "/seg/" in key:
            raise StoreError("injected: access denied", key=key)

    store.before_create = refuse
    acked = _until_pending(store, w, "a")
    pending = _head(store).pending
    assert pending is not None and pending.key not in store.all_keys()
    store.before_create = lambda key, body: None
    del w  # the process dies: the next writer restores
    w2 = log.open("s1")
    assert w2._core.ws.confirmed is None
    for i in range(5):
        _fill(w2, f"b{i}")
        acked += w2.commit().acked
    assert pending.key not in _head(store).segments
    assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]


def test_a_writer_adopting_its_own_landed_head_does_not_trust_the_pending_segment_it_names() -> None:
    """The head lands beside a refused segment, its response is lost and so is the
    re-read: the commit fails, its entries stay queued. The next commit meets its own
    head (412), adopts it, and must not take the segment that head names as confirmed."""
    _clock, store, log, w = _world()
    state = {"on": True}
    real_match, real_get = store.put_if_match, store.get

    def refuse(key: str, body: bytes) -> None:
        if state["on"] and "/seg/" in key:
            raise StoreError("injected: access denied", key=key)

    def match(key: str, body: bytes, etag: str) -> str:
        new = real_match(key, body, etag)
        if state["on"] and decode_head(body, key).pending is not None:
            state["lost"] = True
            raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")
        return new

    def get(key: str) -> s3log.Blob:
        if state.get("lost") and key.endswith("/head"):
            raise StoreError("injected: access denied", key=key)
        return real_get(key)

    store.before_create = refuse
    store.put_if_match = match  # type: ignore[method-assign]
    store.get = get  # type: ignore[method-assign]
    acked: list[s3log.Entry] = []
    for i in range(100):
        _fill(w, f"a{i}", size=300 + i)
        try:
            acked += w.commit().acked
        except StoreError:
            break
    assert state.get("lost"), "a head naming a pending segment landed with its response lost"
    state["on"] = False
    store.get = real_get  # type: ignore[method-assign]
    pending = _head(store).pending
    assert pending is not None and pending.key not in store.all_keys()
    for i in range(5):
        _fill(w, f"b{i}")
        acked += w.commit().acked
        assert pending.key not in _head(store).segments
        _sound(store, log, "s1")
    assert len(_payloads(acked)) == len(set(_payloads(acked)))
    assert _payloads(_sound(store, log, "s1")["s1"]) == _payloads(acked)


# ------------------------------------------------------------------ gc against stale promotion


def test_gc_collecting_a_dropped_pending_segment_cannot_break_a_writer_that_confirmed_it() -> None:
    """B confirmed S (by GET) while A, whose PUT of S lost its response, dropped it; gc
    collects S; B's promotion of S must not land anywhere."""
    clock, store, log_a, log_b, wa = _two_logs()
    real_absent = store.put_if_absent
    armed = [True]

    def absent(key: str, body: bytes) -> str:
        etag = real_absent(key, body)
        if armed[0] and "/seg/" in key:
            raise TransientStoreError("injected timeout (request landed)", key=key, code="RequestTimeout")
        return etag

    store.put_if_absent = absent  # type: ignore[method-assign]
    acked = _until_pending(store, wa, "a")
    armed[0] = False
    s = _head(store).pending
    assert s is not None and s.key in store.all_keys() and wa._core.ws.confirmed is None
    wb = log_b.open("s1")
    assert wb._core.ws.confirmed == s.key
    # A flushes again: it drops S (not confirmed by A) for a segment of its own.
    while (_head(store).pending or Pending("", 0, 0, 0)).key == s.key:
        _fill(wa, "a2")
        acked += wa.commit().acked
    assert s.key not in _head(store).segments
    clock.t += 3 * log_a.config.commit_deadline_ms
    assert s.key in log_a.gc(older_than_ms=0).deleted
    _fill(wb, "b")
    result = wb.commit()
    assert result.fork is not None
    chains = _sound(store, log_a, "s1", result.session_id)
    assert _payloads(chains["s1"]) == _payloads(acked)
    assert _payloads(chains[result.session_id]) == [("b", 0)]


def test_a_promoted_merge_keeps_the_segments_it_replaced_for_readers_of_the_old_head() -> None:
    """A pending segment merging ``take`` segments, promoted: a reader holding the head
    from before the promotion still reads the segments it lists for gc's grace period."""
    clock, store, log, w = _world(fanout=2)
    acked = _until_pending(store, w, "a", want=lambda h: h.pending is not None and h.pending.take > 0)
    old = _head(store)
    old_etag = store.get(log.layout.head("s1")).etag
    assert old.pending is not None and old.pending.take > 0
    replaced = old.segments[-old.pending.take:]
    _fill(w, "b")
    acked += w.commit().acked
    new = _head(store)
    assert old.pending.key in new.segments and not set(replaced) & set(new.segments)
    assert new.retired_at is not None
    grace = 60_000
    clock.t += grace - 1
    deleted = log.gc(older_than_ms=grace).deleted
    assert not set(replaced) & set(deleted)
    held = log._run(read.load_from_head(log.layout, old, old_etag))
    assert [e.hash for e in held.entries] == [e.hash for e in acked[: len(held.entries)]]
    clock.t += grace + delete.landing_bound_ms(log.config.commit_deadline_ms)
    assert set(replaced) <= set(log.gc(older_than_ms=grace).deleted)
    # Past the grace period a reader of the old head is sent to the new one.
    assert [e.hash for e in log._run(read.load_latest_from(log.layout, old, old_etag)).entries] == \
        [e.hash for e in acked]


# ------------------------------------------------------------------ hostile heads


def _forge(store: s3log.MemoryStore, log: s3log.Log, sid: str, change: Callable[[s3log.Head], s3log.Head]) -> None:
    key = log.layout.head(sid)
    blob = store.get(key)
    store.put_if_match(key, encode_head(change(decode_head(blob.body, key))), blob.etag)


@pytest.mark.parametrize("forge", ["take-huge", "last-negative", "last-beyond", "key-listed", "key-other-first",
                                   "take-wrong"])
def test_a_mangled_pending_field_is_never_promoted_and_the_chain_reads(forge: str) -> None:
    _clock, store, log, w = _world()
    acked = _until_pending(store, w, "a", want=lambda h: bool(h.segments))
    h = _head(store)
    p = h.pending
    assert p is not None
    bad = {
        "take-huge": replace(p, take=2**40),
        "last-negative": replace(p, last=-5),
        "last-beyond": replace(p, last=h.seq + 3),
        "key-listed": replace(p, key=h.segments[0]),
        "key-other-first": replace(p, key=p.key.replace("/seg/000000", "/seg/000001", 1)),
        "take-wrong": replace(p, take=p.take + 1),
    }[forge]
    _forge(store, log, "s1", lambda head: replace(head, pending=bad))
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]  # readers ignore pending
    w2 = log.open("s1")
    assert w2._core.ws.confirmed is None
    for i in range(4):
        _fill(w2, f"b{i}")
        acked += w2.commit().acked
    assert bad.key not in _head(store).segments or bad.key in h.segments
    assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]


def test_a_pending_segment_forged_into_a_signed_head_cannot_change_what_a_verifying_reader_reads() -> None:
    """Someone with write access to the bucket but not the key writes a segment with other
    entries under a key of the session and names it pending in the signed head (the
    signature does not cover ``pending``): readers still verify; the writer refuses it."""
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer, PublicKeyVerifier

    key = Ed25519PrivateKey.generate()
    signer = Ed25519Signer(key)
    verifier = PublicKeyVerifier([key.public_key()])
    clock, store, log, w = _world(signer=signer, verifier=verifier)
    acked = _until_pending(store, w, "a")
    h = _head(store)
    assert h.pending is not None
    # The forger's segment: the same first seq and last hash in its key, other content.
    other = _log(s3log.MemoryStore(), clock, seed=99)
    wo = other.create("s1")
    _fill(wo, "evil", n=3)
    wo.commit()
    evil = list(other.read("s1").entries)
    evil_key = h.pending.key.rsplit("-", 1)[0] + "-00000000deadbeef.cbor"
    store.put_if_absent(evil_key, encode_segment("s1", evil, 2))
    _forge(store, log, "s1", lambda head: replace(head, pending=replace(h.pending, key=evil_key)))  # type: ignore[arg-type]
    assert [e.hash for e in log.read("s1").entries] == [e.hash for e in acked]
    w2 = log.open("s1")
    assert w2._core.ws.confirmed is None
    _fill(w2, "b")
    acked += w2.commit().acked
    assert evil_key not in _head(store).segments
    assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]


# ------------------------------------------------------------------ format v1, compaction, expiry, forks


def test_a_format_v1_writer_continuing_a_head_with_a_pending_segment_writes_no_pending() -> None:
    clock, store, log, w = _world()
    acked = _until_pending(store, w, "a")
    pending = _head(store).pending
    assert pending is not None
    store.delete(pending.key)  # as if its PUT had failed: not confirmed, so not promoted
    v1 = _log(store, clock, seed=3, format_version=1)
    w1 = v1.open("s1")
    assert w1._core.ws.confirmed is None
    for i in range(6):
        _fill(w1, f"b{i}")
        acked += w1.commit().acked
        assert _head(store).pending is None and _head(store).v == 1
    assert [e.hash for e in _sound(store, log, "s1")["s1"]] == [e.hash for e in acked]


def test_compacting_a_session_whose_head_names_a_pending_segment() -> None:
    clock, store, log, w = _world()
    acked = _until_pending(store, w, "a", want=lambda h: h.seq >= 5)
    old_pending = _head(store).pending
    assert old_pending is not None
    assert log.compact("s1", lambda history, head: history[-1:])
    assert _payloads(_sound(store, log, "s1")["s1"]) == _payloads(acked)[-1:]
    assert _head(store).pending is None or _head(store).pending.key != old_pending.key  # type: ignore[union-attr]
    # The writer that held the pre-compaction head (and confirmed its pending segment)
    # cannot promote it into the compacted chain.
    _fill(w, "late")
    result = w.commit()
    assert result.fork is not None
    assert old_pending.key not in _head(store).segments
    clock.t += 3 * log.config.commit_deadline_ms
    log.gc(older_than_ms=0)
    _sound(store, log, "s1", result.session_id)


def test_expiring_a_session_whose_head_names_a_pending_segment_collects_it_and_forks_its_writer() -> None:
    clock, store, log, w = _world()
    acked = _until_pending(store, w, "a")
    pending = _head(store).pending
    assert pending is not None
    clock.t += 10 * 86_400_000
    tombstone_idle(log, idle_for=86_400_000)
    assert _head(store).pending is None
    _fill(w, "late")
    result = w.commit()  # promotes nothing onto the tombstone: forks
    assert result.fork is not None
    clock.t += 3 * log.config.commit_deadline_ms
    assert pending.key in log.gc(older_than_ms=0).deleted
    child = _sound(store, log, result.session_id)[result.session_id]
    assert _payloads(child) == [("late", 0)]
    assert acked and pending.key not in store.all_keys()


def test_forking_inside_the_inline_entries_of_a_pending_segment() -> None:
    _clock, store, log, w = _world()
    acked = _until_pending(store, w, "a", want=lambda h: bool(h.segments))
    h = _head(store)
    assert h.pending is not None
    at = (read.pending_first(h) + h.pending.last) // 2
    child = log.fork("s1", at_seq=at)
    wc = log.open(child)
    _fill(wc, "c")
    wc.commit()
    chains = _sound(store, log, "s1", child)
    assert [e.hash for e in chains["s1"]] == [e.hash for e in acked]
    assert _payloads(chains[child])[-1] == ("c", 0)


def test_append_latest_hints_promote_only_what_their_own_put_confirmed() -> None:
    clock = Clock()
    store = ClockStore(clock)
    log = _log(store, clock)
    log.create("s1")
    result = None
    acked: list[s3log.Entry] = []
    for i in range(40):
        result = log.append_latest("s1", [("msg", {"tag": "l", "i": i, "text": "x" * 300})], after=result)
        acked += result.acked
        if i == 20:
            other = _log(store, clock, seed=5)
            wo = other.open("s1")
            _fill(wo, "o")
            acked += wo.commit().acked
    assert sorted(_payloads(_sound(store, log, "s1")["s1"])) == sorted(_payloads(acked))
    assert len(set(_payloads(acked))) == len(acked)


# ------------------------------------------------------------------ async cancellation


class GatedHeads(s3log.AsyncMemoryStore):
    """Head PUTs naming a pending segment wait on a gate (the segment PUT beside them does
    not); such a request goes on without its caller, and lands or not (``land``)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.land = True
        self.refuse_segments = False
        self.inflight: list[asyncio.Future[str]] = []

    async def put_if_absent(self, key: str, body: bytes) -> str:
        if self.refuse_segments and "/seg/" in key:
            raise StoreError("injected: access denied", key=key)
        return await super().put_if_absent(key, body)

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if decode_head(body, key).pending is None or self.gate.is_set():
            return await super().put_if_match(key, body, etag)
        self.entered.set()

        async def request() -> str:
            await self.gate.wait()
            if not self.land:
                raise TransientStoreError("injected: request never arrived", key=key, code="RequestTimeout")
            return await s3log.AsyncMemoryStore.put_if_match(self, key, body, etag)

        self.inflight.append(asyncio.ensure_future(request()))
        return await asyncio.shield(self.inflight[-1])


@pytest.mark.parametrize(("lands", "segment"), [(True, True), (True, False), (False, True)])
async def test_a_commit_cancelled_while_its_parallel_pair_is_in_flight(lands: bool, segment: bool) -> None:
    """The caller of a commit is cancelled while the commit's head PUT (naming a pending
    segment) hangs; the commit goes on in its own task, its request lands late or is
    retried, the segment beside it stored or refused: nothing is lost or stored twice,
    and later commits promote only a segment whose PUT answered 2xx."""
    store = GatedHeads()
    store.refuse_segments = not segment
    log = s3log.AsyncLog(store, config=s3log.LogConfig(tail_per_commit=0, tail_max_bytes=TAIL, activity_index=False,
                                                       retry=FAST))
    w = await log.create("s1")
    acked: list[s3log.Entry] = []
    store.gate.clear()  # any head naming a pending segment now waits
    n = 0
    for n in range(100):
        w.append("msg", {"tag": "a", "i": n, "text": "x" * 300})
        task = asyncio.create_task(w.commit())
        entered = asyncio.create_task(store.entered.wait())
        await asyncio.wait([task, entered], return_when=asyncio.FIRST_COMPLETED)
        if store.entered.is_set():
            break
        entered.cancel()
        acked += (await task).acked
    assert store.entered.is_set(), "a commit wrote a segment beside its head"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    store.land = lands
    store.gate.set()  # the abandoned head PUT lands now (or never)
    store.refuse_segments = False
    await asyncio.gather(*store.inflight, return_exceptions=True)
    assert ((await log.read("s1")).head.pending is not None) == lands
    for i in range(5):
        w.append("msg", {"tag": "b", "i": i, "text": "x" * 300})
        acked += (await w.commit()).acked
        head = (await log.read("s1")).head
        keys = set(store.sync.all_keys())
        assert all(k in keys for k in head.segments)
    got = _payloads(list((await log.read("s1")).entries))
    # The cancelled entry is stored exactly once, whether its head landed or not.
    assert got == [("a", i) for i in range(n + 1)] + [("b", i) for i in range(5)]
    assert _payloads(acked) == [p for p in got if p != ("a", n)] or _payloads(acked) == got


def test_confirmation_by_get_needs_exact_entries_not_just_a_matching_key() -> None:
    """The restoring writer's GET check, directly: a pending segment holding one entry
    fewer (or more) than the pending range is not confirmed."""
    _clock, store, log, w = _world()
    _until_pending(store, w, "a")
    h = _head(store)
    assert h.pending is not None
    body = store.get(h.pending.key).body
    seg = decode_segment(body, h.pending.key)
    data = log._run(read.load(log.layout, "s1"))
    assert read._pending_entries(h, h.pending.key, body, data.entries) == seg.entries
    short = encode_segment("s1", list(seg.entries[:-1]), 2) if len(seg.entries) > 1 else b"\xa0"
    assert read._pending_entries(h, h.pending.key, short, data.entries) is None
    with pytest.raises(CorruptionError):
        decode_segment(b"garbage", h.pending.key)
    assert read._pending_entries(h, h.pending.key, b"garbage", data.entries) is None

