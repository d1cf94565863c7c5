"""Ending the worker's own background tasks, with a bound.

A task is ended by cancelling it, and a cancellation can be lost: Python 3.11's
``asyncio.wait_for`` returns an inner result that raced the cancel and drops the CancelledError
(CPython gh-86296, fixed in 3.12), and a library awaited inside the task may catch it. A loop
whose cancel was lost goes on to its next pause as if nothing happened, and an unbounded
``await task`` after ``task.cancel()`` then waits forever: a worker asked to stop by SIGTERM hung
(seen under load, about once in 50 stops: a task dump showed the delayed-entry mover "cancelling"
in its poll sleep after a move; where the cancel went was not pinned down). So the cancel is
repeated until the task ends, within a deadline, and a task that still runs is reported and left.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

_RECANCEL_S = 0.05
"""How often the cancel is repeated while the task runs on: its next await takes it."""


async def end_task(task: asyncio.Future[Any], timeout_s: float = 5.0) -> bool:
    """Cancel ``task`` (again and again) until it has ended, at most ``timeout_s``; True when it
    ended. Its result or exception is retrieved (a loop ending on an error at that moment is not
    reported as never retrieved); the caller reports a task that did not end."""
    deadline = time.monotonic() + timeout_s
    while not task.done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(_RECANCEL_S, left))
    if not task.cancelled():
        task.exception()
    return True
