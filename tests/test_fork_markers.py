"""Fork markers: a retried fork keeps its marker while gc and ``Log.delete`` run, and dangling
markers are deleted, conditionally where the store can.
"""

from __future__ import annotations

from typing import Any

import pytest

import s3log
from s3log.errors import StoreError, TransientStoreError
from tests.delete_hooks import Clock
from tests.helpers import DEADLINE, deadline_log, gc_beside
from tests.test_pending_hostile import ClockStore

FORKS = "s3log/sessions/s1/forks/"


class ForkStore(ClockStore):
    """A ClockStore whose fork child heads (any head but s1's) can be made undecided
    (the PUT never arrives and re-reading the head fails), with hooks before a child's
    head PUT and before a marker PUT."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.undecided = False
        self.before_child_head: Any = None
        self.before_marker: Any = None

    def _child_head(self, key: str) -> bool:
        return key.endswith("/head") and "/s1/" not in key and "_probe" not in key

    def get(self, key: str) -> s3log.Blob:
        if self.undecided and self._child_head(key):
            raise TransientStoreError("injected 503", key=key, code="SlowDown")
        return super().get(key)

    def put_if_absent(self, key: str, body: bytes) -> str:
        if self._child_head(key):
            if self.undecided:
                raise TransientStoreError("injected timeout (request lost)", key=key, code="RequestTimeout")
            hook, self.before_child_head = self.before_child_head, None
            if hook is not None:
                hook()
        if key.startswith(FORKS) and self.before_marker is not None:
            hook, self.before_marker = self.before_marker, None
            hook()
        return super().put_if_absent(key, body)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        if key.startswith(FORKS) and self.before_marker is not None:
            hook, self.before_marker = self.before_marker, None
            hook()
        return super().put_if_match(key, body, etag)


def _undecided_fork(store: ForkStore, clock: Clock) -> tuple[s3log.Writer[Any], Any, str]:
    """Writer A on s1 loses a race and forks; the child's head PUT is left undecided.
    Returns A, the ticket of its entry, and the child's id (from its marker)."""
    log_a = deadline_log(store, clock)
    w_a = log_a.create("s1")
    w_a.append("msg", {"text": "a0"})
    w_a.commit()
    w_b = deadline_log(store, clock, seed=9).open("s1")
    w_b.append_durable("msg", {"text": "b1"})
    ticket = w_a.submit("msg", {"text": "a1"})
    store.undecided = True
    with pytest.raises(StoreError):
        w_a.wait(ticket)
    store.undecided = False
    (marker,) = [k for k in store.all_keys() if k.startswith(FORKS)]
    return w_a, ticket, marker[len(FORKS):]


def test_a_retried_fork_keeps_its_marker_when_gc_runs_while_its_head_is_in_flight() -> None:
    clock = Clock()
    store = ForkStore(clock)
    gc_store, gc_log = gc_beside(store, clock, if_match=True)
    w_a, ticket, child = _undecided_fork(store, clock)
    clock.t += 3 * DEADLINE  # the first marker is now past gc's grace
    store.before_child_head = lambda: gc_log.gc(older_than_ms=0)  # gc meets the retried head in flight
    entry = w_a.wait(ticket)
    gc_store.apply()
    assert w_a.session_id == child
    assert [e.data for e in s3log.Log(store).read(child).entries if e.kind == "msg"][-1] == entry.data
    assert s3log.Log(store).children("s1") == [child]


def test_a_dangling_marker_gc_listed_before_a_retried_fork_rewrote_it_is_not_deleted() -> None:
    clock = Clock()
    store = ForkStore(clock)
    gc_store, gc_log = gc_beside(store, clock, if_match=True)
    w_a, ticket, child = _undecided_fork(store, clock)
    clock.t += 3 * DEADLINE
    decided: list[list[str]] = []
    # gc lists the old marker (dangling, old) and decides to delete it; its DELETE
    # arrives after the retried fork wrote the marker again and its head landed.
    store.before_marker = lambda: decided.append(gc_log.gc(older_than_ms=0).unreferenced)
    w_a.wait(ticket)
    assert decided == [[FORKS + child]]
    gc_store.apply()
    assert s3log.Log(store).children("s1") == [child]


def test_gc_still_deletes_a_dangling_marker_nobody_rewrote() -> None:
    clock = Clock()
    store = ForkStore(clock)
    _undecided_fork(store, clock)
    clock.t += 3 * DEADLINE
    report = deadline_log(store, clock, seed=8).gc(older_than_ms=0)
    assert [k for k in report.deleted if k.startswith(FORKS)] == report.unreferenced
    assert not [k for k in store.all_keys() if k.startswith(FORKS)]


