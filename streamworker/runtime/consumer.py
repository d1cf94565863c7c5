"""One subscription's consume loop: backlog first, then new entries.

On start and after every reconnect the loop reads this consumer's own pending entries
(``XREADGROUP … 0``, paging by the last id returned) until none are left, then switches to ``>`` with
BLOCK and COUNT. Each batch goes through the idempotency strategy, which runs the handlers and XACKs
the successes in one call; failures stay pending; permanent failures and messages over
``max_deliveries`` are dead-lettered by one Lua script (XADD to the dead-letter stream + XACK).

Why backlog first: the consumer name is stable across restarts, so entries this consumer had read
before a crash are still in its PEL, delivered but unacked. ``>`` would never return them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.app import HandlerSpec
from streamworker.codec import decode_message
from streamworker.deps import Resolver
from streamworker.errors import (
    ConnectionLost,
    DatabaseUnavailable,
    PermanentFailure,
    StreamworkerError,
)
from streamworker.idempotency.base import Strategy
from streamworker.message import Message
from streamworker.observability.metrics import OUTCOMES, Metrics
from streamworker.outcomes import (
    NOT_STARTED,
    SKIPPED,
    Action,
    Outcome,
    describe,
    over_delivered,
    over_delivered_verdict,
    retry_delay_ms,
)
from streamworker.redisio import Entry, LuaScript, connection_errors, parse_read_reply
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.invoker import HandlerInvoker
from streamworker.runtime.late import CLAIMED, DELETED, OWNED, late_after_s, touch_owned
from streamworker.runtime.ordering import OrderedLoop
from streamworker.runtime.threads import HandlerThreads

_DEAD_LETTER = LuaScript("dead_letter")


class Consumer:
    """The consume loop of one :class:`~streamworker.app.HandlerSpec`.

    Runs until :meth:`stop` is called; then it finishes the batch in hand (the worker cancels it
    after the shutdown deadline, in which case only finished messages are acked) and returns.
    Connection losses are retried with capped backoff; anything else unexpected propagates.
    Use from one event loop.
    """

    def __init__(
        self,
        spec: HandlerSpec,
        *,
        client: aioredis.Redis,
        consumer: str,
        strategy: Strategy,
        resolver: Resolver,
        metrics: Metrics,
        threads: HandlerThreads,
        backoff: Backoff,
        read_client: aioredis.Redis | None = None,
    ) -> None:
        self.spec = spec
        self.consumer = consumer
        self._client = client
        # Blocking reads use a client of their own whose socket timeout exceeds block_ms; every
        # other command gets the shorter timeout of ``client``.
        self.read_client = read_client or client
        self._strategy = strategy
        self._resolver = resolver
        self._metrics = metrics
        self._threads = threads
        self._backoff = backoff
        self._stop = asyncio.Event()
        self._stream = spec.stream.encode()
        self._labels = {"stream": spec.stream, "group": spec.group, "handler": spec.name}
        metrics.prime(**self._labels)
        self._outage = metrics.outage(**self._labels)
        # The series every batch updates, looked up once.
        self._batch_size = metrics.batch_size.labels(**self._labels)
        self._ack_latency = metrics.ack_latency.labels(**self._labels)
        self._late_batches = metrics.late_batches.labels(**self._labels)
        self._outcomes = {o: metrics.messages.labels(outcome=o, **self._labels) for o in OUTCOMES}
        self._log = structlog.get_logger("streamworker.consumer").bind(
            stream=spec.stream, group=spec.group, consumer=consumer, handler=spec.name
        )
        self._invoke = HandlerInvoker(
            spec,
            resolver=resolver,
            threads=threads,
            metrics=metrics,
            stopping=self.stopping,
            log=self._log,
        )
        # What the worker's heartbeat reports (runtime.names): wall-clock time of the last
        # batch, and messages acked (incl. duplicates) / failed or dead-lettered so far.
        self.last_batch_at = 0.0
        self.processed = 0
        self.failed = 0
        self._group_ready = False
        self.group_lost = False
        """True once the handler stopped because its group disappeared (see _group_lost)."""
        self.backlog_drained = asyncio.Event()
        self.in_backlog = True
        # When the loop last went round (monotonic): liveness compares it with its deadline.
        self.last_turn = time.monotonic()
        # Entries this consumer holds and must keep fresh (see reaper.Reclaimer): those being
        # processed now, and failed ones waiting for their retry (id -> monotonic due time).
        self.in_flight: set[bytes] = set()
        self.retries: dict[bytes, float] = {}
        # Set when a retry is scheduled: the reclaimer may be asleep until a later due time.
        self.retry_scheduled = asyncio.Event()
        # Batches from the read loop and from the reclaimer are processed one at a time, so
        # ``concurrency`` bounds the handlers of one subscription.
        self._batch_lock = asyncio.Lock()
        # A read or claim reply later than this (seconds after it was sent) is checked before
        # its handlers run: see runtime.late.
        self._late_after_s = late_after_s(spec.claim_idle_ms)
        # ordered=True: the lease-holding, one-message-at-a-time loop replaces _consume.
        self.ordered = OrderedLoop(self, client) if spec.ordered else None

    def stop(self) -> None:
        """Stop reading; the batch in hand is finished by :meth:`run`."""
        self._stop.set()

    async def stopped(self) -> None:
        """Wait until :meth:`stop` is called."""
        await self._stop.wait()

    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    async def run(self) -> None:
        """The loop. Returns after :meth:`stop`; raises on errors that retrying cannot fix."""
        self._log.info("consumer_started", idempotency=self.spec.idempotency)
        while not self.stopping():
            # Retrying a lost connection is the loop at work: readiness reports the outage.
            self.last_turn = time.monotonic()
            try:
                if not self._group_ready:
                    # Created at start-up only (see _group_lost).
                    await self._ensure_group()
                    self._group_ready = True
                else:
                    # After a reconnect: a round trip that tells the outage is over (to the
                    # stream's own node on Redis Cluster).
                    async with connection_errors():
                        await self._client.xlen(self.spec.stream)
                self._outage.recovered()  # Redis answered: an outage (if any) is over
                if self.ordered is not None:
                    await self.ordered.run()
                else:
                    await self._consume()
            except ConnectionLost as exc:
                if self.stopping():
                    break
                delay = self._backoff.next_delay()
                self._outage.attempt()
                self._log.warning("connection_lost", error=str(exc), retry_in_s=round(delay, 3))
                await self._sleep(delay)
            except rex.ResponseError as exc:
                if self.stopping():
                    break
                text = str(exc)
                if text.startswith("UNBLOCKED"):
                    # A blocked read whose stream was deleted, or, on Redis Cluster, whose key
                    # migrated to another node (MIGRATE deletes it here): read again; the next
                    # read finds the group on its new node, or says NOGROUP.
                    self._log.info("read_unblocked", error=text)
                    continue
                if not text.startswith("NOGROUP"):
                    raise StreamworkerError(
                        f"stream {self.spec.stream!r} group {self.spec.group!r}: Redis said: {exc}"
                    ) from exc
                if self.spec.recreate_lost_group:
                    # Opted in: re-create it at start_id and start over from the backlog.
                    self._log.warning("group_missing_recreating", error=text)
                    self._group_ready = False
                    continue
                self._group_lost(text)
                break
        self._log.info("consumer_stopped")

    def _group_lost(self, error: str) -> None:
        """Stop this handler: re-creating the group at ``start_id`` would replay every entry."""
        self.group_lost = True
        self._log.error(
            "group_lost",
            error=error,
            start_id=self.spec.start_id,
            hint=(
                "the consumer group disappeared while the worker ran; this handler stopped "
                "instead of re-creating it at start_id (which would process every entry from "
                "there again). Re-create the group at the right id (XGROUP CREATE … <id>) and "
                "restart, or set recreate_lost_group=True on the handler"
            ),
        )
        self._stop.set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _ensure_group(self) -> None:
        async with connection_errors():
            try:
                await self._client.xgroup_create(
                    self.spec.stream, self.spec.group, id=self.spec.start_id, mkstream=True
                )
                self._log.info("group_created", start_id=self.spec.start_id)
            except rex.ResponseError as exc:
                if not str(exc).startswith("BUSYGROUP"):
                    raise

    async def _consume(self) -> None:
        cursor: bytes | None = b"0"
        self.in_backlog = True
        while not self.stopping():
            self.last_turn = time.monotonic()
            if cursor is not None:
                sent = time.monotonic()  # the lease clock starts when the read is sent
                entries = await self._read(cursor, block_ms=None)
                if not entries:
                    cursor = None
                    self.in_backlog = False
                    self.backlog_drained.set()
                    self._log.debug("backlog_drained")
                    continue
                cursor = entries[-1].id
                counts = await self._delivery_counts(entries)
            else:
                # What is there now first: while the stream has a backlog, a plain read spares
                # the blocking read's race against stop() (two tasks and a wait per batch).
                sent = time.monotonic()
                entries = await self._read(b">", block_ms=None)
                if not entries:
                    sent = time.monotonic()
                    entries = await self._read(b">", block_ms=self.spec.block_ms)
                    self.last_turn = time.monotonic()
                    if not entries:
                        continue
                # A '>' read is a first delivery (a rewound entry's counter restarts at 1 too).
                self._backoff.reset()
                await self.process(
                    entries, dict.fromkeys((e.id for e in entries), 1), fresh_at=sent, sent_at=sent
                )
                continue
            self._backoff.reset()
            await self.process(entries, counts, sent_at=sent)

    def held_ids(self) -> list[bytes]:
        """Entries whose lease must be renewed: in flight or waiting for a retry."""
        return [*self.in_flight, *(i for i in self.retries if i not in self.in_flight)]

    async def process(
        self,
        entries: list[Entry],
        counts: Mapping[bytes, int],
        fresh_at: float | None = None,
        sent_at: float | None = None,
    ) -> None:
        """Process entries this consumer owns (read, or claimed by the reclaimer), one batch at a
        time. ``counts`` maps each id to its delivery counter; ids missing from it are skipped.
        ``fresh_at``: when the ``>`` read that returned them was sent (monotonic), None for other
        sources. ``sent_at``: when the read or claim that returned them was sent; a batch whose
        handlers would start later than a quarter of ``claim_idle_ms`` after it (a late reply, or
        a long wait for the batch in hand) is checked first (:meth:`_recheck_late`)."""
        started = time.monotonic()
        self.in_flight.update(e.id for e in entries)
        try:
            async with self._batch_lock:
                # After the lock: the lease clock ran from the send through the reply's delay
                # and the wait for the batch in hand.
                delay_s = time.monotonic() - sent_at if sent_at is not None else 0.0
                if delay_s > self._late_after_s:
                    entries, fresh_at = await self._recheck_late(entries, delay_s, fresh_at)
                await self._process(entries, counts, started, fresh_at)
        finally:
            self.in_flight.difference_update(e.id for e in entries)

    async def _recheck_late(
        self, entries: list[Entry], delay_s: float, fresh_at: float | None
    ) -> tuple[list[Entry], float | None]:
        """The entries of a late batch that are still this consumer's, their idle time reset
        (one script: runtime.late); the rest are dropped with ``message_claimed_away`` and never
        handled. A check whose own reply comes late is repeated for the entries it kept. Returns
        them with the new ``fresh_at`` (the check's send time restarts the lease of a ``>``
        batch)."""
        self._late_batches.inc()
        self._log.debug("late_batch_checked", delay_s=round(delay_s, 3), entries=len(entries))
        while entries:
            sent = time.monotonic()
            statuses = await touch_owned(
                self._client,
                self.spec.stream,
                self.spec.group,
                self.consumer,
                [e.id for e in entries],
            )
            kept = [e for e, s in zip(entries, statuses, strict=True) if s == OWNED]
            gone = [e.id for e, s in zip(entries, statuses, strict=True) if s == DELETED]
            for entry, status in zip(entries, statuses, strict=True):
                if status not in (OWNED, DELETED):
                    self.in_flight.discard(entry.id)
                    self.retries.pop(entry.id, None)
                    self._log.warning(
                        "message_claimed_away",
                        message_id=entry.id.decode(),
                        acked=status != CLAIMED,
                        reply_delay_s=round(delay_s, 3),
                    )
            if gone:
                self.in_flight.difference_update(gone)
                self.count_deleted(gone)
            entries = kept
            if fresh_at is not None:
                fresh_at = sent
            if time.monotonic() - sent <= self._late_after_s or self.stopping():
                break
        return entries, fresh_at

    async def _read(self, start: bytes, block_ms: int | None) -> list[Entry]:
        call = (self._client if block_ms is None else self.read_client).xreadgroup(
            self.spec.group,
            self.consumer,
            {self.spec.stream: start},
            count=self.spec.batch_size,
            block=block_ms,
        )
        async with connection_errors():
            if block_ms is None:
                return parse_read_reply(await call, self._stream)
            # A blocking read must give way to stop(): race it against the stop event. Entries a
            # cancelled read had already taken stay in this consumer's PEL: the backlog read of
            # the next start returns them, so nothing is lost.
            read = asyncio.ensure_future(call)
            stopped = asyncio.ensure_future(self._stop.wait())
            try:
                done, _ = await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
            if read in done:
                return parse_read_reply(read.result(), self._stream)
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await read
            return []

    async def _delivery_counts(self, entries: list[Entry]) -> dict[bytes, int]:
        """Delivery counters of backlog entries (a history read does not return them)."""
        async with connection_errors():
            rows = await self._client.xpending_range(
                self.spec.stream,
                self.spec.group,
                min=entries[0].id,
                max=entries[-1].id,
                count=len(entries),
                consumername=self.consumer,
            )
        counts: dict[bytes, int] = {}
        for row in rows:
            mid = row["message_id"]
            counts[mid if isinstance(mid, bytes) else str(mid).encode()] = int(
                row["times_delivered"]
            )
        return counts

    async def _process(
        self,
        entries: list[Entry],
        counts: Mapping[bytes, int],
        started: float,
        fresh_at: float | None,
    ) -> None:
        spec = self.spec
        messages: list[Message[Any]] = []
        deleted: list[bytes] = []
        dead: list[tuple[bytes, int, str]] = []
        verdicts: dict[str, Outcome] = {}
        for entry in entries:
            count = counts.get(entry.id)
            if count is None:
                # No longer in this consumer's PEL: claimed by another consumer since the read.
                continue
            if entry.fields is None:
                deleted.append(entry.id)
                continue
            try:
                msg = decode_message(
                    entry.id,
                    entry.fields,
                    stream=spec.stream,
                    group=spec.group,
                    consumer=self.consumer,
                    delivery_count=count,
                    model=spec.model,
                    body_field=spec.body_field,
                )
            except PermanentFailure as exc:
                # Its handler can never have run (decoding comes first), so nothing of it was
                # applied: dead-letter it now.
                dead.append((entry.id, count, describe(exc)))
                continue
            if over_delivered(count, spec.max_deliveries):
                # Decided, but the strategy sees it first: if its effects are recorded as applied
                # (committed, then a crash before the XACK), it is acked as a duplicate instead.
                verdicts[msg.id] = over_delivered_verdict(count, spec.max_deliveries)
            messages.append(msg)

        if deleted:
            await self._ack_deleted(deleted)
        # Fresh: read by '>' so recently that no other consumer may claim the entries yet (their
        # idle time is below half of claim_idle_ms, and the reclaimer keeps in-flight ones fresh).
        fresh = fresh_at is not None and time.monotonic() - fresh_at < spec.claim_idle_ms / 2000
        try:
            if verdicts:
                with self._invoke.decided(verdicts):
                    outcomes = await self._run_strategy(messages, fresh)
            else:
                outcomes = await self._run_strategy(messages, fresh)
        finally:
            self._invoke.flush_timings()
        self._batch_size.observe(len(entries))
        tally: dict[str, int] = {}
        now = time.monotonic()
        retries = self.retries
        for msg, outcome in zip(messages, outcomes, strict=True):
            action = outcome.action
            if action is Action.ACK:  # the common case first
                label = "duplicate" if outcome.duplicate else "acked"
                tally[label] = tally.get(label, 0) + 1
                if retries:
                    retries.pop(msg.id.encode(), None)
                continue
            if action is Action.LEAVE_PENDING and outcome in SKIPPED:
                continue
            mid = msg.id.encode()
            if action is Action.DEAD_LETTER:
                # counted once the script has moved it
                dead.append((mid, msg.delivery_count, outcome.error))
                retries.pop(mid, None)
            else:
                tally[outcome.metric] = tally.get(outcome.metric, 0) + 1
                delay_ms = retry_delay_ms(
                    outcome, msg.delivery_count, spec.retry_backoff_ms, spec.retry_backoff_max_ms
                )
                retries[mid] = now + delay_ms / 1000
                self.retry_scheduled.set()
        for label, n in tally.items():
            self._outcomes[label].inc(n)
        # For the worker's heartbeat record (runtime.names): plain counters, no lookups.
        self.last_batch_at = time.time()
        self.processed += tally.get("acked", 0) + tally.get("duplicate", 0)
        self.failed += tally.get("failed", 0) + tally.get("retried", 0) + len(dead)
        if tally.get("duplicate"):
            self._metrics.dedup_hits.labels(strategy=self._strategy.name, **self._labels).inc(
                tally["duplicate"]
            )
        if tally.get("acked") or tally.get("duplicate"):
            self._ack_latency.observe(time.monotonic() - started)
        for entry_id, count, reason in dead:
            self.retries.pop(entry_id, None)
            await self._dead_letter(entry_id, count, reason)

    async def _run_strategy(self, messages: list[Message[Any]], fresh: bool) -> list[Outcome]:
        """The strategy's outcomes for ``messages``; while the database is unavailable, the same
        batch again after a capped backoff.

        The batch stays in hand instead of being re-read: a re-read would count a delivery per
        attempt and dead-letter messages because of an outage. Nothing of it was acked. On stop
        the batch is left pending as it is.
        """
        while True:
            try:
                return await self._strategy.process(messages, self._invoke, fresh=fresh)
            except DatabaseUnavailable as exc:
                fresh = False  # the retry comes later: check again
                if self.stopping():
                    return [NOT_STARTED] * len(messages)
                delay = self._backoff.next_delay()
                self._metrics.idempotency_errors.labels(
                    strategy=self._strategy.name, **self._labels
                ).inc()
                self._log.warning(
                    "database_unavailable", error=str(exc), retry_in_s=round(delay, 3)
                )
                await self._sleep(delay)

    async def _ack_deleted(self, ids: list[bytes]) -> None:
        # The entry was deleted or trimmed while pending: there is nothing left to process, and
        # leaving it would make every backlog read return it again.
        async with connection_errors():
            await self._client.xack(self.spec.stream, self.spec.group, *ids)
        self.count_deleted(ids)

    def count_claimed(self, n: int, source: str) -> None:
        """Record entries the reclaimer claimed: ``source`` is ``"self"`` or ``"others"``."""
        self._metrics.claimed.labels(source=source, **self._labels).inc(n)

    def count_deleted(self, ids: list[bytes]) -> None:
        """Record entries that were deleted from the stream while pending (already out of the PEL)."""
        self._metrics.messages.labels(outcome="deleted", **self._labels).inc(len(ids))
        for entry_id in ids:
            self.retries.pop(entry_id, None)
            self._log.warning("deleted_entry_acked", message_id=entry_id.decode())

    async def _dead_letter(self, entry_id: bytes, count: int, reason: str) -> None:
        log = self._log.bind(message_id=entry_id.decode(), delivery_count=count)
        try:
            result = await _DEAD_LETTER(
                self._client,
                [self.spec.stream, self.spec.dead_letter_stream],
                [
                    self.spec.group,
                    entry_id,
                    self.consumer,
                    count,
                    reason,
                    self.spec.name,
                    int(time.time() * 1000),
                ],
            )
        except rex.ResponseError as exc:
            # The entry stays pending (never acked without its dead letter); retried later.
            log.error("dead_letter_failed", error=str(exc), reason=reason)
            return
        if result == -1:
            log.info("dead_letter_skipped_claimed", reason=reason)
            return
        if result == 0:
            log.info("dead_letter_skipped_not_pending", reason=reason)
            return
        dlq_id = result.decode() if isinstance(result, bytes) else str(result)
        self._metrics.messages.labels(outcome="dead_lettered", **self._labels).inc()
        log.warning(
            "message_dead_lettered",
            reason=reason,
            dead_letter_stream=self.spec.dead_letter_stream,
            dead_letter_id=dlq_id,
        )
