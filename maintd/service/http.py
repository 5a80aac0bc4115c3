"""The daemon's read-only HTTP endpoint: ``/healthz``, ``/readyz`` and ``/metrics``.

The standard library's threaded server is enough: the endpoint serves probes and a scraper, a few
requests a minute, and nothing on it changes state. Only ``GET`` (and ``HEAD``, which HTTP requires of
any server that serves ``GET``) are allowed; every other method gets ``405``. It is bounded so that
a slow or stuck client cannot hold it: every connection has a socket timeout (a request must arrive,
and its response be read, within ``request_timeout`` seconds), and at most ``max_connections`` are
served at once (more get ``503`` at once).

- ``/healthz``: runs every liveness check (the Spark driver's JVM is alive...); 200 if all pass, else
  503 with the failing checks in a JSON body, so that Kubernetes restarts the pod (the liveness probe).
- ``/readyz``: runs every readiness check (state store reachable, Spark session alive...); 200 if all
  pass, else 503 with the failing checks in a JSON body (the readiness probe).
- ``/metrics``: the Prometheus text exposition of :class:`~maintd.service.metrics.Metrics`.
- ``/``, ``/table``, ``/run``, ``/daemon``: the read-only web console (:mod:`maintd.service.console`) when one
  is attached (:attr:`HealthServer.console`); else 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loguru import logger
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from maintd.errors import MaintdError
from maintd.service.console import CONTENT_SECURITY_POLICY, PATHS, Console
from maintd.service.metrics import Metrics
from maintd.settings import redact_secrets

#: A readiness check: returns normally (or True) when ready; returns False or raises when not.
ReadinessCheck = Callable[[], object]


class HealthServer:
    """A threaded HTTP server in a daemon thread.

    Args:
        metrics: the metrics served on ``/metrics``.
        checks: readiness checks by name, run on every ``/readyz``.
        host: address to bind.
        port: port to bind; 0 picks a free one (see :attr:`port`).
        liveness: liveness checks by name, run on every ``/healthz``.
        request_timeout: seconds a connection may stay silent (or leave a response unread) before it is closed.
        max_connections: connections served at once; more are answered 503 and closed.
        console: the web console served at ``/`` (None: none; it can be attached later, once the daemon runs).
    """

    def __init__(
        self,
        metrics: Metrics,
        checks: Mapping[str, ReadinessCheck] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        liveness: Mapping[str, ReadinessCheck] | None = None,
        request_timeout: float = 10.0,
        max_connections: int = 32,
        console: Console | None = None,
    ) -> None:
        self.metrics = metrics
        self.console = console
        self.checks = dict(checks or {})
        self.liveness = dict(liveness or {})
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._server = _BoundedServer((host, port), _handler_class(self), self._slots)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        if self.checks or self.liveness:
            metrics.attach_probes({"readiness": self.readiness, "liveness": self.liveness_failures},
                                  {"readiness": self.checks, "liveness": self.liveness})

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port``."""
        host = self._server.server_address[0]
        shown = host.decode() if isinstance(host, bytes) else host
        return f"http://{shown}:{self.port}"

    def start(self) -> HealthServer:
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="maintd-http", daemon=True)
        self._thread.start()
        logger.info("HTTP endpoint on {} (/healthz, /readyz, /metrics)", self.url)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        logger.info("HTTP endpoint {} closed", self.url)

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def readiness(self) -> dict[str, str]:
        """Run every readiness check; returns the failing ones, name to reason (empty when ready)."""
        return _failing(self.checks)

    def liveness_failures(self) -> dict[str, str]:
        """Run every liveness check; returns the failing ones, name to reason (empty when alive)."""
        return _failing(self.liveness)


class _BoundedServer(ThreadingHTTPServer):
    """A threaded server that serves at most as many connections at once as ``slots`` allows."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 slots: threading.BoundedSemaphore) -> None:
        super().__init__(address, handler)
        self.slots = slots

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            _refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _refuse(request: Any) -> None:
    """Answer 503 without reading the request (the server is at its connection bound)."""
    try:
        request.settimeout(1.0)
        request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n")
    except OSError:
        pass


def _failing(checks: Mapping[str, ReadinessCheck]) -> dict[str, str]:
    failing = {}
    for name, check in checks.items():
        try:
            ok = check()
        except Exception as exc:  # a failing check must not break the probe itself
            failing[name] = redact_secrets(f"{type(exc).__name__}: {exc}")
            continue
        if ok is False:
            failing[name] = "not ready"
    return failing


def _handler_class(server: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = server
        timeout = server.request_timeout  # the socket timeout StreamRequestHandler.setup applies

    return Handler


class _Handler(BaseHTTPRequestHandler):
    owner: HealthServer
    server_version = "maintd"
    sys_version = ""

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, *, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            dead = self.owner.liveness_failures()
            if dead:
                report = json.dumps({"alive": False, "failing": dead}).encode() + b"\n"
                self._send(503, report, "application/json", head)
            else:
                self._send(200, b"ok\n", "text/plain; charset=utf-8", head)
        elif path == "/readyz":
            failing = self.owner.readiness()
            body: dict[str, Any] = {"ready": not failing, "failing": failing}
            self._send(503 if failing else 200, json.dumps(body).encode() + b"\n", "application/json", head)
        elif path == "/metrics":
            self._send(200, self.owner.metrics.expose(), CONTENT_TYPE_LATEST, head)
        elif path in PATHS and self.owner.console is not None:
            self._console(self.owner.console, path, head)
        else:
            self._send(404, b"not found; try /healthz, /readyz or /metrics\n", "text/plain; charset=utf-8", head)

    def _console(self, console: Console, path: str, head: bool) -> None:
        query = self.path.partition("?")[2]
        try:
            answer = console.respond(path, query, self.headers.get("Authorization"))
        except MaintdError as exc:  # the store is unreachable: say so, as /readyz does
            body = f"the state store cannot be read: {exc}\n".encode()
            self._send(503, body, "text/plain; charset=utf-8", head)
            return
        except Exception as exc:  # a bug must not take the endpoint (and its probes) down with it
            logger.exception("console page {} failed", path)
            body = f"the page failed: {type(exc).__name__}: {redact_secrets(str(exc))}\n".encode()
            self._send(500, body, "text/plain; charset=utf-8", head)
            return
        extra = (("Content-Security-Policy", CONTENT_SECURITY_POLICY), ("X-Content-Type-Options", "nosniff"),
                 ("Referrer-Policy", "no-referrer"), *answer.headers)
        self._send(answer.status, answer.body, "text/html; charset=utf-8", head, extra)

    def _method_not_allowed(self) -> None:
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _method_not_allowed

    def _send(self, status: int, body: bytes, content_type: str, head: bool,
              headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Probes hit these endpoints every few seconds; keep them out of the logs unless debugging.
        logger.trace("http {} {}", self.address_string(), format % args)


__all__ = ["HealthServer", "ReadinessCheck"]
