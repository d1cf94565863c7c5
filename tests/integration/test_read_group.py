"""``redisio.read_group``: the consume loop's XREADGROUP without redis-py's reply callback, read by
``parse_read_reply`` into the same entries as redis-py's own ``xreadgroup``, on RESP2 and RESP3,
on a real redis-server and on the embedded engine."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis

from streamworker.io.redisio import Entry, parse_read_reply, read_group


def _fill(client: redis.Redis) -> list[bytes]:
    client.xgroup_create("s", "g", id="0", mkstream=True)
    return [client.xadd("s", {"k": f"v{i}", "n": str(i)}) for i in range(3)]


@pytest.mark.parametrize("protocol", [2, 3])
async def test_new_entries_parse_as_redis_py_would(
    redis_url: str, redis_client: redis.Redis, protocol: int
) -> None:
    ids = _fill(redis_client)
    client = aioredis.Redis.from_url(redis_url, protocol=protocol)
    try:
        reply = await read_group(client, "g", "c", "s", b">", count=2, block_ms=None)
        entries = parse_read_reply(reply, b"s")
        assert entries == [
            Entry(ids[0], [b"k", b"v0", b"n", b"0"]),
            Entry(ids[1], [b"k", b"v1", b"n", b"1"]),
        ]
        # The same read through redis-py's callback, for the last entry.
        parsed = await client.xreadgroup("g", "c", {"s": ">"}, count=2)
        assert parse_read_reply(parsed, b"s") == [Entry(ids[2], [b"k", b"v2", b"n", b"2"])]
    finally:
        await client.aclose()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_a_pending_entry_deleted_since_comes_back_without_fields(
    redis_url: str, redis_client: redis.Redis, protocol: int
) -> None:
    ids = _fill(redis_client)
    client = aioredis.Redis.from_url(redis_url, protocol=protocol)
    try:
        await read_group(client, "g", "c", "s", b">", count=3, block_ms=None)
        redis_client.xdel("s", ids[1])
        reply = await read_group(client, "g", "c", "s", b"0", count=10, block_ms=None)
        assert [(e.id, e.fields is None) for e in parse_read_reply(reply, b"s")] == [
            (ids[0], False),
            (ids[1], True),
            (ids[2], False),
        ]
    finally:
        await client.aclose()


async def test_an_empty_blocking_read_times_out_to_no_entries(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xgroup_create("s", "g", id="$", mkstream=True)
    client = aioredis.Redis.from_url(redis_url)
    try:
        reply = await read_group(client, "g", "c", "s", b">", count=10, block_ms=10)
        assert parse_read_reply(reply, b"s") == []
    finally:
        await client.aclose()


async def test_a_missing_group_raises_nogroup(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        with pytest.raises(redis.ResponseError, match="NOGROUP"):
            await read_group(client, "g", "c", "s", b">", count=10, block_ms=None)
    finally:
        await client.aclose()


async def test_the_embedded_engine_gives_the_same_entries() -> None:
    from streamworker.engine.inproc import async_client

    client = async_client("engine://memory/read-group-test")
    try:
        await client.xgroup_create("s", "g", id="0", mkstream=True)
        first = await client.xadd("s", {"k": "v"})
        reply = await read_group(client, "g", "c", "s", b">", count=10, block_ms=None)
        assert parse_read_reply(reply, b"s") == [Entry(first, [b"k", b"v"])]
    finally:
        await client.aclose()
