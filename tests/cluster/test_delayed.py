"""Delayed delivery on a real 3-master Redis Cluster: keyed, partitioned delayed publishes wait
in each partition's own slot (set and marker beside the stream), a retry schedules nothing
twice, and a worker moves and handles each once."""

from __future__ import annotations

from streamworker import App, Message
from streamworker.io.keys import delayed_key
from streamworker.io.redisio import open_sync_redis
from streamworker.producing.partitions import PartitionedStream
from streamworker.producing.producer import StreamOptions, SyncProducer
from tests.support.cluster import LocalCluster
from tests.support.worker import eventually, running_worker

ORDERS = PartitionedStream("orders", 4)
KEYS = [f"customer-{i}" for i in range(12)]


async def test_keyed_delayed_publishes_to_every_partition_are_handled_once(
    redis_cluster: LocalCluster,
) -> None:
    redis_cluster.flushall()
    client = open_sync_redis(redis_cluster.url)
    producer = SyncProducer(client, streams={ORDERS.name: StreamOptions(partitions=4)})
    for _ in range(2):
        for key in KEYS:
            producer.publish(
                ORDERS.name, {"k": key}, partition_key=key, idempotency_key=key, delay_ms=300
            )
    assert sum(client.zcard(delayed_key(s)) for s in ORDERS.streams()) == len(KEYS)
    assert len({redis_cluster.master_of(s).port for s in ORDERS.streams()}) >= 2
    app = App("delayed-cluster")
    handled: list[str] = []

    @app.handler(ORDERS.name, group="g", partitions=ORDERS.partitions, block_ms=100)
    async def handle(msg: Message) -> None:
        handled.append(msg.fields["k"])

    async with running_worker(app, redis_cluster.url):
        await eventually(lambda: len(handled) >= len(KEYS), 30, "every key handled")
        await eventually(
            lambda: (
                sum(client.xlen(s) for s in ORDERS.streams()) == len(KEYS)
                and all(client.xpending(s, "g")["pending"] == 0 for s in ORDERS.streams())
            ),
            10,
            "all moved once and acked",
        )
    assert sorted(handled) == sorted(KEYS)
    assert sum(client.zcard(delayed_key(s)) for s in ORDERS.streams()) == 0
