"""Google Cloud Storage through obstore: :class:`GCSStore` and :class:`AsyncGCSStore`.

NOT SUPPORTED: these stores never ran against GCS, nor against an emulator that
honours generation preconditions (none that installs here does: docs/stores.md,
"Google Cloud Storage: not supported", and docs/decisions/0047). They are not
exported from :mod:`s3log`, ``open_log`` has no ``gs://`` scheme, and the contract
suite runs on them only against an emulator named by ``S3LOG_TEST_GCS_ENDPOINT``.
What does run is a check of the requests they send (tests/test_store_gcs.py).

GCS conditions a write on the object's *generation*, not its ETag. obstore's GCS
client (the XML API, path-style: ``BASE/BUCKET/KEY``) sends
``x-goog-if-generation-match: 0`` for ``mode="create"`` and
``x-goog-if-generation-match: GENERATION`` for ``mode={"version": GENERATION}``, and
reads the generation from the reply's ``x-goog-generation``. So the contract's ETag
token here is the generation (obstore's ``version``): ``put_if_absent``,
``put_if_match`` and ``get`` return it, and ``put_if_match`` takes it back:

- an ETag that is no generation (a positive whole number) is an ETag no version of
  the object has: PreconditionFailed, with nothing sent (``0`` would make the PUT a
  create, which ``put_if_match`` must never be);
- obstore 0.12 does not read the generation from a listing (GCS lists it, obstore
  keeps only the MD5 ETag, which no condition here takes): a listing's objects carry
  no ETag (``""``), so gc leaves dangling fork markers alone (decision 0008);
- a 412 is PreconditionFailed (a stale generation, a create on an existing object, and
  a generation on a missing object alike, as on Azure); ``NoSuchBucket`` is fatal;
  ``NoSuchKey`` is ObjectNotFound; 429 and 5xx (``SlowDown``...) are transient: GCS's
  XML errors carry S3's codes, so the shared mapping applies to them as they are;
- obstore has no conditional DELETE: ``delete_if_match`` raises
  :class:`~s3log.errors.ConditionalDeleteUnsupported`, sending nothing; a DELETE of a
  missing object succeeds;
- in a forked child the store raises :class:`~s3log.errors.StoreForkedError` (no
  boto3 stands in for GCS).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from s3log._extras import require
from s3log._protocol.ops import Blob, ListPage
from s3log.errors import InvalidArgumentError, ObjectNotFound, PreconditionFailed, StoreError, TransientStoreError
from s3log.store import _obstore_common as common
from s3log.store._checks import check_bucket, check_endpoint
from s3log.store.base import RequestCounter, checked_etag, forked_error, precondition_scope
from s3log.store.obstore import AsyncObstoreStore, ObstoreStore

if TYPE_CHECKING:
    from s3log.store.s3 import S3Store

#: GCS's own endpoint, where obstore sends without ``endpoint`` (or ``GOOGLE_BASE_URL``).
GCS_BASE_URL = "https://storage.googleapis.com"

# A GCS bucket name: lowercase letters, digits, '-', '_' and '.', starting and ending
# with a letter or digit; 3 to 63 characters, or up to 222 with dots, 63 between dots.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
# A generation: a positive 64-bit whole number (GCS's are microseconds since the epoch).
_GENERATION = re.compile(r"[1-9][0-9]{0,18}")
_GENERATION_MAX = 2**63 - 1


def check_gcs_bucket(name: object) -> str:
    """``name``, if GCS can have a bucket of that name; else InvalidArgumentError naming bucket.

    The rules that apply everywhere first (:func:`~s3log.store._checks.check_bucket`:
    a URL or a key prefix is named as such), then GCS's naming rules.
    """
    bucket = check_bucket(name)
    parts = bucket.split(".")
    if (not _BUCKET.fullmatch(bucket) or len(bucket) > (222 if len(parts) > 1 else 63)
            or any(not 1 <= len(p) <= 63 for p in parts)):
        raise InvalidArgumentError(
            "bucket", f"{bucket!r} is not a GCS bucket name (3 to 63 lowercase letters, digits, '-' and '_', "
            "or up to 222 with dots between parts of at most 63; starting and ending with a letter or digit)")
    if _is_ip_address(bucket):
        raise InvalidArgumentError("bucket", f"{bucket!r} is not a GCS bucket name (an IP address)")
    if bucket.startswith("goog") or "google" in bucket:
        raise InvalidArgumentError("bucket", f"{bucket!r} is not a GCS bucket name (GCS reserves 'goog' and 'google')")
    return bucket


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def generation_of(reply: Any, key: str, *, write: bool) -> str:
    """The generation (obstore's ``version``) of a put result or a get result's meta.

    A reply without ``x-goog-generation`` leaves nothing to replace the object on:
    after a write, an unknown outcome (TransientStoreError: it was applied); after a
    read, a server this store cannot use (StoreError); both with code MissingGeneration.
    """
    found = reply.get("version") if hasattr(reply, "get") else None
    if isinstance(found, str) and _GENERATION.fullmatch(found):
        return found
    if write:
        raise TransientStoreError("the write's reply carried no generation (x-goog-generation): it may have "
                                  "been applied", key=key, code="MissingGeneration")
    raise StoreError("the reply carried no generation (x-goog-generation): the object cannot be replaced "
                     "conditionally", key=key, code="MissingGeneration")


def update_mode(key: str, etag: str) -> dict[str, str]:
    """obstore's ``mode`` for a PUT conditioned on the generation ``etag`` (quotes are not
    significant); PreconditionFailed, before anything is sent, for one that is no
    generation: no version of the object has it."""
    generation = etag.strip('"') if isinstance(etag, str) else ""
    if not _GENERATION.fullmatch(generation) or int(generation) > _GENERATION_MAX:
        raise PreconditionFailed(
            f"{etag!r} is no GCS generation (a positive whole number): no version of the object has it, "
            "nothing was sent", key=key, code="NotAGeneration")
    # obstore's GCS client conditions on ``version`` alone (and refuses e_tag=None).
    return {"version": generation}


def map_gcs_error(exc: BaseException, key: str, *, write: bool = True) -> StoreError:
    """Translate an obstore exception from GCS's XML API into s3log's store errors.

    GCS's XML error replies carry S3's codes (``PreconditionFailed``, ``NoSuchKey``,
    ``NoSuchBucket``, ``SlowDown``...), so the obstore mapping
    (:func:`~s3log.store._obstore_common.map_error`, the status and code of the reply)
    applies, keeping GCS's code. A reply obstore refuses for a missing header is this
    store's error, not a transient one: no ``ETag`` is
    :func:`~s3log.store.base.checked_etag`'s (``write``: the request was a PUT), no
    ``Last-Modified`` on a GET a fatal StoreError.
    """
    if isinstance(exc, StoreError):
        return exc
    text = str(exc)
    if "ETag Header missing" in text:
        try:
            checked_etag(None, key, write=write)
        except StoreError as missing:
            return missing
    if "Last-Modified Header missing" in text:
        return StoreError("the reply carried no Last-Modified: obstore cannot read the object",
                          key=key, code="MissingLastModified")
    return common.map_error(exc, key)


def make_gcs_client(
    bucket: str,
    *,
    endpoint: str | None = None,
    config: dict[str, Any] | None = None,
    timeout: timedelta = timedelta(seconds=30),
    connect_timeout: timedelta = timedelta(seconds=5),
) -> Any:
    """An ``obstore.store.GCSStore`` for ``bucket``, obstore's retries off.

    Credentials come from ``config`` (obstore's GCSConfig: ``service_account``,
    ``service_account_key``, ``application_credentials``, ``bearer_token``...) or the
    ``GOOGLE_*`` variables obstore reads; ``endpoint`` is obstore's ``base_url``, which
    replaces ``https://storage.googleapis.com`` (an emulator's URL; an emulator also
    needs ``config={"bearer_token": ...}``: without credentials obstore asks the
    metadata server for a token before a write).
    """
    rust_store = require("obstore.store", "fast").GCSStore
    kwargs: dict[str, Any] = dict(config or {})
    client_options: dict[str, Any] = {"timeout": timeout, "connect_timeout": connect_timeout}
    if endpoint:
        kwargs["base_url"] = endpoint
    if str(kwargs.get("base_url", "")).startswith("http://"):
        client_options["allow_http"] = True
    retry: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=30)}
    options: Any = client_options
    return rust_store(bucket, client_options=options, retry_config=retry, **kwargs)


class _GCSParts:
    """What both GCS stores add to the obstore stores."""

    bucket: str
    client: Any
    requests: RequestCounter
    # As in the obstore stores; never set here (no boto3 stands in for GCS).
    _resolved: tuple[str | None, str] | None
    _boto: S3Store | None

    def _setup(self, bucket: str, endpoint: str | None, config: dict[str, Any] | None, client: Any) -> None:
        self.bucket = check_gcs_bucket(bucket)
        check_endpoint(endpoint, "endpoint")
        base = endpoint or str((config or {}).get("base_url") or os.environ.get("GOOGLE_BASE_URL") or GCS_BASE_URL)
        self.precondition_scope = precondition_scope("obstore-gcs", bucket, base, None) if client is None else None
        self.client = client if client is not None else make_gcs_client(bucket, endpoint=endpoint, config=config)
        self.requests = RequestCounter()
        self._resolved = None
        self._boto = None

    def _stand_in(self) -> None:
        """None; in a process forked after obstore sent requests, StoreForkedError (nothing
        sent): obstore cannot send there, and nothing else speaks to GCS for s3log."""
        started_in = common.runtime_started_in()
        if started_in is not None:
            raise forked_error(f"obstore (the GCS client of {self!r})", started_in)

    def _error(self, exc: BaseException, key: str, *, write: bool = True) -> StoreError:
        return map_gcs_error(exc, key, write=write)

    def _before(self, key: str, kind: str) -> None:
        """The key checked, the fork noticed, then the request counted (in that order:
        a refused call counts nothing)."""
        common.check_key(key)
        self._stand_in()
        self.requests.add(kind)


def without_etags(page: ListPage) -> ListPage:
    """``page`` with no ETag on its objects: obstore's GCS listing has no generation."""
    return ListPage([replace(o, etag="") for o in page.objects], page.prefixes, page.next_token)


