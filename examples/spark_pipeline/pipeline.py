"""A bulk pipeline on Spark: analyse a stream, backfill a handler over its history, copy it
exactly once, archive it to Parquet and trim what everyone is done with.

Run it from the repository root (the Spark workers import ``examples.spark_pipeline.app``):

    python examples/spark_pipeline/pipeline.py --redis-url redis://127.0.0.1:6379/0 --master local[2]

or submit it to a cluster with the packages shipped (see README.md here and docs/spark.md):

    python examples/spark_pipeline/package.py dist
    spark-submit --master spark://HOST:7077 --py-files dist/streamworker.zip,dist/shop_app.zip \
        examples/spark_pipeline/pipeline.py --redis-url redis://REDIS:6379/0

It uses a temporary SQLite database and directory, and stream keys under ``shop:``. Needs Java
and ``pip install 'streamworker[spark]'``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from examples.spark_pipeline.app import create_tables  # noqa: E402
from streamworker.idempotency.sql import SqlDatabase  # noqa: E402
from streamworker.idempotency.sql.migrate import upgrade  # noqa: E402
from streamworker.spark import archive, register, run_handler, safe_trim  # noqa: E402

STREAM = "shop:orders"


def produce(client: redis.Redis, n: int) -> None:
    client.delete(STREAM, "shop:orders:copy")
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        amount = 0 if i % 500 == 7 else 100 + i % 900  # every 500th order has no amount
        pipe.xadd(STREAM, {"customer": f"c{i % 40}", "amount_cents": str(amount)})
    pipe.execute()
    # A live consumer group that has read the first half and acked all but 10 entries of it.
    client.xgroup_create(STREAM, "shipping", id="0")
    delivered = client.xreadgroup("shipping", "pod-0", {STREAM: ">"}, count=n // 2)[0][1]
    client.xack(STREAM, "shipping", *[entry_id for entry_id, _ in delivered[:-10]])


def run(spark: Any, url: str, workdir: Path, n: int = 5_000) -> None:
    """The pipeline on ``spark`` (a session whose workers can import this repository)."""
    from pyspark.sql import functions as F

    register(spark)
    client = redis.Redis.from_url(url)
    produce(client, n)
    print(f"produced {n} orders on {STREAM}")

    # 1. Analyse: a batch read decoded into the handler's model.
    orders = (
        spark.read.format("streamworker_redis")
        .option("url", url)
        .option("streams", STREAM)
        .option("numPartitions", 2)
        .option("model", "examples.spark_pipeline.app:Order")
        .load()
    )
    total = orders.agg(F.sum("amount_cents").alias("cents")).first()
    print(f"revenue in the stream: {total['cents'] / 100:.2f} EUR")

    # 2. Backfill the invoicing handler over the whole history, exactly once.
    db_url = f"sqlite:///{workdir / 'shop.db'}"
    db = SqlDatabase(db_url)
    upgrade(db)
    db.sync_engine.dispose()
    create_tables(db_url)
    outcomes = run_handler(
        orders, "examples.spark_pipeline.app:app", db_url=db_url, redis_url=url, dead_letter=True
    )
    counts = {r["outcome"]: r["count"] for r in outcomes.groupBy("outcome").count().collect()}
    print(f"backfill: ok {counts.get('ok', 0)}, failed {counts.get('failed', 0)}")
    again = run_handler(orders, "examples.spark_pipeline.app:app", db_url=db_url, redis_url=url)
    dup = again.filter("outcome = 'duplicate'").count()
    print(f"backfill run again: duplicate {dup}")
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        invoices = conn.execute(sa.text("SELECT count(*) FROM invoices")).scalar_one()
    engine.dispose()
    print(f"invoices: {invoices}, dead letters: {client.xlen('{shop:orders}:dlq')}")

    # 3. Copy the stream with its ids through the exactly-once sink (a streaming query).
    checkpoint = workdir / "copy-checkpoint"

    def copy() -> Any:
        query = (
            spark.readStream.format("streamworker_redis")
            .option("url", url)
            .option("streams", STREAM)
            .option("maxRecordsPerBatch", 2_000)
            .load()
            .select("id", "fields")
            .writeStream.format("streamworker_redis")
            .option("url", url)
            .option("stream", "shop:orders:copy")
            .option("idMode", "explicit")
            .option("queryName", "copy")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return query

    copy()
    print(f"copied: {client.xlen('shop:orders:copy')} entries")
    # A driver that dies after the sink committed a batch, before Spark logged the commit,
    # leaves exactly this checkpoint: Spark runs that batch again, with the same batch id.
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    replay = copy()
    again = sum(int(p["numInputRows"]) for p in replay.recentProgress)
    print(
        f"batch {last} replayed ({again} entries read again): "
        f"{client.xlen('shop:orders:copy')} entries"
    )

    # 4. Archive to Parquet, then trim what the group and the archive are done with.
    result = archive(spark, STREAM, str(workdir / "archive"), url=url)
    print(f"archived: {result.rows} entries in {result.batches} batch(es)")
    trim = safe_trim(url, STREAM, require=("archive",))
    pending = client.xpending(STREAM, "shipping")["pending"]
    print(f"trimmed: {trim.trimmed} entries; left: {client.xlen(STREAM)}; still pending: {pending}")
    client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--orders", type=int, default=5_000)
    parser.add_argument(
        "--master", help="Spark master (default: spark-submit's, else local[*]); e.g. local[2]"
    )
    args = parser.parse_args()
    # Run with plain python: the workers start from this interpreter and find this repository.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("streamworker-spark-pipeline").config(
        "spark.ui.showConsoleProgress", "false"
    )
    if args.master:
        builder = builder.master(args.master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(f"spark master: {spark.sparkContext.master}")
    try:
        with tempfile.TemporaryDirectory(prefix="sw-spark-pipeline-") as tmp:
            run(spark, args.redis_url, Path(tmp), args.orders)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
