"""Prometheus metrics of one worker, in a registry of its own (no process-global state).

Names follow Prometheus conventions and are part of streamworker's public interface:

* ``streamworker_messages_total{stream,group,outcome}`` — outcome is ``acked``, ``failed``,
  ``dead_lettered`` or ``deleted`` (an entry deleted from the stream while pending, acked unprocessed).
* ``streamworker_handler_duration_seconds{stream,group}`` — handler run time, successes and failures.
* ``streamworker_batches_total{stream,group}`` — batches read and processed.
* ``streamworker_reconnects_total{stream,group}`` — connection losses the loop recovered from.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

OUTCOMES = ("acked", "failed", "dead_lettered", "deleted")


class Metrics:
    """The worker's metrics. prometheus_client objects are thread-safe, so this is too."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.messages = Counter(
            "streamworker_messages",
            "Messages processed, by outcome.",
            ["stream", "group", "outcome"],
            registry=self.registry,
        )
        self.handler_duration = Histogram(
            "streamworker_handler_duration_seconds",
            "Time spent in the handler per message.",
            ["stream", "group"],
            registry=self.registry,
            buckets=(
                0.0005,
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1,
                2.5,
                5,
                10,
                30,
            ),
        )
        self.batches = Counter(
            "streamworker_batches",
            "Batches processed.",
            ["stream", "group"],
            registry=self.registry,
        )
        self.reconnects = Counter(
            "streamworker_reconnects",
            "Connection losses the consume loop recovered from.",
            ["stream", "group"],
            registry=self.registry,
        )

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns the bound port (for port 0)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_address[1])
