"""Producing on a real 3-master Redis Cluster: idempotent publishes to every partition of a
partitioned stream (markers in each partition's slot), and the outbox relay across slots."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.orm import Session

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from streamworker.idempotency.sql.outbox import Relay, pending_rows, publish
from streamworker.io.redisio import open_redis, open_sync_redis
from streamworker.producing.partitions import PartitionedStream
from streamworker.producing.producer import Producer, StreamOptions, SyncProducer
from tests.support.cluster import LocalCluster

ORDERS = PartitionedStream("orders", 4)
KEYS = [f"customer-{i}" for i in range(12)]


def test_idempotent_publishes_land_once_in_every_partition(redis_cluster: LocalCluster) -> None:
    redis_cluster.flushall()
    client = open_sync_redis(redis_cluster.url)
    producer = SyncProducer(client, streams={"orders": StreamOptions(partitions=4)})
    for _ in range(2):
        for key in KEYS:
            producer.publish("orders", {"k": key}, partition_key=key, idempotency_key=key)
    per_stream = {s: client.xlen(s) for s in ORDERS.streams()}
    assert sum(per_stream.values()) == len(KEYS)
    assert per_stream == {
        s: sum(1 for k in KEYS if ORDERS.stream_for(k) == s) for s in ORDERS.streams()
    }


def test_the_async_producer_pipelines_across_slots(redis_cluster: LocalCluster) -> None:
    redis_cluster.flushall()

    async def main() -> int:
        client = open_redis(redis_cluster.url)
        producer = Producer(client, streams={"orders": StreamOptions(partitions=4)})
        plans = [
            producer.plan("orders", {"k": k}, partition_key=k, idempotency_key=k) for k in KEYS
        ]
        await producer.publish_many(plans)
        receipts = await producer.publish_many(plans)
        await client.aclose()
        return sum(r.duplicate for r in receipts)

    assert asyncio.run(main()) == len(KEYS)


def test_the_relay_moves_rows_to_partitions_on_several_masters(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    redis_cluster.flushall()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'outbox.db'}")
    upgrade(db)
    with Session(db.sync_engine) as session, session.begin():
        for key in KEYS:
            publish(session, "orders", {"k": key}, partitions=4, partition_key=key)
    client = open_sync_redis(redis_cluster.url)
    Relay(db, client).relay_once()
    assert pending_rows(db) == 0
    got = sorted(f[b"k"].decode() for s in ORDERS.streams() for _, f in client.xrange(s))
    assert got == sorted(KEYS)
