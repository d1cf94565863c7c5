"""The shared rate limit on a real 3-master Redis Cluster: one limit over every partition of a
partitioned handler (its key in the logical stream's hash tag, the partitions on other nodes),
and a RateLimited pause."""

from __future__ import annotations

import time

from streamworker import App, Message, RateLimited
from streamworker.io.keys import rate_limit_key
from streamworker.io.redisio import open_sync_redis
from streamworker.producing.partitions import PartitionedStream
from streamworker.producing.producer import StreamOptions, SyncProducer
from tests.support.cluster import LocalCluster
from tests.support.worker import eventually, running_worker

ORDERS = PartitionedStream("orders", 4)


async def test_one_limit_paces_every_partition_of_a_handler(redis_cluster: LocalCluster) -> None:
    redis_cluster.flushall()
    client = open_sync_redis(redis_cluster.url)
    producer = SyncProducer(client, streams={ORDERS.name: StreamOptions(partitions=4)})
    for n in range(120):
        producer.publish(ORDERS.name, {"n": str(n)}, partition_key=str(n))
    assert len({redis_cluster.master_of(s).port for s in ORDERS.streams()}) >= 2
    app = App("rate-cluster")
    starts: list[float] = []
    paused: list[float] = []

    @app.handler(
        ORDERS.name, group="g", partitions=ORDERS.partitions, block_ms=100, rate_limit="40/s"
    )
    async def handle(msg: Message) -> None:
        if msg.fields["n"] == "7" and not paused:
            paused.append(time.monotonic())
            raise RateLimited(retry_after_ms=500)
        starts.append(time.monotonic())

    async with running_worker(app, redis_cluster.url):
        await eventually(lambda: len(starts) >= 120, 30, "every message handled")
        assert client.exists(rate_limit_key(ORDERS.name, "g")) in (0, 1)
    # 120 starts at 40/s over the four partitions together (burst 5): about 3 s, plus the pause.
    assert max(starts) - min(starts) >= 2.5
    assert len(paused) == 1
