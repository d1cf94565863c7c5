"""The streamworker App of the proof benchmarks, run as ``streamworker run
benchmarks.proof.swapp:app`` (a real subprocess, like a user's worker). Configured by the
environment (user code may read it):

PROOF_MODE      none | lua | sql (the handler's ``idempotency``)
PROOF_HANDLER   noop | db | record | latency (see :mod:`benchmarks.proof.handlers`)
PROOF_BATCH     batch_size (default 100)
PROOF_CLAIM_IDLE_MS  claim_idle_ms (default 5000, as the peers are configured)

The ``db`` and ``record`` handlers write what each mode makes exactly-once: in SQL mode one
``proof_rows`` row added to the batch's session (committed with the processed rows), in Lua mode
one ``HINCRBY {proof}:seen <order_id> 1`` effect applied by the script with the XACK. In
at-least-once mode (``none``) the shared handler body does the write itself.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy.orm import Session

from benchmarks.proof.db import ProofRow
from benchmarks.proof.handlers import GROUP, SEEN_KEY, STREAM, Handler
from streamworker import App, Effects, Message

MODE = os.environ.get("PROOF_MODE", "none")
HANDLER = Handler()
OPTIONS: dict[str, Any] = {
    "group": GROUP,
    "idempotency": MODE,
    "batch_size": int(os.environ.get("PROOF_BATCH", "100")),
    "block_ms": 1000,
    "claim_idle_ms": int(os.environ.get("PROOF_CLAIM_IDLE_MS", "5000")),
}

app = App("proof")

if MODE == "sql":

    @app.handler(STREAM, **OPTIONS)
    def sql_handler(msg: Message, session: Session) -> None:
        if HANDLER.kind == "latency":
            HANDLER.sync_call(msg.fields)
        elif HANDLER.kind != "noop":
            session.add(
                ProofRow(
                    order_id=msg.fields["order_id"], amount_cents=int(msg.fields["amount_cents"])
                )
            )

elif MODE == "lua":

    @app.handler(STREAM, **OPTIONS)
    async def lua_handler(msg: Message) -> Effects | None:
        if HANDLER.kind in ("noop", "latency"):
            await HANDLER(msg.fields)
            return None
        return Effects().hincrby(SEEN_KEY, msg.fields["order_id"], 1)

elif MODE == "none":

    @app.handler(STREAM, **OPTIONS)
    async def plain_handler(msg: Message) -> None:
        await HANDLER(msg.fields)

else:
    raise ValueError(f"PROOF_MODE: unknown mode {MODE!r}")
