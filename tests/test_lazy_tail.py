"""A decoded v2 head keeps its tail as verified columns and makes the entries when the
tail is first read (``columns._LazyTail``): a scan makes no Entry for a head's tail, and
everyone else sees the same Head as before, equal, copyable, picklable, safe to read
from many threads."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading
from typing import Any

import pytest

import s3log
from s3log import analytics
from s3log._format import codec, columns, records, values
from s3log._format.cbor import loads
from s3log._format.chain import ChainVerifier
from s3log._format.columns import LinkedRun, RunColumns, _LazyTail, tail_run
from s3log._format.values import Entry, Head
from s3log.errors import CorruptionError


def _session(entries: int = 30, per_commit: int = 10, **config: Any) -> tuple[s3log.MemoryStore, str, str]:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(**config))
    w = log.create()
    for i in range(entries):
        w.append("tool_call" if i % 3 == 0 else "message", {"i": i, "text": "x" * (i % 7)})
        if i % per_commit == per_commit - 1:
            w.commit()
    w.commit()
    log.close()
    return store, w.session_id, f"s3log/sessions/{w.session_id}/head"


def _decoded(store: s3log.MemoryStore, key: str) -> Head:
    return codec.decode_head(store.get(key).body, key)


def _eager(store: s3log.MemoryStore, key: str) -> tuple[Entry, ...]:
    """The tail as the general decoder reads it (every record decoded as a map)."""
    obj = loads(store.get(key).body)
    digests = [codec.hashlib.sha256(r).digest() for r in obj["tail"]]
    assert digests == obj["tail_hashes"]
    maps = [loads(r) for r in obj["tail"]]
    return tuple(Entry(m["seq"], m["prev"], m["kind"], m["ts"], m["data"], d, r)
                 for m, d, r in zip(maps, digests, obj["tail"], strict=True))


def test_a_decoded_head_holds_its_tail_unmade_until_read() -> None:
    store, _, key = _session()
    head = _decoded(store, key)
    assert isinstance(head._lazy_tail, _LazyTail)
    assert head.tail_first_seq == 0  # without making the entries
    assert head._lazy_tail is not None
    tail = head.tail
    assert type(tail) is LinkedRun and tail.columns is not None
    assert tail == _eager(store, key)
    assert head._lazy_tail is None
    assert head.tail is tail  # made once


def test_a_lazy_head_is_equal_copyable_and_picklable_as_a_made_one() -> None:
    store, _, key = _session()
    made = _decoded(store, key)
    _ = made.tail
    assert _decoded(store, key) == made
    assert made == _decoded(store, key)
    assert pickle.loads(pickle.dumps(_decoded(store, key))) == made
    assert copy.copy(_decoded(store, key)) == made
    assert copy.deepcopy(_decoded(store, key)) == made
    assert dataclasses.replace(_decoded(store, key), version=99).tail == made.tail
    assert repr(_decoded(store, key)) == repr(made)
    assert dataclasses.asdict(_decoded(store, key)) == dataclasses.asdict(made)
    assert "_lazy_tail" not in {f.name for f in dataclasses.fields(Head)}


def test_other_missing_attributes_still_raise() -> None:
    store, _, key = _session()
    head = _decoded(store, key)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        head.nope  # type: ignore[attr-defined]  # noqa: B018


def test_many_threads_reading_one_lazy_tail_all_see_the_same_entries() -> None:
    store, _, key = _session(60, 60)
    want = _eager(store, key)
    for _ in range(20):
        head = _decoded(store, key)
        barrier = threading.Barrier(8)
        got: list[Any] = []

        def read(h: Head = head, b: threading.Barrier = barrier) -> None:
            b.wait()
            got.append(h.tail)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 8 and all(t == want for t in got)


def test_a_scan_makes_no_entry_for_a_heads_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    store, sid, _ = _session(30, 10)
    made: list[int] = []
    real = values._NEW_ENTRY

    def counting(*args: Any) -> Entry:
        made.append(1)
        return real(*args)

    for module in (columns, records, codec):  # every decoder that makes entries
        monkeypatch.setattr(module, "_NEW_ENTRY", counting)
    table = analytics.to_arrow(store)
    assert table.num_rows == 30
    assert table.column("seq").to_pylist() == list(range(30))
    assert made == []
    # A reader that asks for entries still gets them.
    assert [e.seq for e in s3log.Log(store).read(sid)] == list(range(30))
    assert made


def test_read_runs_gives_the_tail_as_columns_and_a_head_whose_tail_reads() -> None:
    store, sid, key = _session(30, 10)
    head, runs = s3log.Log(store).read_runs(sid)
    assert isinstance(runs[-1], RunColumns)
    assert runs[-1].hashes == [e.hash for e in _eager(store, key)]
    assert head.tail == _eager(store, key)


def test_a_tail_read_as_columns_that_does_not_join_the_chain_is_refused_as_entries_are() -> None:
    store, _, key = _session(12, 12)
    columns = tail_run(_decoded(store, key))
    assert isinstance(columns, RunColumns)
    entries = _decoded(store, key).tail
    for start_seq, start_hash in ((1, None), (0, b"\x01" * 32)):
        by_columns, by_entries = (ChainVerifier("s", start_seq=start_seq, start_hash=start_hash),
                                  ChainVerifier("s", start_seq=start_seq, start_hash=start_hash))
        with pytest.raises(CorruptionError) as one:
            by_columns.feed_linked_columns(key, columns)
        with pytest.raises(CorruptionError) as other:
            by_entries.feed(key, entries)
        assert str(one.value) == str(other.value)
    ok = ChainVerifier("s")
    ok.feed_linked_columns(key, columns)
    assert (ok.next_seq, ok.last_hash) == (12, entries[-1].hash)


def test_a_v1_head_and_a_tail_off_the_fast_path_are_made_at_once() -> None:
    store, _, key = _session(format_version=1)
    head = _decoded(store, key)
    assert getattr(head, "_lazy_tail", None) is None
    assert tail_run(head) == head.tail
