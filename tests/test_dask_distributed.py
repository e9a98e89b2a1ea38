"""Dask on a process cluster: consecutive computes, plain task graphs, one store per worker process."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

import s3log
from s3log import analytics
from s3log.testing.plugin import LocalS3

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _populate(log: s3log.Log, sessions: int, entries: int) -> None:
    for s in range(sessions):
        w = log.create(meta={"labels": {"tenant": f"t{s % 2}"}})
        for i in range(entries):
            w.append("tool_call" if i % 3 == 0 else "message", {"s": s, "i": i}, ts=T0 + i * 3_600_000)
        w.commit()


def _worker_state() -> tuple[int, int]:
    from s3log.analytics import dask as s3dask

    return s3dask.stores_opened, threading.active_count()


def _plain(value: Any) -> bool:
    if isinstance(value, str | int | float | bool | type(None)):
        return True
    if isinstance(value, tuple | list):
        return all(_plain(v) for v in value)
    return False


def test_the_task_graph_carries_plain_values_only(s3log_server: LocalS3) -> None:
    from s3log.analytics.dask import read_entries

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


@pytest.mark.slow(reason="a process cluster (~15 s); test_a_verifier_travels_to_a_process_cluster runs "
                         "consecutive computes on one, and test_partitions_on_the_local_scheduler_match_the_"
                         "scan_and_make_no_thread_local compares the rows in process")
def test_two_consecutive_computes_on_a_process_cluster(s3log_server: LocalS3) -> None:
    from concurrent.futures import TimeoutError as FutureTimeout

    from distributed import Client, LocalCluster

    from s3log.analytics.dask import read_entries, read_sessions

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


# ------------------------------------------------- why a process cluster froze
#
# The hang was a worker freezing for good (docs/decisions/0026-dask-process-cluster.md):
# distributed's profiler calls sys._current_frames() in every worker every 10 ms; on
# CPython 3.11 a collection can start inside that call while it holds the interpreter's
# thread-list lock, and freeing a threading.local takes that same lock again. The worker
# then stops with the GIL held, its heartbeats stop, and after worker-ttl (5 minutes) the
# scheduler drops it: CommClosedError, the nanny restarts it. What our code controls is
# the other half: the read path must not leave a threading.local in cyclic garbage (the
# old driver left one per store request, in tenacity's Retrying).


class _CountedLocal(threading.local):
    """threading.local that counts its instances (installed in a worker by the test)."""

    created = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> _CountedLocal:
        cls.created += 1
        return super().__new__(cls, *args, **kwargs)


def _count_thread_locals() -> tuple[int, int, int]:
    import gc

    threading.local = _CountedLocal  # type: ignore[misc]  # code that calls threading.local() now counts
    _CountedLocal.created = 0
    gc.collect()
    threshold = gc.get_threshold()
    # Keep what the collector finds instead of freeing it, and collect often, so a cycle
    # is seen while the thread that made it still runs (a thread's exit drops its
    # thread-local values, and the cycle is then freed without the collector).
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.set_threshold(100, 1, 1)
    return threshold


def _thread_locals_made(threshold: tuple[int, int, int]) -> tuple[int, int, int]:
    import gc

    # The class installed by _count_thread_locals (not this module's name for it: a
    # function shipped by value would carry its own copy of the class).
    counted: Any = threading.local
    threading.local = counted.__mro__[1]  # type: ignore[misc]
    gc.collect()
    in_cycles = sum(1 for o in gc.garbage if isinstance(o, threading.local))
    collected = len(gc.garbage)
    gc.set_debug(0)
    gc.garbage.clear()
    gc.set_threshold(*threshold)
    return int(counted.created), in_cycles, collected


@pytest.mark.slow(reason="a process cluster; the same counts are taken in process by "
                         "test_partitions_on_the_local_scheduler_match_the_scan_and_make_no_thread_local")
def test_partitions_make_no_thread_local(s3log_server: LocalS3) -> None:
    from distributed import Client, LocalCluster

    from s3log.analytics.dask import read_entries

    bucket = s3log_server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    log = s3log.Log(store)
    for s in range(12):  # several segments per session: many GETs per partition
        w = log.create()
        for i in range(12):
            w.append("message", {"s": s, "i": i}, ts=T0 + i)
            if i % 4 == 3:
                w.commit()
        w.commit()
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        thresholds = client.run(_count_thread_locals)
        df = read_entries(bucket, endpoint_url=s3log_server.endpoint_url, sessions_per_partition=4)
        for _ in range(2):
            assert len(client.compute(df).result(timeout=120)) == 144
        made = {addr: client.run(_thread_locals_made, threshold, workers=[addr])[addr]
                for addr, threshold in thresholds.items()}
    assert all(collected > 0 for _, _, collected in made.values()), made  # the collector did run
    # The old driver made one threading.local per store request (tenacity's Retrying)
    # and dropped it in a reference cycle: see the comment above.
    assert all(created == 0 and in_cycles == 0 for created, in_cycles, _ in made.values()), made


@pytest.mark.parametrize("shape", ["a commit per session", "segments per session"])
def test_partitions_on_the_local_scheduler_match_the_scan_and_make_no_thread_local(
    s3log_server: LocalS3, shape: str
) -> None:
    # The process cluster's checks, in this process: what the partitions read, twice, is
    # what the local scan reads, and reading makes no threading.local (see the comment
    # above) once this process's first compute has set up what it keeps (its store).
    from s3log.analytics.dask import read_entries

    bucket = s3log_server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    log = s3log.Log(store)
    if shape == "a commit per session":
        _populate(log, 6, 10)
        per_partition, partitions = 1, 6
    else:  # several segments per session: many GETs per partition
        for s in range(6):
            w = log.create()
            for i in range(10):
                w.append("message", {"s": s, "i": i}, ts=T0 + i * 3_600_000)
                if i % 4 == 3:
                    w.commit()
            w.commit()
        per_partition, partitions = 4, 2
    local = analytics.to_arrow(store).to_pandas()
    df = read_entries(bucket, endpoint_url=s3log_server.endpoint_url, sessions_per_partition=per_partition)
    assert df.npartitions == partitions
    first = df.compute(scheduler="sync")
    threshold = _count_thread_locals()
    try:
        again = df.compute(scheduler="sync")
        second = df[df.ts > "2026-01-01T05:00"].groupby("kind").seq.count().compute(scheduler="sync")
    finally:
        created, in_cycles, collected = _thread_locals_made(threshold)
    assert collected > 0 and created == 0 and in_cycles == 0, (created, in_cycles, collected)
    cols = ["session", "seq", "kind", "hash", "data_cbor", "date"]
    a = first.sort_values(["session", "seq"]).reset_index(drop=True)
    b = local.sort_values(["session", "seq"]).reset_index(drop=True)
    assert len(a) == 60 and a[cols].values.tolist() == b[cols].values.tolist()
    assert again.sort_values(["session", "seq"]).reset_index(drop=True)[cols].values.tolist() == a[cols].values.tolist()
    assert (a.ts == b.ts).all() and str(a.ts.dtype) == "datetime64[ms, UTC]"
    assert second.to_dict() == local[local.ts > "2026-01-01T05:00"].groupby("kind").seq.count().to_dict()


# ------------------------------------------------- trusted keys on the workers


def _signed_and_unsigned(server: LocalS3) -> tuple[str, Any, str, str]:
    """A bucket holding one session signed with an Ed25519 key and one unsigned; the
    verifier trusting that key, and the two session ids."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from s3log.signing import Ed25519Signer, PublicKeyVerifier

    bucket = server.create_bucket()
    store = s3log.S3Store(bucket, endpoint_url=server.endpoint_url)
    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    signed = s3log.Log(store, config=s3log.LogConfig(signer=signer)).create()
    for i in range(3):
        signed.append("message", {"i": i}, ts=T0 + i)
    signed.commit()
    unsigned = s3log.Log(store).create()
    for i in range(2):
        unsigned.append("message", {"i": i}, ts=T0 + i)
    unsigned.commit()
    return bucket, PublicKeyVerifier([signer.public_key]), signed.session_id, unsigned.session_id


