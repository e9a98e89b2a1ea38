"""One contract every store honours, sync and async, in memory and over HTTP.

Each test is written once and runs on: MemoryStore, AsyncMemoryStore, S3Store (boto3),
AsyncS3Store (aioboto3), ObstoreStore and AsyncObstoreStore (obstore) on moto; AzureStore
and AsyncAzureStore on Azurite; S3Store, AsyncS3Store and ObstoreStore on SeaweedFS
(the last two servers: marked ``stores``, run by ``make test-stores``; tests/servers.py);
GCSStore and AsyncGCSStore (not supported) only on a GCS emulator named by
``S3LOG_TEST_GCS_ENDPOINT``, skipped without one (docs/stores.md).
Async stores are driven through :class:`Blocking`, one event loop per store. The HTTP
stores talk to their server through :class:`tests.fault_proxy.FaultProxy`, which counts
the HTTP requests really sent (so request counts are checked against the wire) and,
in the fault tests, answers requests with 409 / 412 / 404 / 5xx, resets, landed-then-
lost replies and stalls, to check each store maps them to the same s3log error.

docs/stores.md describes the contract; run this file against a new store by adding it
to :func:`_make`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

import s3log
from s3log._protocol.decide import etags_equal
from s3log._protocol.ops import Blob, ListPage
from s3log.errors import (
    ConditionalDeleteUnsupported,
    ConditionalRequestConflict,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    TransientStoreError,
)
from s3log.testing.faults import AsyncFaultyStore, Fault, FaultyStore
from s3log.testing.plugin import LocalS3
from tests.fault_proxy import Action, FaultProxy, LandedThenLost, Reset, Stall, Status

HTTP_STORES = ["s3", "async-s3", "obstore", "async-obstore"]
AZURE_KINDS = ["azure", "async-azure"]
#: GCS kinds: run only against an emulator named by S3LOG_TEST_GCS_ENDPOINT (tests/servers.py).
GCS_KINDS = ["gcs", "async-gcs"]
#: SeaweedFS kinds and the moto kind whose store they use.
SEAWEED_KINDS = {"seaweedfs": "s3", "async-seaweedfs": "async-s3", "seaweedfs-obstore": "obstore"}
#: The kinds on servers besides moto, marked ``stores`` (make test-stores).
SERVER_STORES = [pytest.param(k, marks=pytest.mark.stores) for k in (*AZURE_KINDS, *SEAWEED_KINDS, *GCS_KINDS)]
STORES = ["memory", "async-memory", *HTTP_STORES, *SERVER_STORES]
#: HTTP request kind (as the proxy names it) -> the kind a store counts.
COUNTED_AS = {"get": "GET", "put_if_absent": "PUT", "put_if_match": "PUT", "put": "PUT", "list": "LIST",
              "delete": "DELETE", "delete_if_match": "DELETE"}
#: Stores that cannot make a DELETE conditional (obstore 0.12 has no If-Match on DELETE).
NO_CONDITIONAL_DELETE = {"obstore", "async-obstore", "seaweedfs-obstore", *AZURE_KINDS, *GCS_KINDS}
#: Stores whose keys obstore parses as paths.
OBSTORE_KINDS = NO_CONDITIONAL_DELETE
#: Servers that answer If-Match on a missing key with 412, as on a stale ETag (S3: 404).
MISSING_IS_412 = {*AZURE_KINDS, *SEAWEED_KINDS, *GCS_KINDS}
#: Stores that list a prefix whole, in one page without a token (AzureStore).
WHOLE_LISTING = set(AZURE_KINDS)
#: Stores whose listings carry no ETag (obstore reads no generation from a GCS listing).
LISTING_WITHOUT_ETAG = set(GCS_KINDS)
#: Stores whose ETag token is a GCS generation (a whole number), not an ETag.
GENERATION_KINDS = set(GCS_KINDS)
#: The Azure error code of an S3 one, for the faults the proxy injects into Azure's replies.
AZURE_CODE = {"NoSuchBucket": "ContainerNotFound", "NoSuchKey": "BlobNotFound", "SlowDown": "ServerBusy",
              "AccessDenied": "AuthorizationFailure", "PreconditionFailed": "ConditionNotMet"}


def other_etag(kind: str) -> str:
    """An ETag in ``kind``'s form that no object in the test has: a GCS store refuses one
    that is no generation without sending it, and the tests must see it sent."""
    return '"999999999999999999"' if kind in GENERATION_KINDS else '"0123456789abcdef0123456789abcdef"'


def dialect(kind: str, action: Action) -> Action:
    """``action`` as ``kind``'s server would say it: Azure's error codes for Azure."""
    if kind in AZURE_KINDS and isinstance(action, Status):
        return Status(action.status, AZURE_CODE.get(action.code, action.code))
    return action


class Blocking:
    """An async store behind the blocking interface, on its own event loop."""

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = store
        self.loop = loop
        self.requests = store.requests

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def get(self, key: str) -> Blob:
        return self._run(self.inner.get(key))  # type: ignore[no-any-return]

    def put_if_absent(self, key: str, body: bytes) -> str:
        return self._run(self.inner.put_if_absent(key, body))  # type: ignore[no-any-return]

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        return self._run(self.inner.put_if_match(key, body, etag))  # type: ignore[no-any-return]

    def list(self, prefix: str, *, delimiter: str | None = None, token: str | None = None,
             max_keys: int = 1000, start_after: str | None = None) -> ListPage:
        return self._run(self.inner.list(prefix, delimiter=delimiter, token=token,  # type: ignore[no-any-return]
                                         max_keys=max_keys, start_after=start_after))

    def delete(self, key: str) -> None:
        self._run(self.inner.delete(key))

    def delete_if_match(self, key: str, etag: str) -> None:
        self._run(self.inner.delete_if_match(key, etag))

    def close(self) -> None:
        aclose = getattr(self.inner, "aclose", None)
        if aclose is not None:
            self._run(aclose())
        self.loop.close()


@dataclass
class Subject:
    """A store under test, its namespace in the bucket, and the proxy in front of it."""

    kind: str
    store: Any
    proxy: FaultProxy | None
    base: str = ""
    closers: list[Callable[[], None]] = field(default_factory=list)
    #: For HTTP stores: the bucket (to plant objects in the server directly).
    bucket: str = ""
    #: The server besides moto (tests/servers.py), None on moto.
    server: Any = None

    @property
    def http(self) -> bool:
        return self.proxy is not None

    def sent(self) -> dict[str, int]:
        """HTTP requests the proxy saw since the last reset, by counted kind."""
        out = {"GET": 0, "PUT": 0, "LIST": 0, "DELETE": 0}
        assert self.proxy is not None
        for kind in self.proxy.plan.kinds():
            out[COUNTED_AS[kind]] += 1
        return out

    def reset(self, base: str) -> None:
        self.base = base
        self.store.requests.reset()
        if self.proxy is not None:
            self.proxy.plan.clear()

    def check_counted_equals_sent(self) -> None:
        """Every HTTP request a store sends is one it counted: no hidden retries."""
        if self.proxy is not None:
            assert self.store.requests.snapshot() == self.sent()


def http_target(request: pytest.FixtureRequest, kind: str) -> tuple[FaultProxy, str, Any, list[Callable[[], None]]]:
    """The proxy and bucket an HTTP store of ``kind`` is pointed at, its server besides moto
    (None on moto), and what closes them: a new proxy and bucket on such a server."""
    if kind in GCS_KINDS:
        server = request.getfixturevalue("gcs_emulator")
        proxy = FaultProxy(server.host, server.port).start()
        return proxy, server.shared_bucket(), server, [proxy.stop]
    if kind in AZURE_KINDS or kind in SEAWEED_KINDS:
        server = request.getfixturevalue("azurite" if kind in AZURE_KINDS else "seaweedfs")
        bucket = server.create_container() if kind in AZURE_KINDS else server.shared_bucket()
        proxy = FaultProxy("127.0.0.1", server.port).start()
        return proxy, bucket, server, [proxy.stop]
    return request.getfixturevalue("proxy"), request.getfixturevalue("bucket"), None, []


def _make(kind: str, bucket: str, endpoint: str, timeout: float | None = None,
          server: Any = None) -> tuple[Any, list[Callable[[], None]]]:
    """A store of ``kind`` addressing ``bucket`` at ``endpoint``, blocking, and how to close it.

    ``timeout``: a short read timeout (seconds), for the stall tests; the client keeps
    every other setting the store would choose itself. ``server``: the Azurite (or GCS
    emulator) that an Azure (GCS) kind's endpoint (a proxy) leads to.
    """
    kind = SEAWEED_KINDS.get(kind, kind)
    if kind in AZURE_KINDS or kind in GCS_KINDS:
        built = server.store(bucket, endpoint=endpoint, asynchronous=kind.startswith("async-"), timeout=timeout)
        if not kind.startswith("async-"):
            return built, []
        b = Blocking(built, asyncio.new_event_loop())
        return b, [b.close]
    if kind == "memory":
        return s3log.MemoryStore(), []
    if kind == "async-memory":
        b = Blocking(s3log.AsyncMemoryStore(), asyncio.new_event_loop())
        return b, [b.close]
    if kind == "s3":
        if timeout is None:
            return s3log.S3Store(bucket, endpoint_url=endpoint), []
        import boto3

        from s3log.store._s3common import client_config

        client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint, config=client_config(read_timeout=timeout, connect_timeout=timeout))
        return s3log.S3Store(bucket, client=client), []
    if kind == "async-s3":
        loop = asyncio.new_event_loop()
        if timeout is None:
            b = Blocking(s3log.AsyncS3Store(bucket, endpoint_url=endpoint), loop)
            return b, [b.close]
        from s3log.store.aio_s3 import client_config as aio_config
        from s3log.store.aio_s3 import open_client

        stack = contextlib.AsyncExitStack()
        client = loop.run_until_complete(stack.enter_async_context(open_client(
            None, endpoint_url=endpoint, config=aio_config(read_timeout=timeout, connect_timeout=timeout))))
        b = Blocking(s3log.AsyncS3Store(bucket, client=client), loop)
        return b, [lambda: loop.run_until_complete(stack.aclose()), b.close]
    client = None
    if timeout is not None:
        from s3log.store._obstore_common import make_client

        client = make_client(bucket, endpoint, None, timeout=timedelta(seconds=timeout),
                             connect_timeout=timedelta(seconds=timeout))
    if kind == "obstore":
        return s3log.S3Store.fast(bucket, endpoint_url=endpoint, client=client), []
    b = Blocking(s3log.AsyncS3Store.fast(bucket, endpoint_url=endpoint, client=client), asyncio.new_event_loop())
    return b, [b.close]


_names = itertools.count()


@pytest.fixture(scope="module", params=STORES)
def subject_once(request: pytest.FixtureRequest) -> Iterator[Subject]:
    """One store of each kind per module (building a client is the slow part)."""
    kind = request.param
    if kind not in ("memory", "async-memory"):
        proxy, name, server, closers = http_target(request, kind)
        store, more = _make(kind, name, proxy.endpoint_url, server=server)
        subject = Subject(kind, store, proxy, closers=more + closers, bucket=name, server=server)
    else:
        store, closers = _make(kind, "", "")
        subject = Subject(kind, store, None, closers=closers)
    yield subject
    for close in subject.closers:
        close()


@pytest.fixture
def subject(subject_once: Subject) -> Iterator[Subject]:
    """The store of this kind, counters at zero, in a fresh namespace of the bucket."""
    subject_once.reset(f"t{next(_names)}/")
    yield subject_once
    subject_once.check_counted_equals_sent()


def _all_pages(
    store: Any, prefix: str, *, delimiter: str | None = None, max_keys: int, start_after: str | None = None
) -> list[ListPage]:
    pages: list[ListPage] = []
    token: str | None = None
    while True:
        extra = {} if start_after is None else {"start_after": start_after}
        page = store.list(prefix, delimiter=delimiter, token=token, max_keys=max_keys, **extra)
        pages.append(page)
        # The paging rule: more than max_keys in one page only on the last page.
        if page.next_token is not None:
            assert len(page.objects) + len(page.prefixes) <= max_keys
        token = page.next_token
        if token is None:
            return pages
        assert len(pages) < 50, "listing does not end"


# ------------------------------------------------------------------------ the contract


def test_get_returns_what_put_if_absent_stored(subject: Subject) -> None:
    s, k = subject.store, subject.base + "a"
    etag = s.put_if_absent(k, b"\x00body\xff")
    got = s.get(k)
    assert got.body == b"\x00body\xff"
    assert etags_equal(got.etag, etag)
    assert subject.store.requests.snapshot() == {"GET": 1, "PUT": 1, "LIST": 0, "DELETE": 0}


def test_empty_and_large_bodies_round_trip(subject: Subject) -> None:
    s = subject.store
    big = bytes(range(256)) * 4096  # 1 MiB: one PUT, never a multipart upload
    for name, body in (("empty", b""), ("big", big)):
        etag = s.put_if_absent(subject.base + name, body)
        got = s.get(subject.base + name)
        assert got.body == body and etags_equal(got.etag, etag)


def test_get_of_a_missing_key_is_object_not_found(subject: Subject) -> None:
    with pytest.raises(ObjectNotFound):
        subject.store.get(subject.base + "missing")
    assert subject.store.requests["GET"] == 1


def test_put_if_absent_on_an_existing_key_is_precondition_failed_and_changes_nothing(subject: Subject) -> None:
    s, k = subject.store, subject.base + "a"
    etag = s.put_if_absent(k, b"first")
    with pytest.raises(PreconditionFailed) as caught:
        s.put_if_absent(k, b"second")
    assert caught.value.key == k
    got = s.get(k)
    assert got.body == b"first" and etags_equal(got.etag, etag)
    assert subject.store.requests.snapshot() == {"GET": 1, "PUT": 2, "LIST": 0, "DELETE": 0}


def test_put_if_match_replaces_and_returns_the_new_etag(subject: Subject) -> None:
    s, k = subject.store, subject.base + "head"
    e1 = s.put_if_absent(k, b"v1")
    e2 = s.put_if_match(k, b"v2", e1)
    assert not etags_equal(e1, e2)
    got = s.get(k)
    assert got.body == b"v2" and etags_equal(got.etag, e2)
    # The old ETag no longer matches: a second writer holding it loses.
    with pytest.raises(PreconditionFailed):
        s.put_if_match(k, b"v3", e1)
    assert s.get(k).body == b"v2"


def test_put_if_match_with_a_wrong_etag_is_precondition_failed(subject: Subject) -> None:
    s, k = subject.store, subject.base + "head"
    s.put_if_absent(k, b"v1")
    with pytest.raises(PreconditionFailed):
        s.put_if_match(k, b"v2", other_etag(subject.kind))
    assert s.get(k).body == b"v1"


def test_put_if_match_on_a_missing_key_is_object_not_found(subject: Subject) -> None:
    # Azure, SeaweedFS and GCS answer 412, as for a stale ETag: the head is re-read either way.
    missing = PreconditionFailed if subject.kind in MISSING_IS_412 else ObjectNotFound
    with pytest.raises(missing):
        subject.store.put_if_match(subject.base + "gone", b"v", other_etag(subject.kind))
    with pytest.raises(ObjectNotFound):
        subject.store.get(subject.base + "gone")


@pytest.mark.parametrize("form", ["as-returned", "unquoted", "quoted"])
def test_put_if_match_takes_the_etag_with_or_without_quotes(subject: Subject, form: str) -> None:
    s, k = subject.store, subject.base + "head"
    etag = s.put_if_absent(k, b"v1")
    bare = etag.strip('"')
    given = {"as-returned": etag, "unquoted": bare, "quoted": f'"{bare}"'}[form]
    new = s.put_if_match(k, b"v2", given)
    assert s.get(k).body == b"v2"
    # Every ETag a store hands out compares equal, quotes aside, wherever it came from.
    listed = s.list(subject.base).objects
    assert [o.key for o in listed] == [k]
    assert etags_equal(s.get(k).etag, new)
    assert (listed[0].etag == "") if subject.kind in LISTING_WITHOUT_ETAG else etags_equal(listed[0].etag, new)


def test_list_without_delimiter_returns_every_key_in_order_with_sizes(subject: Subject) -> None:
    s = subject.store
    keys = [subject.base + n for n in ("b", "a/1", "a/2", "c", "a/0/x")]
    for i, k in enumerate(keys):
        s.put_if_absent(k, b"x" * i)
    s.put_if_absent(subject.base.rstrip("/") + "-sibling", b"not under the prefix")
    page = s.list(subject.base)
    assert [o.key for o in page.objects] == sorted(keys)
    assert {o.key: o.size for o in page.objects} == {k: i for i, k in enumerate(keys)}
    assert page.prefixes == [] and page.next_token is None
    assert all(o.last_modified_ms > 0 for o in page.objects)


def test_list_of_an_empty_prefix_is_one_empty_page(subject: Subject) -> None:
    page = subject.store.list(subject.base + "nothing/")
    assert page == ListPage([], [], None)
    page = subject.store.list(subject.base + "nothing/", delimiter="/")
    assert page == ListPage([], [], None)
    assert subject.store.requests.snapshot() == {"GET": 0, "PUT": 0, "LIST": 2, "DELETE": 0}


def test_list_pages_with_max_keys_and_token(subject: Subject) -> None:
    s = subject.store
    keys = [f"{subject.base}k{i}" for i in range(7)]
    for k in keys:
        s.put_if_absent(k, b"x")
    subject.store.requests.reset()
    if subject.proxy is not None:
        subject.proxy.plan.clear()
    pages = _all_pages(s, subject.base, max_keys=3)
    if subject.kind in WHOLE_LISTING:
        # The contract's last page may hold more than max_keys: the whole prefix at once.
        assert [[o.key for o in p.objects] for p in pages] == [keys]
        assert pages[0].next_token is None and subject.store.requests["LIST"] == 1
        return
    assert [[o.key for o in p.objects] for p in pages] == [keys[0:3], keys[3:6], keys[6:7]]
    assert [p.next_token is None for p in pages] == [False, False, True]
    assert subject.store.requests.snapshot() == {"GET": 0, "PUT": 0, "LIST": 3, "DELETE": 0}


def test_list_with_delimiter_gives_objects_and_common_prefixes(subject: Subject) -> None:
    s, b = subject.store, subject.base
    for k in ("a", "b/1", "b/2", "c/x/1", "d", "e/f/g"):
        s.put_if_absent(b + k, b"x")
    page = s.list(b, delimiter="/")
    assert [o.key for o in page.objects] == [b + "a", b + "d"]
    assert page.prefixes == [b + "b/", b + "c/", b + "e/"]
    assert page.next_token is None
    inner = s.list(b + "c/", delimiter="/")
    assert inner.objects == [] and inner.prefixes == [b + "c/x/"]


def test_list_with_delimiter_pages_without_repeats(subject: Subject) -> None:
    """Paging with a delimiter: every object and prefix once, in order, across pages.

    A store may return more than ``max_keys`` entries only in a page whose token is
    None (obstore lists a delimited prefix in one response).
    """
    s, b = subject.store, subject.base
    for k in ("a", "b/1", "b/2", "c/1", "d", "e/1", "e/2", "f"):
        s.put_if_absent(b + k, b"x")
    pages = _all_pages(s, b, delimiter="/", max_keys=2)
    objects = [o.key for p in pages for o in p.objects]
    prefixes = [x for p in pages for x in p.prefixes]
    assert objects == [b + "a", b + "d", b + "f"]
    assert prefixes == [b + "b/", b + "c/", b + "e/"]


def test_list_starts_after_a_key_with_and_without_delimiter(subject: Subject) -> None:
    """``start_after`` (S3's StartAfter): only keys after it, paging on from the token.

    What newest-first session listing relies on (s3log._protocol.listing): a delimited listing of
    session folders that starts at a time bound costs a page, not the whole prefix.
    """
    s, b = subject.store, subject.base
    for k in ("a/1", "b/1", "b/2", "c/1", "c/x/1", "d", "e/1", "f/1", "f/2"):
        s.put_if_absent(b + k, b"x")
    subject.store.requests.reset()
    if subject.proxy is not None:
        subject.proxy.plan.clear()
    plain = _all_pages(s, b, max_keys=2, start_after=b + "c/1")
    assert [o.key for p in plain for o in p.objects] == [b + k for k in ("c/x/1", "d", "e/1", "f/1", "f/2")]
    lists = subject.store.requests["LIST"]
    # A bound that names no folder (one that does: the test below).
    delimited = _all_pages(s, b, delimiter="/", max_keys=2, start_after=b + "a0")
    assert [x for p in delimited for x in p.prefixes] == [b + "b/", b + "c/", b + "e/", b + "f/"]
    assert [o.key for p in delimited for o in p.objects] == [b + "d"]
    if subject.kind in WHOLE_LISTING:
        # The whole folder behind one call (its server ignores obstore's offset): docs/stores.md.
        assert len(delimited) == 1
    else:
        # Bounded: a page per call, never the whole folder behind one call.
        assert subject.store.requests["LIST"] - lists == len(delimited) >= 2
    if subject.kind in ("s3", "async-s3"):
        return  # moto leaves out the common prefix holding the bound; s3log never starts inside one
    # Inside a common prefix: reported only if it holds a key after the bound.
    inside = _all_pages(s, b, delimiter="/", max_keys=1000, start_after=b + "b/1")
    assert [x for p in inside for x in p.prefixes] == [b + "b/", b + "c/", b + "e/", b + "f/"]
    inside = _all_pages(s, b, delimiter="/", max_keys=1000, start_after=b + "b/2")
    assert [x for p in inside for x in p.prefixes] == [b + "c/", b + "e/", b + "f/"]
    # A bound past every key: one empty page.
    page = s.list(b, delimiter="/", start_after=b + "z")
    assert page.objects == [] and page.prefixes == [] and page.next_token is None


def test_a_bound_naming_a_folder_lists_that_folders_keys(subject: Subject) -> None:
    """``start_after="t/b"``: ``t/b/1`` sorts after it, so S3 lists it (and, delimited, ``t/b/``).

    SeaweedFS skips the folder ``b`` whole: its deviation, asserted so that a change shows.
    s3log's own bounds (s3log._protocol.listing.bound_id) are 13 characters of a session
    id, never a whole id that s3log makes, so its listings are not affected (docs/stores.md).
    """
    s, b = subject.store, subject.base
    for k in ("a/1", "b/1", "b/2", "ba/1", "c"):
        s.put_if_absent(b + k, b"x")
    plain = [o.key for p in _all_pages(s, b, max_keys=1000, start_after=b + "b") for o in p.objects]
    delimited = [x for p in _all_pages(s, b, delimiter="/", max_keys=1000, start_after=b + "b") for x in p.prefixes]
    if subject.kind in SEAWEED_KINDS:
        assert plain == [b + "ba/1", b + "c"] and delimited == [b + "ba/"]
        return
    assert plain == [b + "b/1", b + "b/2", b + "ba/1", b + "c"]
    assert delimited == [b + "b/", b + "ba/"]


def test_list_prefix_is_a_string_prefix_not_a_folder(subject: Subject) -> None:
    """S3 lists keys *starting with* the prefix; ``t/a`` finds ``t/ab`` and ``t/a/1``."""
    s, b = subject.store, subject.base
    for k in ("a", "ab/1", "ab/2", "ac", "a/1", "b", "aa"):
        s.put_if_absent(b + k, b"x")
    assert [o.key for o in s.list(b + "ab").objects] == [b + "ab/1", b + "ab/2"]
    keys = [o.key for p in _all_pages(s, b + "a", max_keys=2) for o in p.objects]
    assert keys == [b + k for k in ("a", "a/1", "aa", "ab/1", "ab/2", "ac")]
    page = s.list(b + "a", delimiter="/")
    assert [o.key for o in page.objects] == [b + "a", b + "aa", b + "ac"]
    assert page.prefixes == [b + "a/", b + "ab/"]


def test_sessions_are_found_by_id_prefix_on_every_store(subject: Subject) -> None:
    """What the LangGraph saver does to find a thread's sessions (found nothing on obstore)."""
    if isinstance(subject.store, Blocking):
        pytest.skip("the listing itself is covered above; this drives the blocking Log")
    log = s3log.Log(subject.store, prefix=subject.base.rstrip("/"))
    for sid in ("lg-a-1", "lg-a-2", "lg-b-1", "other"):
        log.create(session_id=sid)
    assert log.list_session_ids(prefix="lg-a-") == ["lg-a-2", "lg-a-1"]
    assert log.list_session_ids(prefix="lg-") == ["lg-b-1", "lg-a-2", "lg-a-1"]
    log.close()


def test_more_than_one_s3_page_is_listed_and_counted(subject: Subject) -> None:
    """1,001 entries: two S3 pages, with and without a delimiter (counted as sent)."""
    if subject.kind in AZURE_KINDS:
        pytest.skip("Azure pages by 5,000 entries (5,001 PUTs on Azurite take long): its count, "
                    "azure.pages_sent, is checked in tests/test_store_servers.py")
    if subject.kind in ("async-seaweedfs", "seaweedfs-obstore", "async-gcs"):
        pytest.skip("the server's paging is checked with its blocking store (1,001 PUTs take seconds)")
    s, b = subject.store, subject.base
    keys = [f"{b}d{i:04d}/x" for i in range(500)] + [f"{b}k{i:04d}" for i in range(501)]
    raw = getattr(s, "inner", s)
    if isinstance(raw, (s3log.MemoryStore, s3log.AsyncMemoryStore)):
        mem = raw if isinstance(raw, s3log.MemoryStore) else raw.sync
        for k in keys:
            mem.put_raw(k, b"")
    elif subject.server is not None:
        _plant(subject, keys)
    else:
        # The server runs in this process: plant the keys in moto's backend directly
        # (1,001 PUTs over HTTP would take seconds per store).
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        for k in keys:
            backend.put_object(subject.bucket, k, b"")
    plain = _all_pages(s, b, max_keys=1000)
    assert [o.key for p in plain for o in p.objects] == sorted(keys)
    delimited = _all_pages(s, b, delimiter="/", max_keys=1000)
    assert [x for p in delimited for x in p.prefixes] == [f"{b}d{i:04d}/" for i in range(500)]
    assert [o.key for p in delimited for o in p.objects] == [f"{b}k{i:04d}" for i in range(501)]
    assert s.requests["LIST"] == 4


def _plant(subject: Subject, keys: list[str]) -> None:
    """``keys`` (empty objects) on a server besides moto, straight to it (not through the
    proxy), eight PUTs at a time."""
    from concurrent.futures import ThreadPoolExecutor

    direct = (subject.server.store(subject.bucket) if subject.kind in GCS_KINDS
              else s3log.S3Store(subject.bucket, endpoint_url=subject.server.endpoint_url))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: direct.put_if_absent(k, b""), keys))


