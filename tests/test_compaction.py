"""Compaction: what a selector keeps must be entries append accepts (checked before
anything is written), and compaction racing a writer whose head PUT landed but whose
reply was lost.

``Log.compact`` rewrites a session as a new root chain: a writer that settles an
undecided commit afterwards cannot find its entries by hash. The compacted head says
which chain it replaced (``compacted``: its end and its last entries' hashes), so the
writer decides from it: landed, not landed, or (its entries older than what the mark
names) that it cannot tell, and then it raises rather than store its entries again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import s3log
from s3log._protocol import compact
from s3log.config import LogConfig
from s3log.env import Env
from s3log.errors import InvalidArgumentError, InvalidEntryError, TransientStoreError
from tests.helpers import sessions_log

SID = "thread-1"


class _LostReply(s3log.MemoryStore):
    """The next head PUT of ``SID`` lands, then ``hook`` runs, then the reply is lost."""

    hook: Callable[[], None] | None = None
    lose_before: bool = False  # the PUT never lands instead

    def _lost(self, key: str, put: Callable[[], str]) -> str:
        hook, self.hook = self.hook, None
        if hook is None or not key.endswith(f"/{SID}/head"):
            self.hook = hook
            return put()
        if not self.lose_before:
            put()
        hook()
        raise TransientStoreError("the reply was lost", key=key)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        return self._lost(key, lambda: super(_LostReply, self).put_if_match(key, body, etag))

    def put_if_absent(self, key: str, body: bytes) -> str:
        return self._lost(key, lambda: super(_LostReply, self).put_if_absent(key, body))


T0 = 1_800_000_000_000


NOW = [T0]


def _logs(store: s3log.MemoryStore) -> tuple[s3log.Log, s3log.Log]:
    """The writer's log and the compacting process's, on one clock (``NOW``)."""
    NOW[0] = T0

    def clock() -> int:
        return NOW[0]

    return (s3log.Log(store, config=LogConfig(env=Env.deterministic(3, clock))),
            s3log.Log(store, config=LogConfig(env=Env.deterministic(4, clock))))


def _committed(store: s3log.MemoryStore, *data: str) -> tuple[s3log.Log, s3log.Log, s3log.Writer[Any]]:
    """:func:`_logs` and a writer of :data:`SID` that committed ``data`` in one commit."""
    log, other = _logs(store)
    w = log.create(SID)
    for d in data:
        w.append("k", d)
    w.commit()
    return log, other, w


def _drop_first(history: list[dict[str, Any]], head: Any) -> list[dict[str, Any]]:
    """A prune (keep all but the oldest entry): every kept entry gets a new seq and hash."""
    return list(history[1:])


def _payloads(log: s3log.Log) -> list[Any]:
    """The data of every entry appended here (not fork entries), in every session."""
    return [e.data for sid in log.list_session_ids() for e in log.read(sid).entries if e.kind == "k"]


def test_a_landed_commit_compacted_before_its_writer_settles_is_acknowledged_once() -> None:
    store = _LostReply()
    log, other, w = _committed(store, "a0", "a1")
    store.hook = lambda: other.compact(SID, _drop_first)  # reads the head our PUT just wrote
    w.append("k", "b")
    result = w.commit()
    assert [e.data for e in result.acked] == ["b"] and result.fork is None
    assert sorted(_payloads(log)) == ["a1", "b"]  # once: kept by the compaction, not forked again
    # The writer goes on: its view is behind the rewrite, so its next entry forks.
    w.append("k", "c")
    w.commit()
    assert sorted(_payloads(log)) == ["a1", "b", "c"]


def test_a_lost_commit_compacted_before_its_writer_settles_is_stored_once() -> None:
    store = _LostReply()
    store.lose_before = True
    log, other, w = _committed(store, "a0", "a1")
    store.hook = lambda: other.compact(SID, _drop_first)  # our PUT never landed
    w.append("k", "b")
    result = w.commit()
    assert [e.data for e in result.acked] == ["b"]
    assert sorted(_payloads(log)) == ["a1", "b"]  # a0 pruned; b written after the compaction


def _built_on_then_compacted(other: s3log.Log, commits: int) -> Callable[[], None]:
    def run() -> None:
        x = other.open(SID)
        for i in range(commits):
            x.append("k", f"x{i}")
            x.commit()
        other.compact(SID, _drop_first)
    return run


def test_a_commit_built_on_then_compacted_is_acknowledged_once() -> None:
    # Another writer commits on top of the landed entry, then the session is compacted:
    # the mark names the replaced chain's last entries, b among them.
    store = _LostReply()
    log, other, w = _committed(store, "a0", "a1")
    store.hook = _built_on_then_compacted(other, 2)
    w.append("k", "b")
    result = w.commit()
    assert [e.data for e in result.acked] == ["b"] and result.fork is None
    assert sorted(_payloads(log)) == ["a1", "b", "x0", "x1"]


def test_a_commit_compacted_out_of_sight_is_not_stored_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # More commits on top than the mark names: whether b landed cannot be told. The
    # writer raises and writes it nowhere, and so does its next commit: b is stored once.
    monkeypatch.setattr(compact, "COMPACTION_WINDOW", 2)
    store = _LostReply()
    log, other, w = _committed(store, "a0", "a1")
    store.hook = _built_on_then_compacted(other, 2)
    w.append("k", "b")
    with pytest.raises(s3log.StoreError, match="compacted"):
        w.commit()
    assert sorted(_payloads(log)) == ["a1", "b", "x0", "x1"]
    with pytest.raises(s3log.StoreError, match="compacted"):
        w.commit()
    assert sorted(_payloads(log)) == ["a1", "b", "x0", "x1"]


def test_a_lazy_create_compacted_before_its_creator_settles_is_acknowledged_once() -> None:
    # The create's head is stamped when it lands (created_at): the creator nonce is
    # what tells the writer the compacted session is the one it created.
    store = _LostReply()
    log, other = _logs(store)
    w = log.create(SID, lazy=True)  # stored by its first commit, stamped then
    NOW[0] += 1_000
    for data in ("a0", "a1"):
        w.append("k", data)
    store.hook = lambda: other.compact(SID, _drop_first)
    result = w.commit()
    assert [e.data for e in result.acked] == ["a0", "a1"] and result.fork is None
    assert sorted(_payloads(log)) == ["a1"]  # a0 pruned, a1 kept, nothing forked again


def test_a_commit_compacted_twice_before_its_writer_settles_is_acknowledged_once() -> None:
    # Its PUT could land only before the first compaction since the head it built on:
    # the newest head keeps that compaction's mark too.
    store = _LostReply()
    log, other, w = _committed(store, "a0", "a1", "a2")

    def compact_twice() -> None:
        other.compact(SID, _drop_first)
        other.compact(SID, _drop_first)

    store.hook = compact_twice
    w.append("k", "b")
    result = w.commit()
    assert [e.data for e in result.acked] == ["b"] and result.fork is None
    assert sorted(_payloads(log)) == ["a2", "b"]


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


# ------------------------------------------------------------- a tampered mark


def _signed_logs(store: s3log.MemoryStore) -> tuple[s3log.Log, s3log.Log]:
    """:func:`_logs`, both signing and verifying heads with one Ed25519 key."""
    from dataclasses import replace

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer, PublicKeyVerifier

    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    log, other = _logs(store)
    keys = {"signer": signer, "verifier": PublicKeyVerifier([signer.public_key])}
    return (s3log.Log(store, config=replace(log.config, **keys)),
            s3log.Log(store, config=replace(other.config, **keys)))


#: Edits of a compacted head, each of which (unsigned) made a writer settling a lost
#: reply store again an entry the compaction kept, or give up on it.
_EDITS: dict[str, Callable[[Any], Any]] = {
    # Another entry right after the writer's base: none of its entries landed.
    "the mark's last tip": lambda h: {**h.extra["compacted"], "tips": [*h.extra["compacted"]["tips"][:-1], bytes(16)]},
    "the mark's tips": lambda h: {**h.extra["compacted"], "tips": []},
    "the mark removed": lambda h: None,
    # Whether the mark is of the writer's session at all (same_life):
    "created_at": lambda h: h.created_at + 1,
    "creator": lambda h: "someone-else",
}


def _tamper(store: s3log.MemoryStore, layout: Any, what: str) -> None:
    """What someone who can write the bucket but holds no key can do: edit the compacted
    head, keeping its genuine signature."""
    from dataclasses import replace

    from s3log._format.codec import decode_head, encode_head

    key = layout.head(SID)
    got = store.get(key)
    head = decode_head(got.body, key)
    value = _EDITS[what](head)
    if what in ("created_at", "creator"):
        forged = replace(head, **{what: value})
    else:
        extra = {k: v for k, v in head.extra.items() if k != "compacted"}
        forged = replace(head, extra=extra if value is None else {**extra, "compacted": value})
    assert forged != head
    store.put_if_match(key, encode_head(forged), got.etag)


@pytest.mark.parametrize("what", sorted(_EDITS))
def test_a_tampered_compacted_head_is_refused_by_a_settling_writer_and_readers(what: str) -> None:
    store = _LostReply()
    log, other = _signed_logs(store)
    w = log.create(SID)
    w.append("k", "a0")
    w.append("k", "a1")
    w.commit()

    def compact_then_tamper() -> None:
        other.compact(SID, _drop_first)  # keeps a1 and b, which landed
        _tamper(store, log.layout, what)

    store.hook = compact_then_tamper
    w.append("k", "b")
    with pytest.raises(s3log.SignatureError):
        w.commit()
    with pytest.raises(s3log.SignatureError):
        log.read(SID)
    assert sorted(_payloads(s3log.Log(store))) == ["a1", "b"]  # b not stored again (read unverified)
