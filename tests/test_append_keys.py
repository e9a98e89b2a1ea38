"""A retried append is stored once: appends take an idempotency key (decision 0037).

A retry after ``asyncio.wait_for`` timed out, after a commit ended undecided, in a
process restarted after a crash, or in a fork, returns the entry stored the first
time (its session, seq and hash) and stores nothing; a key reused for other content
is refused before anything is written; the head remembers a bounded window of keys.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import s3log
from s3log.config import LogConfig, RetryPolicy
from s3log.errors import AppendKeyReused, InvalidArgumentError, StoreError
from s3log.testing.faults import FaultyStore
from tests.helpers import GatedHeads


def _fast(**kw: Any) -> LogConfig:
    return LogConfig(retry=RetryPolicy(attempts=2, initial=0.0001, max_backoff=0.0002, max_time=1.0), **kw)


def _data(log: s3log.Log, sid: str) -> list[Any]:
    return [e.data for e in log.read(sid).entries]


class _LoseReply:
    """When armed, the next head PUT lands and its reply is lost; the GETs that would
    settle it fail, so the commit ends undecided."""

    def __init__(self) -> None:
        self.state = "off"

    def __call__(self, method: str, key: str) -> Any:
        if self.state == "put" and method == "put_if_match" and key.endswith("/head"):
            self.state = "reads"
            return "timeout-landed"
        if self.state == "reads" and method == "get" and key.endswith("/head"):
            return "503"
        return None


# ------------------------------------------------------------------ within one writer


def test_an_append_that_timed_out_and_is_retried_with_its_key_is_stored_once() -> None:
    async def main() -> None:
        store = GatedHeads()
        log = s3log.AsyncLog(store)
        w = await log.create()
        store.gate.clear()
        store.entered.clear()
        first = asyncio.ensure_future(w.append_durable("k", "a", key="req-1"))
        await store.entered.wait()  # its commit is in flight, held at the head PUT
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(first, timeout=0.01)
        retry = asyncio.ensure_future(w.append_durable("k", "a", key="req-1"))
        await asyncio.sleep(0)
        store.gate.set()
        entry = await retry
        assert (entry.session_id, entry.seq, entry.data) == (w.session_id, 0, "a")
        await w.commit()
        assert [e.data for e in (await log.read(w.session_id)).entries] == ["a"]
        # Retried once more, later: the same entry, nothing written.
        puts = store.requests["PUT"]
        assert await w.append_durable("k", "a", key="req-1") == entry
        assert store.requests["PUT"] == puts

    asyncio.run(main())


def test_two_tasks_appending_one_key_at_once_share_one_entry() -> None:
    async def main() -> None:
        log = s3log.AsyncLog(s3log.AsyncMemoryStore())
        w = await log.create()
        a, b = await asyncio.gather(w.append_durable("k", 1, key="same"), w.append_durable("k", 1, key="same"))
        assert a == b and a.position == b.position
        assert len((await log.read(w.session_id)).entries) == 1

    asyncio.run(main())


def test_a_retry_joins_an_append_whose_commit_ended_undecided() -> None:
    inner = s3log.MemoryStore()
    plan = _LoseReply()
    log = s3log.Log(FaultyStore(inner, plan), config=_fast())
    w = log.create()
    plan.state = "put"
    t = w.submit("k", "x", key="req-x")
    with pytest.raises(StoreError):
        w.wait(t)  # x landed; the writer cannot tell
    assert w.status(t) == "uncertain"
    plan.state = "off"
    entry = w.append_durable("k", "x", key="req-x")
    assert (entry.data, entry.seq) == ("x", 0)
    assert _data(s3log.Log(inner), w.session_id) == ["x"]


# ------------------------------------------------------------- another process, a crash


def test_a_worker_restarted_after_its_commit_landed_finds_the_entry_and_writes_nothing() -> None:
    inner = s3log.MemoryStore()
    plan = _LoseReply()
    crashed = s3log.Log(FaultyStore(inner, plan), config=_fast()).create()
    sid = crashed.session_id
    crashed.append_durable("k", "before", key="req-0")
    plan.state = "put"
    with pytest.raises(StoreError):
        crashed.append_durable("k", {"turn": 1}, key="req-1")  # landed, then the worker dies
    restarted = s3log.Log(inner).open(sid)
    inner.requests.reset()
    entry = restarted.append_durable("k", {"turn": 1}, key="req-1")
    assert inner.requests.total == 0  # found in the head it opened: no request at all
    assert (entry.session_id, entry.seq) == (sid, 1)
    assert s3log.Log(inner).read(sid).entries[1] == entry
    assert _data(s3log.Log(inner), sid) == ["before", {"turn": 1}]


def test_a_retry_finds_an_entry_flushed_out_of_the_head_with_reads_only() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=0))  # every commit flushes
    w = log.create()
    first = w.append_durable("k", "a", key="req-a")
    w.append_durable("k", "b", key="req-b")
    assert log.head(w.session_id).tail_first_seq > first.seq
    other = log.open(w.session_id)
    store.requests.reset()
    assert other.append_durable("k", "a", key="req-a") == first
    assert store.requests["PUT"] == 0 and store.requests["GET"] >= 1
    assert _data(log, w.session_id) == ["a", "b"]


def test_a_keyed_append_costs_what_an_unkeyed_one_does() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append_durable("k", 0)
    for key in (None, "req-1"):
        store.requests.reset()
        w.append_durable("k", 1, key=key)
        assert store.requests["PUT"] == 1 and store.requests.total == 1  # one head PUT, no read


# ------------------------------------------------------------------------------- forks


def test_a_writer_that_forked_finds_a_key_of_its_parent() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    parent = w.session_id
    x = w.append_durable("k", "x", key="req-x")
    log.open(parent).append_durable("k", "other writer")
    w.append("k", "y")
    assert w.commit().fork is not None  # lost the race: w goes on in a child
    child = w.session_id
    assert w.append_durable("k", "x", key="req-x") == x
    restarted = log.open(child)
    again = restarted.append_durable("k", "x", key="req-x")
    assert again == x and again.position == (parent, 0, x.hash)
    assert _data(log, child)[1:] == ["y"]


def test_an_explicit_fork_remembers_the_keys_up_to_its_fork_point() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    kept = w.append_durable("k", 0, key="req-0")
    w.append_durable("k", 1, key="req-1")
    child = log.fork(w.session_id, at_seq=0)
    c = log.open(child)
    assert c.append_durable("k", 0, key="req-0") == kept
    assert c.append_durable("k", 1, key="req-1").session_id == child  # after the fork point: new here
    assert [e.data for e in log.read(child).entries[1:]] == [1]


def _forked_by_a_lost_race(log: s3log.Log, sid: str, key: str, data: Any) -> tuple[s3log.Writer[Any], Any]:
    """A writer of ``sid`` appends ``data`` with ``key``, loses a race and forks; the
    entry (in the child) and the writer, whose new session the application never hears of."""
    w = log.open(sid)
    log.open(sid).append_durable("k", "winner")
    entry = w.append_durable("k", data, key=key)
    assert w.forks and entry.session_id == w.session_id != sid
    return w, entry


def _written_once() -> tuple[s3log.MemoryStore, s3log.Log, str]:
    """A log over memory with a session written once since its creation (its head at version 2)."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    sid = log.create().session_id
    log.open(sid).append_durable("k", "first")
    return store, log, sid


