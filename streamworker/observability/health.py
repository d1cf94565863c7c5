"""The worker's HTTP endpoint: ``/metrics``, ``/healthz`` (liveness) and ``/readyz`` (readiness).

It runs in a daemon thread with its own sockets, so it answers even while the worker's event loop
is blocked — which is exactly when liveness must say so. The checks are callables supplied by the
worker; each returns ``(ok, details)`` and the endpoint answers 200 or 503 with the details as JSON.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

Check = Callable[[], tuple[bool, dict[str, Any]]]


class HealthServer:
    """Serves the three endpoints until :meth:`stop`. Thread-safe to start and stop once."""

    def __init__(self, registry: CollectorRegistry, liveness: Check, readiness: Check) -> None:
        self.registry = registry
        self.liveness = liveness
        self.readiness = readiness
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> int:
        """Bind and serve in the background; returns the bound port (useful with port 0)."""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    # OpenMetrics when the scraper asks for it (Prometheus does): the only
                    # format that carries exemplars (trace ids, with tracing on).
                    encode, content_type = choose_encoder(self.headers.get("Accept", ""))
                    self._send(200, encode(outer.registry), content_type)
                elif path in ("/healthz", "/readyz"):
                    check = outer.liveness if path == "/healthz" else outer.readiness
                    try:
                        ok, details = check()
                    except Exception as exc:  # a failing check is a failed check, not a 500
                        ok, details = False, {"error": f"{type(exc).__name__}: {exc}"}
                    body = json.dumps({"ok": ok, **details}, default=str).encode()
                    self._send(200 if ok else 503, body, "application/json")
                else:
                    self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # probes every few seconds would flood the logs

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="streamworker-http", daemon=True
        )
        self._thread.start()
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
