"""The garbage collector's pause around decoding: nested, raising, across threads, it leaves the
collector as it found it, as the generator-based pause it replaced did.
"""

from __future__ import annotations

import gc
import random
import threading
from collections.abc import Callable, Generator, Iterator
from types import ModuleType
from typing import Any

import pytest

import s3log
from s3log._drive import gcpause as _gcpause
from tests.baseline import baseline_module
from tests.helpers import run_threads


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


def test_pause_nested_and_raising_as_the_generator_based_pause(baseline: ModuleType, gc_state: None) -> None:
    """Random scripts of nesting, raising and toggling: the collector's state after each
    step as with the generator-based pause of the baseline build."""
    oc = baseline_module("codec")
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
        new = _script(_gcpause.paused, _gcpause.depth, steps)
        (gc.enable if start else gc.disable)()
        was = _script(oc._gc_paused, lambda: oc._gc_depth, steps)
        assert new == was, steps
        assert _gcpause.depth() == 0


def test_pause_lets_exceptions_through(gc_state: None) -> None:
    """An exception inside the block leaves it (not suppressed), the collector back on;
    StopIteration inside a generator's block too, as with contextlib's."""
    gc.enable()
    for exc in (ValueError("x"), KeyboardInterrupt(), GeneratorExit(), StopIteration(3)):
        with pytest.raises(type(exc)), _gcpause.paused():
            assert not gc.isenabled()
            raise exc
        assert gc.isenabled() and _gcpause.depth() == 0

    def gen() -> Generator[int, None, None]:
        with _gcpause.paused():
            yield 1
            yield 2

    g = gen()
    assert next(g) == 1 and not gc.isenabled()
    g.close()  # GeneratorExit inside the block
    assert gc.isenabled() and _gcpause.depth() == 0


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


def test_pause_across_threads_as_the_generator_based_pause(baseline: ModuleType, gc_state: None) -> None:
    """8 threads entering and leaving in a seeded interleaving while the collector is
    toggled: the same states as the baseline build's pause, and the depth back at 0."""
    oc = baseline_module("codec")
    for seed in range(6):
        gc.enable()
        new = _conducted(_gcpause.paused, _gcpause.depth, random.Random(seed))
        gc.enable()
        was = _conducted(oc._gc_paused, lambda: oc._gc_depth, random.Random(seed))
        assert new == was
        assert _gcpause.depth() == 0 and new[-1][3] == 0


def test_pause_free_running_threads(gc_state: None) -> None:
    """8 threads pausing at random without a toggler: the collector is off inside
    every block and on again after the last (it was on when the first began)."""
    gc.enable()
    bad: list[int] = []

    def worker(i: int) -> None:
        rng = random.Random(i)
        for _ in range(2000):
            with _gcpause.paused():
                if gc.isenabled():
                    bad.append(i)
                if rng.random() < 0.3:
                    with _gcpause.paused():
                        if gc.isenabled():
                            bad.append(i)

    run_threads(worker)
    assert bad == []
    assert gc.isenabled() and _gcpause.depth() == 0


def test_the_codec_leaves_the_collector_alone_and_the_drivers_pause_it(
        gc_state: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding is a pure function: it never turns the process-wide collector off. A
    driver does, while a procedure decodes what a request brought back, and turns it
    back on after."""
    from s3log._drive.drivers import SyncDriver
    from s3log._format.codec import decode_head, decode_segment, encode_segment
    from s3log._format.entries import make_entry
    from s3log._protocol import ops
    from s3log.config import RetryPolicy
    from s3log.store.memory import MemoryStore

    gc.enable()
    entries, prev = [], None
    for i in range(50):
        entries.append(make_entry(i, prev, "m", i, {"i": i}))
        prev = entries[-1].hash
    body = encode_segment("s", entries)
    log = s3log.Log(MemoryStore())
    w = log.create()
    w.append("m", 1)
    w.commit()
    head_body = log.store.get(log.layout.head(w.session_id)).body
    toggled: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: toggled.append("disable"))
    assert len(decode_segment(body, "k").entries) == 50
    assert decode_head(head_body, "h").seq == 0
    assert toggled == []
    monkeypatch.undo()

    def proc() -> ops.Proc[bool]:
        yield from ops.get("k")
        return gc.isenabled()

    store = MemoryStore()
    store.put_if_absent("k", body)
    driver = SyncDriver(store, RetryPolicy(), 4)
    assert driver.run(proc()) is False
    assert gc.isenabled() and _gcpause.depth() == 0
    driver.close()
