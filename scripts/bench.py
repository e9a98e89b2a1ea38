"""s3log benchmark, side by side with the floor and (when installed) its peers.

Starts the embedded local S3 once and, in one run, measures for each system:

- ms per durable single-writer append (N appends of ~1 KB, one commit each) and HTTP
  requests per append by method;
- restore of a 10,000-entry session: time and requests, against one GET of the same bytes;
- entries/s with 64 concurrent appenders (group commit) against one commit per entry;
- encode + hash rate of small entries on one core.

Peers (the ``bench`` extra): delta-rs (``write_deltalake`` append), SlateDB (``put`` +
durable flush per put), Icechunk (one chunk + ``commit()`` per append); the floor is a
raw single PUT with the same client. Prints a table and writes JSON
(``--json PATH``, default ``bench-results.json``). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import s3log
from s3log.localserver import LocalS3

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
    client = server.client()
    bucket = server.create_bucket()
    body = json.dumps(PAYLOAD).encode()
    return {"ms_per_append": _ms(timed(n, lambda i: client.put_object(Bucket=bucket, Key=f"k{i}", Body=body)))}


def floor_obstore(server: LocalS3, n: int) -> dict[str, Any]:
    import obstore

    store = s3log.S3Store.fast(server.create_bucket(), endpoint_url=server.endpoint_url).client
    body = json.dumps(PAYLOAD).encode()
    return {"ms_per_append": _ms(timed(n, lambda i: obstore.put(store, f"k{i}", body)))}


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


async def _concurrent(store: Any, appenders: int, per: int) -> dict[str, Any]:
    alog = s3log.AsyncLog(store)
    w = await alog.create()
    store.requests.reset()

    async def appender(a: int) -> None:
        for i in range(per):
            await w.append_durable("event", {"a": a, "i": i, **PAYLOAD})

    t = time.perf_counter()
    await asyncio.gather(*(appender(a) for a in range(appenders)))
    dt = time.perf_counter() - t
    return {"entries_per_s": appenders * per / dt, "puts": store.requests["PUT"], "entries": appenders * per}


def restore(server: LocalS3, entries: int, fast: bool) -> dict[str, Any]:
    bucket = server.create_bucket()
    store: Any = (s3log.S3Store.fast if fast else s3log.S3Store)(bucket, endpoint_url=server.endpoint_url)
    log = s3log.Log(store)
    w = log.create()
    for i in range(entries):
        w.append("event", {"i": i, "text": "y" * 100})
        if i % 50 == 49:
            w.commit()
    w.commit()
    head = log.head(w.session_id)
    # The same bytes as one object: the floor of a restore.
    keys = [*head.segments, f"s3log/sessions/{w.session_id}/head"]
    total = sum(len(store.get(k).body) for k in keys)
    store.put_if_absent("floor/blob", b"z" * total)
    store.requests.reset()
    samples = timed(5, lambda i: log.read(w.session_id))
    req = {k: v / 8 for k, v in store.requests.snapshot().items() if v}
    single = timed(5, lambda i: store.get("floor/blob"))
    log.close()
    return {"entries": entries, "ms": _ms(samples), "requests": req, "segments": len(head.segments),
            "bytes": total, "single_get_ms": _ms(single), "ratio_to_single_get": _ms(samples) / _ms(single)}


def cpu(n: int = 100_000) -> dict[str, Any]:
    from s3log.chain import PendingEntry, build_chain

    pending = [PendingEntry("event", 1_700_000_000_000, {"i": i, "text": "hello"}) for i in range(n)]
    best = min(timed(3, lambda i: build_chain(pending, after_seq=-1, after_hash=None)))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=200, help="appends per single-writer system")
    parser.add_argument("--restore-entries", type=int, default=10_000)
    parser.add_argument("--appenders", type=int, default=64)
    parser.add_argument("--json", default="bench-results.json")
    args = parser.parse_args()
    n = args.n
    results: dict[str, Any] = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
        "n": n,
    }
    with LocalS3() as server:
        os.environ.update(server.env())
        ep = server.endpoint_url
        b = server.create_bucket
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
        results["restore"] = {
            "boto3": restore(server, args.restore_entries, fast=False),
            "obstore": run_peer("obstore", lambda: restore(server, args.restore_entries, fast=True)),
        }
        conc = asyncio.run(_concurrent(s3log.AsyncS3Store.fast(b(), endpoint_url=ep), args.appenders, 10))
        single = 1000 / systems["s3log / obstore async"].get("ms_per_append", float("nan"))
        conc["one_commit_per_entry_entries_per_s"] = single
        conc["ratio"] = conc["entries_per_s"] / single
        results["concurrent"] = conc
    results["cpu"] = cpu()
    results["signing"] = signing_overhead()
    _report(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {args.json}")


async def _with_close(store: Any, n: int) -> dict[str, Any]:
    try:
        return await _s3log_async(store, n)
    finally:
        await store.aclose()


def _report(r: dict[str, Any]) -> None:
    print(f"machine: {r['machine']}")
    print(f"\n{'system':<24}{'ms/append':>10}   requests/append")
    for name, s in r["append"].items():
        if "skipped" in s:
            print(f"{name:<24}{'-':>10}   skipped: {s['skipped']}")
            continue
        req = ", ".join(f"{k} {v:.2f}" for k, v in s.get("requests_per_append", {}).items())
        print(f"{name:<24}{s['ms_per_append']:>10.2f}   {req}")
    a = r["append"]

    def ratio(x: str, y: str) -> str:
        if "ms_per_append" not in a.get(x, {}) or "ms_per_append" not in a.get(y, {}):
            return "n/a"
        return f"{a[x]['ms_per_append'] / a[y]['ms_per_append']:.2f}"

    print("\ntargets (same run):")
    print(f"  s3log/boto3 vs raw boto3 PUT: {ratio('s3log / boto3', 'raw PUT (boto3)')}x (target <= 1.2)")
    print(f"  s3log/obstore vs SlateDB: {ratio('s3log / obstore', 'SlateDB')}x (target <= 1.0)")
    for s in ("s3log / boto3", "s3log / aioboto3", "s3log / obstore"):
        print(f"  delta-rs vs {s}: {ratio('delta-rs', s)}x faster (target >= 8)")
    for name, rs in r["restore"].items():
        if "skipped" in rs:
            continue
        print(f"  restore {rs['entries']} entries ({name}): {rs['ms']:.1f} ms, {rs['requests']} per restore, "
              f"{rs['segments']} segments, {rs['ratio_to_single_get']:.2f}x one GET of {rs['bytes']} bytes "
              f"(target <= 21 GETs, <= 3x)")
    c = r["concurrent"]
    print(f"  {c['entries']} entries from 64 concurrent appenders: {c['entries_per_s']:.0f}/s in {c['puts']} PUTs, "
          f"{c['ratio']:.1f}x one-commit-per-entry (target >= 20)")
    print(f"  encode+hash: {r['cpu']['entries_per_s']:.0f} entries/s on one core (target >= 100,000)")
    g = r["signing"]
    print(f"  signing overhead (Ed25519, MemoryStore): {g['plain_ms_per_commit'] * 1000:.0f} -> "
          f"{g['signed_ms_per_commit'] * 1000:.0f} us per small commit, {g['ratio']:.2f}x "
          f"(+{g['added_us_per_commit']:.0f} us; target <= 1.10)")


if __name__ == "__main__":
    main()
