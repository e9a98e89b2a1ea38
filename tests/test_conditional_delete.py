"""``Log.delete`` deletes the head it read, and only that one (DeleteObject ``If-Match``).

Before: it read the head, listed the session, then DELETEd the head by key. A new
session that took an expired id over (replacing the tombstone with ``If-Match``)
between the read and the DELETE was deleted instead, its acknowledged entries lost.
Each test here failed before the head DELETE was made conditional.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log._protocol.delete import delete_session
from s3log._protocol.ops import Blob, DeleteIfMatch, ListPage, Parallel, call_delete_if_match
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import (
    ConditionalDeleteUnsupported,
    ConflictError,
    ObjectNotFound,
    PreconditionFailed,
    SessionNotFound,
    SessionReplaced,
    TransientStoreError,
)
from s3log.testing.faults import Fault, FaultyStore
from s3log.testing.plugin import LocalS3
from tests.delete_hooks import Clock, HookedMemory, PlainStore, hooked_store
from tests.scripted import Script, Step
from tests.tombstones import tombstone_idle, tombstone_idle_async

T0 = 1_800_000_000_000
DAY = 86_400_000
SID = "thread-1"


def _log(store: Any, clock: Clock) -> s3log.Log:
    # Small tails: every commit writes a segment, so a session owns several objects.
    return s3log.Log(store, config=LogConfig(env=Env.deterministic(7, clock), tail_max_bytes=1024,
                                             pending_max_bytes=0))


def _session_keys(store: Any, log: s3log.Log, sid: str) -> list[str]:
    page: ListPage = store.list(log.layout.session_dir(sid))
    return [o.key for o in page.objects]


@pytest.mark.parametrize("kind", ["memory", "server"])
def test_delete_never_removes_a_session_that_took_over_the_tombstone_it_read(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = hooked_store(kind, request)
    clock = Clock(T0)
    log = _log(store, clock)
    old = log.create(SID)
    for i in range(3):
        old.append("k", {"old": i, "pad": "x" * 400})
        old.commit()
    clock.t += 40 * DAY
    assert tombstone_idle(log, idle_for=timedelta(days=30)).expired == [SID]
    acked: list[s3log.Entry] = []

    def take_over() -> None:  # another worker starts the thread again over the tombstone
        w = log.create(SID)
        for i in range(3):
            w.append("k", {"new": i, "pad": "y" * 400})
            acked.extend(w.commit().acked)

    store.hook = take_over
    with pytest.raises(SessionReplaced) as refused:
        log.delete(SID)
    err = refused.value
    assert err.session == SID and SID in str(err) and "nothing was deleted" in str(err)
    assert err.expected["expired"] and not err.found["expired"] and not err.maybe_deleted
    assert isinstance(err, ConflictError)  # code catching conflicts catches this one
    # The new session's acknowledged entries are all there, and readable.
    assert len(acked) == 3
    assert [e.hash for e in log.read(SID).entries] == [e.hash for e in acked]
    assert log.verify(SID).ok
    # Asked again, with nothing racing, the delete removes the session now at the id.
    assert log.delete(SID) >= 1
    with pytest.raises(SessionNotFound):
        log.read(SID)


@pytest.mark.parametrize("kind", ["async-memory", "async-server"])
def test_async_delete_never_removes_a_session_that_took_over_the_tombstone_it_read(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The same through AsyncLog (its driver performs the conditional DELETE): aioboto3."""
    import asyncio

    class _AsyncHook:
        hook: Callable[[], Any] | None = None

        async def delete_if_match(self, key: str, etag: str) -> None:
            if key.endswith(f"/sessions/{SID}/head") and self.hook is not None:
                hook, self.hook = self.hook, None
                await hook()
            await super().delete_if_match(key, etag)  # type: ignore[misc]

    if kind == "async-memory":
        class _M(_AsyncHook, s3log.AsyncMemoryStore):
            pass

        store: Any = _M()
    else:
        server: LocalS3 = request.getfixturevalue("s3log_server")

        class _S(_AsyncHook, s3log.AsyncS3Store):
            pass

        store = _S(server.create_bucket(), endpoint_url=server.endpoint_url)
    clock = Clock(T0)
    log = s3log.AsyncLog(store, config=LogConfig(env=Env.deterministic(7, clock), tail_max_bytes=1024,
                                                 pending_max_bytes=0))

    async def scenario() -> None:
        old = await log.create(SID)
        for i in range(3):
            old.append("k", {"old": i, "pad": "x" * 400})
            await old.commit()
        clock.t += 40 * DAY
        assert (await tombstone_idle_async(log, idle_for=timedelta(days=30))).expired == [SID]
        acked: list[s3log.Entry] = []

        async def take_over() -> None:
            w = await log.create(SID)
            for i in range(3):
                w.append("k", {"new": i, "pad": "y" * 400})
                acked.extend((await w.commit()).acked)

        store.hook = take_over
        with pytest.raises(SessionReplaced):
            await log.delete(SID)
        assert len(acked) == 3
        assert [e.hash for e in (await log.read(SID)).entries] == [e.hash for e in acked]
        await log.aclose()

    asyncio.run(scenario())


