"""Per-key ordering (``ordered=True``): one consumer per stream at a time, messages in id order.

The model
---------

Each stream of an ordered subscription (each partition of a partitioned stream) has a
*partition lock* in Redis, :func:`~streamworker.io.keys.lease_key`, a string holding the name of the
consumer that may read it, with a time to live of ``claim_idle_ms``. It is not an entry's lease
(which the reclaimer renews); :mod:`streamworker.core.timing` owns its periods. The holder renews it
every third of its TTL; the other workers of the group try to take it at the same pace, and one
of them gets it once the holder has stopped renewing (a crash, a stall, a network cut) for the
TTL.

* **Only the holder reads.** Reads are ``read_owned.lua``: the lock check and the XREADGROUP in
  one script, so an entry enters a consumer's PEL only while that consumer holds the lock.
* **Takeover replays first.** ``acquire_lease.lua`` claims every entry pending for other
  consumers to the new holder in the script that gives it the lock (XAUTOCLAIM … JUSTID); the
  new holder then replays its own PEL (``XREADGROUP … 0``) in id order before reading new
  entries. Those are exactly the entries the previous holder read and had not finished.
* **One message at a time, in id order.** The holder hands the strategy one message per round
  (a batch is still read in one XREADGROUP). A message that fails stays first: the loop waits for
  its retry backoff, delivers it again (counting a delivery) and the rest of the stream waits.
  Once it succeeds, or is dead-lettered after ``max_deliveries``, the stream moves on. So a
  poison message blocks its partition for up to ``max_deliveries`` backoffs.
* **A holder that lost its lock stops.** Before each message the holder checks that its lock
  is still valid by its own clock (granted at the time the acquiring request was sent, plus 90%
  of the TTL); otherwise it stops handling and tries to acquire the lock again. A stalled
  holder that wakes up after the TTL therefore handles nothing more, and whatever it had read
  was claimed by the next holder. With ``idempotency="lua"`` or ``"sql"`` a message's effects
  still apply once even in the worst case (a handler already running when the stall began),
  because the apply/commit checks that the caller owns the entry.

Ordering holds per stream between messages the group handles; dead-lettered messages are out of
the sequence (they are in the dead-letter stream). A worker with no lock idles for that stream.

The Redis key (``…:lease:…``), its scripts (``acquire_lease.lua``, ``release_lease.lua``) and the
log events (``lease_taken``, ``lease_lost``) keep their first name: a key renamed in an upgrade
would let an old and a new worker hold the same partition, and dashboards match the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from enum import IntEnum

import redis.asyncio as aioredis
import structlog

from streamworker.app import HandlerSpec
from streamworker.core.timing import partition_lock_renew_interval_ms, partition_lock_trusted_ms
from streamworker.io.keys import lease_key
from streamworker.io.redisio import Entry, LuaScript, as_bytes, connection_errors, flat_fields
from streamworker.runtime.batch_processor import BatchProcessor
from streamworker.runtime.holdings import Holdings
from streamworker.runtime.loop import LoopState, StopSignal
from streamworker.runtime.reads import delivery_counts, entry_from_reply
from streamworker.runtime.tasks import end_task

_ACQUIRE = LuaScript("acquire_lease")
_RELEASE = LuaScript("release_lease")
_READ = LuaScript("read_owned")
_CLAIM_OWN = LuaScript("claim_own")

# A backlog entry that could not be handled and has no retry time (a dead letter that could not
# be written, say) is tried again after this, not in a hot loop.
_STALL_S = 0.2


class LockState(IntEnum):
    """What :meth:`PartitionLock.acquire` found."""

    OTHER = 0
    """Another consumer holds the lock."""
    TAKEN = 1
    """The lock was free and is now ours; others' pending entries were claimed to us."""
    RENEWED = 2
    """We held it; it is renewed."""


