"""The quick-start demo: produce orders, run the worker until they are handled, print, exit.

    python examples/quickstart/demo.py [--redis-url URL]

Without a URL it runs on streamworker's embedded engine (``engine://memory``): no Redis needed.
With ``--redis-url redis://…`` the same code runs against a real Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from app import app, processed

from streamworker.io.redisio import open_redis
from streamworker.observability.logging import configure_logging
from streamworker.runtime.worker import Worker, WorkerOptions


async def run_demo(url: str) -> None:
    client = open_redis(url)
    orders = [(1, 1250), (2, 990), (3, 0), (4, 4999), (5, 15)]
    for order_id, amount in orders:
        await client.xadd("orders", {"order_id": order_id, "amount_cents": amount})
    await client.xadd("orders", {"order_id": "not-a-number", "amount_cents": 1})
    print(f"produced {len(orders) + 1} orders on stream 'orders' ({url})")

    worker = Worker(app, WorkerOptions(redis_url=url, consumer="demo-0"))
    task = asyncio.ensure_future(worker.run(install_signal_handlers=False))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        if len(processed) < 4 or await client.xlen("{orders}:dlq") < 2:
            continue
        if (await client.xpending("orders", "billing"))["pending"] == 0:
            break
    worker.stop()
    await task

    for line in processed:
        print(line)
    for _id, fields in await client.xrange("{orders}:dlq"):
        print(
            f"dead-lettered order {fields[b'order_id'].decode()}: {fields[b'dlq_error'].decode()}"
        )
    pending = (await client.xpending("orders", "billing"))["pending"]
    print(f"pending after the run: {pending}")
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--redis-url", default="engine://memory", help="default: the embedded engine, in-process"
    )
    args = parser.parse_args()
    configure_logging("console", "warning", stream=sys.stdout)
    asyncio.run(run_demo(args.redis_url))


if __name__ == "__main__":
    main()