def test_keys_with_unusual_characters_round_trip(subject: Subject) -> None:
    s = subject.store
    # Characters a log prefix may hold (s3log._format.layout), plus non-ASCII.
    names = ["sp ace", "plus+sign", "eq=,;:@!*'()", "ünïcödé", "tilde~dash-dot."]
    for n in names:
        s.put_if_absent(subject.base + n, n.encode())
    for n in names:
        assert s.get(subject.base + n).body == n.encode()
    assert sorted(o.key for o in s.list(subject.base).objects) == sorted(subject.base + n for n in names)


def test_obstore_refuses_keys_it_would_rewrite(subject: Subject) -> None:
    """obstore parses keys as paths: ``a/`` would be stored as ``a``. Refused, unsent."""
    if subject.kind not in OBSTORE_KINDS:
        pytest.skip("the S3 and memory stores store any key as given")
    for bad in ("trail/", "/lead", "a//b", "a/./b", "a/../b", "ctl\x01"):
        for call in (lambda: subject.store.put_if_absent(subject.base + bad, b"x"),
                     lambda: subject.store.put_if_match(subject.base + bad, b"x", '"e"'),
                     lambda: subject.store.get(subject.base + bad), lambda: subject.store.delete(subject.base + bad)):
            with pytest.raises(s3log.errors.InvalidArgumentError, match="cannot be stored exactly"):
                call()
    assert subject.store.requests.total == 0
    assert subject.store.list(subject.base).objects == []


