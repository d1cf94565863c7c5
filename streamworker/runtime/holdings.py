"""The entries one consumer holds: in flight, or failed and waiting for their retry.

Every entry held must keep its lease (the reclaimer resets its idle time on a timer), and a held
entry whose retry falls due is delivered again by the reclaimer or, on an ordered subscription,
by the ordered loop. This object is the one place that knows which entries those are; the
consume loop, the batch processor, the reclaimer and the ordered loop all go through it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable


class Holdings:
    """In-flight entry ids and scheduled retries (id -> monotonic due time) of one consumer.

    Use from one event loop. An id can be both in flight and scheduled for a retry (a batch from
    a retry is running while its retry entry is being replaced); :meth:`held_ids` lists it once.
    """

    def __init__(self) -> None:
        self.in_flight: set[bytes] = set()
        self._retries: dict[bytes, float] = {}
        self.retry_scheduled = asyncio.Event()
        """Set when a retry is scheduled: the reclaimer may be asleep until a later due time."""
        self.unstarted: set[bytes] = set()
        """Entries read but not started because the consumer was stopping: released to the
        group when the worker stops (:mod:`streamworker.runtime.release`)."""

    def held_ids(self) -> list[bytes]:
        """Entries whose lease must be renewed: in flight or waiting for a retry."""
        return [*self.in_flight, *(i for i in self._retries if i not in self.in_flight)]

    def start(self, ids: Iterable[bytes]) -> None:
        """These entries are being processed from now on."""
        self.in_flight.update(ids)

    def finish(self, ids: Iterable[bytes]) -> None:
        """These entries are no longer being processed (they may still await a retry)."""
        self.in_flight.difference_update(ids)

    def schedule_retry(self, entry_id: bytes, due: float) -> None:
        """Deliver ``entry_id`` again at ``due`` (monotonic) and wake whoever waits for retries."""
        self._retries[entry_id] = due
        self.retry_scheduled.set()

    def settled(self, entry_id: bytes) -> None:
        """``entry_id`` needs no retry any more (acked, dead-lettered, deleted or gone)."""
        self._retries.pop(entry_id, None)

    def not_started(self, entry_id: bytes) -> None:
        """``entry_id`` was read but its handler was not started (the consumer is stopping)."""
        self.unstarted.add(entry_id)

    def take_unstarted(self) -> list[bytes]:
        """Remove and return the entries recorded by :meth:`not_started`."""
        ids, self.unstarted = sorted(self.unstarted), set()
        return ids

    def dropped(self, entry_id: bytes) -> None:
        """``entry_id`` is not this consumer's any more: neither in flight nor owed a retry."""
        self.in_flight.discard(entry_id)
        self._retries.pop(entry_id, None)

    def take_retry(self, entry_id: bytes) -> float | None:
        """Remove ``entry_id``'s scheduled retry and return its due time (None if it has none)."""
        return self._retries.pop(entry_id, None)

    def take_due(self, now: float | None = None) -> list[bytes]:
        """Remove and return the retries due by ``now`` whose entries are not in flight."""
        now = time.monotonic() if now is None else now
        due = [i for i, at in self._retries.items() if at <= now and i not in self.in_flight]
        for entry_id in due:
            del self._retries[entry_id]
        return due

    def next_retry_at(self) -> float | None:
        """The earliest scheduled retry's due time (monotonic), None if none is scheduled."""
        return min(self._retries.values()) if self._retries else None

    def has_retries(self) -> bool:
        """True while some retry is scheduled."""
        return bool(self._retries)
