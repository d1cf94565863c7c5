"""The connector on a real Redis Cluster (3 masters on loopback, ``redis+cluster://``): a
partitioned stream's partitions spread over the masters are read as one source, with one offset
per partition, and the sink writes to partitions by key. The first tests call the source in
process (no JVM); the last one runs it on the shared Spark session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType

from streamworker.io.keys import partition_stream
from streamworker.producing.partitions import PartitionedStream, partition_of
from streamworker.spark import redisops
from streamworker.spark.options import parse_read_options, parse_write_options
from streamworker.spark.source import BatchReader, StreamReader, _RowLayout, _stage_rows
from tests.support.cluster import LocalCluster, sync_client_for

pytestmark = pytest.mark.slow

ORDERS = PartitionedStream("orders", 4)


@pytest.fixture
def cluster_url(redis_cluster: LocalCluster) -> str:
    redis_cluster.flushall()
    return redis_cluster.url


@pytest.fixture
def cluster(cluster_url: str) -> Any:
    client = sync_client_for(cluster_url)
    yield client
    client.close()


def produce(client: redis.Redis, n: int, customers: int = 50) -> list[str]:
    """``n`` orders keyed by customer, routed as PartitionedProducer routes them."""
    ids = []
    for i in range(n):
        key = f"c{i % customers}"
        entry = client.xadd(ORDERS.stream_for(key), {"key": key, "n": str(i)})
        ids.append(entry.decode())
    return ids


def rows_of(reader: Any, parts: Any) -> list[dict[str, Any]]:
    return [row for p in parts for batch in reader.read(p) for row in batch.to_pylist()]


def test_the_partitions_live_on_several_masters(
    redis_cluster: LocalCluster, cluster: redis.Redis
) -> None:
    produce(cluster, 40)
    masters = {redis_cluster.master_of(s).port for s in ORDERS.streams()}
    assert len(masters) > 1  # otherwise the tests below would not cross nodes


def test_a_batch_read_of_a_partitioned_stream_on_a_cluster(
    cluster: redis.Redis, cluster_url: str
) -> None:
    ids = produce(cluster, 2_000)
    reader = BatchReader(parse_read_options({"url": cluster_url, "streams": "orders"}), 4)
    rows = rows_of(reader, reader.partitions())
    assert sorted(r["id"] for r in rows) == sorted(ids)
    assert {r["stream"] for r in rows} == set(ORDERS.streams())
    assert all(r["stream"] == ORDERS.stream_for(dict(r["fields"])["key"].decode()) for r in rows)


def test_streaming_offsets_on_a_cluster_are_one_per_partition(
    cluster: redis.Redis, cluster_url: str
) -> None:
    produce(cluster, 400)
    reader = StreamReader(
        parse_read_options({"url": cluster_url, "streams": "orders", "maxRecordsPerBatch": "100"})
    )
    start = reader.initialOffset()
    assert set(start) == set(ORDERS.streams())
    first = reader.latestOffset(start, ReadMaxRows(100))
    assert len(rows_of(reader, reader.partitions(start, first))) == 100
    rest = reader.latestOffset(first, ReadAllAvailable())
    assert len(rows_of(reader, reader.partitions(first, rest))) == 300


def test_the_sink_writes_partitions_by_key_on_a_cluster(
    cluster: redis.Redis, cluster_url: str
) -> None:
    options = parse_write_options(
        {"url": cluster_url, "stream": "copy", "partitions": "3", "queryName": "q"},
        streaming=False,
    )
    schema = StructType([StructField("key", StringType()), StructField("n", StringType())])
    layout = _RowLayout(options, schema)
    data = [(f"c{i % 20}", str(i)) for i in range(300)]
    client = redisops.connect(cluster_url)
    try:
        staged = _stage_rows(options, layout, iter(data), "q", "b7", 0)
        for _ in range(2):  # the second commit is a replay: it adds nothing
            for target, key, _n in staged.staged:
                redisops.commit_staged(client, target, [key], query="q", batch_id=7, id_mode="auto")
    finally:
        client.close()
    total = 0
    for i in range(3):
        entries = cluster.xrange(partition_stream("copy", i))
        total += len(entries)
        assert all(partition_of(f[b"key"], 3) == i for _, f in entries)
    assert total == 300


def test_spark_copies_a_partitioned_stream_on_a_cluster_by_key_exactly_once(
    spark: Any, cluster: redis.Redis, cluster_url: str, tmp_path: Path
) -> None:
    produce(cluster, 3_000)
    assert (
        spark.read.format("streamworker_redis")
        .option("url", cluster_url)
        .option("streams", "orders")
        .load()
        .count()
        == 3_000
    )

    def copy() -> Any:
        query = (
            spark.readStream.format("streamworker_redis")
            .option("url", cluster_url)
            .option("streams", "orders")
            .option("maxRecordsPerBatch", 1_000)
            .load()
            .selectExpr("CAST(fields['key'] AS STRING) AS key", "fields")
            .writeStream.format("streamworker_redis")
            .option("url", cluster_url)
            .option("stream", "copy")
            .option("partitions", 3)
            .option("queryName", "copy")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return query

    copy()
    offsets = (tmp_path / "ck" / "offsets" / "2").read_text().splitlines()
    assert set(json.loads(offsets[2])) == set(ORDERS.streams())  # one offset per partition
    commits = tmp_path / "ck" / "commits"
    (commits / "2").unlink()  # forget the last batch's commit: Spark runs it again
    (commits / ".2.crc").unlink(missing_ok=True)
    copy()
    copied = PartitionedStream("copy", 3)
    assert sum(cluster.xlen(s) for s in copied.streams()) == 3_000
    for stream in copied.streams():
        keys = {f[b"key"].decode() for _, f in cluster.xrange(stream)}
        assert all(copied.stream_for(k) == stream for k in keys)
