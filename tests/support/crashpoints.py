"""What the crash-test apps share: an fsynced event log and "kill me at point P, call N".

The apps run under ``streamworker run`` in a subprocess and read their plan from the environment
(they are user code): ``SW_TEST_LOG`` names the log, ``SW_TEST_KILL=point:n`` makes the n-th call
of ``at(point)`` true, after which the app records ``kill <where>`` and SIGKILLs itself.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

from tests.support.journal import append_record


class CrashPlan:
    """One app's log and kill point."""

    def __init__(self, default_log: str, points: Iterable[str]) -> None:
        self.log = os.environ.get("SW_TEST_LOG", default_log)
        self.point, _, arg = os.environ.get("SW_TEST_KILL", "").partition(":")
        self.nth = int(arg) if arg else 0
        self.calls = dict.fromkeys(points, 0)

    def record(self, line: str) -> None:
        """Append a record that survives a SIGKILL right after, or during (support.journal)."""
        append_record(self.log, line)

    def die(self, where: str) -> None:
        """Record where, then SIGKILL this process."""
        self.record(f"kill {where}")
        os.kill(os.getpid(), signal.SIGKILL)

    def at(self, point: str) -> bool:
        """Count a call of ``point``; true on the planned call."""
        self.calls[point] += 1
        return point == self.point and self.calls[point] == self.nth
