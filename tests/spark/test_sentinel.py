"""The Spark source and sink through a ``redis+sentinel://`` URL: they find the primary the
Sentinels name, read from it and write to it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.sentinel import SentinelSetup

pytestmark = pytest.mark.slow


def test_the_source_and_the_sink_work_through_sentinels(
    spark: Any, sentinel_setup: SentinelSetup
) -> None:
    primary = sentinel_setup.primary.client()
    primary.flushall()
    for n in range(50):
        primary.xadd("src", {"n": str(n)})
    url = sentinel_setup.url
    df = spark.read.format("streamworker_redis").option("url", url).option("streams", "src").load()
    assert df.count() == 50
    (
        df.select("id", "fields")
        .write.format("streamworker_redis")
        .option("url", url)
        .option("stream", "copy")
        .option("queryName", "sentinel")
        .option("batchId", 1)
        .mode("append")
        .save()
    )
    assert [f[b"n"] for _, f in primary.xrange("copy")] == [str(n).encode() for n in range(50)]
