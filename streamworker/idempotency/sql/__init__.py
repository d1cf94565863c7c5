"""``idempotency="sql"``: the handler's database writes and the message's processed row commit in
one transaction; the XACK follows the commit. A redelivered message whose row exists is acked
without running the handler, so its writes commit exactly once.

The package, by concern:

* :mod:`.schema`: the processed-messages table and the stored form of stream ids;
* :mod:`.database`: URL checks, the engines (:class:`SqlDatabase`), the start-up readiness check;
* :mod:`.errors`: which database errors mean "unavailable" (the batch is retried);
* :mod:`.transactions`: one batch's transaction, sync or async, and the sessions handlers get;
* :mod:`.strategy`: :class:`SqlStrategy`, the algorithm and its guarantee, precisely;
* :mod:`.retention`: pruning the processed rows no message can need again, and why it is safe;
* :mod:`.plugin`: the strategy as the App and the worker see it (registry name ``"sql"``).

Every name is importable from here, as it was when this package was one module.
"""

from __future__ import annotations

from streamworker.idempotency.sql.database import SqlDatabase, parse_db_url
from streamworker.idempotency.sql.errors import database_errors
from streamworker.idempotency.sql.options import SqlOptions
from streamworker.idempotency.sql.retention import (
    PruneResult,
    RetentionCut,
    delete_processed,
    prune,
    read_retention_cut,
    retention_cut,
)
from streamworker.idempotency.sql.schema import (
    TABLE_NAME,
    TABLE_NAMES,
    VERSION_TABLE,
    metadata,
    processed_messages,
    sortable_id,
    stream_id,
)
from streamworker.idempotency.sql.strategy import LOST_OWNERSHIP, SqlStrategy
from streamworker.idempotency.sql.transactions import (
    AsyncBatchSession,
    BatchSession,
    TransactionOwned,
    claim_call,
    unclaim_statement,
)

__all__ = [
    "LOST_OWNERSHIP",
    "TABLE_NAME",
    "TABLE_NAMES",
    "VERSION_TABLE",
    "AsyncBatchSession",
    "BatchSession",
    "PruneResult",
    "RetentionCut",
    "SqlDatabase",
    "SqlOptions",
    "SqlStrategy",
    "TransactionOwned",
    "claim_call",
    "database_errors",
    "delete_processed",
    "metadata",
    "parse_db_url",
    "processed_messages",
    "prune",
    "read_retention_cut",
    "retention_cut",
    "sortable_id",
    "stream_id",
    "unclaim_statement",
]
