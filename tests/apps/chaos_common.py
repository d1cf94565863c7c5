"""What the chaos apps (tests/apps/chaos_lua.py, chaos_sql.py) share: the message model, their
handler settings and a log of every handler call. Configured by environment variables (this is
user code, so reading the environment is fine):

SW_CHAOS_LOG            file: one line "<id> <n> <kind> <delivery_count> <consumer>" per call
SW_CHAOS_SLEEP_S        seconds each handler takes (default 0.02), so batches are in flight
SW_CHAOS_CLAIM_IDLE_MS  claim_idle_ms (default 1500)
SW_CHAOS_MAX_DELIVERIES max_deliveries (default 20)
SW_CHAOS_SLOW_S         seconds a ``slow`` message's handler takes (default 2.5)

A message's ``kind`` says what its handler does: ``ok`` takes effect, ``slow`` too after
``SW_CHAOS_SLOW_S`` (longer than claim_idle_ms: its lease must hold), ``reject`` raises
DeadLetter, ``fail`` fails on every delivery (until max_deliveries); ``invalid`` messages carry an
``amount`` that is not a number, so their body fails validation before any handler runs.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel

from streamworker import Message
from tests.support.journal import append_record

STREAM = "{chaos}:orders"
GROUP = "workers"
# By default far above the deliveries a healthy message can collect from the faults of one run
# (each worker kill, pause or server restart delivers an entry again at most about once), so only
# poison ends in the dead-letter stream. The edge scenarios set it low, so that healthy messages
# reach it: committed on their last allowed delivery, then redelivered by a crash.
MAX_DELIVERIES = int(os.environ.get("SW_CHAOS_MAX_DELIVERIES", "20"))
SLOW_S = float(os.environ.get("SW_CHAOS_SLOW_S", "2.5"))

SLEEP_S = float(os.environ.get("SW_CHAOS_SLEEP_S", "0.02"))

HANDLER_OPTIONS: dict[str, Any] = {
    "group": GROUP,
    "batch_size": 10,
    "block_ms": 100,
    "claim_idle_ms": int(os.environ.get("SW_CHAOS_CLAIM_IDLE_MS", "1500")),
    "max_deliveries": MAX_DELIVERIES,
    "retry_backoff_ms": 10,
    "retry_backoff_max_ms": 200,
}

_LOG = os.environ.get("SW_CHAOS_LOG", "chaos_handled.log")


class Order(BaseModel):
    n: int
    kind: Literal["ok", "slow", "reject", "fail"]
    amount: int


def record(msg: Message[Order]) -> None:
    """Log this call. Without fsync: the page cache keeps it across a SIGKILL of this process,
    and a record cut by one mid-write is told apart (tests.support.journal)."""
    body = msg.body
    assert body is not None
    line = f"{msg.id} {body.n} {body.kind} {msg.delivery_count} {msg.consumer}"
    append_record(_LOG, line, fsync=False)
