"""s3log under a model of real object-store latency (``scripts/bench.py --parts latency``).

The local S3 answers in well under a millisecond; S3 does not. Here every request
goes through scripts/latency_proxy.py (a process of its own) which delays it by a
time drawn from a latency model (:data:`latency_proxy.MODELS`: log-normals fitted to
the published bands of S3 Standard and S3 Express One Zone, docs/benchmarks.md "The
latency model"), seeded, so a run draws the same delays again. Measured, side by
side in one run:

- a durable small append against a raw conditional PUT of the same entry, p50 and
  p99, on boto3, aiobotocore and obstore, under each model. The two go through two
  proxies seeded alike, alternately, so the i-th commit's head PUT waits exactly as
  long as the i-th raw PUT (common random numbers: the tails are compared draw for
  draw, not two samples of a tail); a segment PUT beside a head draws from a
  sequence of its own.
- group commit: many appenders, ~200-byte entries, into one session at a fixed
  30 ms per request; entries/s, round trips and PUTs per commit, entries per PUT.
- restore of 10,000 entries: sequential round trips (exact count), its CPU against
  the floor of one SHA-256 and one CBOR decode of the same stored bytes, and its
  wall time under each model.
- encode + hash of small entries against canonical CBOR + SHA-256 of the same map.
- the published acknowledgement latencies of S2 and WarpStream on S3 Express beside
  s3log's under the Express model (:data:`PEERS`).

CPU figures are process CPU time (best of several, after a collection); wall
figures are medians or quantiles of many requests. The machine is shared: ratios
measured alternately are what the targets read.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import cbor2
from bench_scan import ProxyProcess  # scripts/, next to this file
from latency_proxy import MODELS, RESET_PATH

import s3log
from s3log.testing.localserver import LocalS3

#: The small entry of the append rows (~1 KB, as the local rows).
PAYLOAD = {"role": "assistant", "content": "x" * 950}
#: Requests to segment keys draw their delays from a sequence of their own.
SEGMENT_PATTERN = r"/seg/"
#: Published acknowledgement latencies on S3 Express One Zone (docs/benchmarks.md cites them).
PEERS = (
    {"system": "S2 (Express storage class)", "p50_ms": None, "p99_ms": 40.0,
     "note": "acknowledged within 40 ms (durable on a quorum of three zonal buckets)",
     "source": "https://s2.dev/docs/concepts/durability-consistency"},
    {"system": "WarpStream (S3 Express One Zone)", "p50_ms": 105.0, "p99_ms": 169.0,
     "note": "Produce latency, p50 and p99",
     "source": "https://warpstream.com/blog/warpstream-s3-express-one-zone-benchmark-and-total-cost-of-ownership"},
)


def _q(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` in ms (nearest rank: no interpolation past the data)."""
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))] * 1000


def _reset(url: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(url + RESET_PATH, method="POST"), timeout=10).read()


def _proxies(server: LocalS3, model: str, seed: int, count: int = 3) -> list[ProxyProcess]:
    args = ("--model", model, "--seed", str(seed), "--side-pattern", SEGMENT_PATTERN)
    return [ProxyProcess(server.endpoint_url, 0, args) for _ in range(count)]


def _ratios(raw: list[float], ours: list[float], same: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(raw)}
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        out[f"raw_{name}_ms"], out[f"s3log_{name}_ms"] = _q(raw, q), _q(ours, q)
        out[f"same_puts_{name}_ms"] = _q(same, q)
        out[f"{name}_ratio"] = out[f"s3log_{name}_ms"] / out[f"raw_{name}_ms"]
        out[f"{name}_floor_ratio"] = out[f"same_puts_{name}_ms"] / out[f"raw_{name}_ms"]
    return out


def _recording(store: Any) -> list[tuple[bool, int]]:
    """Make ``store`` note each PUT it sends: (to a segment key, body bytes)."""
    sent: list[tuple[bool, int]] = []
    for name in ("put_if_absent", "put_if_match"):
        original = getattr(store, name)

        def call(key: str, body: bytes, *args: Any, _original: Any = original) -> Any:
            sent.append(("/seg/" in key, len(body)))
            return _original(key, body, *args)
        setattr(store, name, call)
    return sent


def _recording_async(store: Any) -> list[tuple[bool, int]]:
    sent: list[tuple[bool, int]] = []
    for name in ("put_if_absent", "put_if_match"):
        original = getattr(store, name)

        async def call(key: str, body: bytes, *args: Any, _original: Any = original) -> Any:
            sent.append(("/seg/" in key, len(body)))
            return await _original(key, body, *args)
        setattr(store, name, call)
    return sent


