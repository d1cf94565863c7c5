"""Stream-id arithmetic and range splitting (pure; no Redis, no Spark).

A range is ``(lo, hi]``: ``lo`` exclusive (None: from the stream's start), ``hi`` inclusive. That is
the shape of a streaming offset interval (the last id read, the last id to read) and of Redis's
``XRANGE key (lo hi`` (exclusive start, Redis >= 6.2), so every split below maps onto one command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamworker.errors import ConfigError

MAX_PART = 2**64 - 1
"""The largest ms or seq part of a stream id."""

_ID_RE = re.compile(r"^(\d{1,20})-(\d{1,20})$")


@dataclass(frozen=True, slots=True, order=True)
class StreamId:
    """One entry id; ordered as Redis orders ids."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str | bytes) -> StreamId:
        """``"1700000000000-3"`` (or bytes) -> StreamId; ValueError for anything else."""
        raw = text.decode("ascii", "replace") if isinstance(text, bytes) else text
        match = _ID_RE.match(raw)
        if match is None:
            raise ValueError(f"not a stream entry id: {raw!r}")
        ms, seq = int(match.group(1)), int(match.group(2))
        if ms > MAX_PART or seq > MAX_PART:
            raise ValueError(f"stream entry id out of range: {raw!r}")
        return cls(ms, seq)

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def next(self) -> StreamId:
        """The smallest id above this one."""
        if self.seq < MAX_PART:
            return StreamId(self.ms, self.seq + 1)
        if self.ms < MAX_PART:
            return StreamId(self.ms + 1, 0)
        raise ValueError("no stream id above 18446744073709551615-18446744073709551615")

    def prev(self) -> StreamId | None:
        """The largest id below this one (None below ``0-0``)."""
        if self.seq > 0:
            return StreamId(self.ms, self.seq - 1)
        if self.ms > 0:
            return StreamId(self.ms - 1, MAX_PART)
        return None


ZERO = StreamId(0, 0)


