"""The quick-start demo: produce orders, run the worker until they are handled, print, exit.

    python examples/quickstart/demo.py [--redis-url URL]

Without a URL it starts a throw-away redis-server of its own (on a free loopback port, in a temp
dir) and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from app import app, processed

from streamworker.observability.logging import configure_logging
from streamworker.runtime.worker import Worker, WorkerOptions


@contextlib.contextmanager
def throwaway_redis() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("demo: redis-server is not installed; run `make services` or pass --redis-url")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            for _ in range(500):
                with contextlib.suppress(redis.ConnectionError):
                    if redis.Redis.from_url(url).ping():
                        break
                time.sleep(0.01)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


async def run_demo(url: str) -> None:
    client = redis.asyncio.Redis.from_url(url)
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
    parser.add_argument("--redis-url", help="use this Redis instead of a throw-away one")
    args = parser.parse_args()
    configure_logging("console", "warning", stream=sys.stdout)
    if args.redis_url:
        asyncio.run(run_demo(args.redis_url))
        return
    with throwaway_redis() as url:
        asyncio.run(run_demo(url))


if __name__ == "__main__":
    main()
