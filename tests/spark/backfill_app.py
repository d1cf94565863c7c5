"""The App of the backfill tests: an ``idempotency="sql"`` handler that books one Charge row per
order. Run both by ``streamworker run`` (the live worker) and by Spark executors (the backfill).

Test controls travel in the entries' fields (executors do not see the test's environment):

``dir``          a directory; in a Spark task the handler touches ``dir/started`` on its first
                 call, and, while ``dir/crash`` exists, the 250th call of a process in partition 0
                 removes it and kills the Python worker (an executor lost mid-partition)
``slow_ms``      how long the live worker's handler sleeps per message (Spark's does not)
``poison``       "1": the handler raises (a message that can never succeed)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqlalchemy.orm import Session

from streamworker import App, Message
from tests.support.sql import Charge

app = App("spark-backfill")
_calls = 0


def _in_spark_task() -> int | None:
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    ctx = TaskContext.get()
    return None if ctx is None else ctx.partitionId()


@app.handler("orders", group="billing", idempotency="sql", batch_size=20, block_ms=200)
def charge(msg: Message, session: Session) -> None:
    global _calls
    fields = msg.fields
    partition = _in_spark_task()
    if partition is not None and "dir" in fields:
        _calls += 1
        work = Path(fields["dir"])
        (work / "started").touch()
        crash = work / "crash"
        if partition == 0 and _calls >= 250 and crash.exists():
            crash.unlink()
            os._exit(1)
    elif fields.get("slow_ms"):
        time.sleep(int(fields["slow_ms"]) / 1000)
    if fields.get("poison") == "1":
        raise ValueError(f"order {fields['n']} cannot be charged")
    # 100 cents when a backfill booked it, 200 when a live worker did: the tests count both.
    cents = 100 if partition is not None else 200
    session.add(Charge(message_id=msg.id, order_id=fields["n"], amount_cents=cents))
