"""``runtime.release``: the capability check and ``lua/release_unstarted.lua``, on redis-server
7.0 (the XCLAIM emulation) and on the in-process engine in 8.10 mode (XNACK … SILENT: "graceful
shutdown where the delivery didn't count", https://redis.io/docs/latest/commands/xnack/)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from streamworker.io.redisio import open_redis
from streamworker.runtime.release import XCLAIM, XNACK, release_path, release_unstarted
from tests.support.servers import free_port

CLAIM_IDLE_MS = 60_000


@pytest.fixture(params=["redis-server-7.0", "engine-8.10"])
async def subject(request: pytest.FixtureRequest) -> AsyncIterator[tuple[aioredis.Redis, str]]:
    """(client, the path the server must get)."""
    if request.param == "redis-server-7.0":
        url, path = request.getfixturevalue("redis_url"), XCLAIM
    else:
        url, path = f"engine://memory/release-{uuid.uuid4().hex}?redis_version=8.10", XNACK
    client = open_redis(url)
    try:
        yield client, path
    finally:
        await client.aclose()


async def _read(client: aioredis.Redis, consumer: str, n: int) -> list[bytes]:
    await client.xgroup_create("s", "g", id="0", mkstream=True)
    for i in range(n):
        await client.xadd("s", {"n": str(i)})
    reply = await client.xreadgroup("g", consumer, {"s": ">"}, count=n)
    return [entry_id for entry_id, _ in reply[0][1]]


async def _counts(client: aioredis.Redis) -> dict[bytes, tuple[bytes, int]]:
    rows = await client.xpending_range("s", "g", "-", "+", 100)
    return {r["message_id"]: (r["consumer"], int(r["times_delivered"])) for r in rows}


async def test_the_path_follows_command_info_not_the_version(
    subject: tuple[aioredis.Redis, str],
) -> None:
    client, path = subject
    assert await release_path(client) == path


async def test_a_server_that_cannot_be_asked_gets_the_emulation_and_start_up_goes_on() -> None:
    # Nothing listens there: the check must not stop a worker from starting (its loops ride
    # the outage); the emulation works on every server.
    client = open_redis(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_s=1.0)
    try:
        assert await release_path(client) == XCLAIM
    finally:
        await client.aclose()


async def test_a_released_entry_is_claimed_at_once_as_a_first_delivery(
    subject: tuple[aioredis.Redis, str],
) -> None:
    client, path = subject
    ids = await _read(client, "stopping", 3)
    released = await release_unstarted(
        client, "s", "g", "stopping", ids, path=path, claim_idle_ms=CLAIM_IDLE_MS
    )
    assert released == 3
    assert {count for _, count in (await _counts(client)).values()} == {0}
    # Another consumer's reclaim pass (min-idle = claim_idle_ms) takes them at once …
    _, claimed, *_ = await client.xautoclaim("s", "g", "other", CLAIM_IDLE_MS, "0-0", count=10)
    assert [entry_id for entry_id, _ in claimed] == ids
    # … and its claim is their first counted delivery.
    assert await _counts(client) == dict.fromkeys(ids, (b"other", 1))


async def test_an_entry_another_consumer_owns_is_left_alone(
    subject: tuple[aioredis.Redis, str],
) -> None:
    client, path = subject
    first, second = await _read(client, "stopping", 2)
    # Claimed away meanwhile (the other consumer runs it now).
    await client.xclaim("s", "g", "other", 0, [second])
    released = await release_unstarted(
        client, "s", "g", "stopping", [first, second], path=path, claim_idle_ms=CLAIM_IDLE_MS
    )
    assert released == 1
    assert (await _counts(client))[second] == (b"other", 2)
    # Nobody's reclaim pass may take it from its running owner.
    _, claimed, *_ = await client.xautoclaim("s", "g", "third", CLAIM_IDLE_MS, "0-0", count=10)
    assert [entry_id for entry_id, _ in claimed] == [first]


async def test_an_acked_entry_is_not_released(subject: tuple[aioredis.Redis, str]) -> None:
    client, path = subject
    (only,) = await _read(client, "stopping", 1)
    await client.xack("s", "g", only)
    released = await release_unstarted(
        client, "s", "g", "stopping", [only], path=path, claim_idle_ms=CLAIM_IDLE_MS
    )
    assert released == 0
    assert await _counts(client) == {}
