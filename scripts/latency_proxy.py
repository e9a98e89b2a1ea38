"""A delaying HTTP reverse proxy: every request waits, then is forwarded.

The wait is fixed (``delay_ms``) or drawn per request from a latency model
(:class:`LatencyModel`: a log-normal fitted to a published band, :data:`MODELS`),
from a seeded generator, so a run draws the same delays in the same order again.

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
(or ``--model express --seed 7``)
prints ``http://127.0.0.1:PORT`` of the proxy on its first line and serves until
stopped (scripts/bench_scan.py runs it so, in a process of its own, so that the
proxy's work does not share the GIL of the client being measured).
"""

from __future__ import annotations

import argparse
import http.client
import math
import random
import re
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from statistics import NormalDist
from typing import Any
from urllib.parse import urlsplit

#: The largest request or response body forwarded (the bench reads segments of KBs).
MAX_BODY = 64 * 1024 * 1024
#: Idle client connections are closed after this many seconds.
IDLE_TIMEOUT = 30.0

#: Headers that frame one hop, not the request: never forwarded as they are.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                  "proxy-connection", "content-length"})


#: z of the 99th percentile of a standard normal.
_Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class LatencyModel:
    """Per-request delays log-normally distributed, fitted to a published band read as
    its median (``p50_ms``) and 99th percentile (``p99_ms``).

    A log-normal is the usual shape of a service's response times: bounded below,
    with a right tail. Two quantiles fix its two parameters: ``mu = ln(p50)`` and
    ``sigma = ln(p99 / p50) / z(0.99)``.
    """

    name: str
    p50_ms: float
    p99_ms: float
    source: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.p50_ms <= self.p99_ms:
            raise ValueError(f"need 0 < p50_ms <= p99_ms (got {self.p50_ms}, {self.p99_ms})")

    @property
    def sigma(self) -> float:
        """The log-normal's sigma (of the delay's natural log)."""
        return math.log(self.p99_ms / self.p50_ms) / _Z99

    def quantile_ms(self, q: float) -> float:
        """The model's ``q`` quantile, in milliseconds."""
        return self.p50_ms * math.exp(self.sigma * NormalDist().inv_cdf(q))

    def sample_ms(self, rng: random.Random) -> float:
        """One delay drawn with ``rng``, in milliseconds."""
        return rng.lognormvariate(math.log(self.p50_ms), self.sigma)


#: The bands docs/benchmarks.md cites ("The latency model"): S3 Standard PUT roughly
#: 50-100 ms, S3 Express One Zone single-digit milliseconds (5-10 ms).
MODELS = {
    "standard": LatencyModel("S3 Standard", 50.0, 100.0, "PUT roughly 50-100 ms"),
    "express": LatencyModel("S3 Express One Zone", 5.0, 10.0, "single-digit ms, up to 10x faster than Standard"),
}


class Delays:
    """The delay of each request: fixed, or drawn from ``model`` with generators seeded
    from ``seed``.

    Requests whose path matches ``side_pattern`` draw from a second generator of their
    own, so that the draws of the others do not depend on how many of those there were
    (scripts/bench_latency.py: a commit's head PUT gets the same delay as the raw PUT
    it is compared with, whether or not a segment went out beside it). :meth:`reset`
    restarts both sequences.
    """

    def __init__(self, fixed_ms: float = 0.0, model: LatencyModel | None = None, seed: int = 0,
                 side_pattern: str | None = None) -> None:
        if fixed_ms < 0:
            raise ValueError(f"delay_ms must be at least 0 (got {fixed_ms})")
        self.fixed_ms, self.model, self.seed = fixed_ms, model, seed
        self._side = re.compile(side_pattern) if side_pattern else None
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start both sequences of draws again from the seed."""
        with self._lock:
            self._main = random.Random(f"{self.seed}:main")
            self._side_rng = random.Random(f"{self.seed}:side")

    def next_ms(self, path: str = "") -> float:
        """The delay of the next request to ``path``, in milliseconds."""
        if self.model is None:
            return self.fixed_ms
        with self._lock:
            rng = self._side_rng if self._side is not None and self._side.search(path) else self._main
            return self.model.sample_ms(rng)


#: A request to this path resets the proxy's draws (:meth:`Delays.reset`); not forwarded.
RESET_PATH = "/__latency__/reset"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients connect at once (a scan's pool): a deep backlog drops no SYN.
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], upstream: tuple[str, int], delays: Delays) -> None:
        super().__init__(address, _Handler)
        self.upstream = upstream
        self.delays = delays
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
        if self.path == RESET_PATH:
            self.server.delays.reset()
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with self.server.count_lock:
            self.server.requests += 1
        time.sleep(self.server.delays.next_ms(self.path) / 1000)  # the round trip a real store would cost
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
    """A proxy in front of ``upstream`` (``http://host:port``) adding ``delay_ms`` per
    request, or a delay drawn from ``model`` (seeded with ``seed``; ``side_pattern``:
    see :class:`Delays`).

    Use as a context manager, or call :meth:`start` / :meth:`stop`; threads of this
    process serve it.
    """

    def __init__(self, upstream: str, delay_ms: float = 0.0, host: str = "127.0.0.1", port: int = 0, *,
                 model: LatencyModel | None = None, seed: int = 0, side_pattern: str | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        delays = Delays(delay_ms, model, seed, side_pattern)
        self._server = _Server((host, port), (parts.hostname, parts.port), delays)
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
    parser.add_argument("--model", choices=sorted(MODELS), default=None,
                        help="draw each delay from this latency model instead of --delay-ms")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's draws")
    parser.add_argument("--side-pattern", default=None,
                        help="requests whose path matches this regex draw from a sequence of their own")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    proxy = LatencyProxy(args.upstream, args.delay_ms, port=args.port,
                         model=MODELS[args.model] if args.model else None, seed=args.seed,
                         side_pattern=args.side_pattern)
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
