"""Which batches the consume loop calls fresh (read by '>' moments ago, so a strategy may skip
its ownership check before the handlers) and which it does not."""

from __future__ import annotations

import asyncio
import time

import redis
import redis.asyncio as aioredis

from streamworker import App, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import Outcome
from streamworker.idempotency.base import Batch
from streamworker.idempotency.none import AtLeastOnce
from streamworker.io.redisio import Entry
from streamworker.observability.metrics import Metrics
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.threads import HandlerThreads
from tests.support.worker import eventually

STREAM, GROUP = "fresh", "g"


class Recording(AtLeastOnce):
    """At-least-once, recording each batch's ids and its ``fresh`` flag."""

    def __init__(self, client: aioredis.Redis) -> None:
        super().__init__(client, STREAM, GROUP, 1)
        self.calls: list[tuple[list[str], bool]] = []

    async def process(self, batch: Batch) -> list[Outcome]:
        self.calls.append(([m.id for m in batch.messages], batch.fresh))
        return await super().process(batch)


def _consumer(client: aioredis.Redis, strategy: Recording, claim_idle_ms: int) -> Consumer:
    app = App("t")

    @app.handler(STREAM, group=GROUP, block_ms=50, claim_idle_ms=claim_idle_ms)
    async def handle(msg: Message) -> None:
        return None

    spec = app.handlers[0]
    return Consumer(
        spec,
        client=client,
        name="c1",
        strategy=strategy,
        resolver=Resolver(),
        metrics=Metrics(),
        threads=HandlerThreads(1),
        backoff=Backoff(0.05, 0.5),
    )


async def test_new_entries_are_fresh_the_backlog_is_not(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    old = redis_client.xadd(STREAM, {"n": "0"}).decode()
    redis_client.xreadgroup(GROUP, "c1", {STREAM: ">"})  # pending for c1 before it starts
    client = aioredis.Redis.from_url(redis_url)
    strategy = Recording(client)
    consumer = _consumer(client, strategy, claim_idle_ms=30_000)
    task = asyncio.ensure_future(consumer.run())
    try:
        await consumer.backlog_drained.wait()
        new = redis_client.xadd(STREAM, {"n": "1"}).decode()
        await eventually(lambda: len(strategy.calls) == 2)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
        await client.aclose()
    assert strategy.calls == [([old], False), ([new], True)]
    assert redis_client.xpending(STREAM, GROUP)["pending"] == 0


async def test_a_read_older_than_half_of_claim_idle_ms_is_not_fresh(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    ids = [redis_client.xadd(STREAM, {"n": str(i)}) for i in range(2)]
    redis_client.xreadgroup(GROUP, "c1", {STREAM: ">"})
    client = aioredis.Redis.from_url(redis_url)
    strategy = Recording(client)
    consumer = _consumer(client, strategy, claim_idle_ms=1000)
    try:
        now = time.monotonic()
        await consumer.batches.process(
            [Entry(ids[0], [b"n", b"0"])], {ids[0]: 1}, fresh_at=now - 0.6
        )
        await consumer.batches.process([Entry(ids[1], [b"n", b"1"])], {ids[1]: 1}, fresh_at=now)
    finally:
        await client.aclose()
    assert [fresh for _, fresh in strategy.calls] == [False, True]
