"""A delaying HTTP reverse proxy: every request waits a fixed time, then is forwarded.

It stands in for the round-trip time of a real object store in front of the local S3
(moto on 127.0.0.1, which answers in well under a millisecond of network time): a
client pointed at the proxy (``endpoint_url=proxy.endpoint_url``) sees each request
take ``delay_ms`` more, as it would against S3 from a machine in another zone.

The method, path, query and headers are forwarded unchanged, ``Host`` included, so a
SigV4 signature made for the proxy's endpoint is the one the upstream receives (moto
accepts it). Only the hop-by-hop framing headers are rewritten; bodies are buffered
(bounded by :data:`MAX_BODY`). One thread per client connection, each with its own
keep-alive connection upstream, so concurrent requests are delayed concurrently.

``python scripts/latency_proxy.py --upstream http://127.0.0.1:PORT --delay-ms 30``
prints ``http://127.0.0.1:PORT`` of the proxy on its first line and serves until
stopped (scripts/bench_scan.py runs it so, in a process of its own, so that the
proxy's work does not share the GIL of the client being measured).
"""

from __future__ import annotations

import argparse
import http.client
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

#: The largest request or response body forwarded (the bench reads segments of KBs).
MAX_BODY = 64 * 1024 * 1024
#: Idle client connections are closed after this many seconds.
IDLE_TIMEOUT = 30.0

#: Headers that frame one hop, not the request: never forwarded as they are.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                  "proxy-connection", "content-length"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients connect at once (a scan's pool): a deep backlog drops no SYN.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], upstream: tuple[str, int], delay_s: float) -> None:
        super().__init__(address, _Handler)
        self.upstream = upstream
        self.delay_s = delay_s
        self.count_lock = threading.Lock()
        self.requests = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    # Headers and body go out in separate writes: with Nagle on, the second waits for
    # the client's delayed ACK (~40 ms on Linux), a delay on top of the one intended.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a bench does not want every request on stderr

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers: dropped, as the framing is rewritten
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("request body too large for the latency proxy")
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("request body too large for the latency proxy")
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        for attempt in (1, 2):
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                resp = self._upstream.getresponse()
                data = resp.read() if self.command != "HEAD" else b""
                return resp.status, resp.reason, resp.getheaders(), data
            except (ConnectionError, http.client.HTTPException):
                # A kept-alive upstream connection the server closed: reconnect once.
                self._upstream.close()
                self._upstream = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def do_GET(self) -> None:
        """Delay, forward, relay the reply (every method alike)."""
        body = self._body()
        with self.server.count_lock:
            self.server.requests += 1
        time.sleep(self.server.delay_s)  # the round trip a real store would cost
        status, reason, headers, data = self._forward(body)
        self.send_response(status, reason)
        for k, v in headers:
            if k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET  # noqa: N815


class LatencyProxy:
    """A proxy in front of ``upstream`` (``http://host:port``) adding ``delay_ms`` per request.

    Use as a context manager, or call :meth:`start` / :meth:`stop`; threads of this
    process serve it.
    """

    def __init__(self, upstream: str, delay_ms: float, host: str = "127.0.0.1", port: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be at least 0 (got {delay_ms})")
        self._server = _Server((host, port), (parts.hostname, parts.port), delay_ms / 1000)
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the proxy."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def request_count(self) -> int:
        """How many requests the proxy has received."""
        with self._server.count_lock:
            return self._server.requests

    def start(self) -> LatencyProxy:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="latency-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="http://host:port of the server to forward to")
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    proxy = LatencyProxy(args.upstream, args.delay_ms, port=args.port)
    print(proxy.endpoint_url, flush=True)
    try:
        proxy._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        proxy._server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
