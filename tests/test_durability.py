"""Regression tests for every known way s3log lost, duplicated or hid acknowledged data.

Each test failed on the release before the commit decision table; the comment on each
names the defect it guards against.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import s3log
from s3log._format.codec import decode_head, encode_head
from s3log._format.values import Head
from s3log._protocol.ops import Blob
from s3log._protocol.read import load_from_head
from s3log.config import LogConfig, RetryPolicy
from s3log.errors import (
    ConditionalRequestConflict,
    CorruptionError,
    InvalidArgumentError,
    InvalidEntryError,
    InvalidPrefixError,
    PreconditionFailed,
    SessionExists,
    StoreError,
    TransientStoreError,
)
from s3log.testing.faults import Fault, FaultyStore
from tests.helpers import one_entry

FAST = LogConfig(retry=RetryPolicy(attempts=6, initial=0.0001, max_backoff=0.0005),
                 tail_per_commit=0, tail_max_bytes=1024)
HOUR = 3_600_000


class ExistsLiar(s3log.MemoryStore):
    """Answers the first create-only PUT of each segment with "already exists" and writes
    nothing: what obstore did with a 409 on ``S3Store.fast``."""

    def __init__(self) -> None:
        super().__init__()
        self.lied: set[str] = set()

    def put_if_absent(self, key: str, body: bytes) -> str:
        if "/seg/" in key and key not in self.lied:
            self.lied.add(key)
            self.requests.add("PUT")
            raise PreconditionFailed("already exists (really a 409)", key=key, status=412)
        return super().put_if_absent(key, body)


def test_already_exists_on_a_segment_is_never_trusted_blindly() -> None:
    # Defect 1: the commit was acked, then every read raised "segment ... is missing".
    store = ExistsLiar()
    log = s3log.Log(store, config=FAST)
    w = log.create()
    for i in range(20):
        w.append("k", "x" * 200 + str(i))
    w.commit()
    assert store.lied, "the test must have made a segment PUT lie"
    assert [e.data[-2:].lstrip("x") for e in log.read(w.session_id).entries] == [str(i) for i in range(20)]


class Conflict409OnSegments(s3log.MemoryStore):
    """Answers the first two create-only PUTs of each segment or marker with a 409."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: dict[str, int] = {}

    def put_if_absent(self, key: str, body: bytes) -> str:
        if not key.endswith("/head") and self.hits.get(key, 0) < 2:
            self.hits[key] = self.hits.get(key, 0) + 1
            raise ConditionalRequestConflict("injected 409", key=key, status=409)
        return super().put_if_absent(key, body)


def test_409_on_segment_and_marker_puts_is_retried_inside_s3log() -> None:
    # Defect 7: a 409 on a unique key reached the caller.
    store = Conflict409OnSegments()
    log = s3log.Log(store, config=FAST)
    w = log.create()
    for _ in range(20):
        w.append("k", "y" * 200)
    w.commit()
    child = log.fork(w.session_id)
    assert any("/seg/" in k for k in store.hits) and any("/forks/" in k for k in store.hits)
    assert len(log.read(w.session_id).entries) == 20
    assert len(log.read(child).entries) == 1


@pytest.mark.parametrize("depth", [300, 398, 399, 400, 10_000])
def test_deep_data_is_refused_at_append_and_nothing_is_poisoned(depth: int) -> None:
    # Defect 2: data ~400 deep was acked and the session became unreadable; 10,000 deep
    # crashed the process inside the encoder.
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    w.append("k", "before")
    w.commit()
    value: object = 0
    for _ in range(depth):
        value = [value]
    with pytest.raises(InvalidEntryError, match="deeper than"):
        w.append("k", value)
    w.append("k", "after")
    w.commit()
    assert [e.data for e in log.read(w.session_id).entries] == ["before", "after"]


def test_deep_data_within_the_bound_reads_back_and_forks() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    value: object = "leaf"
    for _ in range(s3log._format.entries.MAX_DATA_DEPTH - 1):
        value = {"k": value}
    w.append("k", value)
    w.commit()
    assert log.read(w.session_id).entries[0].data == value
    child = log.fork(w.session_id)  # the seed wraps the data in a few more levels
    assert log.read(child).seed[0]["data"] == value


