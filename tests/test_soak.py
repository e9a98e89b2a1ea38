"""Soak over HTTP: processes racing with injected faults on every store kind.

The bar: on boto3, aioboto3 and obstore, >= 8 processes with faults lose no
acknowledged entry, duplicate none, break no chain, never fork a session nobody else
writes, and surface no transient error. A size that fits ``make test`` runs here; a
bigger one is marked ``slow``.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import s3log
from s3log.testing.plugin import LocalS3
from tests.invariants import check_no_loss_no_duplicates
from tests.workers import soak

KINDS = ["boto3", "aioboto3", "obstore"]


def _soak(server: LocalS3, kind: str, workers: int, turns: int, rate: float) -> None:
    bucket = server.create_bucket()
    log = s3log.Log(s3log.S3Store(bucket, endpoint_url=server.endpoint_url))
    shared = log.create().session_id
    owns = [log.create().session_id for _ in range(workers)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(soak, server.endpoint_url, bucket, kind, shared, owns[w], w, turns, rate)
                   for w in range(workers)]
        results: list[dict[str, Any]] = [f.result() for f in futures]
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], f"errors surfaced to callers: {errors[:3]}"
    assert sum(r["false_forks"] for r in results) == 0, "a session without a competitor forked"
    acked = [a for r in results for a in r["acked"]]
    assert len(acked) == workers * turns * 2 * 2
    sessions = check_no_loss_no_duplicates(log, [a["data"] for a in acked])  # verifies every chain too
    for a in acked:
        stored = sessions[a["session"]][a["seq"]]
        assert stored.data == a["data"], "an entry is not where its acknowledgement said"
    for own in owns:
        assert log.children(own) == [], "an own session was forked"
    log.close()


@pytest.mark.parametrize("kind", KINDS)
def test_soak_eight_processes_with_faults(s3log_server: LocalS3, kind: str) -> None:
    _soak(s3log_server, kind, workers=8, turns=3, rate=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_soak_long(s3log_server: LocalS3, kind: str) -> None:
    _soak(s3log_server, kind, workers=8, turns=25, rate=0.1)
