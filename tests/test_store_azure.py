"""AzureStore without a server: Azure's replies, as obstore words them, mapped onto the
store contract's errors; the listing's page count; container names refused up front.
(On Azurite: tests/test_store_contract.py and tests/test_store_servers.py.)"""

from __future__ import annotations

import pytest

from s3log.errors import (
    ConditionalRequestConflict,
    InvalidArgumentError,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    TransientStoreError,
)
from s3log.store.azure import AZURE_PAGE, check_container, map_azure_error, pages_sent

pytest.importorskip("obstore")


def _reply(status: int, code: str) -> Exception:
    # How obstore words an Azure error reply (its message keeps the status and the body).
    return Exception(
        f"Generic MicrosoftAzure error: Error performing PUT http://127.0.0.1/acct/c/k in 2ms - Server returned "
        f"non-2xx status code: {status} X: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n  <Code>{code}"
        f"</Code>\n  <Message>said {code}.\nRequestId:1234-abcd\nTime:2026-01-01T00:00:00Z</Message>\n</Error>")


@pytest.mark.parametrize(("status", "code", "error"), [
    (409, "BlobAlreadyExists", PreconditionFailed),  # If-None-Match: * on an existing blob
    (412, "ConditionNotMet", PreconditionFailed),  # a stale ETag, or (Azure) a missing blob
    (404, "BlobNotFound", ObjectNotFound),
    (404, "ContainerNotFound", StoreError),  # fatal: a wrong container is no missing session
    (409, "OperationAborted", ConditionalRequestConflict),
    (503, "ServerBusy", TransientStoreError),
    (500, "OperationTimedOut", TransientStoreError),
    (403, "AuthenticationFailed", StoreError),
])
def test_azure_replies_map_to_the_contracts_errors_keeping_azures_code(
    status: int, code: str, error: type[StoreError]
) -> None:
    mapped = map_azure_error(_reply(status, code), "k")
    assert type(mapped) is error
    assert (mapped.code, mapped.status, mapped.key, mapped.request_id) == (code, status, "k", "1234-abcd")


@pytest.mark.parametrize(("message", "error"), [
    ("The specified blob does not exist.", ObjectNotFound),
    ("The specified container does not exist.", StoreError),
])
def test_a_failed_batch_delete_is_told_apart_by_its_message(message: str, error: type[StoreError]) -> None:
    # obstore deletes through a blob batch and keeps only the sub-reply's message and status.
    exc = FileNotFoundError(f"Object at location k not found: Bulk delete request failed for key k: {message} "
                            "(code: 404)")
    assert type(map_azure_error(exc, "k")) is error


def test_a_reply_without_an_etag_is_unknown_after_a_write_and_fatal_after_a_read() -> None:
    exc = Exception("Generic MicrosoftAzure error: ETag Header missing from response")
    assert type(map_azure_error(exc, "k", write=True)) is TransientStoreError
    read = map_azure_error(exc, "k", write=False)
    assert type(read) is StoreError and read.code == "MissingETag"


def test_a_listing_counts_one_request_per_5000_entries() -> None:
    assert [pages_sent(n) for n in (0, 1, AZURE_PAGE, AZURE_PAGE + 1)] == [1, 1, 1, 2]


@pytest.mark.parametrize("name", ["ab", "Logs", "a--b", "-ab", "ab-", "a" * 64, "a_b"])
def test_a_container_azure_cannot_have_is_refused_before_anything_is_sent(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not an Azure container name"):
        check_container(name)
    assert check_container("s3log-logs-1") == "s3log-logs-1"
