"""Bounded memory: how many messages (and bytes of fields) a worker holds at once.

A worker with ``max_in_flight`` / ``max_in_flight_bytes`` sizes each XREADGROUP's COUNT by the room
left (:meth:`InFlight.room`) and takes the read entries into the budget (:meth:`InFlight.take`)
before it processes them; they leave it (:meth:`InFlight.give_back`) when acked, retried or
dead-lettered. When handlers lag, the room shrinks, so reads shrink, and with no room left the
next read waits (:meth:`InFlight.wait_for_room`) instead of pulling more entries into memory.

The wait is on the *read*, never on entries already held: nothing the worker holds waits here,
so the lease renewal that covers held entries (renewed by time only) is untouched, and an entry
not yet read cannot age toward ``claim_idle_ms`` in this worker.
"""

from __future__ import annotations

import asyncio


class InFlight:
    """The in-flight budget of one worker (or one handler). Use from one event loop.

    ``max_messages`` / ``max_bytes``: the bounds, None for none. The byte bound counts the fields
    of held entries; one entry larger than the whole byte bound is still admitted when nothing
    else is held (else it could never be handled), so the bytes held exceed ``max_bytes`` by at
    most one entry's size, only while that entry is the only one.
    """

    def __init__(self, max_messages: int | None = None, max_bytes: int | None = None) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.messages = 0
        """Messages held now."""
        self.bytes = 0
        """Bytes of fields held now."""
        self.peak_messages = 0
        """The most messages ever held at once (what a test or a metric checks)."""
        self.peak_bytes = 0
        """The most bytes ever held at once."""
        # The entries seen so far, to size a read under the byte bound (entries of one stream
        # are usually alike; the first read of a worker asks for one entry to learn the size).
        self._seen_messages = 0
        self._seen_bytes = 0
        self._freed = asyncio.Event()

    @property
    def bounded(self) -> bool:
        """True when either bound is set."""
        return self.max_messages is not None or self.max_bytes is not None

    def room(self, want: int) -> int:
        """How many entries the next read may ask for: ``want`` (the batch size) cut to the
        messages left under ``max_messages`` and to the bytes left under ``max_bytes`` divided
        by the mean size of the entries taken so far (one entry while none was seen); 0 when a
        bound is reached. With nothing held the room is at least 1, so an entry larger than
        the byte bound still runs, alone."""
        room = want
        if self.max_messages is not None:
            room = min(room, self.max_messages - self.messages)
        if self.max_bytes is not None:
            left = self.max_bytes - self.bytes
            if self._seen_messages == 0:
                room = min(room, 1)
            else:
                mean = max(1, self._seen_bytes // self._seen_messages)
                room = min(room, left // mean)
        if self.messages == 0:
            room = max(room, 1)
        return max(0, room)

    async def wait_for_room(self, want: int) -> int:
        """Wait until :meth:`room` is at least 1, then return it."""
        while (room := self.room(want)) == 0:
            self._freed.clear()
            await self._freed.wait()
        return room

    def reserve(self, messages: int) -> None:
        """Count ``messages`` as held before the read that may bring them is sent."""
        self.messages += messages
        self.peak_messages = max(self.peak_messages, self.messages)

    def arrived(self, messages: int, nbytes: int) -> None:
        """A read brought ``messages`` entries (already reserved) of ``nbytes`` bytes: count the
        bytes as held, and learn the entries' size."""
        self.bytes += nbytes
        self._seen_messages += messages
        self._seen_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def take(self, messages: int, nbytes: int) -> None:
        """Count entries as held that arrived without a reservation (:meth:`reserve` then
        :meth:`arrived`)."""
        self.reserve(messages)
        self.arrived(messages, nbytes)

    def give_back(self, messages: int, nbytes: int) -> None:
        """Count entries as no longer held (acked, dead-lettered, handed back) and wake a waiting
        read. Never waits: it runs in ``finally`` blocks, also while a batch is cancelled."""
        self.messages = max(0, self.messages - messages)
        self.bytes = max(0, self.bytes - nbytes)
        self._freed.set()


class InFlightGate:
    """The budgets one subscription reads under: the worker's and its handler's (either may be
    unbounded). A read asks for the smallest room of the two; entries count in both."""

    def __init__(self, *budgets: InFlight) -> None:
        self._budgets = [b for b in budgets if b.bounded]

    @property
    def bounded(self) -> bool:
        """True when any budget has a bound."""
        return bool(self._budgets)

    def room(self, want: int) -> int:
        """The read's COUNT: the smallest room of the budgets (``want`` when none is bounded)."""
        return min((b.room(want) for b in self._budgets), default=want)

    async def wait_for_room(self, want: int) -> int:
        """Wait until every budget has room, then return the read's COUNT."""
        while (room := self.room(want)) == 0:
            for budget in self._budgets:
                if budget.room(want) == 0:
                    await budget.wait_for_room(want)
        return room

    def reserve(self, messages: int) -> None:
        """Reserve room for a read in every budget."""
        for budget in self._budgets:
            budget.reserve(messages)

    def arrived(self, messages: int, nbytes: int) -> None:
        """What a reserved read brought, in every budget."""
        for budget in self._budgets:
            budget.arrived(messages, nbytes)

    def take(self, messages: int, nbytes: int) -> None:
        """Count entries as held in every budget."""
        for budget in self._budgets:
            budget.take(messages, nbytes)

    def give_back(self, messages: int, nbytes: int) -> None:
        """Count entries as no longer held in every budget."""
        for budget in self._budgets:
            budget.give_back(messages, nbytes)