@pytest.mark.parametrize(("kind", "data"), [
    ("bad\ud800", 1), ("k", "bad\ud800"), ("k", {"bad\udfff": 1}),
    # A flat map is checked in one pass (entries._flat_map_ok): its keys and values too,
    # ASCII or not, and a map holding more than text and scalars the general way.
    ("k", {"role": "user", "content": "caf\u00e9 bad\udc80", "n": 1}), ("k", {"ok": "\u00e9", 7: "x\ud800"}),
    ("k", {"role": "user", "parts": ["fine", {"deep": "bad\ud800"}]}),
])
def test_lone_surrogates_are_refused_at_append_and_never_block_others(kind: str, data: object) -> None:
    # Defect 3: accepted, then every later commit raised a raw UnicodeEncodeError.
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    w.append("k", "good-1")
    with pytest.raises(InvalidEntryError, match="surrogate"):
        w.append(kind, data)
    w.append("k", "good-2")
    w.commit()
    assert [e.data for e in log.read(w.session_id).entries] == ["good-1", "good-2"]


def _age_everything(store: s3log.MemoryStore, by_ms: int) -> None:
    for key in store.all_keys():
        store.put_raw(key, store.get(key).body, mtime_ms=s3log.env.wall_clock_ms() - by_ms)


def test_gc_grace_counts_from_when_a_segment_stopped_being_referenced() -> None:
    # Defect 4a: a segment created long ago and merged away a moment ago was deleted
    # at once, and a reader holding the previous head got CorruptionError.
    store = s3log.MemoryStore()
    # Segments written first (pending_max_bytes=0): merges retire at once.
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=600, fanout=2, pending_max_bytes=0))
    w = log.create()
    for i in range(3):
        w.append("k", "z" * 500 + str(i))
        w.commit()
    _age_everything(store, 2 * HOUR)
    before = log.head(w.session_id)
    held = log._run(s3log._protocol.read.read_head(log.layout, w.session_id))
    w.append("k", "z" * 500 + "merge")
    w.commit()
    after = log.head(w.session_id)
    retired = set(before.segments) - set(after.segments)
    assert retired, "the last commit must have merged segments away"
    report = log.gc(older_than_ms=HOUR)
    assert not set(report.deleted) & retired
    data = log._run(load_from_head(log.layout, held[0], held[1]))  # the reader holding the old head
    assert len(data.entries) == 3


def test_gc_never_deletes_a_segment_a_retried_commit_will_reference() -> None:
    # Defect 4b: a retried commit found its old orphan segment "already exists", gc
    # deleted it before the head PUT, and the commit was acked against a missing segment.
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=FAST)
    sid = log.create().session_id
    plan_state = {"fail_heads": True}

    def plan(method: str, key: str) -> Fault | None:
        if method == "put_if_match" and plan_state["fail_heads"]:
            return "timeout-lost"
        return None

    # The segment is written before the head here (pending_max_bytes=0), as every
    # batch beyond pending_max_bytes is.
    faulty = s3log.Log(FaultyStore(store, plan), config=replace(FAST, pending_max_bytes=0))
    w = faulty.open(sid)
    for i in range(10):
        w.append("k", "q" * 200 + str(i))
    with pytest.raises(StoreError):
        w.commit()  # the segment is written, the head never
    orphans = [k for k in store.all_keys() if "/seg/" in k]
    assert len(orphans) == 1
    _age_everything(store, 2 * HOUR)
    plan_state["fail_heads"] = False
    w.commit()  # the retry writes its segment under a new key...
    assert log.head(sid).segments[0] != orphans[0]
    assert log.gc(older_than_ms=HOUR).deleted == orphans  # ...so collecting the orphan is harmless
    assert len(log.read(sid).entries) == 10


