"""The thread pool that runs ``def`` handlers, with a count of calls still running."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class HandlerThreads:
    """Runs sync handlers off the event loop. ``busy`` counts calls that have not returned yet,
    including calls whose awaiting task was cancelled at the shutdown deadline (a thread cannot be
    interrupted, so those keep running until they return)."""

    def __init__(self, max_workers: int) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="streamworker-handler"
        )
        self._lock = threading.Lock()
        self._busy = 0

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    def _call(self, func: Callable[[], Any]) -> Any:
        with self._lock:
            self._busy += 1
        try:
            return func()
        finally:
            with self._lock:
                self._busy -= 1

    async def run(self, func: Callable[..., Any], /, **kwargs: Any) -> Any:
        """Call ``func(**kwargs)`` in a pool thread and await its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._call, functools.partial(func, **kwargs)
        )

    def shutdown(self) -> None:
        """Drop queued calls; running ones go on (see ``busy``)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
