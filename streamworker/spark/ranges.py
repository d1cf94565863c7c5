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


def split_range(lo: StreamId | None, first: StreamId, hi: StreamId, k: int) -> list[IdRange]:
    """Split ``(lo, hi]`` into at most ``k`` consecutive ranges at millisecond boundaries.

    ``first`` is the first entry above ``lo`` (so cuts are spread over the ms span the stream
    actually holds, not from ``0``). The ranges are disjoint, ordered, and their union is exactly
    ``(lo, hi]``; fewer than ``k`` come back when the span has fewer than ``k`` milliseconds.
    Equal-time cuts can be skewed when the rate varies; each range is still read correctly.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if lo is not None and lo >= hi:
        return []
    start_ms = max(first.ms, lo.ms if lo is not None else 0)
    span = hi.ms - start_ms
    cuts: list[int] = []
    for i in range(1, k):
        cut = start_ms + span * i // k
        # A cut at ms m ends its range at m-MAX: every id of ms m goes to that range.
        if cut < hi.ms and (not cuts or cut > cuts[-1]) and (lo is None or cut >= lo.ms):
            cuts.append(cut)
    ranges: list[IdRange] = []
    prev = lo
    for cut in cuts:
        end = StreamId(cut, MAX_PART)
        if prev is not None and end <= prev:
            continue
        ranges.append(IdRange(prev, end))
        prev = end
    ranges.append(IdRange(prev, hi))
    return ranges


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
