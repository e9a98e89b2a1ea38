"""Benchmark of the analytics scan against a plain sequential boto3 loop.

Generates N sessions x M entries on the embedded local S3, then in the same run times
``s3log.analytics.scan`` (bounded parallelism, chains verified) and a sequential loop
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
from s3log.localserver import LocalS3


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


def generate(store: s3log.S3Store, sessions: int, entries: int) -> None:
    log = s3log.Log(store)
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
    """scripts/latency_proxy.py in a process of its own, in front of ``upstream``."""

    def __init__(self, upstream: str, delay_ms: float) -> None:
        self.upstream = upstream
        self.delay_ms = delay_ms
        self.endpoint_url = ""

    def __enter__(self) -> ProxyProcess:
        script = Path(__file__).with_name("latency_proxy.py")
        self._proc = subprocess.Popen(
            [sys.executable, str(script), "--upstream", self.upstream, "--delay-ms", str(self.delay_ms)],
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


def _scan_peak(store: s3log.S3Store, parallelism: int, batch_size: int) -> tuple[int, float, float]:
    """Rows, peak traced Python MiB and peak Arrow-pool growth MiB of one scan."""
    import pyarrow as pa

    pool = pa.default_memory_pool()
    base_alloc = pool.bytes_allocated()
    base_peak = pool.max_memory() or 0
    tracemalloc.start()
    rows = 0
    for b in analytics.scan(store, parallelism=parallelism, batch_size=batch_size):
        rows += b.num_rows
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # max_memory is the pool's peak over the process's life: only growth past the
    # earlier peak shows, so this runs before any other scan in the process.
    arrow_peak = max((pool.max_memory() or 0) - max(base_peak, base_alloc), 0)
    return rows, peak / 2**20, arrow_peak / 2**20


def scan_latency(latency_ms: float = 30.0, sessions: int = 200, entries: int = 100, parallelism: int = 16,
                 batch_size: int = 8192, runs: int = 1) -> dict[str, Any]:
    """Scan vs the sequential boto3 loop through a proxy adding ``latency_ms`` per request.

    The data is generated on the local S3 directly; both readers go through the proxy.
    ``runs`` > 1 times each reader that many times, alternately, and keeps the best.
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
            # Memory first: the Arrow pool's peak is process-wide, later scans would hide it.
            rows, py_peak, arrow_peak = _scan_peak(store, parallelism, batch_size)
            assert rows == total, (rows, total)
            client = _client(proxy.endpoint_url)
            scan_times, seq_times = [], []
            for _ in range(runs):
                t = time.perf_counter()
                n = sum(b.num_rows for b in analytics.scan(store, parallelism=parallelism, batch_size=batch_size))
                scan_times.append(time.perf_counter() - t)
                assert n == total, (n, total)
                t = time.perf_counter()
                m = sequential(client, bucket)
                seq_times.append(time.perf_counter() - t)
                assert m == total, (m, total)
    scan_s, seq_s = min(scan_times), min(seq_times)
    return {
        "latency_ms": latency_ms, "sessions": sessions, "entries": total, "parallelism": parallelism,
        "batch_size": batch_size, "generate_s": gen_s, "scan_s": scan_s, "sequential_s": seq_s,
        "entries_per_s": total / scan_s, "sequential_entries_per_s": total / seq_s,
        "ratio": seq_s / scan_s, "peak_mib": py_peak + arrow_peak, "peak_python_mib": py_peak,
        "peak_arrow_mib": arrow_peak, "scan_runs_s": scan_times, "sequential_runs_s": seq_times,
    }


def report_latency(r: dict[str, Any]) -> None:
    """Print what :func:`scan_latency` measured."""
    print(f"{r['sessions']} sessions, {r['entries']:,} entries, {r['latency_ms']:g} ms added per request "
          f"(generated in {r['generate_s']:.1f}s)")
    print(f"s3log scan (verified, parallelism {r['parallelism']}): {r['entries_per_s']:,.0f} entries/s "
          f"({r['scan_s']:.2f}s)")
    print(f"sequential boto3 loop (no verification): {r['sequential_entries_per_s']:,.0f} entries/s "
          f"({r['sequential_s']:.2f}s)")
    print(f"speed-up: {r['ratio']:.1f}x; scan peak memory {r['peak_mib']:.1f} MiB "
          f"({r['peak_python_mib']:.1f} traced Python + {r['peak_arrow_mib']:.1f} Arrow pool, "
          f"batch_size {r['batch_size']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=None,
                        help="read through a proxy adding this many ms per request (e.g. 30)")
    parser.add_argument("--runs", type=int, default=1, help="with --latency-ms: timed runs (best kept)")
    args = parser.parse_args()
    if args.latency_ms is not None:
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
