"""A test App consuming the partitioned stream ``events`` (8 partitions) with ``ordered=True`` and
``idempotency="lua"``: each message ``{key, seq}`` appends ``key:seq`` to its partition's list
``{events:pN}:handled`` with its ack, so the list is the partition's handled order and a message
applied twice shows up twice. Run by ``streamworker run`` in a subprocess; configured by the
environment (user code):

SW_TEST_LOG           file: one line "start <id> <key:seq> <delivery_count> <consumer>" per call
SW_TEST_SLEEP_S       seconds each handler takes (default 0.002)
SW_TEST_CLAIM_IDLE_MS the lease TTL, claim_idle_ms (default 1500)
SW_TEST_FAIL_EVERY    every message whose seq is a multiple of this fails on its first delivery
                      (default 0: none)
"""

from __future__ import annotations

import os
import time

from streamworker import App, Effects, Message, Retry
from tests.support.crashpoints import CrashPlan

app = App("ordered-events")

PARTITIONS = 8
_SLEEP = float(os.environ.get("SW_TEST_SLEEP_S", "0.002"))
_FAIL_EVERY = int(os.environ.get("SW_TEST_FAIL_EVERY", "0"))
_plan = CrashPlan("ordered_events.log", ())


@app.handler(
    "events",
    group="audit",
    partitions=PARTITIONS,
    ordered=True,
    idempotency="lua",
    batch_size=10,
    block_ms=200,
    claim_idle_ms=int(os.environ.get("SW_TEST_CLAIM_IDLE_MS", "1500")),
    retry_backoff_ms=20,
    retry_backoff_max_ms=50,
)
def record(msg: Message) -> Effects:
    item = f"{msg.fields['key']}:{msg.fields['seq']}"
    _plan.record(f"start {msg.id} {item} {msg.delivery_count} {msg.consumer}")
    if _SLEEP:
        time.sleep(_SLEEP)
    if _FAIL_EVERY and int(msg.fields["seq"]) % _FAIL_EVERY == 0 and msg.delivery_count == 1:
        raise Retry(delay_ms=20)
    return Effects().rpush(f"{msg.stream}:handled", item)
