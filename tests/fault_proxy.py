"""A fault-injecting HTTP reverse proxy for the store tests (127.0.0.1 only).

It sits between an S3 client (boto3, aioboto3, obstore) and the local moto server
(or an Azure or GCS client and its emulator) and, per a scripted plan, answers a
matching request itself instead of forwarding it:

- ``Status(409, "ConditionalRequestConflict")``: an S3 XML error reply, nothing forwarded;
- ``Reset()``: read the request, then reset the connection without a reply;
- ``LandedThenLost()``: forward the request (it takes effect), then reset the
  connection instead of returning the reply;
- ``Stall(seconds)``: hold the request unanswered (the client times out), then reset;
- ``CutShort()``: forward the request, then reply with half the body and close;
- ``NoETag()``: forward the request and reply without the ETag header.

Every request seen is recorded (method, path, action), so a test can check the
number of HTTP requests a store sent against the requests it counted.

Bounded on purpose: bodies up to :data:`MAX_BODY` bytes, idle connections closed
after :data:`IDLE_TIMEOUT` seconds, at most :data:`MAX_CONNECTIONS` at once, stalls
capped at :data:`MAX_STALL` seconds.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape

MAX_BODY = 16 * 1024 * 1024
IDLE_TIMEOUT = 10.0
MAX_CONNECTIONS = 32
MAX_STALL = 5.0

#: Headers that describe one hop's framing, not the request: never forwarded as is.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                  "proxy-connection", "content-length"})


@dataclass(frozen=True)
class Status:
    """Answer with this HTTP status and an S3 XML error body with ``code``."""

    status: int
    code: str


@dataclass(frozen=True)
class Reset:
    """Reset the connection without forwarding the request (it never happened)."""


@dataclass(frozen=True)
class LandedThenLost:
    """Forward the request (it takes effect), then reset instead of replying."""


@dataclass(frozen=True)
class Stall:
    """Hold the request unanswered for ``seconds`` (the client's timeout fires), then reset."""

    seconds: float


@dataclass(frozen=True)
class CutShort:
    """Forward the request, then send the reply's status and headers and only the first
    half of its body, and close the connection (a reset if ``reset``). With
    ``declare_length`` the reply announces the whole body's Content-Length; without,
    it has none and ends where the connection does (a close-delimited body)."""

    declare_length: bool = True
    reset: bool = False


@dataclass(frozen=True)
class NoETag:
    """Forward the request and reply as the server did, minus its ETag header."""


Action = Status | Reset | LandedThenLost | Stall | CutShort | NoETag


@dataclass(frozen=True)
class Request:
    """What the proxy saw of one request."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def kind(self) -> str:
        """The s3log store method this request is: get, put_if_absent, put_if_match, list, delete,
        delete_if_match."""
        if self.method == "PUT":
            # GCS conditions on the generation: 0 creates, any other replaces that one.
            generation = self.headers.get("x-goog-if-generation-match")
            if "if-none-match" in self.headers or generation == "0":
                return "put_if_absent"
            if "if-match" in self.headers or generation is not None:
                return "put_if_match"
            return "put"
        path, _, query = self.path.partition("?")
        if self.method == "GET":
            # Path-style addressing: /bucket?list-type=2... lists, /bucket/key gets;
            # Azure (/account/container?...&comp=list) lists, /account/container/key gets.
            if "comp=list" in query.split("&"):
                return "list"
            return "list" if "list-type=" in query or path.strip("/").count("/") == 0 else "get"
        if self.method == "DELETE" and "if-match" in self.headers:
            return "delete_if_match"
        if self.method == "POST" and ("delete" in query.split("&") or "comp=batch" in query.split("&")):
            return "delete"  # DeleteObjects, or an Azure blob batch: obstore deletes one key this way
        return self.method.lower()


@dataclass
class Rule:
    """Inject ``action`` into the next ``times`` requests of ``kind`` (see :attr:`Request.kind`)."""

    kind: str
    action: Action
    times: int = 1


@dataclass
class Plan:
    """The scripted faults, consumed in order, and a record of every request."""

    rules: list[Rule] = field(default_factory=list)
    seen: list[tuple[str, str, Action | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, action: Action, times: int = 1) -> None:
        """Script ``action`` for the next ``times`` requests of ``kind``."""
        with self.lock:
            self.rules.append(Rule(kind, action, times))

    def take(self, req: Request) -> Action | None:
        """The action for ``req`` (None: forward it), recording the request."""
        with self.lock:
            action: Action | None = None
            for rule in self.rules:
                if rule.times > 0 and rule.kind == req.kind:
                    rule.times -= 1
                    action = rule.action
                    break
            self.seen.append((req.kind, req.path, action))
            return action

    def kinds(self) -> list[str]:
        """The kind of every request seen, in order."""
        with self.lock:
            return [k for k, _, _ in self.seen]

    def clear(self) -> None:
        """Forget the rules and the record."""
        with self.lock:
            self.rules.clear()
            self.seen.clear()


def _error_body(code: str, path: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>injected {code}</Message>"
        f"<Resource>{escape(path)}</Resource><RequestId>FAULTPROXY</RequestId></Error>"
    ).encode()


def _reset(sock: socket.socket) -> None:
    # SO_LINGER 0: close() sends a RST, so the client sees a reset, not a clean EOF.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    server: _Server

    def setup(self) -> None:
        super().setup()
        # A reply's headers and body are two writes: under Nagle's algorithm the body
        # would wait for the client's delayed ACK of the headers, 40 ms a reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a test run does not want every request on stderr

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("request body too large for the fault proxy")
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("request body too large for the fault proxy")
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._body()
        req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        action = self.server.plan.take(req)
        if isinstance(action, Status):
            payload = _error_body(action.code, self.path)
            self.send_response(action.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-amz-request-id", "FAULTPROXY")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        if isinstance(action, Reset):
            self._drop()
            return
        if isinstance(action, Stall):
            time.sleep(min(action.seconds, MAX_STALL))
            self._drop()
            return
        status, reason, headers, reply = self._forward(req, body)
        if isinstance(action, LandedThenLost):
            self._drop()
            return
        self.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP and not (isinstance(action, NoETag) and name.lower() == "etag"):
                self.send_header(name, value)
        if isinstance(action, CutShort):
            if action.declare_length:
                self.send_header("Content-Length", str(len(reply)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(reply[: len(reply) // 2])
            self.wfile.flush()
            if action.reset:
                _reset(self.connection)
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply)

    def _forward(self, req: Request, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        host, port = self.server.upstream
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            # Host is part of the SigV4 signature: forward it unchanged.
            conn.putrequest(req.method, req.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP:
                    conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            reply = resp.read()
            return resp.status, resp.reason, resp.getheaders(), reply
        finally:
            conn.close()

    def _drop(self) -> None:
        _reset(self.connection)
        self.close_connection = True

    def do_GET(self) -> None:
        self._handle()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET  # noqa: N815


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int], plan: Plan) -> None:
        self.upstream = upstream
        self.plan = plan
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # At most MAX_CONNECTIONS handler threads: a runaway client blocks, not the machine.
        self._slots.acquire()
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class FaultProxy:
    """The proxy, in a background thread. Use as a context manager or start/stop."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.plan = Plan()
        self._server = _Server((upstream_host, upstream_port), self.plan)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the proxy."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        """Serve in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
