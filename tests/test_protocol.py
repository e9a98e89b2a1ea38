"""Unit tests of the sans-IO pieces and of guarantees checked on MemoryStore."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import s3log
from s3log._format.manifest import max_manifest_length, plan_merge
from s3log.config import LogConfig
from tests.helpers import run_threads


def test_merge_plan_keeps_fewer_than_fanout_segments_per_level() -> None:
    levels: list[int] = []
    for _ in range(5000):
        plan = plan_merge(levels, 4)
        levels = [*levels[:len(levels) - plan.take], plan.level]
        assert levels == sorted(levels, reverse=True)
        for lvl in set(levels):
            assert levels.count(lvl) < 4
    assert len(levels) <= max_manifest_length(5000, 4)


def test_restore_of_ten_thousand_single_entry_commits_reads_head_plus_at_most_20_segments() -> None:
    store = s3log.MemoryStore()
    # A tiny tail bound makes every commit write a segment: the worst case for merging.
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=1))
    w = log.create()
    for i in range(10_000):
        w.append("k", i)
        w.commit()
    store.requests.reset()
    view = log.read(w.session_id)
    assert [e.data for e in view.entries] == list(range(10_000))
    gets = store.requests["GET"]
    assert gets <= 21, gets
    assert store.requests["LIST"] == 0


def test_restore_with_default_tail_after_ten_thousand_commits_is_bounded() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    for i in range(10_000):
        w.append("turn", {"i": i, "text": "x" * 40})
        w.commit()
    store.requests.reset()
    w2 = log.open(w.session_id)
    assert w2.head.seq == 9_999
    assert store.requests["GET"] <= 21


def test_merging_needs_no_get_for_a_writer_that_wrote_the_segments() -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=1))
    w = log.create()
    store.requests.reset()
    for i in range(64):
        w.append("k", i)
        w.commit()
    assert store.requests["GET"] == 0
    assert store.requests["PUT"] == 128


def test_async_concurrent_appenders_share_commits() -> None:
    store = s3log.AsyncMemoryStore()
    alog = s3log.AsyncLog(store)

    async def main() -> list[s3log.Entry]:
        w = await alog.create()
        store.requests.reset()
        return list(await asyncio.gather(*(w.append_durable("k", i) for i in range(100))))

    entries = asyncio.run(main())
    assert sorted(e.data for e in entries) == list(range(100))
    assert len({e.seq for e in entries}) == 100
    # All 100 appends were queued before the first commit ran: one or two commits carry them.
    assert store.requests["PUT"] <= 4


class AsyncSlowPuts(s3log.AsyncMemoryStore):
    """Async head PUTs that suspend for a few milliseconds, like a network round trip."""

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        await asyncio.sleep(0.003)
        return await super().put_if_match(key, body, etag)


def test_async_appenders_in_rounds_share_commits_instead_of_one_commit_each() -> None:
    """64 tasks each appending durably 10 times: a waiter follows the commit in flight.

    Regression: every waiter used to queue a commit of its own behind the one in
    flight; each took the few entries queued when it got its turn (576 head PUTs here).
    """
    store = AsyncSlowPuts()
    alog = s3log.AsyncLog(store)

    async def main() -> tuple[list[s3log.Entry], int]:
        w = await alog.create()
        store.requests.reset()

        async def appender(a: int) -> list[s3log.Entry]:
            return [await w.append_durable("k", {"a": a, "i": i}) for i in range(10)]

        done = await asyncio.gather(*(appender(a) for a in range(64)))
        return [e for es in done for e in es], store.requests["PUT"]

    entries, puts = asyncio.run(main())
    assert len({e.seq for e in entries}) == 640
    # One commit per round of 64 (a few more when a round straddles a commit).
    assert puts <= 30, puts


class SlowPuts(s3log.MemoryStore):
    """PUTs take a few milliseconds, like a network round trip."""

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        time.sleep(0.003)
        return super().put_if_match(key, body, etag)


def test_threads_appending_durably_share_commits() -> None:
    store = SlowPuts()
    log = s3log.Log(store)
    w = log.create()
    results: list[s3log.Entry] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(20):
            e = w.append_durable("k", {"t": n, "i": i})
            with lock:
                results.append(e)

    run_threads(worker)
    assert len(results) == 160 and len({e.seq for e in results}) == 160
    view = log.read(w.session_id)
    assert sorted(e.seq for e in results) == [e.seq for e in view.entries]
    # While one commit is in flight the other threads queue: commits carry several entries.
    commits = view.head.version - 1
    assert commits < 160 / 2, commits


def test_uuid7_ids_sort_by_creation() -> None:
    from s3log._format.ids import uuid7_time_ms
    from s3log.env import uuid7

    ids = [uuid7() for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == 2000
    assert uuid7_time_ms(ids[0]) is not None


def test_ts_must_be_integer_milliseconds() -> None:
    w = s3log.Log(s3log.MemoryStore()).create()
    with pytest.raises(s3log.InvalidEntryError, match="ts"):
        w.append("k", 1, ts=1.5)  # type: ignore[arg-type]


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(
    st.integers(0, 2**40), st.one_of(st.none(), st.binary(min_size=32, max_size=32)), st.text(min_size=1),
    st.integers(0, 2**50), json_like,
)
def test_spliced_hash_equals_the_canonical_map(seq: int, prev: bytes | None, kind: str, ts: int, data: object) -> None:
    import hashlib

    import cbor2

    from s3log._format.values import entry_hash

    body = cbor2.dumps({"seq": seq, "prev": prev, "kind": kind, "ts": ts, "data": data}, canonical=True)
    assert entry_hash(seq, prev, kind, ts, data) == hashlib.sha256(body).digest()


@given(
    st.integers(0, 2**63 - 1), st.one_of(st.none(), st.binary(min_size=32, max_size=32)), st.text(min_size=1),
    st.integers(0, 2**63 - 1), json_like,
)
def test_record_laid_out_around_appended_bytes_equals_the_canonical_map(
    seq: int, prev: bytes | None, kind: str, ts: int, data: object
) -> None:
    """A commit lays each record out by hand around the data bytes encoded at append
    (no encoder call per entry): the record must be the deterministic map all the same."""
    import cbor2

    from s3log._format.cbor import dumps
    from s3log._format.entries import make_entry

    e = make_entry(seq, prev, kind, ts, data, dumps(data))
    assert e.raw == cbor2.dumps({"seq": seq, "prev": prev, "kind": kind, "ts": ts, "data": data}, canonical=True)
    assert e == make_entry(seq, prev, kind, ts, data)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), json_like), min_size=1, max_size=30), st.booleans())
def test_spliced_segment_and_head_encodings_equal_the_canonical_maps(
    items: list[tuple[str, object]], fork: bool
) -> None:
    import cbor2

    from s3log._format.chain import PendingEntry, build_chain
    from s3log._format.codec import decode_segment, encode_head, encode_segment
    from s3log._format.values import ParentRef
    from s3log._protocol.state import empty_head

    entries = build_chain([PendingEntry(k, 5, d) for k, d in items], after_seq=-1, after_hash=None)
    seg = encode_segment("s", entries, 1)
    assert seg == cbor2.dumps({"v": 1, "session": "s", "entries": [e.to_map() for e in entries]}, canonical=True)
    assert list(decode_segment(seg, "k").entries) == entries
    # Format v2 stores the entries as columns, each data item as its encoding, and hashes.
    seg2 = encode_segment("s", entries, 2)
    assert seg2 == cbor2.dumps({"v": 2, "session": "s", "seq": 0, "prev": None, "ts": [e.ts for e in entries],
                                "kinds": [e.kind for e in entries],
                                "data": [cbor2.dumps(e.data, canonical=True) for e in entries],
                                "hashes": [e.hash for e in entries]}, canonical=True)
    assert list(decode_segment(seg2, "k").entries) == entries
    parent = ParentRef("p", 3, b"\1" * 32, "conflict") if fork else None
    for v in (1, 2):
        head = empty_head("s", {"labels": {"a": 1}}, parent, 0)
        head = type(head)(**{**{f: getattr(head, f) for f in head.__dataclass_fields__}, "tail": tuple(entries),
                             "v": v})
        assert encode_head(head) == cbor2.dumps(head.to_map(), canonical=True)


@given(
    st.dictionaries(st.text(max_size=30) | st.integers(-(2**40), 2**40), json_like, max_size=5),
    st.booleans(), st.booleans(), st.sampled_from([1, 2]),
)
def test_head_encoding_is_the_canonical_map_whatever_its_fields(
    extra: dict[object, object], optional: bool, with_tail: bool, v: int
) -> None:
    """encode_head lays the map out from a cached key order in a few encoder calls: the
    bytes must still be the deterministic map, with any fields a newer writer added
    (kept as ``extra``, keys of any length or type) and every optional field."""
    import dataclasses

    import cbor2

    from s3log._format.chain import PendingEntry, build_chain
    from s3log._format.codec import _HEAD_FIELDS, decode_head, encode_head
    from s3log._format.values import Lease, Pending, Signature
    from s3log._protocol.state import empty_head

    # Not the fields a head types: its own, and ``expired`` (a tombstone's map, checked
    # by decode_head although it is kept among the extra fields).
    extra = {k: x for k, x in extra.items() if k not in _HEAD_FIELDS and k != "expired"}
    entries = build_chain([PendingEntry("k", 5, {"i": i}) for i in range(3)], after_seq=-1, after_hash=None)
    head = dataclasses.replace(empty_head("s", {"m": [1, 2]}, None, 0), extra=extra, v=v,
                               tail=tuple(entries) if with_tail else ())
    if optional:
        head = dataclasses.replace(head, retired_at=7, creator="c", lease=Lease("w", 9), sig=Signature("a", "k", b"x"),
                                   pending=Pending("s3log/sessions/s/seg/x", 2, 0, 0) if v == 2 else None)
    body = encode_head(head)
    assert body == cbor2.dumps(head.to_map(), canonical=True)
    assert encode_head(head) == body  # the cached layout gives the same bytes again
    assert decode_head(body, "k").extra == extra


def test_heads_encoded_from_the_previous_tail_equal_the_canonical_map() -> None:
    """A head's tail arrays reuse the previous head's bytes when its tail starts with the
    same entries (codec._tail_arrays): every head a writer writes, growing, flushed,
    promoted, and heads of two writers interleaved, must still be the canonical map."""
    import cbor2

    from s3log._format.codec import decode_head, encode_head

    store = s3log.MemoryStore()
    log = s3log.Log(store, config=LogConfig(tail_per_commit=0, tail_max_bytes=2048))
    a, b = log.create(), log.create()
    for i in range(120):
        for w in (a, b):
            for _ in range(i % 3 + 1):
                w.append("k", {"i": i, "pad": "p" * (i % 7) * 40})
            w.commit()
            head = w._core.ws.head
            body = store.get(log.layout.head(w.session_id)).body
            assert body == encode_head(head) == cbor2.dumps(head.to_map(), canonical=True)
            assert decode_head(body, "k").tail == head.tail
    assert [e.data["i"] for e in log.read(a.session_id).entries][-1] == 119


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"seq": -1}, "seq"), ({"seq": True}, "seq"), ({"prev": b"short"}, "prev"), ({"kind": 5}, "kind"),
        ({"ts": "now"}, "ts"), ({"hash": b"x"}, "hash"), ({"data": None, "__drop__": "data"}, "data"),
    ],
)
def test_malformed_entries_are_corruption_naming_what_is_wrong(change: dict[str, object], reason: str) -> None:
    import cbor2

    from s3log._format.codec import decode_segment

    entry: dict[str, object] = {"seq": 0, "prev": None, "kind": "k", "ts": 1, "data": 1, "hash": bytes(32)}
    drop = change.pop("__drop__", None)
    entry.update(change)
    if drop:
        del entry[str(drop)]
    body = cbor2.dumps({"v": 1, "session": "s", "entries": [entry]})
    with pytest.raises(s3log.CorruptionError, match=reason):
        decode_segment(body, "seg-key")
