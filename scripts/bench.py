"""s3log benchmark, side by side with the floor and (when installed) its peers.

Starts the embedded local S3 once and, in one run, measures for each system:

- ms per durable single-writer append (N appends of ~1 KB, one commit each) and HTTP
  requests per append by method;
- restore of a 10,000-entry session: time and requests, against one GET of the same bytes,
  on the local S3 and through a proxy adding 30 ms per request;
- entries/s with 64 concurrent appenders (group commit) against one commit per entry;
- CPU only (MemoryStore, one core): encode + hash of small entries, restore (read and
  verify) of a 10,000-entry session in format v2 and v1, the analytics scan, and one
  small commit back to back and after a pause as long as a local round trip.

- cold start (``coldstart``, scripts/bench_coldstart.py): fresh processes that restore a
  session and make one append durable, against the same with bare boto3.
- scan at realistic latency (``scan_latency``, scripts/bench_scan.py): ``analytics.scan``
  of 200 sessions x 100 entries through a proxy adding 30 ms per request, against a
  sequential boto3 loop through the same proxy; and the scan's peak memory.

- the tail bound (``tail``): commit latency over a raw PUT, PUTs and head bytes per commit,
  and the round trips to restore a short session, per ``LogConfig.tail_max_bytes``.

- OpenTelemetry (``otel``): a small commit with the API absent, present without an SDK,
  and recording spans; the share of a commit the absent case's checks cost.

- encryption (``encryption``): the CPU of an encrypted small commit over a plain one
  (MemoryStore; decision 0049).

- under a model of real latency (``latency``, scripts/bench_latency.py): per-request
  delays drawn from log-normals fitted to S3 Standard's and S3 Express One Zone's
  published bands; the targets that count (the local-server ratios above are
  informational rows). ``--quick`` runs this part alone, with fewer samples.

``--parts`` runs a subset
(``append,restore,concurrent,cpu,signing,encryption,startup,coldstart,scan_latency,tail,otel,latency``):
the peers are in ``append``, which takes longest.

Peers (the ``bench`` extra): delta-rs (``write_deltalake`` append), SlateDB (``put`` +
durable flush per put), Icechunk (one chunk + ``commit()`` per append); the floor is a
raw single PUT with the same client. Prints a table and writes JSON
(``--json PATH``, default ``bench-results.json``). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

# Measure the checkout this script is in: without this, `python scripts/bench.py` run
# from another worktree imports the installed (editable) s3log of the main checkout.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import s3log
from s3log.testing.localserver import LocalS3

PAYLOAD = {"role": "assistant", "content": "x" * 950}




def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(n: int, fn: Callable[[int], Any]) -> list[float]:
    """Per-call wall times of ``fn(i)`` for i in range(n), after 3 warm-up calls."""
    for i in range(3):
        fn(-1 - i)
    out = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


# ------------------------------------------------------------------------------ floors


def floor_boto3(server: LocalS3, n: int) -> dict[str, Any]:
    """A raw conditional (create-only) PUT of the same entry: the floor of a durable append."""
    client = server.client()
    bucket = server.create_bucket()
    body = json.dumps(PAYLOAD).encode()
    return {"ms_per_append": _ms(timed(n, lambda i: client.put_object(
        Bucket=bucket, Key=f"k{i}", Body=body, IfNoneMatch="*")))}


def floor_obstore(server: LocalS3, n: int) -> dict[str, Any]:
    """The same floor through obstore (``mode="create"``)."""
    import obstore

    store = s3log.S3Store.fast(server.create_bucket(), endpoint_url=server.endpoint_url).client
    body = json.dumps(PAYLOAD).encode()
    return {"ms_per_append": _ms(timed(n, lambda i: obstore.put(store, f"k{i}", body, mode="create")))}


# ------------------------------------------------------------------------------ s3log


def s3log_sync(store: Any, n: int) -> dict[str, Any]:
    log = s3log.Log(store)
    w = log.create()
    w.append("warm", 0)
    w.commit()
    store.requests.reset()

    def one(i: int) -> None:
        w.append("event", PAYLOAD)
        w.commit()

    samples = timed(n, one)
    req = store.requests.snapshot()
    log.close()
    total = n + 3
    return {"ms_per_append": _ms(samples), "requests_per_append": {k: v / total for k, v in req.items() if v}}


def paired(server: LocalS3, n: int, *, fast: bool, fresh_every: int | None = None) -> dict[str, Any]:
    """s3log's small durable append and the raw conditional PUT of the same entry,
    measured alternately in one loop (one of each per iteration), so both see the same
    machine load: the ratio of their medians is what the targets read.

    ``fresh_every``: start a new (lazily created) session every that many commits.
    """
    bucket = server.create_bucket()
    body = json.dumps(PAYLOAD).encode()
    if fast:
        import obstore

        store: Any = s3log.S3Store.fast(bucket, endpoint_url=server.endpoint_url)
        raw = store.client

        def raw_put(i: int) -> None:
            obstore.put(raw, f"raw/{i}", body, mode="create")
    else:
        store = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
        client = server.client()

        def raw_put(i: int) -> None:
            client.put_object(Bucket=bucket, Key=f"raw/{i}", Body=body, IfNoneMatch="*")
    in_store = _time_writes(store)
    log = s3log.Log(store)
    w = log.create()
    raw_s: list[float] = []
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(-3, n):
        if fresh_every and i % fresh_every == 0:
            w = log.create(lazy=True)
        t = time.perf_counter()
        raw_put(i + 3)
        t1 = time.perf_counter()
        in_store.clear()
        w.append("event", PAYLOAD)
        w.commit()
        t2 = time.perf_counter()
        if i >= 0:
            raw_s.append(t1 - t)
            ours.append(t2 - t1)
            theirs.append(sum(in_store))
    log.close()
    # What the commit spent in its store's PUT calls (the head, and a segment beside it
    # when one goes out in parallel, counted once: the slower), and the rest: s3log's
    # own time, on this host mostly Python resumed after the PUT's wait (see resume_tax).
    own = [o - s for o, s in zip(ours, theirs, strict=True)]
    return {"raw_ms": _ms(raw_s), "s3log_ms": _ms(ours), "ratio": _ms(ours) / _ms(raw_s), "n": n,
            "store_ms": _ms(theirs), "own_ms": _ms(own)}


def _time_writes(store: Any) -> list[float]:
    """Make ``store``'s conditional PUTs add their wall time to the returned list (the
    longest of those in flight at once: a segment beside the head overlaps it)."""
    spent: list[float] = []
    active = [0, 0.0]  # PUTs in flight, when the first of them started
    lock = threading.Lock()  # a segment beside the head is PUT from the driver's pool

    def timed_call(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                if active[0] == 0:
                    active[1] = time.perf_counter()
                active[0] += 1
            try:
                return original(*args, **kwargs)
            finally:
                with lock:
                    active[0] -= 1
                    if active[0] == 0:
                        spent.append(time.perf_counter() - active[1])
        return call

    for name in ("put_if_match", "put_if_absent"):
        setattr(store, name, timed_call(getattr(store, name)))
    return spent


def resume_tax(n: int = 400, pause_s: float = 0.005) -> dict[str, Any]:
    """CPU of one small append + commit on a MemoryStore, back to back and after a pause
    as long as a local round trip, alternately (wall time, medians).

    The paused figure is what the paired rows pay for s3log's own work: on this machine
    code resumed after a wait of a few milliseconds runs several times slower than back
    to back (docs/benchmarks.md, "What a commit costs after a wait"). The pause spins,
    so it is not the idle CPU waking up.
    """
    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    for _ in range(300):
        w.append("event", PAYLOAD)
        w.commit()
    warm: list[float] = []
    paused: list[float] = []
    for i in range(2 * n):
        if i % 2:
            t = time.perf_counter()
            while time.perf_counter() - t < pause_s:
                pass
        t = time.perf_counter()
        w.append("event", PAYLOAD)
        w.commit()
        (paused if i % 2 else warm).append(time.perf_counter() - t)
    log.close()
    w_us, p_us = statistics.median(warm) * 1e6, statistics.median(paused) * 1e6
    return {"warm_us": w_us, "paused_us": p_us, "ratio": p_us / w_us, "pause_ms": pause_s * 1000, "n": n}


def tail_sweep(server: LocalS3, n: int, bounds: tuple[int, ...] = (8, 16, 32)) -> dict[str, Any]:
    """The tail bound (``LogConfig.tail_max_bytes``, KiB) against what it trades.

    Per bound, measured alternately with a raw conditional PUT in one loop (boto3,
    ~1 KB entries): the median and mean commit over the raw PUT's. Counted exactly on
    a MemoryStore: PUTs per commit, head bytes per commit, and the round trips to
    restore a 30-entry (~30 KB) session, the size of a short agent conversation.
    """
    bucket = server.create_bucket()
    body = json.dumps(PAYLOAD).encode()
    client = server.client()
    logs = {b: s3log.Log(s3log.S3Store(bucket, endpoint_url=server.endpoint_url),
                         config=s3log.LogConfig(tail_max_bytes=b * 1024)) for b in bounds}
    writers = {b: log.create() for b, log in logs.items()}
    raw: list[float] = []
    ours: dict[int, list[float]] = {b: [] for b in bounds}
    k = 0
    for i in range(-3, n):
        for b in bounds:
            t = time.perf_counter()
            client.put_object(Bucket=bucket, Key=f"raw/{k}", Body=body, IfNoneMatch="*")
            t1 = time.perf_counter()
            writers[b].append("event", PAYLOAD)
            writers[b].commit()
            t2 = time.perf_counter()
            k += 1
            if i >= 0:
                raw.append(t1 - t)
                ours[b].append(t2 - t1)
    for log in logs.values():
        log.close()
    out: dict[str, Any] = {"n": n, "raw_ms": _ms(raw)}
    for b in bounds:
        mem = s3log.MemoryStore()
        log = s3log.Log(mem, config=s3log.LogConfig(tail_max_bytes=b * 1024))
        w = log.create()
        head_key = log.layout.head(w.session_id)
        sizes = []
        mem.requests.reset()
        for i in range(1000):
            w.append("event", {"i": i, **PAYLOAD})
            w.commit()
            sizes.append(len(mem.get(head_key).body))
        puts = mem.requests["PUT"] / 1000
        short = log.create()
        for i in range(30):
            short.append("event", {"i": i, **PAYLOAD})
            short.commit()
        restore_trips = 1 + bool(log.head(short.session_id).segments)  # the head, then its segments at once
        log.close()
        out[f"{b} KiB"] = {"median_ratio": _ms(ours[b]) / _ms(raw),
                           "mean_ratio": statistics.mean(ours[b]) / statistics.mean(raw),
                           "puts_per_commit": puts, "head_bytes_mean": statistics.mean(sizes),
                           "restore_round_trips_30_entries": restore_trips}
    return out


def round_trips(n: int = 2000) -> dict[str, Any]:
    """Round trips and PUTs per commit of one ~1 KB entry, counted exactly on a MemoryStore.

    Every op a commit procedure yields is one round trip (a Parallel batch is one);
    counted by wrapping the procedure, so the figure is exact, not timed.
    """
    from s3log._drive.drivers import step
    from s3log._protocol.ops import Parallel, PutIfAbsent, PutIfMatch, Sleep

    log = s3log.Log(s3log.MemoryStore())
    w = log.create()
    trips = puts = 0
    per_commit: dict[int, int] = {}

    def recorded(proc: Any) -> Any:
        nonlocal trips, puts
        value: Any = None
        error: BaseException | None = None
        k = 0
        while True:
            op, result = step(proc, value, error)
            if op is None:
                per_commit[k] = per_commit.get(k, 0) + 1
                return result
            if not isinstance(op, Sleep):
                trips += 1
                k += 1
                subs = op.ops if isinstance(op, Parallel) else (op,)
                puts += sum(isinstance(o, (PutIfAbsent, PutIfMatch)) for o in subs)
            try:
                value, error = (yield op), None
            except BaseException as exc:  # the store's error, into the procedure
                value, error = None, exc

    for i in range(n):
        w.append("event", {"i": i, **PAYLOAD})
        log._run(recorded(w._core.commit()))
    log.close()
    return {"commits": n, "round_trips_per_commit": trips / n, "puts_per_commit": puts / n,
            "commits_by_round_trips": {str(k): v for k, v in sorted(per_commit.items())}}


async def _s3log_async(store: Any, n: int) -> dict[str, Any]:
    alog = s3log.AsyncLog(store)
    w = await alog.create()
    await w.append_durable("warm", 0)
    store.requests.reset()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        await w.append_durable("event", PAYLOAD)
        samples.append(time.perf_counter() - t)
    req = store.requests.snapshot()
    return {"ms_per_append": _ms(samples), "requests_per_append": {k: v / n for k, v in req.items() if v}}


async def _concurrent(store: Any, appenders: int, per: int, config: Any = None) -> dict[str, Any]:
    from s3log._format.codec import decode_head

    alog = s3log.AsyncLog(store, config=config)
    w = await alog.create()
    store.requests.reset()

    async def appender(a: int) -> None:
        for i in range(per):
            await w.append_durable("event", {"a": a, "i": i, **PAYLOAD})

    t = time.perf_counter()
    await asyncio.gather(*(appender(a) for a in range(appenders)))
    dt = time.perf_counter() - t
    puts = store.requests["PUT"]
    # The sizes a group commit wrote: its head (entries inline while their segment is
    # pending) and a segment of one group (the smallest the head names; larger ones are merges).
    key = alog.layout.head(w.session_id)
    body = (await store.get(key)).body
    sizes = [len((await store.get(k)).body) for k in decode_head(body, key).segments]
    return {"entries_per_s": appenders * per / dt, "puts": puts, "entries": appenders * per,
            "head_bytes": len(body), "segment_bytes": min(sizes) if sizes else 0}


async def _two_puts_floor(store: Any, head_bytes: int, segment_bytes: int, rounds: int = 30) -> dict[str, Any]:
    """The least a group commit that writes a head and a segment can take on this
    server: two raw PUTs of those sizes in parallel (an If-Match and a create), measured
    alternately with one raw If-Match PUT of one ~1 KB entry."""
    import obstore

    raw = store.client
    one_body, head_body, seg_body = json.dumps(PAYLOAD).encode(), b"h" * head_bytes, b"s" * segment_bytes
    etag = (await obstore.put_async(raw, "floor/head", head_body))["e_tag"]
    one: list[float] = []
    two: list[float] = []
    for i in range(rounds):
        t = time.perf_counter()
        etag = (await obstore.put_async(raw, "floor/head", one_body, mode={"e_tag": etag}))["e_tag"]
        t1 = time.perf_counter()
        put_head, _ = await asyncio.gather(obstore.put_async(raw, "floor/head", head_body, mode={"e_tag": etag}),
                                           obstore.put_async(raw, f"floor/seg/{i}", seg_body, mode="create"))
        etag = put_head["e_tag"]
        one.append(t1 - t)
        two.append(time.perf_counter() - t1)
    return {"one_put_ms": _ms(one), "two_puts_ms": _ms(two)}


def concurrent_at_latency(server: LocalS3, appenders: int, delay_ms: float) -> dict[str, Any]:
    """64 appenders against one commit per entry through scripts/latency_proxy.py
    (``delay_ms`` added to every request, as a real S3 round trip is): whether group
    commit pays where the round trip, not this machine's CPU, is the cost."""
    from bench_scan import ProxyProcess

    with ProxyProcess(server.endpoint_url, delay_ms) as proxy:
        def store() -> Any:
            return s3log.AsyncS3Store.fast(server.create_bucket(), endpoint_url=proxy.endpoint_url)

        single = asyncio.run(_s3log_async(store(), 20))["ms_per_append"]
        group = asyncio.run(_concurrent(store(), appenders, 5))
    group["one_commit_per_entry_entries_per_s"] = 1000 / single
    group["ratio"] = group["entries_per_s"] * single / 1000
    group["latency_ms"] = delay_ms
    return group


