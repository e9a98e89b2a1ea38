"""The commit decision table, row by row, and procedures under scripted replies.

The table tests call :mod:`s3log._protocol.decide` directly. The scripted tests run the real
commit procedure against an exact sequence of replies (tests/scripted.py, no store):
lost-but-landed, landed-then-built-on, a 409 storm, a conflict during a lazy create,
and "already exists" on a create-only PUT.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from s3log._format.cbor import dumps
from s3log._format.chain import PendingEntry, build_chain
from s3log._format.codec import decode_head, encode_head, encode_segment
from s3log._format.layout import Layout
from s3log._protocol import decide
from s3log._protocol.commit import CommitPlan, commit
from s3log._protocol.decide import Confirmed, CreateStep, Reply
from s3log._protocol.fork import _is_marker_of
from s3log._protocol.ops import Blob, Parallel, PutIfAbsent, PutIfMatch
from s3log._protocol.state import ChainPosition, new_writer_state
from s3log._protocol.write import rewrite_marker
from s3log.config import LogConfig, RetryPolicy
from s3log.env import Env
from s3log.errors import (
    ConditionalRequestConflict,
    ConflictError,
    ObjectNotFound,
    PreconditionFailed,
    SessionExists,
    StoreError,
    TransientStoreError,
)
from s3log.reducer import EntriesReducer
from tests.scripted import Script, Step

E404 = ObjectNotFound("x", status=404)
E412 = PreconditionFailed("x", status=412)
E409 = ConditionalRequestConflict("x", status=409)
E503 = TransientStoreError("x", status=503)
E403 = StoreError("denied", status=403)


# ------------------------------------------------------------------------ the table


@pytest.mark.parametrize(
    ("result", "reply"),
    [("etag", Reply.OK), (E404, Reply.NOT_FOUND), (E412, Reply.PRECONDITION), (E409, Reply.CONFLICT),
     (E503, Reply.UNKNOWN), (E403, Reply.FATAL)],
)
def test_classify(result: object, reply: Reply) -> None:
    assert decide.classify(result) is reply


@pytest.mark.parametrize(
    ("reply", "step"),
    [(Reply.OK, CreateStep.DONE), (Reply.PRECONDITION, CreateStep.CONFIRM), (Reply.CONFLICT, CreateStep.RETRY),
     (Reply.UNKNOWN, CreateStep.RETRY), (Reply.NOT_FOUND, CreateStep.FAIL), (Reply.FATAL, CreateStep.FAIL)],
)
def test_create_only_rows(reply: Reply, step: CreateStep) -> None:
    assert decide.after_create(reply) is step


def test_every_reply_has_a_create_row() -> None:
    assert set(decide.CREATE_TABLE) == set(Reply)


@pytest.mark.parametrize(
    ("reply", "stored", "verdict"),
    [(Reply.OK, b"ours", Confirmed.OURS), (Reply.OK, b"theirs", Confirmed.TAKEN), (Reply.NOT_FOUND, None,
     Confirmed.ABSENT), (Reply.UNKNOWN, None, Confirmed.UNKNOWN), (Reply.CONFLICT, None, Confirmed.UNKNOWN)],
)
def test_confirm_rows(reply: Reply, stored: bytes | None, verdict: Confirmed) -> None:
    assert decide.after_confirm(reply, stored, b"ours") is verdict


@pytest.mark.parametrize(
    ("reply", "stored", "same_fork", "step"),
    [(Reply.OK, b"new", True, decide.RefreshStep.DONE), (Reply.OK, b"old", True, decide.RefreshStep.REPLACE),
     (Reply.OK, b"other", False, decide.RefreshStep.TAKEN), (Reply.NOT_FOUND, None, False, decide.RefreshStep.CREATE),
     (Reply.UNKNOWN, None, False, decide.RefreshStep.AGAIN), (Reply.CONFLICT, None, False, decide.RefreshStep.AGAIN),
     (Reply.PRECONDITION, None, False, decide.RefreshStep.FAIL), (Reply.FATAL, None, False, decide.RefreshStep.FAIL)],
)
def test_marker_read_rows(reply: Reply, stored: bytes | None, same_fork: bool, step: decide.RefreshStep) -> None:
    assert decide.after_marker_read(reply, stored, b"new", same_fork) is step


@pytest.mark.parametrize(
    ("reply", "step"),
    [(Reply.OK, decide.RefreshStep.DONE), (Reply.PRECONDITION, decide.RefreshStep.AGAIN),
     (Reply.NOT_FOUND, decide.RefreshStep.AGAIN), (Reply.CONFLICT, decide.RefreshStep.AGAIN),
     (Reply.UNKNOWN, decide.RefreshStep.AGAIN), (Reply.FATAL, decide.RefreshStep.FAIL)],
)
def test_marker_replace_rows(reply: Reply, step: decide.RefreshStep) -> None:
    assert decide.after_marker_replace(reply) is step
    assert set(decide.REPLACE_TABLE) == set(Reply)


@pytest.mark.parametrize(
    ("reply", "creating", "step"),
    [(Reply.OK, False, decide.Committed("e")), (Reply.NOT_FOUND, False, decide.SessionGone()),
     (Reply.NOT_FOUND, True, decide.Reread()), (Reply.PRECONDITION, False, decide.Reread()),
     (Reply.CONFLICT, False, decide.Reread()), (Reply.UNKNOWN, True, decide.Reread()),
     (Reply.FATAL, False, decide.Fatal())],
)
def test_head_put_rows(reply: Reply, creating: bool, step: object) -> None:
    assert decide.after_head_put(reply, "e" if reply is Reply.OK else None, creating=creating) == step


@pytest.mark.parametrize(
    ("found", "expected", "attempt", "step"),
    [
        (decide.StoredHead("me", '"e2"'), '"e1"', 1, decide.Committed('"e2"')),   # lost response, landed
        (None, '"e1"', 1, decide.SessionGone()),                                     # deleted under us
        (None, None, 1, decide.Retry()),                                             # create: nothing there
        (None, None, 8, decide.GiveUp()),
        (decide.StoredHead("other", 'e1'), '"e1"', 1, decide.Retry()),              # unchanged (quotes differ)
        (decide.StoredHead("other", '"e1"'), '"e1"', 8, decide.GiveUp()),
        (decide.StoredHead("other", '"e9"'), '"e1"', 1, decide.Lost()),             # another writer
    ],
)
def test_reread_rows(found: decide.StoredHead | None, expected: str | None, attempt: int, step: object) -> None:
    assert decide.after_reread(found, expected_etag=expected, nonce="me", attempt=attempt, max_attempts=8) == step


@pytest.mark.parametrize(
    ("creating", "batch", "landed", "ends_at_ours", "on_conflict", "step"),
    [
        (True, 2, 0, False, "fork", decide.IdTaken()),
        (True, 2, 1, False, "fork", decide.IdTaken()),                # an identical first entry by chance
        (False, 2, 2, True, "fork", decide.AckAll(adopt=True)),       # all ours, nobody after: adopt
        (False, 2, 2, False, "fork", decide.AckAll(adopt=False)),     # all ours, built on: stale view
        (True, 2, 2, True, "fork", decide.AckAll(adopt=True)),        # lazy create landed, response lost
        (False, 3, 1, True, "fork", decide.AdoptAndRetry(1)),         # our earlier attempt: no competitor
        (False, 3, 0, True, "raise", decide.AdoptAndRetry(0)),
        (False, 3, 1, False, "fork", decide.ForkRest(1)),
        (False, 3, 0, False, "raise", decide.RaiseConflict(0)),
    ],
)
def test_after_lost_rows(
    creating: bool, batch: int, landed: int, ends_at_ours: bool, on_conflict: str, step: object
) -> None:
    got = decide.after_lost(
        creating=creating, batch=batch, landed=landed, stored_ends_at_ours=ends_at_ours, on_conflict=on_conflict
    )
    assert got == step


# ------------------------------------------------------------------- scripted procedures

LAYOUT = Layout("s3log")
SID = "sess"
CFG = LogConfig(
    env=Env.deterministic(7, lambda: 1_000_000), retry=RetryPolicy(attempts=5, initial=0.0, max_backoff=0.0),
    tail_max_bytes=400, tail_per_commit=0,
    pending_max_bytes=800,  # a head with a pending segment stays within twice the tail bound
    # The scripts spell out the decision table's requests; the activity marker a
    # creating commit adds is scripted in tests/test_retention.py.
    activity_index=False,
)
R = EntriesReducer()


def stored_ws(n: int = 0) -> ChainPosition:
    """A writer at a stored session holding ``n`` small entries, head ETag '"e0"'."""
    ws = new_writer_state(SID, R, now=0)
    entries = build_chain([PendingEntry("k", i, i) for i in range(n)], after_seq=-1, after_hash=None)
    from dataclasses import replace

    head = replace(ws.head, version=1, tail=tuple(entries), seq=n - 1, hash=entries[-1].hash if entries else None)
    return ChainPosition(SID, head, '"e0"', [], {})


def pending(*data: Any) -> list[PendingEntry]:
    return [PendingEntry("k", 5, d) for d in data]


def head_put_body(seen: list[Any]) -> bytes:
    """The body of the last head PUT the procedure sent."""
    for op in reversed(seen):
        if type(op).__name__ in ("PutIfMatch", "PutIfAbsent") and op.key.endswith("/head"):
            return bytes(op.body)
    raise AssertionError("no head PUT yet")


def test_lost_but_landed_is_acknowledged_once() -> None:
    script = Script([
        Step("PutIfMatch", E503, key="/head"),                         # the response is lost...
        Step("Get", lambda seen: Blob(head_put_body(seen), '"e1"')),  # ...but our head is there
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), pending("a"))))
    assert [e.data for e in result.acked] == ["a"] and result.fork is None
    assert result.etag == '"e1"'


def test_landed_then_built_on_is_acknowledged_not_forked() -> None:
    ws = stored_ws()
    ours = build_chain(pending("a"), after_seq=-1, after_hash=None)
    theirs = build_chain(pending("b"), after_seq=0, after_hash=ours[0].hash)
    from dataclasses import replace

    stored = replace(ws.head, version=3, seq=1, hash=theirs[0].hash, tail=(*ours, *theirs), writer="other")
    script = Script([
        Step("PutIfMatch", E503, key="/head"),
        Step("Get", Blob(encode_head(stored), '"e3"')),   # another writer built on our landed entry
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, ws, pending("a"))))
    assert [e.data for e in result.acked] == ["a"] and result.fork is None


def test_a_409_storm_on_the_head_retries_then_commits() -> None:
    unchanged = Blob(encode_head(stored_ws().head), '"e0"')
    script = Script([
        Step("PutIfMatch", E409), Step("Get", unchanged),
        Step("PutIfMatch", E409), Step("Get", unchanged),
        Step("PutIfMatch", E409), Step("Get", unchanged),
        Step("PutIfMatch", '"e1"'),
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), pending("a"))))
    assert [e.data for e in result.acked] == ["a"] and result.etag == '"e1"'


def test_a_409_storm_that_never_ends_raises_and_acknowledges_nothing() -> None:
    unchanged = Blob(encode_head(stored_ws().head), '"e0"')
    steps = [s for _ in range(5) for s in (Step("PutIfMatch", E409), Step("Get", unchanged))]
    with pytest.raises(StoreError, match="after 5 attempts"):
        Script(steps).run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), pending("a"))))


def test_conflict_during_lazy_create_is_session_exists() -> None:
    lazy = new_writer_state(SID, R, now=0)
    from dataclasses import replace

    someone = replace(lazy.head, version=1, writer="other")
    script = Script([
        Step("PutIfAbsent", E412, key="/head"),
        Step("Get", Blob(encode_head(someone), '"x"')),
    ])
    with pytest.raises(SessionExists):
        script.run(commit(CommitPlan(LAYOUT, CFG, R, lazy, pending("a"))))


def test_lazy_create_landed_then_built_on_is_acknowledged() -> None:
    lazy = new_writer_state(SID, R, now=0)
    ours = build_chain(pending("a"), after_seq=-1, after_hash=None)
    theirs = build_chain(pending("b"), after_seq=0, after_hash=ours[0].hash)
    from dataclasses import replace

    stored = replace(lazy.head, version=2, seq=1, hash=theirs[0].hash, tail=(*ours, *theirs), writer="other")
    script = Script([Step("PutIfAbsent", E503, key="/head"), Step("Get", Blob(encode_head(stored), '"e2"'))])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, lazy, pending("a"))))
    assert [e.data for e in result.acked] == ["a"]


def big_pending() -> list[PendingEntry]:
    return pending("x" * 300, "y" * 300)


def segment_put(seen: list[Any]) -> Any:
    for op in reversed(seen):
        if isinstance(op, Parallel) and type(op.ops[0]).__name__ == "PutIfAbsent":
            return op.ops[0]
    raise AssertionError("no segment PUT")


def test_already_exists_on_a_segment_is_confirmed_before_the_head_references_it() -> None:
    # obstore reported a 409 as "already exists": nothing is there. The GET shows it,
    # the segment is written again, and only then is the head PUT.
    script = Script([
        Step("Parallel", [E412], key="/seg/"),
        Step("Parallel", [E404], key="/seg/"),                     # confirm: not there at all
        Step("Parallel", ['"s"'], key="/seg/"),                    # written for real
        Step("PutIfMatch", '"e1"', key="/head"),
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), big_pending())))
    assert len(result.acked) == 2 and result.etag == '"e1"'


def test_already_exists_with_our_bytes_is_trusted() -> None:
    script = Script([
        Step("Parallel", [E412], key="/seg/"),
        Step("Parallel", lambda seen: [Blob(segment_put(seen).body, '"s"')]),  # our own landed attempt
        Step("PutIfMatch", '"e1"', key="/head"),
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), big_pending())))
    assert len(result.acked) == 2


def test_already_exists_with_other_bytes_is_never_referenced() -> None:
    other = encode_segment(SID, build_chain(pending("z"), after_seq=-1, after_hash=None))
    script = Script([
        Step("Parallel", [E412], key="/seg/"),
        Step("Parallel", [Blob(other, '"s"')]),
    ])
    with pytest.raises(Exception, match="another object holds"):
        script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), big_pending())))
    assert not any(type(op).__name__ == "PutIfMatch" for op in script.seen)


def test_a_409_on_a_segment_put_is_retried_not_raised() -> None:
    script = Script([
        Step("Parallel", [E409], key="/seg/"),
        Step("Parallel", [E409], key="/seg/"),
        Step("Parallel", ['"s"'], key="/seg/"),
        Step("PutIfMatch", '"e1"', key="/head"),
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), big_pending())))
    assert len(result.acked) == 2


def test_own_landed_prefix_is_adopted_without_a_fork() -> None:
    # An earlier commit of "a" raised although its head landed; now "a", "b" commit.
    ws = stored_ws()
    ours = build_chain(pending("a"), after_seq=-1, after_hash=None)
    from dataclasses import replace

    landed = replace(ws.head, version=2, seq=0, hash=ours[0].hash, tail=tuple(ours), writer="earlier-attempt")
    script = Script([
        Step("PutIfMatch", E412, key="/head"),
        Step("Get", Blob(encode_head(landed), '"e2"')),
        Step("PutIfMatch", '"e3"', key="/head", check=lambda op: None),
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, ws, pending("a", "b"))))
    assert [e.data for e in result.acked] == ["a", "b"] and result.fork is None
    final = decode_head(head_put_body(script.seen), "k")
    assert [e.data for e in final.tail] == ["a", "b"] and result.etag == '"e3"'


# ------------------------------------------------- planning: pending segments, flushes


@pytest.mark.parametrize(
    ("has", "confirmed", "flushes", "step"),
    [
        (False, False, False, decide.PendingStep.NONE),
        (False, False, True, decide.PendingStep.NONE),
        (True, True, False, decide.PendingStep.PROMOTE),
        (True, True, True, decide.PendingStep.PROMOTE),    # promoted, then the flush plans on top
        (True, False, False, decide.PendingStep.CARRY),    # another writer may still confirm it
        (True, False, True, decide.PendingStep.DROP),      # never referenced: the new segment holds it all
    ],
)
def test_pending_rows(has: bool, confirmed: bool, flushes: bool, step: decide.PendingStep) -> None:
    assert decide.pending_step(has_pending=has, confirmed=confirmed, flushes=flushes) is step


@pytest.mark.parametrize(
    ("inline", "pending_max", "version", "has_tail", "mode"),
    [
        (800, 2000, 2, True, decide.FlushMode.INLINE),
        (1000, 2000, 2, True, decide.FlushMode.INLINE),       # at the tail bound: still inline
        (1001, 2000, 2, True, decide.FlushMode.PARALLEL),
        (2000, 2000, 2, True, decide.FlushMode.PARALLEL),     # at the pending bound: still one round trip
        (2001, 2000, 2, True, decide.FlushMode.SEQUENTIAL),   # a big batch: segment first
        (1001, 0, 2, True, decide.FlushMode.SEQUENTIAL),      # 0: never beside the head
        (5000, 5000, 2, True, decide.FlushMode.PARALLEL),
        (5001, 5000, 2, True, decide.FlushMode.SEQUENTIAL),
        (1500, 5000, 1, True, decide.FlushMode.SEQUENTIAL),   # v1 heads have no pending field
        (9000, 5000, 2, False, decide.FlushMode.INLINE),      # nothing to flush (a huge meta)
    ],
)
def test_flush_mode_rows(inline: int, pending_max: int, version: int, has_tail: bool, mode: decide.FlushMode) -> None:
    got = decide.flush_mode(inline_bytes=inline, tail_max_bytes=1000, pending_max_bytes=pending_max,
                            format_version=version, has_tail=has_tail)
    assert got is mode


@pytest.mark.parametrize(
    ("commit", "share", "version", "bound"),
    [
        (100, 4, 2, 1000),       # a small commit sees the tail bound
        (250, 4, 2, 1000),       # four times its bytes is the tail bound: still it
        (300, 4, 2, 1200),       # bigger: four times its own bytes
        (1500, 4, 2, 3500),      # ... unless a next one as big could not flush within 5000
        (2600, 4, 2, 2400),      # ... and never below what that leaves
        (3000, 4, 2, 2000),
        (4500, 4, 2, 1000),      # nothing left: the tail bound
        (300, 0, 2, 1000),       # tail_per_commit=0: the strict bound
        (300, 4, 1, 1000),       # v1 heads flush in sequence: the strict bound
    ],
)
def test_tail_bound_rows(commit: int, share: int, version: int, bound: int) -> None:
    assert decide.tail_bound(tail_max_bytes=1000, pending_max_bytes=5000, commit_bytes=commit,
                             tail_per_commit=share, format_version=version) == bound


@pytest.mark.parametrize(
    ("inline", "commit", "mode"),
    [
        (1100, 300, decide.FlushMode.INLINE),      # past the tail bound, within four times the commit
        (1201, 300, decide.FlushMode.PARALLEL),    # past that: a segment beside the head
        (3500, 1500, decide.FlushMode.INLINE),
        (3501, 1500, decide.FlushMode.PARALLEL),
        (5001, 1500, decide.FlushMode.SEQUENTIAL), # past pending_max_bytes: segment first, as ever
    ],
)
def test_flush_mode_with_a_big_commit(inline: int, commit: int, mode: decide.FlushMode) -> None:
    got = decide.flush_mode(inline_bytes=inline, tail_max_bytes=1000, pending_max_bytes=5000, format_version=2,
                            has_tail=True, commit_bytes=commit, tail_per_commit=4)
    assert got is mode


def mid_pending() -> list[PendingEntry]:
    """Entries that overflow CFG's 400-byte tail but fit twice that: one round trip."""
    return pending("m" * 120, "n" * 120)


