"""The App that ``benchmarks.memory_inflight_bench`` runs with ``streamworker run``: a slow
``async`` handler on stream ``bench``, group ``g``, batch size 500. The handler's time per message
comes from ``BENCH_HANDLER_MS`` (user code: reading the environment is fine here); the in-flight
bounds come from the worker's own settings (``STREAMWORKER_MAX_IN_FLIGHT[_BYTES]``)."""

from __future__ import annotations

import asyncio
import os

from streamworker import App, Message

STREAM, GROUP, BATCH = "bench", "g", 500

app = App("memory-inflight-bench")
_HANDLER_S = int(os.environ.get("BENCH_HANDLER_MS", "20")) / 1000


@app.handler(STREAM, group=GROUP, batch_size=BATCH, block_ms=100)
async def slow(msg: Message) -> None:
    await asyncio.sleep(_HANDLER_S)  # the handler's work: slower than the backlog arrives