def fill_session(log: s3log.Log, entries: int) -> str:
    """A session of ``entries`` entries of ~130 bytes, committed 50 at a time."""
    w = log.create()
    for i in range(entries):
        w.append("event", {"i": i, "text": "y" * 100})
        if i % 50 == 49:
            w.commit()
    w.commit()
    return w.session_id


def restore(server: LocalS3, entries: int, fast: bool) -> dict[str, Any]:
    bucket = server.create_bucket()
    store: Any = (s3log.S3Store.fast if fast else s3log.S3Store)(bucket, endpoint_url=server.endpoint_url)
    log = s3log.Log(store)
    sid = fill_session(log, entries)
    head = log.head(sid)
    # The same bytes as one object: the floor of a restore.
    keys = [*head.segments, f"s3log/sessions/{sid}/head"]
    total = sum(len(store.get(k).body) for k in keys)
    store.put_if_absent("floor/blob", b"z" * total)
    store.requests.reset()
    samples = timed(5, lambda i: log.read(sid))
    req = {k: v / 8 for k, v in store.requests.snapshot().items() if v}
    single = timed(5, lambda i: store.get("floor/blob"))
    floor = restore_floor(log, store, sid, head)
    log.close()
    return {"entries": entries, "ms": _ms(samples), "requests": req, "segments": len(head.segments),
            "bytes": total, "single_get_ms": _ms(single), "ratio_to_single_get": _ms(samples) / _ms(single),
            "floor": {**floor, "gets_ratio": floor["gets_ms"] / _ms(single),
                      "ratio": (floor["gets_ms"] + floor["sha256_ms"]) / _ms(single)}}


