"""Capped exponential backoff for reconnects (pure)."""

from __future__ import annotations

import random


class Backoff:
    """Capped exponential backoff with full jitter, for reconnects. Not thread-safe."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        if initial_s <= 0 or max_s < initial_s:
            raise ValueError("need 0 < initial_s <= max_s")
        self.initial_s = initial_s
        self.max_s = max_s
        self.attempt = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The delay before the next attempt; grows x2 per failure up to ``max_s``, jittered to 50-100%."""
        ceiling = min(self.max_s, self.initial_s * (2**self.attempt))
        self.attempt += 1
        return float(ceiling * (0.5 + 0.5 * self._rng.random()))

    def reset(self) -> None:
        """Call after a success: the next failure starts from ``initial_s`` again."""
        self.attempt = 0