def test_delete_removes_and_a_missing_key_deletes_fine(subject: Subject) -> None:
    s, k = subject.store, subject.base + "a"
    s.put_if_absent(k, b"x")
    s.delete(k)
    with pytest.raises(ObjectNotFound):
        s.get(k)
    s.delete(k)
    s.delete(subject.base + "never-existed")
    # Gone means creatable again.
    s.put_if_absent(k, b"y")
    assert s.get(k).body == b"y"


@pytest.mark.parametrize("form", ["as-returned", "unquoted"])
def test_delete_if_match_deletes_only_the_version_it_names(subject: Subject, form: str) -> None:
    s, k = subject.store, subject.base + "head"
    e1 = s.put_if_absent(k, b"v1")
    e2 = s.put_if_match(k, b"v2", e1)
    if subject.kind in NO_CONDITIONAL_DELETE:
        # Refused up front: nothing sent (the proxy checks counted == sent), nothing deleted.
        with pytest.raises(ConditionalDeleteUnsupported) as refused:
            s.delete_if_match(k, e2)
        assert refused.value.key == k and s.requests["DELETE"] == 0
        assert s.get(k).body == b"v2"
        return
    # An older version's ETag: 412, and the object stays (a head replaced since the read).
    with pytest.raises(PreconditionFailed):
        s.delete_if_match(k, e1 if form == "as-returned" else e1.strip('"'))
    assert s.get(k).body == b"v2"
    s.delete_if_match(k, e2 if form == "as-returned" else e2.strip('"'))
    with pytest.raises(ObjectNotFound):
        s.get(k)
    # A missing key: 404, as for an If-Match PUT (412 where the server says so for a PUT too).
    with pytest.raises(PreconditionFailed if subject.kind in MISSING_IS_412 else ObjectNotFound):
        s.delete_if_match(k, e2)
    assert s.requests["DELETE"] == 3


