"""The consume loop's next read, handed down with the batch (``Batch.next_read``, a
``redisio.NextRead``) and sent behind the batch's last call: one write
for the ack and the read, the read still after the ack, so a consumer never holds more than the
batch in hand. On a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker import App, Effects, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import Outcome
from streamworker.idempotency.base import Batch, Strategy
from streamworker.idempotency.lua import LuaStrategy
from streamworker.idempotency.none import AtLeastOnce
from streamworker.io.redisio import NextRead, parse_read_reply, xack_then_read
from streamworker.observability.metrics import Metrics
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.threads import HandlerThreads
from tests.support.worker import eventually

STREAM, GROUP, NAME = "ahead", "g", "c1"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


def _setup(sync: redis.Redis, n: int) -> list[bytes]:
    sync.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    return [sync.xadd(STREAM, {"n": str(i)}) for i in range(n)]


def _two_of_four_pending(sync: redis.Redis) -> list[bytes]:
    """Four entries, the first two read by the consumer (its batch in hand)."""
    ids = _setup(sync, 4)
    sync.xreadgroup(GROUP, NAME, {STREAM: ">"}, count=2)
    return ids


def _pending(sync: redis.Redis) -> list[bytes]:
    return [r["message_id"] for r in sync.xpending_range(STREAM, GROUP, "-", "+", 1000)]


def _slot(client: aioredis.Redis, *, count: int = 2, wanted: bool = True) -> NextRead:
    return NextRead(client, GROUP, NAME, STREAM, count=count, wanted=lambda: wanted)


async def test_the_read_goes_out_behind_the_ack_and_waits_for_the_loop(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _two_of_four_pending(redis_client)
    slot = _slot(client)
    assert await xack_then_read(client, STREAM, GROUP, ids[:2], slot) == 2
    assert slot.holding()
    # Redis ran the XACK first: only the entries of the read are pending.
    assert _pending(redis_client) == ids[2:]
    assert [e.id for e in parse_read_reply(slot.take(), STREAM.encode())] == ids[2:]
    assert not slot.holding()


async def test_without_a_next_read_the_ack_reads_nothing(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _two_of_four_pending(redis_client)
    assert await xack_then_read(client, STREAM, GROUP, ids[:2], None) == 2
    assert _pending(redis_client) == []


async def test_the_next_read_of_a_stopping_loop_is_not_sent(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _two_of_four_pending(redis_client)
    slot = _slot(client, wanted=False)
    await xack_then_read(client, STREAM, GROUP, ids[:2], slot)
    assert not slot.holding()
    assert _pending(redis_client) == []


async def test_the_next_read_goes_out_once_while_its_reply_waits(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """A second ack with the same next read (a batch's retry, say) reads nothing more: the
    consumer never holds more than the batch in hand and the one read behind it."""
    ids = _setup(redis_client, 6)
    redis_client.xreadgroup(GROUP, NAME, {STREAM: ">"}, count=2)
    slot = _slot(client)
    await xack_then_read(client, STREAM, GROUP, ids[:1], slot)
    await xack_then_read(client, STREAM, GROUP, ids[1:2], slot)
    assert _pending(redis_client) == ids[2:4]
    assert [e.id for e in parse_read_reply(slot.take(), STREAM.encode())] == ids[2:4]


async def test_a_call_on_another_client_never_sends_the_next_read(
    client: aioredis.Redis, redis_client: redis.Redis, redis_url: str
) -> None:
    ids = _two_of_four_pending(redis_client)
    other = aioredis.Redis.from_url(redis_url)
    slot = _slot(client)
    try:
        await xack_then_read(other, STREAM, GROUP, ids[:2], slot)
    finally:
        await other.aclose()
    assert not slot.holding()


async def test_a_failed_ack_still_keeps_the_reply_of_the_read(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """The XACK fails (the key is no stream): Redis still ran the read, whose own error waits
    for the loop rather than being lost."""
    redis_client.set(STREAM, "not a stream")
    slot = _slot(client)
    with pytest.raises(rex.ResponseError, match="WRONGTYPE"):
        await xack_then_read(client, STREAM, GROUP, [b"0-1"], slot)
    assert slot.holding()
    with pytest.raises(rex.ResponseError, match="WRONGTYPE"):
        slot.take()


async def test_a_discarded_reply_leaves_its_entries_pending_for_the_backlog(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _two_of_four_pending(redis_client)
    slot = _slot(client)
    await xack_then_read(client, STREAM, GROUP, ids[:2], slot)
    slot.discard()
    assert not slot.holding()
    assert _pending(redis_client) == ids[2:]


# -------------------------------------------------------------------------------------------
# The consume loop


class _Watching:
    """Wraps a strategy: records, after each batch, how many entries the group had read (XINFO
    GROUPS ``entries-read``) and the batch's ids; may stop the consumer after the first batch."""

    def __init__(self, inner: Strategy, sync: redis.Redis) -> None:
        self.name = inner.name
        self._inner = inner
        self._sync = sync
        self.batches: list[list[str]] = []
        self.read_after: list[int] = []
        self.offered: list[bool] = []
        self.stop_after_first: Consumer | None = None

    async def process(self, batch: Batch) -> list[Outcome]:
        self.offered.append(batch.next_read is not None)
        outcomes = await self._inner.process(batch)
        self.batches.append([m.id for m in batch.messages])
        self.read_after.append(int(self._sync.xinfo_groups(STREAM)[0]["entries-read"]))
        if self.stop_after_first is not None:
            self.stop_after_first.stop()
            self.stop_after_first = None
        return outcomes


def _consumer(
    client: aioredis.Redis,
    strategy: Strategy,
    handle: Any,
    idempotency: str = "none",
    **options: Any,
) -> Consumer:
    app = App("t")
    app.handler(STREAM, group=GROUP, block_ms=50, batch_size=5, idempotency=idempotency, **options)(
        handle
    )
    return Consumer(
        app.handlers[0],
        client=client,
        name=NAME,
        strategy=strategy,
        resolver=Resolver(),
        metrics=Metrics(),
        threads=HandlerThreads(1),
        backoff=Backoff(0.05, 0.5),
    )


async def _run_until(consumer: Consumer, done: Any) -> None:
    task = asyncio.ensure_future(consumer.run())
    try:
        await eventually(done)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)


