"""``idempotency="lua"`` on a Redis Cluster node (one node serving all 16384 slots): effects on
keys outside the stream's slot are refused with a clear error, hash-tagged ones apply."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from streamworker import Effects, Message
from streamworker.core.outcomes import Action
from streamworker.idempotency.lua import LuaStrategy
from tests.support.cluster import ClusterNodeProcess, cluster_port, wait_until
from tests.support.lua import drain
from tests.support.servers import missing_service


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A cluster-enabled redis-server owning every slot; yields its port."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_service("redis-server")
    node = ClusterNodeProcess(
        str(binary), tmp_path_factory.mktemp("cluster"), cluster_port(set()), node_timeout_ms=5000
    )
    try:
        node.start()
        with node.client() as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            wait_until(
                lambda: client.cluster("info")["cluster_state"] == "ok",
                10,
                "the one-node cluster to become ok",
            )
        yield node.port
    finally:
        node.stop()


@pytest.fixture
async def aclient(cluster_node: int) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis(host="127.0.0.1", port=cluster_node)
    await client.flushall()
    yield client
    await client.aclose()


async def test_effect_on_a_key_of_another_slot_is_refused_naming_both_slots(
    aclient: aioredis.Redis,
) -> None:
    await aclient.xgroup_create("clicks", "counters", id="0", mkstream=True)
    await aclient.xadd("clicks", {"page": "a"})
    await aclient.xadd("clicks", {"page": "b"})
    assert key_slot(b"views") != key_slot(b"clicks")

    def count(msg: Message[Any]) -> Effects:
        effects = Effects().incr("{clicks}:total")
        if msg.fields["page"] == "a":
            effects.hincrby("views", "a", 1)  # no hash tag: another slot
        return effects

    strategy = LuaStrategy(aclient, stream="clicks", group="counters", consumer="c1")
    refused, applied = await drain(strategy, aclient, count)
    assert refused.action is Action.LEAVE_PENDING
    assert refused.error == (
        f"EffectError: effect 2 (hincrby 'views'): the key hashes to slot {key_slot(b'views')}, "
        f"but stream 'clicks' is in slot {key_slot(b'clicks')}; on Redis Cluster every key an "
        f"effect writes must carry the stream's hash tag, e.g. '{{clicks}}:…'"
    )
    assert applied.action is Action.ACK
    assert await aclient.get("{clicks}:total") == b"1"  # message b only: nothing of a
    assert not await aclient.exists("views")


async def test_a_stream_with_a_hash_tag_takes_effects_and_dedup_in_its_slot(
    aclient: aioredis.Redis,
) -> None:
    stream = "{shop}:orders"
    await aclient.xgroup_create(stream, "billing", id="0", mkstream=True)
    await aclient.xadd(stream, {"order_id": "o1"})
    await aclient.xadd(stream, {"order_id": "o1"})
    strategy = LuaStrategy(
        aclient, stream=stream, group="billing", consumer="c1", dedup_field="order_id"
    )
    await drain(strategy, aclient, lambda msg: Effects().incr("{shop}:charged"))
    assert await aclient.get("{shop}:charged") == b"1"
    assert await aclient.zcard("{shop}:orders:dedup:billing") == 1
