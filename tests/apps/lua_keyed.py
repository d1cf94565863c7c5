"""A test App with per-key concurrency on ``idempotency="lua"`` (``key_field="customer"``,
``concurrency=3``), run by ``streamworker run`` in a subprocess for the crash tests: each order on
stream ``orders`` increments its own field of ``{orders}:applied`` (a field above 1 is an order
applied twice), ``{orders}:total``, and adds one entry to ``{orders}:ledger``.
Configured by environment variables (this is user code, so reading the environment is fine):

SW_TEST_LOG      file: one line "start <id> <customer> <n>" per handler call, "end …" after it
SW_TEST_SLEEP_S  seconds each handler takes (default 0.05, so that lanes overlap)
SW_TEST_KILL     handler:N: this process SIGKILLs itself when the handler of order N starts,
                 while the other lanes of its batch run
"""

from __future__ import annotations

import os
import time

from streamworker import App, Effects, Message
from tests.support.crashpoints import CrashPlan

app = App("lua-keyed")

_SLEEP = float(os.environ.get("SW_TEST_SLEEP_S", "0.05"))
_plan = CrashPlan("lua_keyed.log", ("handler",))


@app.handler(
    "orders",
    group="billing",
    idempotency="lua",
    key_field="customer",
    concurrency=3,
    batch_size=30,
    block_ms=200,
)
def charge(msg: Message) -> Effects:
    customer, n = msg.fields["customer"], msg.fields["n"]
    _plan.record(f"start {msg.id} {customer} {n}")
    if _plan.point == "handler" and n == str(_plan.nth):
        _plan.die("handler")
    time.sleep(_SLEEP)  # the handler's work: long enough that the lanes of a batch overlap
    _plan.record(f"end {msg.id} {customer} {n}")
    return (
        Effects()
        .hincrby("{orders}:applied", msg.id, 1)
        .incr("{orders}:total")
        .xadd("{orders}:ledger", {"id": msg.id, "customer": customer})
    )
