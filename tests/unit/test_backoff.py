"""Reconnect backoff: grows, is capped, resets."""

from __future__ import annotations

import random

import pytest

from streamworker.runtime.backoff import Backoff


def test_backoff_doubles_up_to_the_cap() -> None:
    b = Backoff(0.1, 1.0, rng=random.Random(1))
    ceilings = []
    for _ in range(8):
        d = b.next_delay()
        ceilings.append(d)
    assert all(0.05 <= d <= 1.0 for d in ceilings)
    assert max(ceilings[5:]) > 0.5  # reached the cap region


def test_backoff_is_jittered_within_half_to_full_ceiling() -> None:
    b = Backoff(1.0, 1.0, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(50)]
    assert all(0.5 <= d <= 1.0 for d in delays)
    assert len(set(delays)) > 1


def test_backoff_reset_starts_over() -> None:
    b = Backoff(0.1, 10.0, rng=random.Random(3))
    for _ in range(6):
        b.next_delay()
    b.reset()
    assert b.next_delay() <= 0.1


def test_backoff_rejects_initial_above_max() -> None:
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(2.0, 1.0)
