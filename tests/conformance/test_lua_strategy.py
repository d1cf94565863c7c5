"""``idempotency="lua"`` on every backend: effects applied with the XACK, ownership checks,
validation before the first write, business-key dedup, replays, scripts lost from the cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from streamworker import App, Effects, Message
from streamworker.core.outcomes import CLAIMED_AWAY, DUPLICATE, Action
from streamworker.idempotency.base import Batch
from streamworker.idempotency.lua import LuaStrategy
from streamworker.io.redisio import open_redis
from tests.support.lua import drain, make_invoke, read
from tests.support.worker import eventually, running_worker

STREAM, GROUP = "clicks", "counters"


@pytest.fixture
async def aclient(backend_url: str) -> AsyncIterator[aioredis.Redis]:
    client = open_redis(backend_url)
    yield client
    await client.aclose()


def _strategy(client: aioredis.Redis, consumer: str = "c1", **kw: Any) -> LuaStrategy:
    return LuaStrategy(client, stream=STREAM, group=GROUP, consumer=consumer, **kw)


def _pending(client: redis.Redis) -> list[bytes]:
    return [r["message_id"] for r in client.xpending_range(STREAM, GROUP, "-", "+", 1000)]


def _produce(client: redis.Redis, *events: dict[str, str]) -> list[str]:
    if not client.exists(STREAM):
        client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    return [client.xadd(STREAM, dict(e)).decode() for e in events]  # type: ignore[arg-type]


def _count_checks(strategy: LuaStrategy) -> list[Any]:
    """Record the arguments of every check_ownership.lua call the strategy makes."""
    calls: list[Any] = []
    check = strategy._check

    async def counted(args: Any) -> Any:
        calls.append(args)
        return await check(args)

    strategy._check = counted  # type: ignore[method-assign]
    return calls


def _views(msg: Message[Any]) -> Effects:
    return Effects().hincrby("{clicks}:views", msg.fields["page"], 1).incr("{clicks}:total")


# --------------------------------------------------------------------------------------------
# Through the worker


async def test_every_kind_of_effect_is_applied_and_the_batch_acked(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd(STREAM, {"page": "home", "user": "ann", "ms": "12.5"})
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100)
    def count(msg: Message) -> Effects:
        f = msg.fields
        return (
            Effects()
            .set("{clicks}:last", f["user"], ex=60)
            .incrby("{clicks}:total", 2)
            .incrbyfloat("{clicks}:ms", float(f["ms"]))
            .hset("{clicks}:by-user", mapping={f["user"]: f["page"]})
            .hincrby("{clicks}:views", f["page"], 1)
            .hincrbyfloat("{clicks}:time", f["page"], 0.5)
            .sadd("{clicks}:users", f["user"])
            .zadd("{clicks}:rank", {f["page"]: 1})
            .zincrby("{clicks}:rank", 2, f["page"])
            .rpush("{clicks}:log", f["user"])
            .xadd("{clicks}:out", {"seen": f["user"]})
            .set("{clicks}:tmp", "x")
            .delete("{clicks}:tmp")
            .expire("{clicks}:users", 3600)
        )

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.exists("{clicks}:out") and not _pending(sync_client))
    r = sync_client
    assert r.get("{clicks}:last") == b"ann"
    assert 0 < r.ttl("{clicks}:last") <= 60
    assert r.get("{clicks}:total") == b"2"
    assert r.get("{clicks}:ms") == b"12.5"
    assert r.hgetall("{clicks}:by-user") == {b"ann": b"home"}
    assert r.hget("{clicks}:views", "home") == b"1"
    assert r.hget("{clicks}:time", "home") == b"0.5"
    assert r.smembers("{clicks}:users") == {b"ann"}
    assert r.zscore("{clicks}:rank", "home") == 3.0
    assert r.lrange("{clicks}:log", 0, -1) == [b"ann"]
    assert [f for _, f in r.xrange("{clicks}:out")] == [{b"seen": b"ann"}]
    assert not r.exists("{clicks}:tmp")
    assert 0 < r.ttl("{clicks}:users") <= 3600


async def test_handler_returning_none_is_acked_without_effects(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd(STREAM, {"page": "home"})
    calls: list[str] = []
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100)
    async def observe(msg: Message) -> None:
        calls.append(msg.id)

    async with running_worker(app, backend_url):
        await eventually(lambda: calls and not _pending(sync_client))
    # SCAN, not KEYS: on Redis Cluster it walks every master.
    assert sorted(set(sync_client.scan_iter("*"))) == [STREAM.encode()]


async def test_invalid_effect_writes_nothing_of_its_message_the_rest_of_the_batch_applies(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.set("{clicks}:label", "not a hash")
    ids = [sync_client.xadd(STREAM, {"page": p}).decode() for p in ("a", "bad", "c")]
    app = App("t")

    @app.handler(
        STREAM,
        group=GROUP,
        idempotency="lua",
        block_ms=100,
        max_deliveries=2,
        retry_backoff_ms=50,
    )
    def count(msg: Message) -> Effects:
        effects = _views(msg)
        if msg.fields["page"] == "bad":
            effects.hset("{clicks}:label", "page", "bad")  # WRONGTYPE: after two good effects
        return effects

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.xlen("{clicks}:dlq") == 1, timeout_s=15)
    assert sync_client.hgetall("{clicks}:views") == {b"a": b"1", b"c": b"1"}
    assert sync_client.get("{clicks}:total") == b"2"
    assert sync_client.get("{clicks}:label") == b"not a hash"
    ((_, dead),) = sync_client.xrange("{clicks}:dlq")
    assert dead[b"dlq_id"] == ids[1].encode()
    assert dead[b"dlq_error"] == (
        b"EffectError: effect 3 (hset '{clicks}:label'): WRONGTYPE the key holds a string "
        b"value, not a hash"
    )
    assert not _pending(sync_client)


async def test_handler_returning_something_else_than_effects_is_a_failure(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd(STREAM, {"page": "a"})
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100, max_deliveries=1)
    def count(msg: Message) -> dict[str, int]:
        return {"a": 1}

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.xlen("{clicks}:dlq") == 1)
    ((_, dead),) = sync_client.xrange("{clicks}:dlq")
    assert b"returns Effects or None" in dead[b"dlq_error"]


async def test_handlers_running_concurrently_apply_their_effects_once_each(
    backend_url: str, sync_client: redis.Redis
) -> None:
    for i in range(40):
        sync_client.xadd(STREAM, {"page": f"p{i % 4}"})
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100, concurrency=8)
    async def count(msg: Message) -> Effects:
        await asyncio.sleep(0.01)
        return _views(msg)

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.get("{clicks}:total") == b"40")
    assert sync_client.hgetall("{clicks}:views") == {f"p{i}".encode(): b"10" for i in range(4)}


async def test_a_producer_duplicate_within_the_window_is_applied_once(
    backend_url: str, sync_client: redis.Redis
) -> None:
    for click in ("c1", "c2", "c1", "c3", "c2"):  # c1 and c2 XADDed twice by a retrying producer
        sync_client.xadd(STREAM, {"page": "home", "click_id": click})
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100, dedup_field="click_id")
    def count(msg: Message) -> Effects:
        return _views(msg)

    async with running_worker(app, backend_url) as worker:
        await eventually(lambda: sync_client.get("{clicks}:total") == b"3")

        def done() -> bool:
            (info,) = sync_client.xinfo_groups(STREAM)
            return bool(info["lag"] == 0 and info["pending"] == 0)

        await eventually(done)
    assert sync_client.get("{clicks}:total") == b"3"
    assert sync_client.zcard("{clicks}:dedup:counters") == 3
    dups = worker.metrics.messages.labels(
        stream=STREAM, group=GROUP, handler=worker.app.handlers[0].name, outcome="duplicate"
    )
    assert dups._value.get() == 2


async def test_a_message_without_its_dedup_field_is_dead_lettered_without_running_the_handler(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd(STREAM, {"page": "home"})
    calls: list[str] = []
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100, dedup_field="click_id")
    def count(msg: Message) -> Effects:
        calls.append(msg.id)
        return _views(msg)

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.xlen("{clicks}:dlq") == 1)
    ((_, dead),) = sync_client.xrange("{clicks}:dlq")
    assert dead[b"dlq_error"].startswith(b"PermanentFailure: field 'click_id'")
    assert calls == []


# --------------------------------------------------------------------------------------------
# The strategy driven directly: who holds which entry when the scripts run


async def test_a_business_duplicate_seen_before_the_handlers_does_not_run_its_handler(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    strategy = _strategy(aclient, dedup_field="click_id")
    calls: list[str] = []

    def count(msg: Message[Any]) -> Effects:
        calls.append(msg.fields["click_id"])
        return _views(msg)

    _produce(sync_client, {"page": "a", "click_id": "k1"})
    await drain(strategy, aclient, count)
    _produce(sync_client, {"page": "a", "click_id": "k1"}, {"page": "a", "click_id": "k2"})
    outcomes = await drain(strategy, aclient, count)
    assert outcomes == [DUPLICATE, outcomes[1]]
    assert outcomes[1].action is Action.ACK
    assert calls == ["k1", "k2"]
    assert sync_client.get("{clicks}:total") == b"2"
    assert not _pending(sync_client)


async def test_a_business_key_is_forgotten_after_the_window(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    strategy = _strategy(aclient, dedup_field="click_id", dedup_window_ms=200)
    _produce(sync_client, {"page": "a", "click_id": "k1"})
    await drain(strategy, aclient, _views)
    await asyncio.sleep(0.3)
    _produce(sync_client, {"page": "a", "click_id": "k1"})
    await drain(strategy, aclient, _views)
    # A duplicate processed after the window is applied again: the stated bound of the guarantee.
    assert sync_client.get("{clicks}:total") == b"2"
    assert sync_client.zcard("{clicks}:dedup:counters") == 1
    assert 0 < sync_client.pttl("{clicks}:dedup:counters") <= 200


async def test_an_entry_claimed_away_before_the_batch_runs_is_skipped_without_its_handler(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    ids = _produce(sync_client, {"page": "a"}, {"page": "b"})
    batch = await read(aclient, STREAM, GROUP, "c1")
    sync_client.xclaim(STREAM, GROUP, "c2", 0, [ids[0]], justid=True)
    calls: list[str] = []

    def count(msg: Message[Any]) -> Effects:
        calls.append(msg.id)
        return _views(msg)

    outcomes = await _strategy(aclient).process(Batch(batch, make_invoke(count)))
    assert outcomes[0] == CLAIMED_AWAY
    assert outcomes[1].action is Action.ACK
    assert calls == [ids[1]]
    assert _pending(sync_client) == [ids[0].encode()]


async def test_an_entry_claimed_away_while_its_handler_runs_applies_once_by_the_new_owner(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    """The XCLAIM race between two live consumers, made deterministic: c1's handler is running
    when c2 claims the entry; both handlers run; only the owner's script applies the effects."""
    (mid,) = _produce(sync_client, {"page": "a"})
    batch = await read(aclient, STREAM, GROUP, "c1")

    def claimed_meanwhile(msg: Message[Any]) -> Effects:
        sync_client.xclaim(STREAM, GROUP, "c2", 0, [mid], justid=True)
        return _views(msg)

    first = await _strategy(aclient, "c1").process(Batch(batch, make_invoke(claimed_meanwhile)))
    assert first == [CLAIMED_AWAY]
    assert sync_client.get("{clicks}:total") is None
    c2 = _strategy(aclient, "c2")
    second = await c2.process(
        Batch(await read(aclient, STREAM, GROUP, "c2", start="0"), make_invoke(_views))
    )
    assert second[0].action is Action.ACK
    assert sync_client.get("{clicks}:total") == b"1"
    assert not _pending(sync_client)


