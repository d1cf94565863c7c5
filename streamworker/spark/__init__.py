"""Bulk work on Spark: the ``streamworker_redis`` data source (batch and streaming reads of Redis
Streams, an exactly-once stream sink), handler backfills with the SQL strategy's
``processed_messages`` rows, and archive-then-safe-trim. See docs/spark.md.

Install with ``pip install 'streamworker[spark]'`` (PySpark >= 4.2, pyarrow). Importing this
package needs neither PySpark nor a JVM: PySpark is imported when a function here is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamworker.spark.errors import clear_errors
from streamworker.spark.options import FORMAT, parse_read_options
from streamworker.spark.registration import PUSHDOWN_CONF, register, require_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FORMAT",
    "PUSHDOWN_CONF",
    "archive",
    "clear_errors",
    "read",
    "read_stream",
    "register",
    "require_spark",
    "run_handler",
    "safe_trim",
]


def read(spark: SparkSession, **options: Any) -> DataFrame:
    """``spark.read.format("streamworker_redis")`` with ``options`` (as in docs/spark.md, e.g.
    ``url=…, streams="orders", numPartitions=8``), checked here first: a bad option raises
    ConfigError in this process, with one line saying what is wrong. Registers the format."""
    parse_read_options(options)
    register(spark)
    return spark.read.format(FORMAT).options(**{k: str(v) for k, v in options.items()}).load()


def read_stream(spark: SparkSession, **options: Any) -> DataFrame:
    """:func:`read` for ``spark.readStream`` (a streaming DataFrame)."""
    parse_read_options(options)
    register(spark)
    reader = spark.readStream.format(FORMAT).options(**{k: str(v) for k, v in options.items()})
    return reader.load()


def run_handler(df: DataFrame, target: str, **kwargs: Any) -> DataFrame:
    """Run a streamworker handler over ``df``'s entries on the executors, exactly once with the
    live workers: see :func:`streamworker.spark.backfill.run_handler`."""
    require_spark("streamworker.spark.run_handler")
    from streamworker.spark.backfill import run_handler as run

    return run(df, target, **kwargs)


def archive(spark: SparkSession, stream: str, path: str, **kwargs: Any) -> Any:
    """Archive ``stream`` to Parquet: see :func:`streamworker.spark.archiving.archive`."""
    require_spark("streamworker.spark.archive")
    from streamworker.spark.archiving import archive as run

    return run(spark, stream, path, **kwargs)


def safe_trim(
    url: str,
    stream: str,
    *,
    require: tuple[str, ...] = (),
    wait_replicas: int = 0,
    wait_timeout_ms: int = 1_000,
) -> Any:
    """Trim ``stream`` below what every group and Spark cursor still needs (one Lua call): see
    :func:`streamworker.spark.redisops.safe_trim` (``wait_replicas``: return only once that many
    replicas have the trim). Needs no Spark."""
    from streamworker.io.replicawait import ReplicaWait
    from streamworker.spark import redisops

    wait = ReplicaWait(wait_replicas, wait_timeout_ms)
    client = redisops.connect(url)
    try:
        return redisops.safe_trim(client, stream, require=require, wait=wait)
    finally:
        client.close()
