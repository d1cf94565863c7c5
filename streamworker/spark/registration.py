"""Registering the ``streamworker_redis`` format on a Spark session (PySpark imported on call)."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from streamworker.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


def parallelism(spark: SparkSession) -> int | None:
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
    spark.dataSource.register(session_source(parallelism(spark), pushdown))
