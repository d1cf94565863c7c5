"""A test App with an ``idempotency="lua"`` handler, run by ``streamworker run`` in a subprocess:
each order on stream ``orders`` increments its own field of ``{orders}:applied`` (so a field
above 1 is an order applied twice), ``{orders}:total``, and adds one entry to ``{orders}:ledger``.
Configured by environment variables (this is user code, so reading the environment is fine):

SW_TEST_LOG          file: one line "start <id> <n> <delivery_count> <consumer>" per handler call
SW_TEST_SLEEP_S      seconds each handler takes (default 0)
SW_TEST_BATCH        batch size (default 5)
SW_TEST_DEDUP        dedup_field (default: none)
SW_TEST_CLAIM_IDLE_MS  claim_idle_ms (default 60000)
SW_TEST_READ_AHEAD   "1": read_ahead=True
SW_TEST_KILL         where this process SIGKILLs itself, once:
                       before_script:K   at the K-th apply script, before it is sent
                       after_script:K    after the K-th apply script returned (effects applied,
                                         acked), before the runtime hears of it
                       handler:N         when the handler of order N starts

The kill points are reached by wrapping LuaStrategy._apply here, in the test app: the library has
no test hooks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from streamworker import App, Effects, Message
from streamworker.idempotency import lua
from streamworker.io.redisio import NextRead
from tests.support.crashpoints import CrashPlan

app = App("lua-counters")

_SLEEP = float(os.environ.get("SW_TEST_SLEEP_S", "0"))
_plan = CrashPlan("lua_counters.log", ("before_script", "after_script"))
_record, _die, _at = _plan.record, _plan.die, _plan.at


_apply = lua.LuaStrategy._apply


async def _apply_or_die(
    self: lua.LuaStrategy,
    keys: Sequence[bytes],
    args: Sequence[str | bytes | int],
    next_read: NextRead | None,
) -> list[Any] | int:
    if _at("before_script"):
        _die("before_script")
    result = await _apply(self, keys, args, next_read)
    if _at("after_script"):
        _die("after_script")
    return result


lua.LuaStrategy._apply = _apply_or_die  # type: ignore[method-assign]


@app.handler(
    "orders",
    group="billing",
    idempotency="lua",
    batch_size=int(os.environ.get("SW_TEST_BATCH", "5")),
    block_ms=200,
    claim_idle_ms=int(os.environ.get("SW_TEST_CLAIM_IDLE_MS", "60000")),
    dedup_field=os.environ.get("SW_TEST_DEDUP") or None,
    read_ahead=os.environ.get("SW_TEST_READ_AHEAD") == "1",
)
def charge(msg: Message) -> Effects:
    n = msg.fields["n"]
    _record(f"start {msg.id} {n} {msg.delivery_count} {msg.consumer}")
    if _plan.point == "handler" and n == str(_plan.nth):
        _die("handler")
    if _SLEEP:
        time.sleep(_SLEEP)
    return (
        Effects()
        .hincrby("{orders}:applied", msg.id, 1)
        .incr("{orders}:total")
        .xadd("{orders}:ledger", {"id": msg.id, "n": n, "by": msg.consumer})
    )
