"""What ``wait_replicas=1`` costs a producer: throughput and p50/p99 latency with and without it.

Run: ``python -m benchmarks.replica_wait_bench`` (or ``make bench``). Starts its own redis-server
primary and one replica (``--replicaof``, loopback, the test suite's fixture) and publishes the
same 4-field order with a sync :class:`~streamworker.producing.producer.SyncProducer`:

* ``publish``: one ``publish`` per entry (XADD), ``wait_replicas=0``;
* ``publish+wait1``: the same with ``wait_replicas=1`` (XADD and WAIT 1 in one round trip);
* ``pipe``: ``publish_many`` of ``--pipeline`` entries, no wait;
* ``pipe+wait1``: the same ending with one WAIT 1 for the whole pipeline.

Each round runs every variant once (the order rotated per round, so load from elsewhere favours
none). Printed per variant: entries per second, and the latency of one call (an entry, or a whole
pipeline) at p50 and p99, as the median over rounds with the rounds' min-max, then the wait's
cost as ratios (wait1 over no wait) of the medians. The load average before and after is printed
too: the machine is shared, read the figures as ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from streamworker.producing.producer import SyncProducer

_FIELDS = {"order_id": 7, "customer": "c7", "amount_cents": 150, "currency": "EUR"}


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _variants(
    client: redis.Redis, n: int, pipeline: int
) -> dict[str, Callable[[], tuple[float, list[float]]]]:
    """Each variant returns (seconds, per-call latencies)."""

    def single(wait: int, stream: str) -> Callable[[], tuple[float, list[float]]]:
        producer = SyncProducer(client, wait_replicas=wait, wait_timeout_ms=5_000)

        def run() -> tuple[float, list[float]]:
            lat = []
            started = time.perf_counter()
            for _ in range(n):
                t = time.perf_counter()
                producer.publish(stream, _FIELDS)
                lat.append(time.perf_counter() - t)
            return time.perf_counter() - started, lat

        return run

    def piped(wait: int, stream: str) -> Callable[[], tuple[float, list[float]]]:
        producer = SyncProducer(client, wait_replicas=wait, wait_timeout_ms=5_000)
        plans = [producer.plan(stream, _FIELDS) for _ in range(pipeline)]

        def run() -> tuple[float, list[float]]:
            lat = []
            started = time.perf_counter()
            for _ in range(0, n, pipeline):
                t = time.perf_counter()
                producer.publish_many(plans)
                lat.append(time.perf_counter() - t)
            return time.perf_counter() - started, lat

        return run

    return {
        "publish": single(0, "s0"),
        "publish+wait1": single(1, "s1"),
        "pipe": piped(0, "p0"),
        "pipe+wait1": piped(1, "p1"),
    }


def _spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; print the table (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.replica_wait_bench", description=__doc__
    )
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--pipeline", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.support.replication import Replicated

    load_before = os.getloadavg()[0]
    servers = Replicated(Path(tempfile.mkdtemp(prefix="sw-replica-wait-bench-")))
    try:
        client = redis.Redis.from_url(servers.url)
        print(
            f"redis {client.info('server')['redis_version']}, one loopback replica; "
            f"{args.messages} entries per variant, pipelines of {args.pipeline}, {args.rounds} "
            f"rounds; load average {load_before:.1f}"
        )
        rates: dict[str, list[float]] = {}
        p50: dict[str, list[float]] = {}
        p99: dict[str, list[float]] = {}
        for round_no in range(args.rounds):
            client.flushall()
            servers.wait_synced()
            variants = list(_variants(client, args.messages, args.pipeline).items())
            shift = round_no % len(variants)
            for name, run in variants[shift:] + variants[:shift]:
                seconds, lat = run()
                rates.setdefault(name, []).append(args.messages / seconds)
                p50.setdefault(name, []).append(_p(lat, 0.50) * 1e3)
                p99.setdefault(name, []).append(_p(lat, 0.99) * 1e3)
        load_after = os.getloadavg()[0]
        print(
            f"\nmedian (min-max) over {args.rounds} rounds; latency of one call (an entry, or a "
            f"pipeline of {args.pipeline}); load average after {load_after:.1f}\n"
        )
        print("| variant | entries/s | p50 ms | p99 ms |")
        print("|---|---|---|---|")
        for name in rates:
            print(
                f"| {name} | {_spread(rates[name], ',.0f')} | {_spread(p50[name], '.3f')} | "
                f"{_spread(p99[name], '.3f')} |"
            )
        print("\nwait1 / no wait (medians):\n")
        print("| shape | throughput | p50 latency | p99 latency |")
        print("|---|---|---|---|")
        for shape, base, waited in (
            ("single", "publish", "publish+wait1"),
            ("pipelined", "pipe", "pipe+wait1"),
        ):
            med = statistics.median
            print(
                f"| {shape} | {med(rates[waited]) / med(rates[base]):.2f}x | "
                f"{med(p50[waited]) / med(p50[base]):.2f}x | "
                f"{med(p99[waited]) / med(p99[base]):.2f}x |"
            )
        client.close()
    finally:
        servers.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
