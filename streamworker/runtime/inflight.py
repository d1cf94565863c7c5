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
        self._changed = asyncio.Condition()

    @property
    def bounded(self) -> bool:
        """True when either bound is set."""
        return self.max_messages is not None or self.max_bytes is not None

    def room(self, want: int) -> int:
        """How many entries the next read may ask for: ``want`` (the batch size) cut to the
        messages left under ``max_messages``; 0 when a bound is reached. The byte bound cannot
        be known before the read (entries differ in size): it closes the room once reached and
        :meth:`take` accounts for what a read brought."""
        if self.max_bytes is not None and self.bytes >= self.max_bytes and self.messages > 0:
            return 0
        if self.max_messages is None:
            return want
        return max(0, min(want, self.max_messages - self.messages))

    async def wait_for_room(self, want: int) -> int:
        """Wait until :meth:`room` is at least 1, then return it."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.room(want) > 0)
            return self.room(want)

    def take(self, messages: int, nbytes: int) -> None:
        """Count entries a read returned as held."""
        self.messages += messages
        self.bytes += nbytes
        self.peak_messages = max(self.peak_messages, self.messages)

    async def give_back(self, messages: int, nbytes: int) -> None:
        """Count entries as no longer held (acked, dead-lettered, handed back) and wake a waiting
        read."""
        self.messages = max(0, self.messages - messages)
        self.bytes = max(0, self.bytes - nbytes)
        async with self._changed:
            self._changed.notify_all()
