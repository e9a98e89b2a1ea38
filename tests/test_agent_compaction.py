"""Summaries that keep history (``agent.summary``, ``oa.summary``): a restore reads back
only to the newest summary, in a number of requests that does not grow with what it
summarized, while the whole chain stays readable, verifiable, exportable and forkable.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

import s3log
from s3log import analytics
from s3log._format.manifest import segment_ranges
from s3log.agent import (
    SUMMARY,
    AgentArgumentError,
    AgentSession,
    AsyncAgentSession,
    SummarySpan,
    SummarySpanError,
    collect_state,
)


def _turn(session: AgentSession, i: int) -> None:
    session.record_turn([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}])


def _session(entries: int) -> tuple[s3log.MemoryStore, s3log.Log, AgentSession]:
    """A session of at least ``entries`` entries (a turn is three: user, assistant, turn end)."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    session = AgentSession.create(log, system_prompt="sys", config={"model": "m"})
    i = 0
    while session._writer.head.seq + 1 < entries:
        _turn(session, i)
        i += 1
    return store, log, session


def _restore_gets(store: s3log.MemoryStore, log: s3log.Log, sid: str) -> tuple[int, AgentSession]:
    before = store.requests.snapshot()
    restored = AgentSession.restore(log, sid)
    spent = {k: n - before[k] for k, n in store.requests.snapshot().items() if n != before[k]}
    assert set(spent) <= {"GET"}  # a restore of a closed turn reads only
    return spent.get("GET", 0), restored


def test_a_restore_costs_the_same_requests_however_long_the_summarized_history() -> None:
    after = 3  # turns after the summary
    counts = {}
    for entries in (50, 5_000):
        store, log, session = _session(entries)
        unsummarized, _ = _restore_gets(store, log, session.session_id)
        assert unsummarized == 1 + len(log.head(session.session_id).segments)  # the head and every segment
        session.summarize({"role": "system", "content": "summary"}, keep_last=2)
        for i in range(after):
            _turn(session, 10_000 + i)
        counts[entries], restored = _restore_gets(store, log, session.session_id)
        last = session.state.turn_count - after - 1  # the turn before the summary, kept
        assert [m["content"] for m in restored.state.history][:3] == ["summary", f"q{last}", f"a{last}"]
        if entries == 5_000:
            assert unsummarized == 6  # measured: the head and 5 segments
    # Measured: one GET of the head (the summary and what follows are in its tail).
    assert counts == {50: 1, 5_000: 1}


@pytest.mark.parametrize("entries", [50, 5_000])
def test_a_restore_reads_no_segment_wholly_before_the_summary(entries: int) -> None:
    store, log, session = _session(entries)
    span = session.summarize({"role": "system", "content": "summary"})
    for i in range(300):  # enough to push the summary out of the head's tail
        _turn(session, 10_000 + i)
    head = log.head(session.session_id)
    assert span.seq is not None and span.seq < head.tail_first_seq
    needed = sum(1 for _, _, last in segment_ranges(head) if last >= span.seq)
    gets, restored = _restore_gets(store, log, session.session_id)
    assert gets == 1 + needed  # the head, then only segments holding the summary or what follows
    if entries == 5_000:
        assert needed < len(head.segments)
    assert restored.state == collect_state(log.read(session.session_id).entries)


def test_the_restored_state_is_the_whole_fold() -> None:
    _, log, session = _session(200)
    session.cache_locked(4)
    session.config_changed({"model": "n"})
    session.outcome("finished", message="done")
    first = session.summarize([{"role": "system", "content": "s1"}], keep_last=1)
    _turn(session, 1_000)
    second = session.summarize({"role": "system", "content": "s2"})
    _turn(session, 1_001)
    sid = session.session_id
    restored = AgentSession.restore(log, sid)
    full = collect_state(log.read(sid).entries)
    assert restored.state == full == session.state
    assert [m["content"] for m in full.history] == ["s2", "q1001", "a1001"]
    assert full.config == {"model": "n"} and full.system_prompt == "sys"
    assert full.locked_prefix_len is None  # a summary changes the prefix a cache had pinned
    assert full.turn_count == session.state.turn_count and full.last_outcome is not None
    # Each summary's span starts where the one before it stands (its own entry).
    assert first.first_seq == 0 and second.first_seq == first.seq and second.last_seq == second.seq - 1
    assert full.summary == second


