"""Batch read throughput of the ``streamworker_redis`` Spark source: K = 1, 2, 4 partitions
against one process paging XRANGE with redis-py (hiredis parser), in one run.

Run: ``python -m benchmarks.spark_bench`` (or ``make bench``). Starts its own redis-server (or
uses ``--redis-url``) and a ``local[N]`` Spark session bound to 127.0.0.1, fills one stream with
``--entries`` entries of three small fields, then times:

* ``redis-py XRANGE``: one process, pages of ``--page-size`` with the exclusive start;
* ``spark K=…``: ``spark.read.format("streamworker_redis")…load().count()`` with
  ``numPartitions=K`` (every row goes through ``read()`` in the executors' Python workers; the
  count makes sure nothing is pushed down or skipped).

Each variant runs ``--rounds`` times and the best is kept (the first Spark query also pays for
starting the Python workers, so a warm-up query runs first). Needs Java and the spark extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis

STREAM = "bench:spark"


def fill(client: redis.Redis, n: int) -> None:
    client.delete(STREAM)
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, {"order": str(i), "amount": str(i % 997), "currency": "EUR"})
        if len(pipe) >= 5_000:
            pipe.execute()
    pipe.execute()


def xrange_loop(url: str, page: int) -> int:
    client = redis.Redis.from_url(url)
    rows, start = 0, "-"
    while batch := client.xrange(STREAM, min=start, max="+", count=page):
        rows += len(batch)
        start = "(" + batch[-1][0].decode()
    client.close()
    return rows


def best(label: str, rounds: int, run: object) -> tuple[str, int, float]:
    times = []
    rows = 0
    for _ in range(rounds):
        started = time.perf_counter()
        rows = run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return label, rows, min(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_bench", description=__doc__)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--page-size", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default: 2)")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    args = parser.parse_args(argv)
    if shutil.which("java") is None:
        print("spark_bench: skipped (no java; run `make services`)")
        return 0

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.support.servers import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    server = None
    try:
        url = args.redis_url
        if url is None:
            server = RedisServer(tmp / "redis").start()
            url = server.url
        with redis.Redis.from_url(url) as client:
            fill(client, args.entries)

        os.environ.update(
            PYSPARK_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        )
        from pyspark.sql import SparkSession

        from streamworker.spark import register

        spark = (
            SparkSession.builder.master(f"local[{args.cores}]")
            .appName("streamworker-spark-bench")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def spark_count(k: int) -> int:
            frame = (
                spark.read.format("streamworker_redis")
                .option("url", url)
                .option("streams", STREAM)
                .option("numPartitions", k)
                .option("pageSize", args.page_size)
                .load()
            )
            return int(frame.count())

        spark_count(2)  # warm-up: starts the Python workers
        results = [
            best(
                "redis-py XRANGE, 1 process", args.rounds, lambda: xrange_loop(url, args.page_size)
            )
        ]
        for k in (1, 2, 4):
            results.append(
                best(f"spark local[{args.cores}], K={k}", args.rounds, lambda k=k: spark_count(k))
            )
        spark.stop()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    load = os.getloadavg()[0]
    print(
        f"\nbatch read of {args.entries} entries (best of {args.rounds}; load average {load:.1f})"
    )
    print("| variant | rows | seconds | rows/s |\n|---|---:|---:|---:|")
    for label, rows, seconds in results:
        print(f"| {label} | {rows} | {seconds:.2f} | {rows / seconds:,.0f} |")
    bad = [label for label, rows, _ in results if rows != args.entries]
    if bad:
        print(f"spark_bench: wrong row count in {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