def test_a_listings_etag_is_the_one_conditional_requests_take(subject: Subject) -> None:
    """gc deletes a dangling fork marker with If-Match on the ETag its listing showed:
    that ETag must be the object's, in a form the store's conditional requests take."""
    s, k = subject.store, subject.base + "forks/child"
    etag = s.put_if_absent(k, b"v1")
    (listed,) = [o for p in _all_pages(s, subject.base + "forks/", max_keys=1000) for o in p.objects if o.key == k]
    if subject.kind in LISTING_WITHOUT_ETAG:
        # No ETag rather than one no condition takes: gc leaves the marker alone (decision 0008).
        assert listed.etag == ""
        return
    assert listed.etag and listed.etag.strip('"') == etag.strip('"')
    if subject.kind in NO_CONDITIONAL_DELETE:
        # gc then sends nothing: the marker stays.
        with pytest.raises(ConditionalDeleteUnsupported):
            s.delete_if_match(k, listed.etag)
        return
    # Written again since the listing: the listed ETag no longer deletes it.
    s.put_if_match(k, b"v2", listed.etag)
    with pytest.raises(PreconditionFailed):
        s.delete_if_match(k, listed.etag)
    assert s.get(k).body == b"v2"
    (again,) = [o for p in _all_pages(s, subject.base + "forks/", max_keys=1000) for o in p.objects if o.key == k]
    s.delete_if_match(k, again.etag)
    with pytest.raises(ObjectNotFound):
        s.get(k)


