"""Helpers to run a Worker inside a test's event loop and wait for conditions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from streamworker import App
from streamworker.runtime.worker import Worker, WorkerOptions, WorkerResult
from tests.support.waiting import eventually

__all__ = ["eventually", "running_worker"]


@contextlib.asynccontextmanager
async def running_worker(
    app: App,
    url: str,
    *,
    consumer: str = "c1",
    shutdown_timeout_s: float = 5.0,
    consumer_name_ttl_ms: int = 15_000,
    max_in_flight: int | None = None,
    max_in_flight_bytes: int | None = None,
) -> AsyncIterator[Worker]:
    """Run ``app`` in this loop until the block exits; then stop it and re-raise its errors."""
    worker = Worker(
        app,
        WorkerOptions(
            redis_url=url,
            consumer=consumer,
            shutdown_timeout_s=shutdown_timeout_s,
            reconnect_backoff_initial_s=0.05,
            reconnect_backoff_max_s=0.2,
            consumer_name_ttl_ms=consumer_name_ttl_ms,
            max_in_flight=max_in_flight,
            max_in_flight_bytes=max_in_flight_bytes,
        ),
    )
    task: asyncio.Task[WorkerResult] = asyncio.ensure_future(
        worker.run(install_signal_handlers=False)
    )
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
