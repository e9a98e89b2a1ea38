"""The pytest plugin of s3log (registered through the ``pytest11`` entry point).

Fixtures:

- ``s3log_server``: a session-wide :class:`~s3log.testing.localserver.LocalS3` (moto's server on
  127.0.0.1 with atomic conditional PUTs);
- ``s3log_bucket``: a fresh bucket per test, also in ``S3LOG_BUCKET``;
- ``s3log_store`` / ``s3log_log``: an :class:`~s3log.S3Store` and a :class:`~s3log.Log` on it;
- ``s3log_async_log``: an :class:`~s3log.AsyncLog` on an :class:`~s3log.AsyncS3Store`
  (needs pytest-asyncio).

While they are active, real AWS cannot be reached: :func:`sandbox_env` points
``AWS_ENDPOINT_URL`` and ``AWS_ENDPOINT_URL_S3`` at the local server and replaces
the credentials, region, profile and config files with fake ones, *overriding* what
the environment had. Code under test that builds its own client from the
environment (``s3log.S3Store(os.environ["S3LOG_BUCKET"])``, ``boto3.client("s3")``)
therefore talks to the local server. Everything is restored afterwards.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from s3log.testing.localserver import LOCAL_ENV, LocalS3, make_moto_atomic

__all__ = ["LOCAL_ENV", "LocalS3", "make_moto_atomic", "sandbox_env"]


def __getattr__(name: str) -> Any:
    # pytest loads this module in every run where s3log is installed (``pytest11``):
    # it imports nothing of s3log, moto or boto3 until a fixture or a name is used.
    if name in __all__:
        from s3log.testing import localserver

        return getattr(localserver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# Variables that could lead boto3 to other credentials or another endpoint: they are
# removed while a fixture is active (the environment's credentials take precedence
# over all of them anyway, but a test must not depend on that order).
_UNSET = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION",
)


def sandbox_env(server: LocalS3) -> dict[str, str | None]:
    """The environment under which nothing can reach real AWS: ``None`` means unset.

    The config and credentials files point at a path that does not exist, so no
    profile on the machine is read; instance metadata is off, so no role is found.
    """
    missing = os.path.join(tempfile.gettempdir(), "s3log-testing-no-such-dir", "none")
    env: dict[str, str | None] = {k: None for k in _UNSET}
    from s3log.testing.localserver import LOCAL_ENV

    env.update(server.env())
    env.update(
        {
            "AWS_REGION": LOCAL_ENV["AWS_DEFAULT_REGION"],
            "AWS_CONFIG_FILE": missing,
            "AWS_SHARED_CREDENTIALS_FILE": missing,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    return env


def _apply(mp: pytest.MonkeyPatch, env: Mapping[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            mp.delenv(key, raising=False)
        else:
            mp.setenv(key, value)
    # boto3's default session keeps the credentials it resolved first: drop it, so a
    # client built from the environment now sees the fake ones (and again after).
    boto3 = sys.modules.get("boto3")
    if boto3 is not None:
        mp.setattr(boto3, "DEFAULT_SESSION", None)


# ----------------------------------------------------------------------------- plugin


@pytest.fixture(scope="session")
def s3log_server() -> Iterator[LocalS3]:
    """A local S3 server for the whole test session; real AWS cannot be reached meanwhile."""
    from s3log.testing.localserver import LocalS3

    server = LocalS3().start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            _apply(mp, sandbox_env(server))
            yield server
    finally:
        server.stop()


@pytest.fixture
def s3log_bucket(s3log_server: LocalS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty bucket on the local server, also in ``S3LOG_BUCKET`` for this test.

    The sandbox environment is applied again for the test, in case an earlier test
    changed it without restoring it.
    """
    bucket = s3log_server.create_bucket()
    _apply(monkeypatch, sandbox_env(s3log_server))
    monkeypatch.setenv("S3LOG_BUCKET", bucket)
    return bucket


@pytest.fixture
def s3log_store(s3log_server: LocalS3, s3log_bucket: str) -> Any:
    """An :class:`~s3log.S3Store` on a fresh bucket of the local server."""
    from s3log.store.s3 import S3Store

    return S3Store(s3log_bucket, endpoint_url=s3log_server.endpoint_url)


@pytest.fixture
def s3log_log(s3log_store: Any) -> Iterator[Any]:
    """A :class:`~s3log.Log` on a fresh bucket of the local server."""
    from s3log.log import Log

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
        from s3log.aio import AsyncLog
        from s3log.store.aio_s3 import AsyncS3Store

        store = AsyncS3Store(s3log_bucket, endpoint_url=s3log_server.endpoint_url)
        try:
            yield AsyncLog(store)
        finally:
            await store.aclose()
