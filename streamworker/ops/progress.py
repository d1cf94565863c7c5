"""Progress of long operator commands (dlq replay/purge, prune, archive), on stderr.

On a terminal: one line redrawn in place (a bar when the total is known, a spinner while a
phase such as "starting Spark" has nothing to count), at most ten times a second. Elsewhere
(logs, CI, a pipe): a plain line every ``every_s`` seconds and one at the end, so a log shows the
command is alive without a line per second of nothing. Results go to stdout (``--json`` for
scripts); progress never does.

Thread safety: :meth:`Progress.update` and :meth:`Progress.phase` may be called from any one
thread at a time; the phase ticker runs in a thread of its own, serialised by a lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

_SPINNER = "|/-\\"
_REDRAW_S = 0.1
_BAR_WIDTH = 24


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Reports ``done`` of ``total`` (or of an unknown total) for one command.

    Args:
        label: what is being done, e.g. ``"replay {orders}:dlq"``.
        out: where to write (stderr in the CLI).
        unit: what is counted (``"entries"``).
        tty: force terminal (True) or plain (False) output; default ``out.isatty()``.
        every_s: the interval of plain lines.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        label: str,
        out: TextIO,
        *,
        unit: str = "entries",
        tty: bool | None = None,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.out = out
        self.unit = unit
        self.tty = out.isatty() if tty is None else tty
        self.every_s = every_s
        self._clock = clock
        self.started = clock()
        self._last_draw = float("-inf")
        self._last_line = self.started
        self._done = 0
        self._total: int | None = None
        self._phase: str | None = None
        self._phase_since = self.started
        self._spin = 0
        self._drawn = False
        self._lock = threading.Lock()

    # --- what callers report ---------------------------------------------------------------------

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` items so far (of ``total``, when known). Cheap to call per item."""
        with self._lock:
            self._done = done
            if total is not None:
                self._total = total
            self._phase = None
            self._maybe_show(final=total is not None and done >= total)

    @contextlib.contextmanager
    def phase(self, text: str) -> Iterator[None]:
        """A stretch with nothing to count (``"starting Spark"``): shown with its elapsed time,
        kept alive by a ticker thread while the caller blocks."""
        stop = threading.Event()
        since = self._clock()
        with self._lock:
            self._phase = text
            self._phase_since = since
            self._maybe_show(final=False, force=True)

        def tick() -> None:
            while not stop.wait(_REDRAW_S if self.tty else min(self.every_s, 1.0)):
                with self._lock:
                    if self._phase == text:
                        self._maybe_show(final=False)

        ticker = threading.Thread(target=tick, name="streamworker-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            with self._lock:
                if self._phase == text:
                    self._phase = None

    def status(self, text: str) -> None:
        """Like :meth:`phase`, for a caller that polls (and so calls this regularly) instead of
        blocking: shown at once when it changes, then as often as the output allows."""
        with self._lock:
            if self._phase != text:
                self._phase = text
                self._phase_since = self._clock()
                self._maybe_show(final=False, force=True)
            else:
                self._maybe_show(final=False)

    def finish(self, text: str | None = None) -> None:
        """End the progress display: the last state (or ``text``) on a line of its own."""
        with self._lock:
            line = text or self._line()
            if self.tty:
                self.out.write(f"\r\x1b[K{line}\n")
            else:
                self.out.write(f"{line}\n")
            self.out.flush()
            self._drawn = False

    # --- drawing ---------------------------------------------------------------------------------

    def _elapsed(self) -> str:
        return _duration(self._clock() - self.started)

    def _line(self) -> str:
        if self._phase is not None:
            return (
                f"{self.label}: {self._phase}... ({_duration(self._clock() - self._phase_since)})"
            )
        elapsed = self._clock() - self.started
        rate = f", {self._done / elapsed:,.0f}/s" if elapsed >= 1 and self._done else ""
        if self._total:
            pct = 100 * self._done / self._total
            eta = ""
            if 0 < self._done < self._total and elapsed >= 1:
                eta = f", {_duration(elapsed * (self._total - self._done) / self._done)} left"
            return (
                f"{self.label}: {self._done:,}/{self._total:,} {self.unit} ({pct:.0f}%"
                f"{rate}{eta}, {self._elapsed()})"
            )
        return f"{self.label}: {self._done:,} {self.unit} ({self._elapsed()}{rate})"

    def _bar(self) -> str:
        if self._phase is not None or not self._total:
            self._spin = (self._spin + 1) % len(_SPINNER)
            return f"{_SPINNER[self._spin]} "
        filled = min(_BAR_WIDTH, _BAR_WIDTH * self._done // self._total)
        return f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] "

    def _maybe_show(self, *, final: bool, force: bool = False) -> None:
        now = self._clock()
        if self.tty:
            if not (final or force or now - self._last_draw >= _REDRAW_S):
                return
            self._last_draw = now
            self.out.write(f"\r\x1b[K{self._bar()}{self._line()}")
            self._drawn = True
            self.out.flush()
            return
        # Plain output: a line on a phase change and every every_s; the last one by finish().
        if not (force or now - self._last_line >= self.every_s):
            return
        self._last_line = now
        self.out.write(f"{self._line()}\n")
        self.out.flush()
