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
from streamworker.spark.errors import clear_errors
from streamworker.spark.options import FORMAT, parse_read_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FORMAT",
    "archive",
    "clear_errors",
    "read",
    "read_stream",
    "register",
    "run_handler",
    "safe_trim",
]


def require_spark(what: str) -> None:
    """ConfigError naming ``pip install 'streamworker[spark]'`` when PySpark or pyarrow is
    missing."""
    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"{what} needs the 'spark' extra ({', '.join(missing)} not installed): "
            f"pip install 'streamworker[spark]'"
        )


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def _parallelism(spark: SparkSession) -> int | None:
    """``spark.default.parallelism`` (total executor cores on a cluster, N for ``local[N]``),
    None when the session cannot tell (Spark Connect hides the SparkContext)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext; fall back to the conf
        try:
            value = spark.conf.get("spark.default.parallelism", None)
        except Exception:
            return None
        return int(value) if value else None


def register(spark: SparkSession, *, pushdown: bool = False) -> None:
    """Register the ``streamworker_redis`` format on ``spark`` for ``spark.read``,
    ``spark.readStream``, ``df.write`` and ``df.writeStream``. Idempotent (the last call's
    settings win).

    The registered source carries the session's default parallelism (the default task budget
    of a read: see docs/spark.md). With ``pushdown`` it also turns on
    ``spark.sql.python.filterPushdown.enabled`` for the session, and filters on ``timestamp``,
    ``ms`` and ``id`` narrow what a batch read reads. It is off by default because Spark then
    refuses the source in every query planned where that setting reads false: a thread of the
    caller's own, without the session active, plans with the defaults (false).
    """
    require_spark("streamworker.spark")
    from streamworker.spark.source import session_source

    if pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(session_source(_parallelism(spark), pushdown))


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


def safe_trim(url: str, stream: str, *, require: tuple[str, ...] = ()) -> Any:
    """Trim ``stream`` below what every group and Spark cursor still needs (one Lua call): see
    :func:`streamworker.spark.redisops.safe_trim`. Needs no Spark."""
    from streamworker.spark import redisops

    client = redisops.connect(url)
    try:
        return redisops.safe_trim(client, stream, require=require)
    finally:
        client.close()
