"""What a worker is told about the database of its ``idempotency="sql"`` handlers: the SQL
plug-in's own options, given to the worker as ``WorkerOptions(strategy_options={"sql": ...})``.
The worker passes them to the plug-in without reading them."""

from __future__ import annotations

from dataclasses import dataclass

from streamworker.idempotency.deadline import DEFAULT_DB_DEADLINE_S


@dataclass(frozen=True, slots=True)
class SqlOptions:
    """The SQL plug-in's options for one worker.

    ``db_url``: the SQLAlchemy URL of the database the handlers' processed rows (and their
    writes) go to; required when a handler uses ``idempotency="sql"``.
    ``deadline_s``: a batch's database work (connect, claim, handlers, COMMIT) must finish within
    this; past it the connection is aborted and the batch retried on a fresh one
    (:mod:`streamworker.idempotency.deadline`).
    ``prune_interval_s``: how often the processed rows of the worker's subscriptions are pruned.
    """

    db_url: str | None = None
    deadline_s: float = DEFAULT_DB_DEADLINE_S
    prune_interval_s: float = 60.0
