"""Apps for the dashboard's browser tests, run by ``streamworker run`` in subprocesses (user code:
reading the environment here is fine).

``app`` bills orders in group ``billing``: an order with ``action=poison`` is dead-lettered until
the file DASH_HEALED exists (the bug is "fixed"), every other one is appended to DASH_OUT.
``stuck`` reads the same stream in group ``audit`` and never finishes a message: killed, it
leaves a dead consumer with pending entries.
"""

from __future__ import annotations

import asyncio
import os

from streamworker import App, DeadLetter, Message

app = App("dashboard-billing")
stuck = App("dashboard-audit")


@app.handler("orders", group="billing", block_ms=100, batch_size=10)
def bill(msg: Message) -> None:
    if msg.fields.get("action") == "poison" and not os.path.exists(os.environ["DASH_HEALED"]):
        raise DeadLetter("card declined for order " + msg.fields.get("n", "?"))
    fd = os.open(os.environ["DASH_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (msg.fields.get("n", "?") + "\n").encode())
    finally:
        os.close(fd)


@stuck.handler("orders", group="audit", block_ms=100, batch_size=100, claim_idle_ms=3_600_000)
async def audit(msg: Message) -> None:
    await asyncio.Event().wait()
