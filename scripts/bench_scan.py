"""Benchmark of the analytics scan against a plain sequential boto3 loop.

Generates N sessions x M entries on the embedded local S3, then in the same run times
``s3log.analytics.reading`` (bounded parallelism, chains verified) and a sequential loop
that LISTs, GETs every head and segment with boto3 and decodes them (no verification),
and prints entries/s, sessions/s and the scan's peak traced memory.

``--latency-ms 30`` measures the same two readers through a delaying proxy
(scripts/latency_proxy.py, in a process of its own) that adds that many ms to every
request, as the round trip to a real store does; the data is written to the server
directly. That is where a scan's parallelism pays: on the bare local server both
readers are bound by the server's CPU instead. ``python scripts/bench.py --parts
scan_latency`` runs this mode and records it with its targets.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import cbor2

import s3log
from s3log import analytics
from s3log.testing.localserver import LocalS3


class LocalS3Process(LocalS3):
    """The embedded local S3 started as ``s3log local-s3`` in a subprocess."""

    def start(self) -> LocalS3Process:
        self._proc = subprocess.Popen([sys.executable, "-m", "s3log.cli", "local-s3"], stdout=subprocess.PIPE,
                                      text=True, env={**os.environ, "COLUMNS": "200"})
        assert self._proc.stdout is not None
        self.port = int(self._proc.stdout.readline().strip().rsplit(":", 1)[-1])
        return self

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=30)


#: The writers' tail bound: 8 KiB (the default until decision 0027), so each session of
#: 100 small entries is a head and one segment, two dependent round trips to read (with
#: the 32 KiB default it would be its head alone, one GET). Held strictly
#: (``tail_per_commit=0``): commits of 25 entries (~3 KB) would otherwise keep up to four
#: times that inline (decision 0033), and most sessions would be their head alone again.
TAIL_MAX_BYTES = 8 * 1024


def generate(store: s3log.S3Store, sessions: int, entries: int) -> None:
    log = s3log.Log(store, config=s3log.LogConfig(tail_max_bytes=TAIL_MAX_BYTES, tail_per_commit=0))
    for s in range(sessions):
        w = log.create(meta={"n": s})
        for i in range(entries):
            w.append("tool_call" if i % 4 == 0 else "message", {"s": s, "i": i, "text": "lorem ipsum " * 8})
            if i % 25 == 24:
                w.commit()
        w.commit()
    log.close()


def sequential(client: object, bucket: str) -> int:
    n = 0
    paginator = client.get_paginator("list_objects_v2")  # type: ignore[attr-defined]
    for page in paginator.paginate(Bucket=bucket, Prefix="s3log/sessions/", Delimiter="/"):
        for p in page.get("CommonPrefixes", []):
            head = cbor2.loads(client.get_object(Bucket=bucket, Key=p["Prefix"] + "head")["Body"].read())  # type: ignore[attr-defined]
            if "segments" not in head:
                continue  # the store probe's object (s3log/sessions/_probe/head), not a session
            for key in head["segments"]:
                seg = cbor2.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())  # type: ignore[attr-defined]
                n += len(seg["entries"] if seg["v"] == 1 else seg["data"])
            n += len(head["tail"])
    return n


class ProxyProcess:
    """scripts/latency_proxy.py in a process of its own, in front of ``upstream``
    (``args``: more of its options, such as ``("--model", "express", "--seed", "7")``)."""

    def __init__(self, upstream: str, delay_ms: float, args: tuple[str, ...] = ()) -> None:
        self.upstream = upstream
        self.delay_ms = delay_ms
        self.args = args
        self.endpoint_url = ""

    def __enter__(self) -> ProxyProcess:
        script = Path(__file__).with_name("latency_proxy.py")
        self._proc = subprocess.Popen(
            [sys.executable, str(script), "--upstream", self.upstream, "--delay-ms", str(self.delay_ms), *self.args],
            stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.endpoint_url = self._proc.stdout.readline().strip()
        if not self.endpoint_url.startswith("http://"):
            self._proc.kill()
            raise RuntimeError("the latency proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=30)


def _client(endpoint_url: str) -> Any:
    import boto3

    from s3log.store._s3common import client_config

    # The same pool size as S3Store's client: the sequential loop uses one connection anyway.
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1", config=client_config())


def _scan_peak(store: Any, ids: list[str], parallelism: int, batch_size: int) -> tuple[int, int, float]:
    """Rows and Arrow bytes of a scan of ``ids``, and its peak traced Python MiB."""
    rows = nbytes = 0
    tracemalloc.start()
    for b in analytics.scan(store, ids, parallelism=parallelism, batch_size=batch_size):
        rows += b.num_rows
        nbytes += b.nbytes
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return rows, nbytes, peak / 2**20


def _memory(store: Any, entries: int, parallelism: int, batch_size: int) -> dict[str, Any]:
    """Peak memory of a scan of half the sessions, then of all of them.

    Bounded means: the peak does not grow with the number of sessions (half and all of
    them peak alike), because at most ``parallelism`` sessions are read ahead
    of the one being turned into rows, plus the rows of the batch being filled.
    """
    import pyarrow as pa

    ids = s3log.Log(store).list_session_ids()
    # A first scan of one session: imports, thread and client set-up are not the scan's.
    _scan_peak(store, ids[:1], parallelism, batch_size)
    pool = pa.default_memory_pool()
    base = max(pool.max_memory() or 0, pool.bytes_allocated())
    half = _scan_peak(store, ids[: len(ids) // 2], parallelism, batch_size)
    # The pool keeps one peak for the process: this is the higher of the two scans'.
    arrow_h = max((pool.max_memory() or 0) - base, 0) / 2**20
    rows, nbytes, py = _scan_peak(store, ids, parallelism, batch_size)
    assert rows == entries, (rows, entries)
    arrow = max((pool.max_memory() or 0) - base, 0) / 2**20
    return {
        "peak_mib": py + arrow, "peak_python_mib": py, "peak_arrow_mib": arrow,
        "half_sessions": len(ids) // 2, "half_peak_mib": half[2] + arrow_h,
        "set_arrow_mib": nbytes / 2**20, "memory_batch_size": batch_size, "memory_parallelism": parallelism,
    }


def _fast_store(bucket: str, endpoint_url: str) -> Any:
    try:
        return s3log.S3Store.fast(bucket, endpoint_url=endpoint_url)
    except ImportError:
        return None  # the fast extra (obstore) is not installed


def scan_latency(latency_ms: float = 30.0, sessions: int = 200, entries: int = 100, parallelism: int = 16,
                 runs: int = 2, batch_size: int = 4096) -> dict[str, Any]:
    """``analytics.scan`` vs the sequential boto3 loop through a proxy adding ``latency_ms`` per request.

    The data is generated on the local S3 directly; both readers go through the proxy.
    Scanned with the default store (``S3Store``, boto3) and with ``S3Store.fast``
    (obstore, if installed), each at ``parallelism`` (16, scan's default) and twice
    that; each reader ``runs`` times, alternately, best kept (a shared machine only
    ever makes a run slower). ``ratio`` is the sequential loop's time over the
    boto3-backed scan's at ``parallelism``, ``fast_ratio`` the same with obstore.
    """
    total = sessions * entries
    with LocalS3Process() as server:
        os.environ.update(server.env())
        bucket = server.create_bucket()
        t = time.perf_counter()
        generate(s3log.S3Store(bucket, endpoint_url=server.endpoint_url), sessions, entries)
        gen_s = time.perf_counter() - t
        with ProxyProcess(server.endpoint_url, latency_ms) as proxy:
            store = s3log.S3Store(bucket, endpoint_url=proxy.endpoint_url)
            # Memory first, while the Arrow pool's process-wide peak is still this scan's.
            memory = _memory(store, total, parallelism, batch_size)
            readers: dict[str, tuple[Any, int]] = {}
            for label, st in (("boto3", store), ("obstore", _fast_store(bucket, proxy.endpoint_url))):
                if st is not None:
                    for par in (parallelism, 2 * parallelism):
                        readers[f"{label}, parallelism {par}"] = (st, par)
            client = _client(proxy.endpoint_url)
            times: dict[str, list[float]] = {name: [] for name in readers}
            seq_times: list[float] = []
            for _ in range(runs):
                for name, (st, par) in readers.items():
                    t = time.perf_counter()
                    n = sum(b.num_rows for b in analytics.scan(st, parallelism=par))
                    times[name].append(time.perf_counter() - t)
                    assert n == total, (name, n, total)
                t = time.perf_counter()
                m = sequential(client, bucket)
                seq_times.append(time.perf_counter() - t)
                assert m == total, (m, total)
    seq_s = min(seq_times)
    scans = {name: {"parallelism": readers[name][1], "s": min(ts), "entries_per_s": total / min(ts),
                    "ratio": seq_s / min(ts), "runs_s": ts} for name, ts in times.items()}
    main = scans[f"boto3, parallelism {parallelism}"]
    fast = scans.get(f"obstore, parallelism {parallelism}")
    return {
        "fast_ratio": fast["ratio"] if fast else None,
        "latency_ms": latency_ms, "sessions": sessions, "entries": total, "parallelism": parallelism,
        "generate_s": gen_s, "scan_s": main["s"], "entries_per_s": main["entries_per_s"], "ratio": main["ratio"],
        "sequential_s": seq_s, "sequential_entries_per_s": total / seq_s, "sequential_runs_s": seq_times,
        "scans": scans, **memory,
    }


#: The memory bound the benchmark holds a scan of this set to (docs/benchmarks.md).
PEAK_BOUND_MIB = 32.0


def report_latency(r: dict[str, Any]) -> None:
    """Print what :func:`scan_latency` measured."""
    print(f"{r['sessions']} sessions, {r['entries']:,} entries, {r['latency_ms']:g} ms added per request "
          f"(generated in {r['generate_s']:.1f}s)")
    for name, s in r["scans"].items():
        print(f"s3log scan ({name}, verified): {s['entries_per_s']:,.0f} entries/s ({s['s']:.2f}s), "
              f"{s['ratio']:.1f}x the sequential loop")
    print(f"sequential boto3 loop (no verification): {r['sequential_entries_per_s']:,.0f} entries/s "
          f"({r['sequential_s']:.2f}s)")
    print(f"speed-up (boto3, parallelism {r['parallelism']}): {r['ratio']:.1f}x")
    print(f"scan peak memory {r['peak_mib']:.1f} MiB ({r['peak_python_mib']:.1f} traced Python + "
          f"{r['peak_arrow_mib']:.1f} Arrow pool; batch_size {r['memory_batch_size']}, parallelism "
          f"{r['memory_parallelism']}); over {r['half_sessions']} sessions {r['half_peak_mib']:.1f} MiB; "
          f"the whole set as Arrow: {r['set_arrow_mib']:.1f} MiB")


#: The DuckDB queries :func:`duckdb_memory` runs, one after the other over the same views.
DUCKDB_QUERIES = (
    "SELECT count(*), sum(length(data_json)) FROM entries",
    "SELECT s.labels['tenant'] AS tenant, e.kind, count(*) FROM entries e JOIN sessions s USING (session) GROUP BY ALL",
)


def generate_kib(store: Any, sessions: int, entries: int) -> None:
    """``sessions`` x ``entries`` entries of about 1 KiB each (agent messages), commits of 25."""
    log = s3log.Log(store)
    for s in range(sessions):
        w = log.create(meta={"labels": {"tenant": f"t{s % 4}"}})
        for i in range(entries):
            w.append("message" if i % 4 else "tool_call", {"s": s, "i": i, "text": "lorem ipsum " * 83})
            if i % 25 == 24:
                w.commit()
        w.commit()
    log.close()


def duckdb_memory(sessions: int = 150, entries: int = 100) -> dict[str, Any]:
    """Peak memory (traced Python + Arrow pool growth) of :data:`DUCKDB_QUERIES` over the
    lazy views, and the time of each query: lazy (every query reads the store) and over
    ``snapshot=True`` (read once, into DuckDB tables), against an export to Parquet."""
    import tempfile

    import duckdb
    import pyarrow as pa

    out: dict[str, Any] = {"sessions": sessions, "entries": sessions * entries}
    with LocalS3Process() as server:
        os.environ.update(server.env())
        bucket = server.create_bucket()
        store = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
        generate_kib(store, sessions, entries)
        ids = s3log.Log(store).list_session_ids()
        # Imports, client and DuckDB set-up are not the queries' (one session, both views).
        warm = analytics.duckdb(duckdb.connect(), store, sessions=ids[:1])
        for q in DUCKDB_QUERIES:
            warm.execute(q).fetchall()
        pool = pa.default_memory_pool()
        base = pool.max_memory() or 0
        tracemalloc.start()
        con = analytics.duckdb(duckdb.connect(), store)
        lazy = []
        for q in DUCKDB_QUERIES:
            t = time.perf_counter()
            con.execute(q).fetchall()
            lazy.append(time.perf_counter() - t)
        _, py = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out.update(lazy_s=lazy, peak_python_mib=py / 2**20,
                   peak_arrow_mib=max((pool.max_memory() or 0) - base, 0) / 2**20)
        out["peak_mib"] = out["peak_python_mib"] + out["peak_arrow_mib"]
        t = time.perf_counter()
        snap = analytics.duckdb(duckdb.connect(), store, snapshot=True)
        out["snapshot_s"] = time.perf_counter() - t
        timed = []
        for q in DUCKDB_QUERIES:
            t = time.perf_counter()
            snap.execute(q).fetchall()
            timed.append(time.perf_counter() - t)
        out["snapshot_query_s"] = timed
        with tempfile.TemporaryDirectory() as tmp:
            analytics.to_parquet(store, tmp + "/export")
            pq = analytics.duckdb_parquet(duckdb.connect(), tmp + "/export")
            timed = []
            for q in DUCKDB_QUERIES:
                t = time.perf_counter()
                pq.execute(q).fetchall()
                timed.append(time.perf_counter() - t)
            out["parquet_query_s"] = timed
    return out


def report_duckdb(r: dict[str, Any]) -> None:
    """Print what :func:`duckdb_memory` measured."""
    print(f"{r['sessions']} sessions, {r['entries']:,} entries of ~1 KiB; two queries over the lazy views:")
    print(f"  peak {r['peak_mib']:.1f} MiB ({r['peak_python_mib']:.1f} traced Python + {r['peak_arrow_mib']:.1f} "
          f"Arrow pool); queries {', '.join(f'{s:.2f}s' for s in r['lazy_s'])}")
    print(f"  snapshot=True: read once in {r['snapshot_s']:.2f}s, then queries "
          f"{', '.join(f'{s:.3f}s' for s in r['snapshot_query_s'])}")
    print(f"  exported Parquet (duckdb_parquet): queries {', '.join(f'{s:.3f}s' for s in r['parquet_query_s'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=None,
                        help="read through a proxy adding this many ms per request (e.g. 30)")
    parser.add_argument("--runs", type=int, default=2, help="with --latency-ms: timed runs (best kept)")
    parser.add_argument("--duckdb", action="store_true",
                        help="the DuckDB views' peak memory over 150 sessions x 100 entries of ~1 KiB, and a snapshot")
    args = parser.parse_args()
    if args.duckdb:
        report_duckdb(duckdb_memory())
        return
    if args.latency_ms is not None:
        # The scan is timed at --parallelism and at twice that.
        report_latency(scan_latency(args.latency_ms, args.sessions, args.entries, args.parallelism,
                                    runs=args.runs))
        return
    # The server runs in its own process, so it does not share this one's GIL.
    with LocalS3Process() as server:
        os.environ.update(server.env())
        bucket = server.create_bucket()
        store = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
        t = time.perf_counter()
        generate(store, args.sessions, args.entries)
        print(f"generated {args.sessions} sessions x {args.entries} entries in {time.perf_counter() - t:.1f}s")
        total = args.sessions * args.entries

        t = time.perf_counter()
        n = sum(b.num_rows for b in analytics.scan(store, parallelism=args.parallelism))
        scan_s = time.perf_counter() - t
        assert n == total, (n, total)

        t = time.perf_counter()
        m = sequential(server.client(), bucket)
        seq_s = time.perf_counter() - t
        assert m == total, (m, total)

        tracemalloc.start()
        for _ in analytics.scan(store, parallelism=args.parallelism, batch_size=8192):
            pass
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        # The lazy DuckDB view streams the scan: Python and Arrow memory stay bounded.
        import duckdb
        import pyarrow as pa

        pool = pa.default_memory_pool()
        base = pool.max_memory() or 0
        tracemalloc.start()
        t = time.perf_counter()
        con = analytics.duckdb(duckdb.connect(), store, parallelism=args.parallelism)
        count = con.execute("SELECT count(*) FROM entries").fetchone()
        duck_s = time.perf_counter() - t
        _, duck_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert count == (total,), count
        arrow_peak = (pool.max_memory() or 0) - base

    print(f"s3log scan (verified, parallelism {args.parallelism}): {total / scan_s:,.0f} entries/s, "
          f"{args.sessions / scan_s:,.1f} sessions/s ({scan_s:.2f}s)")
    print(f"sequential boto3 loop (no verification): {total / seq_s:,.0f} entries/s, "
          f"{args.sessions / seq_s:,.1f} sessions/s ({seq_s:.2f}s)")
    print(f"speed-up: {seq_s / scan_s:.2f}x; scan peak traced memory: {peak / 2**20:.1f} MiB")
    print(f"duckdb count(*) over the lazy view: {duck_s:.2f}s, peak traced Python memory "
          f"{duck_peak / 2**20:.1f} MiB, Arrow pool peak growth {max(arrow_peak, 0) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