def parse_id_option(name: str, value: str) -> StreamId:
    """An id given as an option (``"<ms>-<seq>"`` or a bare ``"<ms>"``, read as ``<ms>-0``);
    ConfigError naming the option otherwise."""
    text = value.strip()
    if text.isdigit():
        text = f"{text}-0"
    try:
        return StreamId.parse(text)
    except ValueError:
        raise ConfigError(
            f"option {name}: expected a stream entry id like '1700000000000-0', got {value!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class IdRange:
    """``(lo, hi]`` of one stream; ``lo`` None means from the stream's first entry."""

    lo: StreamId | None
    hi: StreamId

    def __post_init__(self) -> None:
        if self.lo is not None and self.lo >= self.hi:
            raise ValueError(f"empty range ({self.lo}, {self.hi}]")

    def contains(self, entry: StreamId) -> bool:
        """True when ``entry`` lies in the range."""
        return (self.lo is None or entry > self.lo) and entry <= self.hi

    @property
    def xrange_min(self) -> str:
        """The ``min`` argument of XRANGE for this range (exclusive ``(`` form)."""
        return "-" if self.lo is None else f"({self.lo}"

    @property
    def xrange_max(self) -> str:
        """The ``max`` argument of XRANGE for this range (inclusive)."""
        return str(self.hi)


def ranges_at_cuts(lo: StreamId | None, hi: StreamId, cuts: list[int]) -> list[IdRange]:
    """``(lo, hi]`` cut after each millisecond of ``cuts``: a cut at ``m`` ends its range at
    ``m-MAX``, so every id of ms ``m`` goes to that range. Cuts outside the interval, or not
    increasing, are skipped; the ranges are disjoint, ordered, and cover ``(lo, hi]`` exactly."""
    ranges: list[IdRange] = []
    prev = lo
    for cut in cuts:
        end = StreamId(cut, MAX_PART)
        if end >= hi or (prev is not None and end <= prev):
            continue
        ranges.append(IdRange(prev, end))
        prev = end
    ranges.append(IdRange(prev, hi))
    return ranges


def split_range(lo: StreamId | None, first: StreamId, hi: StreamId, k: int) -> list[IdRange]:
    """Split ``(lo, hi]`` into at most ``k`` consecutive ranges of equal time, at millisecond
    boundaries.

    ``first`` is the first entry above ``lo`` (so cuts are spread over the ms span the stream
    actually holds, not from ``0``). The ranges are disjoint, ordered, and their union is exactly
    ``(lo, hi]``; fewer than ``k`` come back when the span has fewer than ``k`` milliseconds.
    Equal-time cuts are skewed when the rate varies: :func:`count_cuts` cuts by entry counts.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if lo is not None and lo >= hi:
        return []
    start_ms = max(first.ms, lo.ms if lo is not None else 0)
    span = hi.ms - start_ms
    cuts = [start_ms + span * i // k for i in range(1, k)]
    return ranges_at_cuts(lo, hi, [c for c in cuts if lo is None or c >= lo.ms])


@dataclass(frozen=True, slots=True)
class Probe:
    """A sample of a stream for cutting it by entry counts: the ms parts of the first entries
    at or after ``at_ms`` (at most the probe window's size; fewer when the range ends), and how
    many entries the last of those milliseconds holds in all (the window may stop inside it:
    a burst puts thousands of entries in one ms)."""

    at_ms: int
    ms: tuple[int, ...]
    last_ms_count: int = 0


def probe_times(start_ms: int, end_ms: int, n: int) -> list[int]:
    """``n`` (or fewer, distinct) probe times spread evenly over ``[start_ms, end_ms]``."""
    span = end_ms - start_ms + 1
    count = max(1, min(n, span))
    return sorted({start_ms + span * i // count for i in range(count)})


def estimate_counts(probes: list[Probe], end_ms: int, window: int) -> list[float]:
    """Estimated entries in each probe's slice ``[at_ms, next probe's at_ms)`` (the last slice
    ends at ``end_ms`` inclusive).

    A slice whose window reaches past its end, or that the stream ends in, is counted exactly
    (its entries are in the window). A slice that holds a whole window is extrapolated at the
    mean of the rates at its two ends (its own window's and the next slice's). A burst inside a
    slice, between quiet ends, is what this can miss: more probes make slices shorter.
    """

    def rate(probe: Probe) -> float:
        # Entries per ms over the window, its last millisecond counted in full (the window
        # may stop inside a crowded one: a burst puts thousands of entries in one ms).
        if not probe.ms:
            return 0.0
        last = probe.ms[-1]
        at_last = sum(1 for m in probe.ms if m == last)
        seen = len(probe.ms) - at_last + max(at_last, probe.last_ms_count)
        return seen / (last - probe.ms[0] + 1)

    rates = [rate(p) for p in probes]
    counts: list[float] = []
    for i, probe in enumerate(probes):
        upto = probes[i + 1].at_ms if i + 1 < len(probes) else end_ms + 1
        inside = [m for m in probe.ms if m < upto]
        if len(inside) < len(probe.ms) or len(probe.ms) < window:
            counts.append(float(len(inside)))
            continue
        last = inside[-1]
        at_last = sum(1 for m in inside if m == last)
        seen = len(inside) - at_last + max(at_last, probe.last_ms_count)
        # The rest of the slice at the mean of the rates at its two ends.
        ahead = rates[i + 1] if i + 1 < len(probes) else rates[i]
        counts.append(seen + (rates[i] + ahead) / 2 * max(0, upto - last - 1))
    return counts


def count_cuts(
    probes: list[Probe], end_ms: int, window: int, k: int, total: int | None = None
) -> list[int]:
    """Millisecond cuts (for :func:`ranges_at_cuts`) giving ``k`` ranges of about equal entry
    counts, from ``probes`` (see :func:`estimate_counts`). ``total``: the exact entry count of
    the whole interval when known (the estimates are scaled to it). Fewer cuts come back when
    the entries sit in fewer than ``k`` milliseconds."""
    if k <= 1 or not probes:
        return []
    counts = estimate_counts(probes, end_ms, window)
    estimated = sum(counts)
    if estimated <= 0:
        return []
    scale = total / estimated if total else 1.0
    counts = [c * scale for c in counts]
    whole = estimated * scale
    cuts: list[int] = []
    done = 0.0
    target_no = 1
    for i, probe in enumerate(probes):
        upto = probes[i + 1].at_ms if i + 1 < len(probes) else end_ms + 1
        here = counts[i]
        inside = [m for m in probe.ms if m < upto]
        while target_no < k and done + here >= whole * target_no / k:
            need = whole * target_no / k - done  # entries of this slice before the cut
            rank = int(need / scale) if scale > 0 else 0
            if 0 < rank <= len(inside):
                cut = inside[rank - 1]  # the window knows where the rank-th entry is
            else:
                # Past the window: spread the rest of the slice evenly over its time.
                begin = inside[-1] + 1 if inside else probe.at_ms
                left = max(here - len(inside) * scale, 1e-9)
                frac = min(1.0, max(0.0, (need - len(inside) * scale) / left))
                cut = begin + int((upto - 1 - begin) * frac)
            if not cuts or cut > cuts[-1]:
                cuts.append(cut)
            target_no += 1
        done += here
    return [c for c in cuts if c < end_ms]


def min_id(ids: list[StreamId]) -> StreamId | None:
    """The smallest of ``ids`` (None for none)."""
    return min(ids) if ids else None


@dataclass(frozen=True, slots=True)
class Position:
    """A streaming reader's place in one stream: the last id read and how many entries the
    stream had ever had up to it (Redis 7's ``entries-added`` counting; -1 when unknown). The
    count is what tells a trim of unread entries apart from a trim of read ones."""

    id: StreamId
    n: int = -1

    @classmethod
    def parse(cls, text: str) -> Position:
        """``"<id>/<n>"`` or a bare ``"<id>"`` (count unknown)."""
        entry, _, count = text.partition("/")
        return cls(StreamId.parse(entry), int(count) if count else -1)

    def __str__(self) -> str:
        return f"{self.id}/{self.n}"


@dataclass(frozen=True, slots=True)
class StreamState:
    """What XINFO STREAM says about one stream (all read in one command)."""

    length: int
    entries_added: int
    last_generated: StreamId
    first: StreamId | None


def lost_entries(state: StreamState | None, after: Position) -> int:
    """How many entries above ``after`` are gone (0: none), from the stream's counters.

    Only trims from the head are detected: when the first entry is still at or below
    ``after.id``, nothing above it was trimmed (an XDEL in the middle is a deliberate removal).
    Otherwise every entry that exists is above ``after``, and the stream has had
    ``entries_added - after.n`` entries after it: fewer existing means some were removed.
    """
    if state is None:
        return 0
    if after.n < 0 or (state.first is not None and state.first <= after.id):
        return 0
    return max(0, state.entries_added - after.n - state.length)
