"""What the Spark commands (``archive``, ``backfill``) share: Redis checked before a JVM starts,
and the Spark session started under a progress phase. pyspark is imported only when called."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from streamworker.errors import StreamworkerError
from streamworker.io.redisio import redact_url
from streamworker.ops.progress import Progress


def check_redis(url: str, check: Callable[[redis.Redis], None] | None = None) -> None:
    """PING ``url`` (then ``check`` on the client, when given), so that a bad URL or an
    unreachable server fails in one line before a JVM takes seconds to start."""
    from streamworker.spark import redisops

    client = redisops.connect(url)
    try:
        client.ping()
        if check is not None:
            check(client)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise StreamworkerError(f"cannot reach Redis at {redact_url(url)}: {exc}") from None
    finally:
        client.close()


def start_spark(name: str, master: str | None, progress: Progress) -> Any:
    """The SparkSession of application ``name`` (on ``master`` when given; else what
    spark-submit or the defaults say), its log cut down to errors."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(name)
    if master:
        builder = builder.master(master)
    # The JVM takes seconds to tens of seconds to start: say so instead of counting zeros.
    with progress.phase("starting Spark"):
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    return spark
