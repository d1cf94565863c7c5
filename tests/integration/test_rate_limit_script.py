"""``lua/take_permits.lua`` (the shared rate limit, a GCRA, and the RateLimited pause) on
redis-server 7.0, on the engine in-process and on the engine served over TCP: the same grants,
waits and allowances, the burst then one permit per interval, permits handed back, the pause,
and the window bound under many workers' random asks."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from streamworker.core.ratelimit import parse_rate_limit
from streamworker.engine.inproc import forget_engine
from streamworker.io.keys import rate_limit_key, rate_pause_key
from streamworker.io.redisio import LuaScript, open_redis
from tests.support.engine_server import ThreadedServer

_TAKE = LuaScript("take_permits")
KEYS = [rate_limit_key("orders", "g"), rate_pause_key("orders", "g")]
INTERVAL = 10_000  # µs: 100/s
NOW = 1_800_000_000_000_000  # µs


@pytest.fixture(scope="module")
def served() -> Iterator[ThreadedServer]:
    server = ThreadedServer()
    yield server
    server.close()


@pytest.fixture(params=["redis-server-7.0", "engine", "engine-served"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[aioredis.Redis]:
    engine_url = ""
    if request.param == "redis-server-7.0":
        url = request.getfixturevalue("redis_url")
    elif request.param == "engine":
        url = engine_url = f"engine://memory/rate-{uuid.uuid4().hex}"
    else:
        server: ThreadedServer = request.getfixturevalue("served")
        url = f"redis://127.0.0.1:{server.port}/0"
    c = open_redis(url)
    await c.flushall()
    try:
        yield c
    finally:
        await c.aclose()
        if engine_url:
            forget_engine(engine_url)


async def take(
    c: aioredis.Redis, want: int, now: int | str, burst: int = 5, interval: int = INTERVAL
) -> tuple[int, int, int]:
    reply = await _TAKE(c, KEYS, ["take", interval, burst, want, now])
    return int(reply[0]), int(reply[1]), int(reply[2])


async def test_a_burst_at_once_then_one_permit_per_interval(client: aioredis.Redis) -> None:
    assert await take(client, 100, NOW) == (5, INTERVAL, 0)
    assert await take(client, 100, NOW + INTERVAL // 2) == (0, INTERVAL // 2, 0)
    assert await take(client, 100, NOW + INTERVAL) == (1, INTERVAL, 0)
    # After an idle time the burst is back, never more.
    assert await take(client, 3, NOW + 100 * INTERVAL) == (3, 0, 2)


async def test_permits_handed_back_are_granted_again(client: aioredis.Redis) -> None:
    assert (await take(client, 5, NOW))[0] == 5
    reply = await _TAKE(client, KEYS, ["give", INTERVAL, 5, 3, NOW])
    assert int(reply[2]) == 3
    assert (await take(client, 10, NOW))[0] == 3


async def test_a_pause_grants_nothing_until_it_ends_and_the_longer_one_wins(
    client: aioredis.Redis,
) -> None:
    await _TAKE(client, KEYS, ["pause", INTERVAL, 5, 2_000, ""])
    await _TAKE(client, KEYS, ["pause", INTERVAL, 5, 500, ""])  # shorter: kept at 2 s
    granted, wait_us, allowance = await take(client, 5, NOW)
    assert (granted, allowance) == (0, 0)
    assert 1_500_000 < wait_us <= 2_000_000
    assert 1_500 < await client.pttl(KEYS[1]) <= 2_000


async def test_the_servers_clock_is_used_when_no_now_is_passed(client: aioredis.Redis) -> None:
    assert await take(client, 2, "") == (2, 0, 3)
    assert (await take(client, 10, ""))[0] == 3
    # The state expires by itself once the limit is back at a full burst.
    assert 0 < await client.pttl(KEYS[0]) <= 1_060
    assert await client.exists(KEYS[1]) == 0


async def test_a_fresh_key_is_a_full_burst_and_an_idle_one_leaves_nothing_behind(
    client: aioredis.Redis,
) -> None:
    assert await take(client, 1, NOW, burst=1) == (1, INTERVAL, 0)
    await _TAKE(client, KEYS, ["give", INTERVAL, 1, 1, NOW])
    assert await client.exists(KEYS[0]) == 0


async def test_random_asks_of_many_workers_never_pass_the_window_bound(
    client: aioredis.Redis,
) -> None:
    # 100/s with the default burst (11), four workers asking for 1..20 at random moments over
    # 5 s (simulated time): no 1-second window is granted more than 100 + 11 - 1 permits, and
    # the limit is used (the asks come often enough to take nearly all of it).
    limit = parse_rate_limit("100/s")
    assert limit is not None
    rng = random.Random(36)
    grants: list[int] = []
    now = NOW
    while now < NOW + 5_000_000:
        now += rng.randint(100, 8_000)
        granted, _, _ = await take(
            client, rng.randint(1, 20), now, burst=limit.burst, interval=limit.interval_us
        )
        grants += [now] * granted
    worst = max(
        sum(1 for g in grants if start <= g < start + 1_000_000)
        for start in range(NOW, NOW + 4_000_000, 10_000)
    )
    assert worst <= 110
    assert 5 * 100 <= len(grants) <= 5 * 100 + 11