async def test_a_fresh_batch_skips_the_check_but_the_apply_script_still_checks_ownership(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    """fresh=True (a '>' read moments ago): no check_ownership.lua round trip before the
    handlers; a claim that happens while the handler runs is still caught by the apply script."""
    mids = _produce(sync_client, {"page": "a"}, {"page": "b"})
    batch = await read(aclient, STREAM, GROUP, "c1")

    def claim_the_second(msg: Message[Any]) -> Effects:
        if msg.id == mids[1]:
            sync_client.xclaim(STREAM, GROUP, "c2", 0, [mids[1]], justid=True)
        return _views(msg)

    strategy = _strategy(aclient, "c1")
    checks = _count_checks(strategy)
    outcomes = await strategy.process(Batch(batch, make_invoke(claim_the_second), fresh=True))
    assert checks == []
    assert outcomes[0].action is Action.ACK
    assert outcomes[1] == CLAIMED_AWAY
    assert sync_client.get("{clicks}:total") == b"1"
    assert _pending(sync_client) == [mids[1].encode()]
    # Not fresh (a backlog or reclaimed batch): checked before the handlers.
    _produce(sync_client, {"page": "c"})
    await strategy.process(Batch(await read(aclient, STREAM, GROUP, "c1"), make_invoke(_views)))
    assert len(checks) == 1


async def test_a_fresh_batch_with_a_dedup_field_is_still_checked_before_its_handlers(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    """The check is also the business-key lookup: with dedup_field it is never skipped."""
    _produce(sync_client, {"page": "a", "order": "o1"})
    strategy = _strategy(aclient, "c1", dedup_field="order")
    await strategy.process(Batch(await read(aclient, STREAM, GROUP, "c1"), make_invoke(_views)))
    _produce(sync_client, {"page": "a", "order": "o1"})
    ran: list[str] = []

    def counted(msg: Message[Any]) -> Effects:
        ran.append(msg.id)
        return _views(msg)

    checks = _count_checks(strategy)
    outcomes = await strategy.process(
        Batch(await read(aclient, STREAM, GROUP, "c1"), make_invoke(counted), fresh=True)
    )
    assert len(checks) == 1
    assert outcomes == [DUPLICATE]
    assert ran == []  # the check saw the business key: the handler did not run
    assert sync_client.get("{clicks}:total") == b"1"


async def test_an_entry_acked_by_another_consumer_while_its_handler_runs_is_not_applied_again(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    """A stalled holder: c2 claimed the entry, applied it and acked it while c1 still ran it."""
    (mid,) = _produce(sync_client, {"page": "a"})
    batch = await read(aclient, STREAM, GROUP, "c1")
    c2 = _strategy(aclient, "c2")

    async def overtaken(msg: Message[Any]) -> Effects:
        sync_client.xclaim(STREAM, GROUP, "c2", 0, [mid], justid=True)
        await c2.process(
            Batch(await read(aclient, STREAM, GROUP, "c2", start="0"), make_invoke(_views))
        )
        return _views(msg)

    outcomes = await _strategy(aclient, "c1").process(Batch(batch, make_invoke(overtaken)))
    assert outcomes == [DUPLICATE]
    assert sync_client.get("{clicks}:total") == b"1"


async def test_a_replayed_message_is_applied_again_unless_its_business_key_is_in_the_window(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    """XGROUP SETID back to 0 is a deliberate replay: the PEL no longer knows the acked entries.
    A handler with dedup_field still recognises them within dedup_window_ms."""
    _produce(sync_client, *({"page": "a", "click_id": f"k{i}"} for i in range(5)))
    plain = _strategy(aclient)
    await drain(plain, aclient, _views)
    sync_client.xgroup_setid(STREAM, GROUP, "0")
    await drain(plain, aclient, _views)
    assert sync_client.get("{clicks}:total") == b"10"

    sync_client.delete("{clicks}:total", "{clicks}:views")
    deduped = _strategy(aclient, dedup_field="click_id")
    sync_client.xgroup_setid(STREAM, GROUP, "0")
    await drain(deduped, aclient, _views)
    sync_client.xgroup_setid(STREAM, GROUP, "0")
    outcomes = await drain(deduped, aclient, _views)
    assert outcomes == [DUPLICATE] * 5
    assert sync_client.get("{clicks}:total") == b"5"


async def test_scripts_flushed_from_the_server_cache_are_loaded_again(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    strategy = _strategy(aclient)
    _produce(sync_client, {"page": "a"})
    await drain(strategy, aclient, _views)
    sync_client.script_flush()
    _produce(sync_client, {"page": "a"})
    await drain(strategy, aclient, _views)
    assert sync_client.get("{clicks}:total") == b"2"


async def test_effects_that_would_change_the_consumed_stream_are_refused(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    _produce(sync_client, {"page": "a"}, {"page": "b"})

    def handler(msg: Message[Any]) -> Effects:
        if msg.fields["page"] == "a":
            return Effects().delete(STREAM)
        return Effects().xadd(STREAM, {"follow-up": "1"}).incr("{clicks}:total")

    outcomes = await drain(_strategy(aclient), aclient, handler)
    assert outcomes[0].action is Action.LEAVE_PENDING
    assert "may not change the consumed stream" in outcomes[0].error
    assert outcomes[1].action is Action.ACK
    assert sync_client.xlen(STREAM) == 3


# --------------------------------------------------------------------------------------------
# Validation before the first write, compared with what Redis itself does


def _snapshot(client: redis.Redis, key: str) -> Any:
    kind = client.type(key).decode()
    if kind == "string":
        return client.get(key)
    if kind == "hash":
        return client.hgetall(key)
    if kind == "set":
        return client.smembers(key)
    if kind == "zset":
        return client.zrange(key, 0, -1, withscores=True)
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "stream":
        return [fields for _, fields in client.xrange(key)]
    return None


Setup = Callable[[redis.Redis, str], Any]
Build = Callable[[str], Effects]

CASES: list[tuple[str, Setup, Build]] = [
    ("incrby an absent key", lambda r, k: None, lambda k: Effects().incrby(k, 5)),
    ("incrby an integer", lambda r, k: r.set(k, "10"), lambda k: Effects().incrby(k, -3)),
    ("incrby text", lambda r, k: r.set(k, "abc"), lambda k: Effects().incrby(k, 1)),
    ("incrby leading zero", lambda r, k: r.set(k, "010"), lambda k: Effects().incrby(k, 1)),
    ("incrby leading space", lambda r, k: r.set(k, " 5"), lambda k: Effects().incrby(k, 1)),
    ("incrby a float", lambda r, k: r.set(k, "1.5"), lambda k: Effects().incrby(k, 1)),
    ("incrby minus zero", lambda r, k: r.set(k, "-0"), lambda k: Effects().incrby(k, 1)),
    (
        "incrby past int64 max",
        lambda r, k: r.set(k, str(2**63 - 1)),
        lambda k: Effects().incrby(k, 1),
    ),
    (
        "incrby past int64 min",
        lambda r, k: r.set(k, str(-(2**63))),
        lambda k: Effects().incrby(k, -1),
    ),
    ("incrby beyond int64", lambda r, k: r.set(k, str(2**64)), lambda k: Effects().incrby(k, 0)),
    ("incrby a hash", lambda r, k: r.hset(k, "f", "1"), lambda k: Effects().incrby(k, 1)),
    (
        "set text then incrby it",
        lambda r, k: None,
        lambda k: Effects().set(k, "abc").incrby(k, 1),
    ),
    ("set 5 then incrby it", lambda r, k: None, lambda k: Effects().set(k, "5").incrby(k, 1)),
    (
        "set nx keeps an existing integer",
        lambda r, k: r.set(k, "5"),
        lambda k: Effects().set(k, "abc", nx=True).incrby(k, 1),
    ),
    (
        "set xx on an absent key",
        lambda r, k: None,
        lambda k: Effects().set(k, "abc", xx=True).incrby(k, 1),
    ),
    (
        "incrbyfloat twice to an integer, then incrby",
        lambda r, k: None,
        lambda k: Effects().incrbyfloat(k, 0.5).incrbyfloat(k, 0.5).incrby(k, 1),
    ),
    (
        "incrbyfloat then incrby",
        lambda r, k: r.set(k, "5"),
        lambda k: Effects().incrby(k, 1).incrbyfloat(k, 0.5).incrby(k, 1),
    ),
    ("incrbyfloat a float", lambda r, k: r.set(k, "1.5"), lambda k: Effects().incrbyfloat(k, 1)),
    ("incrbyfloat exponent", lambda r, k: r.set(k, "1e3"), lambda k: Effects().incrbyfloat(k, 1)),
    ("incrbyfloat hex", lambda r, k: r.set(k, "0x10"), lambda k: Effects().incrbyfloat(k, 1)),
    ("incrbyfloat text", lambda r, k: r.set(k, "abc"), lambda k: Effects().incrbyfloat(k, 1)),
    (
        "incrbyfloat trailing space",
        lambda r, k: r.set(k, "1 "),
        lambda k: Effects().incrbyfloat(k, 1),
    ),
    ("incrbyfloat inf", lambda r, k: r.set(k, "inf"), lambda k: Effects().incrbyfloat(k, 1)),
    ("hincrby absent field", lambda r, k: r.hset(k, "g", "x"), lambda k: Effects().hincrby(k, "f")),
    ("hincrby text field", lambda r, k: r.hset(k, "f", "x"), lambda k: Effects().hincrby(k, "f")),
    ("hincrby a string key", lambda r, k: r.set(k, "1"), lambda k: Effects().hincrby(k, "f")),
    (
        "hset text then hincrby it",
        lambda r, k: None,
        lambda k: Effects().hset(k, "f", "x").hincrby(k, "f"),
    ),
    (
        "del a hash then hincrby",
        lambda r, k: r.hset(k, "f", "x"),
        lambda k: Effects().delete(k).hincrby(k, "f"),
    ),
    (
        "del a string then hincrby",
        lambda r, k: r.set(k, "x"),
        lambda k: Effects().delete(k).hincrby(k, "f", 2),
    ),
    (
        "hdel a text field then hincrby it",
        lambda r, k: r.hset(k, mapping={"f": "x", "g": "1"}),
        lambda k: Effects().hdel(k, "f").hincrby(k, "f").hincrby(k, "g"),
    ),
    (
        "hincrbyfloat a float field",
        lambda r, k: r.hset(k, "f", "2.5"),
        lambda k: Effects().hincrbyfloat(k, "f", 0.5),
    ),
    (
        "hincrbyfloat a text field",
        lambda r, k: r.hset(k, "f", "2.5x"),
        lambda k: Effects().hincrbyfloat(k, "f", 0.5),
    ),
    ("sadd a string", lambda r, k: r.set(k, "x"), lambda k: Effects().sadd(k, "m")),
    ("zadd a set", lambda r, k: r.sadd(k, "x"), lambda k: Effects().zadd(k, {"m": 1})),
    ("zincrby a list", lambda r, k: r.rpush(k, "x"), lambda k: Effects().zincrby(k, 1, "m")),
    (
        "zadd xx on an absent key, then hset",
        lambda r, k: None,
        lambda k: Effects().zadd(k, {"m": 1}, xx=True).hset(k, "f", "v"),
    ),
    ("xadd to a hash", lambda r, k: r.hset(k, "f", "1"), lambda k: Effects().xadd(k, {"a": 1})),
    ("rpush to a zset", lambda r, k: r.zadd(k, {"m": 1}), lambda k: Effects().rpush(k, "v")),
    ("lpush to a list", lambda r, k: r.rpush(k, "v"), lambda k: Effects().lpush(k, "a", "b")),
    ("expire an absent key", lambda r, k: None, lambda k: Effects().expire(k, 10)),
    ("set over a hash", lambda r, k: r.hset(k, "f", "1"), lambda k: Effects().set(k, "v")),
    (
        "a later effect fails after good ones",
        lambda r, k: r.set(k, "x"),
        lambda k: Effects().set(k + "b", "1").incrby(k + "c", 2).sadd(k, "m"),
    ),
]


@pytest.mark.parametrize(("name", "setup", "build"), CASES, ids=[c[0] for c in CASES])
async def test_validation_refuses_exactly_what_redis_would_fail_on(
    aclient: aioredis.Redis,
    sync_client: redis.Redis,
    name: str,
    setup: Setup,
    build: Build,
) -> None:
    # Redis itself, command by command, on keys "raw:…": does any command fail?
    raw = "{clicks}:raw"
    setup(sync_client, raw)
    raw_failed = False
    for op in build(raw):
        try:
            sync_client.execute_command(op.command, op.key, *op.args)
        except redis.ResponseError:
            raw_failed = True
            break
    # The same effects through the script, on keys "lua:…".
    key = "{clicks}:lua"
    setup(sync_client, key)
    before = {k: _snapshot(sync_client, k) for k in (key, key + "b", key + "c")}
    _produce(sync_client, {"n": "1"})
    (outcome,) = await drain(_strategy(aclient), aclient, lambda msg: build(key))
    if raw_failed:
        assert outcome.action is Action.LEAVE_PENDING, outcome
        assert outcome.error.startswith("EffectError: effect ")
        assert {k: _snapshot(sync_client, k) for k in before} == before  # nothing written
    else:
        assert outcome.action is Action.ACK, outcome.error
        for suffix in ("", "b", "c"):
            assert _snapshot(sync_client, key + suffix) == _snapshot(sync_client, raw + suffix)


async def test_an_effect_within_8192_of_the_int64_limit_is_refused_conservatively(
    aclient: aioredis.Redis, sync_client: redis.Redis
) -> None:
    sync_client.set("{clicks}:big", str(2**63 - 100))
    _produce(sync_client, {"n": "1"})
    (outcome,) = await drain(
        _strategy(aclient), aclient, lambda msg: Effects().incrby("{clicks}:big", 1)
    )
    assert "would overflow" in outcome.error
    assert sync_client.get("{clicks}:big") == str(2**63 - 100).encode()


async def test_at_the_shutdown_deadline_the_finished_part_of_a_batch_is_applied_and_acked(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = [sync_client.xadd(STREAM, {"page": f"p{i}"}).decode() for i in range(5)]
    started: list[str] = []
    app = App("t")

    @app.handler(STREAM, group=GROUP, idempotency="lua", block_ms=100, batch_size=5)
    async def count(msg: Message) -> Effects:
        started.append(msg.id)
        if msg.fields["page"] == "p2":
            await asyncio.sleep(30)  # still running at the deadline: cancelled
        return _views(msg)

    async with running_worker(app, backend_url, shutdown_timeout_s=0.3):
        await eventually(lambda: len(started) == 3)
    assert sync_client.hgetall("{clicks}:views") == {b"p0": b"1", b"p1": b"1"}
    assert _pending(sync_client) == [i.encode() for i in ids[2:]]
