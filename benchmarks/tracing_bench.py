"""What OpenTelemetry tracing costs the consume loop, per message: off, on but not sampled, on.

Run: ``python -m benchmarks.tracing_bench`` (part of ``make bench``). Each round pre-fills
``--messages`` entries, runs a streamworker Worker (``idempotency="none"``, an ``async def``
no-op handler, batches of ``--batch``) on the in-process engine (or ``--redis-url``) until the
group has nothing left, and divides the drain time by the message count. Variants are interleaved
over ``--rounds`` rounds; the median is reported, with the difference to ``off``.

* ``off``: ``tracing=False`` (the default): no tracing code runs per message;
* ``unsampled``: ``tracing=True`` with a provider whose sampler drops every trace (spans are
  created as non-recording ones, nothing exported);
* ``on``: ``tracing=True``, every message sampled, spans handed to a BatchSpanProcessor whose
  exporter drops them (the cost of making them, not of shipping them).

``--modes off`` runs against any streamworker (e.g. an older checkout on ``PYTHONPATH``), to
compare the no-tracing path before and after a change.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.draining import drain, drain_arguments, prefill
from streamworker import App, Message
from streamworker.io.redisio import open_redis
from streamworker.observability.logging import configure_logging
from streamworker.runtime.worker import Worker, WorkerOptions

STREAM, GROUP = "bench", "g"
MODES = ("off", "unsampled", "on")


def _app(batch: int) -> App:
    app = App("tracing-bench")

    @app.handler(STREAM, group=GROUP, batch_size=batch, block_ms=50)
    async def noop(msg: Message[Any]) -> None:
        return None

    return app


def _provider(mode: str) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ALWAYS_ON if mode == "on" else ALWAYS_OFF)
    provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1_000_000))
    return provider


async def _round(url: str, mode: str, messages: int, batch: int) -> float:
    """Seconds per message to drain ``messages`` entries in ``mode``."""
    client = open_redis(url)
    await prefill(client, STREAM, messages)
    options: dict[str, Any] = {"redis_url": url, "consumer": "c1"}
    if mode != "off":
        options.update(tracing=True, tracer_provider=_provider(mode))
    worker = Worker(_app(batch), WorkerOptions(**options))
    elapsed, _ = await drain(client, worker, STREAM)
    await client.delete(STREAM)
    await client.aclose()
    return elapsed / messages


def main(argv: Sequence[str] | None = None) -> int:
    parser = drain_arguments(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    configure_logging("console", "warning", stream=sys.stderr)
    results: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            results[mode].append(
                asyncio.run(_round(args.redis_url, mode, args.messages, args.batch))
            )
    print(
        f"{args.messages} messages per round, batches of {args.batch}, {args.rounds} rounds "
        f"({args.redis_url.split('/bench-')[0]})"
    )
    print(f"{'mode':<10} {'us/msg (median)':>16} {'min':>8} {'max':>8} {'vs off':>10}")
    base = statistics.median(results["off"]) if "off" in results else None
    for mode in modes:
        values = results[mode]
        median = statistics.median(values)
        delta = "" if base is None or mode == "off" else f"{(median - base) * 1e6:+.2f} us"
        print(
            f"{mode:<10} {median * 1e6:>16.2f} {min(values) * 1e6:>8.2f} "
            f"{max(values) * 1e6:>8.2f} {delta:>10}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
