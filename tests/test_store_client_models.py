"""The S3 stores build their clients without parsing botocore's models again.

botocore reads its JSON models (S3's, the endpoints, the partitions) through a loader of
each session, and every store that builds its own client makes a new session: the
sessions s3log makes share one loader per data path, so only the first client of a
process reads the files. Files read are counted, not time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from botocore.loaders import JSONFileLoader

import s3log
from s3log.testing.localserver import LocalS3


@pytest.fixture
def files_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model files botocore reads from now on."""
    read: list[str] = []
    load = JSONFileLoader.load_file

    def counted(self: JSONFileLoader, file_path: str) -> Any:
        read.append(file_path)
        return load(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counted)
    return read


def test_a_second_s3store_reads_no_model_file(s3log_server: LocalS3, files_read: list[str]) -> None:
    url = s3log_server.endpoint_url
    s3log.S3Store("one", endpoint_url=url).client.list_buckets()  # (the server in this process reads its own)
    files_read.clear()
    store = s3log.S3Store("two", endpoint_url=url)
    store.client.list_buckets()
    assert files_read == []


def test_a_second_async_s3store_reads_no_model_file(s3log_server: LocalS3, files_read: list[str]) -> None:
    async def open_client(bucket: str) -> None:
        store = s3log.AsyncS3Store(bucket, endpoint_url=s3log_server.endpoint_url)
        try:
            await store.list("")
        finally:
            await store.aclose()

    bucket = s3log_server.create_bucket()
    asyncio.run(open_client(bucket))
    files_read.clear()
    asyncio.run(open_client(bucket))
    assert files_read == []


def test_another_data_path_gets_a_loader_of_its_own(s3log_server: LocalS3, files_read: list[str],
                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    url = s3log_server.endpoint_url
    s3log.S3Store("one", endpoint_url=url)
    files_read.clear()
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    store = s3log.S3Store("two", endpoint_url=url)
    assert files_read != []  # its models came through a loader that searches tmp_path first
    assert str(tmp_path) in store.client._loader.search_paths


def test_a_callers_aiobotocore_session_keeps_its_own_loader(s3log_server: LocalS3) -> None:
    from aiobotocore.session import get_session

    session = get_session()
    own = session.get_component("data_loader")

    async def main() -> None:
        store = s3log.AsyncS3Store(s3log_server.create_bucket(), endpoint_url=s3log_server.endpoint_url,
                                   session=session)
        try:
            await store.list("")
        finally:
            await store.aclose()

    asyncio.run(main())
    assert session.get_component("data_loader") is own
