"""Heads and records encoded from cached layouts are the canonical map, at every size boundary.

The layout cache is keyed so that keys equal in Python but not in CBOR (``1``, ``True``,
``1.0``) never share a layout; maps of more than 255 fields take a longer length.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s3log
from s3log._format.cbor import _LAYOUTS, dumps
from s3log._format.chain import PendingEntry, build_chain
from s3log._format.codec import decode_head, encode_head
from s3log._format.entries import _KIND_TAILS, make_entry, normalize_data_cbor
from s3log._format.values import Head
from s3log._protocol.state import empty_head
from tests.helpers import run_threads

T0 = 1_767_225_600_000  # 2026-01-01


def _head(extra: dict[Any, Any], *, with_tail: bool = True) -> Head:
    entries = build_chain([PendingEntry("k", 5, {"i": i}) for i in range(3)], after_seq=-1, after_hash=None)
    return dataclasses.replace(empty_head("s", {}, None, 0), extra=extra, tail=tuple(entries) if with_tail else ())


def _canonical(head: Head) -> bytes:
    return cbor2.dumps(head.to_map(), canonical=True)


@pytest.mark.parametrize("order", [(1, True, 1.0), (True, 1, 1.0), (1.0, True, 1), (0, False, 0.0, -0.0)])
def test_head_layouts_of_equal_keys_of_other_types_are_not_shared(order: tuple[Any, ...]) -> None:
    """the layout cache was keyed by the tuple of keys, and 1 == True ==
    1.0 in Python: a head whose extra field is keyed ``true`` (or ``1.0``) reused the
    layout of one keyed ``1``, and was written with the key ``1``, in another place in
    the map: a newer writer's field silently changed, bytes not the canonical map."""
    _LAYOUTS.clear()
    for key in order:
        head = _head({key: "newer writer's field"})
        body = encode_head(head)
        assert body == _canonical(head), key
        (back,) = decode_head(body, "k").extra
        assert type(back) is type(key) and back == key


def test_a_head_of_more_than_255_fields_encodes() -> None:
    """a map of 256 or more pairs was given a
    one-byte length (OverflowError, not an s3log error): a head carrying many fields of
    a newer writer could not be rewritten."""
    for n in (232, 233, 300, 70_000):
        head = _head({f"f{i}": i for i in range(n)})
        body = encode_head(head)
        assert body == _canonical(head)
        assert decode_head(body, "k").extra == head.extra


def test_head_layouts_beyond_the_cache_bound_from_many_threads() -> None:
    """More key sets than the cache holds, encoded from 8 threads at once: every head is
    the canonical map, cached or not."""
    _LAYOUTS.clear()
    failures: list[Any] = []
    rng = random.Random(4)
    pools: list[Any] = ["x", "y" * 30, 7, -3, 2**40, b"b", (1, "t"), 0.5, None, "tail_", "v1", "ts", "", "\u2603"]
    key_sets = [(*rng.sample(pools, rng.randint(0, 6)), f"n{i}") for i in range(600)]

    def work(part: int) -> None:
        for keys in key_sets[part::8]:
            head = _head({k: [k] for k in keys}, with_tail=part % 2 == 0)
            for v in (1, 2):
                h = dataclasses.replace(head, v=v)
                if encode_head(h) != _canonical(h) or encode_head(h) != _canonical(h):
                    failures.append(keys)

    run_threads(work)
    assert not failures
    assert len(_LAYOUTS) <= 256 + 8  # bounded (a race may add one per thread)


def test_a_rewritten_head_keeps_a_newer_writers_field_keyed_true() -> None:
    """End to end: session A's head carries a newer writer's field keyed
    ``1``, session B's one keyed ``true`` (same key set otherwise). A writer committing
    to A then to B wrote B's field under the key ``1``."""
    _LAYOUTS.clear()  # as in a fresh process (other tests may have filled it)
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    ids = []
    for key in (1, True):
        w = log.create()
        w.append("k", 1)
        w.commit()
        head_key = log.layout.head(w.session_id)
        obj = cbor2.loads(store.get(head_key).body)
        obj[key] = "added by a newer writer"
        store.put_raw(head_key, dumps(obj))
        ids.append(w.session_id)
    for sid in ids:
        w = log.open(sid)
        w.append("k", 2)
        w.commit()
    for sid, key in zip(ids, (1, True), strict=True):
        obj = cbor2.loads(store.get(log.layout.head(sid)).body)
        (field,) = (k for k in obj if not isinstance(k, str))
        assert type(field) is type(key)
        assert log.read(sid).head.extra == {key: "added by a newer writer"}


