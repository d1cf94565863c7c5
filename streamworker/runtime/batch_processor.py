"""The batch processor: what happens to a batch of entries a consumer owns, whatever its source.

The sources are the consume loop (its backlog and ``>`` reads), the reclaimer (retries due and
entries claimed from other consumers) and the ordered loop (one entry at a time). Each hands its
entries here with their delivery counters; the processor decodes them, decides over-delivered
ones (the strategy still sees them first, see below), hands the idempotency strategy one
:class:`~streamworker.idempotency.base.Batch` (which carries everything the strategy needs: the
messages and their verdicts, the handler, the handler threads, the consume loop's next read), and
with the outcomes schedules retries, dead-letters, and counts.

Batches are processed one at a time, so a subscription's ``concurrency`` bounds its handlers
whichever source a batch came from.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.app import HandlerSpec
from streamworker.core.codec import MessageDecoder
from streamworker.core.deps import Resolver
from streamworker.core.message import Message
from streamworker.core.outcomes import (
    ACKED,
    NOT_STARTED,
    SKIPPED,
    Action,
    Outcome,
    bounded_traceback,
    describe,
    over_delivered,
    over_delivered_verdict,
    retry_delay_ms,
)
from streamworker.core.timing import fresh_batch_window_ms
from streamworker.errors import ConnectionLost, DatabaseUnavailable, PermanentFailure, SchemaError
from streamworker.idempotency.base import Batch, RunBlocking, Strategy
from streamworker.io.keys import spark_cursors_key
from streamworker.io.redisio import Entry, LuaScript, NextRead, connection_errors
from streamworker.observability.metrics import OUTCOMES, Metrics
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.holdings import Holdings
from streamworker.runtime.invoker import HandlerInvoker
from streamworker.runtime.late import CLAIMED, DELETED, OWNED, late_after_s, touch_owned
from streamworker.runtime.loop import StopSignal
from streamworker.runtime.ratelimit import RateGate
from streamworker.runtime.release import uncount_deliveries
from streamworker.runtime.threads import HandlerThreads

_DEAD_LETTER = LuaScript("dead_letter")
_RETAIN_ACKED = LuaScript("retain_acked")


class BatchProcessor:
    """Processes the batches of one subscription's consumer. Use from one event loop.

    ``backoff`` paces the retries of a batch while the database is unavailable or its schema
    does not fit (shared with the consume loop: a success anywhere resets it). ``turned`` is
    called at every step of a schema pause: the loop is alive and waiting on purpose, so
    liveness must not restart the process (a restart re-reads the batch, counting a delivery).
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
        holdings: Holdings,
        signal: StopSignal,
        turned: Callable[[], None] | None = None,
        rate: RateGate | None = None,
    ) -> None:
        self.spec = spec
        # The handler's rate limit and pause: a RateLimited pauses the group (see _rate_limited).
        self.rate = rate or RateGate(spec, client, metrics)
        self._turned = turned
        self.consumer = consumer
        self.holdings = holdings
        self._client = client
        self._strategy = strategy
        self._metrics = metrics
        self._backoff = backoff
        self._signal = signal
        self._labels = {"stream": spec.stream, "group": spec.group, "handler": spec.name}
        # The series every batch updates, looked up once.
        self._batch_size = metrics.batch_size.labels(**self._labels)
        self._ack_latency = metrics.ack_latency.labels(**self._labels)
        self._late_batches = metrics.late_batches.labels(**self._labels)
        self._outcomes = {o: metrics.messages.labels(outcome=o, **self._labels) for o in OUTCOMES}
        self._log = structlog.get_logger("streamworker.consumer").bind(
            stream=spec.stream, group=spec.group, consumer=consumer, handler=spec.name
        )
        # Blocking work of the strategy (a sync database driver's calls) runs in the handlers'
        # threads: the pool that bounds the handlers bounds it too.
        self._run_blocking: RunBlocking = threads.run
        self._invoke = HandlerInvoker(
            spec,
            resolver=resolver,
            threads=threads,
            metrics=metrics,
            stopping=signal.stopping,
            log=self._log,
            pause=self.rate.pause,
        )
        # What the worker's heartbeat reports (runtime.names): wall-clock time of the last
        # batch, and messages acked (incl. duplicates) / failed or dead-lettered so far.
        self.last_batch_at = 0.0
        self.processed = 0
        self.failed = 0
        self.paused: str | None = None
        """While the handler is paused by a schema error: that error (``/readyz`` shows it)."""
        self._lock = asyncio.Lock()
        # A read or claim reply later than this (seconds after it was sent) is checked before
        # its handlers run: see runtime.late.
        self._late_after_s = late_after_s(spec.claim_idle_ms)
        # A '>' batch read less than this ago is fresh (streamworker.core.timing states why).
        self._fresh_window_s = fresh_batch_window_ms(spec.claim_idle_ms) / 1000
        self._decode = MessageDecoder(
            stream=spec.stream,
            group=spec.group,
            consumer=consumer,
            model=spec.model,
            body_field=spec.body_field,
        ).decode

    async def process(
        self,
        entries: list[Entry],
        counts: Mapping[bytes, int] | None,
        fresh_at: float | None = None,
        sent_at: float | None = None,
        next_read: NextRead | None = None,
    ) -> None:
        """Process entries this consumer owns, one batch at a time. ``counts`` maps each id to
        its delivery counter; ids missing from it are skipped (no longer this consumer's). None:
        every entry is a first delivery (a ``>`` read's: its counter is 1).
        ``fresh_at``: when the ``>`` read that returned them was sent (monotonic), None for other
        sources. ``sent_at``: when the read or claim that returned them was sent; a batch whose
        handlers would start later than :func:`~streamworker.core.timing.late_reply_ms` after it (a
        late reply, or a long wait for the batch in hand) is checked first
        (:meth:`_recheck_late`).
        ``next_read``: the consume loop's next ``>`` read, for the batch's last call to send
        (:attr:`~streamworker.idempotency.base.Batch.next_read`)."""
        started = time.monotonic()
        ids = [e.id for e in entries]
        self.holdings.start(ids)
        try:
            async with self._lock:
                # After the lock: the lease clock ran from the send through the reply's delay
                # and the wait for the batch in hand.
                delay_s = time.monotonic() - sent_at if sent_at is not None else 0.0
                if delay_s > self._late_after_s:
                    entries, fresh_at = await self._recheck_late(entries, delay_s, fresh_at)
                await self._process(entries, counts, started, fresh_at, next_read)
        finally:
            self.holdings.finish(ids)

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
                    self.holdings.dropped(entry.id)
                    self._log.warning(
                        "message_claimed_away",
                        message_id=entry.id.decode(),
                        acked=status != CLAIMED,
                        reply_delay_s=round(delay_s, 3),
                    )
            if gone:
                self.holdings.finish(gone)
                self.count_deleted(gone)
            entries = kept
            if fresh_at is not None:
                fresh_at = sent
            if time.monotonic() - sent <= self._late_after_s or self._signal.stopping():
                break
        return entries, fresh_at

    async def _process(
        self,
        entries: list[Entry],
        counts: Mapping[bytes, int] | None,
        started: float,
        fresh_at: float | None,
        next_read: NextRead | None,
    ) -> None:
        spec = self.spec
        messages: list[Message[Any]] = []
        deleted: list[bytes] = []
        dead: list[tuple[bytes, int, str, str]] = []  # (id, deliveries, reason, traceback)
        verdicts: dict[str, Outcome] = {}
        # Bound once: this loop runs for every message.
        decode = self._decode
        append = messages.append
        max_deliveries = spec.max_deliveries
        if counts is None:
            # A '>' read: first deliveries (never over-delivered), no counter to look up.
            for entry_id, raw in entries:
                if raw is None:
                    deleted.append(entry_id)
                    continue
                try:
                    append(decode(entry_id, raw, 1))
                except PermanentFailure as exc:
                    # Its handler can never have run: dead-letter it now (as below).
                    dead.append((entry_id, 1, describe(exc), bounded_traceback(exc)))
        else:
            count_of = counts.get
            for entry_id, raw in entries:
                count = count_of(entry_id)
                if count is None:
                    # No longer in this consumer's PEL: claimed by another consumer since the read.
                    continue
                if raw is None:
                    deleted.append(entry_id)
                    continue
                try:
                    msg = decode(entry_id, raw, count)
                except PermanentFailure as exc:
                    # Its handler can never have run (decoding comes first), so nothing of it was
                    # applied: dead-letter it now.
                    dead.append((entry_id, count, describe(exc), bounded_traceback(exc)))
                    continue
                # (max_deliveries >= 1: a first delivery is never over-delivered.)
                if count > 1 and over_delivered(count, max_deliveries):
                    # Decided, but the strategy sees it first: if its effects are recorded as applied
                    # (committed, then a crash before the XACK), it is acked as a duplicate instead.
                    verdicts[msg.id] = over_delivered_verdict(count, max_deliveries)
                append(msg)

        if deleted:
            await self.ack_deleted(deleted)
        # Fresh: read by '>' so recently that no other consumer may claim the entries yet (their
        # idle time is below the fresh window, and the reclaimer keeps in-flight ones fresh).
        fresh = fresh_at is not None and time.monotonic() - fresh_at < self._fresh_window_s
        invoke = self._invoke
        batch = Batch(
            messages,
            invoke.run_handler,
            run_batch_handler=invoke.run_batch_handler,
            verdicts=verdicts,
            run_blocking=self._run_blocking,
            next_read=next_read,
            fresh=fresh,
        )
        try:
            outcomes = await self._run_strategy(batch)
        finally:
            self._invoke.flush_timings()
        self._batch_size.observe(len(entries))
        tally: dict[str, int] = {}
        now = time.monotonic()
        holdings = self.holdings
        # An acked message owes no retry; most batches have none scheduled to clear.
        clear_retries = holdings.has_retries()
        # The common batch, every message acked: counted at once (list.count compares by identity
        # first; an Outcome equal to ACKED is an ACK, not a duplicate, whatever its value).
        acked = outcomes.count(ACKED) if len(outcomes) == len(messages) else -1
        if acked == len(messages):
            if acked:
                tally["acked"] = acked
            if clear_retries:
                for msg in messages:
                    holdings.settled(msg.id.encode())
            messages, outcomes = [], []  # nothing left for the loop below
        limited: list[tuple[bytes, Outcome]] = []
        for msg, outcome in zip(messages, outcomes, strict=True):
            action = outcome.action
            if action is Action.ACK:  # the common case first
                label = "duplicate" if outcome.duplicate else "acked"
                tally[label] = tally.get(label, 0) + 1
                if clear_retries:
                    holdings.settled(msg.id.encode())
                continue
            if action is Action.LEAVE_PENDING and outcome in SKIPPED:
                if outcome is NOT_STARTED:
                    holdings.not_started(msg.id.encode())
                continue
            mid = msg.id.encode()
            if action is Action.DEAD_LETTER:
                # counted once the script has moved it
                dead.append((mid, msg.delivery_count, outcome.error, outcome.traceback))
                holdings.settled(mid)
            else:
                tally[outcome.metric] = tally.get(outcome.metric, 0) + 1
                delay_ms = retry_delay_ms(
                    outcome, msg.delivery_count, spec.retry_backoff_ms, spec.retry_backoff_max_ms
                )
                holdings.schedule_retry(mid, now + delay_ms / 1000)
                if outcome.rate_limited:
                    limited.append((mid, outcome))
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
        if limited:
            await self._rate_limited(limited)
        for entry_id, count, reason, trace in dead:
            holdings.settled(entry_id)
            await self._dead_letter(entry_id, count, reason, trace)
        if self.spec.retention == "acked":
            # Every id of the batch: the script deletes only what no group needs (those left
            # pending for a retry stay), after the acks and dead letters above.
            await self._retain_acked([e[0] for e in entries])

    async def _rate_limited(self, limited: list[tuple[bytes, Outcome]]) -> None:
        """Messages left pending for a rate limit (their retries are scheduled): tell every
        worker of the group about the pause a handler asked for (RateLimited), and hand their
        deliveries back, so that waiting never counts toward ``max_deliveries``.

        The hand-back is ``XCLAIM … RETRYCOUNT <count - 1> JUSTID`` on entries still this
        consumer's (``lua/release_unstarted.lua``'s emulation, with idle 0: they stay leased
        here); the retry's claim counts the delivery again. If Redis does not answer, the
        deliveries stay counted (as for a failure) and the local pause holds anyway."""
        asked = [o.retry_delay_ms or 0 for _, o in limited if not o.preset]
        try:
            if asked:
                await self.rate.pause_group(max(asked))
            await uncount_deliveries(
                self._client,
                self.spec.stream,
                self.spec.group,
                self.consumer,
                [mid for mid, _ in limited],
            )
        except (ConnectionLost, rex.ResponseError) as exc:
            self._log.warning("rate_limit_handback_failed", error=str(exc), entries=len(limited))

    async def _run_strategy(self, batch: Batch) -> list[Outcome]:
        """The strategy's outcomes for ``batch``; while the database is unavailable, or its
        schema does not fit (a missing table or column: the handler is *paused*), the same batch
        again after a capped backoff.

        The batch stays in hand instead of being re-read: a re-read would count a delivery per
        attempt and dead-letter messages because of an outage or a deployment's mistake. Nothing
        of it was acked. On stop the batch is left pending as it is.
        """
        messages = batch.messages
        while True:
            try:
                outcomes = await self._strategy.process(batch)
            except SchemaError as exc:
                batch = batch.stale()
                if self._signal.stopping():
                    return [NOT_STARTED] * len(messages)
                await self._pause(exc, len(messages))
                continue
            except DatabaseUnavailable as exc:
                batch = batch.stale()  # the retry comes later: check again
                if self._signal.stopping():
                    return [NOT_STARTED] * len(messages)
                delay = self._backoff.next_delay()
                self._metrics.idempotency_errors.labels(
                    strategy=self._strategy.name, **self._labels
                ).inc()
                self._log.warning(
                    "database_unavailable", error=str(exc), retry_in_s=round(delay, 3)
                )
                await self._signal.sleep(delay)
                continue
            if self.paused is not None:
                self.paused = None
                self._log.warning("handler_resumed", batch=len(messages))
            return outcomes

    async def _pause(self, exc: SchemaError, batch: int) -> None:
        """One step of a schema pause: readiness red with the error, one log line, a backoff."""
        delay = self._backoff.next_delay()
        self.paused = str(exc)
        self._log.error(
            "handler_paused",
            error=str(exc),
            retry_in_s=round(delay, 3),
            batch=batch,
            hint=(
                "a table or column the handler needs is missing: run the migrations; the "
                "batch is kept, nothing is dead-lettered, and the handler resumes by itself"
            ),
        )
        if self._turned is not None:
            self._turned()
        await self._signal.sleep(delay)
        if self._turned is not None:
            self._turned()

    async def _retain_acked(self, ids: list[bytes]) -> None:
        """``retention="acked"``: delete the batch's entries that no consumer group and no Spark
        cursor needs any more (``lua/retain_acked.lua``). A failure is logged and left: the
        entries are acked, and stay in the stream until trimmed."""
        if not ids:
            return
        try:
            deleted = await _RETAIN_ACKED(
                self._client,
                [self.spec.stream, spark_cursors_key(self.spec.stream)],
                ids,
            )
        except (ConnectionLost, rex.ResponseError) as exc:
            self._log.warning("retention_failed", entries=len(ids), error=str(exc))
            return
        self._metrics.retained_deleted.labels(**self._labels).inc(int(deleted))

    async def ack_deleted(self, ids: list[bytes]) -> None:
        """Ack entries deleted or trimmed from the stream while pending: nothing is left to
        process, and leaving them would make every backlog read return them again."""
        async with connection_errors():
            await self._client.xack(self.spec.stream, self.spec.group, *ids)
        self.count_deleted(ids)

    def count_claimed(self, n: int, source: str) -> None:
        """Record entries claimed by the reclaimer: ``source`` is ``"self"`` or ``"others"``."""
        self._metrics.claimed.labels(source=source, **self._labels).inc(n)

    def count_deleted(self, ids: list[bytes]) -> None:
        """Record entries that were deleted from the stream while pending (already out of the
        PEL): they are owed no retry."""
        self._metrics.messages.labels(outcome="deleted", **self._labels).inc(len(ids))
        for entry_id in ids:
            self.holdings.settled(entry_id)
            self._log.warning("deleted_entry_acked", message_id=entry_id.decode())

    async def _dead_letter(self, entry_id: bytes, count: int, reason: str, trace: str = "") -> None:
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
                    trace,
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