def restore_floor(log: s3log.Log, store: Any, sid: str, head: Any) -> dict[str, Any]:
    """What this server and this CPU allow any restore of the session, decoding nothing.

    ``gets_ms``: the restore's own requests with their bodies left undecoded (the head,
    then its segments in parallel, as wide as the log reads them). ``sha256_ms``: one
    SHA-256 over every entry's record, the least that verifying each entry costs in
    CPython. Their sum over one GET of the same bytes is the ratio no restore that
    verifies every entry can beat here, whatever it does between them.
    """
    from concurrent.futures import ThreadPoolExecutor

    key = log.layout.head(sid)
    with ThreadPoolExecutor(max_workers=log.config.max_parallel) as pool:
        def gets(i: int) -> None:
            store.get(key)
            list(pool.map(store.get, head.segments))

        gets_s = timed(5, gets)
    from s3log._format.values import entry_record

    records = [entry_record(e) for e in log.read(sid).entries]
    sha = hashlib.sha256
    hashing = timed(5, lambda i: [sha(r).digest() for r in records])
    return {"gets_ms": _ms(gets_s), "sha256_ms": _ms(hashing), "records": len(records)}


def restore_at_latency(server: LocalS3, entries: int, delay_ms: float, fast: bool) -> dict[str, Any]:
    """:func:`restore` through scripts/latency_proxy.py (``delay_ms`` added to every
    request, as a real S3 round trip is): a restore is the head's round trip, then its
    segments' in parallel, each decoded as it arrives; the floor is one GET of the same
    bytes through the same proxy."""
    from bench_scan import ProxyProcess

    bucket = server.create_bucket()
    make = s3log.S3Store.fast if fast else s3log.S3Store
    direct: Any = make(bucket, endpoint_url=server.endpoint_url)
    log = s3log.Log(direct)
    sid = fill_session(log, entries)
    head = log.head(sid)
    total = sum(len(direct.get(k).body) for k in [*head.segments, log.layout.head(sid)])
    direct.put_if_absent("floor/blob", b"z" * total)
    log.close()
    with ProxyProcess(server.endpoint_url, delay_ms) as proxy:
        store: Any = make(bucket, endpoint_url=proxy.endpoint_url)
        slow = s3log.Log(store)
        # Alternately, so both see the same load.
        ours: list[float] = []
        floor: list[float] = []
        for i in range(-1, 7):
            t = time.perf_counter()
            slow.read(sid)
            t1 = time.perf_counter()
            store.get("floor/blob")
            t2 = time.perf_counter()
            if i >= 0:
                ours.append(t1 - t)
                floor.append(t2 - t1)
        # What the round trips allow: the same GETs through the proxy, nothing decoded.
        least = restore_floor(slow, store, sid, head)
        slow.close()
    single = _ms(floor)
    return {"entries": entries, "latency_ms": delay_ms, "ms": _ms(ours), "single_get_ms": single,
            "segments": len(head.segments), "bytes": total, "ratio_to_single_get": _ms(ours) / single,
            "floor": {**least, "gets_ratio": least["gets_ms"] / single,
                      "ratio": (least["gets_ms"] + least["sha256_ms"]) / single}}


