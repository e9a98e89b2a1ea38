"""The precondition probe: a store that ignores If-None-Match / If-Match is refused before any write.

On such a store every guarantee would be void without a sound.
"""

from __future__ import annotations

import asyncio

import pytest

import s3log
from s3log.errors import PreconditionsIgnoredError, StoreError
from s3log.localserver import LocalS3
from s3log.store.memory import _etag


class HonestStore(s3log.MemoryStore):
    """A MemoryStore that does not vouch for itself, so the probe runs."""

    honours_preconditions = False


class IgnoresIfNoneMatch(HonestStore):
    def put_if_absent(self, key: str, body: bytes) -> str:
        self.requests.add("PUT")
        return self.put_raw(key, body)


class IgnoresIfMatch(HonestStore):
    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        self.requests.add("PUT")
        return self.put_raw(key, body)


@pytest.mark.parametrize(("store_type", "says"), [(IgnoresIfNoneMatch, "If-None-Match"), (IgnoresIfMatch, "If-Match")])
def test_a_store_ignoring_conditions_is_refused_before_anything_is_written(store_type: type, says: str) -> None:
    store = store_type()
    log = s3log.Log(store)
    with pytest.raises(PreconditionsIgnoredError, match=says):
        log.create("s1")
    assert not [k for k in store.all_keys() if "/_probe/" not in k]
    w = log.create("s2", lazy=True)
    w.append("k", 1)
    with pytest.raises(PreconditionsIgnoredError):
        w.commit()
    assert not [k for k in store.all_keys() if "/_probe/" not in k]
    report = log.check_store()
    assert not report.ok


def test_an_honest_store_is_probed_once_per_store_and_leaves_only_its_probe_object() -> None:
    store = HonestStore()
    log = s3log.Log(store, config=s3log.LogConfig(activity_index=False))
    log.create("a")
    first = store.requests.snapshot()
    assert first["PUT"] == 4  # probe: create, repeat (412), If-Match on a missing key (404); the head
    log.create("b")
    assert store.requests["PUT"] == first["PUT"] + 1  # no second probe
    s3log.Log(store, config=s3log.LogConfig(activity_index=False)).create("c")
    assert store.requests["PUT"] == first["PUT"] + 2  # nor for another Log over the same store
    # The probe's folder is no session: listings and gc skip it.
    assert sorted(log.list_session_ids()) == ["a", "b", "c"]
    assert log.gc(older_than_ms=0).broken == []
    keys = [k for k in store.all_keys() if "/_probe/" in k]
    assert keys == ["s3log/sessions/_probe/head"]
    assert _etag(b"") != ""


def test_the_probe_can_be_turned_off() -> None:
    store = IgnoresIfMatch()
    log = s3log.Log(store, config=s3log.LogConfig(verify_preconditions=False))
    log.create("x")  # the operator vouches for the store
    assert [k for k in store.all_keys() if "/sessions/" in k] == ["s3log/sessions/x/head"]


def test_the_probe_passes_on_the_local_http_s3(s3log_log: s3log.Log) -> None:
    report = s3log_log.check_store()
    assert report.ok and report.if_none_match and report.if_match


# ------------------------------------------------------------ once per bucket


def test_stores_made_anew_for_one_bucket_are_probed_once(s3log_server: LocalS3) -> None:
    # The demo (and a serverless handler that opens its store per invocation) paid the
    # probe's PUTs on every commit: it was remembered per store object only.
    bucket, ep = s3log_server.create_bucket(), s3log_server.endpoint_url
    cfg = s3log.LogConfig(activity_index=False)

    def puts(store: s3log.S3Store, sid: str) -> int:
        s3log.Log(store, config=cfg).create(sid)
        return store.requests["PUT"]

    first = s3log.S3Store(bucket, endpoint_url=ep)
    assert puts(first, "a") == 4  # create, repeat (412), If-Match on a missing key; the head
    assert puts(s3log.S3Store(bucket, endpoint_url=ep), "b") == 1  # the head alone
    # Another bucket is another answer; a store on a client of the caller's is probed itself.
    assert puts(s3log.S3Store(s3log_server.create_bucket(), endpoint_url=ep), "c") == 4
    assert puts(s3log.S3Store(bucket, client=first.client), "d") == 3


@pytest.mark.parametrize("kind", ["aioboto3", "obstore"])
def test_async_stores_made_anew_for_one_bucket_are_probed_once(s3log_server: LocalS3, kind: str) -> None:
    bucket, ep = s3log_server.create_bucket(), s3log_server.endpoint_url
    make = s3log.AsyncS3Store if kind == "aioboto3" else s3log.AsyncS3Store.fast
    cfg = s3log.LogConfig(activity_index=False)

    async def puts(sid: str) -> int:
        store = make(bucket, endpoint_url=ep)
        await s3log.AsyncLog(store, config=cfg).create(sid)
        if kind == "aioboto3":
            await store.aclose()
        return int(store.requests["PUT"])

    async def main() -> list[int]:
        return [await puts("a"), await puts("b")]

    assert asyncio.run(main()) == [4, 1]


def test_a_probe_that_could_not_tell_does_not_speak_for_its_scope() -> None:
    # A probe refused by the store (None: untested) lets its own store through with a
    # warning, but says nothing of the scope: the next store of it is probed again.
    class Denied(HonestStore):
        precondition_scope = ("memory", "denied")

        def put_if_match(self, key: str, body: bytes, etag: str) -> str:
            if "/_probe/" in key:
                self.requests.add("PUT")
                raise StoreError("access denied", key=key, code="AccessDenied", status=403)
            return super().put_if_match(key, body, etag)

    class Honest(HonestStore):
        precondition_scope = ("memory", "honest")

    cfg = s3log.LogConfig(activity_index=False)
    for store_type, probed in ((Denied, [True, True]), (Honest, [True, False])):
        seen = []
        for sid in ("a", "b"):
            store = store_type()
            s3log.Log(store, config=cfg).create(sid)
            seen.append(any("/_probe/" in k for k in store.all_keys()))
        assert seen == probed, store_type
