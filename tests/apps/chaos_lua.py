"""The chaos suite's ``idempotency="lua"`` app (see tests/apps/chaos_common.py for its settings).

An ``ok`` message adds 1 to its own field of ``{chaos}:applied`` (a field above 1 is a message
applied twice) and to ``{chaos}:total``. A ``fail`` message returns effects that can never apply:
1 to its field of ``{chaos}:applied``, then an INCR of ``{chaos}:label``, which holds text; the
script refuses the whole message (no partial effects), so its field must never appear.
"""

from __future__ import annotations

import time

from streamworker import App, DeadLetter, Effects, Message
from tests.apps.chaos_common import HANDLER_OPTIONS, SLEEP_S, SLOW_S, STREAM, Order, record

app = App("chaos-lua")

APPLIED = "{chaos}:applied"
TOTAL = "{chaos}:total"
LABEL = "{chaos}:label"  # set to text by the test: INCR on it fails


@app.handler(STREAM, idempotency="lua", **HANDLER_OPTIONS)
def apply(msg: Message[Order]) -> Effects:
    record(msg)
    order = msg.body
    if SLEEP_S:
        time.sleep(SLEEP_S)
    if order.kind == "slow":
        time.sleep(SLOW_S)
    if order.kind == "reject":
        raise DeadLetter(f"order {order.n} rejected")
    effects = Effects().hincrby(APPLIED, msg.id, 1)
    if order.kind == "fail":
        return effects.incr(LABEL)
    return effects.incr(TOTAL)
