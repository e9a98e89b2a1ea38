"""Benchmark of the analytics scan against a plain sequential boto3 loop.

Generates N sessions x M entries on the embedded local S3, then in the same run times
``s3log.analytics.scan`` (bounded parallelism, chains verified) and a sequential loop
that LISTs, GETs every head and segment with boto3 and decodes them (no verification),
and prints entries/s, sessions/s and the scan's peak traced memory.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import cbor2

import s3log
from s3log import analytics
from s3log.localserver import LocalS3


class LocalS3Process(LocalS3):
    """The embedded local S3 started as ``s3log local-s3`` in a subprocess."""

    def start(self) -> LocalS3Process:
        import subprocess
        import sys

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
            for key in head["segments"]:
                seg = cbor2.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())  # type: ignore[attr-defined]
                n += len(seg["entries"] if seg["v"] == 1 else seg["data"])
            n += len(head["tail"])
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=16)
    args = parser.parse_args()
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
