"""Dask on a process cluster: consecutive computes, plain task graphs, one store per worker process."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

import s3log
from s3log import analytics
from s3log.testing import LocalS3

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _populate(log: s3log.Log, sessions: int, entries: int) -> None:
    for s in range(sessions):
        w = log.create(meta={"labels": {"tenant": f"t{s % 2}"}})
        for i in range(entries):
            w.append("tool_call" if i % 3 == 0 else "message", {"s": s, "i": i}, ts=T0 + i * 3_600_000)
        w.commit()


def _worker_state() -> tuple[int, int]:
    from s3log import dask as s3dask

    return s3dask.stores_opened, threading.active_count()


def _plain(value: Any) -> bool:
    if isinstance(value, str | int | float | bool | type(None)):
        return True
    if isinstance(value, tuple | list):
        return all(_plain(v) for v in value)
    return False


def test_the_task_graph_carries_plain_values_only(s3log_server: LocalS3) -> None:
    from s3log.dask import read_entries

    bucket = s3log_server.create_bucket()
    _populate(s3log.Log(s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)), 3, 2)
    df = read_entries(bucket, endpoint_url=s3log_server.endpoint_url, sessions_per_partition=2,
                      since="2026-01-01", kinds=["message"])
    graph = dict(df.__dask_graph__())
    for task in graph.values():  # every task: the partitions and dask's own conversions
        for forbidden in (b"S3Store", b"boto", b"ThreadPoolExecutor", b"SyncDriver", b"s3log.log"):
            assert forbidden not in pickle.dumps(task)
    reads = [t for k, t in graph.items() if k[0].startswith("_entries_partition")]
    assert len(reads) == 2
    for task in reads:
        args = [a.value if hasattr(a, "value") else a for a in task.args]
        kwargs = {k: (v.value if hasattr(v, "value") else v) for k, v in task.kwargs.items()}
        assert all(_plain(a) for a in args) and all(_plain(v) for v in kwargs.values()), (args, kwargs)
    with pytest.raises(ValueError, match="unknown scan option"):
        read_entries(bucket, endpoint_url=s3log_server.endpoint_url, store=object())


def test_two_consecutive_computes_on_a_process_cluster(s3log_server: LocalS3) -> None:
    from concurrent.futures import TimeoutError as FutureTimeout

    from distributed import Client, LocalCluster

    from s3log.dask import read_entries, read_sessions

    bucket = s3log_server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    _populate(s3log.Log(store), 6, 10)
    local = analytics.to_arrow(store).to_pandas()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        df = read_entries(bucket, endpoint_url=s3log_server.endpoint_url, sessions_per_partition=1)
        assert df.npartitions == 6
        try:  # a timeout, not a hung suite, if a compute never ends
            first = client.compute(df).result(timeout=120)
            second = client.compute(df[df.ts > "2026-01-01T05:00"].groupby("kind").seq.count()).result(timeout=120)
            sessions = read_sessions(bucket, endpoint_url=s3log_server.endpoint_url)
            joined = client.compute(
                df.merge(sessions[["session", "labels"]], on="session").groupby("session").seq.count()
            ).result(timeout=120)
        except FutureTimeout:
            pytest.fail("a compute on the process cluster did not finish in 120 s")
        state = client.run(_worker_state)
    assert len(first) == len(local) == 60
    cols = ["session", "seq", "kind", "hash", "data_cbor", "date"]
    a = first.sort_values(["session", "seq"]).reset_index(drop=True)
    b = local.sort_values(["session", "seq"]).reset_index(drop=True)
    assert a[cols].values.tolist() == b[cols].values.tolist()
    assert (a.ts == b.ts).all() and str(a.ts.dtype) == "datetime64[ms, UTC]"
    late = local[local.ts > "2026-01-01T05:00"]
    assert second.to_dict() == late.groupby("kind").seq.count().to_dict()
    assert joined.to_dict() == local.groupby("session").seq.count().to_dict()
    # Each worker process opened one store, however many partitions it read, and its
    # scans left no thread behind (the baseline is the worker's own threads).
    assert {opened for opened, _ in state.values()} <= {1}
    threads = [n for _, n in state.values()]
    assert max(threads) < 16, threads
