"""A test App for the operations endpoints: the ``action`` field steers each message.

``ok`` (default) succeeds; ``poison`` raises DeadLetter; ``hang`` never returns (a stuck loop).
"""

from __future__ import annotations

import asyncio

from streamworker import App, DeadLetter, Message

app = App("ops")


@app.handler("jobs", group="workers", block_ms=200, claim_idle_ms=60_000)
async def work(msg: Message) -> None:
    action = msg.fields.get("action", "ok")
    if action == "poison":
        raise DeadLetter("poisoned on purpose")
    if action == "hang":
        await asyncio.Event().wait()
