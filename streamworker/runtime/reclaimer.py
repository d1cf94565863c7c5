"""The reclaimer: one per subscription, beside its consume loop.

Four jobs, leases on a timer of their own, the others on a shared one:

* **Leases.** Entries this worker holds (being processed, or failed and waiting for a retry) get
  their idle time reset every ``lease_interval_ms`` (a third of ``claim_idle_ms``) by a script
  that checks ownership first. So another worker never mistakes a long-running handler's entry
  for an abandoned one, and ``claim_idle_ms`` can be seconds, not the longest handler's run time.
  Renewal is a task of its own that waits on nothing but its timer (the other jobs await
  batches: a retry or a reclaim waits for the batch in hand, and a renewal queued behind them
  would let a long handler's lease lapse), and it goes on through a graceful stop until the
  batch in hand has finished.
* **Retries.** A failed entry stays in this consumer's PEL; when its backoff has passed, a script
  claims it to this consumer again (counting a delivery) and it is processed like any batch.
* **Reclaim.** XAUTOCLAIM, with a cursor loop until ``0-0``, takes entries idle longer than
  ``claim_idle_ms`` from any consumer of the group (dead or stuck workers); entries deleted while
  pending come back in XAUTOCLAIM's third list and are counted. Servers without XAUTOCLAIM
  (before Redis 6.2) get the XPENDING + XCLAIM equivalent. On a server with ``XREADGROUP …
  CLAIM`` (Redis 8.4+, :mod:`streamworker.io.capabilities`) the consume loop's reads claim idle
  entries themselves, in the same call, and this pass becomes PEL hygiene, run every
  :func:`~streamworker.core.timing.pel_hygiene_interval_ms`: CLAIM leaves entries deleted from
  the stream pending, XAUTOCLAIM clears them.
* **Dead consumers.** Consumers idle longer than ``consumer_gc_idle_ms`` with nothing pending are
  deleted, atomically with that check (XGROUP DELCONSUMER would drop a PEL unacknowledged).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.core.timing import pel_hygiene_interval_ms
from streamworker.errors import ConnectionLost
from streamworker.io.redisio import Entry, LuaScript, as_bytes, connection_errors
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.reads import delivery_counts, entry_from_reply
from streamworker.runtime.tasks import end_task

_RENEW = LuaScript("renew_leases")
_CLAIM_OWN = LuaScript("claim_own")
_DELETE_CONSUMER = LuaScript("delete_consumer")

# How often dead consumers are looked for, at most.
_GC_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class ClaimPage:
    """One XAUTOCLAIM round: the claimed entries with their delivery counters, and the ids that
    were deleted from the stream while pending (Redis has already removed them from the PEL)."""

    entries: list[Entry]
    counts: dict[bytes, int]
    deleted: list[bytes]
    sent_at: float = 0.0
    """When the claiming command was sent (monotonic): the entries' lease started then."""


async def autoclaim_pages(
    client: aioredis.Redis,
    stream: str,
    group: str,
    consumer: str,
    min_idle_ms: int,
    *,
    count: int = 100,
    use_xautoclaim: bool = True,
) -> AsyncIterator[ClaimPage]:
    """Claim for ``consumer`` every entry of the group idle at least ``min_idle_ms``, page by page.

    Follows XAUTOCLAIM's cursor until it returns ``0-0`` (each call scans at most ``count * 10``
    PEL entries, so a page may be empty while the scan goes on). With ``use_xautoclaim=False`` it
    walks the PEL with XPENDING and claims with XCLAIM, which re-checks the idle time server-side.
    """
    if use_xautoclaim:
        cursor: bytes = b"0-0"
        while True:
            sent = time.monotonic()
            async with connection_errors():
                reply = await client.xautoclaim(
                    stream, group, consumer, min_idle_ms, start_id=cursor, count=count
                )
            cursor = as_bytes(reply[0])
            entries = [entry_from_reply(e) for e in reply[1] if e is not None and e[0] is not None]
            deleted = [as_bytes(i) for i in (reply[2] if len(reply) > 2 else [])]
            counts = await _counts(client, stream, group, consumer, entries)
            yield ClaimPage(entries, counts, deleted, sent)
            if cursor == b"0-0":
                return
    else:
        start: bytes = b"-"
        while True:
            async with connection_errors():
                rows = await client.xpending_range(stream, group, min=start, max="+", count=count)
            if not rows:
                return
            idle_ids = [
                as_bytes(r["message_id"])
                for r in rows
                if int(r["time_since_delivered"]) >= min_idle_ms
            ]
            entries = []
            sent = time.monotonic()
            if idle_ids:
                async with connection_errors():
                    claimed = await client.xclaim(
                        stream, group, consumer, min_idle_ms, list[Any](idle_ids)
                    )
                entries = [
                    entry_from_reply(e) for e in claimed if e is not None and e[0] is not None
                ]
            got = {e.id for e in entries}
            # XCLAIM silently drops entries deleted from the stream from the PEL; an id that was
            # idle enough, is not returned and is no longer pending was such an entry.
            missing = [i for i in idle_ids if i not in got]
            deleted = await _not_pending(client, stream, group, missing)
            counts = await _counts(client, stream, group, consumer, entries)
            yield ClaimPage(entries, counts, deleted, sent)
            start = b"(" + as_bytes(rows[-1]["message_id"])
            if len(rows) < count:
                return