def test_a_retry_in_the_parent_finds_the_fork_a_lost_race_made_and_writes_nothing() -> None:
    # The writer's commit lost a race and forked, and it crashed before the application
    # heard of the child: the restarted writer opens the parent and retries there.
    store, log, sid = _written_once()
    w, x = _forked_by_a_lost_race(log, sid, "req-x", {"turn": 1})
    y = w.append_durable("k", {"turn": 2}, key="req-y")
    restarted = log.open(sid)
    store.requests.reset()
    again = restarted.append_durable("k", {"turn": 1}, key="req-x")
    assert again == x and again.position == x.position
    # One LIST of the parent's fork markers, one GET of the child's head (the entry is in
    # its tail), and a LIST of the child's: it was written since it was made (y), so it may
    # have lost a race in turn.
    assert (store.requests["LIST"], store.requests["GET"], store.requests.total) == (2, 1, 3)
    assert _data(log, sid) == ["first", "winner"]
    # Listed once per writer: a later keyed append costs what an unkeyed one does.
    store.requests.reset()
    assert restarted.append_durable("k", 2, key="req-2").session_id == sid
    assert store.requests["PUT"] == 1 and store.requests.total == 1
    # A retry after the listing is answered from what it listed, its entry read from the child.
    store.requests.reset()
    assert restarted.append_durable("k", {"turn": 2}, key="req-y") == y
    assert (store.requests["GET"], store.requests.total) == (1, 1)
    store.requests.reset()
    assert restarted.append_durable("k", {"turn": 1}, key="req-x") == x
    assert store.requests.total == 0  # acknowledged by this writer: remembered


