"""Streaming reads and the exactly-once sink on the shared local[2,4] session: capped
micro-batches with Trigger.AvailableNow, a forced replay of a committed batch, data loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from streamworker.spark import redisops
from tests.spark.test_batch import fill

pytestmark = pytest.mark.slow


def source(spark: Any, url: str, **options: Any) -> Any:
    reader = spark.readStream.format("streamworker_redis").option("url", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_to_parquet(spark: Any, url: str, out: Path, ckpt: Path, **options: Any) -> Any:
    query = (
        source(spark, url, **options)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def run_to_redis(spark: Any, url: str, target: str, ckpt: Path, **options: Any) -> Any:
    query = (
        source(spark, url, **options)
        .select("id", "fields")
        .writeStream.format("streamworker_redis")
        .option("url", url)
        .option("stream", target)
        .option("queryName", "copy")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def batches(query: Any) -> list[int]:
    return [int(p["numInputRows"]) for p in query.recentProgress if int(p["numInputRows"])]


def test_available_now_reads_everything_in_capped_batches_exactly_once(
    spark: Any, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    ids = fill(redis_client, "src", 2000)
    opts = {"streams": "src", "maxRecordsPerBatch": 500, "numPartitions": 2, "cursorName": "q"}
    parquet = run_to_parquet(spark, redis_url, tmp_path / "out", tmp_path / "ck1", **opts)
    sink = run_to_redis(spark, redis_url, "copy", tmp_path / "ck2", **opts)
    assert batches(parquet) == [500] * 4
    assert batches(sink) == [500] * 4
    written = spark.read.parquet(str(tmp_path / "out")).select("id").collect()
    assert sorted(r.id for r in written) == sorted(ids)
    assert [f[b"n"] for _, f in redis_client.xrange("copy")] == [
        str(i).encode() for i in range(2000)
    ]
    # commit() lags a batch and never comes for the last one of an availableNow run.
    cursor = redisops.read_cursors(redis_client, "src")["q"]
    assert ids[0] < cursor < ids[-1] or cursor == ids[1499]


def test_a_forced_replay_of_a_committed_batch_adds_nothing(
    spark: Any, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    fill(redis_client, "src", 1000)
    opts = {"streams": "src", "maxRecordsPerBatch": 400}
    run_to_parquet(spark, redis_url, tmp_path / "out", tmp_path / "ck1", **opts)
    run_to_redis(spark, redis_url, "copy", tmp_path / "ck2", **opts)
    # Forget that the last batch committed: Spark re-runs it with the same batchId.
    for ckpt in ("ck1", "ck2"):
        commits = tmp_path / ckpt / "commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(last)).unlink()
        (commits / f".{last}.crc").unlink(missing_ok=True)
    fill(redis_client, "src", 100)  # and new entries for the batches after it
    parquet = run_to_parquet(spark, redis_url, tmp_path / "out", tmp_path / "ck1", **opts)
    sink = run_to_redis(spark, redis_url, "copy", tmp_path / "ck2", **opts)
    written = spark.read.parquet(str(tmp_path / "out")).select("id").collect()
    source_ids = [e[0].decode() for e in redis_client.xrange("src")]
    assert sorted(r.id for r in written) == sorted(source_ids)
    assert len(redis_client.xrange("copy")) == 1100
    assert sum(batches(parquet)) <= 300  # the replayed batch (skipped by the sink) + the new
    assert sum(batches(sink)) <= 300


def test_entries_trimmed_before_they_were_read_fail_the_query(
    spark: Any, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    fill(redis_client, "src", 300)
    run_to_redis(spark, redis_url, "copy", tmp_path / "ck", streams="src")
    new = fill(redis_client, "src", 300)
    redis_client.xtrim("src", minid=new[100], approximate=False)  # 100 unread entries gone
    with pytest.raises(
        Exception, match=r"100 entries after \S+ were trimmed before they were read"
    ):
        run_to_redis(spark, redis_url, "copy", tmp_path / "ck", streams="src")
    assert redis_client.xlen("copy") == 300
    run_to_redis(spark, redis_url, "copy", tmp_path / "ck", streams="src", failOnDataLoss="false")
    assert redis_client.xlen("copy") == 500
