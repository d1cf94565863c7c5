"""Bulk work on Spark: the ``streamworker_redis`` data source (batch and streaming reads of Redis
Streams, an exactly-once stream sink), handler backfills with the SQL strategy's
``processed_messages`` rows, and archive-then-safe-trim. See docs/spark.md.

Install with ``pip install 'streamworker[spark]'`` (PySpark >= 4.2, pyarrow). Importing this
package needs neither PySpark nor a JVM: PySpark is imported when a function here is called.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from streamworker.errors import ConfigError
from streamworker.spark.options import FORMAT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FORMAT", "archive", "register", "run_handler", "safe_trim"]


def require_spark(what: str) -> None:
    """ConfigError naming ``pip install 'streamworker[spark]'`` when PySpark or pyarrow is
    missing."""
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"{what} needs the 'spark' extra ({', '.join(missing)} not installed): "
            f"pip install 'streamworker[spark]'"
        )


def register(spark: SparkSession) -> None:
    """Register the ``streamworker_redis`` format on ``spark`` for ``spark.read``,
    ``spark.readStream``, ``df.write`` and ``df.writeStream``. Idempotent."""
    require_spark("streamworker.spark")
    from streamworker.spark.source import RedisStreamsDataSource

    spark.dataSource.register(RedisStreamsDataSource)


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


def safe_trim(url: str, stream: str, *, require: tuple[str, ...] = ()) -> Any:
    """Trim ``stream`` below what every group and Spark cursor still needs (one Lua call): see
    :func:`streamworker.spark.redisops.safe_trim`. Needs no Spark."""
    from streamworker.spark import redisops

    client = redisops.connect(url)
    try:
        return redisops.safe_trim(client, stream, require=require)
    finally:
        client.close()
