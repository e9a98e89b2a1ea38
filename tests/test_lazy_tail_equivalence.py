"""A head's lazy tail (``columns._LazyTail``) is the general decoder's tail, whatever the bytes.

A decoded head keeps its tail unmade until ``.tail`` is first read; scans and ``read_runs``
take its verified columns. Checked against the general decoder for every seq width,
mutated and crafted records, tails that do not join the chain, generic tools, threads,
writers opened on a lazy head, and the build that decoded every tail eagerly.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gc
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest

import s3log
from s3log import analytics
from s3log._format import codec
from s3log._format.cbor import dumps
from s3log._format.chain import ChainVerifier, PendingEntry, build_chain
from s3log._format.columns import LinkedRun, RunColumns, _LazyTail, tail_run
from s3log._format.entries import _K_DATA, _R_SEQ, data_cbor_column
from s3log._format.layout import Layout
from s3log._format.records import _seq_fronts
from s3log._format.values import Entry, Head, entry_record
from s3log.errors import CorruptionError
from tests.helpers import run_threads

_L = Layout()


_SHA = hashlib.sha256


_BAD = _SHA(b"not the hash").digest()


_TS0 = 1_700_000_000_000


def _log(store: s3log.MemoryStore, **config: Any) -> s3log.Log:
    config.setdefault("tail_per_commit", 0)
    return s3log.Log(store, config=s3log.LogConfig(activity_index=False, **config))


def _pending(n: int, *, first: int = 0) -> list[PendingEntry]:
    """Varied entries: three kinds (one long), ts of several widths, maps and arrays."""
    out = []
    for i in range(first, first + n):
        data: Any = {"i": i, "t": "y" * (i % 13)} if i % 4 else [i, None, 1.5, "s" * (i % 3)]
        out.append(PendingEntry(("m", "tool_call", "k" * 30)[i % 3], _TS0 + (i * 7919 if i % 5 else 3), data))
    return out


def _built(n_seg: int, n_tail: int, *, fmt: int = 2, per_seg: int | None = None
           ) -> tuple[s3log.MemoryStore, str, Head, list[Entry]]:
    """A session whose segments hold entries 0..n_seg-1 and whose head's tail the next
    n_tail, written straight to a store (a tail of any length, at any seq)."""
    store = s3log.MemoryStore()
    log = _log(store, format_version=fmt)
    w = log.create()
    w.commit()
    sid = w.session_id
    log.close()
    key = _L.head(sid)
    blank = codec.decode_head(store.get(key).body, key)
    ents = build_chain(_pending(n_seg + n_tail), after_seq=-1, after_hash=None)
    segs = []
    step = per_seg or max(1, n_seg)
    for a in range(0, n_seg, step):
        chunk = ents[a:a + step]
        seg_key = _L.segment(sid, chunk[0].seq, chunk[-1].hash)
        store.put_if_absent(seg_key, codec.encode_segment(sid, chunk, fmt))
        segs.append(seg_key)
    head = dataclasses.replace(
        blank, seq=len(ents) - 1, hash=ents[-1].hash if ents else None, segments=tuple(segs),
        levels=(0,) * len(segs), tail=tuple(ents[n_seg:]), v=fmt,
        ts_min=min((e.ts for e in ents), default=None), ts_max=max((e.ts for e in ents), default=None))
    _put_head(store, sid, head)
    return store, sid, head, ents


def _put_head(store: s3log.MemoryStore, sid: str, head: Head) -> None:
    key = _L.head(sid)
    store.put_if_match(key, codec.encode_head(head), store.get(key).etag)


def _decoded(store: s3log.MemoryStore, sid: str) -> Head:
    key = _L.head(sid)
    return codec.decode_head(store.get(key).body, key)


def _lazy(head: Head) -> Any:
    """The head's unmade tail (``columns._LazyTail``), None once made or never lazy."""
    return getattr(head, "_lazy_tail", None)


def _fields(e: Entry) -> tuple[Any, ...]:
    return (e.seq, e.prev, e.kind, e.ts, repr(e.data), e.hash, e.raw)