def test_a_commit_landing_before_the_delete_is_deleted_with_the_session() -> None:
    """The same session moved on (its own writer committed): that is the session asked
    for, so the delete starts over and removes everything, the new segment included."""
    store = HookedMemory()
    clock = Clock(T0)
    log = _log(store, clock)
    w = log.create(SID)
    w.append("k", {"pad": "x" * 1500})
    w.commit()

    def commit() -> None:
        w.append("k", {"pad": "z" * 1500})  # a segment written after the delete listed
        w.commit()

    store.hook = commit
    deleted = log.delete(SID)
    with pytest.raises(SessionNotFound):
        log.read(SID)
    assert _session_keys(store, log, SID) == []  # before: the late segment was left behind
    assert deleted >= 3


@pytest.mark.parametrize(("fault", "outcome"), [
    ("timeout-landed", "the DELETE landed, its reply was lost: the head is gone, the rest follows"),
    ("timeout-lost", "it never arrived: the head is still the one read, the DELETE is sent again"),
    ("409", "refused for a concurrent write: sent again"),
    ("503", "throttled: sent again"),
])
def test_an_undecided_conditional_delete_is_settled_by_reading_the_head(fault: Fault, outcome: str) -> None:
    mem = s3log.MemoryStore()
    armed = {"left": 1}

    def plan(method: str, key: str) -> Fault | None:
        if method == "delete_if_match" and armed["left"]:
            armed["left"] -= 1
            return fault
        return None

    store = FaultyStore(mem, plan)
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=1024, pending_max_bytes=0,
                                            retry=RetryPolicy(initial=0.0001, max_backoff=0.0002)))
    w = log.create(SID)
    for i in range(2):
        w.append("k", {"i": i, "pad": "x" * 1500})
        w.commit()
    log.delete(SID)
    assert not armed["left"], outcome
    assert [k for k in mem.all_keys() if f"/sessions/{SID}/" in k] == []


def test_after_a_lost_reply_a_404_on_the_resent_delete_means_it_landed() -> None:
    """Scripted: the first DELETE's reply is lost and the head is still there when read;
    the one sent again meets a 404 (the first landed late). The head is gone: the delete
    goes on and removes what it listed, instead of failing or resending forever."""
    mem = s3log.MemoryStore()
    log = _log(mem, Clock(T0))
    head_key, head, listing = _one_segment_session(mem, log)
    others = [o.key for o in listing.objects if o.key != head_key]
    assert others
    lost = TransientStoreError("reply lost", key=head_key, code="RequestTimeout")
    gone = ObjectNotFound("no such key", key=head_key, code="NoSuchKey", status=404)
    etag_is_the_one_read: Callable[[Any], None] = lambda op: assert_etag(op, head)  # noqa: E731
    script = Script([
        Step("Get", head, key="/head"),
        Step("ListKeys", listing),
        Step("DeleteIfMatch", lost, key="/head", check=etag_is_the_one_read),
        Step("Get", head, key="/head"),  # still the head read: the DELETE did not land (yet)
        Step("DeleteIfMatch", gone, key="/head", check=etag_is_the_one_read),
        Step("Parallel", lambda seen: [None] * len(seen[-1].ops)),
    ])
    assert script.run(delete_session(log.layout, SID, LogConfig(retry=RetryPolicy(initial=0.0)))) == 1 + len(others)
    last = script.seen[-1]
    assert isinstance(last, Parallel) and set(others) <= {o.key for o in last.ops}  # type: ignore[attr-defined]