def test_a_conditional_delete_and_a_conditional_put_have_one_winner(subject: Subject) -> None:
    """A DELETE and a PUT, both If-Match on one version, race: exactly one wins (the check
    and the write are one step on S3, and on moto through s3log.testing.localserver's patch)."""
    if subject.kind in NO_CONDITIONAL_DELETE:
        pytest.skip("obstore cannot make a DELETE conditional")
    s = subject.store
    for round_ in range(8):
        k = f"{subject.base}race{round_}"
        etag = s.put_if_absent(k, b"v1")
        results = _race(s, [("delete_if_match", (k, etag)),
                            *(("put_if_match", (k, f"m{i}".encode(), etag)) for i in range(3))])
        won = [r for r in results if not isinstance(r, StoreError)]
        assert len(won) == 1, results
        # Losers are told so: 412 (or 409 in flight), or 404 for a PUT after the DELETE won.
        assert all(isinstance(r, (PreconditionFailed, ConditionalRequestConflict, ObjectNotFound))
                   for r in results if isinstance(r, StoreError))
        deleted = results[0] is None
        try:
            body: bytes | None = s.get(k).body
        except ObjectNotFound:
            body = None
        assert (body is None) == deleted


def test_every_request_is_counted_once_failures_included(subject: Subject) -> None:
    s, b = subject.store, subject.base
    e = s.put_if_absent(b + "a", b"1")
    with contextlib.suppress(PreconditionFailed):
        s.put_if_absent(b + "a", b"1")
    e = s.put_if_match(b + "a", b"2", e)
    with contextlib.suppress(PreconditionFailed):
        s.put_if_match(b + "a", b"3", other_etag(subject.kind))
    with contextlib.suppress(ObjectNotFound):
        s.get(b + "zz")
    s.get(b + "a")
    s.list(b)
    s.list(b, delimiter="/")
    s.delete(b + "a")
    s.delete(b + "a")
    assert s.requests.snapshot() == {"GET": 2, "PUT": 4, "LIST": 2, "DELETE": 2}
    assert s.requests.total == 10


