"""Azure Blob Storage through obstore: :class:`AzureStore` and :class:`AsyncAzureStore`.

The obstore stores' requests (``mode="create"`` sends ``If-None-Match: *``,
``mode={"e_tag": ...}`` sends ``If-Match``), with what Azure answers differently
mapped onto the store contract (docs/stores.md, docs/decisions/0047):

- a create-only PUT on an existing blob is a 409 ``BlobAlreadyExists``: PreconditionFailed;
- an ``If-Match`` PUT on a missing blob is a 412 ``ConditionNotMet``, as on a stale
  ETag (S3 says 404): PreconditionFailed, after which s3log re-reads the head and
  finds it gone;
- ``ContainerNotFound`` is fatal, as S3's ``NoSuchBucket``;
- obstore deletes through a blob batch, which reports a missing blob as an error: a
  DELETE of a missing key succeeds, as the contract says;
- obstore 0.12 has no conditional DELETE: ``delete_if_match`` raises
  :class:`~s3log.errors.ConditionalDeleteUnsupported`, sending nothing.

Listing: obstore asks Azure for blobs after an offset with ``startFrom``, which the
Azurite emulator ignores, so a listing here never pages by offset: each call lists
the prefix's folder whole (one request per 5,000 entries, as Azure pages), keeps the
keys that start with the prefix (after ``start_after``), in key order, and returns
them in one page with no token. It is its own module because none of the S3
fallbacks apply: a forked process cannot send through obstore, and there is no
boto3 to stand in (:class:`~s3log.errors.StoreForkedError`).
"""

from __future__ import annotations

import contextlib
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from s3log._extras import require
from s3log._protocol.ops import ListPage, ObjectInfo
from s3log.errors import InvalidArgumentError, ObjectNotFound, StoreError
from s3log.store import _obstore_common as common
from s3log.store._checks import check_endpoint
from s3log.store.base import RequestCounter, checked_etag, error_for_status, forked_error, precondition_scope
from s3log.store.obstore import AsyncObstoreStore, ObstoreStore

if TYPE_CHECKING:
    from s3log.store.s3 import S3Store

#: Azure returns at most this many entries (blobs and prefixes) per List Blobs request.
AZURE_PAGE = 5000

#: Azure error codes, as the S3 code the shared mapping (error_for_status) knows.
_AS_S3 = {
    "BlobAlreadyExists": "PreconditionFailed",  # 409 to If-None-Match: * on an existing blob
    "ConditionNotMet": "PreconditionFailed",
    "ContainerNotFound": "NoSuchBucket",
    "ContainerBeingDeleted": "NoSuchBucket",
    "BlobNotFound": "NoSuchKey",
    "ServerBusy": "SlowDown",
    "OperationTimedOut": "RequestTimeout",
}
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(r"<Message>([^<\n]*)")
_REQUEST_ID = re.compile(r"RequestId:([0-9A-Za-z-]+)")
#: A failed blob-batch DELETE: obstore keeps the sub-reply's message and status, not its code.
_BATCH = re.compile(r"Bulk delete request failed for key .*?: (.*) \(code: (\d{3})\)")
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")


def map_azure_error(exc: BaseException, key: str, *, write: bool = True) -> StoreError:
    """Translate an obstore exception from Azure into s3log's store errors.

    The status and Azure error code of the reply decide, through the mapping every
    HTTP store shares (:func:`~s3log.store.base.error_for_status`); the error keeps
    Azure's code. Without a reply, the obstore mapping applies. obstore's Azure client
    refuses a reply without an ETag itself: that is
    :func:`~s3log.store.base.checked_etag`'s error (``write``: the request was a PUT).
    """
    if isinstance(exc, StoreError):
        return exc
    text = str(exc)
    if "ETag Header missing" in text:
        try:
            checked_etag(None, key, write=write)
        except StoreError as missing:
            return missing
    status = _STATUS.search(text)
    batch = _BATCH.search(text)
    if status is None and batch is None:
        return common.map_error(exc, key)
    if status is not None:
        found = _CODE.search(text)
        code = found.group(1) if found else ""
        said = _MESSAGE.search(text)
        message = said.group(1).strip() if said else text.splitlines()[0]
        number = int(status.group(1))
    else:
        assert batch is not None
        message, number = batch.group(1), int(batch.group(2))
        code = ("ContainerNotFound" if "container" in message.lower() else "BlobNotFound") if number == 404 else ""
    rid = _REQUEST_ID.search(text)
    kind = type(error_for_status(number, _AS_S3.get(code, code), message, key=key))
    return kind(message or code or f"HTTP {number}", key=key, code=code or None, status=number,
                request_id=rid.group(1) if rid else None)


