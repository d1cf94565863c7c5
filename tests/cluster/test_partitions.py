"""Partitioned streams and ordering on a real 3-master Redis Cluster, in process: routing by key,
WAIT for producers, a failing message blocking only its own partition, poison messages
dead-lettered in order, and the lease handed over on a graceful stop."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker import App, DeadLetter, Message, Retry
from streamworker.errors import ConfigError
from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from streamworker.io.keys import lease_key
from streamworker.io.redisio import open_redis
from streamworker.observability.state import read_group_states
from streamworker.producing.partitions import PartitionedProducer, PartitionedStream
from tests.support.cluster import LocalCluster
from tests.support.sql import Charge, create_business_tables, running_sql_worker, sync_url
from tests.support.worker import eventually, running_worker

EVENTS = PartitionedStream("events", 4)


@pytest.fixture
async def aclient(redis_cluster: LocalCluster) -> AsyncIterator[aioredis.Redis]:
    redis_cluster.flushall()
    client = open_redis(redis_cluster.url, socket_timeout_s=10.0)
    yield client
    await client.aclose()


async def _items(client: aioredis.Redis, stream: str) -> list[str]:
    return [f[b"key"].decode() + ":" + f[b"seq"].decode() for _, f in await client.xrange(stream)]


async def test_the_producer_routes_each_key_to_one_partition_spread_over_the_masters(
    aclient: aioredis.Redis, redis_cluster: LocalCluster
) -> None:
    producer = PartitionedProducer(aclient, EVENTS)
    try:
        for seq in range(3):
            for key in ("a", "b", "c", "d", "e"):
                sent = await producer.add(key, {"key": key, "seq": seq})
                assert sent.stream == EVENTS.stream_for(key)
                assert sent.replicas is None
    finally:
        await producer.aclose()
    for key in ("a", "b", "c", "d", "e"):
        items = [i for i in await _items(aclient, EVENTS.stream_for(key)) if i[0] == key]
        assert items == [f"{key}:0", f"{key}:1", f"{key}:2"]
    owners = {redis_cluster.master_of(s).port for s in EVENTS.streams()}
    assert len(owners) >= 2


async def test_wait_replicas_reports_how_many_replicas_confirmed(
    aclient: aioredis.Redis,
) -> None:
    producer = PartitionedProducer(aclient, EVENTS)
    try:
        # This cluster has no replicas: WAIT 1 returns 0 after its timeout, and says so.
        sent = await producer.add("a", {"key": "a", "seq": 0}, wait_replicas=1, wait_timeout_ms=50)
        assert sent.replicas == 0
        assert await aclient.xlen(sent.stream) == 1
        with pytest.raises(ConfigError, match="at least one field"):
            await producer.add("a", {})
        with pytest.raises(ConfigError, match=">= 0"):
            await producer.add("a", {"k": "v"}, wait_replicas=-1)
    finally:
        await producer.aclose()


async def test_wait_replicas_works_on_a_single_redis_server(redis_url: str) -> None:
    client = open_redis(redis_url)
    producer = PartitionedProducer(client, EVENTS)
    try:
        sent = await producer.add("a", {"key": "a"}, wait_replicas=1, wait_timeout_ms=20)
        assert sent.replicas == 0
        assert await client.xlen(sent.stream) == 1
    finally:
        await producer.aclose()
        await client.aclose()


async def test_a_failing_message_blocks_its_partition_until_retried_and_others_go_on(
    aclient: aioredis.Redis, redis_cluster: LocalCluster
) -> None:
    handled: list[str] = []
    attempts: dict[str, int] = {}
    app = App("t")

    @app.handler(
        EVENTS.name, group="g", partitions=EVENTS.partitions, ordered=True,
        block_ms=100, claim_idle_ms=2_000, retry_backoff_ms=10, retry_backoff_max_ms=20,
    )  # fmt: skip
    async def handle(msg: Message) -> None:
        item = f"{msg.fields['key']}:{msg.fields['seq']}"
        attempts[item] = attempts.get(item, 0) + 1
        if item == "a:1" and attempts[item] < 3:
            raise Retry(delay_ms=150)
        handled.append(item)

    producer = PartitionedProducer(aclient, EVENTS)
    other = next(k for k in "bcdefgh" if EVENTS.stream_for(k) != EVENTS.stream_for("a"))
    for seq in range(4):
        for key in ("a", other):
            await producer.add(key, {"key": key, "seq": seq})
    await producer.aclose()
    async with running_worker(app, redis_cluster.url):
        await eventually(lambda: len(handled) == 8, 30, "all 8 handled")
    assert [i for i in handled if i.startswith("a:")] == ["a:0", "a:1", "a:2", "a:3"]
    assert [i for i in handled if i.startswith(f"{other}:")] == [f"{other}:{s}" for s in range(4)]
    assert attempts["a:1"] == 3
    # The other partition was not held up: it finished before a:1's retries were over.
    assert handled.index(f"{other}:3") < handled.index("a:2")


async def test_a_poison_message_is_dead_lettered_in_its_place_and_the_partition_moves_on(
    aclient: aioredis.Redis, redis_cluster: LocalCluster
) -> None:
    handled: list[str] = []
    app = App("t")

    @app.handler(
        EVENTS.name, group="g", partitions=EVENTS.partitions, ordered=True, block_ms=100,
        max_deliveries=3, retry_backoff_ms=10, retry_backoff_max_ms=10,
    )  # fmt: skip
    async def handle(msg: Message) -> None:
        item = f"{msg.fields['key']}:{msg.fields['seq']}"
        if item == "a:1":
            raise RuntimeError("always fails")
        if item == "a:3":
            raise DeadLetter("refused")
        handled.append(item)

    producer = PartitionedProducer(aclient, EVENTS)
    for seq in range(5):
        await producer.add("a", {"key": "a", "seq": seq})
    await producer.aclose()
    dlq = EVENTS.stream_for("a") + ":dlq"
    async with running_worker(app, redis_cluster.url):
        await eventually(lambda: len(handled) == 3, 30, "the three good ones")
        await eventually(lambda: aclient.xlen(dlq), 10, "dead letters")
    assert handled == ["a:0", "a:2", "a:4"]
    dead = [(f[b"seq"], f[b"dlq_deliveries"]) for _, f in await aclient.xrange(dlq)]
    assert dead == [(b"1", b"3"), (b"3", b"1")]


async def test_a_graceful_stop_hands_the_lease_to_the_other_worker_at_once(
    aclient: aioredis.Redis, redis_cluster: LocalCluster
) -> None:
    seen: dict[str, list[str]] = {"w1": [], "w2": []}
    app = App("t")

    @app.handler("jobs", group="g", ordered=True, block_ms=100, claim_idle_ms=60_000)
    async def handle(msg: Message) -> None:
        seen[msg.consumer].append(msg.fields["n"])

    first = running_worker(app, redis_cluster.url, consumer="w1")
    await first.__aenter__()
    try:
        await eventually(lambda: aclient.get(lease_key("jobs", "g")), 20, "w1 holding the lease")
        async with running_worker(app, redis_cluster.url, consumer="w2"):
            await aclient.xadd("jobs", {"n": "0"})
            await eventually(lambda: seen["w1"] == ["0"], 20, "w1 handling")
            assert await aclient.get(lease_key("jobs", "g")) == b"w1"
            await first.__aexit__(None, None, None)
            first = None
            await aclient.xadd("jobs", {"n": "1"})
            # The TTL is 60 s: w2 gets the lease this soon only because w1 released it.
            await eventually(lambda: seen["w2"] == ["1"], 45, "w2 handling after w1 stopped")
    finally:
        if first is not None:
            await first.__aexit__(None, None, None)
    assert seen == {"w1": ["0"], "w2": ["1"]}


async def test_stream_reads_are_routed_without_asking_a_node_for_their_keys(
    aclient: aioredis.Redis, redis_cluster: LocalCluster
) -> None:
    await aclient.xgroup_create("jobs", "g", mkstream=True)
    await aclient.xadd("jobs", {"n": "1"})  # the client has read its command table by now
    for node in redis_cluster.nodes:
        with node.client() as c:
            c.config_resetstat()
    for _ in range(5):
        await aclient.xreadgroup("g", "c", {"jobs": ">"}, count=1, block=1)
    await aclient.xread({"jobs": "0"}, count=1)
    calls: dict[str, int] = {}
    for node in redis_cluster.nodes:
        with node.client() as c:
            for name, stat in c.info("commandstats").items():
                calls[name] = calls.get(name, 0) + int(stat["calls"])
    assert calls.get("cmdstat_xreadgroup") == 5
    assert calls.get("cmdstat_xread") == 1
    assert "cmdstat_command|getkeys" not in calls


async def test_readiness_and_group_gauges_cover_every_partition_on_a_cluster(
    aclient: aioredis.Redis, redis_cluster: LocalCluster
) -> None:
    app = App("t")

    @app.handler(EVENTS.name, group="g", partitions=EVENTS.partitions, block_ms=100)
    async def handle(msg: Message) -> None:
        return None

    async with running_worker(app, redis_cluster.url) as worker:
        await eventually(lambda: worker.readiness()[0], 30, "ready")
        client = redis_cluster.client()
        try:
            states = read_group_states(client, app.handlers)
        finally:
            client.close()
    assert sorted(s.stream for s in states) == EVENTS.streams()
    assert all(s.pending == 0 and s.lag == 0 for s in states)


async def test_ordered_sql_handlers_commit_in_key_order_through_retries(
    aclient: aioredis.Redis, redis_cluster: LocalCluster, postgres_url: str
) -> None:
    db = SqlDatabase(postgres_url)
    upgrade(db)
    db.sync_engine.dispose()
    create_business_tables(postgres_url)
    attempts: dict[str, int] = {}
    app = App("t")

    @app.handler(
        EVENTS.name, group="billing", partitions=EVENTS.partitions, ordered=True,
        idempotency="sql", block_ms=100, retry_backoff_ms=10, retry_backoff_max_ms=20,
    )  # fmt: skip
    def charge(msg: Message, session: Session) -> None:
        item = f"{msg.fields['key']}:{msg.fields['seq']}"
        attempts[item] = attempts.get(item, 0) + 1
        if msg.fields["seq"] == "2" and attempts[item] < 3:
            raise Retry(delay_ms=50)
        session.add(Charge(message_id=msg.id, order_id=item, amount_cents=1))

    producer = PartitionedProducer(aclient, EVENTS)
    for seq in range(5):
        for key in ("a", "b", "c"):
            await producer.add(key, {"key": key, "seq": seq})
    await producer.aclose()

    def committed() -> list[str]:
        engine = sa.create_engine(sync_url(postgres_url))
        try:
            with engine.connect() as conn:
                return [r[0] for r in conn.execute(sa.select(Charge.order_id).order_by(Charge.id))]
        finally:
            engine.dispose()

    async with running_sql_worker(app, redis_cluster.url, postgres_url):
        await eventually(lambda: len(committed()) == 15, 60, "15 charges committed")
    rows = committed()
    for key in ("a", "b", "c"):
        assert [r for r in rows if r[0] == key] == [f"{key}:{s}" for s in range(5)]
    assert all(attempts[f"{k}:2"] == 3 for k in ("a", "b", "c"))