def test_an_async_retry_in_the_parent_finds_the_fork_a_lost_race_made() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store)
        sid = (await log.create()).session_id
        await (await log.open(sid)).append_durable("k", "first")
        w = await log.open(sid)
        await (await log.open(sid)).append_durable("k", "winner")
        x = await w.append_durable("k", "x", key="req-x")
        assert x.session_id == w.session_id != sid
        restarted = await log.open(sid)
        store.requests.reset()
        t = restarted.append("k", "x", key="req-x")
        result = await restarted.commit()
        assert result.acked == [] and restarted.status(t) == "unknown"  # answered, nothing written
        assert (store.requests["LIST"], store.requests["GET"], store.requests.total) == (1, 1, 2)
        assert await restarted.append_durable("k", "x", key="req-x") == x
        assert [e.data for e in (await log.read(sid)).entries] == ["first", "winner"]

    asyncio.run(main())


def test_a_writer_that_forked_before_its_first_key_looks_in_the_forks_of_the_session_it_opened() -> None:
    _, log, sid = _written_once()
    _, x = _forked_by_a_lost_race(log, sid, "req-x", "x")
    restarted = log.open(sid)
    log.open(sid).append_durable("k", "another winner")
    restarted.append_durable("k", "unkeyed")  # lost a race: goes on in a fork of its own
    assert restarted.session_id not in (sid, x.session_id)
    assert restarted.append_durable("k", "x", key="req-x") == x
    assert "x" not in _data(log, restarted.session_id)


def test_a_retry_waiting_for_its_entry_is_answered_from_the_chain_it_was_found_in_after_a_fork() -> None:
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(tail_max_bytes=0))  # entries in segments
    sid = log.create().session_id
    first = log.open(sid)
    x = first.append_durable("k", "x", key="req-x")
    first.append_durable("k", "b")
    assert log.head(sid).tail_first_seq > x.seq
    w = log.open(sid)
    ticket = w.submit("k", "x", key="req-x")  # stands for x; its entry is read at the wait
    log.open(sid).append_durable("k", "winner")
    w.append("k", "y")
    assert w.commit().fork is not None and w.session_id != sid  # forked before the read
    assert w.wait(ticket) == x
    assert _data(log, sid) == ["x", "b", "winner"]


def test_a_writer_whose_first_chain_was_collected_meanwhile_still_commits() -> None:
    # The chain the writer opened is gone (expired or deleted, its segments collected) and
    # its id started again; a fork a lost race made of the old chain is still listed. The
    # writer's first keyed commit checks that fork against the chain it began with: a
    # segment of that chain is missing, so the fork is not this chain's. It used to raise
    # ObjectNotFound, on every commit, for ever.
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_max_bytes=0))
    sid = log.create().session_id
    log.open(sid).append_durable("k", "first")
    _, x = _forked_by_a_lost_race(log, sid, "req-x", "x")
    w = log.open(sid)
    for key in store.all_keys():
        if key.startswith(log.layout.session_dir(sid)) and "/forks/" not in key:
            store.delete(key)
    log.create(sid).append_durable("k", "a new chain")
    w.append("k", "y", key="req-y")
    result = w.commit()  # lost the race to the new chain: forks, as any writer would
    assert result.fork is not None and [e.data for e in result.acked] == ["y"]
    assert x.session_id != w.session_id