def make_azure_client(
    container: str,
    *,
    account: str | None = None,
    endpoint: str | None = None,
    config: dict[str, Any] | None = None,
    timeout: timedelta = timedelta(seconds=30),
    connect_timeout: timedelta = timedelta(seconds=5),
) -> Any:
    """An ``obstore.store.AzureStore`` for ``container``, obstore's retries off.

    Credentials come from ``config`` (obstore's AzureConfig: ``account_key``,
    ``sas_key``, ``token``...) or the ``AZURE_STORAGE_*`` variables obstore reads;
    ``account`` is the storage account, ``endpoint`` a URL that replaces
    ``https://{account}.blob.core.windows.net`` (an emulator's, say).
    """
    rust_store = require("obstore.store", "fast").AzureStore
    kwargs: dict[str, Any] = dict(config or {})
    client_options: dict[str, Any] = {"timeout": timeout, "connect_timeout": connect_timeout}
    if account:
        kwargs["account_name"] = account
    if endpoint:
        kwargs["endpoint"] = endpoint
        if endpoint.startswith("http://"):
            client_options["allow_http"] = True
    retry: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=30)}
    options: Any = client_options
    return rust_store(container, client_options=options, retry_config=retry, **kwargs)


def check_container(name: str) -> str:
    """``name``, if Azure can have a container of that name; else InvalidArgumentError."""
    if not isinstance(name, str) or not _CONTAINER.fullmatch(name):
        raise InvalidArgumentError(
            "container", f"{name!r} is not an Azure container name (3 to 63 lowercase letters, digits and "
            "single hyphens, starting and ending with a letter or digit)")
    return name


def whole_page(listed: list[Any], prefix: str, delimiter: str | None, start_after: str | None) -> ListPage:
    """The one page of a listing of ``prefix`` from every entry of its folder, plainly listed."""
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    for meta in sorted(listed, key=lambda m: str(m["path"])):
        key = str(meta["path"])
        if not key.startswith(prefix) or (start_after is not None and key <= start_after):
            continue
        cut = key.find("/", len(prefix)) if delimiter else -1
        if cut < 0:
            objects.append(common._info(meta))
        elif not prefixes or prefixes[-1] != key[: cut + 1]:
            prefixes.append(key[: cut + 1])
    return ListPage(objects, prefixes, None)


def delimited_page(result: Any, prefix: str, start_after: str | None) -> tuple[ListPage, str | None]:
    """The page of a delimited listing of ``prefix``'s folder, and the one common prefix
    (if any) that holds ``start_after``: whether it has keys after it takes another look."""
    objects = sorted((common._info(o) for o in result["objects"]), key=lambda o: o.key)
    folded = sorted(p if p.endswith("/") else p + "/" for p in result["common_prefixes"])
    after = start_after or ""
    holding = next((p for p in folded if p.startswith(prefix) and after.startswith(p)), None)
    return ListPage([o for o in objects if o.key.startswith(prefix) and o.key > after],
                    [p for p in folded if p.startswith(prefix) and p > after], None), holding


