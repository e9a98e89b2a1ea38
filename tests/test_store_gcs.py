"""GCSStore and AsyncGCSStore against a recorder: the requests they send and how they read
the replies. Not a test of Google Cloud Storage, nor a claim that it works (docs/stores.md,
"Google Cloud Storage: not supported"): the contract suite runs on these stores only
against an emulator named by ``S3LOG_TEST_GCS_ENDPOINT``, and none that installs here
honours generations.

The recorder (:class:`FakeGCS`) is a small HTTP server on 127.0.0.1 that answers obstore's
GCS client as GCS's XML API is documented to: objects by path (``/BUCKET/KEY``), a
generation per write in ``x-goog-generation`` beside ``ETag`` and ``Last-Modified``,
``x-goog-if-generation-match`` honoured (412 otherwise), S3-style XML errors
(``NoSuchKey``, ``NoSuchBucket``, ``PreconditionFailed``), and ``list-type=2`` listings.
A test can tell it to answer the next request with an error, or without a header.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import pytest

import s3log
from s3log.errors import (
    ConditionalDeleteUnsupported,
    InvalidArgumentError,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    TransientStoreError,
)

pytest.importorskip("obstore")

from s3log.store.gcs import AsyncGCSStore, GCSStore

BUCKET = "s3log-logs"
#: What the stores authenticate with: a static token, so obstore asks no metadata server.
CONFIG = {"bearer_token": "recorder-token"}


@dataclass(frozen=True)
class Seen:
    """One request the recorder received."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeGCS:
    """What the recorder holds: buckets, objects (body, generation), requests seen, and
    what it was told to do to the next replies."""

    buckets: set[str] = field(default_factory=lambda: {BUCKET})
    objects: dict[tuple[str, str], tuple[bytes, str]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    #: The next replies: (status, GCS error code), answered instead of the request.
    told: list[tuple[int, str]] = field(default_factory=list)
    #: Headers the next reply leaves out.
    omit: set[str] = field(default_factory=set)
    generations: Iterator[int] = field(default_factory=lambda: itertools.count(1_700_000_000_000_001))
    lock: threading.Lock = field(default_factory=threading.Lock)
    endpoint: str = ""

    def generation(self, key: str) -> str:
        """The generation ``key`` has in the bucket."""
        return self.objects[(BUCKET, key)][1]


def _error(code: str) -> bytes:
    return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>recorded {code}</Message><Details>told</Details></Error>").encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            if name not in self.server.fake.omit:
                self.send_header(name, value)
        self.server.fake.omit.clear()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        bucket, _, key = parts.path.lstrip("/").partition("/")
        with fake.lock:
            fake.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            if fake.told:
                status, code = fake.told.pop(0)
                return self._reply(status, _error(code))
            bucket = unquote(bucket)  # obstore escapes more than it must ('-' as %2D)
            if bucket not in fake.buckets:
                return self._reply(404, _error("NoSuchBucket"))
            if not key:
                return self._list(bucket, parse_qs(parts.query))
            self._object(bucket, unquote(key), body)

    def _object(self, bucket: str, key: str, body: bytes) -> None:
        fake = self.server.fake
        found = fake.objects.get((bucket, key))
        if self.command == "PUT":
            wanted = self.headers.get("x-goog-if-generation-match")
            if wanted is not None and wanted != (found[1] if found else "0"):
                return self._reply(412, _error("PreconditionFailed"))
            generation = str(next(fake.generations))
            fake.objects[(bucket, key)] = (body, generation)
            return self._reply(200, headers={"ETag": f'"{hashlib.md5(body).hexdigest()}"',
                                             "x-goog-generation": generation})
        if found is None:
            return self._reply(404, _error("NoSuchKey"))
        if self.command == "DELETE":
            del fake.objects[(bucket, key)]
            return self._reply(204)
        return self._reply(200, found[0], {
            "ETag": f'"{hashlib.md5(found[0]).hexdigest()}"', "x-goog-generation": found[1],
            "Last-Modified": formatdate(usegmt=True)})

    def _list(self, bucket: str, query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        after = query.get("start-after", [""])[0]
        contents, prefixes = [], []
        for (b, key), (body, generation) in sorted(self.server.fake.objects.items()):
            if b != bucket or not key.startswith(prefix) or key <= after:
                continue
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = key[: cut + 1]
                if common not in prefixes:
                    prefixes.append(common)
                continue
            contents.append(f"<Contents><Key>{escape(key)}</Key><Generation>{generation}</Generation>"
                            f"<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                            f"<ETag>\"{hashlib.md5(body).hexdigest()}\"</ETag><Size>{len(body)}</Size></Contents>")
        common_xml = "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes)
        xml = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
               f"<Prefix>{escape(prefix)}</Prefix><IsTruncated>false</IsTruncated>{''.join(contents)}{common_xml}"
               "</ListBucketResult>")
        self._reply(200, xml.encode(), {"Content-Type": "application/xml"})

    do_GET = do_PUT = do_DELETE = do_POST = do_HEAD = _handle  # noqa: N815


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeGCS) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