def test_a_segment_beside_the_head_that_meets_already_exists_is_not_confirmed_and_nothing_is_lost() -> None:
    # The segment PUT and the head PUT go out together; the segment's 412 is not
    # confirmed by a GET (that would cost the round trip): the head holds the entries.
    script = Script([
        Step("Parallel", ['"e1"', E412], check=lambda op: _pair(op)),
    ])
    result = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), mid_pending())))
    assert len(result.acked) == 2 and result.etag == '"e1"'
    assert result._ws.confirmed is None and result._ws.head.pending is not None
    assert not result._ws.head.segments and len(result._ws.head.tail) == 2


def test_a_segment_beside_the_head_confirmed_by_a_2xx_is_promoted_by_the_next_commit() -> None:
    script = Script([Step("Parallel", ['"e1"', '"s"'], check=lambda op: _pair(op))])
    first = script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), mid_pending())))
    assert first._ws.confirmed == first._ws.head.pending.key  # type: ignore[union-attr]
    script = Script([Step("PutIfMatch", '"e2"', key="/head")])
    roomy = replace(CFG, tail_max_bytes=700)  # the promoted head plus "o" fits: no new flush
    second = script.run(commit(CommitPlan(LAYOUT, roomy, R, first._ws, pending("o"))))
    assert second._ws.head.segments == (first._ws.confirmed,) and second._ws.head.pending is None
    assert [e.data for e in second._ws.head.tail] == ["o"]


