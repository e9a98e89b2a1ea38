"""The end-to-end demo: serverless agent workers racing on shared sessions.

Starts the embedded local S3 (unless a bucket/endpoint is given), runs a fleet of
worker processes that each restore a session, run one turn of a deterministic fake
model, append it and exit, then reads everything back and reports. Exits non-zero if
any acknowledged entry is missing or stored twice, or any chain fails to verify.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import random
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from s3log._format.values import FORK_KIND
from s3log.log import Log
from s3log.store.s3 import S3Store


def fake_model(history: list[dict[str, Any]], prompt: str) -> dict[str, Any]:
    """A deterministic stand-in for an LLM: the reply depends only on its input."""
    digest = hashlib.sha256((prompt + str(len(history))).encode()).hexdigest()
    return {"role": "assistant", "content": f"reply {digest[:12]} to {prompt!r}", "tokens": len(prompt) + 7}


def invocation(
    endpoint: str | None, bucket: str, prefix: str, session: str, worker: int, turn: int, barrier: Any = None
) -> dict[str, Any]:
    """One serverless invocation: restore, run a turn, append, commit, exit.

    ``barrier``: wait there, once the session is restored and the turn appended, before
    committing: every worker then commits on the head they all read, and all but one
    find it moved and fork (the race the demo is about, visible from the first turn).
    """
    log = Log(S3Store(bucket, endpoint_url=endpoint), prefix=prefix)
    try:
        w = log.open(session)
        history = w.state
        prompt = f"worker {worker} turn {turn}"
        w.append("user_input", {"role": "user", "content": prompt, "worker": worker, "turn": turn})
        time.sleep(random.uniform(0, 0.02))  # the model thinks; others may commit meanwhile
        reply = fake_model(history, prompt)
        w.append("assistant_items", {"items": [reply], "worker": worker, "turn": turn})
        w.append("turn_end", {"worker": worker, "turn": turn})
        if barrier is not None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(BARRIER_TIMEOUT_S)  # a worker that never came: race anyway
        before = log.store.requests.snapshot()
        result = w.commit()
        after = log.store.requests.snapshot()
        return {
            "acked": [e.data for e in result.acked],
            "session": result.session_id,
            "forked_from": result.fork.parent.session if result.fork else None,
            "commit_requests": {k: after[k] - before[k] for k in after},
        }
    finally:
        log.close()


#: Seconds a worker waits at the starting barrier for the others (they start in a second or two).
BARRIER_TIMEOUT_S = 120.0


def _run_worker(args: tuple[str | None, str, str, list[str], int, int, int, Any]) -> list[dict[str, Any]]:
    endpoint, bucket, prefix, sessions, worker, turns, seed, barrier = args
    rng = random.Random(seed * 1000 + worker)
    # The first turn of every worker is on the first session, committed on the head they
    # all read (the barrier); the rest land where the draw sends them.
    return [invocation(endpoint, bucket, prefix, sessions[0] if t == 0 else rng.choice(sessions), worker, t,
                       barrier if t == 0 else None)
            for t in range(turns)]


@dataclass
class DemoReport:
    """What the demo measured."""

    sessions: int = 0
    roots: int = 0
    entries: int = 0
    commits: int = 0
    conflicts: int = 0
    acked: int = 0
    #: Entries s3log itself stored: one ``s3log.fork`` entry opening each fork (where it
    #: left its parent, the parent's entries as its seed). ``entries`` is ``acked`` plus these.
    fork_entries: int = 0
    missing: list[Any] = field(default_factory=list)
    duplicated: list[Any] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    requests_per_commit: dict[str, float] = field(default_factory=dict)
    tree: list[tuple[int, str, int]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No loss, no duplicate, every chain verified."""
        return not (self.missing or self.duplicated or self.corrupt)


def _key(data: Any) -> Any:
    return (data.get("worker"), data.get("turn"), data.get("role") or ("items" in data) or "end")


def run_demo(
    *,
    bucket: str,
    endpoint: str | None,
    prefix: str = "s3log-demo",
    workers: int = 6,
    turns: int = 8,
    sessions: int = 3,
    seed: int = 7,
) -> DemoReport:
    """Run the fleet against ``bucket`` and check every promise; return the report."""
    t0 = time.time()
    log = Log(S3Store(bucket, endpoint_url=endpoint), prefix=prefix)
    roots = [log.create(meta={"demo": True, "n": i}).session_id for i in range(sessions)]
    ctx = multiprocessing.get_context("spawn")
    # One process per worker, all at the barrier before their first commit.
    with ctx.Manager() as manager, ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        barrier = manager.Barrier(workers) if workers > 1 else None
        jobs = [(endpoint, bucket, prefix, roots, w, turns, seed, barrier) for w in range(workers)]
        results = [r for batch in pool.map(_run_worker, jobs) for r in batch]
    report = DemoReport(roots=len(roots), commits=len(results))
    report.conflicts = sum(1 for r in results if r["forked_from"])
    acked = [d for r in results for d in r["acked"]]
    report.acked = len(acked)
    totals: Counter[str] = Counter()
    for r in results:
        totals.update(r["commit_requests"])
    report.requests_per_commit = {k: v / max(1, len(results)) for k, v in totals.items()}
    stored: Counter[Any] = Counter()
    ids = log.list_session_ids()
    report.sessions = len(ids)
    for sid in ids:
        try:
            view = log.read(sid)
        except Exception as exc:  # any failure to verify is reported, not raised
            report.corrupt.append(f"{sid}: {exc}")
            continue
        report.entries += len(view.entries)
        report.fork_entries += sum(1 for e in view.entries if e.kind == FORK_KIND)
        stored.update(_key(e.data) for e in view.entries if e.kind != FORK_KIND)
    report.missing = [d for d in acked if stored[_key(d)] == 0]
    report.duplicated = [k for k, n in stored.items() if n > 1]

    def walk(sid: str, depth: int) -> None:
        report.tree.append((depth, sid, log.head(sid).entry_count))
        for child in sorted(log.children(sid)):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    report.seconds = time.time() - t0
    log.close()
    return report
