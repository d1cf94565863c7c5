"""Redis waits: every command has the short ``redis_timeout_s``; blocking reads have a client of
their own whose timeout exceeds ``block_ms``."""

from __future__ import annotations

import asyncio

import redis

from streamworker import App, Message
from streamworker.runtime.worker import Worker, WorkerOptions, WorkerResult
from tests.support.worker import eventually

STREAM, GROUP = "timeouts", "g"


async def test_blocking_reads_longer_than_the_command_timeout_do_not_time_out(
    redis_url: str, redis_client: redis.Redis
) -> None:
    handled: list[str] = []
    app = App("timeouts")

    @app.handler(STREAM, group=GROUP, block_ms=1500)
    async def handle(msg: Message) -> None:
        handled.append(msg.id)

    worker = Worker(
        app,
        WorkerOptions(
            redis_url=redis_url, consumer="c1", redis_timeout_s=0.5, shutdown_timeout_s=5
        ),
    )
    task: asyncio.Task[WorkerResult] = asyncio.ensure_future(
        worker.run(install_signal_handlers=False)
    )
    try:
        await asyncio.sleep(3.5)  # two blocking reads of 1.5 s each, longer than 0.5 s
        entry = redis_client.xadd(STREAM, {"n": "1"}).decode()
        await eventually(lambda: handled == [entry], timeout_s=5)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    reconnects = worker.metrics.registry.get_sample_value(
        "streamworker_reconnects_total", {"stream": STREAM, "group": GROUP}
    )
    assert reconnects in (None, 0.0)
