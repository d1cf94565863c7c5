"""A lease starts when the read is sent: a read reply that reaches the worker after another
consumer has claimed (and processed) its entries runs no handler on them."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from streamworker import App, Message
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
