"""``idempotency="sql"``: the handler's database writes and the message's processed row commit in
one transaction; the XACK follows the commit. A redelivered message whose row exists is acked
without running the handler, so its writes commit exactly once.

The guarantee, precisely: for a message M of stream S read by group G, the writes a handler makes
through the ``Session``/``AsyncSession`` it is given commit at most once, in the same transaction as
the row (G, S, M) of :data:`~.schema.processed_messages`; M is acked only after that commit (or
after finding the row already there). Anything else the handler does (HTTP calls, e-mails, writes
through another connection) is at-least-once.

How one batch goes (:class:`SqlStrategy`)
-----------------------------------------

1. ``BEGIN``; claim the batch's rows with one ``INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING
   RETURNING message_id``. A message whose row was not inserted is a duplicate: it is acked without
   running its handler.
2. Check in Redis (one round trip, ``check_ownership.lua``) that this consumer still owns the
   claimed messages (see *Retention* for why); a message claimed away by another consumer is
   un-claimed and left alone. A *fresh* batch (read with ``>`` less than half of
   ``claim_idle_ms`` ago) whose claim completes within 45% more of it needs no check: the claim
   completed before anyone else may claim those entries (:meth:`SqlStrategy._ours_by_time`).
3. Run the handlers one after another with a session bound to this transaction, then flush,
   ``COMMIT`` and one ``XACK`` for the successes and the duplicates. ``def`` handlers whose
   arguments need nothing awaited per message (no message-scoped ``Depends``) run in one worker
   thread hop for the whole batch, not one hop each
   (:attr:`~streamworker.idempotency.base.RunHandler.inline`).

That is three database round trips per batch (claim, flush, commit) plus one fsync, whatever the
batch size, when handlers write through the ORM (``session.add``: the flush sends the batch's
inserts together). The article's per-message transaction pays round trips *and* an fsync per
message.

Failures: the fast path takes no savepoints. When a handler fails (or its flush, or the commit),
the transaction is rolled back and the batch is redone once with a ``SAVEPOINT`` per message: the
failed message is not claimed again (its outcome is known), every other message runs in its own
savepoint, and a message that fails now is rolled back to its savepoint and its row deleted, while
the rest of the batch commits. The trade-off: a batch with a failure costs its handlers twice (the
first run's writes were rolled back, so nothing commits twice; non-database side effects of the
handlers before the failed one do happen twice), and 2-3 extra round trips per message in the redo;
a batch without failures pays nothing for the possibility. Savepoints on every message would
cost those round trips always (and, past 64 per transaction, PostgreSQL's subtransaction cache).

Batch handlers (``batch=True``) are called once with the messages claimed and owned, in the same
transaction and with the same session: claim, ownership check, one call, flush, ``COMMIT``,
``XACK``. A raise rolls back the whole transaction; a message the handler reports failed (its
result map) has its row deleted before the commit, and the handler must not have written for it
(see ``SqlStrategy._attempt_many``). A fresh batch of a ``def`` batch handler goes in one thread
hop (``SqlStrategy._attempt_fresh_many``): BEGIN, the claim as a plain INSERT (no row can exist for
entries never delivered before; a conflict, after ``XGROUP SETID``, sends the batch the usual way),
the handler, flush, COMMIT; then the XACK.

Messages whose outcome is DEAD_LETTER are failures here too: their writes are undone and their row
is not kept; the consume loop then dead-letters them (its script XACKs them).

Why insert first, not ``SELECT … FOR UPDATE``
---------------------------------------------

The article checks the row with ``SELECT … FOR UPDATE`` and inserts it after the business writes.
``FOR UPDATE`` locks rows that exist; a row that does not exist yet locks nothing (PostgreSQL takes
no predicate or gap lock in READ COMMITTED). Two holders of the same message (an XCLAIM race) both
see "no row", both run the handler, and one of them fails only at its final INSERT on the primary
key, or, without a key, both commit the effects. Inserting the row first makes the primary key the
lock: the second inserter blocks on the first one's uncommitted row until it commits (conflict: a
duplicate, skip) or rolls back (insert succeeds: process). On SQLite the transaction starts with
``BEGIN IMMEDIATE``, which serialises writers for the whole transaction. Claiming all rows of a
batch in one statement, in id order, also gives concurrent claimers the same lock order.

Database outages
----------------

A connection refused, dropped mid-transaction, or a transaction the database would not take (lock
timeout, deadlock) raises :class:`~streamworker.errors.DatabaseUnavailable` before anything was
acked; the consume loop retries the same batch after a capped backoff. A commit whose outcome is
unknown (connection lost during COMMIT) is retried the same way: if it had committed, the retry
finds the rows and only acks. A database that stops answering without closing the connection is
bounded by the batch deadline (:mod:`streamworker.idempotency.deadline`): the connection is aborted
and thrown away, and :class:`~streamworker.errors.DatabaseTimeout` retries the batch likewise.

Retention of the processed rows, and why it is safe, is in :mod:`.retention`.

Thread and task safety: one :class:`SqlStrategy` serves one subscription; ``process`` is called by
one consume loop at a time. :class:`SqlDatabase` engines are shared by the whole worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
import structlog

from streamworker.core.message import Message
from streamworker.core.outcomes import (
    ACKED,
    CLAIMED_AWAY,
    DUPLICATE,
    NOT_STARTED,
    Action,
    BatchOutcomes,
    Outcome,
    describe,
)
from streamworker.core.timing import sql_fresh_claim_window_ms
from streamworker.errors import ConfigError, DatabaseTimeout, DatabaseUnavailable
from streamworker.idempotency.base import (
    Batch,
    BatchInlineRun,
    RunBlocking,
    SpanPhases,
    decide_failed,
)
from streamworker.idempotency.deadline import abort_driver_connection
from streamworker.idempotency.sql.database import SqlDatabase
from streamworker.idempotency.sql.schema import TABLE_NAME, sortable_id, stream_id
from streamworker.idempotency.sql.transactions import _AsyncTx, _SyncTx, _Tx
from streamworker.io.keys import dedup_record_key
from streamworker.io.redisio import LuaScript, NextRead, connection_errors, xack_then_read

T = TypeVar("T")


_CHECK = LuaScript("check_ownership")

LOST_OWNERSHIP = CLAIMED_AWAY
"""A message another consumer took over (XCLAIM) while this one held it: left to that consumer."""


class SqlStrategy:
    """``idempotency="sql"`` for one subscription: see the module docstring for the algorithm.

    Args:
        db: the worker's engines.
        client: the Redis client (XPENDING for the ownership check, XACK).
        stream, group, consumer: the subscription and this consumer's name (stored in each row).
        max_deliveries: to decide on a message whose flush failed after its handler returned.
        claim_idle_ms: the handler's; with it, a fresh batch whose claim completes soon enough
            needs no ownership check (``_ours_by_time``). None: always checked.
        is_async: ``async def`` handler (AsyncSession on the event loop) or ``def`` (Session, its
            calls in worker threads through the batch's
            :attr:`~streamworker.idempotency.base.Batch.run_blocking`).
        on_timeout: called (on the event loop) when a batch passes ``db.deadline``; the worker
            counts it (``streamworker_database_timeouts_total``).
    """

    name = "sql"
    trace_phases = SpanPhases(commit="until_ack", ack="xack")
    """The commit runs between the handlers and the XACK."""

    def __init__(
        self,
        db: SqlDatabase,
        client: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        max_deliveries: int,
        is_async: bool,
        claim_idle_ms: int | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self._on_timeout = on_timeout
        self._tx: _Tx | None = None  # the batch's transaction, for the deadline to abort
        self._client = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self._max_deliveries = max_deliveries
        self._claim_idle_ms = claim_idle_ms
        # Claims that complete before this moment (monotonic) need no ownership check: see
        # _ours_by_time. Set per batch by process() for fresh batches.
        self._fresh_until = 0.0
        self._is_async = is_async
        self._schema_ok = False
        self._stream_key = stream.encode()
        # Names the stream's slot for check_ownership.lua, which does not touch it here.
        self._record_key = dedup_record_key(stream, group).encode()
        self._log = structlog.get_logger("streamworker.sql").bind(
            stream=stream, group=group, consumer=consumer
        )

    # Kept as methods so that crash tests can stop the process at these exact points.
    async def _commit(self, tx: _Tx) -> BaseException | None:
        return await tx.commit()

    async def _xack(self, ids: Sequence[str], next_read: NextRead | None) -> None:
        # The batch's last call: the consume loop's next read goes out behind it.
        async with connection_errors():
            await xack_then_read(self._client, self.stream, self.group, ids, next_read)

    async def _ack(self, work: Batch, outcomes: list[Outcome]) -> list[Outcome]:
        """XACK the messages of ``work`` whose outcomes ack (the batch's last call); returns
        ``outcomes``. (The common batch, all acked, is told by one list.count: ACKED is compared
        by identity first.)"""
        if outcomes.count(ACKED) == len(outcomes):
            acked = [m.id for m in work.messages]
        else:
            acked = [m.id for m, o in zip(work.messages, outcomes, strict=True) if o.acked]
        if acked:
            await self._xack(acked, work.next_read)
        return outcomes

    def _commit_in_thread(self, tx: _SyncTx) -> BaseException | None:
        # _commit's form inside a pool thread (the one-hop batch).
        return tx.commit_now()

    async def _check_schema(self, run: RunBlocking) -> None:
        if not self._schema_ok:
            if not await run(self.db.has_schema):
                raise ConfigError(
                    f"table {TABLE_NAME!r} is missing in {self.db.redacted_url}; "
                    f"run `streamworker migrate --db-url URL` first"
                )
            self._schema_ok = True

    async def _open(self, run: RunBlocking, claim: Sequence[str] = ()) -> tuple[_Tx, set[str]]:
        """The batch's transaction, begun, and of ``claim`` the ids whose rows it inserted (one
        thread hop for both with a sync engine, through ``run``)."""
        tx = await self._new_tx(run)
        claimed = await tx.open(claim, self.consumer)
        return tx, claimed

    async def _new_tx(self, run: RunBlocking) -> _SyncTx | _AsyncTx:
        """The batch's transaction, not begun yet, after the schema check; kept as ``_tx`` for
        the batch deadline to abort its connection. A sync one makes its calls through ``run``."""
        await self._check_schema(run)
        tx: _SyncTx | _AsyncTx
        if self._is_async:
            tx = _AsyncTx(self.db.async_engine, self.group, self.stream)
        else:
            tx = _SyncTx(self.db.sync_engine, run, self.group, self.stream)
        self._tx = tx
        return tx

    def _ours_by_time(self) -> bool:
        """True when the claim that just completed needs no ownership check: the batch is fresh
        (read with ``>`` less than :func:`~streamworker.core.timing.fresh_batch_window_ms` before
        :meth:`process` began) and the claim completed less than
        :func:`~streamworker.core.timing.sql_fresh_claim_window_ms` after that. So it completed less
        than ``claim_idle_ms`` after the read was sent, before the earliest moment
        another consumer may claim those entries (idle past ``claim_idle_ms``): nobody else can
        have processed, acked and pruned them, and whoever claims them later waits on our rows."""
        return time.monotonic() < self._fresh_until

    async def _owned(self, ids: set[str]) -> set[str]:
        """Of ``ids`` (sortable), those still pending and owned by this consumer: one round trip
        (``check_ownership.lua``, which answers 0 when all of them are, the common case)."""
        if not ids:
            return set()
        ordered = sorted(ids)  # sortable ids sort as stream ids do
        entry_ids = [stream_id(sid) for sid in ordered]
        args: list[str | bytes | int] = [
            self.group,
            self.consumer,
            "",
            entry_ids[0],
            entry_ids[-1],
            len(ordered),
            " ".join(entry_ids),
        ]
        async with connection_errors():
            reply = await _CHECK(self._client, [self._stream_key, self._record_key], args)
        if isinstance(reply, int):
            return set(ids)
        return {sid for sid, status in zip(ordered, reply, strict=True) if int(status) == 0}

    async def process(self, work: Batch) -> list[Outcome]:
        """See :class:`~streamworker.idempotency.base.Strategy` (``work.fresh``: the ownership
        check is skipped when the claim completes in time, see :meth:`_ours_by_time`, and a batch
        handler's batch goes in one thread hop). Raises DatabaseUnavailable
        (nothing acked) when the database cannot take the batch, DatabaseTimeout (one) when the
        batch passed ``db.deadline`` (its connection was aborted and is not reused); ConfigError
        when the table is missing."""
        batch = work.messages
        if not batch:
            return []
        if work.fresh and self._claim_idle_ms:
            self._fresh_until = (
                time.monotonic() + sql_fresh_claim_window_ms(self._claim_idle_ms) / 1000
            )
        else:
            self._fresh_until = 0.0
        deadline = self.db.deadline
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            deadline.passed()
            tx = self._tx
            aborted = tx is not None and abort_driver_connection(tx.driver_connection())
            self._log.warning(
                "database_deadline_passed",
                deadline_s=deadline.deadline_s,
                batch=len(batch),
                connection_aborted=aborted,
            )
            if self._on_timeout is not None:
                self._on_timeout()

        timer = asyncio.get_running_loop().call_later(deadline.deadline_s, expire)
        try:
            outcomes = await self._process_batch(work)
        except DatabaseUnavailable as exc:
            if expired:
                raise DatabaseTimeout(
                    f"the batch passed the {deadline.deadline_s:g} s database deadline: {exc}"
                ) from exc
            raise
        finally:
            timer.cancel()
            self._tx = None
        if not expired:
            deadline.recovered()
        return outcomes

    async def _process_batch(self, work: Batch) -> list[Outcome]:
        if work.handle_batch is not None:
            call = work.handle_batch_inline
            if work.fresh and call is not None and not self._is_async:
                outcomes = await self._attempt_fresh_many(work, call)
                if outcomes is not None:
                    return outcomes
            return await self._attempt_many(work)
        known: dict[int, Outcome] = {}
        outcomes = await self._attempt(work, known, savepoints=False)
        if outcomes is None:
            self._log.info(
                "batch_redone_with_savepoints", batch=len(work.messages), failed=len(known) or None
            )
            outcomes = await self._attempt(work, known, savepoints=True)
            assert outcomes is not None
        return outcomes

    async def _attempt(
        self, work: Batch, known: dict[int, Outcome], *, savepoints: bool
    ) -> list[Outcome] | None:
        """One transaction over the batch. Returns None (rolled back) when the fast path met a
        failure it cannot undo without savepoints; ``known`` then holds the failed messages."""
        batch = work.messages
        sids = [sortable_id(m.id) for m in batch]
        wanted = [sid for i, sid in enumerate(sids) if i not in known]
        tx, claimed = await self._open(work.run_blocking, wanted)
        try:
            # After the claim (our rows are locked now): see the docstring of .retention.
            owned = claimed if self._ours_by_time() else await self._owned(claimed)
            release = sorted(claimed - owned)
            # def handlers without per-message dependencies: the fast path runs them all in one
            # thread hop (the loop below then reads their outcomes instead of invoking).
            ran: dict[int, Outcome] | None = None
            inline = work.handle_inline
            if inline is not None and not savepoints and isinstance(tx, _SyncTx):
                todo = [
                    (i, msg)
                    for i, (msg, sid) in enumerate(zip(batch, sids, strict=True))
                    if i not in known and sid in owned
                ]
                ran = await tx.run_inline(inline, todo)
            outcomes: list[Outcome] = []
            stopping = False
            for i, (msg, sid) in enumerate(zip(batch, sids, strict=True)):
                if i in known:
                    outcomes.append(known[i])
                    continue
                if sid not in claimed:
                    self._log.info("duplicate_acked", message_id=msg.id)
                    outcomes.append(DUPLICATE)
                    continue
                if sid not in owned:
                    self._log.warning("message_claimed_away", message_id=msg.id)
                    outcomes.append(LOST_OWNERSHIP)
                    continue
                if stopping:
                    release.append(sid)
                    outcomes.append(NOT_STARTED)
                    continue
                if savepoints:
                    await tx.savepoint()
                outcome = ran[i] if ran is not None else await work.handle(msg, tx.provided)
                if tx.broken():
                    # The handler's statements met a dead connection: an outage, not its fault.
                    raise DatabaseUnavailable(
                        f"database connection lost while handling {msg.id}: {outcome.error}"
                    )
                if outcome.preset:
                    # Decided before its handler (over-delivered, and not a duplicate: its row
                    # was free): nothing was written. Its row goes, and the loop dead-letters it.
                    if savepoints:
                        await tx.rollback_to_savepoint()
                    release.append(sid)
                    outcomes.append(outcome)
                    continue
                if outcome is NOT_STARTED:
                    # Shutdown began: this handler and the rest never ran, so they wrote nothing.
                    stopping = True
                    release.append(sid)
                    if savepoints:
                        await tx.rollback_to_savepoint()
                elif savepoints:
                    if outcome.acked:
                        error = await tx.release()
                        if error is not None:
                            outcome = self._flush_failed(msg, error)
                    else:
                        await tx.rollback_to_savepoint()
                    if not outcome.acked:
                        release.append(sid)
                elif not outcome.acked:
                    # No savepoint to undo this handler's writes: roll everything back, redo.
                    # In a transaction already in error state the failure may be an earlier
                    # handler's doing (it caught a failed statement): let the redo decide.
                    if not await tx.aborted():
                        known[i] = outcome
                    return None
                outcomes.append(outcome)
            if release:
                await tx.unclaim(release)
            error = await self._commit(tx)
            if error is not None:
                if not savepoints:
                    self._log.info("batch_commit_failed", error=describe(error))
                    return None
                self._log.error("batch_commit_failed", error=describe(error))
                failed = Outcome(Action.LEAVE_PENDING, f"commit failed: {describe(error)}")
                return [o if o.action is not Action.ACK else failed for o in outcomes]
        finally:
            await tx.close()
        return await self._ack(work, outcomes)

    async def _attempt_fresh_many(self, work: Batch, call: BatchInlineRun) -> list[Outcome] | None:
        """A fresh batch of a ``def`` batch handler, its blocking part in one pool-thread hop:
        BEGIN, the claim (a plain INSERT: no row can exist yet), the handler, flush, COMMIT; then
        the XACK. No ownership check: the claim completed while the batch was still fresh
        (:meth:`_ours_by_time`).

        Returns None, with nothing written and nothing acked, when the batch must go the way of
        :meth:`_attempt_many` instead: the claim met a processed row (``XGROUP SETID`` delivered
        the message again), or completed too late for the batch to count as fresh."""
        batch = work.messages
        sids = [sortable_id(m.id) for m in batch]
        tx = await self._new_tx(work.run_blocking)
        assert isinstance(tx, _SyncTx)  # only def handlers come this way

        def through() -> list[Outcome] | str:
            if tx.open_now(sids, self.consumer, fresh=True) is None:
                return "the claim met a processed row"
            try:
                if not self._ours_by_time():
                    tx.close_now()
                    return "the claim completed too late for the batch to count as fresh"
                result = call(batch, tx.provided)
                if tx.broken():
                    raise _lost_in_batch(result)
                outcomes = result.outcomes
                if result.raised:
                    tx.close_now()  # rolls back everything, the claims with the handler's writes
                    return outcomes
                # Over-delivered (preset), failed, or not started: their rows go, the rest commit.
                # (The common batch, all acked, is told by one list.count: ACKED is compared by
                # identity first.)
                if outcomes.count(ACKED) != len(outcomes):
                    release = [sid for sid, o in zip(sids, outcomes, strict=True) if not o.acked]
                    if release:
                        tx.unclaim_now(release)
                error = self._commit_in_thread(tx)
                if error is not None:
                    tx.close_now()
                    self._log.error("batch_commit_failed", error=describe(error))
                    return [
                        self._flush_failed(m, error) if o.acked else o
                        for m, o in zip(batch, outcomes, strict=True)
                    ]
                return outcomes
            except BaseException:
                tx.close_now()
                raise

        try:
            done: list[Outcome] | str = await work.run_blocking(through)
        finally:
            self._tx = None
        if isinstance(done, str):
            self._log.info("fresh_batch_claimed_again", batch=len(batch), reason=done)
            return None
        return await self._ack(work, done)

    async def _attempt_many(self, work: Batch) -> list[Outcome]:
        """A batch handler's batch: one transaction, one claim, one handler call.

        The claim and the ownership check are the per-message path's, in the same order (claim,
        then XPENDING): the handler is given the messages claimed and still owned; duplicates are
        acked and the ones claimed away left alone. There are no savepoints to redo with: when the
        handler raises (or the connection breaks, or the commit fails) the transaction is rolled
        back as a whole and every message it was given fails; when it reports some messages
        failed, their rows are deleted before the commit (the handler wrote nothing for them:
        its contract), and the rest commit."""
        batch = work.messages
        many = work.handle_batch
        assert many is not None
        sids = [sortable_id(m.id) for m in batch]
        outcomes: list[Outcome] = []
        tx, claimed = await self._open(work.run_blocking, sids)
        try:
            owned = claimed if self._ours_by_time() else await self._owned(claimed)
            release = sorted(claimed - owned)
            run: list[int] = []
            for i, (msg, sid) in enumerate(zip(batch, sids, strict=True)):
                if sid not in claimed:
                    self._log.info("duplicate_acked", message_id=msg.id)
                    outcomes.append(DUPLICATE)
                elif sid not in owned:
                    self._log.warning("message_claimed_away", message_id=msg.id)
                    outcomes.append(LOST_OWNERSHIP)
                else:
                    outcomes.append(NOT_STARTED)  # replaced by the handler's outcome below
                    run.append(i)
            raised = False
            if run:
                result = await many([batch[i] for i in run], tx.provided)
                if tx.broken():
                    raise _lost_in_batch(result)
                raised = result.raised
                for i, outcome in zip(run, result.outcomes, strict=True):
                    outcomes[i] = outcome
                    if not outcome.acked:
                        release.append(sids[i])
            if not raised:
                # Over-delivered (preset), failed, or not started: their rows go, the rest commit.
                if release:
                    await tx.unclaim(release)
                error = await self._commit(tx)
                if error is not None:
                    self._log.error("batch_commit_failed", error=describe(error))
                    for i in run:
                        if outcomes[i].acked:
                            outcomes[i] = self._flush_failed(batch[i], error)
            # else: closing rolls everything back, the claims with the handler's writes.
        finally:
            await tx.close()
        # Duplicates are acked even when the batch rolled back: their rows were committed by
        # whoever processed them (the claim waits for an uncommitted conflicting row).
        return await self._ack(work, outcomes)

    def _flush_failed(self, msg: Message[Any], error: BaseException) -> Outcome:
        return decide_failed(
            self._log, "handler_failed", msg, error, self._max_deliveries, stage="flush"
        )


def _lost_in_batch(result: BatchOutcomes) -> DatabaseUnavailable:
    """A batch handler's statements met a dead connection: an outage, not its fault."""
    error = next((o.error for o in result.outcomes if o.error), "")
    return DatabaseUnavailable(
        f"database connection lost while handling a batch of {len(result.outcomes)}: {error}"
    )
