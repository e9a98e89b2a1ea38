"""Backends the behavioural suite runs on, behind one blocking facade.

``log`` is parametrized over: MemoryStore; S3Store on moto's in-process mock; S3Store
over HTTP on the local server; AsyncLog on AsyncMemoryStore; AsyncLog on
AsyncS3Store over HTTP. The async ones are driven through :class:`AsyncFacade`, so
each scenario is written once and checks both drivers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

import s3log
from s3log.testing.plugin import LocalS3
from tests.baseline import import_baseline
from tests.fault_proxy import FaultProxy


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

    def keys() -> list[str]:
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            out.extend(o["Key"] for o in page.get("Contents", []))
        return sorted(out)

    return put, get, keys


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
        with mock_aws():
            import boto3

            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="s3log-mock")
            store = s3log.S3Store("s3log-mock", client=client)
            yield Backend(kind, s3log.Log(store), *_client_raw(client, "s3log-mock"))
        return
    server: LocalS3 = request.getfixturevalue("s3log_server")
    bucket = server.create_bucket()
    raw2 = _client_raw(server.client(), bucket)
    if kind == "server":
        yield Backend(kind, s3log.Log(s3log.S3Store(bucket, endpoint_url=server.endpoint_url)), *raw2)
        return
    if kind == "obstore":
        yield Backend(kind, s3log.Log(s3log.S3Store.fast(bucket, endpoint_url=server.endpoint_url)), *raw2)
        return
    if kind == "async-obstore":
        loop = asyncio.new_event_loop()
        fast = s3log.AsyncS3Store.fast(bucket, endpoint_url=server.endpoint_url)
        yield Backend(kind, AsyncFacade(s3log.AsyncLog(fast), loop), *raw2)
        loop.close()
        return
    loop = asyncio.new_event_loop()
    astore = s3log.AsyncS3Store(bucket, endpoint_url=server.endpoint_url)
    yield Backend(kind, AsyncFacade(s3log.AsyncLog(astore), loop), *raw2)
    loop.run_until_complete(astore.aclose())
    loop.close()


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


@pytest.fixture(scope="module")
def proxy(s3log_server: LocalS3) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the local S3 server, for a module's tests."""
    with FaultProxy(s3log_server.host, s3log_server.port) as p:
        yield p


@pytest.fixture(scope="module")
def bucket(s3log_server: LocalS3) -> str:
    """A bucket on the local S3 server shared by a module's tests (each keeps to its own keys)."""
    return s3log_server.create_bucket()