def test_a_head_put_beside_a_segment_that_loses_the_race_forks_as_usual() -> None:
    other = stored_ws(1).head
    script = Script([
        Step("Parallel", [E412, '"s"'], check=lambda op: _pair(op)),
        Step("Get", lambda seen: Blob(encode_head(other), '"other"'), key="/head"),
    ])
    with pytest.raises(ConflictError):
        script.run(commit(CommitPlan(LAYOUT, CFG, R, stored_ws(), mid_pending(), on_conflict="raise")))


def _pair(op: Any) -> None:
    kinds = [type(o).__name__ for o in op.ops]
    assert kinds == ["PutIfMatch", "PutIfAbsent"], kinds  # replies are scripted in this order
    seg = next(o for o in op.ops if type(o).__name__ == "PutIfAbsent")
    head = decode_head(next(o for o in op.ops if type(o).__name__ == "PutIfMatch").body, "h")
    assert "/seg/" in seg.key and head.pending is not None and head.pending.key == seg.key
    assert seg.key not in head.segments, "the head never references the segment it is written beside"


# ------------------------------------------------------ writing a fork marker again


MARKER = {"v": 1, "child": "c", "parent": {"session": "p"}, "created_at": 1}
FRESH = PutIfAbsent("s3log/sessions/p/forks/c", dumps({**MARKER, "refreshed_at": 2}))