class GCSStore(_GCSParts, ObstoreStore):
    """A bucket of Google Cloud Storage through obstore, blocking (the ``fast`` extra).

    Not supported: never run against GCS or an emulator that honours generations
    (docs/stores.md). ``GCSStore("logs", config={"service_account": "/key.json"})``,
    or credentials from the ``GOOGLE_*`` variables; ``endpoint`` replaces
    ``https://storage.googleapis.com``. The ETags it returns and takes are generations.
    """

    def __init__(self, bucket: str, *, endpoint: str | None = None, config: dict[str, Any] | None = None,
                 client: Any = None) -> None:
        self._setup(bucket, endpoint, config, client)

    def get(self, key: str) -> Blob:
        """Return the object's body, its generation as the ETag."""
        import obstore

        self._before(key, "GET")
        try:
            result = obstore.get(self.client, key)
            return Blob(bytes(result.bytes()), generation_of(result.meta, key, write=False))
        except Exception as exc:
            raise self._error(exc, key, write=False) from exc

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists (``x-goog-if-generation-match: 0``); return its generation."""
        import obstore

        self._before(key, "PUT")
        try:
            return generation_of(obstore.put(self.client, key, body, mode="create"), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its generation is ``etag``; return the new generation."""
        import obstore

        common.check_key(key)
        mode: Any = update_mode(key, etag)
        self._before(key, "PUT")
        try:
            return generation_of(obstore.put(self.client, key, body, mode=mode), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order, their ETags empty (see the module)."""
        return without_etags(super().list(prefix, delimiter=delimiter, token=token, max_keys=max_keys,
                                          start_after=start_after))

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        with contextlib.suppress(ObjectNotFound):
            super().delete(key)


class AsyncGCSStore(_GCSParts, AsyncObstoreStore):
    """A bucket of Google Cloud Storage through obstore, awaited (see :class:`GCSStore`).

    Not supported: never run against GCS or an emulator that honours generations.
    """

    def __init__(self, bucket: str, *, endpoint: str | None = None, config: dict[str, Any] | None = None,
                 client: Any = None) -> None:
        self._setup(bucket, endpoint, config, client)

    async def get(self, key: str) -> Blob:
        """Return the object's body, its generation as the ETag."""
        import obstore

        self._before(key, "GET")
        try:
            result = await obstore.get_async(self.client, key)
            return Blob(bytes(await result.bytes_async()), generation_of(result.meta, key, write=False))
        except Exception as exc:
            raise self._error(exc, key, write=False) from exc

    async def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists (``x-goog-if-generation-match: 0``); return its generation."""
        import obstore

        self._before(key, "PUT")
        try:
            return generation_of(await obstore.put_async(self.client, key, body, mode="create"), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    async def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its generation is ``etag``; return the new generation."""
        import obstore

        common.check_key(key)
        mode: Any = update_mode(key, etag)
        self._before(key, "PUT")
        try:
            return generation_of(await obstore.put_async(self.client, key, body, mode=mode), key, write=True)
        except Exception as exc:
            raise self._error(exc, key) from exc

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """Awaited, as :meth:`GCSStore.list`: one page of keys, their ETags empty."""
        return without_etags(await super().list(prefix, delimiter=delimiter, token=token, max_keys=max_keys,
                                                start_after=start_after))

    async def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        with contextlib.suppress(ObjectNotFound):
            await super().delete(key)