def _race(s: Any, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """Send ``calls`` (store method, arguments) at once: per call its result or StoreError.

    An async store's coroutines are gathered on its loop, a blocking store's calls run
    on as many threads.
    """
    if isinstance(s, Blocking):
        async def race() -> list[Any]:
            coros = [getattr(s.inner, name)(*args) for name, args in calls]
            return list(await asyncio.gather(*coros, return_exceptions=True))

        return s.loop.run_until_complete(race())  # type: ignore[no-any-return]
    from concurrent.futures import ThreadPoolExecutor

    def attempt(call: tuple[str, tuple[Any, ...]]) -> object:
        try:
            return getattr(s, call[0])(*call[1])
        except StoreError as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(attempt, calls))


def test_one_winner_among_racing_creates_and_replaces(subject: Subject) -> None:
    """Create-only and If-Match PUTs are compare-and-swap: of N racers exactly one wins."""
    s, k = subject.store, subject.base + "race"
    results = _race(s, [("put_if_absent", (k, f"{i}".encode())) for i in range(6)])
    etag = next(r for r in results if isinstance(r, str))
    results2 = _race(s, [("put_if_match", (k, f"m{i}".encode(), etag)) for i in range(6)])
    for outcome in (results, results2):
        winners = [r for r in outcome if isinstance(r, str)]
        assert len(winners) == 1
        # Losers are told so (412, or 409 when the store saw the race in flight).
        assert all(isinstance(r, (PreconditionFailed, ConditionalRequestConflict)) for r in outcome
                   if not isinstance(r, str))


# ------------------------------------------------------------- error mapping under faults

#: (HTTP fault, the s3log error it must become, whether the write took effect)
PUT_FAULTS: list[tuple[str, Action, type[StoreError], bool]] = [
    ("409-conflict", Status(409, "ConditionalRequestConflict"), ConditionalRequestConflict, False),
    ("409-aborted", Status(409, "OperationAborted"), ConditionalRequestConflict, False),
    ("412", Status(412, "PreconditionFailed"), PreconditionFailed, False),
    ("503-slowdown", Status(503, "SlowDown"), TransientStoreError, False),
    ("500-internal", Status(500, "InternalError"), TransientStoreError, False),
    ("reset", Reset(), TransientStoreError, False),
    ("landed-then-lost", LandedThenLost(), TransientStoreError, True),
    ("403-denied", Status(403, "AccessDenied"), StoreError, False),
    ("404-no-bucket", Status(404, "NoSuchBucket"), StoreError, False),
]


def _exactly(exc: BaseException, cls: type[StoreError]) -> bool:
    # StoreError means the fatal kind: none of the classes the protocol acts on.
    if cls is StoreError:
        return type(exc) is StoreError
    return isinstance(exc, cls)


@pytest.fixture
def http_subject(subject: Subject) -> Subject:
    if not subject.http:
        pytest.skip("HTTP faults need an HTTP store (the memory stores are checked through FaultyStore)")
    return subject


@pytest.mark.parametrize(("name", "action", "error", "landed"), PUT_FAULTS, ids=[f[0] for f in PUT_FAULTS])
def test_create_only_put_faults_map_to_the_same_error_on_every_store(
    http_subject: Subject, name: str, action: Action, error: type[StoreError], landed: bool
) -> None:
    s, k = http_subject.store, http_subject.base + "seg"
    assert http_subject.proxy is not None
    http_subject.proxy.plan.add("put_if_absent", dialect(http_subject.kind, action))
    with pytest.raises(StoreError) as caught:
        s.put_if_absent(k, b"segment")
    assert _exactly(caught.value, error), repr(caught.value)
    assert caught.value.key == k
    # One request sent, one counted: the client did not retry behind s3log's back.
    assert http_subject.sent()["PUT"] == 1 and s.requests["PUT"] == 1
    if landed:
        assert s.get(k).body == b"segment"
    else:
        with pytest.raises(ObjectNotFound):
            s.get(k)


#: The faults of an If-Match request (PUT or DELETE): those of a PUT, and 404 for a missing key.
IF_MATCH_FAULTS = pytest.mark.parametrize(
    ("name", "action", "error", "landed"),
    [*PUT_FAULTS, ("404-no-key", Status(404, "NoSuchKey"), ObjectNotFound, False)],
    ids=[*(f[0] for f in PUT_FAULTS), "404-no-key"],
)


@IF_MATCH_FAULTS
def test_if_match_put_faults_map_to_the_same_error_on_every_store(
    http_subject: Subject, name: str, action: Action, error: type[StoreError], landed: bool
) -> None:
    s, k = http_subject.store, http_subject.base + "head"
    etag = s.put_if_absent(k, b"v1")
    assert http_subject.proxy is not None
    http_subject.proxy.plan.add("put_if_match", dialect(http_subject.kind, action))
    with pytest.raises(StoreError) as caught:
        s.put_if_match(k, b"v2", etag)
    assert _exactly(caught.value, error), repr(caught.value)
    assert http_subject.sent()["PUT"] == 2 and s.requests["PUT"] == 2
    assert s.get(k).body == (b"v2" if landed else b"v1")


