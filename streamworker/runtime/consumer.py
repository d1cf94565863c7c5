"""One subscription's consume loop: backlog first, then new entries.

On start and after every reconnect the loop reads this consumer's own pending entries
(``XREADGROUP … 0``, paging by the last id returned) until none are left, then switches to ``>`` with
BLOCK and COUNT. Each batch goes to the :class:`~streamworker.runtime.batch_processor.BatchProcessor`
(the strategy runs the handlers and XACKs the successes in one call; failures stay pending;
permanent failures and messages over ``max_deliveries`` are dead-lettered by one Lua script).

Why backlog first: the consumer name is stable across restarts, so entries this consumer had read
before a crash are still in its PEL, delivered but unacked. ``>`` would never return them again.

A :class:`Consumer` is the composition of one subscription's parts: the stop signal and loop
state (:mod:`~streamworker.runtime.loop`), the entries it holds
(:mod:`~streamworker.runtime.holdings`), the batch processor, and one source of batches, this
loop or, for ``ordered=True``, :class:`~streamworker.runtime.ordering.OrderedLoop`. The reclaimer
(:mod:`~streamworker.runtime.reclaimer`) is a second source beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.app import HandlerSpec
from streamworker.core.deps import Resolver
from streamworker.errors import ConnectionLost, StreamworkerError
from streamworker.idempotency.base import Strategy
from streamworker.io.redisio import (
    Entry,
    GroupRead,
    NextRead,
    connection_errors,
    drop_idle_connections,
    parse_claim_reply,
    parse_read_reply,
    read_group,
    read_group_args,
)
from streamworker.observability.metrics import Metrics
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.batch_processor import BatchProcessor
from streamworker.runtime.holdings import Holdings
from streamworker.runtime.inflight import InFlight, InFlightGate
from streamworker.runtime.loop import LoopState, StopSignal
from streamworker.runtime.ordering import OrderedLoop
from streamworker.runtime.ratelimit import RateGate
from streamworker.runtime.reads import delivery_counts
from streamworker.runtime.readsize import ReadSizer
from streamworker.runtime.release import release_unstarted
from streamworker.runtime.threads import HandlerThreads

_NOTHING = GroupRead([], {}, 0)


class Consumer:
    """The consume loop of one :class:`~streamworker.app.HandlerSpec`, named ``name`` in its group.

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
        name: str,
        strategy: Strategy,
        resolver: Resolver,
        metrics: Metrics,
        threads: HandlerThreads,
        backoff: Backoff,
        read_client: aioredis.Redis | None = None,
        worker_budget: InFlight | None = None,
        claim_in_reads: bool = False,
    ) -> None:
        self.spec = spec
        # The server has XREADGROUP … CLAIM (io.capabilities): every '>' read also claims the
        # group's entries idle past claim_idle_ms (dead or stuck consumers'), in the same call.
        # Not for ordered=True, whose loop takes others' entries only with the partition lock.
        self.claim_in_reads = claim_in_reads and not spec.ordered
        self._claim_ms = spec.claim_idle_ms if self.claim_in_reads else None
        # max_in_flight (the worker's and the handler's): reads ask for the room left and wait
        # when there is none (runtime.inflight).
        self.budget = InFlight(spec.max_in_flight, spec.max_in_flight_bytes)
        gate = InFlightGate(self.budget, *([worker_budget] if worker_budget else []))
        self.name = name
        self._client = client
        # Blocking reads use a client of their own whose socket timeout exceeds block_ms; every
        # other command gets the shorter timeout of ``client``.
        self.read_client = read_client or client
        self._backoff = backoff
        self.signal = StopSignal()
        self.state = LoopState()
        self.holdings = Holdings()
        # rate_limit= and RateLimited's pause: reads are sized by the permits granted
        # (runtime.ratelimit).
        self.rate = RateGate(spec, client, metrics)
        # The COUNT of each read: the room the budgets leave and the permits granted.
        self.sizes = ReadSizer(spec, gate, self.rate, self.signal, self.state.turned)
        self._stream = spec.stream.encode()
        labels = {"stream": spec.stream, "group": spec.group, "handler": spec.name}
        metrics.prime(**labels)
        self._outage = metrics.outage(**labels)
        self._log = structlog.get_logger("streamworker.consumer").bind(
            stream=spec.stream, group=spec.group, consumer=name, handler=spec.name
        )
        self.batches = BatchProcessor(
            spec,
            client=client,
            consumer=name,
            strategy=strategy,
            resolver=resolver,
            metrics=metrics,
            threads=threads,
            backoff=backoff,
            holdings=self.holdings,
            signal=self.signal,
            turned=self.state.turned,
            rate=self.rate,
        )
        self._read_sent = time.monotonic()
        """When the last read by :meth:`_read` was sent (monotonic)."""
        self._next_read = NextRead(
            client,
            spec.group,
            name,
            spec.stream,
            count=spec.batch_size,
            # Under an in-flight bound the next read is sized when the batch has settled, so it
            # is not sent ahead of the batch's ack; under a rate limit, only with its permits.
            wanted=lambda: (
                not self.signal.stopping()
                and not self.sizes.bounded
                and self.sizes.ahead_ready(self._next_read)
            ),
            claim_ms=self._claim_ms,
        )
        self._group_ready = False
        self.group_lost = False
        """True once the handler stopped because its group disappeared (see _group_lost)."""
        # ordered=True: the lease-holding, one-message-at-a-time loop replaces _consume.
        self.ordered = (
            OrderedLoop(
                spec,
                name=name,
                client=client,
                read_client=self.read_client,
                batches=self.batches,
                holdings=self.holdings,
                signal=self.signal,
                state=self.state,
            )
            if spec.ordered
            else None
        )
        if self.rate.limited:
            self._next_read.also(*self.rate.take_command(spec.batch_size))

    @property
    def backlog_drained(self) -> asyncio.Event:
        """Set once this consumer's own pending entries have been replayed."""
        return self.state.backlog_drained

    @property
    def last_turn(self) -> float:
        """When the loop last went round (monotonic)."""
        return self.state.last_turn

    def stop(self) -> None:
        """Stop reading; the batch in hand is finished by :meth:`run`."""
        self.signal.stop()

    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self.signal.stopping()

    async def release_unstarted(self, path: str) -> int:
        """After :meth:`run` returned: hand back to the group every entry this consumer read
        but did not start (a batch's rest after the stop, a read sent behind the last ack), by
        ``path`` (:func:`~streamworker.runtime.release.release_path`). Returns how many were
        released; raises ConnectionLost when Redis does not answer (the entries then wait for
        ``claim_idle_ms``, as without a release)."""
        ids = self.holdings.take_unstarted()
        if self.ordered is not None:
            # ordered=True: the partition's next lock holder takes its pending entries over in
            # stream order (runtime.ordering); a released entry would leave that order.
            return 0
        if self._next_read.holding():
            # Sent behind the last batch's ack before the stop came: none of it started.
            with contextlib.suppress(Exception):
                ids += [e.id for e in self._parse_new(self._next_read.take()).entries]
        # Never one in flight: a batch abandoned at the deadline may still be running.
        ids = [i for i in ids if i not in self.holdings.in_flight]
        if not ids:
            return 0
        released = await release_unstarted(
            self._client,
            self.spec.stream,
            self.spec.group,
            self.name,
            ids,
            path=path,
            claim_idle_ms=self.spec.claim_idle_ms,
        )
        self._log.info("unstarted_released", path=path, entries=len(ids), released=released)
        return released

    async def run(self) -> None:
        """The loop. Returns after :meth:`stop`; raises on errors that retrying cannot fix."""
        self._log.info("consumer_started", idempotency=self.spec.idempotency)
        while not self.stopping():
            # Retrying a lost connection is the loop at work: readiness reports the outage.
            self.state.turned()
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
                await drop_idle_connections(self._client)
                if self.read_client is not self._client:
                    await drop_idle_connections(self.read_client)
                self._log.warning("connection_lost", error=str(exc), retry_in_s=round(delay, 3))
                await self.signal.sleep(delay)
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
        self.signal.stop()

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
        state = self.state
        process = self.batches.process
        ahead = self._next_read
        # Entries read behind the last ack of a previous run (a stop or a lost connection came
        # meanwhile) are in this consumer's PEL: the backlog read below returns them.
        ahead.discard()
        # read_ahead=True: the read sent while the batch in hand is handled (_reads_ahead).
        early: asyncio.Task[tuple[GroupRead, float]] | None = None
        try:
            while not self.stopping():
                state.turned()
                if cursor is not None:
                    entries = (await self._read(cursor, block_ms=None)).entries
                    sent = self._read_sent  # the lease clock starts when the read is sent
                    if not entries:
                        cursor = None
                        state.backlog_done()
                        self._log.debug("backlog_drained")
                        continue
                    cursor = entries[-1].id
                else:
                    # What is there now first: while the stream has a backlog, a plain read
                    # spares the blocking read's race against stop() (two tasks and a wait per
                    # batch). The previous batch's last call may have sent it already
                    # (Batch.next_read).
                    if early is not None:
                        task, early = early, None
                        got, sent = await task
                    elif ahead.holding():
                        sent = ahead.sent_at
                        async with connection_errors():
                            got = self._parse_new(ahead.take())
                        await self.sizes.ahead_arrived(ahead, len(got.entries))
                    else:
                        got = await self._read(b">", block_ms=None)
                        sent = self._read_sent
                    if not got.entries:
                        got = await self._read(b">", block_ms=self.spec.block_ms)
                        sent = self._read_sent
                        state.turned()
                        if not got.entries:
                            continue
                    entries = got.entries
                    # A '>' read is a first delivery (a rewound entry's counter restarts at 1
                    # too); with CLAIM the entries it claimed come first, with their counters.
                    self._backoff.reset()
                    if got.claimed:
                        self.batches.count_claimed(got.claimed, "others")
                        self._log.info("entries_reclaimed", count=got.claimed, by="claim")
                    # The next read rides down with the batch, for its last call to send. Under
                    # an in-flight bound it is not offered: its COUNT is fixed (batch_size) and
                    # it would go out before this batch's entries are released, past the
                    # reservation; the loop reads again, sized by the room left, once the batch
                    # has settled. A read sent early (read_ahead=True) is out already.
                    if self._reads_ahead(entries):
                        early = asyncio.ensure_future(self._read_early())
                    try:
                        await process(
                            entries,
                            got.counts,  # None for a plain '>' read: every counter is 1
                            # Claimed entries are handled as the reclaimer's are (not fresh).
                            fresh_at=None if got.claimed else sent,
                            sent_at=sent,
                            next_read=None if self.sizes.bounded or early is not None else ahead,
                        )
                    finally:
                        self.sizes.release(entries)
                    continue
                try:
                    counts = await delivery_counts(
                        self._client, self.spec.stream, self.spec.group, self.name, entries
                    )
                    self._backoff.reset()
                    await process(entries, counts, sent_at=sent)
                finally:
                    self.sizes.release(entries)
        finally:
            try:
                if early is not None:
                    await self._settle_early(early)
            finally:
                # Permits held for a read that will not be sent go back.
                await self.sizes.drop()

    def _reads_ahead(self, entries: list[Entry]) -> bool:
        """``read_ahead=True`` and a full batch in hand: more entries are likely waiting, so the
        next read goes out now and Redis prepares the next batch while this one is handled.

        Why it is opt-in: the read-behind-the-ack (NextRead) keeps this consumer at one batch
        pending at a time; a read sent early adds a second. Nothing is lost either way (a crash
        leaves both pending for the backlog read of the next start), but twice as much is
        redelivered and the group's pending count reads twice as high. The early batch's lease
        starts when its read is sent, as every read's does: if the batch in hand outlasts the
        safe part of ``claim_idle_ms``, the batch processor checks the early entries (still
        this consumer's?) before their handlers run."""
        return self.spec.read_ahead and len(entries) >= self.spec.batch_size and not self.stopping()

    async def _read_early(self) -> tuple[GroupRead, float]:
        """The ``>`` read sent while the batch in hand is handled, and when it was sent."""
        got = await self._read(b">", block_ms=None)
        return got, self._read_sent

    async def _settle_early(self, task: asyncio.Task[tuple[GroupRead, float]]) -> None:
        """A read sent early that the loop leaves (it stops, or the batch before it failed).

        Its reply is waited for: a read without BLOCK answers at once, or within the socket
        timeout. On a stop its entries join those read but not started, which the worker hands
        back to the group (:meth:`release_unstarted`); otherwise (a lost connection) the next
        round's backlog read returns them. If the read failed, whatever it took stays in this
        consumer's PEL for that backlog read, or for another consumer after ``claim_idle_ms``."""
        try:
            if not task.done():
                await asyncio.wait({task})
        finally:
            if not task.done():
                task.cancel()  # this loop was cancelled meanwhile (the shutdown deadline)
        if task.cancelled() or task.exception() is not None:
            return
        got, _ = task.result()
        self.sizes.release(got.entries)
        if self.stopping():
            for entry in got.entries:
                self.holdings.not_started(entry.id)

    def _parse_new(self, reply: object) -> GroupRead:
        """A '>' read's reply: its entries and their delivery counters."""
        if self._claim_ms is not None:
            return parse_claim_reply(reply, self._stream)
        # First deliveries only: no counter map for the batch processor to look up.
        return GroupRead(parse_read_reply(reply, self._stream), None, 0)

    async def _read(self, start: bytes, block_ms: int | None) -> GroupRead:
        """One read of the COUNT :attr:`sizes` grants; its entries stay counted as in flight
        until ``sizes.release`` (the caller's, after the batch)."""
        sizes = self.sizes
        count = await sizes.take(blocking=block_ms is not None)
        if count == 0:
            return _NOTHING
        got = _NOTHING
        # After any wait for room or permits: the lease clock starts when the read is sent.
        self._read_sent = time.monotonic()
        try:
            if self.rate.limited and start == b">" and block_ms is None:
                got = await self._read_asking(count)
            else:
                got = await self._read_count(start, block_ms, count)
        finally:
            sizes.settle_room(count, got.entries)
        await sizes.give_back_unused(count, len(got.entries))
        return got

    async def _read_asking(self, count: int) -> GroupRead:
        """A non-blocking ``>`` read of ``count`` under a rate limit that asks, in the same
        write, for the permits of the next read (kept by :attr:`sizes`). A Redis Cluster
        client (the limit's key may be in another slot) and a read with CLAIM send them one
        after the other."""
        client = self._client
        if type(client) is not aioredis.Redis or self._claim_ms is not None:
            got = await self._read_count(b">", None, count)
            if got.entries:
                self.sizes.granted_next((await self.rate.take(self.spec.batch_size))[0])
            return got
        pipe = client.pipeline(transaction=False)
        pipe.execute_command(
            *read_group_args(self.spec.group, self.name, self.spec.stream, b">", count=count)
        )
        pipe.execute_command(*self.rate.take_command(self.spec.batch_size))
        async with connection_errors():
            read, permits = await pipe.execute(raise_on_error=False)
        self.sizes.granted_next(self.rate.granted(permits))
        if isinstance(read, BaseException):
            raise read
        return self._parse_new(read)

    async def _read_count(self, start: bytes, block_ms: int | None, count: int) -> GroupRead:
        new = start == b">"
        parse = self._parse_new if new else self._parse_history
        call = read_group(
            self._client if block_ms is None else self.read_client,
            self.spec.group,
            self.name,
            self.spec.stream,
            start,
            count=count,
            block_ms=block_ms,
            claim_ms=self._claim_ms if new else None,
        )
        async with connection_errors():
            if block_ms is None:
                return parse(await call)
            # A blocking read must give way to stop(): race it against the stop event. Entries a
            # cancelled read had already taken stay in this consumer's PEL: the backlog read of
            # the next start returns them, so nothing is lost.
            read = asyncio.ensure_future(call)
            stopped = asyncio.ensure_future(self.signal.wait())
            try:
                done, _ = await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
            if read in done:
                return parse(read.result())
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await read
            return _NOTHING

    def _parse_history(self, reply: object) -> GroupRead:
        return GroupRead(parse_read_reply(reply, self._stream), {}, 0)
