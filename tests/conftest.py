"""Backends the behavioural suite runs on, behind one blocking facade.

``log`` is parametrized over: MemoryStore; S3Store on moto's in-process mock; S3Store
over HTTP on the local server; AsyncLog on AsyncMemoryStore; AsyncLog on
AsyncS3Store over HTTP. The async ones are driven through :class:`AsyncFacade`, so
each scenario is written once and checks both drivers.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

import s3log
from s3log.testing.localserver import make_moto_atomic
from s3log.testing.plugin import LocalS3
from tests.baseline import import_baseline
from tests.fault_proxy import FaultProxy

#: The test files that take longest, longest first (seconds in one run of make test on
#: an idle two-core machine). make test hands each worker one file at a time (--dist
#: loadfile): handed out first, none of them is left running on one worker after the
#: other has run out of files. The other files follow, most tests first.
LONGEST_FILES = [
    "test_extras.py",  # 51: an interpreter per extra, and per library it may lack
    "test_cli_output.py",  # 46: the command line as processes
    "test_sim.py",  # 25
    "test_independent_reader.py",  # 21: node per tampered copy
    "test_cli.py",  # 19: the demo's worker processes
    "test_signing.py",  # 18
    "test_langgraph.py",  # 14: LangGraph's conformance suite
    "test_soak.py",  # 14
    "test_listing_scale.py",  # 14: a million sessions, three times
    "test_store_contract.py",  # 14
    "test_export_overwrite.py",  # 9
    "test_dask_distributed.py",  # 8: process clusters
    "test_lazy_tail_equivalence.py",  # 8
    "test_protocol.py",  # 7
    "test_analytics_docs.py",  # 7
    "test_agent_compaction.py",  # 7
]


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist would order the files by their number of tests, not by the list above.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FILES` first, in its order, then the others by their
    number of tests; the tests of a file keep their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    tests = collections.Counter(item.path for item in items)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests[item.path], str(item.path)))


class AsyncWriterFacade:
    """An AsyncWriter behind the blocking Writer interface."""

    def __init__(self, facade: AsyncFacade, writer: Any) -> None:
        self._f = facade
        self._w = writer

    def append(self, kind: str, data: Any = None, **kw: Any) -> int:
        return int(self._w.append(kind, data, **kw))

    def commit(self) -> Any:
        return self._f.run(self._w.commit())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)


class AsyncFacade:
    """An AsyncLog behind the blocking Log interface (one event loop per test)."""

    def __init__(self, alog: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._alog = alog
        self._loop = loop
        self.store = alog.store

    def run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def create(self, *a: Any, **kw: Any) -> AsyncWriterFacade:
        return AsyncWriterFacade(self, self.run(self._alog.create(*a, **kw)))

    def open(self, *a: Any, **kw: Any) -> AsyncWriterFacade:
        return AsyncWriterFacade(self, self.run(self._alog.open(*a, **kw)))

    def list_sessions(self, **kw: Any) -> list[Any]:
        async def collect() -> list[Any]:
            return [x async for x in self._alog.list_sessions(**kw)]

        return self.run(collect())

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._alog, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self.run(attr(*a, **kw))


@dataclass
class Backend:
    """A log under test plus raw access to its objects (to plant corruption)."""

    name: str
    log: Any
    put_raw: Callable[[str, bytes], None]
    get_raw: Callable[[str], bytes]
    list_keys: Callable[[], Any]

    @property
    def requests(self) -> s3log.store.RequestCounter:
        return self.log.store.requests  # type: ignore[no-any-return]


BACKENDS = ["memory", "mock_aws", "server", "async-memory", "async-server", "obstore", "async-obstore"]


def _client_raw(client: Any, bucket: str) -> tuple[Any, Any, Any]:
    def put(key: str, body: bytes) -> None:
        client.put_object(Bucket=bucket, Key=key, Body=body)

    def get(key: str) -> bytes:
        return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def keys(prefix: str = "") -> list[str]:
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    return put, get, keys


@pytest.fixture(scope="session")
def s3log_server(s3log_server: LocalS3) -> LocalS3:
    """The plugin's local S3 server, handing out one boto3 client to every caller.

    A new client costs about 0.1 s of CPU (a session and the S3 model); the suite asks for
    one per bucket and per raw look at a bucket. boto3 clients are thread-safe.
    """
    client = s3log_server.client()
    s3log_server.client = lambda: client  # type: ignore[method-assign]
    return s3log_server


class _HttpBackends:
    """One bucket and one store per HTTP backend kind for the whole run; each test gets a
    log under a prefix of its own (the bucket's precondition probe and the clients are paid
    once, not per test). The async kinds run on one event loop, where their client lives."""

    def __init__(self, server: LocalS3) -> None:
        self.server = server
        self.bucket = server.create_bucket()
        self.raw = _client_raw(server.client(), self.bucket)
        self.loop = asyncio.new_event_loop()
        self._stores: dict[str, Any] = {}
        self._prefixes = itertools.count()

    def store(self, kind: str) -> Any:
        if kind not in self._stores:
            url, bucket = self.server.endpoint_url, self.bucket
            self._stores[kind] = {
                "server": lambda: s3log.S3Store(bucket, endpoint_url=url),
                "obstore": lambda: s3log.S3Store.fast(bucket, endpoint_url=url),
                "async-obstore": lambda: s3log.AsyncS3Store.fast(bucket, endpoint_url=url),
                "async-server": lambda: s3log.AsyncS3Store(bucket, endpoint_url=url),
            }[kind]()
        store = self._stores[kind]
        store.requests.reset()
        return store

    def backend(self, kind: str) -> Backend:
        # The mock_aws backend resets moto's state, the server's buckets included, on leaving.
        client = self.server.client()
        try:
            client.head_bucket(Bucket=self.bucket)
        except client.exceptions.ClientError:
            client.create_bucket(Bucket=self.bucket)
        prefix = f"t{next(self._prefixes)}"
        store = self.store(kind)
        if kind.startswith("async-"):
            log: Any = AsyncFacade(s3log.AsyncLog(store, prefix=prefix), self.loop)
        else:
            log = s3log.Log(store, prefix=prefix)
        put, get, keys = self.raw
        return Backend(kind, log, put, get, lambda: keys(prefix + "/"))

    def close(self) -> None:
        for store in self._stores.values():
            aclose = getattr(store, "aclose", None)
            if aclose is not None:
                self.loop.run_until_complete(aclose())
        self.loop.close()


@pytest.fixture(scope="session")
def http_backends(s3log_server: LocalS3) -> Iterator[_HttpBackends]:
    """The HTTP backends' shared bucket, stores and event loop (see :class:`_HttpBackends`)."""
    shared = _HttpBackends(s3log_server)
    yield shared
    shared.close()


