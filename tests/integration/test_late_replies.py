"""A lease starts when the read is sent: a batch whose handlers would start after another
consumer could claim its entries (a late read reply, a long wait for the batch in hand) runs no
handler on the entries claimed meanwhile."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis

from streamworker import App, Message
from streamworker.core.deps import Resolver
from streamworker.idempotency.none import AtLeastOnce
from streamworker.io.redisio import Entry
from streamworker.observability.metrics import Metrics
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.threads import HandlerThreads
from streamworker.runtime.worker import Worker, WorkerOptions, WorkerResult
from tests.support.faultproxy import Fault, FaultProxy, Rule, is_empty_reply
from tests.support.servers import RedisServer
from tests.support.worker import eventually

STREAM, GROUP = "late", "g"
HOLD_S = 4.0


def _late_app(runs: list[tuple[str, str]], idempotency: str) -> App:
    app = App("late")

    @app.handler(STREAM, group=GROUP, idempotency=idempotency, claim_idle_ms=1000, block_ms=100)
    async def handle(msg: Message) -> None:
        runs.append((msg.consumer, msg.id))

    return app


def _worker(app: App, url: str, consumer: str, *, reclaim: bool) -> Worker:
    return Worker(
        app,
        WorkerOptions(
            redis_url=url,
            consumer=consumer,
            shutdown_timeout_s=5.0,
            reconnect_backoff_initial_s=0.05,
            reconnect_backoff_max_s=0.2,
            reclaim=reclaim,
        ),
    )


def _held_read(args: list[bytes]) -> bool:
    return args[0].upper() == b"XREADGROUP" and args[-1] == b">"


@pytest.mark.slow  # a reply held 4 s
@pytest.mark.parametrize("idempotency", ["none", "lua"])
async def test_a_read_reply_held_past_claim_idle_runs_no_handler_on_entries_claimed_meanwhile(
    redis_server: RedisServer, redis_client: redis.Redis, idempotency: str
) -> None:
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    ids = {redis_client.xadd(STREAM, {"n": str(i)}).decode() for i in range(5)}
    runs: list[tuple[str, str]] = []
    app = _late_app(runs, idempotency)
    with FaultProxy(redis_server.port, protocol="redis") as proxy:
        held = proxy.add_rule(
            Rule(Fault("hold", HOLD_S), _held_read, lambda reply: not is_empty_reply(reply))
        )
        # "a" reads the five entries through the proxy, which holds the reply; its own reclaimer
        # is off, so only the late reply can make it run a handler.
        a = _worker(app, proxy.url, "a", reclaim=False)
        a_task: asyncio.Task[WorkerResult] = asyncio.ensure_future(
            a.run(install_signal_handlers=False)
        )
        b_task: asyncio.Task[WorkerResult] | None = None
        try:
            await eventually(lambda: held.used == 1, what="the held read")
            held_at = time.monotonic()
            b = _worker(app, redis_server.url, "b", reclaim=True)
            b_task = asyncio.ensure_future(b.run(install_signal_handlers=False))
            await eventually(
                lambda: {i for c, i in runs if c == "b"} == ids,
                timeout_s=HOLD_S,
                what="b claiming and processing every entry while a's reply is held",
            )
            await eventually(
                lambda: time.monotonic() > held_at + HOLD_S + 1.0, timeout_s=HOLD_S + 2
            )
        finally:
            a.stop()
            if b_task is not None:
                b.stop()
                await asyncio.wait_for(b_task, 30)
            await asyncio.wait_for(a_task, 30)
    assert [i for c, i in runs if c == "a"] == []
    assert redis_client.xpending(STREAM, GROUP)["pending"] == 0


async def test_a_batch_that_waited_past_claim_idle_for_the_one_in_hand_skips_entries_claimed_meanwhile(
    redis_url: str, redis_client: redis.Redis
) -> None:
    # The consume loop and the reclaimer process one batch at a time. A batch that waits for the
    # one in hand longer than claim_idle_ms (its lease renewal failing meanwhile: here there is
    # no reclaimer at all) may find its entries claimed by another consumer.
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    first, second = (redis_client.xadd(STREAM, {"n": str(i)}) for i in range(2))
    redis_client.xreadgroup(GROUP, "a", {STREAM: ">"})
    runs: list[tuple[str, str]] = []
    app = App("wait")
    release = asyncio.Event()

    @app.handler(STREAM, group=GROUP, claim_idle_ms=1000, block_ms=100)
    async def handle(msg: Message) -> None:
        runs.append((msg.consumer, msg.id))
        if msg.id == first.decode():
            await release.wait()

    client = aioredis.Redis.from_url(redis_url)
    consumer = Consumer(
        app.handlers[0],
        client=client,
        name="a",
        strategy=AtLeastOnce(client, STREAM, GROUP, 1),
        resolver=Resolver(),
        metrics=Metrics(),
        threads=HandlerThreads(1),
        backoff=Backoff(0.05, 0.5),
    )
    try:
        now = time.monotonic()
        in_hand = asyncio.ensure_future(
            consumer.batches.process(
                [Entry(first, [b"n", b"0"])], {first: 1}, fresh_at=now, sent_at=now
            )
        )
        waiting = asyncio.ensure_future(
            consumer.batches.process(
                [Entry(second, [b"n", b"1"])], {second: 1}, fresh_at=now, sent_at=now
            )
        )
        await eventually(lambda: runs == [("a", first.decode())])
        await asyncio.sleep(1.1)  # past claim_idle_ms: "b" takes the waiting entry
        assert redis_client.xclaim(STREAM, GROUP, "b", 1000, [second], justid=True) == [second]
        release.set()
        await asyncio.wait_for(asyncio.gather(in_hand, waiting), 10)
    finally:
        await client.aclose()
    assert runs == [("a", first.decode())]
    assert redis_client.xpending_range(STREAM, GROUP, "-", "+", 10)[0]["consumer"] == b"b"
