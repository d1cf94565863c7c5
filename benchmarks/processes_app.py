"""The App that ``benchmarks.processes_bench`` runs with ``streamworker run``: a no-op ``async``
handler on stream ``bench``, group ``g``, as ``app_none`` (``idempotency="none"``) and
``app_lua`` (``idempotency="lua"``: the ownership check and the apply script, no effects)."""

from __future__ import annotations

from streamworker import App, Message

STREAM, GROUP, BATCH = "bench", "g", 100

app_none = App("processes-bench-none")
app_lua = App("processes-bench-lua")


@app_none.handler(STREAM, group=GROUP, batch_size=BATCH, block_ms=100)
async def noop(msg: Message) -> None:
    return None


@app_lua.handler(STREAM, group=GROUP, idempotency="lua", batch_size=BATCH, block_ms=100)
async def noop_lua(msg: Message) -> None:
    return None
