"""Pruning ``processed_messages`` for ``idempotency="sql"``: which rows of a group can never be
needed again (:func:`retention_cut`, from the group's state in Redis) and their deletion
(:func:`prune`; workers call it every ``prune_interval_s``, ``streamworker prune`` on demand).

A row is needed while its message can still be delivered to the group, i.e. while it is in the
group's PEL: an acked entry never comes back (XCLAIM and XAUTOCLAIM move only pending entries), and
an entry not delivered yet has no row. So, from the group's state:

* PEL not empty, oldest pending id P: delete rows with ``message_id < P``;
* PEL empty, last-delivered id L: delete rows with ``message_id <= L``.

(``message_id`` is stored zero-padded, :func:`sortable_id`, so that it sorts as stream ids do.)
Rows above the cut whose messages were acked stay until the oldest pending entry moves on; the exact
rule (every acked id) would need a scan of the whole PEL each time. One entry that stays pending
(failing until ``max_deliveries``) holds the cut back for that long.

Races, and why the rule holds anyway:

* The group's state is read in two commands. L is read *before* the PEL: every id up to L was
  delivered by then, so if the PEL is empty afterwards they were all acked. Read the other way
  round, entries delivered between the two reads (pending, possibly committed but not acked) would
  fall under L.
* Entries acked after the reads are simply pruned next time; entries delivered after them are above
  both cuts (delivery follows id order).
* A consumer can still *hold* a message that another consumer claimed away and acked (it stalled
  past ``claim_idle_ms``); the row may then be pruned while the stale holder is about to claim it.
  That is why step 2 of a batch (:mod:`.strategy`) checks ownership *after* the claim INSERT: if the message is still pending and
  ours at that moment, it was never acked, so its row (if any) was never pruned, and any other
  holder that claims it later blocks on our uncommitted row. If it is not ours any more, we skip it.
  A claim that completes less than ``claim_idle_ms`` after the ``>`` read that delivered the
  message needs no check: no other consumer may claim it before then (the reclaimer takes
  entries idle past ``claim_idle_ms``), so it cannot have been acked and pruned either. An
  operator's claim with a smaller minimum idle time (the dashboard's, ``XCLAIM`` by hand) on a
  consumer that is processing is outside that rule, as ``XGROUP SETID`` is.
* ``XGROUP SETID`` to an earlier id re-delivers acked entries on purpose; those whose rows were
  pruned are processed again.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

import redis.asyncio as aioredis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from streamworker.idempotency.deadline import DEFAULT_DB_DEADLINE_S, bounded
from streamworker.idempotency.sql.database import SqlDatabase
from streamworker.idempotency.sql.errors import database_errors
from streamworker.idempotency.sql.schema import processed_messages, sortable_id, stream_id
from streamworker.io.redisio import as_text, connection_errors


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """Rows of one (group, stream) with ``message_id`` below ``bound`` (or equal, when
    ``inclusive``) can never be needed again."""

    bound: str  # a sortable_id
    inclusive: bool

    def __str__(self) -> str:
        return f"{'<=' if self.inclusive else '<'} {stream_id(self.bound)}"


def retention_cut(last_delivered_id: str, oldest_pending_id: str | None) -> RetentionCut | None:
    """The tightest safe pruning rule from a group's state (see the module docstring).

    ``last_delivered_id`` must have been read *before* the PEL that gave ``oldest_pending_id``
    (None when the PEL was empty). Returns None when nothing can be pruned (nothing delivered yet).
    """
    if oldest_pending_id is not None:
        return RetentionCut(sortable_id(oldest_pending_id), inclusive=False)
    if last_delivered_id in ("0", "0-0"):
        return None
    return RetentionCut(sortable_id(last_delivered_id), inclusive=True)


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one prune did: the rule applied (None: nothing could be pruned) and rows deleted."""

    cut: RetentionCut | None
    deleted: int


async def read_retention_cut(
    client: aioredis.Redis, stream: str, group: str
) -> RetentionCut | None:
    """The group's current :func:`retention_cut` (None when the group does not exist)."""
    async with connection_errors():
        # Order matters: the last-delivered id first, then the PEL (module docstring).
        try:
            groups = await client.xinfo_groups(stream)
        except Exception as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        last: str | None = None
        for info in groups:
            name = info.get("name")
            if as_text(name) == group:
                raw = info.get("last-delivered-id")
                last = as_text(raw)
        if last is None:
            return None
        summary = await client.xpending(stream, group)
    oldest = summary.get("min") if summary and int(summary.get("pending", 0)) else None
    if isinstance(oldest, bytes):
        oldest = oldest.decode()
    return retention_cut(last, oldest)


def delete_processed(
    engine: Engine,
    group: str,
    stream: str,
    cut: RetentionCut,
    *,
    deadline_s: float = DEFAULT_DB_DEADLINE_S,
) -> int:
    """Delete the (group, stream) rows below ``cut``; returns how many. Blocking; a database
    that does not answer within ``deadline_s`` gets its connection aborted (DatabaseUnavailable).
    """
    c = processed_messages.c
    below = c.message_id <= cut.bound if cut.inclusive else c.message_id < cut.bound
    stmt = sa.delete(processed_messages).where(c.group_name == group, c.stream == stream, below)
    with (
        database_errors("pruning"),
        engine.begin() as conn,
        bounded(conn.connection.driver_connection, deadline_s),
    ):
        return int(conn.execute(stmt).rowcount)


async def prune(db: SqlDatabase, client: aioredis.Redis, stream: str, group: str) -> PruneResult:
    """Delete the processed rows of (group, stream) whose messages can no longer be delivered.

    Safe to run at any time, from any process, concurrently with workers (module docstring).
    Raises ConnectionLost (Redis) or DatabaseUnavailable.
    """
    cut = await read_retention_cut(client, stream, group)
    if cut is None:
        return PruneResult(None, 0)
    deleted = await asyncio.to_thread(
        functools.partial(delete_processed, deadline_s=db.deadline.deadline_s),
        db.sync_engine,
        group,
        stream,
        cut,
    )
    return PruneResult(cut, deleted)
