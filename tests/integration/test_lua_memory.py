"""The memory ``idempotency="lua"`` uses for its bookkeeping stays flat as messages flow.

Without ``dedup_field`` there is no bookkeeping beyond the PEL (emptied by each script's XACK);
with it, the business-key record holds one window's keys. The 1,000,000-message figure is
measured by ``benchmarks/lua_bench.py``; these tests show the same flatness at a smaller N.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from streamworker import Effects, Message
from streamworker.idempotency.lua import LuaStrategy
from tests.support.lua import drain

STREAM, GROUP = "clicks", "counters"
RECORD = "{clicks}:dedup:counters"


@pytest.fixture
async def aclient(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _count(msg: Message[Any]) -> Effects:
    return Effects().hincrby("{clicks}:views", msg.fields["page"], 1)


def _produce(client: redis.Redis, n: int, start: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(start, start + n):
        pipe.xadd(STREAM, {"page": f"p{i % 10}", "click_id": f"click-{i:09d}"})
    pipe.execute()


async def test_without_dedup_field_nothing_but_the_effects_stays_in_redis(
    aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    strategy = LuaStrategy(aclient, stream=STREAM, group=GROUP, consumer="c1")
    used: list[int] = []
    for r in range(10):
        _produce(redis_client, 2_000, r * 2_000)
        await drain(strategy, aclient, _count)
        redis_client.xtrim(STREAM, maxlen=0)  # the producer's retention, not bookkeeping
        used.append(int(redis_client.info("memory")["used_memory"]))
        assert redis_client.xpending(STREAM, GROUP)["pending"] == 0
    assert sorted(redis_client.keys("*")) == [b"clicks", b"{clicks}:views"]
    assert sum(int(v) for v in redis_client.hvals("{clicks}:views")) == 20_000
    # 18,000 more messages after round 2, and no growth beyond allocator noise.
    assert max(used[2:]) - used[1] < 64 * 1024, used


async def test_the_business_key_record_stays_at_one_windows_keys_under_steady_load(
    aclient: aioredis.Redis, redis_client: redis.Redis
) -> None:
    window_ms, period_s, per_round, rounds = 1_000, 0.2, 1_000, 30
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    strategy = LuaStrategy(
        aclient,
        stream=STREAM,
        group=GROUP,
        consumer="c1",
        dedup_field="click_id",
        dedup_window_ms=window_ms,
    )
    cards: list[int] = []
    sizes: list[int] = []
    for r in range(rounds):
        # Each round starts at least a period after the one before: a slow round is not made up
        # for by rounds back to back (that would put more rounds' keys into one window).
        round_started = time.monotonic()
        _produce(redis_client, per_round, r * per_round)
        await drain(strategy, aclient, _count)
        redis_client.xtrim(STREAM, maxlen=0)
        cards.append(int(redis_client.zcard(RECORD)))
        sizes.append(int(redis_client.memory_usage(RECORD) or 0))
        await asyncio.sleep(max(0.0, round_started + period_s - time.monotonic()))
    assert sum(int(v) for v in redis_client.hvals("{clicks}:views")) == rounds * per_round
    # At most the keys applied within one window (plus the round that trims it): about
    # window / period rounds' worth, whatever the number processed so far.
    bound = (window_ms / 1000 / period_s + 2) * per_round
    assert max(cards) <= bound, cards
    steady = rounds // 3
    assert max(cards[steady:]) < rounds * per_round / 4
    # Memory follows the keys in the record (about 120 bytes each here), not the 30,000
    # processed: bounded by one window's keys whatever the machine's speed (a slow round
    # only leaves fewer keys in the window).
    per_key, overhead = 200, 16 * 1024
    assert all(s <= per_key * c + overhead for s, c in zip(sizes, cards, strict=True)), sizes
    assert max(sizes) <= per_key * bound + overhead, sizes
    # Idle for longer than the window: the whole record expires.
    await asyncio.sleep(window_ms / 1000 + 0.1)
    assert not redis_client.exists(RECORD)