async def test_the_consumer_holds_one_batch_while_the_next_read_rides_on_the_ack(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _setup(redis_client, 23)
    seen_pending: list[int] = []

    async def handle(msg: Message) -> None:
        seen_pending.append(len(_pending(redis_client)))

    strategy = _Watching(AtLeastOnce(client, STREAM, GROUP, 1), redis_client)
    consumer = _consumer(client, strategy, handle)
    await _run_until(consumer, lambda: len(seen_pending) == 23 and not _pending(redis_client))
    # Never more than the batch in hand pending while a handler runs...
    assert seen_pending == [5] * 20 + [3] * 3
    assert [len(b) for b in strategy.batches] == [5, 5, 5, 5, 3]
    # ...and yet, when each batch's ack returned, the next batch had been read with it.
    assert strategy.read_after == [10, 15, 20, 23, 23]
    assert [i for b in strategy.batches for i in b] == [i.decode() for i in ids]


async def test_under_an_in_flight_bound_no_read_rides_on_the_ack(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """max_in_flight=3 with batch_size=5: the next read's COUNT is batch_size, so riding on the
    ack it would take entries past the reservation. It is not offered: each batch is read after
    the previous one settled, sized by the room left, and never more than the bound is pending."""
    ids = _setup(redis_client, 8)
    seen_pending: list[int] = []

    async def handle(msg: Message) -> None:
        seen_pending.append(len(_pending(redis_client)))

    strategy = _Watching(AtLeastOnce(client, STREAM, GROUP, 1), redis_client)
    consumer = _consumer(client, strategy, handle, max_in_flight=3)
    await _run_until(consumer, lambda: len(seen_pending) == 8 and not _pending(redis_client))
    assert strategy.offered == [False, False, False]
    assert [len(b) for b in strategy.batches] == [3, 3, 2]
    # No entry was read behind an ack: when each batch's ack returned, only it had been read.
    assert strategy.read_after == [3, 6, 8]
    assert max(seen_pending) <= 3
    assert [i for b in strategy.batches for i in b] == [i.decode() for i in ids]


async def test_a_batch_read_behind_the_ack_when_stop_comes_stays_pending_unrun(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """stop() while the read rides on the ack: as with a stop during any read, its entries are
    not run (no handler starts after stop) and stay pending, delivered once; the next start's
    backlog read returns them."""
    ids = _setup(redis_client, 8)
    handled: list[str] = []

    async def handle(msg: Message) -> None:
        handled.append(msg.id)

    strategy = _Watching(AtLeastOnce(client, STREAM, GROUP, 1), redis_client)
    consumer = _consumer(client, strategy, handle)
    strategy.stop_after_first = consumer
    await asyncio.wait_for(consumer.run(), 10)
    assert handled == [i.decode() for i in ids[:5]]
    assert _pending(redis_client) == ids[5:]
    assert strategy.batches == [handled]  # the loop did not process the batch read behind

    handled.clear()
    again = _consumer(
        client, _Watching(AtLeastOnce(client, STREAM, GROUP, 1), redis_client), handle
    )
    await _run_until(again, lambda: len(handled) == 3 and not _pending(redis_client))
    assert handled == [i.decode() for i in ids[5:]]


async def test_lua_batches_read_behind_the_apply_script_even_after_the_script_cache_is_lost(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """SCRIPT FLUSH between batches: the apply script is reloaded and run after the read that
    went out behind it; every message is applied once and the PEL ends empty."""
    _setup(redis_client, 15)

    async def handle(msg: Message) -> Effects:
        if msg.fields["n"] == "4":
            redis_client.script_flush()
        return Effects().hincrby("applied", msg.fields["n"], 1)

    lua = LuaStrategy(client, stream=STREAM, group=GROUP, consumer=NAME)
    strategy = _Watching(lua, redis_client)
    consumer = _consumer(client, strategy, handle, idempotency="lua")
    await _run_until(
        consumer, lambda: redis_client.hlen("applied") == 15 and not _pending(redis_client)
    )
    assert redis_client.hgetall("applied") == {str(i).encode(): b"1" for i in range(15)}
    assert strategy.read_after == [10, 15, 15]
