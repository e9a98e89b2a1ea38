"""Stores under faults over HTTP: cut-short bodies and replies without an ETag are store errors a
read retries, never corruption or a raw exception; an async store whose commit was cancelled
mid-request (a stalled reply) serves a writer on the next event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest

import s3log
from s3log.errors import StoreError, TransientStoreError
from tests.fault_proxy import CutShort, FaultProxy, NoETag, Stall
from tests.test_store_contract import HTTP_STORES, SERVER_STORES, _make, http_target

_ns = itertools.count()


CUTS = [CutShort(), CutShort(reset=True), CutShort(declare_length=False)]

CUT_IDS = ["length-then-close", "length-then-reset", "no-length-then-close"]


def _store(request: pytest.FixtureRequest, kind: str) -> tuple[Any, FaultProxy, list[Callable[[], None]]]:
    """A store of ``kind`` behind a proxy with no plan yet, the proxy, and what closes them."""
    proxy, bucket, server, closing = http_target(request, kind)
    proxy.plan.clear()
    store, closers = _make(kind, bucket, proxy.endpoint_url, server=server)
    return store, proxy, closers + closing


#: Every HTTP store: on moto, and on the servers besides it (marked ``stores``).
EVERY_HTTP_STORE = [*HTTP_STORES, *SERVER_STORES]


@pytest.mark.parametrize("cut", CUTS, ids=CUT_IDS)
@pytest.mark.parametrize("kind", EVERY_HTTP_STORE)
def test_a_get_whose_body_is_cut_short_is_a_transient_error_on_every_store(
    kind: str, cut: CutShort, request: pytest.FixtureRequest
) -> None:
    store, proxy, closers = _store(request, kind)
    try:
        key, body = f"cut{next(_ns)}/obj", bytes(range(256)) * 400
        store.put_if_absent(key, body)
        proxy.plan.add("get", cut)
        with pytest.raises(TransientStoreError):
            store.get(key)
        assert store.get(key).body == body  # the next GET reads it whole
        assert store.requests.snapshot()["GET"] == 2
    finally:
        for close in closers:
            close()


@pytest.mark.parametrize("kind", EVERY_HTTP_STORE)
def test_a_reply_without_an_etag_is_a_store_error_not_a_raw_one_or_the_text_none(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store, proxy, closers = _store(request, kind)
    try:
        key = f"noetag{next(_ns)}/obj"
        proxy.plan.add("put_if_absent", NoETag())
        with pytest.raises(TransientStoreError):  # applied: an unknown outcome to the protocol
            store.put_if_absent(key, b"x")
        proxy.plan.add("get", NoETag())
        with pytest.raises(StoreError) as caught:
            store.get(key)
        assert type(caught.value) is StoreError and caught.value.code == "MissingETag"
        assert store.get(key).body == b"x"
    finally:
        for close in closers:
            close()


@pytest.mark.parametrize("cut", CUTS, ids=CUT_IDS)
@pytest.mark.parametrize("kind", EVERY_HTTP_STORE)
def test_a_read_whose_head_reply_is_cut_short_is_retried_not_reported_corrupt(
    kind: str, cut: CutShort, request: pytest.FixtureRequest
) -> None:
    store, proxy, closers = _store(request, kind)
    try:
        prefix = f"read{next(_ns)}"
        if kind.startswith("async"):
            inner = store.inner
            alog = s3log.AsyncLog(inner, prefix=prefix)

            async def go() -> list[Any]:
                w = await alog.create()
                for i in range(3):
                    w.append("k", {"i": i, "pad": "x" * 2000})
                await w.commit()
                proxy.plan.add("get", cut)
                view = await alog.read(w.session_id)
                return [e.data["i"] for e in view.entries]

            got = store.loop.run_until_complete(go())
        else:
            slog = s3log.Log(store, prefix=prefix)
            w = slog.create()
            for i in range(3):
                w.append("k", {"i": i, "pad": "x" * 2000})
            w.commit()
            proxy.plan.add("get", cut)
            got = [e.data["i"] for e in slog.read(w.session_id).entries]
        assert got == [0, 1, 2]
    finally:
        for close in closers:
            close()


@pytest.mark.parametrize("kind", ["async-s3", "async-obstore",
                                  *(k for k in SERVER_STORES if str(k.values[0]).startswith("async"))])
def test_an_async_store_serves_a_writer_on_the_next_event_loop_after_a_cancelled_commit(
    kind: str, request: pytest.FixtureRequest
) -> None:
    blocking, proxy, closers = _store(request, kind)
    store: Any = blocking.inner
    # The store is closed by the test, on its last loop: only the wrapper's unused loop is left.
    request.addfinalizer(lambda: [close() for close in (blocking.loop.close, *closers[1:])])
    config = s3log.LogConfig(retry=s3log.RetryPolicy(attempts=3, initial=0.01, max_time=5.0))
    prefix = f"loops{next(_ns)}"
    log = s3log.AsyncLog(store, prefix=prefix, config=config)

    async def first() -> s3log.AsyncWriter[Any]:
        w = await log.create()
        await w.append_durable("k", 0)
        proxy.plan.add("put_if_match", Stall(1.0))  # the next head PUT hangs ...
        with pytest.raises(TimeoutError):  # ... its caller gives up, and the loop ends
            await asyncio.wait_for(w.append_durable("k", 1), 0.2)
        return w

    w = asyncio.run(first())  # asyncio.run cancels the shielded commit still in flight

    async def second() -> list[Any]:
        await w.append_durable("k", 2)  # the writer's next use, on a new loop
        got = [e.data for e in (await log.read(w.session_id)).entries]
        await log.aclose()
        return got

    assert asyncio.run(second()) == [0, 1, 2]  # the entry in doubt committed once, no fork
    assert w.forks == []

    async def third() -> list[Any]:  # and once more, after aclose on the previous loop
        got = [e.data for e in (await s3log.AsyncLog(store, prefix=prefix).read(w.session_id)).entries]
        closer = getattr(store, "aclose", None)
        if closer is not None:
            await closer()
        return got

    assert asyncio.run(third()) == [0, 1, 2]