def _outcome(body: bytes, key: str = "s3log/sessions/x/head") -> tuple[Any, ...]:
    """What decode_head makes of a body: the head's tail (every field), or the error
    (text and seq). When the decoder kept columns for a scan they are checked here to
    be the entries' own, and the last item says so (False when it kept none)."""
    try:
        head = codec.decode_head(body, key)
    except CorruptionError as exc:
        return ("error", str(exc), exc.seq)
    first = head.tail_first_seq
    run = tail_run(head)
    tail = head.tail
    if isinstance(run, RunColumns):
        got = (run.seq, run.prev, list(run.ts), list(run.kinds), list(run.data), list(run.hashes), repr(run.values))
        assert got == _columns_of(tail)
    return ("ok", first, [_fields(e) for e in tail], repr(dataclasses.replace(head, tail=())),
            isinstance(run, RunColumns))


def _same(fast: tuple[Any, ...], general: tuple[Any, ...]) -> bool:
    """The outcomes agree (the general decoder keeps no columns: not compared)."""
    return fast[:4] == general[:4]


def _general_outcome(body: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    with monkeypatch.context() as m:
        m.setattr("s3log._format.records._parse_linked_records", lambda *a: None)
        return _outcome(body)


def _columns_of(entries: tuple[Entry, ...] | list[Entry]) -> tuple[Any, ...]:
    """The columns a scan of ``entries`` must see (the data items as their records
    hold them, sliced by the entries' own reader)."""
    return (entries[0].seq, entries[0].prev, [e.ts for e in entries], [e.kind for e in entries],
            data_cbor_column(tuple(entries)), [e.hash for e in entries], repr([e.data for e in entries]))


def _template_head() -> dict[str, Any]:
    store = s3log.MemoryStore()
    log = _log(store)
    w = log.create()
    w.commit()
    log.close()
    obj: dict[str, Any] = cbor2.loads(store.get(_L.head(w.session_id)).body)
    return obj


_TEMPLATE = _template_head()


def _head_body(records: list[bytes], **fields: Any) -> bytes:
    """A v2 head holding ``records`` as its tail, their hashes as stored."""
    obj = dict(_TEMPLATE)
    obj.update(tail=records, tail_hashes=[_SHA(r).digest() for r in records], **fields)
    return cbor2.dumps(obj)


def _relink(records: list[bytes], start: int) -> list[bytes]:
    """Make every record after ``start`` end with the hash of the one before (each
    record's prev is its last 32 bytes), so a change stays linked."""
    out = list(records)
    for i in range(max(start, 0) + 1, len(out)):
        if out[i][-34:-32] == b"\x58\x20":
            out[i] = out[i][:-32] + _SHA(out[i - 1]).digest()
    return out


def _raw(ts: bytes, seq: bytes, data: bytes, kind: bytes, prev: bytes) -> bytes:
    """A record from its parts (each already encoded)."""
    return b"\xa5" + dumps("ts") + ts + dumps("seq") + seq + dumps("data") + data + \
        dumps("kind") + kind + dumps("prev") + prev


def _chain_raw(parts: list[tuple[bytes, bytes, bytes, bytes]], first_prev: bytes | None) -> list[bytes]:
    """Linked records from (ts, seq, data, kind) parts, the first's prev ``first_prev``."""
    out: list[bytes] = []
    prev = dumps(first_prev)
    for ts, seq, data, kind in parts:
        r = _raw(ts, seq, data, kind, prev)
        out.append(r)
        prev = b"\x58\x20" + _SHA(r).digest()
    return out


_STARTS = [0, 1, 20, 22, 23, 24, 250, 254, 255, 256, 4090, 4095, 4096, 65530, 65534, 65535, 65536,
           2**32 - 3, 2**32]


@pytest.mark.parametrize("s0", _STARTS)
@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_lazy_tail_across_seq_widths_is_the_general_decoders_tail(
        s0: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    prev = None if s0 == 0 else _SHA(str(s0).encode()).digest()
    ents = build_chain(_pending(n, first=s0), after_seq=s0 - 1, after_hash=prev)
    body = _head_body([entry_record(e) for e in ents], seq=ents[-1].seq, hash=ents[-1].hash)
    head = codec.decode_head(body, "k")
    assert isinstance(_lazy(head), _LazyTail)  # the fast path read it
    assert head.tail_first_seq == s0
    fast = _outcome(body)
    assert _same(fast, _general_outcome(body, monkeypatch)) and fast[4]
    assert fast[2] == [_fields(e) for e in ents]


def test_tails_changed_byte_by_byte_and_relinked_decode_or_fail_as_the_general_decoder_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded mutations of one record (flips, cuts, insertions), the records after it
    relinked so the change reaches the layout parse: the lazy head's tail, columns and
    errors are the general decoder's."""
    rng = random.Random(606)
    took_fast = errors = 0
    for s0, n in ((0, 6), (20, 8), (250, 9), (65532, 6), (4093, 5)):
        prev = None if s0 == 0 else _SHA(b"p").digest()
        base = [entry_record(e) for e in build_chain(_pending(n, first=s0), after_seq=s0 - 1, after_hash=prev)]
        for _ in range(70):
            recs = list(base)
            i = rng.randrange(n)
            b = bytearray(recs[i])
            how = rng.random()
            if how < 0.5:
                for _ in range(rng.randint(1, 2)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
            elif how < 0.75:
                at = rng.randrange(len(b))
                del b[at:at + rng.randint(1, 3)]
            else:
                at = rng.randrange(len(b))
                b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
            recs[i] = bytes(b)
            body = _head_body(_relink(recs, i))
            got = _outcome(body)
            assert _same(got, _general_outcome(body, monkeypatch)), (s0, n, i, recs[i].hex())
            errors += got[0] == "error"
            took_fast += got[0] == "ok" and got[4]
    assert errors and took_fast  # both sides of the parse were reached


def test_seq_fronts_have_one_width_throughout_when_their_ends_have_one() -> None:
    """``start0`` stands for every record's data offset when the first and last fronts
    are as long: the fronts are the deterministic encodings, whose length never falls
    as the seq grows, so no front in between can differ."""
    for s0 in (0, 1, 20, 23, 24, 200, 255, 256, 4000, 4095, 4096, 65000, 65535, 65536, 2**32 - 2, 2**32):
        for n in (1, 2, 3, 10, 300):
            fronts = list(_seq_fronts(s0, n))
            assert fronts == [_R_SEQ + dumps(s) + _K_DATA for s in range(s0, s0 + n)]
            widths = list(map(len, fronts))
            assert widths == sorted(widths)
            if widths[0] == widths[-1]:
                assert set(widths) == {widths[0]}


_TS = dumps(_TS0)


_KIND = dumps("m")


_DATA = dumps({"a": 1})


def _crafted_cases() -> list[tuple[str, list[bytes]]]:
    """Linked records in shapes the ``min(kinds_at) > start0`` shortcut must refuse or
    read as the general decoder does, in one-width runs and across width boundaries."""
    cases: list[tuple[str, list[bytes]]] = []
    for s0, n in ((0, 4), (21, 5), (253, 5), (30, 4)):
        seqs = [dumps(s) for s in range(s0, s0 + n)]
        prev = None if s0 == 0 else _BAD

        def run(middle: tuple[bytes, bytes, bytes, bytes], at: int, seqs: list[bytes] = seqs,
                prev: bytes | None = prev, n: int = n) -> list[bytes]:
            parts = [(_TS, seqs[i], _DATA, _KIND) for i in range(n)]
            parts[at] = middle
            return _chain_raw(parts, prev)

        for at in sorted({0, n // 2, n - 1}):
            tag = f"s0={s0} at={at}"
            cases.append((f"{tag} empty data", run((_TS, seqs[at], b"", _KIND), at)))
            cases.append((f"{tag} data is the kind key", run((_TS, seqs[at], dumps("kind"), _KIND), at)))
            cases.append((f"{tag} data ends with the kind key",
                          run((_TS, seqs[at], dumps(["x", "kind"]), _KIND), at)))
            cases.append((f"{tag} kind holds the kind key", run((_TS, seqs[at], _DATA, dumps("dkind")), at)))
            cases.append((f"{tag} kind is the kind key's text",
                          run((_TS, seqs[at], _DATA, dumps("kind")), at)))
            cases.append((f"{tag} two data items", run((_TS, seqs[at], _DATA + _DATA, _KIND), at)))
            cases.append((f"{tag} data then a tag head",
                          run((_TS, seqs[at], _DATA + b"\xd9\xd9\xf7", _KIND), at)))
            cases.append((f"{tag} kind not a text", run((_TS, seqs[at], _DATA, dumps(5)), at)))
            cases.append((f"{tag} kind not shortest",
                          run((_TS, seqs[at], _DATA, b"\x78\x01m"), at)))
            long_seq = b"\x19" + (s0 + at).to_bytes(2, "big")
            cases.append((f"{tag} seq not shortest", run((_TS, long_seq, _DATA, _KIND), at)))
            cases.append((f"{tag} ok", run((_TS, seqs[at], _DATA, _KIND), at)))
            # No "kind" key at all: the record's kind bytes replaced by the data key's.
            r = run((_TS, seqs[at], _DATA, _KIND), at)
            r[at] = r[at].replace(dumps("kind"), dumps("kinx"))
            cases.append((f"{tag} no kind key", _relink(r, at)))
    return cases


@pytest.mark.parametrize(("name", "records"), _crafted_cases(), ids=[c[0] for c in _crafted_cases()])
def test_crafted_records_around_the_one_width_shortcut_read_as_the_general_decoder_reads_them(
        name: str, records: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    body = _head_body(records)
    got = _outcome(body)
    assert _same(got, _general_outcome(body, monkeypatch))
    if name.endswith(" ok"):
        assert got[0] == "ok" and got[4]
    if "empty data" in name or "two data items" in name or "no kind key" in name:
        assert got[0] == "error"


def _tampered() -> Iterator[tuple[str, s3log.MemoryStore, str]]:
    for n_seg, n_tail in ((0, 3), (5, 1), (22, 4), (254, 4), (30, 12)):
        store, sid, head, ents = _built(n_seg, n_tail)
        tail = ents[n_seg:]
        objects = dict(store._objects)

        def variant(name: str, objects: dict[str, Any] = objects, sid: str = sid, n_seg: int = n_seg,
                    n_tail: int = n_tail, **changes: Any) -> tuple[str, s3log.MemoryStore, str]:
            s = s3log.MemoryStore()
            s._objects = dict(objects)
            # The tampered head is linked within (every record hashed as stored).
            _put_head(s, sid, dataclasses.replace(head, **changes))
            return (f"{n_seg}+{n_tail} {name}", s, sid)

        def rebuilt(after_seq: int, after_hash: bytes | None, tail: list[Entry] = tail) -> tuple[Entry, ...]:
            return tuple(build_chain([PendingEntry(e.kind, e.ts, e.data) for e in tail],
                                     after_seq=after_seq, after_hash=after_hash))

        t = rebuilt(n_seg - 1, _BAD)
        yield variant("tail linked to another hash", tail=t, hash=t[-1].hash)
        if n_seg:
            last = ents[n_seg - 1].hash
            for shift in (1, -1):
                t = rebuilt(n_seg - 1 + shift, last)
                yield variant(f"tail seq {shift:+}", tail=t, seq=t[-1].seq, hash=t[-1].hash)
            yield variant("tail repeats the last segment entry", tail=tuple(ents[n_seg - 1:]))
            yield variant("last segment dropped", segments=head.segments[:-1], levels=head.levels[:-1])
        yield variant("head seq +1", seq=head.seq + 1)
        yield variant("head seq -1", seq=head.seq - 1)
        yield variant("head hash", hash=_BAD)
        yield variant("head hash null", hash=None)
        if n_tail > 1:
            yield variant("tail gap", tail=tuple(tail[1:]))
            yield variant("tail cut", tail=tuple(tail[:-1]))


def _raised(f: Any) -> tuple[str, int | None]:
    with pytest.raises(CorruptionError) as exc:
        f()
    return str(exc.value), exc.value.seq


def test_a_tail_that_does_not_join_the_chain_is_refused_by_every_reader_with_one_error() -> None:
    """read (entries), read_runs (columns), a strict scan, verify: the same refusal."""
    seen = 0
    for name, store, sid in _tampered():
        log = _log(store)
        want = _raised(lambda log=log, sid=sid: log.read(sid))
        assert isinstance(tail_run(_decoded(store, sid)), RunColumns), name
        assert _raised(lambda log=log, sid=sid: log.read_runs(sid)) == want, name
        assert _raised(lambda log=log, sid=sid: log.verify(sid)) == want, name
        assert _raised(lambda store=store: analytics.to_arrow(store, strict=True)) == want, name
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert analytics.to_arrow(store).num_rows == 0
        assert [str(w.message) for w in caught] == [f"skipping session {sid}: {want[0]}"], name
        seen += 1
    assert seen > 40


def test_feed_linked_columns_refuses_as_feed_does_for_every_wrong_start() -> None:
    store, sid, _, ents = _built(0, 40)
    key = _L.head(sid)
    columns = tail_run(_decoded(store, sid))
    assert isinstance(columns, RunColumns)
    tail = _decoded(store, sid).tail
    for start_seq in (-1, 0, 1, 39, 40):
        for start_hash in (None, _BAD, ents[0].hash, ents[-1].hash):
            a = ChainVerifier(sid, start_seq=start_seq, start_hash=start_hash)
            b = ChainVerifier(sid, start_seq=start_seq, start_hash=start_hash)
            try:
                a.feed_linked_columns(key, columns)
                one: Any = (a.next_seq, a.last_hash)
            except CorruptionError as exc:
                one = (str(exc), exc.seq)
            try:
                b.feed(key, tail)
                other: Any = (b.next_seq, b.last_hash)
            except CorruptionError as exc:
                other = (str(exc), exc.seq)
            assert one == other, (start_seq, start_hash)


def test_a_head_with_a_bad_seq_and_a_bad_tail_names_the_seq_as_before() -> None:
    """The eager decoder checked session, version and seq before the tail (the
    Head's keyword arguments in order); a head wrong in both must still name them."""
    obj = dict(_TEMPLATE)
    for name, value in (("session", 5), ("version", "v"), ("seq", "s")):
        for tail_field, bad in (("tail", 7), ("tail_hashes", 7)):
            body = cbor2.dumps({**obj, name: value, tail_field: bad})
            with pytest.raises(CorruptionError, match=f"head field '{name}' is"):
                codec.decode_head(body, "k")


def test_an_attribute_error_inside_a_property_is_not_hidden_by_the_lazy_tail_hook() -> None:
    store, sid, _, _ = _built(0, 3)
    bad = dataclasses.replace(_decoded(store, sid), tail=(1, 2))  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="'int' object has no attribute 'seq'"):
        bad.tail_first_seq  # noqa: B018


def test_missing_attributes_of_a_head_raise_as_before() -> None:
    store, sid, _, _ = _built(0, 3)
    head = _decoded(store, sid)
    with pytest.raises(AttributeError) as exc:
        head.sq  # type: ignore[attr-defined]  # noqa: B018
    assert str(exc.value) == "'Head' object has no attribute 'sq'"
    assert exc.value.name == "sq" and exc.value.obj is head
    assert not hasattr(head, "_tail") and hasattr(head, "tail") and hasattr(head, "_lazy_tail")
    assert getattr(head, "nope", 7) == 7
    with pytest.raises(AttributeError):
        object.__getattribute__(Head.__new__(Head), "tail")
    with pytest.raises(AttributeError, match="tail"):
        Head.__new__(Head).tail  # noqa: B018 - an empty Head has no tail and nothing to make it from


#: The last commit whose heads decoded their tail at once (the parent of lazy tails, docs/decisions/0029).
EAGER_BUILD = "18f0a6b^"


def _old_tree(tmp: Path) -> Path | None:
    """s3log as of :data:`EAGER_BUILD`, or None when no git history is at hand."""
    root = Path(__file__).resolve().parent.parent
    git = shutil.which("git")
    if git is None:
        return None
    archive = subprocess.run([git, "-C", str(root), "archive", EAGER_BUILD, "s3log"], capture_output=True)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    return tmp


_RUNNER = r'''
import importlib, importlib.util, json, pickle, sys, warnings
import s3log
try:
    from s3log.analytics import reading as analytics
    from s3log._format import codec
except ImportError:  # the earlier build is laid out flat
    from s3log import analytics, codec
from s3log.store.memory import MemoryStore

# The eager build keeps the codec at s3log.codec, this tree at s3log._format.codec (and
# RunColumns at s3log._format.columns): each tree's own (an installed s3log may supply a
# module a tree lacks).
eager = "s3log.codec" if importlib.util.find_spec("s3log.codec") else None
codec = importlib.import_module(eager or "s3log._format.codec")
RunColumns = importlib.import_module(eager or "s3log._format.columns").RunColumns

def ent(e):
    return [e.seq, e.prev.hex() if e.prev else None, e.kind, e.ts, repr(e.data), e.hash.hex()]

def attempt(f):
    try:
        return f()
    except Exception as exc:
        return ["error", type(exc).__name__, str(exc), getattr(exc, "seq", None)]

def runs(r):
    head, rs = r
    out = []
    for run in rs:
        if isinstance(run, RunColumns):
            out.append([run.seq, run.ts, run.kinds, [d.hex() for d in run.data], [h.hex() for h in run.hashes],
                        repr(run.values)])
        else:
            out.append([ent(e) for e in run])
    return [ent(e) for e in head.tail], out

def row(r):  # a HeadRow by its fields (reprs are not a contract between builds)
    h = r.head
    return [r.session, None if r.error is None else str(r.error),
            None if h is None else [h.seq, h.hash.hex() if h.hash else None, list(h.segments),
                                    [ent(e) for e in h.tail]]]

results = []
for name, objects, sid, key in pickle.load(open(sys.argv[1], "rb")):
    def store():
        s = MemoryStore()
        s._objects = dict(objects)
        return s
    log = s3log.Log(store(), config=s3log.LogConfig(activity_index=False))
    def scan():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = analytics.to_arrow(store())
        return [t.column("seq").to_pylist(), t.column("kind").to_pylist(), [str(w.message) for w in caught]]
    results.append([
        name,
        attempt(lambda: [ent(e) for e in codec.decode_head(objects[key][0], key).tail]),
        attempt(lambda: [ent(e) for e in log.read(sid).entries]),
        attempt(lambda: runs(log.read_runs(sid))),
        attempt(lambda: runs(log.read_runs(sid, since=%d, until=%d))),
        attempt(lambda: repr(log.verify(sid))),
        attempt(lambda: [row(r) for r in log.heads([sid])]),
        attempt(lambda: [ent(e) for e in log.read_suffix(sid, lambda es: len(es) >= 3)[1]]),
        attempt(scan),
    ])
json.dump(results, open(sys.argv[2], "w"))
'''.replace("%d, until=%d", f"{_TS0 + 7919 * 3}, until={_TS0 + 7919 * 40}")


def _differential_cases() -> list[tuple[str, dict[str, Any], str, str]]:
    rng = random.Random(6006)
    cases: list[tuple[str, dict[str, Any], str, str]] = []
    for fmt, n_seg, n_tail in ((2, 0, 0), (2, 0, 1), (2, 0, 30), (2, 5, 1), (2, 20, 10), (2, 254, 4),
                               (2, 65534, 3), (1, 22, 3), (1, 0, 5)):
        store, sid, _, _ = _built(n_seg, n_tail, fmt=fmt, per_seg=30000 if n_seg > 1000 else None)
        key = _L.head(sid)
        objects = dict(store._objects)
        cases.append((f"v{fmt} {n_seg}+{n_tail}", objects, sid, key))
        body = objects[key][0]
        for j in range(8):
            b = bytearray(body)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            changed = dict(objects)
            changed[key] = (bytes(b), "x", 0)
            cases.append((f"v{fmt} {n_seg}+{n_tail} flip {j}", changed, sid, key))
        obj = cbor2.loads(body)
        for field in ("session", "seq", "created_at", "pending", "lease"):
            bad = dict(obj, **{field: "bad" if field != "session" else 5, "tail": 7})
            changed = dict(objects)
            changed[key] = (cbor2.dumps(bad), "x", 0)
            cases.append((f"v{fmt} {n_seg}+{n_tail} bad {field} and tail", changed, sid, key))
    for name, store, sid in _tampered():
        cases.append((name, dict(store._objects), sid, _L.head(sid)))
    return cases


def test_every_reader_gives_what_the_eager_tail_decoder_gave(tmp_path: Path) -> None:
    """Differential: the same stores read by this tree and by the eager build (subprocesses):
    the same entries, runs, scan rows, reports and errors (text and seq)."""
    (tmp_path / "old").mkdir()
    old = _old_tree(tmp_path / "old")
    if old is None:
        pytest.skip(f"no git history with {EAGER_BUILD} at hand")
    cases = tmp_path / "cases.pkl"
    with cases.open("wb") as f:
        pickle.dump(_differential_cases(), f)
    script = tmp_path / "runner.py"
    script.write_text(_RUNNER)
    here = Path(__file__).resolve().parent.parent
    out = {}
    for which, path in (("old", old), ("new", here)):
        env = dict(os.environ, PYTHONPATH=str(path))
        subprocess.run([sys.executable, str(script), str(cases), str(tmp_path / f"{which}.json")],
                       env=env, check=True, cwd=tmp_path)
        out[which] = json.loads((tmp_path / f"{which}.json").read_text())
    assert len(out["new"]) == len(out["old"]) > 100
    for o, n in zip(out["old"], out["new"], strict=True):
        assert len(o) == len(n), o[0]
        for i, (a, b) in enumerate(zip(o, n, strict=True)):
            assert _same_or_stricter(a, b), (o[0], i, a, b)


#: What a reader says, since format strictness (docs/decisions/0030), of objects docs/format.md
#: calls corrupt that the build under comparison read, or refused for another reason (docs/decisions/0030).
STRICTER = ("not exactly one CBOR data item", "indefinite length", "error decoding semantic tag",
            "has no prev field", "levels must be integers >= 0", "head field 'version' is -",
            "head field 'created_at' is -", "head field 'updated_at' is -", "parent pointer is malformed",
            # A suffix read that reaches the first segment starts at seq 0 (tests/test_signed_reads.py).
            "expected null", "expected seq 0, found")


def _same_or_stricter(old: Any, new: Any) -> bool:
    """The same outcome, or a refusal this tree makes on purpose (:data:`STRICTER`), or
    the same object refused at decoding where the old build, which read past trailing
    or cut bytes, refused one of its fields (a flipped byte can do either)."""
    shown = str(new)  # an outcome, a HeadRow with its error, a scan's warnings
    return old == new or (("error" in shown or "corrupt object" in shown) and any(s in shown for s in STRICTER)) \
        or _both_refuse(old, new)


def _both_refuse(old: Any, new: Any) -> bool:
    """Both builds refuse the same objects (an error row, a HeadRow with its error), this
    one as not valid CBOR."""
    was, now = str(old), str(new)
    keys = _CORRUPT.findall(was)
    return bool(keys) and keys == _CORRUPT.findall(now) and "is not valid CBOR" in now \
        and was.count("head=None") == now.count("head=None") and was.count("'error'") == now.count("'error'")


_CORRUPT = re.compile(r"corrupt object (\S+?):")


def test_a_lazy_head_behaves_as_a_made_head_to_every_generic_tool() -> None:
    store, sid, _, _ = _built(3, 9)
    made = _decoded(store, sid)
    _ = made.tail

    def fresh() -> Head:
        h = _decoded(store, sid)
        assert _lazy(h) is not None
        return h

    assert fresh() == made and made == fresh() and fresh() == fresh()
    assert (fresh() != made) is False and fresh() != dataclasses.replace(made, version=made.version + 1)
    assert repr(fresh()) == repr(made) and str(fresh()) == str(made)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(fresh(), protocol))
        assert back == made and getattr(back, "_lazy_tail", None) is None
        assert type(back.tail) is LinkedRun and back.tail.columns is not None
    for dup in (copy.copy(fresh()), copy.deepcopy(fresh())):
        assert dup == made and tail_run(dup) == tail_run(made)
    assert dataclasses.replace(fresh()) == made
    assert dataclasses.asdict(fresh()) == dataclasses.asdict(made)
    assert dataclasses.astuple(fresh()) == dataclasses.astuple(made)
    assert [f.name for f in dataclasses.fields(fresh())] == [f.name for f in dataclasses.fields(made)]
    assert "_lazy_tail" not in Head.__slots__ and "_lazy_tail" not in Head.__match_args__
    with pytest.raises(TypeError, match="unhashable"):
        hash(fresh())
    with pytest.raises(TypeError):
        vars(fresh())
    with pytest.raises(dataclasses.FrozenInstanceError):
        fresh().tail = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del fresh().tail
    h = fresh()
    assert getattr(h, "tail", None) == made.tail and _lazy(h) is None
    match fresh():
        case Head(session=s, seq=q, tail=t):
            assert (s, q, t) == (made.session, made.seq, made.tail)
    # The encoding is the stored body, lazy or made.
    assert codec.encode_head(fresh()) == store.get(_L.head(sid)).body == codec.encode_head(made)
    assert fresh().to_map() == made.to_map() and fresh().summary() == made.summary()


def test_a_head_subclass_and_a_head_built_by_hand_have_no_lazy_tail() -> None:
    class Mine(Head):
        pass

    store, sid, _, _ = _built(0, 4)
    made = _decoded(store, sid)
    mine = Mine(**{f.name: getattr(made, f.name) for f in dataclasses.fields(made)})
    assert tail_run(mine) == tail_run(made) and mine.tail_first_seq == 0
    assert getattr(mine, "_lazy_tail", None) is None
    plain = dataclasses.replace(made, tail=tuple(made.tail))
    assert tail_run(plain) == plain.tail and plain.tail_first_seq == 0
    empty = dataclasses.replace(made, tail=(), seq=-1, hash=None)
    assert tail_run(empty) == () and empty.tail_first_seq == 0


def test_many_threads_reading_many_lazy_heads_every_way_see_one_tail() -> None:
    store, sid, _, ents = _built(0, 50)
    want = [_fields(e) for e in ents]
    heads = [_decoded(store, sid) for _ in range(24)]
    barrier = threading.Barrier(8)
    problems: list[str] = []

    def reader(k: int) -> None:
        barrier.wait()
        for i, h in enumerate(heads):
            what = (i + k) % 4
            if what == 0:
                got = [_fields(e) for e in h.tail]
            elif what == 1:
                run = tail_run(h)
                got = [_fields(e) for e in h.tail]
                if isinstance(run, RunColumns) and run.hashes != [e.hash for e in ents]:
                    problems.append(f"columns of head {i}")
            elif what == 2:
                got = want if h.tail_first_seq == 0 and h == heads[0] else []
            else:
                got = [_fields(e) for e in pickle.loads(pickle.dumps(h)).tail]
            if got != want:
                problems.append(f"head {i} way {what}")

    run_threads(reader)
    assert problems == []
    for h in heads:
        assert _lazy(h) is None and h.tail is h.tail and type(h.tail) is LinkedRun


def _live_columns() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is RunColumns or type(o) is _LazyTail)


def test_a_writer_opened_on_a_lazy_head_commits_and_keeps_no_old_columns() -> None:
    store, sid, _, ents = _built(10, 20)
    before = _live_columns()
    log = _log(store, tail_max_bytes=4096)
    w = log.open(sid)
    for round_ in range(30):
        for i in range(5):
            w.append("after", {"round": round_, "i": i})
        w.commit()
    # A long-lived writer holds its newest head's tail at most, never every old one.
    assert _live_columns() - before <= 2
    entries = log.read(sid).entries
    assert [e.seq for e in entries] == list(range(30 + 150))
    assert [_fields(e) for e in entries[:30]] == [_fields(e) for e in ents]
    _, runs = log.read_runs(sid)  # type: ignore[misc]
    assert sum(len(r.hashes) if isinstance(r, RunColumns) else len(r) for r in runs) == 180
    log.close()


def test_an_async_writer_opened_on_a_lazy_head_commits_what_a_reader_then_reads() -> None:
    store, sid, _, ents = _built(4, 6)

    async def go() -> list[Entry]:
        log = s3log.AsyncLog(s3log.AsyncMemoryStore(store), config=s3log.LogConfig(activity_index=False))
        w = await log.open(sid)
        w.append("after", {"x": 1})
        await w.commit()
        view = await log.read(sid)
        await log.aclose()
        return list(view.entries)

    got = asyncio.run(go())
    assert [_fields(e) for e in got[:10]] == [_fields(e) for e in ents]
    assert [e.seq for e in got] == list(range(11)) and got[-1].kind == "after"
