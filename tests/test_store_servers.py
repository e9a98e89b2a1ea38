"""The stores on servers besides moto: Azurite (AzureStore) and SeaweedFS (S3Store,
ObstoreStore), each started once by the tests on 127.0.0.1 (tests/servers.py); and
GCSStore (not supported) on a GCS emulator, only where S3LOG_TEST_GCS_ENDPOINT names one.

What the contract suite (tests/test_store_contract.py) cannot show request by request:
racing writers lose nothing (threads and processes), the precondition probe passes,
and the simulator's store model (s3log.testing.sim.SimStore) answers every sequence of
requests as the server does, but for the one documented difference: If-Match on a
missing key is a 412 there, as on a stale ETag (docs/stores.md). moto runs beside
them as the reference.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import s3log
from s3log._format.layout import Layout
from s3log._protocol.decide import etags_equal
from s3log.errors import ConditionalDeleteUnsupported, ObjectNotFound, PreconditionFailed, StoreError
from s3log.store.azure import AsyncAzureStore, AzureStore
from s3log.store.gcs import GCSStore
from s3log.testing.sim import SimStore
from tests.helpers import race_writers
from tests.invariants import check_no_loss_no_duplicates
from tests.servers import AZURITE_ACCOUNT, AZURITE_KEY, gcs_emulator

_names = itertools.count()

#: Each kind: the server fixture it needs and whether the server says 412 for If-Match on a missing key.
KINDS = {
    "moto": ("s3log_server", False),
    "azure": ("azurite", True),
    "seaweedfs": ("seaweedfs", True),
    "seaweedfs-obstore": ("seaweedfs", True),
    "gcs": ("gcs_emulator", True),
}
SERVER_KINDS = [pytest.param(k, marks=pytest.mark.stores) for k in KINDS if k != "moto"]
ALL_KINDS = ["moto", *SERVER_KINDS]


def _spec(request: pytest.FixtureRequest, kind: str) -> tuple[str, str, str]:
    """(kind, endpoint, bucket) of a new bucket (container) on ``kind``'s server."""
    server = request.getfixturevalue(KINDS[kind][0])
    if kind == "azure":
        return kind, server.account_url(), server.create_container()
    if kind == "moto":
        return kind, server.endpoint_url, server.create_bucket()
    if kind == "gcs":
        return kind, server.base_url(), server.shared_bucket()
    return kind, server.endpoint_url, server.shared_bucket()


def make_store(spec: tuple[str, str, str]) -> Any:
    """A blocking store for ``spec`` (picklable: the process workers build theirs from it)."""
    kind, endpoint, bucket = spec
    if kind == "azure":
        return AzureStore(bucket, account=AZURITE_ACCOUNT, endpoint=endpoint,
                                config={"account_key": AZURITE_KEY})
    if kind == "seaweedfs-obstore":
        return s3log.S3Store.fast(bucket, endpoint_url=endpoint)
    if kind == "gcs":
        return GCSStore(bucket, endpoint=endpoint, config=gcs_emulator().config())
    return s3log.S3Store(bucket, endpoint_url=endpoint)


def _prefix() -> str:
    return f"servers{os.getpid()}-{next(_names)}"


