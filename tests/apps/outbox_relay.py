"""``streamworker relay`` in a subprocess, SIGKILLing itself at a planned point (crash tests).

Run as ``python -m tests.apps.outbox_relay RELAY-ARGS…``. Configured by environment variables:

SW_TEST_LOG     file: "batch <k> <ids…>" before each batch is added, "kill <point>" at the kill
SW_TEST_PAUSE_S seconds to wait after each batch's entries are in Redis, before deleting its rows
                (default 0): widens the window a SIGKILL from outside must hit
SW_TEST_KILL    where this process SIGKILLs itself, once:
                  after_add:K     the K-th batch's entries are in Redis, its rows not deleted
                  after_delete:K  its rows deleted, the transaction not committed
                  after_commit:K  committed, its markers not deleted yet

The points are reached by wrapping Relay's step methods here: the library has no test hooks.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from streamworker.cli import main
from streamworker.idempotency.sql import outbox
from tests.support.crashpoints import CrashPlan

_plan = CrashPlan("outbox_relay.log", ("after_add", "after_delete", "after_commit"))

_PAUSE_S = float(os.environ.get("SW_TEST_PAUSE_S", "0"))

_add = outbox.Relay._add
_delete = outbox.Relay._delete
_commit = outbox.Relay._commit


def _add_or_die(self: outbox.Relay, xadds: Sequence[Any]) -> list[bool]:
    added = _add(self, xadds)
    _plan.record(f"batch {len(xadds)} added {added.count(True)}")
    if _plan.at("after_add"):
        _plan.die("after_add")
    if _PAUSE_S:
        time.sleep(_PAUSE_S)
    return added


def _delete_or_die(self: outbox.Relay, conn: Any, ids: Sequence[int]) -> None:
    _delete(self, conn, ids)
    if _plan.at("after_delete"):
        _plan.die("after_delete")


def _commit_or_die(self: outbox.Relay, conn: Any) -> None:
    _commit(self, conn)
    if _plan.at("after_commit"):
        _plan.die("after_commit")


outbox.Relay._add = _add_or_die  # type: ignore[method-assign]
outbox.Relay._delete = _delete_or_die  # type: ignore[method-assign]
outbox.Relay._commit = _commit_or_die  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(["relay", *sys.argv[1:]]))
