"""What a subscription's loops share: the stop signal, and how far the consume loop has got.

The consume loop (plain or ordered), the reclaimer and the batch processor of one subscription
run as tasks of one event loop; they coordinate through these two objects only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable


class StopSignal:
    """Set once, when the subscription is told to stop. Use from one event loop."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        # The event's own method, not a method of this class calling it: the batch processor
        # asks before every handler call.
        self.stopping: Callable[[], bool] = self._event.is_set
        """``stopping()``: True once :meth:`stop` was called."""

    def stop(self) -> None:
        """Ask every loop of the subscription to stop (idempotent)."""
        self._event.set()

    async def wait(self) -> None:
        """Return once :meth:`stop` is called."""
        await self._event.wait()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if :meth:`stop` is called meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)


class LoopState:
    """How far the consume loop has got: what liveness, readiness and the reclaimer look at."""

    def __init__(self) -> None:
        self.backlog_drained = asyncio.Event()
        """Set once this consumer's own pending entries have been replayed (the reclaimer waits
        for it: claiming them at the same time would deliver them twice)."""
        self.last_turn = time.monotonic()
        """When the loop last went round (monotonic); liveness compares it with its deadline."""

    def turned(self) -> None:
        """Record that the loop went round."""
        self.last_turn = time.monotonic()

    def backlog_done(self) -> None:
        """The loop moved on from its own pending entries to new ones."""
        self.backlog_drained.set()