def test_the_whole_chain_stays_readable_verifiable_forkable_and_scanned() -> None:
    store, log, session = _session(60)
    sid = session.session_id
    before = collect_state(log.read(sid).entries)
    span = session.summarize({"role": "system", "content": "summary"})
    _turn(session, 500)
    view = log.read(sid)
    assert [e.seq for e in view.entries] == list(range(view.head.seq + 1))
    assert view.entries[span.seq].kind == SUMMARY
    assert view.entries[span.first_seq].hash.hex() == span.first_hash
    assert view.entries[span.last_seq].hash.hex() == span.last_hash
    assert sum(1 for e in view.entries if e.kind == "agent.user_input") == before.turn_count + 1
    assert log.verify(sid).entries == len(view.entries)
    # Forkable before the summary: the history as it was then, unsummarized.
    old = AgentSession.fork_at(log, sid, at_seq=span.last_seq)
    assert old.state.history == before.history and old.state.summary is None
    # And after it: the summarized history.
    new = AgentSession.fork_at(log, sid, at_seq=span.seq)
    assert [m["content"] for m in new.state.history] == ["summary"]
    new.record_turn([{"role": "user", "content": "again"}])
    assert [m["content"] for m in AgentSession.restore(log, new.session_id).state.history] == ["summary", "again"]
    # Every entry is scanned, the summarized ones included.
    table = analytics.to_arrow(store, sessions=[sid])
    assert table.num_rows == len(view.entries)


@pytest.mark.parametrize(
    ("span", "seq", "match"),
    [
        ({"first_seq": 5, "last_seq": 4}, 5, "not a span"),
        ({"last_seq": 10_000}, 10_000, "past the session's last committed entry"),
        ({"first_seq": -1}, -1, ">= 0"),
        ({"first_seq": 2, "first_hash": "00" * 32}, 2, "is not the hash of the entry at seq 2"),
        ({"last_seq": 3, "last_hash": b"\1" * 32}, 3, "is not the hash of the entry at seq 3"),
        ({"first_seq": "1"}, None, "must be an integer seq"),
        ({"first_seq": True}, None, "must be an integer seq"),
        ({"last_hash": "xyz"}, None, "must be an entry hash"),
    ],
)
def test_a_span_that_is_not_the_sessions_own_is_refused_before_anything_is_written(
    span: dict[str, Any], seq: int | None, match: str
) -> None:
    store, log, session = _session(20)
    sid = session.session_id
    puts = store.requests["PUT"]
    with pytest.raises(SummarySpanError, match=match) as err:
        session.summarize({"role": "system", "content": "summary"}, **span)
    assert err.value.session == sid and err.value.seq == seq and sid in str(err.value)
    assert store.requests["PUT"] == puts
    assert not any(e.kind == SUMMARY for e in log.read(sid).entries)


def test_a_span_named_exactly_is_stored_as_named() -> None:
    _, log, session = _session(20)
    entries = log.read(session.session_id).entries
    span = session.summarize({"role": "system", "content": "s"}, first_seq=3, first_hash=entries[3].hash,
                             last_seq=9, last_hash=entries[9].hash.hex())
    assert (span.first_seq, span.first_hash, span.last_seq, span.last_hash) == (
        3, entries[3].hash.hex(), 9, entries[9].hash.hex())
    stored = log.read(session.session_id).entries[-1]
    assert SummarySpan.from_entry(stored) == span


def test_a_summary_refuses_an_open_turn_and_bad_arguments() -> None:
    store, _, session = _session(10)
    puts = store.requests["PUT"]
    with pytest.raises(AgentArgumentError, match="keep_last"):
        session.summarize({"role": "system", "content": "s"}, keep_last=-1)
    with pytest.raises(AgentArgumentError, match="summary"):
        session.summarize("not a message")  # type: ignore[arg-type]
    assert store.requests["PUT"] == puts
    session.user_input("open")  # opens a turn (and commits it)
    with pytest.raises(AgentArgumentError, match="a turn is open"):
        session.summarize({"role": "system", "content": "s"})