class PartitionLock:
    """The partition lock of one (stream, group) for one consumer (:mod:`streamworker.core.timing`:
    its TTL, renewal period and trusted share). Use from one event loop."""

    def __init__(
        self, client: aioredis.Redis, stream: str, group: str, consumer: str, ttl_ms: int
    ) -> None:
        self.key = lease_key(stream, group)
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.ttl_ms = ttl_ms
        self._client = client
        self._valid_until = 0.0

    @property
    def renew_interval_s(self) -> float:
        """How often the holder renews, and others try to take it: a third of the TTL."""
        return partition_lock_renew_interval_ms(self.ttl_ms) / 1000

    def valid(self) -> bool:
        """True while this consumer may trust that it holds the lock."""
        return time.monotonic() < self._valid_until

    def invalidate(self) -> None:
        self._valid_until = 0.0

    async def acquire(self) -> tuple[LockState, int]:
        """Take or renew the lock: the state, and the number of entries claimed (TAKEN) or the
        holder's remaining ms (OTHER). Raises ConnectionLost, or NOGROUP (nothing written)."""
        sent = time.monotonic()
        reply = await _ACQUIRE(
            self._client, [self.key, self.stream], [self.group, self.consumer, self.ttl_ms]
        )
        state, number = LockState(int(reply[0])), int(reply[1])
        if state is LockState.OTHER:
            self._valid_until = 0.0
        else:
            self._valid_until = sent + partition_lock_trusted_ms(self.ttl_ms) / 1000
        return state, number

    async def release(self) -> bool:
        """Give the lock up if held (a graceful stop), so another worker takes over at once."""
        self._valid_until = 0.0
        return bool(await _RELEASE(self._client, [self.key], [self.consumer]))


async def read_owned(
    client: aioredis.Redis, lock: PartitionLock, start: bytes, count: int
) -> tuple[list[Entry], bytes] | None:
    """XREADGROUP from ``start`` if ``lock`` is still ours (None if not): the entries, and for a
    ``>`` read that found nothing, the group's last-delivered id (to wait from)."""
    reply = await _READ(
        client,
        [lock.key, lock.stream],
        [lock.group, lock.consumer, count, start],
    )
    if isinstance(reply, int):
        lock.invalidate()
        return None
    raw_entries, last = reply[0], reply[1]
    return [entry_from_reply(item) for item in raw_entries], as_bytes(last or b"")