def test_a_retry_finds_a_fork_of_a_fork_its_crashed_writer_made() -> None:
    # The crashed writer forked into a child, lost a race there too and forked again: the
    # restarted writer of the first parent looks into forks of forks (bounded: decision 0037).
    store, log, sid = _written_once()
    w, _ = _forked_by_a_lost_race(log, sid, "req-x", "x")
    child = w.session_id
    log.open(child).append_durable("k", "winner in the child")
    y = w.append_durable("k", "y", key="req-y")
    assert y.session_id == w.session_id not in (sid, child)
    restarted = log.open(sid)
    store.requests.reset()
    assert restarted.append_durable("k", "y", key="req-y") == y
    # Each fork folder listed once (the child was written since it was made), each head read once.
    assert (store.requests["LIST"], store.requests["GET"], store.requests.total) == (2, 2, 4)
    assert _data(log, sid) == ["first", "winner"]


def test_a_key_of_an_explicit_fork_is_not_the_parents() -> None:
    # Log.fork starts another line of the session: what is appended there with a key was
    # meant for it, not for the parent, where an append of the same key is stored.
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    w.append_durable("k", 0)
    w.append_durable("k", 1)
    branch = log.open(log.fork(w.session_id, at_seq=0))
    in_branch = branch.append_durable("k", "z", key="req-z")
    in_parent = log.open(w.session_id).append_durable("k", "z", key="req-z")
    assert in_parent.session_id == w.session_id != in_branch.session_id
    assert _data(log, w.session_id) == [0, 1, "z"]


def test_append_latest_stores_a_retried_batch_once() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    first = log.append_latest("t", [("k", 1), ("k", 2)], keys=["a", "b"], create_meta={})
    store.requests.reset()
    again = log.append_latest("t", [("k", 1), ("k", 2)], keys=["a", "b"], create_meta={})
    assert again.acked == first.acked and store.requests["PUT"] == 0
    mixed = log.append_latest("t", [("k", 2), ("k", 3)], keys=["b", "c"], after=again)
    assert [e.data for e in mixed.acked] == [2, 3] and mixed.acked[0] == first.acked[1]
    assert _data(log, "t") == [1, 2, 3]


# ---------------------------------------------------------------------- refused, bounded


def test_a_key_reused_for_other_data_is_refused_before_anything_is_written() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append_durable("k", "x", key="req-x")
    pending = w.submit("k", "queued", key="req-q")
    store.requests.reset()
    for writer in (w, log.open(w.session_id)):
        with pytest.raises(AppendKeyReused) as err:
            writer.append_durable("k", "not x", key="req-x")
        assert err.value.key == "req-x" and err.value.session == w.session_id
        assert "req-x" in str(err.value) and w.session_id in str(err.value)
    with pytest.raises(AppendKeyReused):
        w.append("other-kind", "queued", key="req-q")
    with pytest.raises(AppendKeyReused):
        log.append_latest(w.session_id, [("k", "not x")], keys=["req-x"])
    assert store.requests["PUT"] == 0
    assert w.wait(pending).data == "queued"
    assert _data(log, w.session_id) == ["x", "queued"]


@pytest.mark.parametrize("key", ["", "x" * 65, "é" * 33, 7, b"bytes"])
def test_a_malformed_key_is_refused_at_append(key: Any) -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    with pytest.raises(InvalidArgumentError, match="key"):
        w.append("k", 1, key=key)
    with pytest.raises(InvalidArgumentError, match="key"):
        log.append_latest(w.session_id, [("k", 1)], keys=[key])
    assert w.pending == 0


def test_append_latest_refuses_keys_that_do_not_match_its_entries() -> None:
    log = s3log.Log(s3log.MemoryStore())
    with pytest.raises(InvalidArgumentError, match="keys"):
        log.append_latest("t", [("k", 1), ("k", 2)], keys=["a"], create_meta={})
    with pytest.raises(InvalidArgumentError, match="twice"):
        log.append_latest("t", [("k", 1), ("k", 2)], keys=["a", "a"], create_meta={})
    assert log.list_session_ids() == []


def test_the_head_remembers_the_newest_keys_of_its_window_only() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(append_key_window=3))
    w = log.create()
    for i in range(4):
        w.append_durable("k", i, key=f"req-{i}")
    assert [a.key for a in log.head(w.session_id).append_keys] == ["req-1", "req-2", "req-3"]
    other = log.open(w.session_id)
    assert other.append_durable("k", 3, key="req-3").seq == 3  # in the window: found
    # Out of the window: not recognised any more, stored again (the documented bound).
    assert other.append_durable("k", 0, key="req-0").seq == 4
    assert _data(log, w.session_id) == [0, 1, 2, 3, 0]


