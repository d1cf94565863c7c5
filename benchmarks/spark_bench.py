"""Batch read throughput of the ``streamworker_redis`` Spark source: K = 1, 2, 4 partitions and
the default partitioning, against one process paging XRANGE with redis-py (hiredis parser), in
one run, with the ratio the issue's target is about (K=2 against the redis-py loop).

Run: ``python -m benchmarks.spark_bench`` (or ``make bench``). Starts its own redis-server (or
uses ``--redis-url``) and a ``local[N]`` Spark session bound to 127.0.0.1, fills one stream with
``--entries`` entries of three small fields, then times:

* ``redis-py XRANGE``: one process, pages of 1,000 with the exclusive start, through redis-py's
  ``xrange`` (its reply parsing included): the loop a user would write;
* ``fastread, no Spark``: the source's own page reader and Arrow conversion in this process
  (what one Spark task does, without Spark);
* ``spark K=…``: ``spark.read.format("streamworker_redis")…load().count()`` with
  ``numPartitions=K`` (every row goes through ``read()`` in the executors' Python workers and
  over Arrow into the JVM; nothing is pushed down or skipped), and without ``numPartitions``
  (the default: the session's parallelism, bounded by the stream's size).

``--page-sizes 500,1000,2000,5000,10000`` adds a sweep of ``pageSize`` at K=2 (how the default
page size was chosen). Each variant runs ``--rounds`` times, the variants taking turns in every round (so load from
elsewhere hits them alike), and the best is kept (the first Spark query also pays for starting
the Python workers, so a warm-up query runs first). Needs Java and
the spark extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
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


def fastread_loop(url: str, page: int) -> int:
    from streamworker.spark.fastread import BatchBuilder, raw_pages
    from streamworker.spark.options import parse_read_options
    from streamworker.spark.ranges import IdRange, StreamId
    from streamworker.spark.source import arrow_schema

    client = redis.Redis.from_url(url)
    top = client.xrevrange(STREAM, count=1)[0][0]
    builder = BatchBuilder(
        STREAM, arrow_schema(parse_read_options({"url": url, "streams": STREAM}))
    )
    rows = 0
    for raw in raw_pages(client, STREAM, IdRange(None, StreamId.parse(top)), page):
        rows += builder.batch(raw).num_rows
    client.close()
    return rows


def interleaved(
    variants: list[tuple[str, Callable[[], int]]], rounds: int
) -> list[tuple[str, int, float]]:
    """Each variant's best time over ``rounds`` rounds; every round runs every variant once, in
    turn, so a burst of load from elsewhere on the machine hits them alike."""
    times: dict[str, list[float]] = {label: [] for label, _ in variants}
    rows: dict[str, int] = {}
    for _ in range(rounds):
        for label, run in variants:
            started = time.perf_counter()
            rows[label] = run()
            times[label].append(time.perf_counter() - started)
    return [(label, rows[label], min(times[label])) for label, _ in variants]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_bench", description=__doc__)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument(
        "--page-size",
        type=int,
        default=None,
        help="pageSize of the Spark reads (default: the source's)",
    )
    parser.add_argument("--page-sizes", default="", help="comma list: a pageSize sweep at K=2")
    parser.add_argument("--rounds", type=int, default=5)
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
        from streamworker.spark.options import DEFAULT_PAGE_SIZE

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

        def spark_count(k: int | None, page: int | None = args.page_size) -> int:
            reader = spark.read.format("streamworker_redis").option("url", url)
            reader = reader.option("streams", STREAM)
            if k is not None:
                reader = reader.option("numPartitions", k)
            if page is not None:
                reader = reader.option("pageSize", page)
            return int(reader.load().count())

        spark_count(2)  # warm-up: starts the Python workers
        variants: list[tuple[str, Callable[[], int]]] = [
            ("redis-py XRANGE, 1 process", lambda: xrange_loop(url, 1_000)),
            (
                "fastread, no Spark, 1 process",
                lambda: fastread_loop(url, args.page_size or DEFAULT_PAGE_SIZE),
            ),
        ]
        for k in (1, 2, 4):
            variants.append((f"spark local[{args.cores}], K={k}", lambda k=k: spark_count(k)))
        variants.append((f"spark local[{args.cores}], default", lambda: spark_count(None)))
        for size in [int(x) for x in args.page_sizes.split(",") if x.strip()]:
            variants.append(
                (
                    f"spark local[{args.cores}], K=2, pageSize {size}",
                    lambda s=size: spark_count(2, s),
                )
            )
        results = interleaved(variants, args.rounds)
        spark.stop()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    load = os.getloadavg()[0]
    print(
        f"\nbatch read of {args.entries} entries (best of {args.rounds}; load average {load:.1f})"
    )
    base = results[0][1] / results[0][2]
    print("| variant | rows | seconds | rows/s | x redis-py loop |\n|---|---:|---:|---:|---:|")
    for label, rows, seconds in results:
        rate = rows / seconds
        print(f"| {label} | {rows} | {seconds:.2f} | {rate:,.0f} | {rate / base:.2f} |")
    k2 = next(r for r in results if r[0].endswith("K=2"))
    print(f"\nK=2 / redis-py loop: {k2[1] / k2[2] / base:.2f} (target >= 0.5)")
    bad = [label for label, rows, _ in results if rows != args.entries]
    if bad:
        print(f"spark_bench: wrong row count in {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
