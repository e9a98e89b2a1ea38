"""Racing writers over the HTTP server: threads, processes, and raw conditional PUTs."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor

import pytest

import s3log
from s3log.errors import PreconditionFailed
from s3log.testing.plugin import LocalS3
from tests.helpers import race_writers, run_threads
from tests.invariants import check_no_loss_no_duplicates
from tests.workers import serverless_turns


def test_sixteen_racing_conditional_puts_have_exactly_one_winner_per_version(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    key = "race/head"
    etag = store.put_if_absent(key, b"v0")
    for round_ in range(25):
        barrier = threading.Barrier(16)
        winners: list[tuple[int, str]] = []
        losers: list[int] = []
        lock = threading.Lock()

        def racer(i: int, expected: str = etag, r: int = round_) -> None:
            barrier.wait()
            try:
                new = store.put_if_match(key, f"round {r} writer {i}".encode(), expected)
            except PreconditionFailed:
                with lock:
                    losers.append(i)
            else:
                with lock:
                    winners.append((i, new))

        run_threads(racer, 16)
        assert len(winners) == 1, f"round {round_}: {len(winners)} winners"
        assert len(losers) == 15
        blob = store.get(key)
        assert blob.body == f"round {round_} writer {winners[0][0]}".encode()
        assert blob.etag == winners[0][1]
        etag = blob.etag


@pytest.mark.parametrize("client", ["boto3", "obstore"])
def test_threads_racing_on_one_session_lose_nothing(s3log_server: LocalS3, client: str) -> None:
    bucket = s3log_server.create_bucket()
    make = s3log.S3Store if client == "boto3" else s3log.S3Store.fast
    log = s3log.Log(make(bucket, endpoint_url=s3log_server.endpoint_url))
    sid = log.create().session_id
    acked, versions = race_writers(log, sid, writers=6, commits=10)
    assert len(acked) == 60
    assert len(set(versions)) == len(versions), "two commits share a head version"
    sessions = check_no_loss_no_duplicates(log, acked)
    assert len(sessions) > 1  # the race really forked
    assert all(log.lineage(f)[-1].session == sid for f in sessions if f != sid)


@pytest.mark.slow(reason="four spawned processes (~7 s); test_threads_racing_on_one_session_lose_nothing races "
                         "writers on one session over HTTP in process, and the simulator races processes")
def test_processes_racing_on_one_session_lose_nothing(s3log_server: LocalS3) -> None:
    bucket = s3log_server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url))
    sid = log.create(meta={"demo": True}).session_id
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=4, mp_context=ctx) as pool:
        futures = [pool.submit(serverless_turns, s3log_server.endpoint_url, bucket, sid, w, 8) for w in range(4)]
        records = [r for f in futures for r in f.result()]
    assert len(records) == 4 * 8 * 2
    commits = {(r["session"], r["version"]) for r in records}
    # Two entries per commit: every commit has its own head version.
    assert len(commits) == len(records) // 2
    sessions = check_no_loss_no_duplicates(log, [r["data"] for r in records])
    for r in records:
        stored = sessions[r["session"]][r["seq"]]
        assert stored.data == r["data"]
    assert len(sessions) > 1
    forks = [s for s in sessions if s != sid]
    assert all(log.lineage(f)[-1].session == sid for f in forks)