def _same(body: bytes) -> bool:
    return bool(_is_marker_of(body, MARKER))


def test_a_marker_is_replaced_in_place_with_if_match_on_the_copy_read() -> None:
    script = Script([
        Step("Parallel", [Blob(dumps(MARKER), '"m1"')], key="/forks/c"),
        Step("Parallel", ['"m2"'], key="/forks/c",
             check=lambda op: _check_replace(op, '"m1"')),
    ])
    assert script.run(rewrite_marker(CFG, FRESH, _same)) is Confirmed.OURS


def _check_replace(op: Any, etag: str) -> None:
    (put,) = op.ops
    assert isinstance(put, PutIfMatch) and put.etag == etag and put.body == FRESH.body


def test_a_marker_deleted_between_the_read_and_the_replace_is_created_again() -> None:
    script = Script([
        Step("Parallel", [Blob(dumps(MARKER), '"m1"')], key="/forks/c"),
        Step("Parallel", [E404], key="/forks/c"),                  # gc's DELETE came first
        Step("Parallel", [E404], key="/forks/c"),                  # read again: gone
        Step("Parallel", ['"m2"'], key="/forks/c"),                # created with the new bytes
    ])
    assert script.run(rewrite_marker(CFG, FRESH, _same)) is Confirmed.OURS


