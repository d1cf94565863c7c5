"""A test App with an ``idempotency="sql"`` handler, run by ``streamworker run`` in a subprocess:
each order on stream ``orders`` becomes one row in ``charges`` (see tests/support/sql.py).
Configured by environment variables (this is user code, so reading the environment is fine):

SW_TEST_LOG          file: one line "start <id> <n> <delivery_count> <consumer>" per handler call
SW_TEST_SLEEP_S      seconds each handler takes (default 0)
SW_TEST_HOLD         file: the first handler call waits (its batch's transaction open) until this
                     file exists, at most 120 s
SW_TEST_LOG_BATCHES  "1": also log "batch <consumer> <id>…" when the strategy is handed a batch
                     (before it claims the batch's rows)
SW_TEST_BATCH        batch size (default 5)
SW_TEST_MAX_DELIVERIES  max_deliveries (default 5)
SW_TEST_BATCH_HANDLER   "1": the handler is a batch handler (batch=True) inserting the batch's
                        charges with one executemany; logs a "start" line per message it gets
SW_TEST_KILL         where this process SIGKILLs itself, once:
                       before_commit:K     at the K-th batch commit, before it is sent
                       after_commit:K      after the K-th batch committed, before its XACK
                       handler:N           when the handler of order N starts (between two
                                           messages of a batch: the ones before it are done)

The kill points in the strategy are reached by wrapping SqlStrategy's methods here, in the test
app: the library has no test hooks.
"""

from __future__ import annotations

import os
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker import App, Message
from streamworker.idempotency import sql
from streamworker.io.redisio import NextRead
from tests.support.crashpoints import CrashPlan
from tests.support.sql import Charge

app = App("sql-charges")

_SLEEP = float(os.environ.get("SW_TEST_SLEEP_S", "0"))
_HOLD = os.environ.get("SW_TEST_HOLD")
_held = [False]
_plan = CrashPlan("sql_charges.log", ("before_commit", "after_commit"))
_record, _die, _at = _plan.record, _plan.die, _plan.at


_commit = sql.SqlStrategy._commit
_commit_in_thread = sql.SqlStrategy._commit_in_thread
_xack = sql.SqlStrategy._xack
_process = sql.SqlStrategy.process


async def _commit_or_die(self: sql.SqlStrategy, tx: Any) -> BaseException | None:
    if _at("before_commit"):
        _die("before_commit")
    return await _commit(self, tx)


def _commit_in_thread_or_die(self: sql.SqlStrategy, tx: Any) -> BaseException | None:
    # The commit of a fresh batch of a batch handler, in the handler's thread.
    if _at("before_commit"):
        _die("before_commit")
    return _commit_in_thread(self, tx)


async def _xack_or_die(self: sql.SqlStrategy, ids: Any, next_read: NextRead | None) -> None:
    if _at("after_commit"):
        _die("after_commit")
    await _xack(self, ids, next_read)


async def _process_logged(self: sql.SqlStrategy, work: Any) -> Any:
    if os.environ.get("SW_TEST_LOG_BATCHES") == "1":
        _record(" ".join(["batch", self.consumer, *(m.id for m in work.messages)]))
    return await _process(self, work)


def _hold() -> None:
    """The first call waits for the test's go (a file), so its batch stays open meanwhile."""
    if _HOLD is None or _held[0]:
        return
    _held[0] = True
    deadline = time.monotonic() + 120
    while not os.path.exists(_HOLD) and time.monotonic() < deadline:
        time.sleep(0.02)


sql.SqlStrategy.process = _process_logged  # type: ignore[method-assign]
sql.SqlStrategy._commit = _commit_or_die  # type: ignore[method-assign]
sql.SqlStrategy._commit_in_thread = _commit_in_thread_or_die  # type: ignore[method-assign]
sql.SqlStrategy._xack = _xack_or_die  # type: ignore[method-assign]


_OPTIONS: dict[str, Any] = {
    "group": "billing",
    "idempotency": "sql",
    "batch_size": int(os.environ.get("SW_TEST_BATCH", "5")),
    "block_ms": 200,
    "max_deliveries": int(os.environ.get("SW_TEST_MAX_DELIVERIES", "5")),
}


def charge(msg: Message, session: Session) -> None:
    n = msg.fields["n"]
    _record(f"start {msg.id} {n} {msg.delivery_count} {msg.consumer}")
    if _plan.point == "handler" and n == str(_plan.nth):
        _die("handler")
    session.add(Charge(message_id=msg.id, order_id=n, amount_cents=100))
    _hold()
    if _SLEEP:
        time.sleep(_SLEEP)


def charge_batch(msgs: list[Message], session: Session) -> None:
    for msg in msgs:
        _record(f"start {msg.id} {msg.fields['n']} {msg.delivery_count} {msg.consumer}")
    session.execute(
        sa.insert(Charge),
        [{"message_id": m.id, "order_id": m.fields["n"], "amount_cents": 100} for m in msgs],
    )
    if _SLEEP:
        time.sleep(_SLEEP)


if os.environ.get("SW_TEST_BATCH_HANDLER") == "1":
    app.handler("orders", batch=True, **_OPTIONS)(charge_batch)
else:
    app.handler("orders", **_OPTIONS)(charge)