_MOCK_CLIENT: list[Any] = []


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    kind = request.param
    if kind in ("memory", "async-memory"):
        mem = s3log.MemoryStore()
        raw = (mem.put_raw, lambda k: mem.get(k).body, mem.all_keys)
        if kind == "memory":
            log: Any = s3log.Log(mem)
            yield Backend(kind, log, *raw)
        else:
            loop = asyncio.new_event_loop()
            yield Backend(kind, AsyncFacade(s3log.AsyncLog(s3log.AsyncMemoryStore(mem)), loop), *raw)
            loop.close()
        return
    if kind == "mock_aws":
        from moto import mock_aws

        # Once s3log_server has run, the environment points boto3 at it; mock_aws only
        # intercepts AWS's own endpoints, so this backend must not inherit that.
        mp: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        mp.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        # moto's conditional PUTs are atomic only once patched (S3's are): unpatched, the
        # precondition probe's racing PUTs may both win, and it refuses the store. The
        # local server patches it; a process that never started one must too.
        make_moto_atomic()
        with mock_aws():
            import boto3

            # One client for the run (building one costs about 0.1 s of CPU): moto answers
            # it while mock_aws is active, with the state mock_aws resets on leaving.
            if not _MOCK_CLIENT:
                _MOCK_CLIENT.append(boto3.client("s3", region_name="us-east-1"))
            client = _MOCK_CLIENT[0]
            client.create_bucket(Bucket="s3log-mock")
            store = s3log.S3Store("s3log-mock", client=client)
            yield Backend(kind, s3log.Log(store), *_client_raw(client, "s3log-mock"))
        return
    shared: _HttpBackends = request.getfixturevalue("http_backends")
    yield shared.backend(kind)


@pytest.fixture
def env(s3log_server: LocalS3) -> dict[str, str]:
    """The command line's environment: a new bucket on the local S3 server, prefix ``s3log``
    (a log on it: :func:`tests.cli_env.log_of`)."""
    bucket = s3log_server.create_bucket()
    return {**s3log_server.env(), "S3LOG_BUCKET": bucket, "S3LOG_PREFIX": "s3log"}


@pytest.fixture(scope="session")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The s3log package of an earlier build (tests/baseline.py), for differential tests."""
    return import_baseline(tmp_path_factory)


@pytest.fixture(scope="session")
def azurite() -> Iterator[Any]:
    """Azurite's blob service on 127.0.0.1 for the session (tests/servers.py), or a skip."""
    from tests.servers import start_azurite

    server = start_azurite()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_emulator() -> Any:
    """The GCS emulator S3LOG_TEST_GCS_ENDPOINT names (tests/servers.py), or a skip."""
    from tests.servers import gcs_emulator

    return gcs_emulator()


@pytest.fixture(scope="session")
def seaweedfs(s3log_server: LocalS3) -> Iterator[Any]:
    """SeaweedFS's S3 gateway on 127.0.0.1 for the session (tests/servers.py), or a skip.
    Its stores sign with the sandbox's credentials (s3log_server's): SeaweedFS, given
    no identities, accepts any."""
    from tests.servers import start_seaweedfs

    server = start_seaweedfs()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(s3log_server: LocalS3) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the local S3 server, for a module's tests."""
    with FaultProxy(s3log_server.host, s3log_server.port) as p:
        yield p


@pytest.fixture(scope="module")
def bucket(s3log_server: LocalS3) -> str:
    """A bucket on the local S3 server shared by a module's tests (each keeps to its own keys)."""
    return s3log_server.create_bucket()
