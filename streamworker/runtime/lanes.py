"""Running a batch as per-key lanes (``@app.handler(key_field=…, concurrency=N)``).

A batch is split by key (:func:`streamworker.core.keyed.split_lanes`); up to ``concurrency`` lanes
run at once, each lane's messages one after another in stream order, each lane handed to the
idempotency strategy as its own sub-batch (so with ``idempotency="sql"`` each lane is one
transaction, with ``"lua"`` one script run) and acked as soon as it finishes. A hot key is one
lane: the other keys' lanes proceed beside it, and free slots go to the next lane in order of
its oldest message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def run_lanes(
    lanes: Sequence[Sequence[T]],
    concurrency: int,
    run_lane: Callable[[Sequence[T]], Awaitable[None]],
) -> None:
    """Run ``run_lane`` on each lane, at most ``concurrency`` at once, starting lanes in the given
    order. Returns when every lane finished. The first exception is raised after the other running
    lanes finished (a lane is never abandoned half-way: its messages may hold effects in flight);
    lanes not yet started when a lane fails are not started."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    pending = list(lanes)
    pending.reverse()  # pop() from the end takes the oldest lane first
    failure: BaseException | None = None
    running: set[asyncio.Task[None]] = set()
    try:
        while pending or running:
            while pending and len(running) < concurrency and failure is None:
                running.add(asyncio.ensure_future(run_lane(pending.pop())))
            if not running:
                break
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is not None and failure is None:
                    failure = exc
            if failure is not None:
                pending.clear()
    finally:
        # Cancelled from outside (a stop past its deadline): the lanes go with us, and are
        # awaited so that none outlives the batch it belongs to.
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    if failure is not None:
        raise failure
