"""Stores keep working in a process forked after they sent requests.

multiprocessing's ``fork`` start method (Linux's default before 3.14), gunicorn
``--preload`` and process pools hand a child the parent's store. Its client does not
survive: obstore's Rust runtime threads stay in the parent (every request in the child
waited for ever, even through a client built in the child), urllib3's pooled sockets
would be shared by both processes, and the log's thread pool had no threads left (a
blocking log's first parallel step waited for ever, on every store). Each child runs
in a process of its own; a join with a timeout turns a hang into a failure of its test.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import pytest

import s3log
from s3log.errors import StoreForkedError
from s3log.testing.plugin import LocalS3

KINDS = ["obstore", "async-obstore", "boto3", "aioboto3"]
#: Seconds a child may take; far more than committing three entries needs.
JOIN_TIMEOUT = 90
FORK = multiprocessing.get_context("fork")


def _log(kind: str, bucket: str, endpoint: str) -> Any:
    if kind == "boto3":
        return s3log.Log(s3log.S3Store(bucket, endpoint_url=endpoint))
    if kind == "obstore":
        return s3log.Log(s3log.S3Store.fast(bucket, endpoint_url=endpoint))
    if kind == "aioboto3":
        return s3log.AsyncLog(s3log.AsyncS3Store(bucket, endpoint_url=endpoint))
    return s3log.AsyncLog(s3log.AsyncS3Store.fast(bucket, endpoint_url=endpoint))


def _work(log: Any, sid: str) -> dict[str, int]:
    """Create ``sid`` and commit three entries one by one; the requests that took."""
    log.store.requests.reset()
    w = log.create(sid)
    for i in range(3):
        w.append("step", {"i": i})
        w.commit()
    return log.store.requests.snapshot()  # type: ignore[no-any-return]


async def _awork(log: Any, sid: str, *, close: bool = False) -> dict[str, int]:
    log.store.requests.reset()
    w = await log.create(sid)
    for i in range(3):
        w.append("step", {"i": i})
        await w.commit()
    counted: dict[str, int] = log.store.requests.snapshot()
    if close and hasattr(log.store, "aclose"):
        await log.store.aclose()
    return counted


def _in_child(log: Any, sid: str, conn: Connection) -> None:
    if isinstance(log, s3log.AsyncLog):
        conn.send(asyncio.run(_awork(log, sid, close=True)))  # a loop of the child's own
    else:
        conn.send(_work(log, sid))


def _run_children(target: Any, args: list[tuple[Any, ...]]) -> list[Any]:
    """Start one forked child per ``args`` (each gets a pipe's end last); what each sent."""
    pipes, children = [], []
    for a in args:
        mine, theirs = FORK.Pipe(duplex=False)
        child = FORK.Process(target=target, args=(*a, theirs))
        child.start()
        theirs.close()
        pipes.append(mine)
        children.append(child)
    hung = []
    deadline = time.monotonic() + JOIN_TIMEOUT  # one wait for all of them
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            hung.append(child.pid)
            child.kill()
            child.join()
    assert not hung, f"forked children {hung} did not finish in {JOIN_TIMEOUT}s"
    assert [c.exitcode for c in children] == [0] * len(children)
    return [p.recv() for p in pipes]


@pytest.fixture
def parent_log(request: pytest.FixtureRequest, s3log_server: LocalS3) -> Iterator[tuple[Any, Any]]:
    """A log of the kind asked for on a fresh bucket, and how to run its calls in the parent."""
    kind = request.param
    log = _log(kind, s3log_server.create_bucket(), s3log_server.endpoint_url)
    if isinstance(log, s3log.Log):
        yield log, lambda f, *a: f(log, *a)
        log.close()
        return
    loop = asyncio.new_event_loop()
    yield log, lambda f, *a: loop.run_until_complete({_work: _awork}[f](log, *a))
    if hasattr(log.store, "aclose"):
        loop.run_until_complete(log.store.aclose())
    loop.close()


@pytest.mark.parametrize("parent_log", KINDS, indirect=True)
def test_forked_children_commit_through_the_parents_store(parent_log: tuple[Any, Any]) -> None:
    log, run = parent_log
    run(_work, "warm-up")  # the first use probes the store: the next counts are the steady ones
    in_parent = run(_work, "parent")

    counted = _run_children(_in_child, [(log, "child-1"), (log, "child-2")])

    assert counted == [in_parent, in_parent]  # every request counted once, none extra
    reader = s3log.Log(s3log.S3Store(log.store.bucket, endpoint_url=os.environ["AWS_ENDPOINT_URL"]))
    for sid in ("parent", "child-1", "child-2"):
        assert [e.data for e in reader.read(sid).entries] == [{"i": 0}, {"i": 1}, {"i": 2}]


def _given_client(kind: str, bucket: str, endpoint: str, loop: asyncio.AbstractEventLoop,
                  stack: contextlib.AsyncExitStack) -> Any:
    if kind == "boto3":
        import boto3

        return s3log.S3Store(bucket, client=boto3.session.Session().client("s3", endpoint_url=endpoint))
    if kind == "aioboto3":
        import aioboto3

        client = loop.run_until_complete(stack.enter_async_context(
            aioboto3.Session().client("s3", endpoint_url=endpoint)))
        return s3log.AsyncS3Store(bucket, client=client)
    from s3log.store._obstore_common import make_client

    client = make_client(bucket, endpoint, None, timeout=timedelta(seconds=30))
    return (s3log.S3Store.fast if kind == "obstore" else s3log.AsyncS3Store.fast)(bucket, client=client)


def _call(store: Any, method: str, *args: Any) -> Any:
    result = getattr(store, method)(*args)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def _refused_in_child(store: Any, conn: Connection) -> None:
    try:
        _call(store, "put_if_absent", "child", b"x")
    except StoreForkedError as exc:
        conn.send(("refused", str(exc), store.requests.total))
    else:
        conn.send(("sent", "", store.requests.total))


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_given_and_used_before_the_fork_is_refused_in_the_child_naming_the_fork(
    kind: str, s3log_server: LocalS3
) -> None:
    """A client the caller built cannot be rebuilt: the child's first request raises at
    once, before anything is sent or counted, instead of hanging or sharing sockets."""
    bucket = s3log_server.create_bucket()
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    store = _given_client(kind, bucket, s3log_server.endpoint_url, loop, stack)
    result = store.put_if_absent("parent", b"p")
    if asyncio.iscoroutine(result):
        loop.run_until_complete(result)
    store.requests.reset()

    [(outcome, message, counted)] = _run_children(_refused_in_child, [(store,)])

    assert (outcome, counted) == ("refused", 0)
    assert "forked this process" in message and "spawn" in message
    assert sorted(o["Key"] for o in s3log_server.client().list_objects_v2(Bucket=bucket)["Contents"]) == ["parent"]
    loop.run_until_complete(stack.aclose())
    loop.close()


@pytest.mark.parametrize("kind", ["boto3", "aioboto3"])
def test_a_client_given_but_not_used_before_the_fork_serves_the_child(kind: str, s3log_server: LocalS3) -> None:
    """gunicorn ``--preload``: the app builds its store at import and forks workers
    before any request; each worker is the first to send through the client."""
    bucket = s3log_server.create_bucket()
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    store = _given_client(kind, bucket, s3log_server.endpoint_url, loop, stack)

    [(outcome, _, counted)] = _run_children(_refused_in_child, [(store,)])

    assert (outcome, counted) == ("sent", 1)
    loop.run_until_complete(stack.aclose())
    loop.close()


def _client_in_child(store: Any, conn: Connection) -> None:
    store.get("parent")
    conn.send(id(store.client))


def test_a_boto3_store_sends_from_a_child_through_a_client_of_its_own(s3log_server: LocalS3) -> None:
    """urllib3's pool is the parent's: sharing its keep-alive sockets, either process
    could read the reply to the other's request (a conditional PUT's, say)."""
    store = s3log.S3Store(s3log_server.create_bucket(), endpoint_url=s3log_server.endpoint_url)
    store.put_if_absent("parent", b"p")
    parents = store.client  # held, so the child's copy of it is never collected (its id never reused)

    [in_child] = _run_children(_client_in_child, [(store,)])

    assert in_child != id(parents) and store.client is parents