def test_a_summary_meets_another_writer_with_a_conflict_not_a_fork() -> None:
    _, log, session = _session(10)
    other = AgentSession.restore(log, session.session_id)
    _turn(other, 99)
    with pytest.raises(s3log.ConflictError):
        session.summarize({"role": "system", "content": "s"})
    assert session.buffered == 0  # the summary was taken back: no later commit stores it
    assert not any(e.kind == SUMMARY for e in log.read(session.session_id).entries)


def test_async_sessions_summarize_and_restore_from_the_summary() -> None:
    async def main() -> None:
        store = s3log.AsyncMemoryStore()
        log = s3log.AsyncLog(store)
        session = await AsyncAgentSession.create(log, system_prompt="sys")
        for i in range(40):
            await session.record_turn([{"role": "user", "content": f"q{i}"}])
        span = await session.summarize({"role": "system", "content": "summary"})
        gets = store.requests["GET"]
        restored = await AsyncAgentSession.restore(log, session.session_id)
        assert store.requests["GET"] - gets == 1
        assert [m["content"] for m in restored.state.history] == ["summary"]
        assert restored.state.summary == span
        assert (await log.verify(session.session_id)).entries == span.seq + 1

    asyncio.run(main())


# ------------------------------------------------------------- OpenAI Agents SDK session


def _oa_session(n: int) -> tuple[s3log.MemoryStore, s3log.Log, Any]:
    from s3log.integrations.openai_agents import S3LogSession

    store = s3log.MemoryStore()
    log = s3log.Log(store)
    s = S3LogSession("conv-1", log)

    async def fill() -> None:
        for i in range(n):
            await s.add_items([{"role": "user", "content": f"q{i}"}])

    asyncio.run(fill())
    return store, log, s


def test_openai_session_reads_back_only_to_the_summary() -> None:
    pytest.importorskip("agents")
    from s3log.integrations.openai_agents import S3LogSession

    counts = {}
    for n in (50, 5_000):
        store, log, s = _oa_session(n)
        span = asyncio.run(s.summarize([{"role": "assistant", "content": "summary"}]))
        asyncio.run(s.add_items([{"role": "user", "content": "next"}]))
        fresh = S3LogSession("conv-1", log)  # another process: nothing cached
        gets = store.requests["GET"]
        items = asyncio.run(fresh.get_items())
        counts[n] = store.requests["GET"] - gets
        assert [i["content"] for i in items] == ["summary", "next"]
        assert (span["first_seq"], span["last_seq"]) == (0, n - 1)
        view = log.read(s.sid)
        assert len(view.entries) == n + 2 and log.verify(s.sid).entries == n + 2
        old = s.fork_at(at_seq=n - 1)
        assert len(asyncio.run(old.get_items())) == n  # the summarized items, as they were
    # Measured: one GET, of the head (the summary is in its tail).
    assert counts == {50: 1, 5_000: 1}


def test_openai_compaction_session_keeps_the_history() -> None:
    pytest.importorskip("agents")
    from agents.memory import OpenAIResponsesCompactionSession

    class Responses:
        async def compact(self, **kwargs: Any) -> Any:
            assert len(kwargs["input"]) == 6
            return types.SimpleNamespace(output=[{"type": "compaction", "summary": "S"}], usage=None)

    _, log, s = _oa_session(6)
    compacting = OpenAIResponsesCompactionSession("conv-1", s, client=types.SimpleNamespace(responses=Responses()))
    asyncio.run(compacting.run_compaction({"force": True, "compaction_mode": "input"}))
    assert asyncio.run(s.get_items()) == [{"type": "compaction", "summary": "S"}]
    kinds = [e.kind for e in log.read(s.sid).entries]
    assert kinds == ["oa.items"] * 6 + ["oa.summary"]


def test_openai_summarize_refuses_an_empty_session_and_non_lists() -> None:
    pytest.importorskip("agents")
    from s3log.integrations import IntegrationError
    from s3log.integrations.openai_agents import S3LogSession

    store = s3log.MemoryStore()
    s = S3LogSession("empty", s3log.Log(store))
    with pytest.raises(IntegrationError, match="nothing stored"):
        asyncio.run(s.summarize([{"role": "assistant", "content": "x"}]))
    with pytest.raises(IntegrationError, match="list of items"):
        asyncio.run(s.summarize({"role": "assistant"}))  # type: ignore[arg-type]
    assert store.requests["PUT"] == 0