def _paired_sync(server: LocalS3, model: str, n: int, seed: int, fast: bool) -> dict[str, Any]:
    """Alternately: a raw conditional PUT of the entry, s3log's durable append of it, and
    the same PUTs that append sent (sizes and parallelism), raw: the floor of its requests.
    Three proxies seeded alike: the i-th of each waits as long (segments aside)."""
    from concurrent.futures import ThreadPoolExecutor

    bucket = server.create_bucket()
    body = json.dumps(PAYLOAD).encode()
    with contextlib.ExitStack() as stack:
        raw_url, our_url, same_url = (stack.enter_context(p).endpoint_url for p in _proxies(server, model, seed))
        if fast:
            import obstore

            clients = [s3log.S3Store.fast(bucket, endpoint_url=u).client for u in (raw_url, same_url)]

            def put(c: int, key: str, data: bytes) -> None:
                obstore.put(clients[c], key, data, mode="create")
            store: Any = s3log.S3Store.fast(bucket, endpoint_url=our_url)
        else:
            clients = [s3log.S3Store(bucket, endpoint_url=u).client for u in (raw_url, same_url)]

            def put(c: int, key: str, data: bytes) -> None:
                clients[c].put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            store = s3log.S3Store(bucket, endpoint_url=our_url)
        sent = _recording(store)
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=4))

        def same_puts(i: int, puts: list[tuple[bool, int]]) -> None:
            futures = [pool.submit(put, 1, f"same/{'seg/' if seg else ''}{i}-{k}", b"s" * size)
                       for k, (seg, size) in enumerate(puts[1:])]
            seg, size = puts[0]
            put(1, f"same/{'seg/' if seg else ''}{i}", b"h" * size)
            for f in futures:
                f.result()

        log = s3log.Log(store)
        w = log.create()
        for i in range(3):  # warm every connection
            put(0, f"raw/w{i}", body)
            sent.clear()
            w.append("event", PAYLOAD)
            w.commit()
            same_puts(-1 - i, sent)
        for url in (raw_url, our_url, same_url):
            _reset(url)
        raw: list[float] = []
        ours: list[float] = []
        same: list[float] = []
        for i in range(n):
            t = time.perf_counter()
            put(0, f"raw/{i}", body)
            t1 = time.perf_counter()
            sent.clear()
            w.append("event", PAYLOAD)
            w.commit()
            t2 = time.perf_counter()
            same_puts(i, sorted(sent))  # the head's PUT first: it draws from the main sequence
            raw.append(t1 - t)
            ours.append(t2 - t1)
            same.append(time.perf_counter() - t2)
        log.close()
    return _ratios(raw, ours, same)


def _paired_aio(server: LocalS3, model: str, n: int, seed: int) -> dict[str, Any]:
    """:func:`_paired_sync` on aiobotocore (AsyncLog, ``append_durable``)."""
    bucket = server.create_bucket()
    body = json.dumps(PAYLOAD).encode()

    async def run(raw_url: str, our_url: str, same_url: str) -> tuple[list[float], list[float], list[float]]:
        raw_stores = [s3log.AsyncS3Store(bucket, endpoint_url=u) for u in (raw_url, same_url)]
        clients = [await st._c() for st in raw_stores]  # the aiobotocore clients the stores use

        async def put(c: int, key: str, data: bytes) -> None:
            await clients[c].put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")

        async def same_puts(i: int, puts: list[tuple[bool, int]]) -> None:
            await asyncio.gather(*(put(1, f"same/{'seg/' if seg else ''}{i}-{k}", b"s" * size)
                                   for k, (seg, size) in enumerate(puts)))

        store = s3log.AsyncS3Store(bucket, endpoint_url=our_url)
        sent = _recording_async(store)
        alog = s3log.AsyncLog(store)
        w = await alog.create()
        for i in range(3):
            await put(0, f"raw/w{i}", body)
            sent.clear()
            await w.append_durable("event", PAYLOAD)
            await same_puts(-1 - i, sorted(sent))
        for url in (raw_url, our_url, same_url):
            await asyncio.to_thread(_reset, url)
        raw: list[float] = []
        ours: list[float] = []
        same: list[float] = []
        for i in range(n):
            t = time.perf_counter()
            await put(0, f"raw/{i}", body)
            t1 = time.perf_counter()
            sent.clear()
            await w.append_durable("event", PAYLOAD)
            t2 = time.perf_counter()
            await same_puts(i, sorted(sent))
            raw.append(t1 - t)
            ours.append(t2 - t1)
            same.append(time.perf_counter() - t2)
        await alog.aclose()
        for st in raw_stores:
            await st.aclose()
        return raw, ours, same

    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(p).endpoint_url for p in _proxies(server, model, seed)]
        raw, ours, same = asyncio.run(run(*urls))
    return _ratios(raw, ours, same)