@IF_MATCH_FAULTS
def test_if_match_delete_faults_map_to_the_same_error_on_every_store(
    http_subject: Subject, name: str, action: Action, error: type[StoreError], landed: bool
) -> None:
    if http_subject.kind in NO_CONDITIONAL_DELETE:
        pytest.skip("obstore cannot make a DELETE conditional (refused before sending: see the contract test)")
    s, k = http_subject.store, http_subject.base + "head"
    etag = s.put_if_absent(k, b"v1")
    assert http_subject.proxy is not None
    http_subject.proxy.plan.add("delete_if_match", dialect(http_subject.kind, action))
    with pytest.raises(StoreError) as caught:
        s.delete_if_match(k, etag)
    assert _exactly(caught.value, error), repr(caught.value)
    assert caught.value.key == k
    # One request sent, one counted: no client resent the DELETE behind s3log's back.
    assert http_subject.sent()["DELETE"] == 1 and s.requests["DELETE"] == 1
    if landed:
        with pytest.raises(ObjectNotFound):
            s.get(k)
    else:
        assert s.get(k).body == b"v1"


@pytest.mark.parametrize("method", ["get", "list", "delete"])
@pytest.mark.parametrize(
    ("name", "action", "error"),
    [("503", Status(503, "SlowDown"), TransientStoreError), ("reset", Reset(), TransientStoreError),
     ("no-bucket", Status(404, "NoSuchBucket"), StoreError), ("denied", Status(403, "AccessDenied"), StoreError)],
    ids=["503", "reset", "no-bucket", "denied"],
)
def test_read_faults_map_to_the_same_error_on_every_store(
    http_subject: Subject, method: str, name: str, action: Action, error: type[StoreError]
) -> None:
    s, k = http_subject.store, http_subject.base + "obj"
    s.put_if_absent(k, b"x")
    assert http_subject.proxy is not None
    http_subject.proxy.plan.add(method, dialect(http_subject.kind, action))
    call: dict[str, Callable[[], object]] = {
        "get": lambda: s.get(k), "list": lambda: s.list(http_subject.base), "delete": lambda: s.delete(k)}
    with pytest.raises(StoreError) as caught:
        call[method]()
    assert _exactly(caught.value, error), repr(caught.value)
    assert sum(s.requests.snapshot().values()) == 2


@pytest.mark.parametrize("kind", [*HTTP_STORES, *SERVER_STORES])
def test_a_stalled_put_times_out_as_a_transient_error(kind: str, request: pytest.FixtureRequest) -> None:
    proxy, bucket, server, closing = http_target(request, kind)
    store, closers = _make(kind, bucket, proxy.endpoint_url, timeout=0.3, server=server)
    closers += closing
    subject = Subject(kind, store, proxy)
    subject.reset(f"t{next(_names)}/")
    try:
        for method in ("put_if_absent", "put_if_match"):
            proxy.plan.add(method, Stall(1.0))
        k = subject.base + "k"
        with pytest.raises(TransientStoreError):
            store.put_if_absent(k, b"x")
        etag = store.put_if_absent(k, b"x")
        with pytest.raises(TransientStoreError):
            store.put_if_match(k, b"y", etag)
        assert store.get(k).body == b"x"
        subject.check_counted_equals_sent()
    finally:
        for close in closers:
            close()


COMMIT_FAULTS: list[tuple[str, str, Action]] = [
    ("segment-409", "put_if_absent", Status(409, "ConditionalRequestConflict")),
    ("segment-503", "put_if_absent", Status(503, "SlowDown")),
    ("segment-landed-then-lost", "put_if_absent", LandedThenLost()),
    ("head-409", "put_if_match", Status(409, "ConditionalRequestConflict")),
    ("head-409-aborted", "put_if_match", Status(409, "OperationAborted")),
    ("head-reset", "put_if_match", Reset()),
    ("head-landed-then-lost", "put_if_match", LandedThenLost()),
]
FAST = s3log.LogConfig(retry=s3log.RetryPolicy(attempts=6, initial=0.001, max_backoff=0.005))


@pytest.mark.parametrize(("name", "where", "action"), COMMIT_FAULTS, ids=[f[0] for f in COMMIT_FAULTS])
def test_a_commit_through_real_http_faults_is_acknowledged_exactly_once(
    http_subject: Subject, name: str, where: str, action: Action
) -> None:
    """End to end: the log on each HTTP store commits once whatever the wire did."""
    prefix = http_subject.base.rstrip("/")
    big = "x" * 40000  # larger than the head's tail (32 KiB by default): the commit writes a segment first
    assert http_subject.proxy is not None
    plan = http_subject.proxy.plan
    s = http_subject.store
    if isinstance(s, Blocking):
        async def scenario() -> list[Any]:
            alog = s3log.AsyncLog(s.inner, prefix=prefix, config=FAST)
            w = await alog.create()
            plan.add(where, dialect(http_subject.kind, action))
            await w.append_durable("big", big)
            await w.append_durable("k", "after")
            return [e.data for e in (await alog.read(w.session_id)).entries]

        entries = s.loop.run_until_complete(scenario())
    else:
        log = s3log.Log(s, prefix=prefix, config=FAST)
        w = log.create()
        plan.add(where, dialect(http_subject.kind, action))
        w.append("big", big)
        w.commit()
        w.append("k", "after")
        w.commit()
        entries = [e.data for e in log.read(w.session_id).entries]
        log.close()
    assert entries == [big, "after"]
    assert any(a == dialect(http_subject.kind, action) for _, _, a in plan.seen), "the fault was not met"


# ------------------------------------------- the fault wrappers speak the same language

#: FaultyStore faults and the error each must raise, and whether the write took effect.
WRAPPER_FAULTS: list[tuple[Fault, type[StoreError], bool]] = [
    ("409", ConditionalRequestConflict, False),
    ("503", TransientStoreError, False),
    ("timeout-lost", TransientStoreError, False),
    ("timeout-landed", TransientStoreError, True),
]