def pages_sent(entries: int) -> int:
    """List Blobs requests obstore sent for a listing of ``entries`` entries."""
    return max(1, -(-entries // AZURE_PAGE))


class _AzureParts:
    """What both Azure stores add to the obstore stores."""

    bucket: str
    requests: RequestCounter
    # As in the obstore stores; never set here (no boto3 stands in for Azure).
    _resolved: tuple[str | None, str] | None
    _boto: S3Store | None

    def _setup(self, container: str, account: str | None, endpoint: str | None, config: dict[str, Any] | None,
               client: Any) -> None:
        self.bucket = check_container(container)
        check_endpoint(endpoint, "endpoint")
        self.precondition_scope = (precondition_scope("obstore-azure", container, endpoint or account, None)
                                   if client is None else None)
        self.client = client if client is not None else make_azure_client(
            container, account=account, endpoint=endpoint, config=config)
        self.requests = RequestCounter()
        self._resolved = None
        self._boto = None

    def _stand_in(self) -> None:
        """None; in a process forked after obstore sent requests, StoreForkedError (nothing
        sent): obstore cannot send there, and nothing else speaks to Azure for s3log."""
        started_in = common.runtime_started_in()
        if started_in is not None:
            raise forked_error(f"obstore (the Azure client of {self!r})", started_in)

    def _error(self, exc: BaseException, key: str, *, write: bool = True) -> StoreError:
        return map_azure_error(exc, key, write=write)

    def _folder(self, prefix: str, delimiter: str | None, token: str | None, max_keys: int) -> str | None:
        """The folder a listing of ``prefix`` lists (arguments checked), its first LIST counted."""
        folder, _, _ = common.check_list(prefix, delimiter, token, max_keys)
        self._stand_in()
        self.requests.add("LIST")
        return folder

    def _delimited(self, result: Any, prefix: str, start_after: str | None) -> tuple[ListPage, str | None]:
        """The page of a delimited listing, its requests counted, and the common prefix
        holding ``start_after`` if any (the LIST that looks into it counted too)."""
        self.requests.add("LIST", pages_sent(len(result["objects"]) + len(result["common_prefixes"])) - 1)
        page, holding = delimited_page(result, prefix, start_after)
        if holding is not None:
            self.requests.add("LIST")
        return page, holding

    def _whole(self, listed: list[Any], prefix: str, start_after: str | None, page: ListPage | None = None,
               holding: str = "") -> ListPage:
        """The page of a plain listing of every entry in ``listed`` (its requests counted),
        or, given the delimited ``page``, that page with ``holding`` if it has a key after
        ``start_after``."""
        self.requests.add("LIST", pages_sent(len(listed)) - 1)
        if page is None:
            return whole_page(listed, prefix, None, start_after)
        return _with_holding(page, holding, listed, start_after)


class AzureStore(_AzureParts, ObstoreStore):
    """A container of Azure Blob Storage through obstore, blocking (the ``fast`` extra).

    ``AzureStore("logs", account="myaccount")`` with the key or token in the
    ``AZURE_STORAGE_*`` variables, or in ``config`` (obstore's AzureConfig keys).
    """

    def __init__(self, container: str, *, account: str | None = None, endpoint: str | None = None,
                 config: dict[str, Any] | None = None, client: Any = None) -> None:
        self._setup(container, account, endpoint, config, client)

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """Every key under ``prefix`` in one page, in key order (after ``start_after`` if given)."""
        import obstore

        folder = self._folder(prefix, delimiter, token, max_keys)
        try:
            if not delimiter:
                listed = [m for chunk in obstore.list(self.client, folder) for m in chunk]
                return self._whole(listed, prefix, start_after)
            page, holding = self._delimited(obstore.list_with_delimiter(self.client, folder), prefix, start_after)
            if holding is None:
                return page
            inner = [m for chunk in obstore.list(self.client, holding) for m in chunk]
            return self._whole(inner, prefix, start_after, page, holding)
        except Exception as exc:
            raise self._error(exc, prefix) from exc

    def delete(self, key: str) -> None:
        """Delete the blob; a missing key is not an error."""
        with contextlib.suppress(ObjectNotFound):
            super().delete(key)


class AsyncAzureStore(_AzureParts, AsyncObstoreStore):
    """A container of Azure Blob Storage through obstore, awaited (see :class:`AzureStore`)."""

    def __init__(self, container: str, *, account: str | None = None, endpoint: str | None = None,
                 config: dict[str, Any] | None = None, client: Any = None) -> None:
        self._setup(container, account, endpoint, config, client)

    async def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """Awaited, as :meth:`AzureStore.list`: every key under ``prefix``, one page."""
        folder = self._folder(prefix, delimiter, token, max_keys)
        import obstore

        try:
            if not delimiter:
                listed = [m async for chunk in obstore.list(self.client, folder) for m in chunk]
                return self._whole(listed, prefix, start_after)
            found = await obstore.list_with_delimiter_async(self.client, folder)
            page, holding = self._delimited(found, prefix, start_after)
            if holding is None:
                return page
            inner = [m async for chunk in obstore.list(self.client, holding) for m in chunk]
            return self._whole(inner, prefix, start_after, page, holding)
        except Exception as exc:
            raise self._error(exc, prefix) from exc

    async def delete(self, key: str) -> None:
        """Delete the blob; a missing key is not an error."""
        with contextlib.suppress(ObjectNotFound):
            await super().delete(key)


def _with_holding(page: ListPage, holding: str, inner: list[Any], start_after: str | None) -> ListPage:
    """``page`` with the common prefix ``holding`` where it has a key after ``start_after``
    (S3 reports a common prefix only for keys after StartAfter)."""
    if not any(str(m["path"]) > (start_after or "") for m in inner):
        return page
    return ListPage(page.objects, sorted([*page.prefixes, holding]), None)
