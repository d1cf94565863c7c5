"""How many entries the consume loop may read next: the room its in-flight budgets leave
(``max_in_flight``, :mod:`~streamworker.runtime.inflight`) and the permits of its shared rate
limit (``rate_limit``, :mod:`~streamworker.runtime.ratelimit`).

Both are taken *before* a read is sent, so that two handlers' reads cannot take the same room
and no entry waits for a permit inside a worker while it ages toward ``claim_idle_ms``; both are
settled when the read is back: what it did not bring goes back. The room is given back again
when the read's entries have settled (:meth:`ReadSizer.release`); a permit is for a start now
and is never kept for later.

Under a rate limit each read also asks, in the same write, for the permits of the read after it
(:meth:`ReadSizer.granted_next`). With some granted, that next read may go out behind the batch's
ack (:attr:`~streamworker.idempotency.base.Batch.next_read`), its COUNT the permits granted
(:meth:`ReadSizer.ahead_ready`); so a permit is taken at most one batch before its start. The
consume loop (:mod:`~streamworker.runtime.consumer`) sends the reads; this module only counts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from streamworker.app import HandlerSpec
from streamworker.core.keyed import entry_bytes
from streamworker.io.redisio import Entry, NextRead
from streamworker.runtime.inflight import InFlightGate
from streamworker.runtime.loop import StopSignal
from streamworker.runtime.ratelimit import RateGate


class ReadSizer:
    """The COUNT of one subscription's reads, from its in-flight gate and its rate gate. Use
    from one event loop."""

    def __init__(
        self,
        spec: HandlerSpec,
        gate: InFlightGate,
        rate: RateGate,
        signal: StopSignal,
        turned: Callable[[], None],
    ) -> None:
        self._batch = spec.batch_size
        self.gate = gate
        self.rate = rate
        self._signal = signal
        self._turned = turned
        # A blocking read under a bound or a limit asks for one entry (see take).
        self._paced = gate.bounded or rate.limited
        self._next_permits = 0
        """Permits granted for the next read, not yet used."""
        self._ahead_permits = 0
        """Permits of the read sent with the last ack (its COUNT)."""

    @property
    def bounded(self) -> bool:
        """An in-flight bound applies: the next read is sized once the batch has settled, so
        it is never sent ahead with the batch's ack."""
        return self.gate.bounded

    async def take(self, *, blocking: bool) -> int:
        """The COUNT of the next read sent by the loop itself, its room reserved and its permits
        taken (0: none to be had, the loop is stopping). A blocking read waits on an idle
        stream: under a bound or a rate limit it asks for one entry, so that it holds no room or
        permits others need while it waits (the non-blocking read after it takes the full room
        again). Settle what it brings with :meth:`settle_room` and :meth:`give_back_unused`."""
        want = 1 if blocking and self._paced else self._batch
        count = await self._reserve(want)
        if count == 0:
            return 0
        # The permits come after the room: a read waiting for room holds no permits that age.
        permits = await self._permits(count)
        if permits < count and self.gate.bounded:
            self.gate.give_back(count - permits, 0)
        return permits

    def settle_room(self, count: int, entries: list[Entry]) -> None:
        """A read of ``count`` came back with ``entries`` (or failed: none): the reservation
        becomes what it brought, unused room goes back. The entries stay counted as in flight
        until :meth:`release`."""
        if self.gate.bounded:
            self.gate.give_back(count - len(entries), 0)
            self.gate.arrived(len(entries), sum(entry_bytes(e.fields) for e in entries))

    async def give_back_unused(self, count: int, brought: int) -> None:
        """Permits of a read of ``count`` that brought ``brought`` entries go back to the group
        (none are kept for later: a permit is for a start now)."""
        if brought < count:
            await self.rate.give_back(count - brought)

    def release(self, entries: list[Entry]) -> None:
        """A read's entries are settled (acked, dead-lettered, left for a retry whose entry the
        reclaimer reads again): they leave the in-flight budgets."""
        if self.gate.bounded and entries:
            self.gate.give_back(len(entries), sum(entry_bytes(e.fields) for e in entries))

    def granted_next(self, permits: int) -> None:
        """Permits granted for the read after the one just sent."""
        self._next_permits += permits

    def ahead_ready(self, next_read: NextRead) -> bool:
        """Whether the next read may go out with the batch's ack: always without a rate limit;
        with one, when the last read was granted permits for it (the read's COUNT becomes their
        number, and it asks for the permits of the one after). Otherwise the loop reads when
        the batch has settled, asking first."""
        if not self.rate.limited:
            return True
        if self._next_permits <= 0:
            return False
        self._ahead_permits, self._next_permits = self._next_permits, 0
        next_read.set_count(self._ahead_permits)
        return True

    async def ahead_arrived(self, next_read: NextRead, brought: int) -> None:
        """The read sent behind the last ack came back with ``brought`` entries. Under a rate
        limit its COUNT was the permits granted: it asked for the next ones (kept) and what it
        did not bring goes back. Without one, it was read without asking the gate: the group's
        pause is looked for now (at most once a second); if paused, the invoker starts none of
        them and they wait for the pause, uncounted."""
        permits, self._ahead_permits = self._ahead_permits, 0
        if self.rate.limited:
            self.granted_next(self.rate.granted(next_read.take_also()))
            await self.rate.give_back(permits - brought)
        else:
            await self.rate.take(brought or 1)

    async def drop(self) -> None:
        """The loop ends (stop, lost connection): permits it holds for reads it will not send
        go back (best effort)."""
        got = self._next_permits + self._ahead_permits
        self._next_permits = self._ahead_permits = 0
        if got:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.rate.give_back(got), 2.0)

    async def _reserve(self, want: int) -> int:
        """``want`` cut to the room left, reserved in the in-flight budgets; with none, wait
        until a batch settles (or the loop stops: then 0)."""
        gate = self.gate
        if not gate.bounded:
            return want
        room = gate.room(want)
        if not room:
            waiting = asyncio.ensure_future(gate.wait_for_room(want))
            stopped = asyncio.ensure_future(self._signal.wait())
            try:
                await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                waiting.cancel()
            if self._signal.stopping():
                return 0
            room = gate.room(want)
        gate.reserve(room)
        return room

    async def _permits(self, want: int) -> int:
        """Permits for a read of at most ``want`` entries: those granted with the last read (the
        surplus goes back), else granted now, waiting for them if need be (0 once stopping)."""
        got, self._next_permits = self._next_permits, 0
        if got > want:
            await self.rate.give_back(got - want)
            got = want
        if got:
            return got
        return await self.rate.acquire(want, self._signal, self._turned)
