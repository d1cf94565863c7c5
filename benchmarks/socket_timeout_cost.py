"""What a socket timeout costs the raw consume loop, per message (issue 37's raw loops).

``cli_throughput_bench``'s raw loops use redis-py clients as ``from_url`` makes them: no socket
timeout, so a server that stops answering holds them forever. A worker cannot run like that
(streamworker's clients time out after ``redis_timeout_s``; blocking reads after ``block_ms``
plus that). This runs the same loop (``XREADGROUP … COUNT`` then one ``XACK``, a no-op per
entry) in this process on a real redis-server, with and without a 5 s socket timeout:

* ``sync``, ``sync+timeout``: redis-py's blocking client (its timeout is the socket's own);
* ``asyncio``, ``asyncio+timeout``: redis-py's asyncio client; with a timeout, redis-py sends
  each command under ``asyncio.wait_for`` (a Task per send on Python 3.11) and reads each reply
  under ``asyncio.timeout``;
* ``streamworker``: the client ``streamworker.io.redisio.open_redis`` gives the worker (5 s
  timeout, commands packed by hiredis).

With ``--cluster`` the loop runs on a 3-master Redis Cluster (started here on loopback) through
the cluster client ``open_redis`` gives for ``redis+cluster://``, twice: with redis-py's own
connection class (its sends under ``wait_for``, commands packed in Python) and with
streamworker's (``_TimedSends``, hiredis packing), which ``_ClusterClient`` puts in.

Rounds are interleaved (each round runs every variant once, on a fresh backlog); reported are
the medians with their spread, CPU time of this process per message, and the load average.

Usage: ``python -m benchmarks.socket_timeout_cost [--messages 200000] [--batch 100] [--rounds 5]
[--cluster]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import redis
import redis.asyncio as aioredis

from streamworker.io.redisio import open_redis, open_sync_redis
from tests.support.cluster import LocalCluster
from tests.support.servers import RedisServer

_TIMEOUT_S = 5.0
VARIANTS = ("sync", "sync+timeout", "asyncio", "asyncio+timeout", "streamworker")
CLUSTER_VARIANTS = ("cluster, redis-py's connections", "cluster, streamworker's connections")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _fill(url: str, messages: int) -> None:
    client = open_sync_redis(url)
    client.delete("s")
    client.xgroup_create("s", "g", id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for i in range(messages):
        pipe.xadd("s", {"order_id": f"o{i}", "amount": str(i % 1000), "currency": "EUR"})
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    client.close()


def _sync_loop(client: redis.Redis, messages: int, batch: int) -> None:
    done = 0
    while done < messages:
        reply = client.xreadgroup("g", "c", {"s": ">"}, count=batch, block=1000)
        entries = reply[0][1] if reply else []
        for _entry_id, _fields in entries:
            pass
        client.xack("s", "g", *[entry_id for entry_id, _ in entries])
        done += len(entries)


async def _async_loop(make: Callable[[], aioredis.Redis], messages: int, batch: int) -> None:
    client = make()
    done = 0
    while done < messages:
        reply = await client.xreadgroup("g", "c", {"s": ">"}, count=batch, block=1000)
        entries = reply[0][1] if reply else []
        for _entry_id, _fields in entries:
            pass
        await client.xack("s", "g", *[entry_id for entry_id, _ in entries])
        done += len(entries)
    await client.aclose()


def _run(variant: str, url: str, messages: int, batch: int) -> tuple[float, float]:
    """(messages per second, CPU µs per message) of one drain of the backlog."""
    timeout = _TIMEOUT_S if variant.endswith("+timeout") else None
    started, cpu = time.perf_counter(), _cpu_s()
    if variant.startswith("sync"):
        client = redis.Redis.from_url(url, socket_timeout=timeout)
        _sync_loop(client, messages, batch)
        client.close()
    elif variant == "streamworker" or variant == CLUSTER_VARIANTS[1]:
        asyncio.run(
            _async_loop(lambda: open_redis(url, socket_timeout_s=_TIMEOUT_S), messages, batch)
        )
    elif variant == CLUSTER_VARIANTS[0]:
        asyncio.run(_async_loop(lambda: _stock_cluster(url), messages, batch))
    else:
        asyncio.run(
            _async_loop(
                lambda: aioredis.Redis.from_url(url, socket_timeout=timeout), messages, batch
            )
        )
    wall, used = time.perf_counter() - started, _cpu_s() - cpu
    return messages / wall, used / messages * 1e6


def _stock_cluster(url: str) -> aioredis.Redis:
    """streamworker's cluster client with redis-py's own connection class put back (what it
    was before the swap in ``io.redisio._ClusterClient``)."""
    client: Any = open_redis(url, socket_timeout_s=_TIMEOUT_S)
    client.nodes_manager.connection_kwargs["connection_class"] = aioredis.Connection
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = aioredis.Connection
    return cast("aioredis.Redis", client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cluster", action="store_true", help="on a 3-master Redis Cluster")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="sw-timeout-cost-"))
    server: RedisServer | LocalCluster
    variants: tuple[str, ...]
    if args.cluster:
        server = LocalCluster(workdir).start()
        url, variants = server.url, CLUSTER_VARIANTS
    else:
        server = RedisServer(workdir).start()
        url, variants = f"redis://127.0.0.1:{server.port}/0", VARIANTS
    rates: dict[str, list[float]] = {v: [] for v in variants}
    cpus: dict[str, list[float]] = {v: [] for v in variants}
    loads: list[float] = []
    try:
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for variant in variants:
                _fill(url, args.messages)
                rate, cpu = _run(variant, url, args.messages, args.batch)
                rates[variant].append(rate)
                cpus[variant].append(cpu)
    finally:
        server.stop()
    print(
        f"{'Redis Cluster (3 masters)' if args.cluster else 'redis-server'}, "
        f"{args.messages:,} messages x {args.rounds} rounds, batch {args.batch}, "
        f"{os.cpu_count()} CPUs; load average at the rounds' start "
        f"{statistics.median(loads):.2f} ({min(loads):.2f}-{max(loads):.2f})"
    )
    print("\n| variant | msg/s, median (min-max) | CPU µs/msg, median (min-max) |")
    print("|---|---:|---:|")
    for variant in variants:
        r, c = rates[variant], cpus[variant]
        print(
            f"| {variant} | {statistics.median(r):,.0f} ({min(r):,.0f}-{max(r):,.0f}) | "
            f"{statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f}) |"
        )
    base_variant = variants[0] if args.cluster else "asyncio"
    base = statistics.median(cpus[base_variant])
    for variant in variants[1:] if args.cluster else ("asyncio+timeout", "streamworker"):
        extra = statistics.median(cpus[variant]) - base
        print(
            f"\nCPU per message, {variant} less {base_variant}: {extra:+.2f} µs (medians)", end=""
        )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