def test_a_window_of_zero_remembers_no_key_in_the_head() -> None:
    log = s3log.Log(s3log.MemoryStore(), config=LogConfig(append_key_window=0))
    w = log.create()
    a = w.append_durable("k", 1, key="req")
    assert log.head(w.session_id).append_keys == ()
    assert w.append_durable("k", 1, key="req") == a  # the writer itself still knows it


# ------------------------------------------------------------------------ integrations


def test_a_langgraph_put_retried_after_a_lost_reply_is_stored_once() -> None:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

    from s3log.integrations.langgraph import S3LogSaver
    from s3log.integrations.langgraph.threads import CHECKPOINT, session_for

    for strict in (False, True):
        inner = s3log.MemoryStore()
        plan = _LoseReply()
        saver = S3LogSaver(s3log.Log(FaultyStore(inner, plan), config=_fast()), strict=strict)
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        first = saver.put(cfg, generate_checkpoint(), generate_metadata(step=0), {})
        checkpoint, metadata = generate_checkpoint(), generate_metadata(step=1)
        plan.state = "put"
        with pytest.raises(StoreError):
            saver.put(first, checkpoint, metadata, {})  # landed; the saver cannot tell
        plan.state = "off"
        saver.put(first, checkpoint, metadata, {})  # LangGraph (or its caller) retries it
        stored = s3log.Log(inner).read(session_for("t", "")).entries
        ids = [e.data["id"] for e in stored if e.kind == CHECKPOINT]
        assert ids == [first["configurable"]["checkpoint_id"], checkpoint["id"]], strict


def test_an_openai_add_items_retried_after_a_failure_is_stored_once_and_a_repeat_is_not() -> None:
    from s3log.integrations.openai_agents import S3LogSession

    async def main() -> None:
        inner = s3log.MemoryStore()
        plan = _LoseReply()
        session = S3LogSession("chat", s3log.Log(FaultyStore(inner, plan), config=_fast()))
        await session.add_items([{"role": "user", "content": "hi"}])
        plan.state = "put"
        with pytest.raises(StoreError):
            await session.add_items([{"role": "assistant", "content": "hello"}])  # landed
        plan.state = "off"
        await session.add_items([{"role": "assistant", "content": "hello"}])  # the retry
        await session.add_items([{"role": "user", "content": "hi"}])  # said again: a new item
        got = await S3LogSession("chat", s3log.Log(inner)).get_items()
        assert [i["content"] for i in got] == ["hi", "hello", "hi"]

    asyncio.run(main())


# ----------------------------------------------------------------- a tampered window


def _signed() -> LogConfig:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer, PublicKeyVerifier

    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    return LogConfig(signer=signer, verifier=PublicKeyVerifier([signer.public_key]))


def _forge_key(store: s3log.MemoryStore, sid: str, key: str, seq: int, kind: str, data: Any) -> None:
    """What someone who can write the bucket but holds no key can do: add an item to the
    head's ``append_keys``, keeping the genuine signature of the rest."""
    from dataclasses import replace

    from s3log._format.cbor import dumps
    from s3log._format.codec import decode_head, encode_head
    from s3log._format.values import AppendKey, append_digest

    hkey = s3log.Log(store).layout.head(sid)
    got = store.get(hkey)
    head = decode_head(got.body, hkey)
    forged = replace(head, append_keys=(*head.append_keys, AppendKey(key, seq, append_digest(kind, dumps(data)))))
    store.put_if_match(hkey, encode_head(forged), got.etag)


@pytest.mark.parametrize("verb", ["append_durable", "append+commit", "append_latest"])
def test_a_forged_append_key_in_a_signed_head_is_refused_not_answered(verb: str) -> None:
    # Without the window in the signed payload, a restarted worker's second "ok" (key
    # req-2) was answered with the first "ok" (seq 0, key req-1) and never stored, or,
    # queued with append and committed, silently dropped.
    store = s3log.MemoryStore()
    cfg = _signed()
    log = s3log.Log(store, config=cfg)
    w = log.create(session_id="t")
    w.append_durable("msg", "ok", key="req-1")
    _forge_key(store, "t", "req-2", 0, "msg", "ok")
    with pytest.raises(s3log.SignatureError):
        if verb == "append_durable":
            log.open("t").append_durable("msg", "ok", key="req-2")
        elif verb == "append+commit":
            again = log.open("t")
            again.append("msg", "ok", key="req-2")
            again.commit()
        else:
            log.append_latest("t", [("msg", "ok")], keys=["req-2"])
    assert _data(s3log.Log(store), "t") == ["ok"]  # nothing written (read without verifying)
    with pytest.raises(s3log.SignatureError):
        log.read("t")