@pytest.mark.parametrize(("fault", "error", "landed"), WRAPPER_FAULTS, ids=[f[0] for f in WRAPPER_FAULTS])
@pytest.mark.parametrize("method", ["put_if_absent", "put_if_match", "delete_if_match"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_fault_wrappers_raise_what_real_stores_raise(
    flavour: str, method: str, fault: Fault, error: type[StoreError], landed: bool
) -> None:
    mem = s3log.MemoryStore()
    etag = mem.put_raw("k", b"v1")
    armed = {"left": 1}

    def plan(m: str, key: str) -> Fault | None:
        if m == method and armed["left"]:
            armed["left"] -= 1
            return fault
        return None

    key = "new" if method == "put_if_absent" else "k"
    args: dict[str, tuple[Any, ...]] = {"put_if_absent": (key, b"v2"), "put_if_match": (key, b"v2", etag),
                                        "delete_if_match": (key, etag)}
    if flavour == "sync":
        faulty: Any = FaultyStore(mem, plan)
        call = lambda: getattr(faulty, method)(*args[method])  # noqa: E731
    else:
        afaulty = AsyncFaultyStore(s3log.AsyncMemoryStore(mem), plan)
        call = lambda: asyncio.run(getattr(afaulty, method)(*args[method]))  # noqa: E731
    with pytest.raises(StoreError) as caught:
        call()
    assert _exactly(caught.value, error)
    stored = mem.get(key).body if key in mem.all_keys() else None
    expected_unlanded = None if method == "put_if_absent" else b"v1"
    expected_landed = None if method == "delete_if_match" else b"v2"
    assert stored == (expected_landed if landed else expected_unlanded)


# ------------------------------------------------------------ the log owns the prefix


def test_stores_need_no_prefix_and_the_log_supplies_it(s3log_server: LocalS3, bucket: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        store = s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url)
        fast = s3log.S3Store.fast(bucket, endpoint_url=s3log_server.endpoint_url)
        afast = s3log.AsyncS3Store.fast(bucket, endpoint_url=s3log_server.endpoint_url)
        astore = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)
    for st in (store, fast, afast, astore):
        assert not hasattr(st, "prefix")
        assert "prefix" not in repr(st)
    name = f"p{next(_names)}"
    log = s3log.Log(store, prefix=name)
    sid = log.create().session_id
    assert any(o.key == f"{name}/sessions/{sid}/head" for o in store.list(f"{name}/").objects)
    assert s3log.Log(fast, prefix=name).read(sid).session_id == sid


def test_a_store_takes_no_prefix(s3log_server: LocalS3, bucket: str) -> None:
    """The log owns the key prefix: a store given one is a TypeError, not a second place to look."""
    ep = s3log_server.endpoint_url
    for make in (s3log.S3Store, s3log.S3Store.fast, s3log.AsyncS3Store, s3log.AsyncS3Store.fast, s3log.ObstoreStore):
        with pytest.raises(TypeError):
            make(bucket, prefix="p", endpoint_url=ep)  # type: ignore[operator]
        with pytest.raises(TypeError):
            make(bucket, "p", endpoint_url=ep)  # type: ignore[operator]


def test_the_snippets_of_the_store_guide_run() -> None:
    import pathlib
    import re

    guide = pathlib.Path(__file__).parent.parent / "docs" / "stores.md"
    snippets = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    assert len(snippets) == 2
    for code in snippets:
        exec(compile(code, str(guide), "exec"), {})


def test_an_explicit_endpoint_wins_over_aws_endpoint_url_s3(
    s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    # object_store let AWS_ENDPOINT_URL_S3 override the endpoint argument: S3Store.fast
    # then wrote to whatever that variable named.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
    bucket = s3log_server.create_bucket()
    store = s3log.S3Store.fast(bucket, endpoint_url=s3log_server.endpoint_url)
    store.put_if_absent("k", b"x")
    assert s3log.S3Store(bucket, endpoint_url=s3log_server.endpoint_url).get("k").body == b"x"


@pytest.mark.parametrize(("bucket", "express"), [("logs--usw2-az1--x-s3", "true"), ("logs", None)])
def test_an_obstore_client_of_a_directory_bucket_takes_s3_express_sessions(bucket: str, express: str | None) -> None:
    # botocore turns S3 Express session authentication on by the bucket's name alone;
    # object_store only when told, so the obstore stores tell it (docs/stores.md).
    pytest.importorskip("obstore")
    from s3log.store._obstore_common import make_client

    assert make_client(bucket, None, "us-west-2").config.get("s3_express") == express


def _constructor(kind: str) -> Callable[..., Any]:
    """The store class of ``kind`` (a module skipped when its extra is missing)."""
    if kind in ("obstore", "async-obstore"):
        pytest.importorskip("obstore")
        from s3log.store.obstore import AsyncObstoreStore, ObstoreStore

        return ObstoreStore if kind == "obstore" else AsyncObstoreStore
    if kind == "async-s3":
        pytest.importorskip("aiobotocore")
        from s3log.store.aio_s3 import AsyncS3Store

        return AsyncS3Store
    return s3log.S3Store


@pytest.mark.parametrize("kind", HTTP_STORES)
@pytest.mark.parametrize(("kwargs", "named"), [
    ({"bucket": None}, "bucket"), ({"bucket": 5}, "bucket"), ({"bucket": ""}, "bucket"),
    ({"bucket": "s3://my-bucket"}, "bucket"), ({"bucket": "a/b"}, "bucket"), ({"bucket": "my bucket"}, "bucket"),
    ({"endpoint_url": "localhost:9000"}, "endpoint_url"), ({"endpoint_url": 9000}, "endpoint_url"),
    ({"endpoint_url": "http://[::1"}, "endpoint_url"), ({"endpoint_url": "http://h:port"}, "endpoint_url"),
    ({"region_name": "not a region"}, "region_name"), ({"region_name": 5}, "region_name"),
], ids=lambda v: repr(v) if not isinstance(v, dict) else "-".join(f"{k}={v[k]!r}" for k in v))
def test_a_store_is_refused_a_bucket_endpoint_or_region_that_names_none(
    kind: str, kwargs: dict[str, Any], named: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bucket, endpoint URL or region that cannot name one is an InvalidArgumentError
    naming the argument, raised before a client is built."""
    import boto3

    def no_client(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a client was built")

    monkeypatch.setattr(boto3.session.Session, "client", no_client)
    args = {"bucket": "logs", **kwargs}
    with pytest.raises(s3log.InvalidArgumentError, match=named):
        _constructor(kind)(args.pop("bucket"), **args)


@pytest.mark.parametrize("kind", HTTP_STORES)
@pytest.mark.parametrize("bucket", [
    "b", "my.bucket", "Legacy_Bucket", "logs--usw2-az1--x-s3", "arn:aws:s3:us-west-2:123456789012:accesspoint/my-ap",
])
def test_every_form_of_bucket_name_makes_a_store(kind: str, bucket: str) -> None:
    """Short, dotted, legacy (upper case, underscores) and directory bucket names, and
    access point ARNs, are accepted as buckets; endpoints with a port and regions too."""
    store = _constructor(kind)(bucket, endpoint_url="http://127.0.0.1:9", region_name="eu-west-1")
    assert store.bucket == bucket


def test_an_azure_store_is_refused_an_endpoint_that_is_no_url() -> None:
    """An Azure endpoint that is not an http(s) URL is an InvalidArgumentError naming endpoint."""
    pytest.importorskip("obstore")
    from s3log.store.azure import AzureStore

    with pytest.raises(s3log.InvalidArgumentError, match="endpoint"):
        AzureStore("logs", endpoint="localhost:10000")