def append_under_models(server: LocalS3, n: int, seed: int, rounds: dict[str, int]) -> dict[str, Any]:
    """p50 and p99 of a durable small append and of a raw conditional PUT of the same
    entry, per model and store (:func:`_paired_sync`, :func:`_paired_aio`).

    ``rounds[model]`` rounds of ``n`` each (seeds ``seed``, ``seed + 1``...), the stores
    taking turns; each figure is the median of its rounds', so one stretch of a loaded
    machine does not decide a tail (the rounds' ratios are kept beside it).
    """
    out: dict[str, Any] = {}
    for model in ("express", "standard"):
        runs: dict[str, list[dict[str, Any]]] = {"boto3": [], "aiobotocore": [], "obstore": []}
        for r in range(rounds[model]):
            runs["boto3"].append(_paired_sync(server, model, n, seed + r, fast=False))
            runs["aiobotocore"].append(_paired_aio(server, model, n, seed + r))
            runs["obstore"].append(_paired_sync(server, model, n, seed + r, fast=True))
        out[model] = {store: {**{k: statistics.median(x[k] for x in rs) for k in rs[0]},
                              "rounds": [{"p50_ratio": x["p50_ratio"], "p99_ratio": x["p99_ratio"]} for x in rs]}
                      for store, rs in runs.items()}
    return out


class _RoundTrips:
    """Counts a store's round trips: a round trip starts when a request goes out with
    none in flight (requests in flight together, as a head and its segment, are one)."""

    def __init__(self, store: Any, names: tuple[str, ...]) -> None:
        self.trips = 0
        self.calls: dict[str, int] = {}
        self._active = 0
        self._lock = threading.Lock()
        for name in names:
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _enter(self, name: str) -> None:
        with self._lock:
            if self._active == 0:
                self.trips += 1
            self._active += 1
            self.calls[name] = self.calls.get(name, 0) + 1

    def _exit(self) -> None:
        with self._lock:
            self._active -= 1

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        if asyncio.iscoroutinefunction(original):
            async def acall(*args: Any, **kwargs: Any) -> Any:
                self._enter(name)
                try:
                    return await original(*args, **kwargs)
                finally:
                    self._exit()
            return acall

        def call(*args: Any, **kwargs: Any) -> Any:
            self._enter(name)
            try:
                return original(*args, **kwargs)
            finally:
                self._exit()
        return call


async def _group(store: Any, appenders: int, per: int) -> dict[str, Any]:
    alog = s3log.AsyncLog(store)
    w = await alog.create()
    await w.append_durable("warm", 0)
    counter = _RoundTrips(store, ("put_if_absent", "put_if_match", "get"))

    async def appender(a: int) -> None:
        for i in range(per):
            # ~200 bytes stored: the record's keys, seq, ts and prev around this data.
            await w.append_durable("event", {"a": a, "i": i, "text": "y" * 100})

    t = time.perf_counter()
    await asyncio.gather(*(appender(a) for a in range(appenders)))
    dt = time.perf_counter() - t
    trips, calls = counter.trips, dict(counter.calls)  # before the head is read back
    head = await alog.head(w.session_id)
    record = len(head.tail[-1].raw) if head.tail else 0
    await alog.aclose()
    commits = calls.get("put_if_match", 0)  # one head PUT per commit
    puts = commits + calls.get("put_if_absent", 0)
    entries = appenders * per
    return {"entries": entries, "appenders": appenders, "entries_per_s": entries / dt, "commits": commits,
            "puts": puts, "round_trips": trips, "round_trips_per_commit": trips / max(commits, 1),
            "entries_per_commit": entries / max(commits, 1), "entries_per_put": entries / max(puts, 1),
            "record_bytes": record, "s": dt}