# ------------------------------------------------------------------ a random campaign


def _history(log: s3log.Log, sid: str, memo: dict[str, list[Any]]) -> list[Any]:
    """Everything a reader of ``sid`` sees: its ancestors up to each fork point, then its own."""
    if sid not in memo:
        head, own = log.head(sid), log.read(sid).entries
        parent = head.parent
        memo[sid] = list(own) if parent is None else \
            [e for e in _history(log, parent.session, memo) if e.seq <= parent.seq] + list(own[1:])
    return memo[sid]


def _retry_until_acked(rng: Any, log: s3log.Log, todo: dict[int, list[tuple[str, Any]]],
                       zombies: list[s3log.Writer]) -> dict[str, s3log.AckedEntry]:
    writers: dict[int, s3log.Writer | None] = dict.fromkeys(todo)
    where = dict.fromkeys(todo, "s")
    acks: dict[str, s3log.AckedEntry] = {}
    for _ in range(2000):
        if not any(todo.values()):
            break
        if zombies and rng.random() < 0.2:  # a writer given up on, still alive, commits
            with contextlib.suppress(s3log.S3LogError):
                zombies.pop(rng.randrange(len(zombies))).commit()
            continue
        w = rng.choice([x for x in todo if todo[x]])
        key, data = todo[w][0]
        try:
            if rng.random() < 0.3:
                e = log.append_latest(where[w], [("k", data)], keys=[key]).acked[0]
            else:
                writer = writers[w]
                if writer is None or rng.random() < 0.1:  # (re)started
                    writer = writers[w] = log.open(where[w])
                e = writer.append_durable("k", data, key=key)
                where[w] = writer.session_id
        except s3log.S3LogError:
            if rng.random() < 0.3:  # the worker dies (or leaves its writer behind) and restarts
                if writers[w] is not None and rng.random() < 0.5:
                    zombies.append(writers[w])  # type: ignore[arg-type]
                writers[w] = None
            continue
        assert acks.setdefault(key, e).position == e.position  # a retry names the same entry
        todo[w].pop(0)
    return acks


@pytest.mark.parametrize("seed", range(25))
def test_keyed_appends_retried_under_faults_restarts_and_races_are_stored_once_where_acknowledged(seed: int) -> None:
    import json
    import random

    rng = random.Random(seed)
    inner = s3log.MemoryStore()
    rate = [0.0]
    faults = ["timeout-landed", "timeout-lost", "503", "409"]
    store = FaultyStore(inner, lambda method, key: rng.choice(faults) if rng.random() < rate[0] else None)
    # (24 keys in all: none leaves the window of 32.)
    log = s3log.Log(store, config=_fast(tail_max_bytes=rng.choice([0, 300, 32768])))
    log.create(session_id="s")
    rate[0] = 0.15
    # Three workers, eight records each; some records are equal ("ok"): stored once per key.
    todo = {w: [(f"w{w}-{i}", "ok" if rng.random() < 0.2 else {"w": w, "i": i}) for i in range(8)] for w in range(3)}
    zombies: list[s3log.Writer] = []
    acks = _retry_until_acked(rng, log, todo, zombies)
    rate[0] = 0.0
    for z in zombies:
        with contextlib.suppress(s3log.S3LogError):
            z.commit()
    clean, memo = s3log.Log(inner), {}
    assert not any(todo.values())
    for e in acks.values():  # every acknowledgement reads back where it says
        assert clean.read(e.session_id).entries[e.seq] == e
    for sid in clean.list_session_ids():  # and no history holds a record twice
        seen = [json.dumps(x.data, sort_keys=True) for x in _history(clean, sid, memo) if x.kind == "k"]
        unique = [d for d in seen if d != '"ok"']
        assert len(unique) == len(set(unique)), (sid, seen)