def _best(reps: int, fn: Callable[[], Any]) -> float:
    """The fewest CPU seconds of ``reps`` runs of ``fn``, each after a full collection.

    CPU time of the process, not wall time: on a machine shared with other work, time
    spent waiting for a core is not the code's cost.
    """
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def restore_memory(entries: int = 10_000) -> dict[str, Any]:
    """Read and verify a session from a MemoryStore: pure CPU, per format version."""
    out: dict[str, Any] = {"entries": entries}
    for v in (2, 1):
        log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(format_version=v))
        sid = fill_session(log, entries)
        out[f"v{v}_entries_per_s"] = entries / _best(5, partial(log.read, sid))
        log.close()
    out["v2_over_v1"] = out["v2_entries_per_s"] / out["v1_entries_per_s"]
    return out


def scan_memory(sessions: int = 20, per: int = 1_000) -> dict[str, Any]:
    """analytics.scan of ``sessions`` x ``per`` entries from a MemoryStore (chains verified)."""
    from s3log import analytics

    store = s3log.MemoryStore()
    log = s3log.Log(store)
    for s in range(sessions):
        w = log.create()
        for i in range(per):
            w.append("tool_call" if i % 4 == 0 else "message", {"s": s, "i": i, "text": "lorem ipsum " * 8})
            if i % 25 == 24:
                w.commit()
        w.commit()
    log.close()
    n = sessions * per

    def run() -> None:
        rows = sum(b.num_rows for b in analytics.scan(store, parallelism=1))
        assert rows == n, rows

    # Best of 5, as the restore rows: in a fresh process pyarrow's default allocator
    # (mimalloc) takes two to four scans of this size before it stops returning pages
    # to the system and faulting them in again (docs/benchmarks.md). Every run is
    # reported (the first also loads pyarrow's compute functions and pandas).
    runs = [n / _best(1, run) for _ in range(5)]
    return {"sessions": sessions, "entries": n, "entries_per_s": max(runs), "runs_entries_per_s": runs}


def cpu(n: int = 100_000) -> dict[str, Any]:
    from s3log._format.chain import PendingEntry, build_chain

    pending = [PendingEntry("event", 1_700_000_000_000, {"i": i, "text": "hello"}) for i in range(n)]
    best = _best(3, lambda: build_chain(pending, after_seq=-1, after_hash=None))
    return {"entries_per_s": n / best}


