"""Hostile review of 833c599 (decode_head's one-comparison check, the class-based
collector pause) and 9e58fb9 (scan's session and parent columns taken from one value
per session; the fork check's first entry made by ``codec.new_entry``).

Each attack runs the code as of 02311d6 (the commit before both, extracted with
``git archive`` and imported as ``s3log_r6b_old``) beside this tree's, and where it
matters a straightforward reference too: heads of every wrong field type, missing and
extra fields, v1 and v2; pauses nested, raising, and entered by threads while another
toggles the collector; scans of forks, filters that leave sessions without a row, and
batch sizes at and around the gathering boundary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.util
import itertools
import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cbor2
import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa

import s3log
from s3log import analytics, codec, protocol
from s3log.env import Env

OLD_COMMIT = "02311d6"
OLD_NAME = "s3log_r6b_old"
ROOT = Path(__file__).resolve().parent.parent
T0 = 1_767_225_600_000  # 2026-01-01


# ------------------------------------------------------------------- the old code


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The s3log package as of 02311d6, imported under another name (its imports
    inside the package are relative, so it uses only its own modules)."""
    if OLD_NAME in sys.modules:
        return sys.modules[OLD_NAME]
    dest = tmp_path_factory.mktemp("old")
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "s3log"],
                                 check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # not a git checkout holding it
        pytest.skip(f"cannot extract {OLD_COMMIT}: {exc}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    pkg = dest / "s3log"
    spec = importlib.util.spec_from_file_location(OLD_NAME, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[OLD_NAME] = mod
    spec.loader.exec_module(mod)
    for sub in ("analytics", "codec"):
        importlib.import_module(f"{OLD_NAME}.{sub}")
    return mod


def _sub(old: ModuleType, name: str) -> Any:
    return sys.modules[f"{OLD_NAME}.{name}"]


# -------------------------------------------------------------------- decode_head


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
    """Changes that this tree refuses and 02311d6 read: a negative commit counter or
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


def test_decode_head_of_each_wrong_field_as_02311d6(old: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each required field missing or of each wrong type, each optional field wrong,
    extra fields: the same head or the same error as 02311d6 and as the checks one by one."""
    oc = _sub(old, "codec")
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


def test_decode_head_of_two_wrong_fields_as_the_checks_one_by_one(old: ModuleType,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fields wrong at once: the same error as the checks one by one, and (where
    the tail is not one of them: 61c8092 restored that order after 02311d6) as 02311d6."""
    oc = _sub(old, "codec")
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


# ------------------------------------------------------------------ the gc pause


@pytest.fixture
def gc_state() -> Iterator[None]:
    was = gc.isenabled()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


def _script(pause: Callable[[], Any], depth_of: Callable[[], int], steps: list[str]) -> list[Any]:
    """Run a script of nested pauses in one thread: "(" enters, ")" leaves, "!" raises
    inside the innermost block (caught outside it), "e"/"d" enable/disable the
    collector; the collector's state and depth after each step."""
    log: list[Any] = []
    stack: list[Any] = []
    for step in steps:
        if step == "(":
            cm = pause()
            cm.__enter__()
            stack.append(cm)
        elif step == ")":
            stack.pop().__exit__(None, None, None)
        elif step == "!":
            cm = stack.pop()
            try:
                raise ValueError("inside")
            except ValueError as exc:
                log.append(("suppressed", bool(cm.__exit__(type(exc), exc, exc.__traceback__))))
        elif step == "e":
            gc.enable()
        elif step == "d":
            gc.disable()
        log.append((step, gc.isenabled(), depth_of()))
    while stack:
        stack.pop().__exit__(None, None, None)
        log.append(("end", gc.isenabled(), depth_of()))
    return log


def test_pause_nested_and_raising_as_02311d6(old: ModuleType, gc_state: None) -> None:
    """Random scripts of nesting, raising and toggling: the collector's state after each
    step as with the generator-based pause of 02311d6."""
    oc = _sub(old, "codec")
    rng = random.Random(7)
    for _ in range(400):
        steps: list[str] = []
        depth = 0
        for _ in range(rng.randrange(1, 14)):
            step = rng.choice("(((()!ed" if depth else "((ed")
            depth += {"(": 1, ")": -1, "!": -1}.get(step, 0)
            steps.append(step)
        start = rng.random() < 0.7
        (gc.enable if start else gc.disable)()
        new = _script(codec._gc_paused, lambda: codec._gc_depth, steps)
        (gc.enable if start else gc.disable)()
        was = _script(oc._gc_paused, lambda: oc._gc_depth, steps)
        assert new == was, steps
        assert codec._gc_depth == 0


def test_pause_lets_exceptions_through(gc_state: None) -> None:
    """An exception inside the block leaves it (not suppressed), the collector back on;
    StopIteration inside a generator's block too, as with contextlib's."""
    gc.enable()
    for exc in (ValueError("x"), KeyboardInterrupt(), GeneratorExit(), StopIteration(3)):
        with pytest.raises(type(exc)), codec._gc_paused():
            assert not gc.isenabled()
            raise exc
        assert gc.isenabled() and codec._gc_depth == 0

    def gen() -> Generator[int, None, None]:
        with codec._gc_paused():
            yield 1
            yield 2

    g = gen()
    assert next(g) == 1 and not gc.isenabled()
    g.close()  # GeneratorExit inside the block
    assert gc.isenabled() and codec._gc_depth == 0


def _conducted(pause: Callable[[], Any], depth_of: Callable[[], int], rng: random.Random) -> list[Any]:
    """8 threads each entering and leaving the pause when told, in a seeded order, one
    step at a time, while this thread toggles the collector between steps."""
    n = 8
    go = [threading.Semaphore(0) for _ in range(n)]
    done = threading.Semaphore(0)
    plan: list[list[str]] = [[] for _ in range(n)]
    order: list[tuple[int, str]] = []
    inside = [0] * n
    for _ in range(120):
        i = rng.randrange(n)
        step = ")" if inside[i] and rng.random() < 0.5 else "("
        inside[i] += 1 if step == "(" else -1
        plan[i].append(step)
        order.append((i, step))
    for i in range(n):
        plan[i] += ")" * inside[i]
        order += [(i, ")")] * inside[i]

    def worker(i: int) -> None:
        stack: list[Any] = []
        for step in plan[i]:
            go[i].acquire()
            if step == "(":
                cm = pause()
                cm.__enter__()
                stack.append(cm)
            else:
                stack.pop().__exit__(None, None, None)
            done.release()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    log: list[Any] = []
    for i, step in order:
        r = rng.random()
        if r < 0.15:
            gc.enable()
        elif r < 0.3:
            gc.disable()
        go[i].release()
        done.acquire()
        log.append((i, step, gc.isenabled(), depth_of()))
    for t in threads:
        t.join()
    return log


def test_pause_across_threads_as_02311d6(old: ModuleType, gc_state: None) -> None:
    """8 threads entering and leaving in a seeded interleaving while the collector is
    toggled: the same states as 02311d6's pause, and the depth back at 0."""
    oc = _sub(old, "codec")
    for seed in range(6):
        gc.enable()
        new = _conducted(codec._gc_paused, lambda: codec._gc_depth, random.Random(seed))
        gc.enable()
        was = _conducted(oc._gc_paused, lambda: oc._gc_depth, random.Random(seed))
        assert new == was
        assert codec._gc_depth == 0 and new[-1][3] == 0


def test_pause_free_running_threads(gc_state: None) -> None:
    """8 threads pausing at random without a toggler: the collector is off inside
    every block and on again after the last (it was on when the first began)."""
    gc.enable()
    bad: list[int] = []

    def worker(i: int) -> None:
        rng = random.Random(i)
        for _ in range(2000):
            with codec._gc_paused():
                if gc.isenabled():
                    bad.append(i)
                if rng.random() < 0.3:
                    with codec._gc_paused():
                        if gc.isenabled():
                            bad.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert gc.isenabled() and codec._gc_depth == 0


# ------------------------------------------------------------------- the fork check


def test_first_entry_of_columns_equals_the_dataclass_entry() -> None:
    """``_first_entry`` of a column run: an ordinary Entry equal to the one its
    constructor makes (type, fields, hash of a hashable one, frozen)."""
    entries = [codec.make_entry(0, None, "s3log.fork", T0, {"parent": {"session": "p"}}),]
    entries.append(codec.make_entry(1, entries[0].hash, "m", T0 + 1, "x"))
    body = codec.encode_segment("s", entries, 2)
    _, run = codec.decode_segment_columns(body, "k")
    assert isinstance(run, codec.RunColumns)
    got = protocol._first_entry([(), run])
    want = codec.Entry(0, None, "s3log.fork", T0, {"parent": {"session": "p"}}, entries[0].hash)
    assert type(got) is codec.Entry and got == want and got.raw == b""
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.seq = 1  # type: ignore[misc]
    e2 = protocol._first_entry([codec.decode_segment_columns(codec.encode_segment("s", entries[1:], 2), "k")[1]])
    assert e2 is not None and hash(e2) == hash(codec.Entry(1, entries[0].hash, "m", T0 + 1, "x", entries[1].hash))


# ----------------------------------------------------------------------- the scan


def _store(n_short: int = 500, n_long: int = 30) -> tuple[s3log.MemoryStore, list[str]]:
    """Short and long sessions, forks (of forks), empty sessions, several kinds and times."""
    store = s3log.MemoryStore()
    clock = itertools.count(T0, 5)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(9, lambda: next(clock))))
    rng = random.Random(17)
    ids: list[str] = []
    for s in range(n_short + n_long):
        if ids and s % 5 == 2:
            parent = rng.choice(ids)
            count = log.head(parent).entry_count
            w = log.open(log.fork(parent, at_seq=rng.randrange(count))) if count else log.create()
        else:
            w = log.create()
        rows = 0 if s % 23 == 0 else (rng.choice([100, 150, 250]) if s % 18 == 0 else rng.randrange(1, 9))
        base = T0 + rng.randrange(10) * 3_600_000
        for i in range(rows):
            w.append(rng.choice(["message", "tool", "rare"]), {"s": s, "i": i}, ts=base + i * 60_000)
            if i % 40 == 39:
                w.commit()
        w.commit()
        ids.append(w.session_id)
    return store, ids


@pytest.fixture(scope="module")
def scan_store() -> tuple[s3log.MemoryStore, list[str]]:
    return _store()


def _reference(store: s3log.MemoryStore, ids: list[str], keep: Callable[[int, str], bool]) -> tuple[list[Any], ...]:
    """The session and parent column of each row kept, one value per row."""
    log = s3log.Log(store)
    sessions: list[str] = []
    parents: list[str | None] = []
    listed = analytics._session_ids(log, None)  # the order a scan reads them in
    assert sorted(listed) == sorted(ids)
    for sid in listed:
        try:
            view = log.read(sid)
        except s3log.SessionNotFound:
            continue
        head = log.head(sid)
        for e in view.entries:
            if keep(e.ts, e.kind):
                sessions.append(sid)
                parents.append(head.parent.session if head.parent else None)
    return sessions, parents


FILTERS: list[dict[str, Any]] = [
    {},
    {"kinds": ["rare"]},
    {"kinds": ["none such"]},
    {"since": T0 + 4 * 3_600_000},
    {"until": T0 + 2 * 3_600_000 + 120_000},
    {"since": T0 + 3 * 3_600_000 + 60_000, "until": T0 + 6 * 3_600_000, "kinds": ["tool", "rare"]},
]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: "-".join(f) or "all")
def test_scan_equals_02311d6_and_the_reference(old: ModuleType, scan_store: tuple[s3log.MemoryStore, list[str]],
                                               flt: dict[str, Any]) -> None:
    """Every batch of a scan of forks, empty sessions and sessions a filter leaves
    without a row equals 02311d6's, at batch sizes 7, 4096, 4097 and the default; the
    session and parent columns equal one value per row."""
    oa = _sub(old, "analytics")
    store, ids = scan_store
    lo, hi, kinds = flt.get("since"), flt.get("until"), flt.get("kinds")

    def keep(ts: int, kind: str) -> bool:
        return (lo is None or ts >= lo) and (hi is None or ts < hi) and (kinds is None or kind in kinds)

    want_sessions, want_parents = _reference(store, ids, keep)
    for batch_size in (7, 4096, 4097, 65_536):
        new = list(analytics.scan(store, batch_size=batch_size, parallelism=1, **flt))
        was = list(oa.scan(store, batch_size=batch_size, parallelism=1, **flt))
        assert [b.num_rows for b in new] == [b.num_rows for b in was]
        for a, b in zip(new, was, strict=True):
            a.validate(full=True)
            assert a.equals(b)
        table = pa.Table.from_batches(new, schema=analytics.SCHEMA)
        assert table.column("session").to_pylist() == want_sessions
        assert table.column("parent_session").to_pylist() == want_parents
    assert analytics.to_arrow(store, **flt).equals(oa.to_arrow(store, **flt))