@pytest.fixture(scope="module")
def recorder() -> Iterator[_Server]:
    """The recorder's server, listening on 127.0.0.1 for this module's tests."""
    server = _Server(FakeGCS())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake(recorder: _Server) -> FakeGCS:
    """The recorder, its state new for this test."""
    recorder.fake = FakeGCS(endpoint=f"http://127.0.0.1:{recorder.server_address[1]}")
    return recorder.fake


class Awaited:
    """An AsyncGCSStore's methods, each run to completion on the store's own event loop."""

    def __init__(self, store: AsyncGCSStore) -> None:
        self.inner = store
        self.requests = store.requests
        self.loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.inner, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))


@pytest.fixture(params=["sync", "async"])
def make(request: pytest.FixtureRequest, fake: FakeGCS) -> Iterator[Callable[..., Any]]:
    """Builds a store of the flavour (an async one behind blocking calls) for a bucket on the recorder."""
    loops: list[Awaited] = []

    def build(bucket: str = BUCKET) -> Any:
        if request.param == "sync":
            return GCSStore(bucket, endpoint=fake.endpoint, config=CONFIG)
        wrapped = Awaited(AsyncGCSStore(bucket, endpoint=fake.endpoint, config=CONFIG))
        loops.append(wrapped)
        return wrapped

    yield build
    for wrapped in loops:
        wrapped.loop.close()


def _sent(fake: FakeGCS, store: Any) -> list[Seen]:
    """The requests the recorder saw, checked against those the store counted: obstore
    resends nothing behind s3log's back."""
    assert store.requests.total == len(fake.seen)
    return fake.seen


# ------------------------------------------------------------------- conditional writes


def test_a_create_sends_generation_match_zero_and_returns_the_generation(
    make: Callable[..., Any], fake: FakeGCS
) -> None:
    store = make()
    etag = store.put_if_absent("t/a", b"body")
    (put,) = _sent(fake, store)
    assert (put.method, unquote(put.path)) == ("PUT", f"/{BUCKET}/t/a")
    assert put.headers["x-goog-if-generation-match"] == "0"
    assert put.headers["authorization"] == "Bearer recorder-token"
    assert etag == fake.generation("t/a")
    assert store.requests.snapshot() == {"GET": 0, "PUT": 1, "LIST": 0, "DELETE": 0}


@pytest.mark.parametrize("form", ["as-returned", "quoted"])
def test_a_replace_sends_the_generation_it_was_given(make: Callable[..., Any], fake: FakeGCS, form: str) -> None:
    store = make()
    first = store.put_if_absent("t/head", b"v1")
    given = first if form == "as-returned" else f'"{first}"'
    second = store.put_if_match("t/head", b"v2", given)
    replace = _sent(fake, store)[1]
    assert replace.method == "PUT" and replace.headers["x-goog-if-generation-match"] == first
    assert second == fake.generation("t/head") and second != first
    assert fake.objects[(BUCKET, "t/head")][0] == b"v2"


def test_a_412_is_precondition_failed_naming_the_key(make: Callable[..., Any], fake: FakeGCS) -> None:
    store = make()
    first = store.put_if_absent("t/head", b"v1")
    with pytest.raises(PreconditionFailed) as created:
        store.put_if_absent("t/head", b"again")
    store.put_if_match("t/head", b"v2", first)
    with pytest.raises(PreconditionFailed) as stale:
        store.put_if_match("t/head", b"v3", first)  # the generation replaced
    with pytest.raises(PreconditionFailed) as missing:
        store.put_if_match("t/gone", b"v", first)  # GCS says 412 for a missing object too
    for caught, key in ((created, "t/head"), (stale, "t/head"), (missing, "t/gone")):
        assert caught.value.key == key and caught.value.status == 412 and caught.value.code == "PreconditionFailed"
    assert [s.headers["x-goog-if-generation-match"] for s in _sent(fake, store)] == ["0", "0", first, first, first]
    assert fake.objects[(BUCKET, "t/head")][0] == b"v2"