def test_a_signed_session_restores_from_the_summary_under_trusted_keys() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer, PublicKeyVerifier

    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    # A small tail: the summary and what follows it go to segments, read back under the key.
    config = s3log.LogConfig(signer=signer, verifier=PublicKeyVerifier([signer.public_key]),
                             tail_per_commit=0, tail_max_bytes=600)
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=config)
    session = AgentSession.create(log, system_prompt="sys")
    for i in range(30):
        _turn(session, i)
    span = session.summarize({"role": "system", "content": "summary"})
    for i in range(5):
        _turn(session, 100 + i)
    head = log.head(session.session_id)
    needed = sum(1 for _, _, last in segment_ranges(head) if last >= span.seq) if span.seq < head.tail_first_seq else 0
    gets, restored = _restore_gets(store, log, session.session_id)
    assert gets == 1 + needed  # the head, then the segments from the newest back to the summary's
    assert restored.state == collect_state(log.read(session.session_id).entries)
    assert log.verify(session.session_id).entries == head.seq + 1


# --- restores from a summary, then more commits: the whole fold, every entry once -----


@pytest.mark.parametrize("tail_per_commit,cache_levels", [(0, 0), (0, 3), (1, 1), (4, 3)])
def test_a_writer_opened_at_a_summary_then_merging_keeps_every_entry(tail_per_commit: int,
                                                                     cache_levels: int) -> None:
    """A writer opened from a suffix (reducer.restarts) has only the segments it read in
    its merge cache; its commits then merge older segments. Nothing may be lost."""
    store = s3log.MemoryStore()
    cfg = s3log.LogConfig(tail_per_commit=tail_per_commit, tail_max_bytes=400, fanout=2,
                          cache_levels=cache_levels)
    log = s3log.Log(store, config=cfg)
    s = AgentSession.create(log, system_prompt="sys")
    for i in range(40):
        s.record_turn([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}])
    s.summarize({"role": "system", "content": "sum"}, keep_last=2)
    for i in range(5):
        s.record_turn([{"role": "user", "content": f"r{i}"}, {"role": "assistant", "content": f"b{i}"}])
    sid = s.session_id
    n_before = len(log.read(sid).entries)
    for round_ in range(6):
        r = AgentSession.restore(s3log.Log(store, config=cfg), sid)
        assert r.state == collect_state(log.read(sid).entries)
        for i in range(7):
            r.record_turn([{"role": "user", "content": f"x{round_}.{i}"}, {"role": "assistant", "content": "y"}])
        r.close()
    view = s3log.Log(store, config=cfg).read(sid)
    assert s3log.Log(store).verify(sid).ok
    assert [e.seq for e in view.entries] == list(range(len(view.entries)))
    assert len(view.entries) == n_before + 6 * 7 * 3
    assert AgentSession.restore(log, sid).state == collect_state(view.entries)


def test_a_restore_of_a_fork_made_after_a_summary_is_the_whole_fold() -> None:
    store = s3log.MemoryStore()
    cfg = s3log.LogConfig(tail_per_commit=0, tail_max_bytes=300)
    log = s3log.Log(store, config=cfg)
    s = AgentSession.create(log, system_prompt="sys")
    for i in range(10):
        s.record_turn([{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}])
    s.summarize({"role": "system", "content": "sum"}, keep_last=2)
    s.record_turn([{"role": "user", "content": "after"}, {"role": "assistant", "content": "b"}])
    f = s.fork()
    f.record_turn([{"role": "user", "content": "child"}, {"role": "assistant", "content": "c"}])
    f.summarize({"role": "system", "content": "child-sum"}, keep_last=0)
    f.record_turn([{"role": "user", "content": "child2"}, {"role": "assistant", "content": "d"}])
    for sid in (s.session_id, f.session_id):
        assert AgentSession.restore(log, sid).state == collect_state(log.read(sid).entries)
