"""Benchmark: durable single-writer appends and restore on the embedded local S3.

Prints ms per durable append (one commit each), requests per append by method,
restore time and requests, and group-commit throughput with concurrent async
appenders. Figures, not assertions: this machine is shared and noisy.
"""

from __future__ import annotations

import asyncio
import os
import time

import s3log
from s3log.localserver import LocalS3


def bench_sync(server: LocalS3, n: int = 200) -> None:
    log = s3log.Log(s3log.S3Store(server.create_bucket(), endpoint_url=server.endpoint_url))
    w = log.create()
    log.store.requests.reset()
    t = time.perf_counter()
    for i in range(n):
        w.append("event", {"i": i, "pad": "x" * 1000})
        w.commit()
    dt = time.perf_counter() - t
    req = log.store.requests.snapshot()
    print(f"boto3   durable append: {dt / n * 1000:7.2f} ms  requests/append: "
          + ", ".join(f"{k} {v / n:.2f}" for k, v in req.items() if v))
    log.store.requests.reset()
    t = time.perf_counter()
    view = log.read(w.session_id)
    print(f"boto3   restore {len(view)} entries: {(time.perf_counter() - t) * 1000:7.2f} ms  "
          f"requests: {log.store.requests.snapshot()}")
    log.close()


async def bench_async(server: LocalS3, n: int = 200) -> None:
    store = s3log.AsyncS3Store(server.create_bucket(), endpoint_url=server.endpoint_url)
    alog = s3log.AsyncLog(store)
    w = await alog.create()
    t = time.perf_counter()
    for i in range(n):
        await w.append("event", {"i": i, "pad": "x" * 1000})
    dt = time.perf_counter() - t
    print(f"aioboto3 durable append: {dt / n * 1000:7.2f} ms")
    w2 = await alog.create()
    store.requests.reset()
    t = time.perf_counter()
    await asyncio.gather(*(w2.append("event", {"i": i, "pad": "x" * 1000}) for i in range(n * 5)))
    dt = time.perf_counter() - t
    print(f"aioboto3 {n * 5} concurrent appenders: {n * 5 / dt:9.0f} entries/s "
          f"({store.requests['PUT']} PUTs for {n * 5} entries)")
    await store.aclose()


def bench_cpu(n: int = 100_000) -> None:
    from s3log.chain import PendingEntry, build_chain

    pending = [PendingEntry("event", 1_700_000_000_000, {"i": i, "text": "hello"}) for i in range(n)]
    t = time.perf_counter()
    build_chain(pending, after_seq=-1, after_hash=None)
    print(f"cpu     encode+hash: {n / (time.perf_counter() - t):9.0f} entries/s on one core")


def main() -> None:
    with LocalS3() as server:
        os.environ.update(server.env())
        bench_sync(server)
        asyncio.run(bench_async(server))
    bench_cpu()


if __name__ == "__main__":
    main()