@pytest.mark.parametrize("etag", ["0", '"0"', "", '"0123456789abcdef0123456789abcdef"', "-5", "12a",
                                  "99999999999999999999"])
def test_an_etag_that_is_no_generation_is_precondition_failed_with_nothing_sent(
    make: Callable[..., Any], fake: FakeGCS, etag: str
) -> None:
    """No version of the object has it; ``0`` would turn the replace into a create."""
    store = make()
    with pytest.raises(PreconditionFailed) as caught:
        store.put_if_match("t/head", b"v", etag)
    assert caught.value.key == "t/head" and caught.value.code == "NotAGeneration"
    assert _sent(fake, store) == [] and (BUCKET, "t/head") not in fake.objects


# ------------------------------------------------------------------------ reads, deletes


def test_get_returns_the_body_and_the_generation_as_the_etag(make: Callable[..., Any], fake: FakeGCS) -> None:
    store = make()
    first = store.put_if_absent("t/a", b"v1")
    second = store.put_if_match("t/a", b"v2", first)
    blob = store.get("t/a")
    assert blob.body == b"v2" and blob.etag == second == fake.generation("t/a")
    assert _sent(fake, store)[-1].method == "GET"


def test_a_missing_key_and_a_missing_bucket_are_told_apart(make: Callable[..., Any], fake: FakeGCS) -> None:
    store = make()
    with pytest.raises(ObjectNotFound) as no_key:
        store.get("t/missing")
    assert no_key.value.key == "t/missing" and no_key.value.code == "NoSuchKey" and no_key.value.status == 404
    store.delete("t/missing")  # deleting a missing key succeeds
    other = make("s3log-no-such-bucket")
    calls: list[Callable[[], object]] = [lambda: other.get("t/a"), lambda: other.put_if_absent("t/a", b"x"),
                                         lambda: other.list("t/"), lambda: other.delete("t/a")]
    for call in calls:
        with pytest.raises(StoreError) as no_bucket:
            call()
        # Fatal, not ObjectNotFound: a wrong bucket is not a missing session.
        assert type(no_bucket.value) is StoreError and no_bucket.value.code == "NoSuchBucket"
    assert store.requests.total + other.requests.total == len(fake.seen) == 6


def test_delete_if_match_is_refused_before_any_request(make: Callable[..., Any], fake: FakeGCS) -> None:
    store = make()
    with pytest.raises(ConditionalDeleteUnsupported):
        store.delete_if_match("t/a", "1700000000000001")
    assert fake.seen == [] and store.requests.total == 0


def test_a_listing_has_the_keys_and_no_etags(make: Callable[..., Any], fake: FakeGCS) -> None:
    """obstore keeps no generation from a listing: its objects carry no ETag, rather than
    one that no conditional request takes (docs/stores.md)."""
    store = make()
    for key in ("t/a", "t/b/1", "t/c", "u"):
        store.put_if_absent(key, key.encode())
    page = store.list("t/")
    assert [(o.key, o.size, o.etag) for o in page.objects] == [("t/a", 3, ""), ("t/b/1", 5, ""), ("t/c", 3, "")]
    folded = store.list("t/", delimiter="/")
    assert [o.key for o in folded.objects] == ["t/a", "t/c"] and folded.prefixes == ["t/b/"]
    lists = [s for s in _sent(fake, store) if s.method == "GET"]
    assert len(lists) == 2 and all("list-type=2" in s.path for s in lists)
    assert store.requests["LIST"] == 2


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(("status", "code", "error"), [
    (429, "SlowDown", TransientStoreError), (503, "ServiceUnavailable", TransientStoreError),
    (500, "InternalError", TransientStoreError), (403, "AccessDenied", StoreError),
])
@pytest.mark.parametrize("method", ["put_if_absent", "put_if_match", "get", "list", "delete"])
def test_error_replies_map_to_the_contracts_errors_keeping_the_code(
    make: Callable[..., Any], fake: FakeGCS, method: str, status: int, code: str, error: type[StoreError]
) -> None:
    store = make()
    generation = store.put_if_absent("t/a", b"v1")
    fake.told.append((status, code))
    call: dict[str, Callable[[], object]] = {
        "put_if_absent": lambda: store.put_if_absent("t/b", b"x"), "put_if_match": lambda: store.put_if_match(
            "t/a", b"v2", generation), "get": lambda: store.get("t/a"), "list": lambda: store.list("t/"),
        "delete": lambda: store.delete("t/a")}
    with pytest.raises(StoreError) as caught:
        call[method]()
    assert (type(caught.value) is StoreError) if error is StoreError else isinstance(caught.value, error)
    assert caught.value.code == code and caught.value.status == status
    assert len(_sent(fake, store)) == 2  # one request each: obstore's retries are off


