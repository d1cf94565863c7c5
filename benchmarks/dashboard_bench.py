"""The dashboard's history: memory held per series, and what one sampling pass costs.

Run: ``python -m benchmarks.dashboard_bench`` (or ``make bench``). Starts its own redis-server
(or uses ``--redis-url``, whose database it FLUSHALLs).

* **Memory**: :class:`~streamworker.dashboard.history.History` with 1, 10 and 100 series, each
  filled with a full hour of one-second samples, measured with ``tracemalloc`` (every Python
  allocation, the rings' arrays and their bookkeeping), side by side with the arithmetic
  ``SERIES_BYTES`` per series; and the same after another hour of samples (it must not grow).
* **Sampling**: one pass of the dashboard's sampler (``Dashboard.sample_all``: XINFO STREAM,
  XINFO GROUPS and the dead-letter stream's XINFO STREAM per stream, no worker records) over 10,
  50 and 100 streams with 1 group each, median of ``--rounds`` passes, and the share of the
  1-second sampling interval it takes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from streamworker.dashboard.history import SERIES_BYTES, SLOTS, History


def _filled(series: int, hours: int = 1) -> History:
    h = History(max_series=series)
    for s in range(series):
        for t in range(SLOTS * hours):
            h.record(f"s{s}", "g", (t, t, 0, 5, 7), at=1_000_000 + t)
    return h


def memory_table() -> None:
    print("series | tracemalloc after 1 h | after 2 h | SERIES_BYTES x series | ratio")
    for n in (1, 10, 100):
        tracemalloc.start()
        h = _filled(n)
        one_hour = tracemalloc.get_traced_memory()[0]
        for s in range(n):
            for t in range(SLOTS):
                h.record(f"s{s}", "g", (t, t, 0, 5, 7), at=1_000_000 + SLOTS + t)
        two_hours = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        expected = n * SERIES_BYTES
        print(
            f"{n:6d} | {one_hour / 1e6:8.2f} MB | {two_hours / 1e6:8.2f} MB | "
            f"{expected / 1e6:8.2f} MB | {one_hour / expected:.3f}"
        )
        del h


async def _sample_pass(url: str, streams: int, rounds: int) -> float:
    import redis.asyncio as aioredis

    from streamworker.dashboard.app import Dashboard, DashboardConfig

    client = aioredis.Redis.from_url(url)
    await client.flushall()
    for i in range(streams):
        await client.xadd(f"bench{i}", {"n": "1"})
        await client.xgroup_create(f"bench{i}", "g", id="0")
    await client.aclose()
    dash = Dashboard(DashboardConfig(redis_url=url))
    times = []
    await dash.sample_all(rescan=True, read_workers=False)  # connect, list the streams
    for _ in range(rounds):
        started = time.perf_counter()
        await dash.sample_all(rescan=False, read_workers=False)
        times.append(time.perf_counter() - started)
    await dash.close()
    return statistics.median(times)


def sampling_table(url: str, rounds: int) -> None:
    print("streams | one sampling pass (median) | share of a 1 s interval")
    for n in (10, 50, 100):
        t = asyncio.run(_sample_pass(url, n, rounds))
        print(f"{n:7d} | {t * 1000:10.1f} ms | {t * 100:5.1f} %")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_bench")
    p.add_argument("--redis-url", help="use this server (FLUSHALLed) instead of starting one")
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    memory_table()
    if args.redis_url:
        sampling_table(args.redis_url, args.rounds)
        return 0
    from tests.support.servers import RedisServer

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            sampling_table(server.url, args.rounds)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