def test_a_verifier_travels_to_a_process_cluster(s3log_server: LocalS3) -> None:
    from concurrent.futures import TimeoutError as FutureTimeout

    from distributed import Client, LocalCluster

    from s3log.analytics.dask import read_entries, read_sessions
    from s3log.signing import SignatureError

    bucket, verifier, signed, unsigned = _signed_and_unsigned(s3log_server)
    url = s3log_server.endpoint_url
    df = read_entries(bucket, endpoint_url=url, sessions_per_partition=1, verifier=verifier)
    assert df.npartitions == 2
    # The graph holds the verifier as its public key only: no client, no private key.
    for task in dict(df.__dask_graph__()).values():
        for forbidden in (b"S3Store", b"boto", b"PRIVATE", b"Ed25519Signer"):
            assert forbidden not in pickle.dumps(task)
    with pytest.warns(analytics.CorruptSessionWarning, match=f"{unsigned}.*unsigned"):  # in-process scheduler
        local = df.compute(scheduler="sync")
    assert set(local.session) == {signed} and len(local) == 3
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        try:
            rows = client.compute(df).result(timeout=120)
            heads = client.compute(read_sessions(bucket, endpoint_url=url, verifier=verifier)).result(timeout=120)
            unchecked = client.compute(read_entries(bucket, endpoint_url=url)).result(timeout=120)
            strict = read_entries(bucket, endpoint_url=url, sessions_per_partition=1, verifier=verifier, strict=True)
            with pytest.raises(SignatureError, match=f"{unsigned}.*unsigned") as err:
                client.compute(strict).result(timeout=120)
        except FutureTimeout:
            pytest.fail("a compute on the process cluster did not finish in 120 s")
    assert set(rows.session) == {signed} and len(rows) == 3
    assert sorted(rows.seq) == [0, 1, 2]
    assert list(heads.session) == [signed]
    assert len(unchecked) == 5  # without keys both sessions are read, as before
    assert err.value.session == unsigned and err.value.key_id is None


def test_a_verifier_that_cannot_travel_is_refused_at_the_call(s3log_server: LocalS3) -> None:
    import boto3

    from s3log.analytics.dask import read_entries, read_sessions
    from s3log.signing import AnyVerifier, KmsVerifier

    bucket, verifier, _, _ = _signed_and_unsigned(s3log_server)
    url = s3log_server.endpoint_url
    kms = boto3.session.Session().client("kms", endpoint_url=url, region_name="us-east-1")
    key = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"]
    by_kms = KmsVerifier(kms, key)

    class Local:
        """A verifier holding a lock: it cannot be pickled."""

        def __init__(self) -> None:
            self.lock = threading.Lock()

        @property
        def key_ids(self) -> tuple[str, ...]:
            return ("k",)

        def verify(self, payload: bytes, sig: Any) -> None:
            pass

    for bad, says in ((by_kms, "PublicKeyVerifier"), (AnyVerifier(verifier, by_kms), "KmsVerifier"),
                      (Local(), "does not pickle"), (object(), "Verifier"), ("key.pem", "Verifier")):
        for read in (read_entries, read_sessions):
            with pytest.raises(s3log.InvalidArgumentError, match=says) as err:
                read(bucket, endpoint_url=url, verifier=bad)
            assert err.value.argument == "verifier"