def signing_overhead(n: int = 4000, rounds: int = 10) -> dict[str, Any]:
    """Median per small commit on MemoryStore, without and with an Ed25519 signer.

    MemoryStore makes a commit pure CPU, so this is the worst case: against S3 the
    same microseconds sit beside a PUT of tens of milliseconds. The two writers take
    turns, ``rounds`` times, so the machine's noise falls on both alike.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer

    def writer(signer: Any) -> Any:
        log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(signer=signer))
        return log.create(meta={"user": "bench"})

    writers = {"plain": writer(None), "signed": writer(Ed25519Signer(Ed25519PrivateKey.generate()))}
    samples: dict[str, list[float]] = {name: [] for name in writers}
    for _ in range(rounds):
        for name, w in writers.items():
            samples[name] += timed(n // rounds, lambda i, w=w: (w.append("event", {"i": i}), w.commit()))
    plain, signed = _ms(samples["plain"]), _ms(samples["signed"])
    return {"plain_ms_per_commit": plain, "signed_ms_per_commit": signed, "ratio": signed / plain,
            "added_us_per_commit": (signed - plain) * 1000}


def encryption_overhead(n: int = 4000, rounds: int = 10) -> dict[str, Any]:
    """CPU per small commit on MemoryStore, plain and encrypted (a local key provider):
    one entry sealed (AES-256-GCM) at append and opened again by the writer's reducer.

    Measured in process CPU time (MemoryStore makes a commit pure CPU); the two writers
    take turns, ``rounds`` times, so the machine's noise falls on both alike.
    """
    from s3log.encryption import Encryption, LocalKeyProvider

    def writer(encryption: Any) -> Any:
        log = s3log.Log(s3log.MemoryStore(), config=s3log.LogConfig(encryption=encryption))
        return log.create(meta={"user": "bench"})

    writers = {"plain": writer(None),
               "encrypted": writer(Encryption(LocalKeyProvider({"bench": bytes(range(32))})))}
    cpu_s: dict[str, float] = {name: 0.0 for name in writers}
    per = n // rounds
    for _ in range(rounds):
        for name, w in writers.items():
            t0 = time.process_time()
            for i in range(per):
                w.append("event", {"i": i, "text": "hello"})
                w.commit()
            cpu_s[name] += time.process_time() - t0
    plain, enc = cpu_s["plain"] / n * 1000, cpu_s["encrypted"] / n * 1000
    return {"plain_ms_per_commit": plain, "encrypted_ms_per_commit": enc, "ratio": enc / plain,
            "added_us_per_commit": (enc - plain) * 1000}


def signing_overhead_http(server: LocalS3, n: int = 60, rounds: int = 3) -> dict[str, Any]:
    """Median per small durable commit over the local S3 (boto3), without and with Ed25519."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer

    def writer(signer: Any) -> Any:
        store = s3log.S3Store(server.create_bucket(), endpoint_url=server.endpoint_url)
        return s3log.Log(store, config=s3log.LogConfig(signer=signer)).create(meta={"user": "bench"})

    writers = {"plain": writer(None), "signed": writer(Ed25519Signer(Ed25519PrivateKey.generate()))}
    samples: dict[str, list[float]] = {name: [] for name in writers}
    for _ in range(rounds):
        for name, w in writers.items():
            samples[name] += timed(n // rounds, lambda i, w=w: (w.append("event", PAYLOAD), w.commit()))
    plain, signed = _ms(samples["plain"]), _ms(samples["signed"])
    return {"plain_ms_per_commit": plain, "signed_ms_per_commit": signed, "ratio": signed / plain}


def startup(runs: int = 7) -> dict[str, Any]:
    """Wall time of ``import s3log`` and of ``s3log --help`` in fresh processes (best of ``runs``),
    and of a bare interpreter for reference."""
    import subprocess

    def best(cmd: list[str]) -> float:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times.append(time.perf_counter() - t)
        return min(times) * 1000

    bare = best([sys.executable, "-c", "pass"])
    imp = best([sys.executable, "-c", "import s3log"])
    cli = best([sys.executable, "-m", "s3log.cli", "--help"])
    return {"bare_ms": bare, "import_ms": imp - bare, "help_ms": cli}


# ------------------------------------------------------------------------------ peers


def peer_deltalake(server: LocalS3, n: int) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import write_deltalake

    bucket = server.create_bucket()
    opts = {"AWS_ENDPOINT_URL": server.endpoint_url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "conditional_put": "etag"}
    uri = f"s3://{bucket}/table"
    table = pa.table({"i": [0], "content": [PAYLOAD["content"]]})
    return {"ms_per_append": _ms(timed(n, lambda i: write_deltalake(uri, table, mode="append", storage_options=opts)))}


def peer_slatedb(server: LocalS3, n: int) -> dict[str, Any]:
    from slatedb.uniffi import DbBuilder, FlushOptions, FlushType, ObjectStore

    bucket = server.create_bucket()
    # object_store's S3 builder reads these (the same crate obstore wraps).
    os.environ.update({"AWS_ENDPOINT": server.endpoint_url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"})
    body = json.dumps(PAYLOAD).encode()

    async def run() -> list[float]:
        store = ObjectStore.resolve(f"s3://{bucket}")
        db = await DbBuilder("db", store).build()
        samples = []
        for i in range(n + 3):
            t = time.perf_counter()
            handle = await db.put(f"k{i}".encode(), body)
            # Flush the WAL now rather than on SlateDB's timer, then wait for durability.
            await db.flush_with_options(FlushOptions(flush_type=FlushType.WAL))
            await handle.await_durable()
            samples.append(time.perf_counter() - t)
        await db.shutdown()
        return samples[3:]

    return {"ms_per_append": _ms(asyncio.run(run()))}


def paired_slatedb(server: LocalS3, n: int) -> dict[str, Any]:
    """SlateDB (put + WAL flush + await durable) and s3log/obstore's small durable
    append, alternately in one loop, so both see the same machine load."""
    from slatedb.uniffi import DbBuilder, FlushOptions, FlushType, ObjectStore

    bucket = server.create_bucket()
    os.environ.update({"AWS_ENDPOINT": server.endpoint_url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"})
    body = json.dumps(PAYLOAD).encode()
    log = s3log.Log(s3log.S3Store.fast(server.create_bucket(), endpoint_url=server.endpoint_url))
    w = log.create()

    async def run() -> tuple[list[float], list[float]]:
        db = await DbBuilder("db", ObjectStore.resolve(f"s3://{bucket}")).build()
        theirs, ours = [], []
        for i in range(n + 3):
            t = time.perf_counter()
            handle = await db.put(f"k{i}".encode(), body)
            await db.flush_with_options(FlushOptions(flush_type=FlushType.WAL))
            await handle.await_durable()
            t1 = time.perf_counter()
            w.append("event", PAYLOAD)
            w.commit()
            t2 = time.perf_counter()
            if i >= 3:
                theirs.append(t1 - t)
                ours.append(t2 - t1)
        await db.shutdown()
        return theirs, ours

    theirs, ours = asyncio.run(run())
    log.close()
    return {"slatedb_ms": _ms(theirs), "s3log_ms": _ms(ours), "ratio": _ms(ours) / _ms(theirs), "n": n}


def peer_icechunk(server: LocalS3, n: int) -> dict[str, Any]:
    import icechunk
    import zarr

    bucket = server.create_bucket()
    storage = icechunk.s3_storage(bucket=bucket, prefix="repo", endpoint_url=server.endpoint_url, allow_http=True,
                                  region="us-east-1", access_key_id="testing", secret_access_key="testing",
                                  force_path_style=True)
    repo = icechunk.Repository.create(storage)
    session = repo.writable_session("main")
    root = zarr.group(store=session.store)
    root.create_array("a", shape=(n + 3,), chunks=(1,), dtype="i8")
    session.commit("init")

    def one(i: int) -> None:
        s = repo.writable_session("main")
        zarr.open_group(store=s.store)["a"][i + 3] = i
        s.commit(f"append {i}")

    return {"ms_per_append": _ms(timed(n, one))}


def run_peer(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except ImportError as exc:
        return {"skipped": f"not installed ({exc.name})"}
    except Exception as exc:  # a peer failing against moto is reported, not fatal
        return {"skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}


# ------------------------------------------------------------------------------- main


def otel_overhead(n: int = 4000, rounds: int = 10) -> dict[str, Any]:
    """Median per small commit on MemoryStore with OpenTelemetry absent, present without
    an SDK, and recording (the SDK, exporting nowhere).

    Absent (``s3log.otel.TRACER`` None, as when the API is not importable), a commit
    pays one ``TRACER is None`` check for the verb and one per request: their share of
    the commit is that check's own cost (timed apart) over the commit's, which a
    difference of two noisy medians could not resolve. The writers take turns.
    """
    import timeit

    from s3log import otel

    api = otel.TRACER
    modes: dict[str, Any] = {"absent": None}
    if api is not None:
        modes["api, no SDK"] = api
    try:
        from opentelemetry.sdk.trace import TracerProvider

        modes["SDK recording"] = TracerProvider().get_tracer("s3log")
    except ImportError:
        pass
    writers = {name: s3log.Log(s3log.MemoryStore("bench")).create() for name in modes}
    samples: dict[str, list[float]] = {name: [] for name in modes}
    try:
        for _ in range(rounds):
            for name, w in writers.items():
                otel.TRACER = modes[name]
                samples[name] += timed(n // rounds, lambda i, w=w: (w.append("event", {"i": i}), w.commit()))
    finally:
        otel.TRACER = api
    check_s = min(timeit.repeat("otel.TRACER is None", globals={"otel": otel}, number=200_000, repeat=5)) / 200_000
    base = _ms(samples["absent"])
    checks = 2  # the commit's and its one request's (a conditional PUT of the head)
    return {"absent_ms_per_commit": base, "check_ns": check_s * 1e9, "checks_per_commit": checks,
            "absent_share": checks * check_s * 1000 / base,
            "modes": {name: {"ms_per_commit": _ms(v), "ratio": _ms(v) / base} for name, v in samples.items()}}


PARTS = ("append", "restore", "concurrent", "cpu", "signing", "encryption", "startup", "coldstart", "scan_latency",
         "tail", "otel", "latency")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=200, help="appends per single-writer system")
    parser.add_argument("--restore-entries", type=int, default=10_000)
    parser.add_argument("--appenders", type=int, default=64)
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    parser.add_argument("--json", default="bench-results.json")
    parser.add_argument("--quick", action="store_true",
                        help="only the latency-model part, with fewer samples (to iterate; not for the docs)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the latency model's draws")
    parser.add_argument("--docs", default=None,
                        help="also write this run's targets into that Markdown file (make bench: docs/benchmarks.md)")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if args.quick:
        if args.docs:
            parser.error("--quick measures too few samples for the docs; run without it")
        parts = {"latency"}
    if not parts <= set(PARTS):
        parser.error(f"unknown parts {sorted(parts - set(PARTS))}; choose from {', '.join(PARTS)}")
    n = args.n
    results: dict[str, Any] = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
        "n": n,
        "parts": sorted(parts),
    }
    if "cpu" in parts:
        # First, before the local S3 server starts: its threads would share the CPU
        # time these measure.
        results["cpu"] = cpu()
        results["resume_tax"] = resume_tax()
        results["restore_memory"] = restore_memory(args.restore_entries)
        # The workload (many short sessions), and fewer long ones.
        results["scan_memory"] = scan_memory(200, 100)
        results["scan_memory_long"] = scan_memory(20, 1_000)
    if parts & {"append", "restore", "concurrent", "tail"}:
        with LocalS3() as server:
            os.environ.update(server.env())
            ep = server.endpoint_url
            b = server.create_bucket
            if "append" in parts:
                systems: dict[str, Any] = {}
                systems["raw PUT (boto3)"] = floor_boto3(server, n)
                systems["raw PUT (obstore)"] = run_peer("obstore", lambda: floor_obstore(server, n))
                systems["s3log / boto3"] = s3log_sync(s3log.S3Store(b(), endpoint_url=ep), n)
                systems["s3log / aioboto3"] = asyncio.run(_with_close(s3log.AsyncS3Store(b(), endpoint_url=ep), n))
                systems["s3log / obstore"] = run_peer(
                    "obstore", lambda: s3log_sync(s3log.S3Store.fast(b(), endpoint_url=ep), n))
                systems["s3log / obstore async"] = run_peer(
                    "obstore", lambda: asyncio.run(_s3log_async(s3log.AsyncS3Store.fast(b(), endpoint_url=ep), n)))
                peer_n = max(20, n // 4)
                systems["delta-rs"] = run_peer("deltalake", lambda: peer_deltalake(server, peer_n))
                systems["SlateDB"] = run_peer("slatedb", lambda: peer_slatedb(server, peer_n))
                systems["Icechunk"] = run_peer("icechunk", lambda: peer_icechunk(server, peer_n))
                results["append"] = systems
                results["paired"] = {
                    "s3log / boto3": paired(server, n, fast=False),
                    "s3log / boto3, a fresh session every 30 commits": paired(server, n, fast=False, fresh_every=30),
                    "s3log / obstore": run_peer("obstore", lambda: paired(server, n, fast=True)),
                }
                results["paired_slatedb"] = run_peer("slatedb", lambda: paired_slatedb(server, n))
                results["round_trips"] = round_trips()
            if "tail" in parts:
                results["tail"] = tail_sweep(server, n)
            if "restore" in parts:
                results["restore"] = {
                    "boto3": restore(server, args.restore_entries, fast=False),
                    "obstore": run_peer("obstore", lambda: restore(server, args.restore_entries, fast=True)),
                }
                results["restore_latency"] = {
                    "boto3": restore_at_latency(server, args.restore_entries, 30.0, fast=False),
                    "obstore": run_peer("obstore", lambda: restore_at_latency(
                        server, args.restore_entries, 30.0, fast=True)),
                }
            if "concurrent" in parts:
                # Three rounds, each measuring one commit per entry and the group commit
                # (the default, and the strict tail bound of decision 0033) one after the
                # other; the best of each, so a burst of load on the shared machine hits all alike.
                fast_store = partial(s3log.AsyncS3Store.fast, endpoint_url=ep)
                # Every group past 32 KiB a head and a segment (the default before 0033).
                strict_tail = s3log.LogConfig(tail_per_commit=0)
                singles, groups, stricts = [], [], []
                for _ in range(3):
                    singles.append(asyncio.run(_s3log_async(fast_store(b()), 50))["ms_per_append"])
                    groups.append(asyncio.run(_concurrent(fast_store(b()), args.appenders, 10)))
                    stricts.append(asyncio.run(_concurrent(fast_store(b()), args.appenders, 10, strict_tail)))
                single = 1000 / min(singles)
                conc = max(groups, key=lambda g: g["entries_per_s"])
                strict = max(stricts, key=lambda g: g["entries_per_s"])
                conc["one_commit_per_entry_entries_per_s"] = single
                conc["ratio"] = conc["entries_per_s"] / single
                conc["strict_tail"] = {**strict, "ratio": strict["entries_per_s"] / single}
                floor = asyncio.run(_two_puts_floor(fast_store(b()), strict["head_bytes"], strict["segment_bytes"]))
                # The best ratio a group commit of two PUTs (the strict bound's) could
                # reach here, with no CPU of its own, against s3log's one commit per entry.
                floor["ratio"] = args.appenders * (1000 / single) / floor["two_puts_ms"]
                conc["floor"] = floor
                results["concurrent"] = conc
                results["concurrent_latency"] = run_peer("obstore", lambda: concurrent_at_latency(
                    server, args.appenders, 30.0))
    if "latency" in parts:
        from bench_latency import latency  # scripts/, next to this file

        with LocalS3() as server:
            os.environ.update(server.env())
            results["latency"] = latency(server, n=60 if args.quick else 300, restore_n=3 if args.quick else 9,
                                         entries=args.restore_entries, appenders=1000, per=4 if args.quick else 10,
                                         seed=args.seed,
                                         rounds={"express": 1, "standard": 1} if args.quick else
                                         {"express": 3, "standard": 1})
    if "otel" in parts:
        results["otel"] = otel_overhead()
    if "signing" in parts:
        results["signing"] = signing_overhead()
        with LocalS3() as server:
            os.environ.update(server.env())
            results["signing_http"] = signing_overhead_http(server)
    if "encryption" in parts:
        results["encryption"] = encryption_overhead()
    if "startup" in parts:
        results["startup"] = startup()
    if "coldstart" in parts:
        from bench_coldstart import coldstart  # scripts/, next to this file

        with LocalS3() as server:
            results["coldstart"] = coldstart(server)
    if "scan_latency" in parts:
        from bench_scan import scan_latency  # scripts/, next to this file

        results["scan_latency"] = scan_latency(30.0)
    results["targets"] = targets(results)
    _report(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {args.json}")
    if args.docs:
        from bench_docs import write_targets  # scripts/, next to this file

        write_targets(args.docs, results)
        print(f"wrote the targets into {args.docs}")
        if "latency" in results:
            from bench_docs import write_block
            from bench_latency import peers_table

            write_block(args.docs, "latency-peers", "\n".join(peers_table(results["latency"])) + "\n")
            print(f"wrote the acknowledgement latencies into {args.docs}")


async def _with_close(store: Any, n: int) -> dict[str, Any]:
    try:
        return await _s3log_async(store, n)
    finally:
        await store.aclose()


def _slower_or_faster(ratio: float) -> str:
    """``ratio`` = peer time / s3log time, said the right way round."""
    return f"{ratio:.1f}x slower" if ratio >= 1 else f"{1 / ratio:.1f}x faster"


def _restore_floor_text(fl: dict[str, Any] | None) -> str:
    """The floor this server and CPU allow a restore (:func:`restore_floor`), said
    beside the figure."""
    if not fl:
        return ""
    return (f"; floor here {fl['ratio']:.1f}x: its GETs alone {fl['gets_ratio']:.1f}x, "
            f"+ SHA-256 of each record {fl['sha256_ms']:.1f} ms")


#: The bound of a row kept for information: the local server's ratios, whose floor is
#: this host's (docs/benchmarks.md); the latency-model rows are the targets.
INFO = "informational"


def mark(ok: bool | None) -> str:
    """A target row's mark: met, missed, or informational (no bound)."""
    return "·" if ok is None else "✔" if ok else "✘"


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured target: what, the figure, the bound, and whether it is met
    (None: an informational row)."""
    out: list[dict[str, Any]] = []

    def add(measure: str, value: float | None, shown: str, bound: str, ok: bool | None) -> None:
        if value is not None:
            out.append({"measure": measure, "value": value, "shown": shown, "target": bound, "ok": ok})

    a = r.get("append", {})

    def ms(name: str) -> float | None:
        v = a.get(name, {}).get("ms_per_append")
        return float(v) if v is not None else None

    def ratio(x: str, y: str) -> float | None:
        mx, my = ms(x), ms(y)
        return mx / my if mx is not None and my is not None else None

    rt_ = r.get("resume_tax")
    for mine, pr in r.get("paired", {}).items():
        if "ratio" not in pr:
            continue
        v = pr["ratio"]
        split = ""
        if "own_ms" in pr:
            # Where the difference goes: the commit's own PUTs (larger than the entry:
            # the head carries its tail) and s3log's time around them.
            split = f"; in its PUTs {pr['store_ms']:.2f} ms, its own time {pr['own_ms'] * 1000:.0f} us"
            if rt_:
                split += f" (CPU back to back {rt_['warm_us']:.0f} us, after a {rt_['pause_ms']:g} ms pause " \
                         f"{rt_['paused_us']:.0f} us)"
        add(f"{mine} vs a raw conditional PUT of the same entry, local S3 (measured alternately)", v,
            f"{v:.2f}x ({pr['s3log_ms']:.2f} vs {pr['raw_ms']:.2f} ms{split})", INFO, None)
    ps = r.get("paired_slatedb", {})
    if "ratio" in ps:
        v = ps["ratio"]
        add("s3log/obstore vs SlateDB (put + WAL flush + await durable; measured alternately)", v,
            f"{v:.2f}x ({ps['s3log_ms']:.2f} vs {ps['slatedb_ms']:.2f} ms)", "<= 0.9x", v <= 0.9)
    if "round_trips" in r:
        rt = r["round_trips"]
        v = rt["round_trips_per_commit"]
        add("round trips per commit, ~1 KB entries (exact count)", v,
            f"{v:.3f} ({rt['puts_per_commit']:.3f} PUTs)", "1", v == 1.0)
    for s in ("s3log / boto3", "s3log / aioboto3", "s3log / obstore"):
        v = ratio("delta-rs", s)
        add(f"delta-rs vs {s}", v, _slower_or_faster(v) if v else "", "delta-rs >= 8x slower",
            v is not None and v >= 8)
    for name, rs in r.get("restore", {}).items():
        if "skipped" in rs:
            continue
        gets = rs["requests"].get("GET", 0)
        add(f"restore {rs['entries']:,} entries ({name}): GETs", gets, f"{gets:.0f} GETs", "<= 21", gets <= 21)
        v = rs["ratio_to_single_get"]
        floor = _restore_floor_text(rs.get("floor"))
        add(f"restore {rs['entries']:,} entries ({name}) vs one GET of the same {rs['bytes']:,} bytes, local S3", v,
            f"{v:.1f}x ({rs['ms']:.0f} ms vs {rs['single_get_ms']:.1f} ms{floor})", INFO, None)
    for name, rs in r.get("restore_latency", {}).items():
        if "skipped" in rs:
            continue
        v = rs["ratio_to_single_get"]
        add(f"restore {rs['entries']:,} entries ({name}) vs one GET of the same {rs['bytes']:,} bytes, "
            f"{rs['latency_ms']:g} ms per request (latency proxy, measured alternately)", v,
            f"{v:.2f}x ({rs['ms']:.0f} ms vs {rs['single_get_ms']:.0f} ms{_restore_floor_text(rs.get('floor'))})",
            INFO, None)
    if "concurrent" in r:
        c = r["concurrent"]
        st, fl = c.get("strict_tail"), c.get("floor")
        more = f"; strict tail bound (tail_per_commit=0): {st['ratio']:.1f}x in {st['puts']} PUTs" if st else ""
        if fl and st:
            more += (f", its floor here with two PUTs per group {fl['ratio']:.1f}x: {fl['two_puts_ms']:.1f} ms for "
                     f"{st['head_bytes'] // 1000} + {st['segment_bytes'] // 1000} KB in parallel")
        add(f"{c['entries']} entries from concurrent appenders vs one commit per entry, local S3", c["ratio"],
            f"{c['ratio']:.1f}x ({c['entries_per_s']:,.0f}/s in {c['puts']} PUTs{more})", INFO, None)
    cl = r.get("concurrent_latency", {})
    if "ratio" in cl:
        add(f"{cl['entries']} entries from concurrent appenders vs one commit per entry, "
            f"{cl['latency_ms']:.0f} ms per request (latency proxy)", cl["ratio"],
            f"{cl['ratio']:.1f}x ({cl['entries_per_s']:,.0f}/s in {cl['puts']} PUTs)", INFO, None)
    if "cpu" in r:
        v = r["cpu"]["entries_per_s"]
        add("encode + hash of small entries, one core", v, f"{v:,.0f}/s", ">= 150,000/s", v >= 150_000)
        m = r["restore_memory"]
        v = m["v2_entries_per_s"]
        add(f"restore {m['entries']:,} entries from MemoryStore (format v2)", v,
            f"{v:,.0f}/s ({m['v2_over_v1']:.1f}x format v1's {m['v1_entries_per_s']:,.0f}/s)", ">= 300,000/s",
            v >= 300_000)
        sm, sl = r["scan_memory"], r.get("scan_memory_long", {})
        v = sm["entries_per_s"]
        add(f"analytics.scan from MemoryStore, chains verified ({sm['sessions']} sessions x "
            f"{sm['entries'] // sm['sessions']} entries)", v,
            f"{v:,.0f}/s (runs: {', '.join(f'{x / 1000:.0f}k' for x in sm.get('runs_entries_per_s', []))}; "
            f"{sl.get('sessions', 0)} x {sl.get('entries', 0) // max(sl.get('sessions', 1), 1):,}: "
            f"{sl.get('entries_per_s', 0):,.0f}/s)", ">= 250,000/s", v >= 250_000)
    if "latency" in r:
        from bench_latency import targets as latency_targets

        latency_targets(r["latency"], add)
    if "signing_http" in r:
        g, m = r["signing_http"], r["signing"]
        v = g["ratio"]
        add("Ed25519-signed vs unsigned small commit over the local S3 (boto3)", v,
            f"{v:.2f}x ({g['plain_ms_per_commit']:.2f} -> {g['signed_ms_per_commit']:.2f} ms; "
            f"+{m['added_us_per_commit']:.0f} us of CPU, {m['ratio']:.2f}x on MemoryStore)", "<= 1.10x", v <= 1.10)
    if "encryption" in r:
        e = r["encryption"]
        v = e["ratio"]
        add("encrypted vs plain small commit, CPU (MemoryStore, local key provider)", v,
            f"{v:.2f}x ({e['plain_ms_per_commit'] * 1000:.0f} -> {e['encrypted_ms_per_commit'] * 1000:.0f} us; "
            f"+{e['added_us_per_commit']:.0f} us)", "<= 1.20x", v <= 1.20)
    if "otel" in r:
        o = r["otel"]
        v = o["absent_share"]
        others = "; ".join(f"{name} {m['ratio']:.2f}x" for name, m in o["modes"].items() if name != "absent")
        add("small commit with OpenTelemetry absent: its None checks' share of the commit's CPU (MemoryStore)", v,
            f"{v:.3%} ({o['checks_per_commit']} x {o['check_ns']:.0f} ns of {o['absent_ms_per_commit'] * 1000:.0f} us; "
            f"{others})", "<= 1%", v <= 0.01)
    if "startup" in r:
        st = r["startup"]
        add("import s3log (wall, fresh process, over a bare interpreter)", st["import_ms"],
            f"{st['import_ms']:.0f} ms", "<= 100 ms", st["import_ms"] <= 100)
        add("s3log --help (wall, fresh process)", st["help_ms"], f"{st['help_ms']:.0f} ms", "<= 500 ms",
            st["help_ms"] <= 500)
    if "coldstart" in r:
        # The bound and why: docs/benchmarks.md, "Cold start".
        cs = r["coldstart"]
        ours, base = cs["s3log"], cs["boto3, minimal"]
        for mark, what in (("durable", "first durable commit"), ("exit", "exit")):
            mine, floor = ours[f"{mark}_best_ms"], base[f"{mark}_best_ms"]
            v = mine / floor
            add(f"cold start to {what}: restore {cs['entries']} entries + 1 durable append vs bare boto3 "
                f"GET + conditional PUT (fresh process, best of {ours['runs']})", v,
                f"{v:.2f}x ({mine:.0f} ms vs {floor:.0f} ms; medians {ours[f'{mark}_median_ms']:.0f} vs "
                f"{base[f'{mark}_median_ms']:.0f})", "<= 1.5x", v <= 1.5)
    if "scan_latency" in r:
        # The bounds and why: docs/benchmarks.md, "Scan at realistic latency".
        from bench_scan import PEAK_BOUND_MIB

        sl = r["scan_latency"]
        v = sl["ratio"]
        add(f"scan vs sequential boto3 at {sl['latency_ms']:g} ms latency ({sl['sessions']} sessions x "
            f"{sl['entries'] // sl['sessions']} entries, boto3, parallelism {sl['parallelism']}, chains verified)",
            v, f"{v:.1f}x ({sl['entries_per_s']:,.0f} vs {sl['sequential_entries_per_s']:,.0f} entries/s)",
            ">= 8x", v >= 8)
        v = sl.get("fast_ratio")
        add(f"the same scan over S3Store.fast (obstore) vs sequential boto3 at {sl['latency_ms']:g} ms latency", v,
            f"{v:.1f}x" if v else "", ">= 8x", v is not None and v >= 8)
        v = sl["peak_mib"]
        add(f"scan peak memory at {sl['latency_ms']:g} ms latency (traced Python + Arrow pool, batch_size "
            f"{sl['memory_batch_size']}), against half the sessions", v,
            f"{v:.1f} MiB (half the sessions: {sl['half_peak_mib']:.1f} MiB)",
            f"< {PEAK_BOUND_MIB:.0f} MiB, <= 1.25x half's", v < PEAK_BOUND_MIB and v <= 1.25 * sl["half_peak_mib"])
    return out


def _report(r: dict[str, Any]) -> None:
    print(f"machine: {r['machine']}")
    if "append" in r:
        print(f"\n{'system':<24}{'ms/append':>10}   requests/append")
        for name, s in r["append"].items():
            if "skipped" in s:
                print(f"{name:<24}{'-':>10}   skipped: {s['skipped']}")
                continue
            req = ", ".join(f"{k} {v:.2f}" for k, v in s.get("requests_per_append", {}).items())
            print(f"{name:<24}{s['ms_per_append']:>10.2f}   {req}")
    if "tail" in r:
        t = r["tail"]
        print(f"\ntail bound (boto3, ~1 KB entries, {t['n']} commits each, alternately with a raw PUT of "
              f"{t['raw_ms']:.2f} ms):")
        print(f"{'bound':>8}{'median':>9}{'mean':>8}{'PUTs/commit':>13}{'head bytes':>12}{'restore 30':>12}")
        for name, row in t.items():
            if isinstance(row, dict):
                print(f"{name:>8}{row['median_ratio']:>8.3f}x{row['mean_ratio']:>7.3f}x{row['puts_per_commit']:>13.3f}"
                      f"{row['head_bytes_mean']:>12,.0f}{row['restore_round_trips_30_entries']:>9} RT")
    if "coldstart" in r:
        from bench_coldstart import report

        report(r["coldstart"])
    if "scan_latency" in r:
        from bench_scan import report_latency

        print()
        report_latency(r["scan_latency"])
    if "latency" in r:
        from bench_latency import report as report_model

        report_model(r["latency"])
    print("\ntargets (same run; a shared machine is noisy: compare ratios, not times):")
    for t in r["targets"]:
        print(f"  {mark(t['ok'])} {t['measure']}: {t['shown']} (target {t['target']})")


if __name__ == "__main__":
    main()