def _one_segment_session(mem: s3log.MemoryStore, log: s3log.Log) -> tuple[str, Blob, ListPage]:
    """Session SID with a segment beside its head: the head's key, the head as read,
    and the listing of the session (what a delete reads first)."""
    w = log.create(SID)
    w.append("k", {"pad": "x" * 1500})
    w.commit()
    head_key = log.layout.head(SID)
    return head_key, mem.get(head_key), mem.list(log.layout.session_dir(SID))


def assert_etag(op: Any, head: Blob) -> None:
    assert isinstance(op, DeleteIfMatch) and op.etag == head.etag


def test_a_precondition_failure_then_another_session_deletes_nothing_more() -> None:
    """Scripted: 412, and the head read again is another session's. Nothing after that:
    no DELETE of what was listed (it would be harmless, but the session was not deleted)."""
    mem = s3log.MemoryStore()
    clock = Clock(T0)
    log = _log(mem, clock)
    head_key, first, listing = _one_segment_session(mem, log)
    log.delete(SID)
    clock.t += 1000
    log.create(SID)  # another session at the id (another creator nonce and time)
    second = mem.get(head_key)
    script = Script([
        Step("Get", first, key="/head"),
        Step("ListKeys", listing),
        Step("DeleteIfMatch", PreconditionFailed("etag differs", key=head_key, status=412), key="/head"),
        Step("Get", second, key="/head"),
    ])
    with pytest.raises(SessionReplaced):
        script.run(delete_session(log.layout, SID, LogConfig()))


def test_a_store_without_conditional_delete_still_deletes_by_key() -> None:
    store = PlainStore()
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=1024, pending_max_bytes=0))  # type: ignore[arg-type]
    w = log.create(SID)
    w.append("k", {"pad": "x" * 1500})
    w.commit()
    with pytest.raises(ConditionalDeleteUnsupported):
        call_delete_if_match(store, log.layout.head(SID), '"x"')
    store.requests.reset()
    deleted = log.delete(SID)
    assert deleted >= 2
    assert [k for k in store.inner.all_keys() if f"/sessions/{SID}/" in k] == []
    # The head by key, then the rest (and activity markers, if any).
    assert store.requests["DELETE"] >= deleted


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_obstore_deletes_the_head_by_key_and_says_why(flavour: str, s3log_server: LocalS3) -> None:
    """obstore has no conditional DELETE: its stores refuse delete_if_match (nothing sent)
    and Log.delete falls back to the DELETE by key, the race left open there alone."""
    import asyncio

    bucket = s3log_server.create_bucket()
    if flavour == "sync":
        store: Any = s3log.S3Store.fast(bucket, endpoint_url=s3log_server.endpoint_url)
        log: Any = s3log.Log(store)
        run: Callable[[Any], Any] = lambda x: x  # noqa: E731
    else:
        store = s3log.AsyncS3Store.fast(bucket, endpoint_url=s3log_server.endpoint_url)
        log = s3log.AsyncLog(store)
        loop = asyncio.new_event_loop()
        run = loop.run_until_complete
    w = run(log.create(SID))
    w.append("k", 1)
    run(w.commit())
    with pytest.raises(ConditionalDeleteUnsupported) as refused:
        run(store.delete_if_match(log.layout.head(SID), '"0123"'))
    assert refused.value.key == log.layout.head(SID)
    store.requests.reset()
    assert run(log.delete(SID)) >= 1
    assert store.requests["DELETE"] >= 1  # the head by key (counted once: nothing else was sent)
    with pytest.raises(SessionNotFound):
        run(log.read(SID))
    if flavour == "async":
        loop.close()


def test_compact_keeping_nothing_deletes_only_the_head_it_read() -> None:
    """``Log.compact`` promises a commit landing first wins (ConflictError); an empty
    selection deletes the session, and did so even after such a commit."""
    log = s3log.Log(s3log.MemoryStore())
    w = log.create(SID)
    w.append("k", "a")
    w.commit()
    other = log.open(SID)

    def nothing_kept(history: list[dict[str, Any]], head: s3log.Head) -> list[dict[str, Any]]:
        other.append("k", "landed first")
        other.commit()
        return []

    with pytest.raises(ConflictError):
        log.compact(SID, nothing_kept)
    assert log.read(SID).entries[-1].data == "landed first"