@pytest.mark.parametrize(("header", "write", "error", "code"), [
    ("x-goog-generation", True, TransientStoreError, "MissingGeneration"),
    ("x-goog-generation", False, StoreError, "MissingGeneration"),
    ("ETag", True, TransientStoreError, "MissingETag"),
    ("ETag", False, StoreError, "MissingETag"),
    ("Last-Modified", False, StoreError, "MissingLastModified"),
])
def test_a_reply_without_a_header_obstore_needs_is_a_store_error(
    make: Callable[..., Any], fake: FakeGCS, header: str, write: bool, error: type[StoreError], code: str
) -> None:
    """After a write, the outcome is unknown (it was applied); after a read, the server cannot be used."""
    store = make()
    if not write:
        store.put_if_absent("t/a", b"v1")
    fake.omit.add(header)
    with pytest.raises(StoreError) as caught:
        store.put_if_absent("t/b", b"x") if write else store.get("t/a")
    assert type(caught.value) is error and caught.value.code == code
    if write:
        assert fake.objects[(BUCKET, "t/b")][0] == b"x"
    _sent(fake, store)


# ------------------------------------------------------------------- checked arguments


@pytest.mark.parametrize("bucket", [
    None, 5, "", "ab", "Logs", "gs://logs", "logs/prefix", "-logs", "logs-", "my bucket", "a..b", "a" * 64,
    ".".join(["a" * 63] * 4), "192.168.1.10", "goog-logs", "my-google-logs", "arn:aws:s3:::logs",
])
def test_a_bad_bucket_name_is_refused_before_a_client_is_built(
    bucket: object, fake: FakeGCS, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore.store

    def no_client(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a client was built")

    monkeypatch.setattr(obstore.store, "GCSStore", no_client)
    for kind in (GCSStore, AsyncGCSStore):
        with pytest.raises(InvalidArgumentError, match="bucket"):
            kind(bucket, endpoint=fake.endpoint, config=CONFIG)  # type: ignore[arg-type]
    assert fake.seen == []


@pytest.mark.parametrize("bucket", ["abc", "my_logs-1", "a.b.c", "a" * 63, ".".join(["a" * 63] * 3)])
def test_every_form_of_gcs_bucket_name_makes_a_store(bucket: str, fake: FakeGCS) -> None:
    assert GCSStore(bucket, endpoint=fake.endpoint, config=CONFIG).bucket == bucket


def test_an_endpoint_that_is_no_url_is_refused_naming_it() -> None:
    with pytest.raises(InvalidArgumentError, match="endpoint"):
        GCSStore(BUCKET, endpoint="localhost:4443", config=CONFIG)


def test_a_key_obstore_would_rewrite_is_refused_unsent(make: Callable[..., Any], fake: FakeGCS) -> None:
    store = make()
    for call in (lambda: store.put_if_absent("t/a/", b"x"), lambda: store.put_if_match("/t/a", b"x", "17"),
                 lambda: store.get("t//a"), lambda: store.delete("t/../a")):
        with pytest.raises(InvalidArgumentError, match="cannot be stored exactly"):
            call()
    assert fake.seen == [] and store.requests.total == 0


def test_gcs_is_neither_exported_nor_opened_by_url() -> None:
    """Not supported, so not offered: no s3log.GCSStore and no gs:// URL."""
    assert not hasattr(s3log, "GCSStore") and not hasattr(s3log, "AsyncGCSStore")
    from s3log.urls import InvalidURLError

    with pytest.raises(InvalidURLError, match="unknown scheme"):
        s3log.open_log("gs://logs/prefix")