def test_a_marker_already_holding_the_new_bytes_is_not_written_again() -> None:
    script = Script([Step("Parallel", [Blob(FRESH.body, '"m2"')], key="/forks/c")])
    assert script.run(rewrite_marker(CFG, FRESH, _same)) is Confirmed.OURS


def test_another_object_at_the_marker_key_is_left_alone() -> None:
    other = dumps({**MARKER, "child": "d"})
    script = Script([Step("Parallel", [Blob(other, '"x"')], key="/forks/c")])
    assert script.run(rewrite_marker(CFG, FRESH, _same)) is Confirmed.TAKEN
    assert not _is_marker_of(b"\xff", MARKER) and not _is_marker_of(dumps([1]), MARKER)


def test_an_earlier_copy_landing_late_during_the_create_is_replaced() -> None:
    script = Script([
        Step("Parallel", [E404], key="/forks/c"),
        Step("Parallel", [E412], key="/forks/c"),                  # create: something is there now
        Step("Parallel", [Blob(dumps(MARKER), '"m1"')], key="/forks/c"),  # confirm: the old copy
        Step("Parallel", [Blob(dumps(MARKER), '"m1"')], key="/forks/c"),  # read again
        Step("Parallel", ['"m2"'], key="/forks/c"),                # replaced
    ])
    assert script.run(rewrite_marker(CFG, FRESH, _same)) is Confirmed.OURS
