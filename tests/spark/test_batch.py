"""Batch reads and writes of the streamworker_redis format on the shared local[2,4] session."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from streamworker.errors import ConfigError
from streamworker.spark import clear_errors, register
from streamworker.spark.source import MIN_ROWS_PER_TASK

pytestmark = pytest.mark.slow


def fill(client: redis.Redis, stream: str, n: int) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"n": str(i), "amount": str(i % 7)})
    return [i.decode() for i in pipe.execute()]


def spread(client: redis.Redis, stream: str, n: int, start_ms: int) -> list[str]:
    """``n`` entries one millisecond apart (a range is never cut inside a millisecond, and a
    pipelined ``fill`` may put hundreds of entries into one)."""
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"n": str(i), "amount": str(i % 7)}, id=f"{start_ms + i}-0")
    return [i.decode() for i in pipe.execute()]


def read(spark: Any, url: str, **options: Any) -> Any:
    reader = spark.read.format("streamworker_redis").option("url", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_read_in_k_partitions_returns_every_entry_once(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    base = 1_763_769_600_000
    ids = spread(redis_client, "a", 3000, base) + spread(redis_client, "b", 500, base)
    df = read(spark, redis_url, streams="a,b", numPartitions=3)
    assert df.rdd.getNumPartitions() == 6  # 3 per stream
    rows = df.select("stream", "id", "ms", "seq").collect()
    assert sorted(r.id for r in rows) == sorted(ids)
    assert all(r.id == f"{r.ms}-{r.seq}" for r in rows)
    one = df.filter("stream = 'a'").orderBy("ms", "seq").first()
    assert one is not None
    assert one.id == ids[0]


def test_read_between_two_ids(spark: Any, redis_client: redis.Redis, redis_url: str) -> None:
    ids = fill(redis_client, "a", 200)
    df = read(spark, redis_url, streams="a", startId=ids[10], endId=ids[99], numPartitions=2)
    assert sorted(r.id for r in df.select("id").collect()) == sorted(ids[10:100])


def test_fields_decode_into_the_handler_model(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    fill(redis_client, "a", 20)
    redis_client.xadd("a", {"n": "not a number", "amount": "1"})
    df = read(spark, redis_url, streams="a", model="tests.spark.models:Order")
    rows = df.select("n", "amount", "body_error").collect()
    good = [r for r in rows if r.body_error is None]
    assert sorted(r.n for r in good) == list(range(20))
    [bad] = [r for r in rows if r.body_error is not None]
    assert bad.n is None
    assert "body failed validation" in bad.body_error


def test_a_bad_option_surfaces_as_one_line(spark: Any, redis_url: str) -> None:
    with pytest.raises(ConfigError) as info, clear_errors():
        read(spark, redis_url, streams="a", numPartitions="many").collect()
    assert str(info.value) == "option numPartitions: expected an integer, got 'many'"


def test_the_timestamp_column_and_text_fields(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    redis_client.xadd("a", {"amount": "12"}, id="1763769600123-0")
    df = read(spark, redis_url, streams="a", fieldsType="string")
    assert df.schema["timestamp"].dataType.typeName() == "timestamp"
    row = df.selectExpr("fields['amount'] AS amount", "unix_millis(timestamp) AS ms").first()
    assert (row.amount, row.ms) == ("12", 1763769600123)


def test_without_num_partitions_a_read_uses_the_session_parallelism(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    fill(redis_client, "big", 2 * MIN_ROWS_PER_TASK)
    fill(redis_client, "small", 100)
    assert read(spark, redis_url, streams="big").rdd.getNumPartitions() == 2  # local[2,4]
    assert read(spark, redis_url, streams="small").rdd.getNumPartitions() == 1


def test_a_filter_on_timestamp_reads_only_its_range(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    day = 1_763_769_600_000
    pipe = redis_client.pipeline(transaction=False)
    for i in range(100):
        pipe.xadd("a", {"n": str(i)}, id=f"{day + i * 1000}-0")
    pipe.execute()
    register(spark, pushdown=True)  # the pruning reader, planned through Spark's pushdown path
    try:
        df = read(spark, redis_url, streams="a").filter(
            "timestamp >= TIMESTAMP '2025-11-22 00:00:10 UTC' AND ms < 1763769620000"
        )
        found = sorted(r.n for r in df.selectExpr("CAST(fields['n'] AS STRING) AS n").collect())
    finally:
        register(spark)
    assert found == sorted(str(i) for i in range(10, 20))


def test_several_tasks_writing_explicit_ids_into_one_stream_drop_nothing(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    """The hazard: tasks XADDing explicit ids into one stream refuse each other's lower ids.
    The sink stages every task's rows and one script appends them in id order."""
    ids = fill(redis_client, "src", 4000)
    df = read(spark, redis_url, streams="src").repartition(4)  # rows spread over 4 tasks
    assert df.rdd.getNumPartitions() == 4
    (
        df.select("id", "fields")
        .write.format("streamworker_redis")
        .option("url", redis_url)
        .option("stream", "copy")
        .option("idMode", "explicit")
        .mode("append")
        .save()
    )
    assert [e[0].decode() for e in redis_client.xrange("copy")] == ids


def test_a_batch_write_rerun_with_the_same_batch_id_adds_nothing(
    spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    fill(redis_client, "src", 300)
    df = read(spark, redis_url, streams="src", numPartitions=2)

    def write() -> None:
        (
            df.select("id", "fields")
            .write.format("streamworker_redis")
            .option("url", redis_url)
            .option("stream", "copy")
            .option("queryName", "nightly")
            .option("batchId", 20261122)
            .mode("append")
            .save()
        )

    write()
    write()
    copied = redis_client.xrange("copy")
    assert len(copied) == 300
    assert [f[b"n"] for _, f in copied] == [str(i).encode() for i in range(300)]  # in id order
    assert not redis_client.keys("{copy}:spark:stg:*")


def test_plain_columns_become_fields(spark: Any, redis_client: redis.Redis, redis_url: str) -> None:
    df = spark.createDataFrame([("a", 1), ("b", 2)], "sku STRING, qty INT")
    df.write.format("streamworker_redis").option("url", redis_url).option("stream", "out").mode(
        "append"
    ).save()
    assert sorted(f[b"sku"] + f[b"qty"] for _, f in redis_client.xrange("out")) == [b"a1", b"b2"]


def test_overwrite_is_refused(spark: Any, redis_url: str) -> None:
    df = spark.createDataFrame([("a",)], "sku STRING")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("streamworker_redis").option("url", redis_url).option("stream", "out").mode(
            "overwrite"
        ).save()
