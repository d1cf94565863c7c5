"""Waiting in tests: poll a condition until it holds, or fail after a deadline.

A test waits for what it needs (a client blocked, a connection gone, a record written), never
for a guessed time: a guess is too short on a loaded machine and too long on a quiet one.
``wait_until`` is for synchronous tests and threads, ``eventually`` for async tests (it yields to
the event loop between polls). ``tests.support.proc.wait_for`` and ``tests.support.worker.
eventually`` are these two under their older names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_POLL_S = 0.02
# How long a wait may take before the test fails, unless the test says. Generous: a deadline costs
# nothing while the condition comes true, and under `make test`'s three xdist workers beside other
# work a step that takes a second on a quiet machine has taken over 10 s (a load average of 20).
DEFAULT_TIMEOUT_S = 60.0


def wait_until(check: Callable[[], T], timeout_s: float = DEFAULT_TIMEOUT_S, what: str = "") -> T:
    """Call ``check`` until it returns something truthy and return that; after ``timeout_s``
    raise ``AssertionError`` naming ``what``. Exceptions from ``check`` propagate."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or check}")
        time.sleep(_POLL_S)


async def eventually(
    check: Callable[[], object], timeout_s: float = DEFAULT_TIMEOUT_S, what: str = ""
) -> None:
    """Poll ``check`` (sync or async) until it returns truthy, or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or check}")
        await asyncio.sleep(_POLL_S)
