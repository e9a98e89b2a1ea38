"""``decode_head`` checks a head's fields with one comparison of their types, then one by one.

Each wrong field (missing, of a wrong type, a subclass, a bool) gives the same head or the
same error as the checks made one by one, and as the build before the one-comparison path.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import cbor2
import pytest

import s3log
from s3log._format import codec
from s3log.env import Env
from tests.baseline import baseline_module

T0 = 1_767_225_600_000  # 2026-01-01


def _head_maps() -> list[dict[str, Any]]:
    """Real heads as decoded maps: v2 and v1, a root with a tail and segments, a fork,
    an empty session, signed-less and meta-less."""
    out: list[dict[str, Any]] = []
    for version in (2, 1):
        clock = itertools.count(T0, 11)
        store = s3log.MemoryStore()
        log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(1, lambda: next(clock)),
                                                      format_version=version, tail_max_bytes=600))
        w = log.create(meta={"labels": {"a": "b"}})
        for i in range(30):
            w.append("message", {"i": i, "t": "x" * (i % 7)})
            if i % 4 == 3:
                w.commit()
        w.commit()
        fork = log.fork(w.session_id, at_seq=5)
        empty = log.create()
        empty.commit()
        for sid in (w.session_id, fork, empty.session_id):
            with contextlib.suppress(s3log.SessionNotFound):  # an empty session may write no head
                out.append(cbor2.loads(store.get(log.layout.head(sid)).body))
    assert len(out) >= 4
    return out


def _outcome(mod: ModuleType, body: bytes) -> tuple[Any, ...]:
    """What ``decode_head`` gives: an error's type name and text, or the head as bytes
    encoded again, its extra fields and its tail's entries."""
    try:
        head = mod.decode_head(body, "k/head")
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", mod.encode_head(head), repr(head.extra), [e.to_map() for e in head.tail],
            repr(head.parent), head.session, head.seq)


class _IntSub(int):
    pass


class _StrSub(str):
    pass


#: Wrong values for each required field, as CBOR can carry them (and the tags cbor2
#: decodes to other Python types: a datetime, a set, a UUID, a bignum that is an int).
_WRONG: list[Any] = [
    None, True, False, 0, -1, 2**70, -(2**70), 1.5, float("nan"), "1", "", b"", b"x", [], [1], ["a"], {}, {"a": 1},
    cbor2.CBORTag(1, 1_700_000_000), cbor2.CBORTag(258, [1, 2]), cbor2.CBORTag(37, uuid.UUID(int=5).bytes),
    cbor2.CBORTag(2, b"\x01" * 9), cbor2.CBORTag(4242, 3), cbor2.CBORTag(32, "http://x/"),
    cbor2.undefined,
]

_MISSING = object()


def _mutated(base: dict[str, Any], changes: dict[str, Any]) -> bytes:
    obj = dict(base)
    for name, value in changes.items():
        if value is _MISSING:
            obj.pop(name, None)
        else:
            obj[name] = value
    return cbor2.dumps(obj, canonical=True)


def _newly_refused(changes: dict[str, Any]) -> bool:
    """Changes that this tree refuses and the baseline build read: a negative commit counter or
    time, unsigned in docs/format.md (refused since docs/decisions/0030)."""
    return any(name in ("version", "created_at", "updated_at") and type(v) is int and v < 0
               for name, v in changes.items())


def _no_fast_path(monkeypatch: pytest.MonkeyPatch) -> Callable[[bytes], tuple[Any, ...]]:
    """This tree's decode_head with the one-comparison path never taken."""
    def run(body: bytes) -> tuple[Any, ...]:
        with monkeypatch.context() as m:
            m.setattr(codec, "_HEAD_NEED_TYPES", ("never",))
            return _outcome(codec, body)
    return run


def test_decode_head_of_each_wrong_field_as_the_build_checking_one_by_one(
    baseline: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each required field missing or of each wrong type, each optional field wrong,
    extra fields: the same head or the same error as the baseline build and as the checks one by one."""
    oc = baseline_module("codec")
    slow = _no_fast_path(monkeypatch)
    fields = [*codec._HEAD_NEEDS, "v", "hash", "levels", "parent", "meta", "ts_min", "ts_max", "retired_at",
              "creator", "lease", "sig", "pending", "tail_hashes"]
    checked = 0
    for base in _head_maps():
        cases: list[dict[str, Any]] = [{}, {"zz_extra": 1}, {"zz_extra": None, "a": [1]}, {"": b""}]
        cases += [{name: _MISSING} for name in fields]
        cases += [{name: value} for name in fields for value in _WRONG]
        for changes in cases:
            body = _mutated(base, changes)
            new = _outcome(codec, body)
            if _newly_refused(changes):
                assert new[0] == "error" and "is -" in new[2], (changes, new)
            else:
                assert new == _outcome(oc, body), changes
            assert new == slow(body), changes
            checked += 1
    assert checked > 1000


def test_decode_head_of_two_wrong_fields_as_the_checks_one_by_one(baseline: ModuleType,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fields wrong at once: the same error as the checks one by one, and (where
    the tail is not one of them: the order of the checks changed since) as the baseline build."""
    oc = baseline_module("codec")
    slow = _no_fast_path(monkeypatch)
    rng = random.Random(66)
    bases = _head_maps()
    for _ in range(1500):
        base = rng.choice(bases)
        a, b = rng.sample(codec._HEAD_NEEDS, 2)
        changes = {a: rng.choice([*_WRONG, _MISSING]), b: rng.choice([*_WRONG, _MISSING])}
        body = _mutated(base, changes)
        new = _outcome(codec, body)
        assert new == slow(body), changes
        if "tail" not in changes and not _newly_refused(changes):
            assert new == _outcome(oc, body), changes


def test_decode_head_fast_path_refuses_subclasses_and_bools(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one comparison is of exact types: an int or str subclass, or a bool (an int
    subclass), is checked one by one (a bool is refused, a subclass accepted as before)
    -- called with a map cbor2 cannot produce, through a patched decoder."""
    base = _head_maps()[0]
    for name, value, ok in [("seq", True, False), ("version", False, False), ("seq", _IntSub(base["seq"]), True),
                            ("session", _StrSub(base["session"]), True), ("writer", _StrSub("w"), True),
                            ("created_at", _IntSub(3), True), ("segments", tuple(base["segments"]), False)]:
        obj = dict(base, **{name: value})
        with monkeypatch.context() as m:
            m.setattr(codec, "_decode", lambda body, key, what, obj=obj: obj)
            try:
                head = codec.decode_head(b"", "k/head")
            except s3log.CorruptionError as exc:
                assert not ok, (name, value)
                assert repr(name) in str(exc)
            else:
                assert ok, (name, value)
                assert getattr(head, name) == value