def test_a_commit_that_raised_but_landed_does_not_make_the_next_commit_fork() -> None:
    # Defect 5: the writer marked itself stale and forked with no competitor.
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=FAST)
    sid = log.create().session_id
    state = {"n": 0}

    def plan(method: str, key: str) -> Fault | None:
        if method == "put_if_match" and state["n"] == 0:
            state["n"] += 1
            return "timeout-landed"
        if method == "get" and key.endswith("/head") and state["n"] == 1:
            return "503"  # the re-read fails for as long as the commit keeps trying
        return None

    faulty = FaultyStore(store, plan)
    w = s3log.Log(faulty, config=FAST).open(sid)
    w.append("k", "a")
    with pytest.raises(StoreError):
        w.commit()
    state["n"] = 2
    w.append("k", "b")
    result = w.commit()
    assert result.fork is None and result.session_id == sid and w.forks == []
    assert [e.data for e in log.read(sid).entries] == ["a", "b"]
    assert [e.data for e in result.acked] == ["a", "b"]
    assert log.list_session_ids() == [sid]


def _plant_head(store: s3log.MemoryStore, log: s3log.Log, sid: str, mutate: dict[str, object]) -> None:
    key = log.layout.head(sid)
    head = decode_head(store.get(key).body, key)
    fields = head.to_map()
    fields.update(mutate)
    store.put_raw(key, s3log._format.cbor.dumps(fields))


def test_one_bad_head_or_stray_folder_does_not_break_the_bucket() -> None:
    # Defect 8: list_sessions, gc and verify --all failed for every session.
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    good = one_entry(log)
    bad = log.create().session_id
    future = log.create().session_id
    store.put_raw(log.layout.head(bad), b"\xff\x00garbage")
    _plant_head(store, log, future, {"v": 99})
    store.put_raw("s3log/sessions/not a valid id!/head", b"x")
    store.put_raw("s3log/sessions/orphan-folder/seg/000000000000-" + "0" * 64 + ".cbor", b"x", mtime_ms=1)
    rows = {r.session_id: r for r in log.list_sessions()}
    assert not rows[good.session_id].broken
    assert rows[bad].broken and "CBOR" in (rows[bad].error or "")
    assert rows[future].broken and "version" in (rows[future].error or "")
    assert "orphan-folder" not in rows  # no head: an orphan for gc, not a broken session
    report = log.gc(older_than_ms=0)
    assert sorted(report.broken) == sorted([bad, future])
    assert any("orphan-folder" in k for k in report.deleted)


def test_fork_into_an_existing_id_writes_nothing() -> None:
    # Defect 9: a fork marker was written before SessionExists.
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    parent = log.create().session_id
    taken = log.create().session_id
    before = list(store.all_keys())
    with pytest.raises(SessionExists):
        log.fork(parent, child_id=taken)
    assert list(store.all_keys()) == before
    with pytest.raises(InvalidArgumentError, match="into itself"):
        log.fork(parent, child_id=parent)
    assert list(store.all_keys()) == before
    assert [s.session for s in log.lineage(parent)] == [parent]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda log, sid: log.create(meta=[1, 2]), InvalidArgumentError),
        (lambda log, sid: log.create(meta={1: "x"}), InvalidArgumentError),
        (lambda log, sid: log.fork(sid, at_seq="0"), InvalidArgumentError),
        (lambda log, sid: log.fork(sid, at_seq=True), InvalidArgumentError),
        (lambda log, sid: log.fork(sid, at_hash=12), InvalidArgumentError),
        (lambda log, sid: log.fork(sid, meta="x"), InvalidArgumentError),
        (lambda log, sid: log.open(sid).append("k", 1, ts=2**70), InvalidEntryError),
        (lambda log, sid: log.open(sid).append("k", 1, ts=-1), InvalidEntryError),
        (lambda log, sid: log.gc(older_than_ms="1h"), InvalidArgumentError),
    ],
)
def test_bad_arguments_are_clear_errors_before_anything_is_written(call: object, error: type) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    sid = log.create().session_id
    before = {k: store.get(k).body for k in store.all_keys()}
    with pytest.raises(error) as info:
        call(log, sid)  # type: ignore[operator]
    assert isinstance(info.value, s3log.S3LogError) and isinstance(info.value, ValueError)
    assert {k: store.get(k).body for k in store.all_keys()} == before


