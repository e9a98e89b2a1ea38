"""The store over boto3 (blocking)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from s3log._protocol.ops import Blob, ListPage
from s3log.store._checks import check_bucket, check_endpoint, check_region
from s3log.store._s3common import (
    CAUGHT,
    boto3_session,
    client_config,
    etag_of,
    list_page,
    list_params,
    map_error,
)
from s3log.store.base import ProcessClient, RequestCounter, resolved_scope

if TYPE_CHECKING:
    from s3log.store.obstore import ObstoreStore


class S3Store:
    """Amazon S3 (or any S3-compatible store) through boto3.

    Credentials and region come from the standard chain; ``AWS_ENDPOINT_URL`` /
    ``AWS_ENDPOINT_URL_S3`` point it at MinIO, moto or LocalStack. Pass ``client`` to
    use a client you configured yourself.

    A store addresses a bucket; the key prefix belongs to the log
    (``Log(store, prefix=...)``).
    """

    def __init__(
        self,
        bucket: str,
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        max_pool_connections: int = 64,
    ) -> None:
        self.bucket = check_bucket(bucket)
        check_endpoint(endpoint_url)
        check_region(region_name)
        #: What the precondition probe's result is remembered for (None: this object):
        #: the endpoint and region the client this store built resolved.
        self.precondition_scope: tuple[str, ...] | None = None
        build: Callable[[], Any] | None = None
        if client is None:
            kwargs: dict[str, Any] = {"config": client_config(max_pool_connections)}
            if endpoint_url:
                kwargs["endpoint_url"] = endpoint_url
            if region_name:
                kwargs["region_name"] = region_name

            def new_client() -> Any:
                # A session of its own: one made in a parent is not carried into a child.
                return boto3_session().client("s3", **kwargs)

            build = new_client
            client = build()
            self.precondition_scope = resolved_scope("boto3", bucket, client)
        # A forked child builds its own client (urllib3's pooled sockets are the parent's).
        self._client = ProcessClient(client, build, f"the boto3 client passed to {self!r}")
        self.requests = RequestCounter()

    @property
    def client(self) -> Any:
        """The boto3 client (this process's: a forked child sends through its own)."""
        return self._client.get(send=False)

    def __repr__(self) -> str:
        return f"S3Store(bucket={self.bucket!r})"

    @staticmethod
    def fast(bucket: str, **kwargs: Any) -> ObstoreStore:
        """The same store over obstore (Rust ``object_store``): lower latency per request."""
        from s3log.store.obstore import ObstoreStore

        return ObstoreStore(bucket, **kwargs)

    def get(self, key: str) -> Blob:
        """Return the object's body and ETag."""
        client = self._client.get()
        self.requests.add("GET")
        try:
            resp = client.get_object(Bucket=self.bucket, Key=key)
            body = resp["Body"].read()
        except CAUGHT as exc:
            raise map_error(exc, key) from exc
        return Blob(body, etag_of(resp, key, write=False))

    def put_if_absent(self, key: str, body: bytes) -> str:
        """Create the object unless it exists (``If-None-Match: *``); return its ETag."""
        client = self._client.get()
        self.requests.add("PUT")
        try:
            resp = client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
        except CAUGHT as exc:
            raise map_error(exc, key) from exc
        return etag_of(resp, key, write=True)

    def put_if_match(self, key: str, body: bytes, etag: str) -> str:
        """Replace the object if its ETag is ``etag`` (``If-Match``); return the new ETag."""
        client = self._client.get()
        self.requests.add("PUT")
        try:
            resp = client.put_object(Bucket=self.bucket, Key=key, Body=body, IfMatch=etag)
        except CAUGHT as exc:
            raise map_error(exc, key) from exc
        return etag_of(resp, key, write=True)

    def list(
        self, prefix: str, *, delimiter: str | None = None, token: str | None = None, max_keys: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """One page of keys under ``prefix``, in key order, after ``start_after`` (ListObjectsV2)."""
        client = self._client.get()
        self.requests.add("LIST")
        try:
            params = list_params(self.bucket, prefix, delimiter, token, max_keys, start_after)
            resp = client.list_objects_v2(**params)
        except CAUGHT as exc:
            raise map_error(exc, prefix) from exc
        return list_page(resp)

    def delete(self, key: str) -> None:
        """Delete the object; a missing key is not an error."""
        client = self._client.get()
        self.requests.add("DELETE")
        try:
            client.delete_object(Bucket=self.bucket, Key=key)
        except CAUGHT as exc:
            raise map_error(exc, key) from exc

    def delete_if_match(self, key: str, etag: str) -> None:
        """Delete the object if its ETag is ``etag`` (DeleteObject with ``If-Match``):
        PreconditionFailed if it differs, ObjectNotFound if the key is missing."""
        client = self._client.get()
        self.requests.add("DELETE")
        try:
            client.delete_object(Bucket=self.bucket, Key=key, IfMatch=etag)
        except CAUGHT as exc:
            raise map_error(exc, key) from exc
