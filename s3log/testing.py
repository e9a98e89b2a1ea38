"""The pytest plugin of s3log (registered through the ``pytest11`` entry point).

Fixtures:

- ``s3log_server``: a session-wide :class:`~s3log.localserver.LocalS3` (moto's server on
  127.0.0.1 with atomic conditional PUTs), credentials set in the environment;
- ``s3log_bucket``: a fresh bucket per test;
- ``s3log_store`` / ``s3log_log``: an :class:`~s3log.S3Store` and a :class:`~s3log.Log` on it;
- ``s3log_async_log``: an :class:`~s3log.AsyncLog` on an :class:`~s3log.AsyncS3Store`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from .localserver import LOCAL_ENV, LocalS3, make_moto_atomic

__all__ = ["LOCAL_ENV", "LocalS3", "make_moto_atomic"]


# ----------------------------------------------------------------------------- plugin


@pytest.fixture(scope="session")
def s3log_server() -> Iterator[LocalS3]:
    """A local S3 server for the whole test session, with credentials in the environment."""
    saved = {k: os.environ.get(k) for k in LOCAL_ENV}
    for k, v in LOCAL_ENV.items():
        os.environ.setdefault(k, v)
    server = LocalS3().start()
    try:
        yield server
    finally:
        server.stop()
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


@pytest.fixture
def s3log_bucket(s3log_server: LocalS3) -> str:
    """A fresh, empty bucket on the local server."""
    return s3log_server.create_bucket()


@pytest.fixture
def s3log_store(s3log_server: LocalS3, s3log_bucket: str) -> Any:
    """An :class:`~s3log.S3Store` on a fresh bucket of the local server."""
    from .store.s3 import S3Store

    return S3Store(s3log_bucket, endpoint_url=s3log_server.endpoint_url)


@pytest.fixture
def s3log_log(s3log_store: Any) -> Iterator[Any]:
    """A :class:`~s3log.Log` on a fresh bucket of the local server."""
    from .log import Log

    log = Log(s3log_store)
    yield log
    log.close()


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the async fixture needs pytest-asyncio
    pass
else:

    @pytest_asyncio.fixture
    async def s3log_async_log(s3log_server: LocalS3, s3log_bucket: str) -> AsyncIterator[Any]:
        """An :class:`~s3log.AsyncLog` on a fresh bucket of the local server."""
        from .aio import AsyncLog
        from .store.aio_s3 import AsyncS3Store

        store = AsyncS3Store(s3log_bucket, endpoint_url=s3log_server.endpoint_url)
        try:
            yield AsyncLog(store)
        finally:
            await store.aclose()
