"""Counters per (stream, group) over the last hour, one slot a second, in fixed-size rings.

The dashboard's sampler reads every stream's counters once a second (``XINFO STREAM``'s
``entries-added``, ``XINFO GROUPS``' ``entries-read``, ``pending`` and ``lag``, and the
dead-letter stream's ``entries-added``) and stores them here; rates are differences of
cumulative counters between two samples, so a missed second costs resolution, never accuracy,
and a chart of any width is drawn from one bucket per pixel-column.

Memory is bounded and allocated up front: a series is ``len(COLUMNS) + 1`` arrays of ``slots``
signed 64-bit integers (the slot's second plus one per column), ``SERIES_BYTES`` = 6 x 8 x 3600 =
172,800 bytes for an hour at 1 s; at most ``max_series`` series are kept (the least recently
updated one is dropped for a new one), so 100 series take 17.3 MB whatever the load.

Not thread-safe: use from the event loop that serves the app.
"""

from __future__ import annotations

import itertools
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

SLOTS = 3600  # one hour at one second
COLUMNS = ("added", "done", "dead", "pending", "lag")
SERIES_BYTES = (len(COLUMNS) + 1) * 8 * SLOTS
DEFAULT_MAX_SERIES = 100
UNKNOWN = -1  # a counter Redis could not give (lag after XDEL/XTRIM, entries-read on old servers)


@dataclass(frozen=True, slots=True)
class Sample:
    """The counters of one (stream, group) at one second. ``done`` = entries read by the group
    minus those still pending, i.e. acked (dead-lettered entries are acked too); ``dead`` is the
    dead-letter stream's ``entries-added`` (per stream: shared by its groups)."""

    second: int
    added: int
    done: int
    dead: int
    pending: int
    lag: int


class Ring:
    """``slots`` one-second slots of :data:`COLUMNS` for one series."""

    __slots__ = ("_cols", "_stamp", "last_second", "slots")

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self._stamp = array("q", [-1]) * slots
        self._cols = [array("q", [0]) * slots for _ in COLUMNS]
        self.last_second = -1

    def put(self, second: int, values: tuple[int, int, int, int, int]) -> None:
        """Store the counters of ``second`` (a later value in the same second replaces it)."""
        i = second % self.slots
        self._stamp[i] = second
        for col, v in zip(self._cols, values, strict=True):
            col[i] = v
        self.last_second = max(self.last_second, second)

    def get(self, second: int) -> Sample | None:
        """The sample of ``second``, if one was stored and not yet overwritten."""
        i = second % self.slots
        if self._stamp[i] != second:
            return None
        added, done, dead, pending, lag = (c[i] for c in self._cols)
        return Sample(second, added, done, dead, pending, lag)

    def samples(self, since: int, until: int) -> Iterator[Sample]:
        """Stored samples with ``since <= second <= until``, oldest first."""
        start = max(since, until - self.slots + 1)
        for s in range(start, until + 1):
            sample = self.get(s)
            if sample is not None:
                yield sample


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-second rates over a bucket of time (None where a counter was unknown)."""

    start: int
    end: int
    added: float | None
    done: float | None
    dead: float | None
    pending: int | None
    lag: int | None


def _rate(a: int, b: int, dt: int) -> float | None:
    if a == UNKNOWN or b == UNKNOWN or dt <= 0:
        return None
    # A counter that went down (group re-created, SETID, stream deleted) has no rate there.
    return max(0.0, (b - a) / dt)


class History:
    """Rings by (stream, group); ``group`` is None for a stream without groups."""

    def __init__(self, max_series: int = DEFAULT_MAX_SERIES, slots: int = SLOTS) -> None:
        if max_series < 1:
            raise ValueError("max_series must be at least 1")
        self.max_series = max_series
        self.slots = slots
        self._rings: OrderedDict[tuple[str, str | None], Ring] = OrderedDict()

    @property
    def memory_bytes(self) -> int:
        """What the rings hold now (each costs ``(len(COLUMNS) + 1) * 8 * slots`` bytes)."""
        return len(self._rings) * (len(COLUMNS) + 1) * 8 * self.slots

    def keys(self) -> list[tuple[str, str | None]]:
        """The series kept, least recently updated first."""
        return list(self._rings)

    def record(
        self,
        stream: str,
        group: str | None,
        values: tuple[int, int, int, int, int],
        at: float | None = None,
    ) -> None:
        """Store ``values`` (in :data:`COLUMNS` order) for the second ``at`` (default now)."""
        second = int(time.time() if at is None else at)
        key = (stream, group)
        ring = self._rings.get(key)
        if ring is None:
            ring = Ring(self.slots)
            self._rings[key] = ring
            while len(self._rings) > self.max_series:
                self._rings.popitem(last=False)
        else:
            self._rings.move_to_end(key)
        ring.put(second, values)

    def samples(
        self, stream: str, group: str | None, since: int, until: int | None = None
    ) -> list[Sample]:
        """The stored samples of one series between ``since`` and ``until`` (default now)."""
        ring = self._rings.get((stream, group))
        if ring is None:
            return []
        end = int(time.time()) if until is None else until
        return list(ring.samples(since, end))

    def latest(self, stream: str, group: str | None) -> Sample | None:
        """The newest sample of one series."""
        ring = self._rings.get((stream, group))
        return None if ring is None or ring.last_second < 0 else ring.get(ring.last_second)

    def rates(
        self,
        stream: str,
        group: str | None,
        since: int,
        until: int | None = None,
        buckets: int | None = None,
    ) -> list[Rates]:
        """Rates between consecutive samples, or over ``buckets`` equal spans of time (one rate
        per bucket: the counters' difference across it over its length, so nothing is lost by
        drawing an hour in 300 points)."""
        points = self.samples(stream, group, since, until)
        if len(points) < 2:
            return []
        if buckets is not None and buckets < len(points) - 1:
            t0 = points[0].second
            span = (points[-1].second - t0) / buckets
            last_in: dict[int, Sample] = {}
            for p in points[1:]:
                last_in[min(buckets - 1, int((p.second - t0 - 1) / span))] = p
            points = [points[0], *(last_in[k] for k in sorted(last_in))]
        out = []
        for a, b in itertools.pairwise(points):
            dt = b.second - a.second
            out.append(
                Rates(
                    start=a.second,
                    end=b.second,
                    added=_rate(a.added, b.added, dt),
                    done=_rate(a.done, b.done, dt),
                    dead=_rate(a.dead, b.dead, dt),
                    pending=b.pending,
                    lag=None if b.lag == UNKNOWN else b.lag,
                )
            )
        return out

    def recent_rates(self, stream: str, group: str | None, window_s: int = 10) -> Rates | None:
        """Average rates over the last ``window_s`` seconds of samples (None with fewer than two)."""
        latest = self.latest(stream, group)
        if latest is None:
            return None
        points = self.samples(stream, group, latest.second - window_s, latest.second)
        if len(points) < 2:
            return None
        a, b = points[0], points[-1]
        dt = b.second - a.second
        return Rates(
            a.second,
            b.second,
            _rate(a.added, b.added, dt),
            _rate(a.done, b.done, dt),
            _rate(a.dead, b.dead, dt),
            b.pending,
            None if b.lag == UNKNOWN else b.lag,
        )
