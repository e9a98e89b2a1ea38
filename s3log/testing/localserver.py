"""An embedded local S3: moto's server on 127.0.0.1 with atomic conditional writes.

moto checks ``If-Match`` / ``If-None-Match`` and then writes, without a lock, so two
racing conditional PUTs can both succeed. :func:`make_moto_atomic` puts the check and
the write under one lock, which is what S3 guarantees and what s3log's commit relies
on. moto is imported only when a server starts (it is the ``local`` extra).
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

_atomic_lock = threading.RLock()
_patched = False


def make_moto_atomic() -> None:
    """Make moto's conditional PUTs (and DELETEs) atomic, as on S3. Idempotent."""
    global _patched
    with _atomic_lock:
        if _patched:
            return
        from s3log._extras import extra

        with extra("local"):
            from moto.s3.responses import S3Response

        for name in ("put_object", "delete_object", "copy_object"):
            original = getattr(S3Response, name)

            def locked(self: Any, *args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
                with _atomic_lock:
                    return __original(self, *args, **kwargs)

            functools.update_wrapper(locked, original)
            setattr(S3Response, name, locked)
        _patched = True


#: Credentials and region for talking to a local server (any value is accepted).
LOCAL_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class LocalS3:
    """moto's S3 server on 127.0.0.1 with atomic conditional writes.

    ``port=0`` picks a free port. Use as a context manager, or call start/stop.
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self._server: Any = None
        self._names = itertools.count()
        self._count_lock = threading.Lock()
        self._requests = 0

    def start(self) -> LocalS3:
        """Start the server and wait until it listens."""
        from s3log._extras import extra

        with extra("local"):
            # moto's S3 server: flask and flask-cors are imported when it starts.
            from moto.moto_server.werkzeug_app import create_backend_app  # noqa: F401
            from moto.server import ThreadedMotoServer

        make_moto_atomic()
        # werkzeug logs every request to stderr; a test run or a demo does not want that.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()
        self._count_requests()
        self.host, self.port = self._server.get_host_and_port()
        return self

    def _count_requests(self) -> None:
        """Wrap the WSGI app so every HTTP request the server answers is counted.

        A test can then prove that code under test reached this server (and not AWS).
        werkzeug looks ``server.app`` up per request, so replacing it takes effect at once.
        """
        wsgi: Any = getattr(self._server, "_server", None)
        inner = getattr(wsgi, "app", None)
        if inner is None:  # pragma: no cover - a moto without the attribute: no counting
            return

        def counted(environ: Any, start_response: Any) -> Any:
            with self._count_lock:
                self._requests += 1
            return inner(environ, start_response)

        wsgi.app = counted

    @property
    def request_count(self) -> int:
        """How many HTTP requests this server has answered since it started."""
        with self._count_lock:
            return self._requests

    def stop(self) -> None:
        """Stop the server."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and s3log) at this server.

        ``AWS_ENDPOINT_URL_S3`` too: boto3 prefers it to ``AWS_ENDPOINT_URL``, so one left
        set in the shell would otherwise win.
        """
        return {**LOCAL_ENV, "AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ENDPOINT_URL_S3": self.endpoint_url}

    def client(self) -> Any:
        """A boto3 S3 client for this server."""
        from s3log.store._s3common import boto3_session

        return boto3_session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name unless given); return its name."""
        bucket = name or f"s3log-test-{next(self._names)}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket
