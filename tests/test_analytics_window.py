"""analytics.scan reads sessions through a sliding window: bounded, in order, no barrier."""

from __future__ import annotations

import threading
from typing import Any

import s3log
from s3log import analytics
from s3log.store.base import Blob

#: How long a blocked GET waits for the event it expects before giving up (a guard
#: against hanging the run, never a measured time: the test asserts the event came).
GUARD_S = 10.0


class _Watched:
    """A MemoryStore seen through: head GETs are counted, one can be held until an event."""

    def __init__(self, inner: s3log.MemoryStore) -> None:
        self.inner = inner
        self.honours_preconditions = True
        self.lock = threading.Lock()
        self.heads: list[str] = []
        self.hold: dict[str, threading.Event] = {}
        self.release_on: dict[str, threading.Event] = {}
        self.on_head: Any = None
        self.released: list[bool] = []

    def get(self, key: str) -> Blob:
        if key.endswith("/head"):
            sid = key.split("/")[-2]
            with self.lock:
                self.heads.append(sid)
            if self.on_head is not None:
                self.on_head()
            if sid in self.release_on:
                self.release_on[sid].set()
            if sid in self.hold:
                self.released.append(self.hold[sid].wait(GUARD_S))
        return self.inner.get(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _sessions(store: s3log.MemoryStore, n: int, entries: int = 3) -> list[str]:
    log = s3log.Log(store)
    for s in range(n):
        w = log.create(meta={"n": s})
        for i in range(entries):
            w.append("message", {"s": s, "i": i})
            w.commit()  # a few segments per session
    return log.list_session_ids()


def test_a_slow_session_holds_back_only_itself_not_a_whole_window() -> None:
    # parallelism 2 over 4 sessions: the second session's head is held until the
    # third's head is requested. Reading in fixed windows of 2, the third session
    # started only once the whole first window (the second session included) was
    # done, so the hold never ended; a sliding window starts it as soon as the first
    # session is taken.
    inner = s3log.MemoryStore()
    ids = _sessions(inner, 4)
    store = _Watched(inner)
    gate = threading.Event()
    store.hold[ids[1]] = gate
    store.release_on[ids[2]] = gate
    table = analytics.to_arrow(store, parallelism=2)  # type: ignore[arg-type]
    assert store.released == [True]
    # Sessions still come out in the order they were listed, every entry once.
    sessions = table.column("session").to_pylist()
    assert list(dict.fromkeys(sessions)) == ids
    assert table.num_rows == 4 * 3


def test_sessions_read_ahead_of_the_consumer_stay_within_parallelism() -> None:
    inner = s3log.MemoryStore()
    ids = _sessions(inner, 12)
    store = _Watched(inner)
    done = [0]
    ahead: list[int] = []

    def seen_head() -> None:
        # Heads requested minus sessions handed over: what is read or being read ahead.
        with store.lock:
            ahead.append(len(store.heads) - done[0])

    def progress(p: analytics.ScanProgress) -> None:
        done[0] = p.sessions_done

    store.on_head = seen_head
    rows = sum(b.num_rows for b in analytics.scan(
        store, parallelism=3, batch_size=2, progress=progress))  # type: ignore[arg-type]
    assert rows == 12 * 3
    assert len(store.heads) == len(ids)  # each head read once
    # At most `parallelism` sessions beyond the one being turned into rows.
    assert max(ahead) <= 3 + 1


def test_closing_a_scan_early_reads_no_further_sessions() -> None:
    inner = s3log.MemoryStore()
    ids = _sessions(inner, 20)
    store = _Watched(inner)
    batches = analytics.scan(store, parallelism=2, batch_size=1)  # type: ignore[arg-type]
    first = next(batches)
    assert first.num_rows == 1
    batches.close()  # returns once the reads in flight are done; the rest never start
    # The first session, and at most the window of two read ahead of it.
    assert 1 <= len(store.heads) <= 1 + 2 < len(ids)