class AfterHeadDelete(s3log.MemoryStore):
    """A MemoryStore that calls ``hook`` right after the conditional DELETE of the head
    whose key ends with ``suffix`` (``Log.delete`` then deletes the rest)."""

    def __init__(self, suffix: str) -> None:
        super().__init__()
        self.suffix = suffix
        self.hook: Any = None

    def delete_if_match(self, key: str, etag: str) -> None:
        super().delete_if_match(key, etag)
        if key.endswith(self.suffix) and self.hook is not None:
            self.hook()


def test_log_delete_spares_a_fork_marker_written_again_after_its_listing() -> None:
    """``Log.delete`` lists a session's objects, deletes its head, then the rest. A
    session created again at the id in between may fork again into a child the old one
    left undecided, writing that child's marker anew: the copy is the new session's."""

    store = AfterHeadDelete("/s1/head")
    log = s3log.Log(store)
    w = log.create("s1")
    w.append("msg", {"text": "a"})
    w.commit()
    assert log.fork("s1", child_id="c1") == "c1"
    w.append("msg", {"text": "b"})
    w.commit()
    marker = FORKS + "c1"
    stored = [k for k in store.all_keys() if k.startswith("s3log/sessions/s1/")]
    store.hook = lambda: store.put_raw(marker, b"written again by a new session at the id")
    deleted = log.delete("s1")
    assert store.get(marker).body == b"written again by a new session at the id"
    assert [k for k in store.all_keys() if k.startswith("s3log/sessions/s1/")] == [marker]
    assert deleted == len(stored) - 1  # all but the marker, the head included


def test_log_delete_of_a_fork_child_leaves_a_young_marker_and_spares_one_written_again() -> None:
    """Deleting a fork child deleted its own marker (in the parent's folder) by key after
    its head. A fork retried into the freed id (decision 0031) writes that marker again
    before its head, which may land after the delete: the copy went, leaving the new
    child unlisted by its live parent. Whether the rewrite came before the delete's
    listing or after, the copy is young: a marker younger than the landing bound is
    left to gc (which deletes it once no head names its child); an older one is deleted
    with If-Match on the ETag listed, so one written again meanwhile stays."""
    store = AfterHeadDelete("/c1/head")
    log = s3log.Log(store)
    log.create("s1").append_durable("msg", {"text": "a"})
    marker = FORKS + "c1"
    old = log.config.env.now_ms() - 2 * log.config.commit_deadline_ms - 1

    assert log.fork("s1", child_id="c1") == "c1"
    log.delete("c1")  # a young marker (a retried fork may have just written it) stays
    assert marker in store.all_keys()
    assert s3log.Log(store).gc(older_than_ms=0).deleted == []  # ...until it is old itself

    store.delete(marker)
    assert log.fork("s1", child_id="c1") == "c1"
    store.put_raw(marker, store.get(marker).body, mtime_ms=old)
    store.hook = lambda: store.put_raw(marker, b"written again by a retried fork")
    log.delete("c1")
    assert store.get(marker).body == b"written again by a retried fork"

    store.hook = None
    store.delete(marker)
    assert log.fork("s1", child_id="c1") == "c1"
    store.put_raw(marker, store.get(marker).body, mtime_ms=old)
    log.delete("c1")  # old, and nobody wrote it again: deleted with its child
    assert marker not in store.all_keys()


def test_gc_deletes_a_dangling_marker_by_key_on_a_store_without_conditional_delete() -> None:
    """obstore cannot make a DELETE conditional. gc left dangling markers there for
    ever, and a fork with that explicit child id (LangGraph's ``copy_thread``) then
    failed for ever with SessionExists: it goes by key, as before."""
    from s3log.errors import ConditionalDeleteUnsupported

    class NoConditionalDelete(ClockStore):
        def delete_if_match(self, key: str, etag: str) -> None:
            raise ConditionalDeleteUnsupported("no conditional DELETE", key=key, code="NotImplemented")

    clock = Clock()
    store = NoConditionalDelete(clock)
    log = deadline_log(store, clock)
    log.create("s1").append_durable("msg", {"text": "a"})
    body = s3log._format.cbor.dumps({"v": 1, "child": "c1", "parent": {}, "created_at": 1})
    store.put_raw(FORKS + "c1", body, mtime_ms=clock.t)  # a fork whose head never came
    clock.t += 3 * DEADLINE
    assert deadline_log(store, clock, seed=8).gc(older_than_ms=0).deleted == [FORKS + "c1"]
    assert log.fork("s1", child_id="c1") == "c1"
    assert log.children("s1") == ["c1"]
