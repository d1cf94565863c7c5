"""Sorted set: members ordered by (score, member bytes), O(log n) updates and rank queries."""

from __future__ import annotations

import math
from collections.abc import Iterator

from sortedcontainers import SortedList

__all__ = ["LexBound", "ScoreBound", "ZSet"]


class ScoreBound:
    """A score range end: ``value`` with ``exclusive`` (``(1.5``)."""

    __slots__ = ("exclusive", "value")

    def __init__(self, value: float, exclusive: bool = False) -> None:
        self.value = value
        self.exclusive = exclusive


class LexBound:
    """A lex range end: ``-`` (``kind=-1``), ``+`` (``kind=1``) or a member (``kind=0``)."""

    __slots__ = ("exclusive", "kind", "value")

    def __init__(self, value: bytes, exclusive: bool, kind: int = 0) -> None:
        self.value = value
        self.exclusive = exclusive
        self.kind = kind

    def gte_min(self, member: bytes) -> bool:
        """``member`` is above this bound used as a minimum."""
        if self.kind:
            return self.kind < 0
        return member > self.value if self.exclusive else member >= self.value

    def lte_max(self, member: bytes) -> bool:
        """``member`` is below this bound used as a maximum."""
        if self.kind:
            return self.kind > 0
        return member < self.value if self.exclusive else member <= self.value


class ZSet:
    """Members with float scores, ordered like Redis (score, then member bytewise).

    ``big`` is the encoding history Redis keeps: False while Redis would hold the set as a
    listpack, True once it has been converted to a skiplist (Redis never converts back; the
    commands set it where Redis converts). A listpack stores a -0 score as 0, a skiplist keeps
    -0, so :meth:`add` keeps the sign of a zero only when ``big``.
    """

    __slots__ = ("big", "order", "scores")

    def __init__(self, big: bool = False) -> None:
        self.scores: dict[bytes, float] = {}
        self.order = SortedList()
        self.big = big

    def __len__(self) -> int:
        return len(self.scores)

    def __contains__(self, member: object) -> bool:
        return member in self.scores

    def score(self, member: bytes) -> float | None:
        """The member's score or None."""
        return self.scores.get(member)

    def add(self, member: bytes, score: float) -> bool:
        """Insert or update; True if the member is new."""
        if score == 0.0 and not self.big:
            # Redis's listpack encoding stores -0 as 0; its skiplist keeps the sign.
            score = 0.0
        old = self.scores.get(member)
        if old is not None:
            if old == score:
                return False
            self.order.remove((old, member))
        self.scores[member] = score
        self.order.add((score, member))
        return old is None

    def remove(self, member: bytes) -> bool:
        """Remove ``member``; True if it was there."""
        old = self.scores.pop(member, None)
        if old is None:
            return False
        self.order.remove((old, member))
        return True

    def rank(self, member: bytes) -> int | None:
        """0-based rank in ascending order, or None."""
        score = self.scores.get(member)
        if score is None:
            return None
        return int(self.order.index((score, member)))

    def at(self, index: int) -> tuple[float, bytes]:
        """The (score, member) at ascending rank ``index``."""
        item: tuple[float, bytes] = self.order[index]
        return item

    def items_between(self, start: int, stop: int) -> list[tuple[float, bytes]]:
        """(score, member) pairs with ascending ranks in ``[start, stop)``."""
        return list(self.order.islice(start, stop))

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        return iter(self.order)

    # -- score ranges ------------------------------------------------------------------------

    def first_rank_gte(self, low: ScoreBound) -> int:
        """The first ascending rank whose score is inside ``low`` (as a minimum)."""
        v = low.value
        if low.exclusive:
            if v == math.inf:
                return len(self.order)
            v = math.nextafter(v, math.inf)
        return int(self.order.bisect_left((v,)))

    def end_rank_lte(self, high: ScoreBound) -> int:
        """One past the last ascending rank whose score is inside ``high`` (as a maximum)."""
        v = high.value
        if not high.exclusive:
            if v == math.inf:
                return len(self.order)
            v = math.nextafter(v, math.inf)
        return int(self.order.bisect_left((v,)))

    def score_range(self, low: ScoreBound, high: ScoreBound) -> tuple[int, int]:
        """Ascending ranks ``[start, stop)`` of the members with scores in the range."""
        if low.value > high.value or (
            low.value == high.value and (low.exclusive or high.exclusive)
        ):
            return 0, 0
        start = self.first_rank_gte(low)
        stop = self.end_rank_lte(high)
        return start, max(start, stop)

    # -- lex ranges (meaningful when all scores are equal, as in Redis) -----------------------

    def _lex_search(self, pred_fail: bool, bound: LexBound, as_min: bool) -> int:
        # First rank where the predicate flips, assuming members ordered (equal scores).
        lo, hi = 0, len(self.order)
        while lo < hi:
            mid = (lo + hi) // 2
            member = self.order[mid][1]
            ok = bound.gte_min(member) if as_min else not bound.lte_max(member)
            if ok:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def lex_range(self, low: LexBound, high: LexBound) -> tuple[int, int]:
        """Ascending ranks ``[start, stop)`` of the members within the lex range."""
        if not _lex_nonempty(low, high):
            return 0, 0
        start = self._lex_search(True, low, True)
        stop = self._lex_search(True, high, False)
        return start, max(start, stop)


def _lex_nonempty(low: LexBound, high: LexBound) -> bool:
    # Redis's zslIsInLexRange precheck on the bounds themselves.
    if low.kind == 1 or high.kind == -1:
        return False
    if low.kind == -1 or high.kind == 1:
        return True
    if low.value > high.value:
        return False
    return not (low.value == high.value and (low.exclusive or high.exclusive))