_INTS = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**63 - 1]

_KINDS = ["a", "é", "k" * 23, "k" * 24, "k" * 255, "\u2603" * 256, "\U0001f600", "s3log.fork", "a\x00b"]


def test_hand_laid_records_are_the_canonical_map_at_every_boundary() -> None:
    for ts in _INTS:
        for seq in _INTS:
            for kind in _KINDS:
                for prev in (None, b"\x07" * 32):
                    data, data_cbor = normalize_data_cbor(kind, {"d": [ts, seq]})
                    e = make_entry(seq, prev, kind, ts, data, data_cbor)
                    record = dumps({"seq": seq, "prev": prev, "kind": kind, "ts": ts, "data": data})
                    assert e.raw == record and e.hash == hashlib.sha256(record).digest(), (ts, seq, kind, prev)
                    assert e == make_entry(seq, prev, kind, ts, data)  # the encoder's own record


def test_hand_laid_records_past_the_kind_cache_bound() -> None:
    _KIND_TAILS.clear()
    for i in range(4200):
        kind = f"kind-{i}-" + "é" * (i % 30)
        data, data_cbor = normalize_data_cbor(kind, i)
        e = make_entry(i, None, kind, T0 + i, data, data_cbor)
        assert e.raw == dumps({"seq": i, "prev": None, "kind": kind, "ts": T0 + i, "data": data})
    assert len(_KIND_TAILS) == 4096
    # Cached kinds still give the same records.
    data, data_cbor = normalize_data_cbor("kind-3-ééé", None)
    assert make_entry(9, b"\x01" * 32, "kind-3-ééé", 0, data, data_cbor).raw == dumps(
        {"seq": 9, "prev": b"\x01" * 32, "kind": "kind-3-ééé", "ts": 0, "data": None})


_FLAT_KEYS = st.one_of(st.text(alphabet=st.characters(max_codepoint=127), max_size=30),
                       st.sampled_from(["", "a", "b", "aa", "z" * 23, "z" * 24, "y" * 24, "k" * 256]))
_FLAT_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.binary(max_size=40),
    st.text(max_size=30), st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 1.5, float("inf"), 65504.0, 1e300]))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_FLAT_KEYS, _FLAT_VALUES, max_size=30))
def test_flat_maps_are_normalized_as_a_round_trip_through_cbor_gives(data: dict[str, Any]) -> None:
    """A flat map of ASCII keys takes the path that encodes its items as one array and
    builds the decoded value directly: the same bytes and the same value (keys in the
    same order, values of the same types) as encoding the map and decoding it."""
    value, encoded = normalize_data_cbor("k", data)
    assert encoded == cbor2.dumps(data, canonical=True)
    back = cbor2.loads(encoded)
    assert list(value) == list(back)
    for k in back:
        v, b = value[k], back[k]
        assert type(v) is type(b) and (v == b or (v != v and b != b)), (k, v, b)
    assert all(type(k) is str for k in value)


def test_flat_maps_the_fast_path_leaves_to_the_general_way() -> None:
    """Keys that are not all ASCII text, values of other types, and NaN go the general
    way, with its checks and errors."""
    from s3log._format.entries import _FLAT_LAYOUTS, _flat_map_cbor

    assert _flat_map_cbor("k", {"é": 1}, None) is None
    assert _flat_map_cbor("k", {1: 1}, None) is None
    assert _flat_map_cbor("k", {"a": [1]}, None) is None
    assert _flat_map_cbor("k", {"a": float("nan")}, None) is None
    assert _flat_map_cbor("k", {"a": 1.0, "b": True}, None) is not None

    class Key(str):
        pass

    value, encoded = normalize_data_cbor("k", {Key("b"): 1, "a": 2})
    assert list(value) == ["a", "b"] and all(type(k) is str for k in value)
    assert encoded == cbor2.dumps({"a": 2, "b": 1}, canonical=True)
    with pytest.raises(s3log.InvalidEntryError, match="lone surrogate"):
        normalize_data_cbor("k", {"a": "x\ud800"})
    _FLAT_LAYOUTS.clear()
    for i in range(4200):
        normalize_data_cbor("k", {f"key{i}": i})
    assert len(_FLAT_LAYOUTS) == 4096
