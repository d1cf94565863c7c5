"""``math.random``: Redis's own generator (its state outlives the Lua state)."""

from __future__ import annotations


class Rand48:
    """Redis's ``redisLrand48``: the 48-bit linear congruential generator of ``lrand48``, with
    its state shared by every script (and seeded only by ``math.randomseed``)."""

    __slots__ = ("x",)

    def __init__(self) -> None:
        self.x = 0x1234ABCD330E

    def seed(self, value: int) -> None:
        """``srand48``: the seed's low 32 bits become the state's high bits."""
        self.x = ((value & 0xFFFFFFFF) << 16) | 0x330E

    def next(self) -> int:
        """The next 31-bit value."""
        self.x = (0x5DEECE66D * self.x + 0xB) & 0xFFFFFFFFFFFF
        return self.x >> 17