def group_commit_at(server: LocalS3, delay_ms: float, appenders: int, per: int, rounds: int = 2) -> dict[str, Any]:
    """:func:`_group` through a proxy adding ``delay_ms`` per request (obstore, async);
    the best of ``rounds``."""
    with ProxyProcess(server.endpoint_url, delay_ms) as proxy:
        runs = [asyncio.run(_group(s3log.AsyncS3Store.fast(server.create_bucket(), endpoint_url=proxy.endpoint_url),
                                   appenders, per)) for _ in range(rounds)]
    best = max(runs, key=lambda r: r["entries_per_s"])
    return {**best, "latency_ms": delay_ms, "runs_entries_per_s": [r["entries_per_s"] for r in runs]}


def _best_cpu(reps: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def _read_trips(log: s3log.Log, sid: str) -> int:
    """Sequential round trips of a restore, counted exactly: every op the read procedure
    yields is one (a parallel batch is one)."""
    from s3log._drive.drivers import step
    from s3log._protocol.ops import Sleep

    trips = 0

    def recorded(proc: Any) -> Any:
        nonlocal trips
        value: Any = None
        error: BaseException | None = None
        while True:
            op, result = step(proc, value, error)
            if op is None:
                return result
            trips += not isinstance(op, Sleep)
            try:
                value, error = (yield op), None
            except BaseException as exc:  # the store's error, into the procedure
                value, error = None, exc

    log._run(recorded(log._core.read(sid)))
    return trips


def restore_under_models(server: LocalS3, entries: int, n: int, seed: int) -> dict[str, Any]:
    """A restore of ``entries``: its sequential round trips, its CPU (from a MemoryStore
    holding the same objects) against one SHA-256 and one CBOR decode of those bytes,
    and its wall time under each model against two raw sequential round trips of the
    same objects (the head, then its segments in parallel) plus that CPU."""
    from concurrent.futures import ThreadPoolExecutor

    mem = s3log.MemoryStore()
    mlog = s3log.Log(mem)
    from bench import fill_session  # scripts/, next to this file

    sid = fill_session(mlog, entries)
    head = mlog.head(sid)
    keys = [mlog.layout.head(sid), *head.segments]
    bodies = [mem.get(k).body for k in keys]
    trips = _read_trips(mlog, sid)
    sha = hashlib.sha256
    floor = _best_cpu(7, lambda: [(sha(b).digest(), cbor2.loads(b)) for b in bodies])
    loads = cbor2.loads

    def nested(body: bytes) -> list[Any]:
        # An entry's data is stored as its own CBOR item (a segment's "data" column, a
        # head's "tail" records), so that its hash is checked before it is decoded:
        # getting the values means decoding those items too.
        obj = loads(body)
        return [loads(x) for x in obj.get("data", obj.get("tail", []))]
    full = _best_cpu(7, lambda: [(sha(b).digest(), nested(b)) for b in bodies])
    records = [e.raw for e in mlog.read(sid).entries]
    per_entry = _best_cpu(7, lambda: [sha(r).digest() for r in records])
    cpu = _best_cpu(7, lambda: mlog.read(sid))
    out: dict[str, Any] = {"entries": entries, "objects": len(keys), "bytes": sum(map(len, bodies)),
                           "round_trips": trips, "cpu_ms": cpu * 1000, "floor_ms": floor * 1000,
                           "cpu_ratio": cpu / floor, "sha256_per_entry_ms": per_entry * 1000,
                           "nested_floor_ms": full * 1000}
    bucket = server.create_bucket()
    direct = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
    for k, body in zip(keys, bodies, strict=True):
        direct.put_if_absent(k, body)
    for model in ("express", "standard"):
        with ProxyProcess(server.endpoint_url, 0, ("--model", model, "--seed", str(seed))) as proxy:
            store = s3log.S3Store(bucket, endpoint_url=proxy.endpoint_url)
            log = s3log.Log(store)
            ours: list[float] = []
            raw: list[float] = []
            with ThreadPoolExecutor(max_workers=log.config.max_parallel) as pool:
                for i in range(-1, n):
                    t = time.perf_counter()
                    log.read(sid)
                    t1 = time.perf_counter()
                    store.get(keys[0])
                    list(pool.map(store.get, keys[1:]))
                    if i >= 0:
                        ours.append(t1 - t)
                        raw.append(time.perf_counter() - t1)
            log.close()
        ms, raw_ms = statistics.median(ours) * 1000, statistics.median(raw) * 1000
        out[model] = {"ms": ms, "two_round_trips_ms": raw_ms, "bound_ms": raw_ms + cpu * 1000,
                      "ratio_to_bound": ms / (raw_ms + cpu * 1000), "n": n}
    mlog.close()
    return out


def encode_hash(n: int = 50_000, rounds: int = 5) -> dict[str, Any]:
    """Encode + hash of small entries as ``append`` and ``commit`` do it (the data
    checked and encoded, the record laid out, SHA-256, the Entry), against canonical
    CBOR of each entry's map ``{seq, prev, kind, ts, data}`` + SHA-256 (the same hash,
    computed the least costly way), in CPU time, alternately, best of ``rounds``."""
    from s3log._format.chain import PendingEntry, build_chain
    from s3log._format.entries import normalize_data_cbor

    items = [("event", 1_700_000_000_000 + i, {"i": i, "text": "hello"}) for i in range(n)]

    def ours() -> bytes | None:
        pending = []
        for kind, ts, data in items:
            value, encoded = normalize_data_cbor(kind, data)
            pending.append(PendingEntry(kind, ts, value, encoded))
        return build_chain(pending, after_seq=-1, after_hash=None)[-1].hash

    def floor() -> bytes | None:
        prev, sha, dumps = None, hashlib.sha256, cbor2.dumps
        for seq, (kind, ts, data) in enumerate(items):
            prev = sha(dumps({"seq": seq, "prev": prev, "kind": kind, "ts": ts, "data": data}, canonical=True)).digest()
        return prev

    if ours() != floor():
        raise AssertionError("encode + hash and its floor disagree on the chain's last hash")
    a: list[float] = []
    f: list[float] = []
    for _ in range(rounds):
        a.append(_best_cpu(1, ours))
        f.append(_best_cpu(1, floor))
    return {"entries": n, "us_per_entry": min(a) / n * 1e6, "floor_us_per_entry": min(f) / n * 1e6,
            "ratio": min(a) / min(f)}


def latency(server: LocalS3, *, n: int, restore_n: int, entries: int, appenders: int, per: int,
            seed: int, rounds: dict[str, int]) -> dict[str, Any]:
    """Every measure of this module, in one run."""
    return {
        "seed": seed,
        "models": {k: {"name": m.name, "p50_ms": m.p50_ms, "p99_ms": m.p99_ms} for k, m in MODELS.items()},
        "encode_hash": encode_hash(),
        "restore": restore_under_models(server, entries, restore_n, seed),
        "append": append_under_models(server, n, seed, rounds),
        "group": group_commit_at(server, 30.0, appenders, per),
    }


def targets(lat: dict[str, Any], add: Callable[[str, float | None, str, str, bool | None], None]) -> None:
    """The latency section's targets, through ``add(measure, value, shown, bound, ok)``."""
    for model, stores in lat.get("append", {}).items():
        mname = lat["models"][model]["name"]
        for store, r in stores.items():
            for q, bound in (("p50", 1.1), ("p99", 1.2)):
                v = r[f"{q}_ratio"]
                each = ", ".join(f"{x[f'{q}_ratio']:.2f}" for x in r["rounds"])
                add(f"durable small append vs a raw conditional PUT of the same entry, {q}, {mname} model, {store} "
                    f"(alternately, {r['n']:.0f} each, median of {len(r['rounds'])} rounds: {each})", v,
                    f"{v:.3f}x ({r[f's3log_{q}_ms']:.1f} vs {r[f'raw_{q}_ms']:.1f} ms; the same PUTs as s3log's, "
                    f"raw: {r[f'same_puts_{q}_ms']:.1f} ms, {r[f'{q}_floor_ratio']:.3f}x)", f"<= {bound}x", v <= bound)
    g = lat.get("group")
    if g:
        v = g["entries_per_s"]
        add(f"group commit, {g['appenders']} appenders x ~{g['record_bytes']}-byte entries into one session, "
            f"{g['latency_ms']:g} ms per request (obstore, async)", v,
            f"{v:,.0f} durable entries/s ({g['commits']} commits, {g['entries_per_commit']:.0f} entries per "
            f"commit, {g['entries_per_put']:.0f} per PUT)", ">= 10,000/s", v >= 10_000)
        v = g["round_trips_per_commit"]
        add("group commit: round trips per commit (counted)", v,
            f"{v:.3f} ({g['round_trips']} round trips, {g['puts']} PUTs for {g['commits']} commits)", "1", v <= 1.0)
    r = lat.get("restore")
    if r:
        add(f"restore {r['entries']:,} entries: sequential round trips (counted)", r["round_trips"],
            f"{r['round_trips']} ({r['objects']} objects, {r['bytes']:,} bytes)", "<= 2", r["round_trips"] <= 2)
        v = r["cpu_ratio"]
        verifying = r["nested_floor_ms"] + r["sha256_per_entry_ms"]
        add(f"restore {r['entries']:,} entries: CPU vs one SHA-256 + one CBOR decode of the same stored bytes", v,
            f"{v:.1f}x ({r['cpu_ms']:.1f} vs {r['floor_ms']:.1f} ms; with each entry's data item decoded too "
            f"{r['nested_floor_ms']:.1f} ms, and a SHA-256 of each record to verify it, "
            f"{r['sha256_per_entry_ms']:.1f} ms: that floor {verifying / r['floor_ms']:.1f}x)", "<= 2x", v <= 2)
        for model in ("express", "standard"):
            m = r.get(model)
            if m:
                add(f"restore {r['entries']:,} entries, {lat['models'][model]['name']} model: wall vs two raw "
                    f"sequential round trips of the same objects + its CPU", m["ratio_to_bound"],
                    f"{m['ratio_to_bound']:.2f}x ({m['ms']:.0f} vs {m['two_round_trips_ms']:.0f} + "
                    f"{r['cpu_ms']:.0f} ms)", "informational", None)
    e = lat.get("encode_hash")
    if e:
        v = e["ratio"]
        add("encode + hash of small entries (append's checks and encoding, record, SHA-256) vs canonical CBOR "
            "+ SHA-256 of the same maps (CPU, alternately)", v,
            f"{v:.2f}x ({e['us_per_entry']:.2f} vs {e['floor_us_per_entry']:.2f} us per entry)", "<= 2.5x", v <= 2.5)


def peers_table(lat: dict[str, Any]) -> list[str]:
    """The Markdown rows of published acknowledgement latencies on S3 Express beside
    s3log's measured under the Express model."""
    rows = ["| system | p50 | p99 | what | source |", "|---|---|---|---|---|"]
    for p in PEERS:
        p50 = f"{p['p50_ms']:.0f} ms" if p["p50_ms"] else "-"
        rows.append(f"| {p['system']} | {p50} | ≤ {p['p99_ms']:.0f} ms | {p['note']} | [published]({p['source']}) |"
                    if p["p50_ms"] is None else
                    f"| {p['system']} | {p50} | {p['p99_ms']:.0f} ms | {p['note']} | [published]({p['source']}) |")
    m = lat["models"]["express"]
    for store, r in lat.get("append", {}).get("express", {}).items():
        rows.append(f"| s3log / {store} (Express model: {m['p50_ms']:g}/{m['p99_ms']:g} ms per request) | "
                    f"{r['s3log_p50_ms']:.1f} ms | {r['s3log_p99_ms']:.1f} ms | durable append of one ~1 KB entry, "
                    f"{r['n']:.0f} appends | measured (raw PUT {r['raw_p50_ms']:.1f} / {r['raw_p99_ms']:.1f} ms) |")
    g = lat.get("group")
    if g:
        rows.append(f"| s3log group commit ({g['latency_ms']:g} ms per request) | | | {g['entries_per_s']:,.0f} "
                    f"durable entries/s, {g['entries_per_commit']:.0f} entries per commit | measured |")
    return rows


def report(lat: dict[str, Any]) -> None:
    """Print the section's table."""
    print(f"\nlatency model (seed {lat['seed']}):")
    for k, m in lat["models"].items():
        print(f"  {k}: {m['name']}, log-normal, p50 {m['p50_ms']:g} ms, p99 {m['p99_ms']:g} ms per request")
    print("\ndurable small append (ms; 'same': s3log's own PUTs sent raw):")
    print(f"{'model':<10}{'store':<13}{'raw p50':>9}{'s3log':>7}{'same':>7}{'ratio':>7}{'raw p99':>9}{'s3log':>7}"
          f"{'same':>7}{'ratio':>7}")
    for model, stores in lat.get("append", {}).items():
        for store, r in stores.items():
            print(f"{model:<10}{store:<13}{r['raw_p50_ms']:>9.1f}{r['s3log_p50_ms']:>7.1f}{r['same_puts_p50_ms']:>7.1f}"
                  f"{r['p50_ratio']:>7.3f}{r['raw_p99_ms']:>9.1f}{r['s3log_p99_ms']:>7.1f}{r['same_puts_p99_ms']:>7.1f}"
                  f"{r['p99_ratio']:>7.3f}")
    print("\nacknowledgement latency on S3 Express, published and measured:")
    for row in peers_table(lat):
        print("  " + row)
