"""A head is encoded by hand on the commit path (codec.encode_head): byte for byte the
deterministic encoding of its stored map, for every shape a head can take, and never
a stale one from the caches the encoder keeps between commits."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from s3log._format.cbor import dumps
from s3log._format.codec import encode_head
from s3log._format.entries import make_entry
from s3log._format.values import Head, Lease, ParentRef, Pending, Signature

HASH = st.binary(min_size=32, max_size=32)
TEXT = st.text(max_size=40)
INT = st.one_of(st.integers(min_value=0, max_value=2**64 - 1), st.integers(min_value=-(2**63), max_value=-1))
SMALL = st.integers(min_value=-1, max_value=10**13)
META = st.dictionaries(TEXT, st.recursive(st.one_of(st.none(), st.booleans(), INT, TEXT, st.floats(allow_nan=False)),
                                          lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3),
                                          max_leaves=6), max_size=4)


def _tail(n: int, after_seq: int, prev: bytes | None) -> tuple[Any, ...]:
    out = []
    for i in range(n):
        data = {"i": i, "text": "é" * (i % 3)}
        e = make_entry(after_seq + 1 + i, prev, "event", 1_700_000_000_000 + i, data, dumps(data))
        out.append(e)
        prev = e.hash
    return tuple(out)


@st.composite
def heads(draw: Any) -> Head:
    seq = draw(SMALL)
    n_tail = draw(st.integers(min_value=0, max_value=4))
    segments = draw(st.lists(TEXT, max_size=4))
    return Head(
        session=draw(st.one_of(TEXT, st.just("01a2312c-f66e-762b-b4bd-51c338f954c0"))),
        version=draw(INT),
        seq=seq,
        hash=draw(st.one_of(st.none(), HASH, st.binary(max_size=3))),
        segments=tuple(segments) if draw(st.booleans()) else segments,  # type: ignore[arg-type]
        levels=tuple(draw(st.lists(st.integers(min_value=0, max_value=300), min_size=len(segments),
                                   max_size=len(segments)))),
        tail=_tail(n_tail, seq, None),
        parent=draw(st.one_of(st.none(), st.builds(ParentRef, TEXT, SMALL, st.one_of(st.none(), HASH), TEXT))),
        meta=draw(META),
        created_at=draw(INT),
        updated_at=draw(INT),
        writer=draw(TEXT),
        ts_min=draw(st.one_of(st.none(), INT)),
        ts_max=draw(st.one_of(st.none(), INT)),
        retired_at=draw(st.one_of(st.none(), INT)),
        creator=draw(st.one_of(st.none(), TEXT)),
        lease=draw(st.one_of(st.none(), st.builds(Lease, TEXT, INT))),
        v=draw(st.sampled_from([1, 2])),
        extra=draw(st.one_of(st.just({}), st.dictionaries(st.one_of(TEXT, st.integers()), INT, min_size=1,
                                                           max_size=2))),
        sig=draw(st.one_of(st.none(), st.builds(Signature, TEXT, TEXT, st.binary(max_size=64)))),
        pending=draw(st.one_of(st.none(), st.builds(Pending, TEXT, SMALL, st.integers(0, 9), st.integers(0, 9)))),
    )


@settings(max_examples=400, deadline=None)
@given(heads())
def test_encode_head_is_the_deterministic_encoding_of_the_stored_map(head: Head) -> None:
    assert encode_head(head) == dumps(head.to_map())
    # Again, from the encoder's caches (the tail's items, the values met before).
    assert encode_head(head) == dumps(head.to_map())


def test_a_growing_tail_and_changed_values_are_encoded_afresh() -> None:
    """A writer's successive heads share their tail's first entries and their unchanged
    values by identity: each head encodes as its own map, whatever was cached."""
    tail = _tail(3, -1, None)
    head = Head("s-1", 1, 2, tail[-1].hash, ("a",), (0,), tail, None, {}, 1, 2, "w1")
    assert encode_head(head) == dumps(head.to_map())
    more = tail + _tail(2, 2, tail[-1].hash)
    grown = replace(head, version=2, seq=4, hash=more[-1].hash, tail=more, writer="w2")
    assert encode_head(grown) == dumps(grown.to_map())
    shorter = replace(grown, tail=more[1:])  # a tail that starts later: not the cached one
    assert encode_head(shorter) == dumps(shorter.to_map())
    other = replace(grown, tail=tail[:2] + _tail(1, 1, tail[1].hash))  # same first entry, then others
    assert encode_head(other) == dumps(other.to_map())
    flushed = replace(grown, segments=("a", "b"), levels=(0, 1), tail=())
    assert encode_head(flushed) == dumps(flushed.to_map())


def test_a_list_where_a_tuple_belongs_is_never_taken_from_the_cache() -> None:
    """segments given as a (mutable) list: changed in place, the next encoding shows it."""
    segments = ["a"]
    head = Head("s-1", 1, -1, None, segments, (0,), (), None, {}, 1, 2, "w")  # type: ignore[arg-type]
    first = encode_head(head)
    segments.append("b")
    assert encode_head(head) == dumps(head.to_map()) != first


def _base() -> Head:
    return Head("s-1", 1, 2, None, ("a",), (0,), (), None, {}, 1, 2, "w")


def test_a_value_that_can_change_inside_is_never_taken_from_the_cache() -> None:
    """a tuple holding a list, or a ParentRef whose hash is a
    bytearray, changed in place after one encoding, was encoded from the cache."""
    inner = ["x"]
    head = replace(_base(), segments=(inner,))  # type: ignore[arg-type]
    encode_head(head)
    inner.append("y")
    assert encode_head(head) == dumps(head.to_map())
    digest = bytearray(32)
    head = replace(_base(), parent=ParentRef("p", 1, digest, "fork"))  # type: ignore[arg-type]
    encode_head(head)
    digest[0] = 1
    assert encode_head(head) == dumps(head.to_map())


def test_odd_values_encode_as_the_stored_map_says() -> None:
    """a ParentRef subclass, segments or levels that are not a list
    or tuple, and a falsy parent are encoded as Head.to_map stores them."""

    class Parent(ParentRef):
        __slots__ = ()

    odd: list[dict[str, Any]] = [
        {"parent": Parent("p", 1, None, "fork")},
        {"segments": "ab", "levels": (0, 0)},
        {"segments": frozenset({"a"})},
        {"levels": {0: 1}},
        {"parent": ()},
    ]
    for changes in odd:
        head = replace(_base(), **changes)
        assert encode_head(head) == dumps(head.to_map()), changes


def test_a_str_subclass_id_does_not_poison_the_head_key_cache() -> None:
    """Layout.head cached the key of a str subclass id (formatted its
    own way) under the plain id, and raised TypeError for an unhashable one."""
    from s3log._format.layout import Layout

    class Formatted(str):
        def __format__(self, spec: str) -> str:
            return "EVIL"

    class Unhashable(str):
        __hash__ = None  # type: ignore[assignment]

    layout = Layout("p")
    layout.head(Formatted("abc"))
    assert layout.head("abc") == "p/sessions/abc/head"
    assert layout.head(Unhashable("abd")) == "p/sessions/abd/head"


def test_a_list_tail_changed_in_place_is_encoded_afresh() -> None:
    """a tail given as a list and
    appended to in place was taken from the cache, its array one item short."""
    tail = list(_tail(2, -1, None))
    head = replace(_base(), seq=1, tail=tail)  # type: ignore[arg-type]
    encode_head(head)
    tail.extend(_tail(1, 1, tail[-1].hash))
    assert encode_head(head) == dumps(head.to_map())
