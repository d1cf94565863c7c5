"""touch_owned.lua (runtime.late.touch_owned) on every backend: the check a late read or claim
reply gets before its handlers run."""

from __future__ import annotations

import asyncio

import redis

from streamworker.io.redisio import open_redis
from streamworker.runtime.late import CLAIMED, DELETED, NOT_PENDING, OWNED, touch_owned


def _pending(client: redis.Redis, entry_id: bytes) -> tuple[str, int, int]:
    row = client.xpending_range("s", "g", min=entry_id, max=entry_id, count=1)[0]
    name = row["consumer"]
    return (
        name.decode() if isinstance(name, bytes) else name,
        int(row["time_since_delivered"]),
        int(row["times_delivered"]),
    )


async def test_statuses_tell_owned_acked_claimed_and_deleted_entries_apart(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = [sync_client.xadd("s", {"n": str(i)}) for i in range(4)]
    sync_client.xgroup_create("s", "g", id="0")
    sync_client.xreadgroup("g", "me", {"s": ">"})
    sync_client.xack("s", "g", ids[1])
    sync_client.xclaim("s", "g", "other", 0, [ids[2]])
    sync_client.xdel("s", ids[3])
    client = open_redis(backend_url)
    try:
        statuses = await touch_owned(client, "s", "g", "me", ids)
    finally:
        await client.aclose()
    assert statuses == [OWNED, NOT_PENDING, CLAIMED, DELETED]
    assert _pending(sync_client, ids[2])[0] == "other"  # left to its owner
    assert sync_client.xpending_range("s", "g", min=ids[3], max=ids[3], count=1) == []


async def test_an_owned_entry_gets_its_idle_time_reset_without_a_delivery_counted(
    backend_url: str, sync_client: redis.Redis
) -> None:
    entry = sync_client.xadd("s", {"n": "1"})
    sync_client.xgroup_create("s", "g", id="0")
    sync_client.xreadgroup("g", "me", {"s": ">"})
    await asyncio.sleep(0.3)
    assert _pending(sync_client, entry)[1] >= 250
    client = open_redis(backend_url)
    try:
        assert await touch_owned(client, "s", "g", "me", [entry]) == [OWNED]
    finally:
        await client.aclose()
    owner, idle_ms, deliveries = _pending(sync_client, entry)
    assert (owner, deliveries) == ("me", 1)
    assert idle_ms < 250