@pytest.mark.parametrize("prefix", ["..", "a//b", "../../etc", "a/./b", "x/../y", "bad\\name", 3])
def test_unsafe_prefixes_are_refused(prefix: object) -> None:
    with pytest.raises(InvalidPrefixError):
        s3log.Log(s3log.MemoryStore(), prefix=prefix)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "s3log", "tenants/t1/logs", "/trimmed/", "a.b-c_d"])
def test_ordinary_prefixes_are_accepted(prefix: str) -> None:
    log = s3log.Log(s3log.MemoryStore(), prefix=prefix)
    w = one_entry(log)
    assert len(log.read(w.session_id).entries) == 1


@pytest.mark.parametrize(
    "segments",
    [["s3log/sessions/OTHER/seg/000000000000-" + "0" * 64 + ".cbor"], ["secrets/huge.bin"],
     ["s3log/sessions/{sid}/seg/../../../x"], ["s3log/sessions/{sid}/seg/000000000000-" + "0" * 64 + ".cbor"] * 50_000],
)
def test_a_hostile_head_cannot_make_a_reader_fetch_outside_its_session(segments: list[str]) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    sid = log.create().session_id
    segs = [s.replace("{sid}", sid) for s in segments]
    _plant_head(store, log, sid, {"segments": segs, "levels": [0] * len(segs)})
    store.requests.reset()
    with pytest.raises(CorruptionError, match="segment"):
        log.read(sid)
    assert store.requests["GET"] == 1  # the head only


def test_lazy_create_then_empty_commit_stores_nothing() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create("lazy-1", lazy=True)
    w.commit()
    assert store.all_keys() == []
    w.append("k", 1)
    w.commit()
    assert len(log.read("lazy-1").entries) == 1


class LandedThenLost(s3log.MemoryStore):
    """Every head PUT lands, and its response is lost."""

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        super().put_if_match(key, body, etag)
        raise TransientStoreError("reset after write", key=key)


def test_every_head_response_lost_still_commits_exactly_once() -> None:
    store = LandedThenLost()
    log = s3log.Log(store, config=FAST)
    w = log.create()
    for i in range(30):
        w.append("k", i)
        assert w.commit().fork is None
    assert [e.data for e in log.read(w.session_id).entries] == list(range(30))


def test_head_blob_roundtrip_keeps_retired_at() -> None:
    h = Head("s", 1, -1, None, (), (), (), None, {}, 0, 0, "w", retired_at=123)
    assert decode_head(encode_head(h), "k").retired_at == 123
    assert Blob(b"", "") is not None


@pytest.mark.parametrize("on_conflict", ["raise", "fork"])
def test_equal_entries_of_another_writer_are_not_taken_for_ours(on_conflict: str) -> None:
    """Two writers append the same entry (kind, ts, data) at the same place. The one
    whose head PUT is refused (a definite 412: nothing of it was stored) must not
    acknowledge the other's equal entry as its own: two appends, one stored entry.
    (Seen as two concurrent OpenAI-session pops both returning the same item.)"""
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=FAST)
    sid = log.create().session_id
    a = log.open(sid, on_conflict=on_conflict)
    b = log.open(sid)
    b.append("pop", {"item": "x"}, ts=1000)
    b.commit()
    a.append("pop", {"item": "x"}, ts=1000)  # byte-identical to b's entry, same seq and prev
    if on_conflict == "raise":
        with pytest.raises(s3log.ConflictError) as info:
            a.commit()
        assert info.value.landed == []
    else:
        result = a.commit()
        assert result.fork is not None, "a's entry was never stored in the parent: it goes to a fork"
        assert [e.kind for e in log.read(result.fork.child).entries][-1] == "pop"
    assert len(log.read(sid).entries) == 1


def test_flat_maps_of_valid_text_and_scalars_are_kept_as_given_and_depth_is_still_bounded() -> None:
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    flat = {"role": "assistant", "content": "caf\u00e9 \U0001f600", 3: True, "n": None, "b": b"\x00", "f": 1.5}
    w.append("k", flat)
    deep: object = "leaf"
    for _ in range(300):
        deep = {"d": deep}
    with pytest.raises(InvalidEntryError, match="deeper"):
        w.append("k", deep)
    w.commit()
    assert [e.data for e in log.read(w.session_id).entries] == [flat]