def test_scan_batches_of_one_equal_02311d6(old: ModuleType) -> None:
    """batch_size=1 over a small store with forks and a filter: row by row the same."""
    oa = _sub(old, "analytics")
    store, _ = _store(n_short=40, n_long=2)
    flts: list[dict[str, Any]] = [{}, {"kinds": ["tool"]}]
    for flt in flts:
        new = list(analytics.scan(store, batch_size=1, parallelism=2, **flt))
        was = list(oa.scan(store, batch_size=1, parallelism=2, **flt))
        assert len(new) == len(was) > 0
        assert all(a.equals(b) for a, b in zip(new, was, strict=True))


def _with_parent_named(store: s3log.MemoryStore, log: s3log.Log, sid: str, name: str) -> None:
    """Rewrite a fork (all of it in its head's tail) so its parent pointer names
    ``name``: the fork entry and every hash after it made again, a consistent chain."""
    head = log.head(sid)
    assert head.parent is not None and head.segments == ()
    parent = dataclasses.replace(head.parent, session=name)
    entries: list[codec.Entry] = []
    prev = None
    for e in head.tail:
        data = dict(e.data, parent=parent.to_map()) if e.seq == 0 else e.data
        entries.append(codec.make_entry(e.seq, prev, e.kind, e.ts, data))
        prev = entries[-1].hash
    new = dataclasses.replace(head, parent=parent, tail=tuple(entries), hash=prev)
    store.put_raw(log.layout.head(sid), codec.encode_head(new))


