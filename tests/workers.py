"""Worker functions run in separate processes by the concurrency tests."""

from __future__ import annotations

import os
from typing import Any

import s3log


def serverless_turns(endpoint: str, bucket: str, session: str, worker: int, turns: int) -> list[dict[str, Any]]:
    """Each turn: restore the session, append two entries, commit, exit (like a Lambda).

    Returns one record per acknowledged entry: where it landed and under which head version.
    """
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    store = s3log.S3Store(bucket, endpoint_url=endpoint)
    log = s3log.Log(store)
    acked: list[dict[str, Any]] = []
    for turn in range(turns):
        w = log.open(session)
        w.append("user", {"w": worker, "turn": turn, "part": 0})
        w.append("assistant", {"w": worker, "turn": turn, "part": 1})
        result = w.commit()
        for e in result.acked:
            acked.append({"session": result.session_id, "version": result.head.version,
                          "seq": e.seq, "data": e.data})
    log.close()
    return acked


def soak(endpoint: str, bucket: str, kind: str, shared: str, own: str, worker: int, turns: int,
         rate: float) -> dict[str, Any]:
    """A soak worker: every turn commits to its own session (no competitor: it must never
    fork) and to a session shared with the other workers (forks are expected), through a
    store of ``kind`` ("boto3", "aioboto3", "obstore") that fails ``rate`` of requests.

    Returns the acknowledged entries, the forks of the own session and every error a
    commit surfaced (there must be none: transient faults are s3log's to absorb).
    """
    import asyncio

    from s3log.config import LogConfig, RetryPolicy
    from s3log.testing.faults import AsyncFaultyStore, FaultyStore, random_plan

    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    cfg = LogConfig(retry=RetryPolicy(attempts=10, initial=0.005, max_backoff=0.05),
                    tail_per_commit=0, tail_max_bytes=2048)
    plan = random_plan(1000 + worker, rate)
    out: dict[str, Any] = {"acked": [], "false_forks": 0, "errors": []}

    def record(result: Any, own_session: bool) -> None:
        out["acked"].extend({"session": result.session_id, "seq": e.seq, "data": e.data} for e in result.acked)
        if own_session and result.fork is not None:
            out["false_forks"] += 1

    def payload(turn: int, where: str, part: int) -> dict[str, Any]:
        # Big enough that some commits flush a segment (and merge): every write path runs.
        return {"w": worker, "turn": turn, "where": where, "part": part, "pad": "x" * 300}

    if kind == "aioboto3":
        async def run() -> None:
            store = s3log.AsyncS3Store(bucket, endpoint_url=endpoint)
            alog = s3log.AsyncLog(AsyncFaultyStore(store, plan), config=cfg)
            try:
                for turn in range(turns):
                    for sid, mine in ((own, True), (shared, False)):
                        try:
                            w = await alog.open(sid)
                            for part in range(2):
                                w.append("soak", payload(turn, "own" if mine else "shared", part))
                            record(await w.commit(), mine)
                        except s3log.S3LogError as exc:
                            out["errors"].append(f"{type(exc).__name__}: {exc}")
            finally:
                await store.aclose()

        asyncio.run(run())
        return out
    inner = s3log.S3Store.fast(bucket, endpoint_url=endpoint) if kind == "obstore" else \
        s3log.S3Store(bucket, endpoint_url=endpoint)
    log = s3log.Log(FaultyStore(inner, plan), config=cfg)
    for turn in range(turns):
        for sid, mine in ((own, True), (shared, False)):
            try:
                w = log.open(sid)
                for part in range(2):
                    w.append("soak", payload(turn, "own" if mine else "shared", part))
                record(w.commit(), mine)
            except s3log.S3LogError as exc:
                out["errors"].append(f"{type(exc).__name__}: {exc}")
    log.close()
    return out
