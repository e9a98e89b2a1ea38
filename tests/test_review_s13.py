"""Regressions from session 13 (hostile review: stores under faults, gc and retention,
async cancellation, deep and unusual data).

- Data nesting was counted through maps and arrays only. A tag (``CBORTag``) or a set
  (tag 258 around an array) holding more nesting was not looked into, though cbor2's
  decoder counts every tag as a level and stops at 400: a chain of ~400 tags, or tuples
  nested ~400 deep inside a frozenset, was accepted by ``append``, acknowledged by the
  commit, and the session could then not be read (``CorruptionError`` on every read,
  scan and restore; a fork of it failed). Tags and sets now count as levels, within
  the same 256.
- ``analytics`` turned a map key, a label or a tagged value holding an integer of more
  than 4,300 digits into text with ``str()``, which Python refuses: a scan (and
  ``sessions_table``) of a store holding one acknowledged entry (or meta) like that
  raised a raw ``ValueError`` and read nothing.
- ``AsyncS3Store.get`` read the body through the aiohttp response that ``async with
  resp["Body"]`` yields, bypassing aiobotocore's body: a body cut short by a reset
  escaped as a raw ``aiohttp.ClientPayloadError`` (not a store error: never retried),
  and a close-delimited body cut short was returned as the object (no length or
  checksum check), so a read met ``CorruptionError`` for a network fault (a scan
  skipped the session). boto3's ``IncompleteReadError`` / ``FlexibleChecksumError`` (a
  body damaged on the way) were fatal ``StoreError`` instead of transient.
- A reply without an ETag raised a raw ``KeyError`` from the boto3 and aioboto3 stores;
  obstore's GET made it the text ``"None"``, later sent as an ``If-Match``.
- ``AsyncS3Store`` kept the aioboto3 client of the first event loop it ran on. A log
  outlives a loop (``asyncio.run`` per request, docs/integrations.md; decision 0009),
  and so does its store: on the next loop every request failed ("Event loop is
  closed", retried as transient for up to 30 s), so a writer whose commit was
  cancelled by the end of ``asyncio.run`` could never commit again through that store,
  nor could anything be read. It now opens a client per loop, as the driver makes a
  semaphore per loop.
- A fork into an explicit child id (``Log.fork(child_id=...)``: LangGraph's
  ``copy_thread``, the OpenAI Agents session) writes the child's marker under the
  parent before the child's head. When the head never landed (its PUT failed or was
  cancelled), or the child was deleted since (``Log.delete`` leaves its young marker to
  gc), the marker alone made every retry raise ``SessionExists`` for an id with no
  session, until gc collected it (never, where gc does not run or a listing carries no
  ETag). A marker of the same parent naming that child is now replaced (If-Match), and
  the child's create-only head PUT decides who has the id.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest
from cbor2 import CBORTag

import s3log
from s3log import analytics
from s3log.codec import normalize_data
from s3log.errors import InvalidEntryError, SessionExists, StoreError, TransientStoreError
from s3log.faults import FaultyStore
from s3log.testing import LocalS3
from tests.fault_proxy import CutShort, FaultProxy, NoETag, Stall
from tests.test_store_contract import HTTP_STORES, _make


def _tags(n: int) -> Any:
    x: Any = 1
    for _ in range(n):
        x = CBORTag(4000, x)
    return x


def _tuples_in_a_set(n: int) -> Any:
    x: Any = 1
    for _ in range(n):
        x = (x,)
    return frozenset([x])


def _tags_and_lists(n: int) -> Any:
    x: Any = 1
    for i in range(n):
        x = CBORTag(4000, x) if i % 2 else [x]
    return x


@pytest.mark.parametrize("format_version", [1, 2])
@pytest.mark.parametrize("data", [_tags(399), _tuples_in_a_set(395), _tags(300), _tags_and_lists(300)],
                         ids=["tags-399", "set-of-tuples-395", "tags-300", "tags-and-lists-300"])
def test_data_nested_through_tags_or_sets_past_the_bound_is_refused_before_anything_is_written(
    format_version: int, data: Any
) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(format_version=format_version))
    w = log.create()
    before = store.requests.snapshot()
    with pytest.raises(InvalidEntryError, match="nests deeper than 256 levels") as info:
        w.append("deep", data)
    assert info.value.kind == "deep"
    w.append("ok", 1)
    w.commit()  # nothing of the refused entry was queued
    assert store.requests.snapshot()["PUT"] == before["PUT"] + 1
    assert [e.kind for e in log.read(w.session_id).entries] == ["ok"]


@pytest.mark.parametrize("format_version", [1, 2])
@pytest.mark.parametrize("data", [_tags(256), _tuples_in_a_set(254), _tags_and_lists(256),
                                  {"k": [_tags(254)]}],
                         ids=["tags-256", "set-of-tuples-254", "tags-and-lists-256", "map-of-tags-254"])
def test_data_nested_through_tags_or_sets_within_the_bound_reads_back_everywhere(
    format_version: int, data: Any
) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store, config=s3log.LogConfig(format_version=format_version, tail_max_bytes=64))
    w = log.create()
    w.append("deep", data)
    w.commit()
    for _ in range(4):  # the tail flushed and merged into segments
        w.append("pad", "x" * 100)
        w.commit()
    want = normalize_data("deep", data)  # as CBOR gives it back (arrays in tags as tuples)
    assert log.read(w.session_id).entries[0].data == want
    child = log.fork(w.session_id)
    assert log.open(child).state[0]["data"] == want
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = analytics.to_arrow(store, strict=True)
    assert table.num_rows == 5 + 1  # the parent's entries and the child's fork entry


HUGE = 10**5000  # more digits than str() converts (sys.get_int_max_str_digits(), 4300)


@pytest.mark.parametrize("data", [{HUGE: 1}, Fraction(HUGE, 3), CBORTag(5000, {HUGE: 1}), [{-HUGE: "x"}]],
                         ids=["int-key", "fraction", "tag-with-int-key", "negative-int-key"])
def test_a_scan_reads_entries_holding_integers_too_long_for_str(data: Any) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("big", data)
    w.append("small", {"a": 1})
    w.commit()
    table = analytics.to_arrow(store, strict=True)
    assert table.column("kind").to_pylist() == ["big", "small"]
    assert table.column("data_json").to_pylist()[1] == '{"a":1}'
    big = table.column("data_json").to_pylist()[0]
    assert big is None or "0x" in big  # NULL, or the key in hex


@pytest.mark.parametrize("meta", [{"labels": {"n": HUGE}}, {"labels": {"n": {HUGE: 1}}}, {"x": {HUGE: 1}},
                                  {"labels": {"f": Fraction(HUGE, 7)}}],
                         ids=["label-int", "label-int-key", "meta-int-key", "label-fraction"])
def test_sessions_table_reads_meta_holding_integers_too_long_for_str(meta: dict[str, Any]) -> None:
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create(meta=meta)
    w.append("k", 1)
    w.commit()
    table = analytics.sessions_table(store)
    assert table.num_rows == 1
    assert table.column("entries").to_pylist() == [1]


# ------------------------------------------------------------------ stores under faults

_ns = itertools.count()


@pytest.fixture(scope="module")
def proxy(s3log_server: LocalS3) -> Iterator[FaultProxy]:
    with FaultProxy(s3log_server.host, s3log_server.port) as p:
        yield p


@pytest.fixture(scope="module")
def bucket(s3log_server: LocalS3) -> str:
    return s3log_server.create_bucket()
CUTS = [CutShort(), CutShort(reset=True), CutShort(declare_length=False)]
CUT_IDS = ["length-then-close", "length-then-reset", "no-length-then-close"]


def _store(kind: str, bucket: str, proxy: FaultProxy) -> tuple[Any, list[Callable[[], None]]]:
    proxy.plan.clear()
    return _make(kind, bucket, proxy.endpoint_url)


@pytest.mark.parametrize("cut", CUTS, ids=CUT_IDS)
@pytest.mark.parametrize("kind", HTTP_STORES)
def test_a_get_whose_body_is_cut_short_is_a_transient_error_on_every_store(
    kind: str, cut: CutShort, proxy: FaultProxy, bucket: str, s3log_server: LocalS3
) -> None:
    store, closers = _store(kind, bucket, proxy)
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


@pytest.mark.parametrize("kind", HTTP_STORES)
def test_a_reply_without_an_etag_is_a_store_error_not_a_raw_one_or_the_text_none(
    kind: str, proxy: FaultProxy, bucket: str, s3log_server: LocalS3
) -> None:
    store, closers = _store(kind, bucket, proxy)
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
@pytest.mark.parametrize("kind", ["s3", "async-s3", "obstore", "async-obstore"])
def test_a_read_whose_head_reply_is_cut_short_is_retried_not_reported_corrupt(
    kind: str, cut: CutShort, proxy: FaultProxy, bucket: str, s3log_server: LocalS3
) -> None:
    store, closers = _store(kind, bucket, proxy)
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


# ------------------------------------------------------- an async store outlives a loop


@pytest.mark.parametrize("kind", ["async-s3", "async-obstore"])
def test_an_async_store_serves_a_writer_on_the_next_event_loop_after_a_cancelled_commit(
    kind: str, proxy: FaultProxy, bucket: str
) -> None:

    proxy.plan.clear()
    store: Any = (s3log.AsyncS3Store(bucket, endpoint_url=proxy.endpoint_url) if kind == "async-s3"
                  else s3log.AsyncS3Store.fast(bucket, endpoint_url=proxy.endpoint_url))
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


# ---------------------------------------------------------- a ts no scan can hold


@pytest.mark.parametrize("ts", [analytics.TS_RANGE[1] + 1, 1_700_000_000_000_000_000, 2**63 - 1],
                         ids=["first-past-the-range", "time_ns-by-mistake", "max"])
def test_a_ts_a_scan_cannot_hold_is_refused_at_append_not_acknowledged_and_skipped(ts: int) -> None:
    # One such entry made every scan skip the whole session (every other entry with it)
    # as corrupt: acknowledged, and then unreadable to analytics.
    store = s3log.MemoryStore()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    with pytest.raises(InvalidEntryError, match="ts"):
        w.append("k", 2, ts=ts)
    w.commit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert analytics.to_arrow(store, strict=True).num_rows == 1


# ------------------------------------------------------ a fork into an explicit child id


def _parent(store: Any) -> s3log.Log:
    log = s3log.Log(store, config=s3log.LogConfig(retry=s3log.RetryPolicy(attempts=2, initial=0.001)))
    w = log.create("p1")
    w.append("k", 1)
    w.commit()
    return log


@pytest.mark.parametrize("fault", ["503", "timeout-lost"])
def test_a_fork_into_an_explicit_id_whose_head_never_landed_can_be_retried(fault: str) -> None:
    on = [True]
    store = FaultyStore(s3log.MemoryStore(), lambda method, key: fault if on[0] and method == "put_if_absent"
                        and key.endswith("/c1/head") else None)
    on[0] = False
    log = _parent(store)
    on[0] = True
    with pytest.raises(StoreError):
        log.fork("p1", child_id="c1")  # the marker is stored, the head never
    on[0] = False
    assert store.inner.get("s3log/sessions/p1/forks/c1").body
    assert log.children("p1") == []
    assert log.fork("p1", child_id="c1") == "c1"  # was: SessionExists for a session that is not there
    assert [e.kind for e in log.read("c1").entries] == ["s3log.fork"]
    assert log.children("p1") == ["c1"]
    with pytest.raises(SessionExists):  # now it is there
        log.fork("p1", child_id="c1")


def test_a_fork_into_an_explicit_id_cancelled_before_its_head_can_be_retried() -> None:
    class HoldChildHead(s3log.AsyncMemoryStore):
        hold = True

        async def put_if_absent(self, key: str, body: bytes) -> str:
            if self.hold and key.endswith("/c1/head"):
                await asyncio.sleep(3600)
            return await super().put_if_absent(key, body)

    store = HoldChildHead()
    log = s3log.AsyncLog(store)

    async def go() -> list[str]:
        w = await log.create("p1")
        await w.append_durable("k", 1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(log.fork("p1", child_id="c1"), 0.05)
        store.hold = False
        assert await log.fork("p1", child_id="c1") == "c1"
        return [e.kind for e in (await log.read("c1")).entries]

    assert asyncio.run(go()) == ["s3log.fork"]


def test_an_explicit_child_id_freed_by_log_delete_can_be_forked_into_again() -> None:
    log = _parent(s3log.MemoryStore())
    log.fork("p1", child_id="c1")
    log.delete("c1")  # leaves its young marker under p1 to gc
    assert log.fork("p1", child_id="c1") == "c1"
    assert log.children("p1") == ["c1"]
    assert [e.kind for e in log.read("c1").entries] == ["s3log.fork"]


def test_a_key_holding_something_else_than_a_marker_of_that_fork_still_refuses_the_child_id() -> None:
    store = s3log.MemoryStore()
    log = _parent(store)
    for planted in (b"not cbor", s3log.codec.dumps({"v": 1, "child": "c2", "parent": {"session": "p1"}}),
                    s3log.codec.dumps({"v": 1, "child": "c1", "parent": {"session": "p0"}})):
        key = "s3log/sessions/p1/forks/c1"
        store.delete(key)
        store.put_if_absent(key, planted)
        with pytest.raises(SessionExists):
            log.fork("p1", child_id="c1")
        assert store.get(key).body == planted  # left alone
        with pytest.raises(s3log.SessionNotFound):
            log.read("c1")


def test_an_earlier_fork_head_landing_late_keeps_the_id_and_the_retry_is_refused() -> None:
    # The first attempt's head PUT is on its way; the retry replaces the marker, then its
    # own create-only head PUT meets the landed one: SessionExists, and the child is the
    # first attempt's alone.
    late: list[tuple[str, bytes]] = []

    class Late(s3log.MemoryStore):
        def put_if_absent(self, key: str, body: bytes) -> str:
            if key.endswith("/c1/head") and not late:
                late.append((key, body))
                raise TransientStoreError("lost", key=key)
            if key.endswith("/c1/head") and late and late[0][0] == key and len(late) == 1:
                late.append((key, body))
                super().put_if_absent(*late[0])  # the first attempt's PUT lands now
            return super().put_if_absent(key, body)

    store = Late()
    log = s3log.Log(store, config=s3log.LogConfig(retry=s3log.RetryPolicy(attempts=1, initial=0.001)))
    w = log.create("p1")
    w.append("k", 1)
    w.commit()
    with pytest.raises(StoreError):
        log.fork("p1", child_id="c1")
    with pytest.raises(SessionExists):
        log.fork("p1", child_id="c1")
    assert [e.kind for e in log.read("c1").entries] == ["s3log.fork"]
    assert log.children("p1") == ["c1"]


# -------------------------------------- the CLI prints integers past str()'s limit (hex)


def test_cli_json_of_an_integer_past_the_str_limit_is_its_hex_text() -> None:
    # `s3log show` / `tail` (JSON or not) failed with "Exceeds the limit (4300 digits)
    # for integer string conversion" on an acknowledged entry holding such an integer.
    import json

    from s3log.cli.common import dumps, jsonable

    big = 10**5000
    data = {"n": big, big: "key", "l": [big, -big], "small": 2**64, "t": True}
    out = json.loads(dumps(data))
    assert out == {"n": hex(big), hex(big): "key", "l": [hex(big), hex(-big)], "small": 2**64, "t": True}
    assert jsonable(big - big) == 0 and jsonable(False) is False


# --------------------------------------------- gc reports the deletes it could not make


class _RefusesMarkerDeletes(s3log.MemoryStore):
    """A store whose conditional DELETE of a fork marker is refused (access denied: a
    role without s3:GetObject on markers, which S3 requires for an If-Match DELETE)."""

    def delete_if_match(self, key: str, etag: str) -> None:
        if "/forks/" in key:
            self.requests.add("DELETE")
            raise StoreError("AccessDenied: Access Denied", key=key, code="AccessDenied", status=403)
        super().delete_if_match(key, etag)


def test_gc_reports_a_delete_it_could_not_make() -> None:
    # It left such a marker out of `deleted` and said nothing: gc looked done.
    store = _RefusesMarkerDeletes()
    log = s3log.Log(store)
    w = log.create()
    w.append("k", 1)
    w.commit()
    marker = f"{log.layout.forks_dir(w.session_id)}{'0' * 8}-0000-7000-8000-{'0' * 12}"
    store.put_raw(marker, b"", mtime_ms=0)  # dangling: no such child
    report = log.gc(older_than_ms=0)
    assert marker in report.unreferenced and marker not in report.deleted
    assert list(report.failed) == [marker] and "AccessDenied" in report.failed[marker]
    assert store.get(marker).body == b""  # still there
    assert log.gc(older_than_ms=0, dry_run=True).failed == {}


def test_gc_command_fails_naming_the_key_it_could_not_delete(env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from s3log.cli.app import app
    from tests.cli_env import log_of

    log = log_of(env)
    w = log.create()
    w.append("k", 1)
    w.commit()
    marker = f"{log.layout.forks_dir(w.session_id)}{'0' * 8}-0000-7000-8000-{'0' * 12}"
    log.store.client.put_object(Bucket=env["S3LOG_BUCKET"], Key=marker, Body=b"")

    def refuse(self: s3log.S3Store, key: str, etag: str) -> None:
        raise StoreError("AccessDenied: Access Denied", key=key, code="AccessDenied", status=403)

    monkeypatch.setattr(s3log.S3Store, "delete_if_match", refuse)
    # A day on: the marker is past gc's grace (twice the commit deadline at least).
    monkeypatch.setattr(s3log.env.Env, "now_ms", lambda self: self.clock_ms() + 86_400_000)
    result = CliRunner().invoke(app, ["gc", "--older-than", "0s", "--json"], env=env)
    assert result.exit_code == 1, result.output
    assert marker in result.output and "AccessDenied" in result.output