class OrderedLoop:
    """The consume loop of an ``ordered=True`` subscription (replaces the plain one): the
    consumer ``name``'s source of batches, one entry each, for ``batches``."""

    def __init__(
        self,
        spec: HandlerSpec,
        *,
        name: str,
        client: aioredis.Redis,
        read_client: aioredis.Redis,
        batches: BatchProcessor,
        holdings: Holdings,
        signal: StopSignal,
        state: LoopState,
    ) -> None:
        self.spec = spec
        self.name = name
        self._client = client
        # For blocking reads: its socket timeout exceeds block_ms.
        self._read_client = read_client
        self._batches = batches
        self._holdings = holdings
        self._signal = signal
        self._state = state
        self.lock = PartitionLock(client, spec.stream, spec.group, name, spec.partition_lock_ttl_ms)
        self._log = structlog.get_logger("streamworker.ordering").bind(
            stream=spec.stream, group=spec.group, consumer=name
        )

    async def run(self) -> None:
        """Until the consumer stops; raises ConnectionLost/NOGROUP for the consumer's loop to
        handle (back off, recreate the group), after which it is called again."""
        renewer = asyncio.ensure_future(self._renew())
        try:
            await self._consume()
        finally:
            await end_task(renewer)
            if self._signal.stopping():
                with contextlib.suppress(Exception):
                    await self.lock.release()

    async def _renew(self) -> None:
        # Renewal is separate from the loop so that a long handler does not let the lock lapse.
        while True:
            await asyncio.sleep(self.lock.renew_interval_s)
            if not self.lock.valid():
                continue  # the loop itself acquires (and replays) when it has no lock
            try:
                state, _ = await self.lock.acquire()
            except Exception as exc:  # the loop sees the same outage; its lock lapses
                self._log.debug("lease_renewal_failed", error=str(exc))
                continue
            if state is not LockState.RENEWED:
                self.lock.invalidate()
                self._log.warning("lease_lost", state=state.name)

    async def _await_lock(self) -> bool:
        """Wait until this consumer holds the lock; False if stopping first."""
        signal, state = self._signal, self._state
        while not signal.stopping():
            lock_state, number = await self.lock.acquire()
            if lock_state is LockState.TAKEN:
                self._log.info("lease_taken", claimed=number, ttl_ms=self.lock.ttl_ms)
                return True
            if lock_state is LockState.RENEWED:
                return True
            # Someone else works this stream: nothing of ours to drain meanwhile.
            state.backlog_drained.set()
            state.turned()
            await signal.sleep(min(self.lock.renew_interval_s, max(number, 10) / 1000))
        return False

    async def _consume(self) -> None:
        signal, state = self._signal, self._state
        # Every (re)start replays this consumer's own PEL first, as the plain loop does.
        cursor: bytes | None = b"0"
        in_hand: list[Entry] = []
        counts: dict[bytes, int] = {}
        while not signal.stopping():
            state.turned()
            if not self.lock.valid():
                in_hand, counts = [], {}
                if not await self._await_lock():
                    return
                cursor = b"0"  # after a takeover the claimed entries are in our PEL
            if not in_hand:
                got = await self._read(cursor)
                if got is None:
                    continue  # lost the lock
                entries, last = got
                if cursor is not None:
                    if not entries:
                        cursor = None
                        state.backlog_done()
                        continue
                    cursor = entries[-1].id
                    counts = await delivery_counts(
                        self._client, self.spec.stream, self.spec.group, self.name, entries
                    )
                elif not entries:
                    await self._wait_for_new(last)
                    continue
                else:
                    counts = dict.fromkeys((e.id for e in entries), 1)
                in_hand = entries
            in_hand = await self._handle_in_order(in_hand, counts)

    async def _read(self, cursor: bytes | None) -> tuple[list[Entry], bytes] | None:
        async with connection_errors():
            return await read_owned(self._client, self.lock, cursor or b">", self.spec.batch_size)

    async def _wait_for_new(self, last: bytes) -> None:
        """Block (plain XREAD, which changes nothing) until the stream has an entry after the
        group's last-delivered id, ``block_ms`` passes, or the consumer stops."""
        block_ms = min(self.spec.block_ms, max(10, int(self.lock.renew_interval_s * 1000)))
        # The consumer's client for blocking reads: its socket timeout exceeds block_ms.
        call = self._read_client.xread({self.spec.stream: last or b"$"}, count=1, block=block_ms)
        read = asyncio.ensure_future(call)
        stopped = asyncio.ensure_future(self._signal.wait())
        try:
            async with connection_errors():
                await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if read.done():
                    read.result()
        finally:
            stopped.cancel()
            if not read.done():
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await read

    async def _handle_in_order(self, entries: list[Entry], counts: dict[bytes, int]) -> list[Entry]:
        """Handle ``entries`` one at a time in order; return those not finished (the first of
        them failed or could not be handled), to be handled first next round."""
        for i, entry in enumerate(entries):
            if self._signal.stopping() or not self.lock.valid():
                return []  # left pending: the next holder (or our restart) replays them
            if entry.id not in counts:
                continue  # no longer ours (acked, or claimed while we had no lock)
            await self._batches.process([entry], counts)
            if not await self._finished(entry.id):
                rest = entries[i:]
                await self._retry_head(rest, counts)
                return rest
        return []

    async def _finished(self, entry_id: bytes) -> bool:
        async with connection_errors():
            rows = await self._client.xpending_range(
                self.spec.stream,
                self.spec.group,
                min=entry_id,
                max=entry_id,
                count=1,
                consumername=self.name,
            )
        return not rows

    async def _retry_head(self, rest: list[Entry], counts: dict[bytes, int]) -> None:
        """Wait for the first unfinished entry's retry time, then deliver it again (its delivery
        counter goes up by one, which ``max_deliveries`` counts)."""
        signal = self._signal
        head = rest[0].id
        due = self._holdings.take_retry(head)
        if due is None:
            await signal.sleep(_STALL_S)
            return
        while not signal.stopping() and self.lock.valid():
            left = due - time.monotonic()
            if left <= 0:
                break
            self._state.turned()
            await signal.sleep(min(left, 1.0))
        if signal.stopping() or not self.lock.valid():
            return
        claimed, deleted = await _CLAIM_OWN(
            self._client, [self.spec.stream], [self.spec.group, self.name, head]
        )
        if deleted:
            self._batches.count_deleted([as_bytes(i) for i in deleted])
            counts.pop(head, None)
        for row in claimed:
            counts[as_bytes(row[0])] = int(row[2])
            fields = row[1]
            if fields:
                rest[0] = Entry(id=head, fields=flat_fields(fields))
        if not claimed and not deleted:
            counts.pop(head, None)  # not ours any more