async def _counts(
    client: aioredis.Redis, stream: str, group: str, consumer: str, entries: list[Entry]
) -> dict[bytes, int]:
    if not entries:
        return {}
    ids = sorted(entries, key=lambda e: tuple(int(p) for p in e.id.split(b"-")))
    # Room for this consumer's own pending entries between the claimed ones.
    counts = await delivery_counts(client, stream, group, consumer, ids, count=len(ids) * 2 + 10)
    return {e.id: counts[e.id] for e in entries if e.id in counts}


async def _not_pending(
    client: aioredis.Redis, stream: str, group: str, ids: list[bytes]
) -> list[bytes]:
    gone = []
    for entry_id in ids:
        async with connection_errors():
            rows = await client.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
        if not rows:
            gone.append(entry_id)
    return gone


class Reclaimer:
    """Leases, retries, reclaim and consumer clean-up for one Consumer. Use from one event loop."""

    def __init__(
        self,
        consumer: Consumer,
        client: aioredis.Redis,
        backoff: Backoff,
        *,
        use_xautoclaim: bool | None = None,
        claim_in_reads: bool = False,
    ) -> None:
        self.spec = consumer.spec
        # With XREADGROUP … CLAIM in the consume loop's reads, the XAUTOCLAIM pass is PEL
        # hygiene (deleted entries, which CLAIM leaves pending) and runs less often.
        self.claim_in_reads = claim_in_reads
        self._claim_every_s = (
            pel_hygiene_interval_ms(consumer.spec.claim_idle_ms)
            if claim_in_reads
            else consumer.spec.claim_interval_ms
        ) / 1000
        self.name = consumer.name
        self._holdings = consumer.holdings
        self._batches = consumer.batches
        self._rate = consumer.rate
        self._signal = consumer.signal
        self._backlog_drained = consumer.state.backlog_drained
        self._client = client
        self._backoff = backoff
        self._use_xautoclaim = use_xautoclaim
        self._next_claim = 0.0
        self._next_gc = 0.0
        self._log = structlog.get_logger("streamworker.reclaimer").bind(
            stream=self.spec.stream, group=self.spec.group, consumer=consumer.name
        )
        self.claimed_total = 0

    async def run(self) -> None:
        """Until the consumer stops. Connection losses back off and retry; the consume loop
        reports them too, so they are logged at debug here."""
        # Leases have a task of their own, started at once (backlog batches hold entries too):
        # everything else here awaits batches, the batch lock and retries, and a lease renewed
        # only between those would lapse under a long handler (see lease_loop).
        leases = asyncio.ensure_future(self.lease_loop())
        try:
            await self._reclaim_loop()
            # Stopping: the batch in hand may run on until the shutdown deadline, and its leases
            # must hold until it has finished (lease_loop returns then).
            await leases
        finally:
            await end_task(leases)

    async def lease_loop(self) -> None:
        """Renew the leases of held entries every ``lease_interval_ms``, until the consumer has
        stopped and holds nothing in flight (a graceful stop lets the batch in hand finish).

        It awaits nothing but the renewal script and its timer: no lock, no batch, no database,
        no retry. A failed renewal (Redis away) is retried at the next interval; the entries stay
        leased as long as a renewal gets through within ``claim_idle_ms``.
        """
        signal, holdings = self._signal, self._holdings
        interval_s = self.spec.lease_interval_ms / 1000
        while not (signal.stopping() and not holdings.in_flight):
            try:
                await self.renew_leases()
            except (ConnectionLost, rex.ResponseError) as exc:
                self._log.debug("lease_renewal_failed", error=str(exc))
            await self._lease_pause(interval_s)

    async def _lease_pause(self, seconds: float) -> None:
        # Until the next renewal is due; sooner once stopped with nothing left in flight.
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if not self._signal.stopping():
                await self._signal.sleep(left)  # returns early on stop
            elif not self._holdings.in_flight:
                return
            else:
                await asyncio.sleep(min(left, 0.05))

    async def _reclaim_loop(self) -> None:
        signal = self._signal
        # This consumer's own backlog is replayed by the consume loop first; claiming it here at
        # the same time would deliver those entries twice.
        backlog = asyncio.ensure_future(self._backlog_drained.wait())
        stop = asyncio.ensure_future(signal.wait())
        await asyncio.wait({backlog, stop}, return_when=asyncio.FIRST_COMPLETED)
        backlog.cancel()
        stop.cancel()
        if self.claim_in_reads:
            # The consume loop's CLAIM reads take idle entries; the first hygiene pass leaves
            # them two intervals to do so (entries idle at start-up are theirs).
            self._next_claim = time.monotonic() + 2 * self._claim_every_s
        while not signal.stopping():
            try:
                # Cleared before the round: a retry scheduled from now on wakes the wait below.
                self._holdings.retry_scheduled.clear()
                await self.tick()
                self._backoff.reset()
                await self._wait_for_work(self._until_next())
            except ConnectionLost as exc:
                delay = self._backoff.next_delay()
                self._log.debug(
                    "reclaimer_connection_lost", error=str(exc), retry_in_s=round(delay, 3)
                )
                await signal.sleep(delay)
            except rex.ResponseError as exc:
                # The stream or its group was deleted (XINFO CONSUMERS says "no such key"): the
                # consume loop decides (it stops the handler, or re-creates the group if told to).
                if str(exc).startswith("NOGROUP") or "no such key" in str(exc):
                    await signal.sleep(self.spec.claim_interval_ms / 1000)
                    continue
                raise

    def _until_next(self) -> float:
        now = time.monotonic()
        due = [self._next_claim]
        retry_at = self._holdings.next_retry_at()
        if retry_at is not None:
            due.append(retry_at)
        return max(0.005, min(due) - now)

    async def _wait_for_work(self, seconds: float) -> None:
        """Until the next job is due, the consumer stops, or it schedules a retry (which may be
        due before anything this round knew of: ``Retry(delay_ms=0)``)."""
        waits = [
            asyncio.ensure_future(self._signal.wait()),
            asyncio.ensure_future(self._holdings.retry_scheduled.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    async def tick(self) -> None:
        """One round of whatever is due now, leases aside (:meth:`lease_loop`); exposed for
        tests."""
        now = time.monotonic()
        if self.spec.ordered:
            # The ordered loop retries in order itself, and takes others' entries only with the
            # lease (runtime.ordering): claiming here would hand messages past a blocked one.
            if now >= self._next_gc:
                self._next_gc = now + min(_GC_INTERVAL_S, self.spec.consumer_gc_idle_ms / 1000)
                await self.delete_dead_consumers()
            return
        await self.retry_due()
        if now >= self._next_claim:
            self._next_claim = now + self._claim_every_s
            await self.reclaim()
        if now >= self._next_gc:
            self._next_gc = now + min(_GC_INTERVAL_S, self.spec.consumer_gc_idle_ms / 1000)
            await self.delete_dead_consumers()

    async def renew_leases(self) -> None:
        """Reset the idle time of every entry this consumer holds."""
        held = self._holdings.held_ids()
        if not held:
            return
        lost = await _RENEW(self._client, [self.spec.stream], [self.spec.group, self.name, *held])
        for entry_id in lost or ():
            # Acked meanwhile by this worker (the common case), claimed away, or deleted: either
            # way this consumer no longer owes it a retry.
            self._holdings.settled(as_bytes(entry_id))

    async def retry_due(self) -> None:
        """Deliver again the failed entries whose backoff has passed."""
        if self._signal.stopping():
            return
        due = self._holdings.take_due()
        if not due:
            return
        # A retry is a handler start: it takes permits of the rate limit (and waits out a
        # pause) before its claim counts a delivery; the rest stay scheduled.
        granted, wait_s = await self._rate.take(len(due))
        if granted < len(due):
            later = time.monotonic() + max(wait_s, 0.005)
            for entry_id in due[granted:]:
                self._holdings.schedule_retry(entry_id, later)
            due = due[:granted]
            if not due:
                return
        sent = time.monotonic()
        claimed, deleted = await _CLAIM_OWN(
            self._client, [self.spec.stream], [self.spec.group, self.name, *due]
        )
        entries = [entry_from_reply(row) for row in claimed]
        counts = {as_bytes(row[0]): int(row[2]) for row in claimed}
        if deleted:
            self._batches.count_deleted([as_bytes(i) for i in deleted])
        if entries:
            self._batches.count_claimed(len(entries), "self")
            self._log.debug("retries_claimed", count=len(entries))
            await self._batches.process(entries, counts, sent_at=sent)

    async def reclaim(self) -> None:
        """Claim and process entries idle past ``claim_idle_ms`` from any consumer of the group."""
        if self._use_xautoclaim is None:
            self._use_xautoclaim = await self._has_xautoclaim()
        count = self.spec.batch_size
        if self._rate.limited:
            # Claims start handlers too: claim only what the limit lets start now (one page;
            # the rest stays idle for the next pass).
            count, _ = await self._rate.take(count)
            if not count:
                return
        elif self._rate.pause.left_s() > 0:
            return
        pages = autoclaim_pages(
            self._client,
            self.spec.stream,
            self.spec.group,
            self.name,
            self.spec.claim_idle_ms,
            count=count,
            use_xautoclaim=self._use_xautoclaim,
        )
        async for page in pages:
            if page.deleted:
                self._batches.count_deleted(page.deleted)
            if not page.entries:
                continue
            if self._rate.limited:
                # The page is the one this pass starts: permits it did not use go back.
                await self._rate.give_back(count - len(page.entries))
            self.claimed_total += len(page.entries)
            # Entries of this consumer stay leased and never idle, so these are normally others'.
            self._batches.count_claimed(len(page.entries), "others")
            self._log.info("entries_reclaimed", count=len(page.entries))
            await self._batches.process(page.entries, page.counts, sent_at=page.sent_at)
            if self._signal.stopping() or self._rate.limited:
                return
        if self._rate.limited:
            await self._rate.give_back(count)  # nothing was idle: every permit goes back

    async def _has_xautoclaim(self) -> bool:
        # Ask with a group that does not exist: NOGROUP means the command is there. (A real call
        # would purge deleted entries from the PEL as a side effect, even with an idle time no
        # entry can have.)
        try:
            async with connection_errors():
                await self._client.execute_command(  # type: ignore[no-untyped-call]
                    "XAUTOCLAIM", self.spec.stream, "\x00streamworker-probe", "probe", 0, "0-0"
                )
        except rex.ResponseError as exc:
            text = str(exc)
            if text.startswith("NOGROUP"):
                return True
            if "unknown command" in text.lower():
                self._log.info("xautoclaim_unavailable_using_xpending_xclaim")
                return False
            raise
        return True

    async def delete_dead_consumers(self) -> None:
        """Delete other consumers of the group idle past ``consumer_gc_idle_ms`` holding nothing."""
        async with connection_errors():
            rows = await self._client.xinfo_consumers(self.spec.stream, self.spec.group)
        for row in rows:
            info = {as_bytes(k): v for k, v in dict(row).items()}
            name_b = as_bytes(info[b"name"])
            pending = int(info.get(b"pending", 0))
            idle = int(info.get(b"idle", 0))
            if name_b == self.name.encode() or pending or idle < self.spec.consumer_gc_idle_ms:
                continue
            deleted = await _DELETE_CONSUMER(
                self._client,
                [self.spec.stream],
                [self.spec.group, name_b, self.spec.consumer_gc_idle_ms],
            )
            if deleted == 1:
                self._log.info(
                    "dead_consumer_deleted",
                    dead_consumer=name_b.decode(errors="replace"),
                    idle_ms=idle,
                )
