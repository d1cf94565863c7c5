"""The longest common subsequence of two byte strings, as Redis 7.0's LCS command finds it.

Redis fills a ``(len(a)+1) x (len(b)+1)`` table of uint32 prefix-LCS lengths and walks it back
from the bottom-right corner. :class:`LcsTable` answers the same table lookups from a compact
form: the bit-parallel rows of Hyyrö's algorithm (one bit per cell, rows over the shorter
string), so memory is 1/32 of Redis's table and the forward pass is a few big-integer
operations per row. :func:`walk_back` is Redis's walk, step for step (its tie-breaking decides
which of several longest subsequences comes back, and the ranges IDX reports).

Callers bound the sizes first (Redis refuses when the table would exceed
``proto-max-bulk-len``); nothing here allocates more than ``(min+1) * max / 8`` bytes plus a
transient copy of the longer string.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LcsMatch", "LcsResult", "LcsTable", "walk_back"]

# Single steps along the longer string before the walk tries to jump over the rest of a run.
_JUMP_AFTER = 16


class LcsTable:
    """``at(i, j)`` = the LCS length of ``a[:i]`` and ``b[:j]``, for any ``0 <= i <= len(a)``,
    ``0 <= j <= len(b)``. Lookups that move one cell at a time along the longer string are
    O(1); the first lookup in a row costs a popcount over that row."""

    __slots__ = ("_a_rows", "_cache", "_masks", "_rows", "_short", "_width")

    def __init__(self, a: bytes, b: bytes) -> None:
        self._a_rows = len(a) <= len(b)
        short, long_ = (a, b) if self._a_rows else (b, a)
        self._short = short
        width = len(long_)
        self._width = width
        nbytes = (width + 7) // 8
        self._rows: list[bytes] = []
        # Each row's last answered (column, value), so that walking along it is O(1) a step.
        self._cache: dict[int, tuple[int, int]] = {}
        self._masks: dict[int, int] = {}
        if not width:
            self._rows = [b""] * (len(short) + 1)
            return
        full = (1 << width) - 1
        # Position masks of the longer string per byte value, built in C: translate to
        # "0"/"1" text, reversed so that position 0 is the least significant bit.
        masks = self._masks
        for x in set(short):
            table = bytearray(b"0" * 256)
            table[x] = ord("1")
            masks[x] = int(long_.translate(bytes(table))[::-1], 2)
        v = full
        rows = [v.to_bytes(nbytes, "little")]
        for x in short:
            u = v & masks[x]
            v = ((v + u) | (v - u)) & full
            rows.append(v.to_bytes(nbytes, "little"))
        self._rows = rows

    def _bit(self, row: bytes, col: int) -> int:
        return (row[col >> 3] >> (col & 7)) & 1

    def _row_value(self, r: int, c: int) -> int:
        """LCS of the first ``r`` bytes of the shorter string and ``c`` of the longer: the
        zero bits among the row's lowest ``c``."""
        row = self._rows[r]
        cached = self._cache.get(r)
        if cached is not None and abs(cached[0] - c) <= 64:
            c0, v0 = cached
            if c0 >= c:
                value = v0 - sum(1 - self._bit(row, k) for k in range(c, c0))
            else:
                value = v0 + sum(1 - self._bit(row, k) for k in range(c0, c))
        else:
            prefix = int.from_bytes(row[: (c + 7) // 8], "little") & ((1 << c) - 1)
            value = c - prefix.bit_count()
        self._cache[r] = (c, value)
        return value

    def at(self, i: int, j: int) -> int:
        """LCS length of ``a[:i]`` and ``b[:j]``."""
        if not self._width:
            return 0
        return self._row_value(i, j) if self._a_rows else self._row_value(j, i)

    @property
    def a_is_short(self) -> bool:
        """Whether ``a`` is the shorter string (its index moves between rows)."""
        return self._a_rows

    def run_end(self, r: int, c: int) -> int:
        """For a walk at short index ``r`` (>= 1) and long index ``c`` that mismatches and moves
        along the longer string: the long index where that run of identical moves lands.

        Nothing can change before a column where row ``r`` or ``r-1`` steps up (a zero bit)
        or the longer string holds ``short[r-1]``; every cell above the highest such column
        ``k`` below ``c`` takes the same move, so the walk lands at ``k + 1`` (0 if none)."""
        keep = (1 << c) - 1
        nbytes = (c + 7) // 8
        row = int.from_bytes(self._rows[r][:nbytes], "little")
        above = int.from_bytes(self._rows[r - 1][:nbytes], "little")
        events = ((~row | ~above) & keep) | (self._masks[self._short[r - 1]] & keep)
        return events.bit_length()


@dataclass
class LcsMatch:
    """One range of IDX's ``matches``: ``a[a_start..a_end]`` equals ``b[b_start..b_end]``."""

    a_start: int
    a_end: int
    b_start: int
    b_end: int

    @property
    def length(self) -> int:
        """Bytes in the match."""
        return self.a_end - self.a_start + 1


@dataclass
class LcsResult:
    """What the walk back found: the subsequence and the matches (last first, as Redis
    emits them) of at least ``min_len`` bytes."""

    text: bytes
    matches: list[LcsMatch] = field(default_factory=list)


def walk_back(a: bytes, b: bytes, table: LcsTable, min_len: int) -> LcsResult:
    """Redis's walk from ``(len(a), len(b))``: on equal bytes take the byte and go diagonal;
    else go up (shorter ``a``) only when that keeps a strictly longer LCS, otherwise left.
    Ranges of consecutive matches are emitted when they end, those shorter than ``min_len``
    (0 = all) left out."""
    alen, blen = len(a), len(b)
    out = bytearray()
    matches: list[LcsMatch] = []
    i, j = alen, blen
    a_short = table.a_is_short
    streak = 0  # consecutive moves along the longer string
    unset = alen  # Redis's "no open range" marker
    a_start = unset
    a_end = b_start = b_end = 0
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            out.append(a[i - 1])
            if a_start == unset:
                a_start = a_end = i - 1
                b_start = b_end = j - 1
            elif a_start == i and b_start == j:
                a_start -= 1
                b_start -= 1
            else:
                emit = True
            if a_start == 0 or b_start == 0:
                emit = True
            i -= 1
            j -= 1
        else:
            up = table.at(i - 1, j) > table.at(i, j - 1)
            if a_start != unset:
                emit = True
            if up == a_short:
                # A move between rows (at most min(len) of them in all).
                streak = 0
                if up:
                    i -= 1
                else:
                    j -= 1
            else:
                streak += 1
                # After a few single steps along the longer string, jump to where the run
                # of such moves ends (each attempt costs a scan of one row).
                if streak >= _JUMP_AFTER:
                    streak = 0
                    if up:
                        i = min(i - 1, table.run_end(j, i))
                    else:
                        j = min(j - 1, table.run_end(i, j))
                elif up:
                    i -= 1
                else:
                    j -= 1
        if emit:
            found = LcsMatch(a_start, a_end, b_start, b_end)
            if min_len == 0 or found.length >= min_len:
                matches.append(found)
            a_start = unset
    out.reverse()
    return LcsResult(bytes(out), matches)
