"""Publishing: streamworker's typed producer against raw redis-py XADD, one by one and pipelined.

Run: ``python -m benchmarks.publish_bench`` (or ``make bench``). Starts its own redis-server (or
uses ``--redis-url``, which it FLUSHALLs) and prints one table: entries per second (median of
``--rounds`` rounds, variants interleaved within each round) and each variant's rate as a share
of raw XADD of the same shape. Every variant adds the same entry (a 4-field order) to its own
stream, sync redis-py client over loopback TCP:

* ``raw-xadd``: ``client.xadd(stream, {...})`` with the fields already as text;
* ``publish``: ``SyncProducer.publish(stream, Order(...))``: encodes the pydantic model, XADD;
* ``publish+key``: the same with ``idempotency_key=`` (``publish_once.lua`` by EVALSHA: GET,
  XADD, SET PX of the marker);
* ``raw-xadd-pipe``, ``publish-pipe``, ``publish+key-pipe``: the same in non-transactional
  pipelines of ``--pipeline`` entries (``SyncProducer.publish_many``).

It also prints the memory one idempotency marker takes in Redis (``MEMORY USAGE``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis
from pydantic import BaseModel

from streamworker.producing.producer import SyncProducer


class Order(BaseModel):
    order_id: int
    customer: str
    amount_cents: int
    currency: str


def _orders(n: int) -> list[Order]:
    return [
        Order(order_id=i, customer=f"c{i % 97}", amount_cents=i, currency="EUR") for i in range(n)
    ]


def _variants(
    client: redis.Redis, n: int, pipeline: int, round_no: int
) -> dict[str, Callable[[], None]]:
    producer = SyncProducer(client, idempotency_window_ms=600_000)
    orders = _orders(n)
    raw = [
        {
            "order_id": str(o.order_id),
            "customer": o.customer,
            "amount_cents": str(o.amount_cents),
            "currency": o.currency,
        }
        for o in orders
    ]

    def raw_xadd() -> None:
        for fields in raw:
            client.xadd("raw", fields)  # type: ignore[arg-type]

    def publish() -> None:
        for order in orders:
            producer.publish("pub", order)

    def publish_key() -> None:
        for order in orders:
            producer.publish("key", order, idempotency_key=f"r{round_no}-{order.order_id}")

    def raw_pipe() -> None:
        for start in range(0, n, pipeline):
            pipe = client.pipeline(transaction=False)
            for fields in raw[start : start + pipeline]:
                pipe.xadd("rawp", fields)  # type: ignore[arg-type]
            pipe.execute()

    def publish_pipe() -> None:
        for start in range(0, n, pipeline):
            producer.publish_many(
                [producer.plan("pubp", o) for o in orders[start : start + pipeline]]
            )

    def publish_key_pipe() -> None:
        for start in range(0, n, pipeline):
            producer.publish_many(
                [
                    producer.plan("keyp", o, idempotency_key=f"r{round_no}-{o.order_id}")
                    for o in orders[start : start + pipeline]
                ]
            )

    return {
        "raw-xadd": raw_xadd,
        "publish": publish,
        "publish+key": publish_key,
        "raw-xadd-pipe": raw_pipe,
        "publish-pipe": publish_pipe,
        "publish+key-pipe": publish_key_pipe,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; print the table (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.publish_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--pipeline", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis-url", help="use this Redis (it is FLUSHALLed)")
    args = parser.parse_args(argv)

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.support.servers import RedisServer

    server = None
    try:
        url = args.redis_url
        if url is None:
            server = RedisServer(Path(tempfile.mkdtemp(prefix="sw-publish-bench-")) / "r").start()
            url = server.url
        client = redis.Redis.from_url(url)
        client.flushall()
        print(
            f"redis {client.info('server')['redis_version']}; {args.messages} entries per "
            f"variant, pipelines of {args.pipeline}, {args.rounds} rounds (median)"
        )
        rates: dict[str, list[float]] = {}
        for round_no in range(args.rounds):
            client.flushall()
            variants = list(_variants(client, args.messages, args.pipeline, round_no).items())
            # Rotate the order each round: load from elsewhere should not favour one position.
            shift = round_no % len(variants)
            for name, run in variants[shift:] + variants[:shift]:
                started = time.perf_counter()
                run()
                rates.setdefault(name, []).append(args.messages / (time.perf_counter() - started))
        order = list(_variants(client, 1, 1, 0))
        median = {name: statistics.median(rates[name]) for name in order}
        print(f"\n{'variant':<18}{'entries/s':>11}{'min':>9}{'max':>9}{'vs raw':>9}")
        for name, rate in median.items():
            base = median["raw-xadd-pipe" if name.endswith("-pipe") else "raw-xadd"]
            print(
                f"{name:<18}{rate:>11.0f}{min(rates[name]):>9.0f}{max(rates[name]):>9.0f}"
                f"{100 * rate / base:>8.0f}%"
            )
        marker = next(iter(client.scan_iter("{key}:published:*", count=1000)))
        print(f"\none idempotency marker: {client.memory_usage(marker)} bytes ({marker.decode()})")
        client.close()
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