def test_scan_skips_a_fork_whose_parent_names_no_session(old: ModuleType) -> None:
    """A fork whose stored parent pointer names "" (the chain otherwise consistent).
    This once checked that its rows' parent_session was "" as in 02311d6; since session
    12 a parent naming no session id makes the head corrupt (docs/format.md, "Head"):
    reading it raises CorruptionError naming the head, and a scan skips the session
    with a warning."""
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("m", 1)
    w.commit()
    fork = log.fork(w.session_id)
    fw = log.open(fork)
    fw.append("m", 2)
    fw.commit()
    _with_parent_named(store, log, fork, "")
    with pytest.raises(s3log.CorruptionError, match="parent session is not a session id") as err:
        log.read(fork)
    assert err.value.key == log.layout.head(fork)
    with pytest.warns(analytics.CorruptSessionWarning):
        assert analytics.to_arrow(store, sessions=[fork]).num_rows == 0


def test_owner_columns_of_empty_names() -> None:
    """The helper itself: parents "" (falsy) among Nones keep their rows' ""."""
    sessions, parents = analytics._owner_columns([("a", "", 2), ("b", None, 1)], 3)
    assert sessions.to_pylist() == ["a", "a", "b"]
    assert parents.to_pylist() == ["", "", None]


def test_fork_check_from_segment_columns_as_02311d6(old: ModuleType) -> None:
    """Forks whose fork entry lies in a v2 segment (read as columns, the first entry
    made by ``new_entry``): scanned as 02311d6 scans them, and a head whose parent
    pointer no longer matches that entry refused with the same error."""
    oa = _sub(old, "analytics")
    store = s3log.MemoryStore()
    clock = itertools.count(T0, 3)
    log = s3log.Log(store, config=s3log.LogConfig(env=Env.deterministic(4, lambda: next(clock)),
                                                  tail_per_commit=0, tail_max_bytes=300))
    w = log.create()
    for i in range(30):
        w.append("m", {"i": i})
        w.commit()
    forks = [log.fork(w.session_id, at_seq=at) for at in (0, 7, 29)]
    for sid in forks:
        fw = log.open(sid)
        for i in range(25):
            fw.append("n", {"i": i, "pad": "y" * 20})
            fw.commit()
        assert log.head(sid).segments, "the fork entry is in a segment"
    assert analytics.to_arrow(store, batch_size=5).equals(oa.to_arrow(store, batch_size=5))
    sid = forks[1]
    head = log.head(sid)
    assert head.parent is not None
    tampered = dataclasses.replace(head, parent=dataclasses.replace(head.parent, seq=head.parent.seq + 1))
    store.put_raw(log.layout.head(sid), codec.encode_head(tampered))
    with pytest.raises(s3log.CorruptionError) as new:
        log.read_runs(sid)
    with pytest.raises(Exception) as was:
        old.Log(store).read_runs(sid)
    assert type(was.value).__name__ == "CorruptionError" and str(new.value) == str(was.value)
    assert "fork entry's parent differs" in str(new.value)
