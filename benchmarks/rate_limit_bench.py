"""What a shared rate limit costs a handler that runs under it, per message: the same no-op
handler without ``rate_limit`` and with a limit far above what it reaches.

Run: ``python -m benchmarks.rate_limit_bench`` (part of ``make bench``). Each round pre-fills
``--messages`` entries, runs a streamworker Worker (``idempotency="none"``, an ``async def``
no-op handler, batches of ``--batch``) on the in-process engine (or ``--redis-url``) until the
group has nothing left, and divides the drain time by the message count: wall-clock time, and
the CPU time of this process (the worker's whole cost with the in-process engine; its client
side against ``--redis-url``, where the server's share is in ``INFO commandstats``), which a
loaded machine disturbs much less. The two variants run interleaved over ``--rounds`` rounds;
the median, min and max per variant and the ratio of the medians are reported, with the load
average before and after.

* ``unlimited``: no ``rate_limit`` (reads are not sized by permits; the next read goes out with
  the batch's ack);
* ``limited``: ``rate_limit="--limit"`` (default 10,000,000/s: never reached, so the figure is
  the limit's bookkeeping, not its waiting): each read asks ``lua/take_permits.lua`` first and
  hands back what it did not use.
"""

from __future__ import annotations

import asyncio
import os
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
VARIANTS = ("unlimited", "limited")


def _app(batch: int, limit: str | None) -> App:
    app = App("rate-limit-bench")

    @app.handler(STREAM, group=GROUP, batch_size=batch, block_ms=50, rate_limit=limit)
    async def noop(msg: Message[Any]) -> None:
        return None

    return app


async def _round(url: str, limit: str | None, messages: int, batch: int) -> tuple[float, float]:
    """Seconds per message to drain ``messages`` entries: (wall clock, this process's CPU)."""
    client = open_redis(url)
    await prefill(client, STREAM, messages)
    worker = Worker(_app(batch, limit), WorkerOptions(redis_url=url, consumer="c1"))
    elapsed, cpu = await drain(client, worker, STREAM)
    await client.delete(STREAM)
    await client.aclose()
    return elapsed / messages, cpu / messages


def _loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    parser = drain_arguments(__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--limit", default="10000000/s", help="the limited variant's rate_limit")
    args = parser.parse_args(argv)
    configure_logging("console", "warning", stream=sys.stderr)
    load_before = _loadavg()
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            limit = args.limit if variant == "limited" else None
            w, c = asyncio.run(_round(args.redis_url, limit, args.messages, args.batch))
            wall[variant].append(w)
            cpu[variant].append(c)
    where = args.redis_url.split("/bench-")[0]
    print(
        f"{args.messages} messages per round, batches of {args.batch}, {args.rounds} rounds "
        f"({where}), {os.cpu_count()} CPUs, load average before {load_before}, "
        f"after {_loadavg()}"
    )
    for title, results in (("wall", wall), ("cpu", cpu)):
        print(f"{title + ' us/msg':<16} {'median':>8} {'min':>8} {'max':>8} {'spread':>8}")
        for variant in VARIANTS:
            values = results[variant]
            median = statistics.median(values)
            spread = (max(values) - min(values)) / median
            print(
                f"  {variant:<14} {median * 1e6:>8.2f} {min(values) * 1e6:>8.2f} "
                f"{max(values) * 1e6:>8.2f} {spread:>7.0%}"
            )
        ratio = statistics.median(results["limited"]) / statistics.median(results["unlimited"])
        per_round = [
            lim / unl for lim, unl in zip(results["limited"], results["unlimited"], strict=True)
        ]
        print(
            f"  limited / unlimited ({title}): {ratio:.3f} (per round "
            f"{min(per_round):.3f}..{max(per_round):.3f}; target <= 1.10)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
