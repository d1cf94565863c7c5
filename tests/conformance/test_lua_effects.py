"""``idempotency="lua"``'s two scripts on every backend: effects applied with the XACK, entries
claimed away or acked meanwhile left alone, an invalid effect writing nothing, business-key
duplicates acked without their effects."""

from __future__ import annotations

from typing import Any

import redis

from streamworker import Effects, Message
from streamworker.core.outcomes import CLAIMED_AWAY, DUPLICATE, Action
from streamworker.idempotency.base import Batch
from streamworker.idempotency.lua import LuaStrategy
from streamworker.io.redisio import open_redis
from tests.support.lua import drain, make_invoke, read


def _count(msg: Message[Any]) -> Effects:
    return Effects().hincrby("{clicks}:views", msg.fields["page"], 1).incr("{clicks}:total")


def _setup(client: redis.Redis, *pages: str) -> list[str]:
    client.xgroup_create("clicks", "g", id="0", mkstream=True)
    return [client.xadd("clicks", {"page": p, "cid": p}).decode() for p in pages]


async def test_effects_are_applied_and_the_batch_acked(
    backend_url: str, sync_client: redis.Redis
) -> None:
    _setup(sync_client, "a", "b", "a")
    client = open_redis(backend_url)
    strategy = LuaStrategy(client, stream="clicks", group="g", consumer="c1")
    outcomes = await drain(strategy, client, _count)
    assert [o.action for o in outcomes] == [Action.ACK] * 3
    assert sync_client.hgetall("{clicks}:views") == {b"a": b"2", b"b": b"1"}
    assert sync_client.xpending("clicks", "g")["pending"] == 0


async def test_entries_claimed_away_or_acked_meanwhile_get_no_effects(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = _setup(sync_client, "a", "b", "c")
    client = open_redis(backend_url)
    batch = await read(client, "clicks", "g", "c1")

    def handler(msg: Message[Any]) -> Effects:
        if msg.id == ids[0]:
            sync_client.xclaim("clicks", "g", "c2", 0, [ids[0]], justid=True)
        if msg.id == ids[1]:
            sync_client.xack("clicks", "g", ids[1])
        return _count(msg)

    strategy = LuaStrategy(client, stream="clicks", group="g", consumer="c1")
    outcomes = await strategy.process(Batch(batch, make_invoke(handler)))
    assert outcomes[:2] == [CLAIMED_AWAY, DUPLICATE]
    assert outcomes[2].action is Action.ACK
    assert sync_client.hgetall("{clicks}:views") == {b"c": b"1"}


async def test_an_invalid_effect_writes_nothing_of_its_message(
    backend_url: str, sync_client: redis.Redis
) -> None:
    _setup(sync_client, "a", "bad", "c")
    sync_client.set("{clicks}:label", "text")
    client = open_redis(backend_url)

    def handler(msg: Message[Any]) -> Effects:
        effects = _count(msg)
        if msg.fields["page"] == "bad":
            effects.hincrby("{clicks}:label", "n", 1)
        return effects

    strategy = LuaStrategy(client, stream="clicks", group="g", consumer="c1")
    outcomes = await drain(strategy, client, handler)
    assert outcomes[1].action is Action.LEAVE_PENDING
    assert "WRONGTYPE" in outcomes[1].error
    assert sync_client.hgetall("{clicks}:views") == {b"a": b"1", b"c": b"1"}
    assert sync_client.get("{clicks}:total") == b"2"


async def test_a_business_key_applied_within_the_window_is_acked_without_effects(
    backend_url: str, sync_client: redis.Redis
) -> None:
    _setup(sync_client, "a", "b", "a")
    client = open_redis(backend_url)
    strategy = LuaStrategy(client, stream="clicks", group="g", consumer="c1", dedup_field="cid")
    outcomes = await drain(strategy, client, _count)
    assert outcomes[2] == DUPLICATE
    assert sync_client.get("{clicks}:total") == b"2"
    assert sync_client.zcard("{clicks}:dedup:g") == 2
