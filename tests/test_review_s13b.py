"""Regressions from the hostile review of session 13's changes (session 13b).

- ``Log.children`` (and so ``s3log lineage``, ``s3log rm``'s count of forks) took every
  marker under a session whose child has a head for a fork of that session. A marker
  outlives the fork it was written for: ``Log.delete`` of a child leaves its young
  marker to gc (a retried fork may write it again), and gc never collects a marker
  whose child has a head. So a child deleted and its id used again (a root session, as
  a LangGraph thread deleted and then used again; or a fork of another parent) was
  listed as a child of the old parent for ever, and drawn twice in a lineage.
  A child whose head names another parent (or none) is not listed.
- ``Log.compact`` wrote whatever its selector returned, unchecked: a ``ts`` that is not
  an int (or a bool), a kind that is not text or is s3log's own (``s3log.fork``) was
  stored and every read of the session then raised ``CorruptionError`` (the entries it
  held before, retired for gc); a ``ts`` past ``codec.MAX_TS`` (``time.time_ns()``)
  made every scan skip it, the bound ``append`` enforces since this session; data CBOR
  cannot encode, or a map without ``kind``, raised a raw ``CBOREncodeError`` /
  ``KeyError``. What the selector keeps is now checked as ``append`` checks an entry,
  before anything is written.
- ``AsyncS3Store`` kept one client, of the last loop that used it: loops running at
  once in threads (the LangGraph async saver's "appends from two loops at once") took
  it over in turn, so every switch opened a new aioboto3 client (a new connection
  pool) and left the other loop's open, never closed; a thread opening its client
  while another loop took the slot over could return that loop's client. It keeps a
  client per loop now (a closed loop's is dropped), and ``aclose`` closes the
  running loop's.
- The precondition probe's answer, remembered per ``precondition_scope`` since this
  session, took the endpoint from the arguments and the ``AWS_ENDPOINT_URL*``
  variables only, but boto3 also takes it (and the region) from the profile in the
  AWS config file (``endpoint_url``, ``AWS_PROFILE``): a store of the same bucket name
  on another endpoint, chosen by profile, was never probed once one store had passed.
  The boto3 store now takes its scope from the endpoint and region its client resolved;
  the aioboto3 store (whose clients are made later, per loop) adds the profile and
  config file it will read to its scope.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest

import s3log
from s3log.errors import InvalidArgumentError, InvalidEntryError
from s3log.store import aio_s3
from s3log.testing import LocalS3
from tests.fault_proxy import FaultProxy


def _parent(store: s3log.MemoryStore, *sids: str) -> s3log.Log:
    log = s3log.Log(store)
    for sid in sids:
        w = log.create(sid)
        w.append("k", sid)
        w.commit()
    return log


# ------------------------------- a marker that outlived its fork names no child


def test_a_deleted_childs_id_used_again_by_a_root_session_is_not_the_old_parents_child() -> None:
    log = _parent(s3log.MemoryStore(), "p1")
    log.fork("p1", child_id="c1")
    assert log.children("p1") == ["c1"]
    log.delete("c1")  # its young marker under p1 is left to gc
    w = log.create("c1")  # the id used again: a root session
    w.append("k", "new")
    w.commit()
    assert log.children("p1") == []
    report = log.gc(older_than_ms=0)  # gc keeps the marker (its child has a head) ...
    assert report.deleted == []
    assert log.children("p1") == []  # ... and it still names no child of p1
    assert log.lineage("c1")[-1].session == "c1"


def test_a_deleted_childs_id_forked_into_from_another_parent_is_that_parents_child_alone() -> None:
    log = _parent(s3log.MemoryStore(), "p1", "p2")
    log.fork("p1", child_id="c1")
    log.delete("c1")
    assert log.fork("p2", child_id="c1") == "c1"
    assert log.children("p2") == ["c1"]
    assert log.children("p1") == []
    assert [s.session for s in log.lineage("c1")] == ["c1", "p2"]


# ------------------------------------ what a compaction keeps is checked as append does


@pytest.mark.parametrize("bad", [
    {"kind": "summary", "ts": time.time_ns(), "data": 1},  # past MAX_TS: every scan skipped it
    {"kind": "summary", "ts": "yesterday", "data": 1},  # unreadable
    {"kind": "summary", "ts": True, "data": 1},  # unreadable
    {"kind": "summary", "ts": -1, "data": 1},
    {"kind": 5, "ts": 1, "data": 1},  # unreadable
    {"kind": "s3log.fork", "ts": 1, "data": 1},  # unreadable: a fork entry in a root chain
    {"kind": "", "ts": 1, "data": 1},
    {"kind": "k", "ts": 1, "data": object()},  # was a raw CBOREncodeError
], ids=["ts-ns", "ts-text", "ts-bool", "ts-negative", "kind-int", "kind-reserved", "kind-empty", "data"])
def test_a_compaction_keeping_an_entry_append_refuses_is_refused_before_anything_is_written(bad: Any) -> None:
    store = s3log.MemoryStore()
    log = _parent(store, "s1")
    before = {k: store.get(k).body for k in store.all_keys()}
    with pytest.raises(InvalidEntryError, match="session s1"):
        log.compact("s1", lambda history, head: [*history, bad])
    assert {k: store.get(k).body for k in store.all_keys()} == before
    assert [(e.kind, e.data) for e in log.read("s1").entries] == [("k", "s1")]


@pytest.mark.parametrize("kept", [[{"ts": 1, "data": 1}], [["k", 1, 1]], "k", {"kind": "k", "ts": 1}])
def test_a_selector_returning_something_else_than_entry_maps_is_an_argument_error(kept: Any) -> None:
    store = s3log.MemoryStore()
    log = _parent(store, "s1")
    with pytest.raises(InvalidArgumentError, match="select"):
        log.compact("s1", lambda history, head: kept)
    assert [e.data for e in log.read("s1").entries] == ["s1"]


def test_a_compaction_keeping_new_well_formed_entries_reads_and_scans_back() -> None:
    log = _parent(s3log.MemoryStore(), "s1")
    assert log.compact("s1", lambda history, head: [*history, {"kind": "summary", "ts": 5, "data": {"n": (1, 2)}}])
    assert [(e.kind, e.ts, e.data) for e in log.read("s1").entries][1:] == [("summary", 5, {"n": [1, 2]})]
    assert log.compact("s1", lambda history, head: (e for e in history[:1]))  # any iterable
    assert [e.kind for e in log.read("s1").entries] == ["k"]


# --------------------------------- an async store used from loops running at once


def test_an_async_store_used_from_two_running_loops_keeps_one_client_per_loop(
    s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []
    real = aio_s3.open_client

    def counting(*args: Any, **kwargs: Any) -> Any:
        made = real(*args, **kwargs)
        opened.append(made)
        return made

    monkeypatch.setattr(aio_s3, "open_client", counting)
    bucket = s3log_server.create_bucket()
    store = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    loops = [asyncio.new_event_loop() for _ in range(2)]
    threads = [threading.Thread(target=loop.run_forever, daemon=True) for loop in loops]
    for t in threads:
        t.start()

    def on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    try:
        on(loops[0], store.put_if_absent("k", b"v"))
        for _ in range(3):  # each loop in turn, both running all along
            for loop in loops:
                assert (on(loop, store.get("k"))).body == b"v"
        assert len(opened) == 2  # was 7: a client per switch, each left open
        for loop in loops:
            on(loop, store.aclose())
    finally:
        for loop in loops:
            loop.call_soon_threadsafe(loop.stop)
        for t in threads:
            t.join(10)
        for loop in loops:
            loop.close()


# ------------------------------------ the probe's scope is the endpoint the client uses


@pytest.mark.parametrize("kind", ["boto3", "aioboto3"])
def test_a_store_of_another_endpoint_chosen_by_profile_is_probed(
    kind: str, s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # Two profiles, one endpoint each (the server, and a proxy in front of it standing for
    # another S3-compatible service): the same bucket name on both.
    with FaultProxy(s3log_server.host, s3log_server.port) as proxy:
        config = tmp_path / "config"
        config.write_text(f"[profile here]\nendpoint_url = {s3log_server.endpoint_url}\nregion = us-east-1\n"
                          f"[profile there]\nendpoint_url = {proxy.endpoint_url}\nregion = us-east-1\n")
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        bucket = s3log_server.create_bucket()
        cfg = s3log.LogConfig(activity_index=False)

        def probed(profile: str, sid: str) -> bool:
            monkeypatch.setenv("AWS_PROFILE", profile)
            if kind == "boto3":
                store: Any = s3log.S3Store(bucket)
                s3log.Log(store, config=cfg).create(sid)
            else:
                store = s3log.AsyncS3Store(bucket)

                async def go() -> None:
                    await s3log.AsyncLog(store, config=cfg).create(sid)
                    await store.aclose()

                asyncio.run(go())
            return int(store.requests["PUT"]) > 1

        assert probed("here", f"a-{kind}")
        assert not probed("here", f"b-{kind}")  # the same endpoint: remembered
        before = len(proxy.plan.kinds())
        assert probed("there", f"c-{kind}")  # was: not probed, though another endpoint
        assert len(proxy.plan.kinds()) > before  # (the store did use the other endpoint)