# ------------------------------------------------------------------------ racing writers


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_sixteen_racing_conditional_puts_have_exactly_one_winner_per_version(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = make_store(_spec(request, kind))
    key = f"{_prefix()}/race/head"
    etag = store.put_if_absent(key, b"v0")
    for round_ in range(8):
        barrier = threading.Barrier(16)
        outcomes: list[tuple[int, object]] = []
        lock = threading.Lock()

        def racer(i: int, expected: str = etag, r: int = round_) -> None:
            barrier.wait()
            try:
                result: object = store.put_if_match(key, f"round {r} writer {i}".encode(), expected)
            except StoreError as exc:
                result = exc
            with lock:
                outcomes.append((i, result))

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [(i, r) for i, r in outcomes if isinstance(r, str)]
        assert len(winners) == 1, f"round {round_}: {len(winners)} winners"
        assert all(isinstance(r, PreconditionFailed) for _, r in outcomes if not isinstance(r, str)), outcomes
        blob = store.get(key)
        assert blob.body == f"round {round_} writer {winners[0][0]}".encode()
        assert etags_equal(blob.etag, str(winners[0][1]))
        etag = blob.etag


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_threads_racing_on_one_session_lose_nothing(kind: str, request: pytest.FixtureRequest) -> None:
    log = s3log.Log(make_store(_spec(request, kind)), prefix=_prefix())
    sid = log.create().session_id
    acked, versions = race_writers(log, sid, writers=4, commits=6)
    assert len(acked) == 24
    assert len(set(versions)) == len(versions), "two commits share a head version"
    check_no_loss_no_duplicates(log, acked)
    log.close()


@pytest.mark.stores
def test_async_writers_racing_on_one_azure_session_lose_nothing(azurite: Any) -> None:
    container = azurite.create_container()

    async def main() -> tuple[list[Any], list[tuple[str, int]]]:
        store = AsyncAzureStore(container, account=AZURITE_ACCOUNT, endpoint=azurite.account_url(),
                                      config={"account_key": AZURITE_KEY})
        alog = s3log.AsyncLog(store, prefix="async")
        sid = (await alog.create(session_id="shared")).session_id
        acked: list[Any] = []
        versions: list[tuple[str, int]] = []

        async def worker(n: int) -> None:
            w = await alog.open(sid)
            for i in range(5):
                w.append("k", {"w": n, "i": i})
                r = await w.commit()
                acked.extend(e.data for e in r.acked)
                versions.append((r.session_id, r.head.version))

        await asyncio.gather(*(worker(n) for n in range(4)))
        return acked, versions

    acked, versions = asyncio.run(main())
    assert len(acked) == 20 and len(set(versions)) == len(versions)
    blocking = AzureStore(container, account=AZURITE_ACCOUNT, endpoint=azurite.account_url(),
                                config={"account_key": AZURITE_KEY})
    check_no_loss_no_duplicates(s3log.Log(blocking, prefix="async"), acked)


def process_turns(spec: tuple[str, str, str], prefix: str, session: str, worker: int, turns: int) -> list[Any]:
    """A process's turns: open the session, append two entries, commit (as a serverless handler)."""
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    log = s3log.Log(make_store(spec), prefix=prefix)
    acked: list[Any] = []
    for turn in range(turns):
        w = log.open(session)
        w.append("user", {"w": worker, "turn": turn, "part": 0})
        w.append("assistant", {"w": worker, "turn": turn, "part": 1})
        acked.extend(e.data for e in w.commit().acked)
    log.close()
    return acked


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_processes_racing_on_one_session_lose_nothing(kind: str, request: pytest.FixtureRequest) -> None:
    spec, prefix = _spec(request, kind), _prefix()
    log = s3log.Log(make_store(spec), prefix=prefix)
    sid = log.create().session_id
    with ProcessPoolExecutor(max_workers=3, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(process_turns, spec, prefix, sid, w, 4) for w in range(3)]
        acked = [d for f in futures for d in f.result()]
    assert len(acked) == 3 * 4 * 2
    check_no_loss_no_duplicates(log, acked)


# ------------------------------------------------------------------------------ the probe


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_the_probe_passes(kind: str, request: pytest.FixtureRequest) -> None:
    store = make_store(_spec(request, kind))
    report = s3log.Log(store, prefix=_prefix()).check_store()
    assert report.complete and report.ok, report
    # obstore sends no conditional DELETE (nothing sent); boto3 sends it, and it is honoured.
    assert report.delete_if_match == ("unsupported" if kind in ("azure", "seaweedfs-obstore", "gcs") else True)


@pytest.mark.stores
def test_the_probe_passes_on_the_async_azure_store(azurite: Any) -> None:
    store = AsyncAzureStore(azurite.create_container(), account=AZURITE_ACCOUNT,
                                  endpoint=azurite.account_url(), config={"account_key": AZURITE_KEY})
    report = asyncio.run(s3log.AsyncLog(store).check_store())
    assert report.complete and report.ok and report.delete_if_match == "unsupported", report


@pytest.mark.stores
def test_the_probe_passes_on_the_async_gcs_store(gcs_emulator: Any) -> None:
    store = gcs_emulator.store(gcs_emulator.shared_bucket(), asynchronous=True)
    report = asyncio.run(s3log.AsyncLog(store, prefix=_prefix()).check_store())
    assert report.complete and report.ok and report.delete_if_match == "unsupported", report


# ------------------------------------------------------------- the simulator's store model


def _apply(store: Any, op: tuple[Any, ...]) -> object:
    """``op`` on ``store``: its result (a body for a GET, the keys for a LIST) or its StoreError."""
    name, *args = op
    try:
        result = getattr(store, name)(*args)
    except StoreError as exc:
        return exc
    if name == "get":
        return result.body
    if name == "list":
        return [o.key for o in result.objects]
    return result


def _same(model: object, real: object, name: str, missing_is_412: bool) -> bool:
    if isinstance(model, StoreError) or isinstance(real, StoreError):
        if (missing_is_412 and name in ("put_if_match", "delete_if_match") and isinstance(model, ObjectNotFound)
                and isinstance(real, PreconditionFailed)):
            return True  # the one documented difference
        return type(model) is type(real)
    if name in ("put_if_absent", "put_if_match"):
        return isinstance(model, str) and isinstance(real, str)
    return model == real


def _random_ops(rng: random.Random, base: str, count: int, etags: Callable[[str], list[int]]) -> Any:
    """Requests on three keys; a conditional one names a version (by number) its key had, or one it never had."""
    for _ in range(count):
        key = f"{base}k{rng.randrange(3)}"
        name = rng.choice(["get", "put_if_absent", "put_if_match", "put_if_match", "delete", "delete_if_match",
                           "list"])
        versions = etags(key)
        version = rng.choice(versions) if versions and rng.random() < 0.8 else -1
        yield name, key, version


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_the_simulators_store_model_answers_as_the_server(kind: str, seed: int, request: pytest.FixtureRequest) -> None:
    """Random requests (gets, creates, If-Match PUTs on current, stale and unknown ETags,
    deletes, conditional deletes, listings) on the model and on the server: the same
    answer each time, the same objects after."""
    real = make_store(_spec(request, kind))
    model = SimStore(lambda: 0, Layout())
    base = f"{_prefix()}/"
    missing_is_412 = KINDS[kind][1]
    # An ETag no version had, in the server's form (a GCS store sends no ETag that is no generation).
    never = '"999999999999999999"' if kind == "gcs" else '"00000000000000000000000000000000"'
    # Per key, every ETag it had, as (model's, server's), by version number.
    history: dict[str, list[tuple[str, str]]] = {}
    rng = random.Random(seed)
    for step, (name, key, version) in enumerate(
            _random_ops(rng, base, 60, lambda k: list(range(len(history.get(k, [])))))):
        body = f"{step}".encode()
        pair = history[key][version] if version >= 0 else ('"00000000000000000000000000000000"', never)
        args = {"get": (key,), "put_if_absent": (key, body), "put_if_match": (key, body),
                "delete": (key,), "delete_if_match": (key,), "list": (base,)}[name]
        model_op = (name, *args, pair[0]) if name in ("put_if_match", "delete_if_match") else (name, *args)
        real_op = (name, *args, pair[1]) if name in ("put_if_match", "delete_if_match") else (name, *args)
        got = _apply(real, real_op)
        if isinstance(got, ConditionalDeleteUnsupported):
            continue  # obstore: nothing sent, the model is not asked either
        want = _apply(model, model_op)
        assert _same(want, got, name, missing_is_412), f"step {step} {real_op}: model {want!r}, server {got!r}"
        if isinstance(want, str) and isinstance(got, str):
            history.setdefault(key, []).append((want, got))
    assert _apply(model, ("list", base)) == _apply(real, ("list", base))
