"""observe_many records a batch of values as observe() of each would (it reaches into
prometheus_client's Histogram internals, so a library upgrade that changes them shows here)."""

from __future__ import annotations

import math
import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from streamworker.observability.metrics import Metrics, observe_many

VALUES = [0.0, 0.0004, 0.0005, 0.00051, 0.003, 0.01, 0.7, 2.5, 59.9, 60.0, 61.0, 1e9, -1.0]


def _exposition(values: list[float], bulk: bool) -> str:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    child = metrics.handler_duration.labels(stream="s", group="g", handler="h")
    if bulk:
        observe_many(child, values)
    else:
        for v in values:
            child.observe(v)
    lines = generate_latest(registry).decode().splitlines()
    return "\n".join(
        line for line in lines if "handler_duration" in line and "_created" not in line
    )


def test_bulk_and_one_by_one_give_the_same_histogram() -> None:
    assert _exposition(VALUES, bulk=True) == _exposition(VALUES, bulk=False)
    assert "streamworker_handler_duration_seconds_count" in _exposition(VALUES, bulk=True)


def test_nan_counts_in_the_sum_but_in_no_bucket_as_observe_does() -> None:
    assert _exposition([0.1, math.nan], bulk=True) == _exposition([0.1, math.nan], bulk=False)


def test_nothing_to_record_changes_nothing() -> None:
    assert _exposition([], bulk=True) == _exposition([], bulk=False)


def test_an_object_without_the_internals_gets_observe_per_value() -> None:
    seen: list[float] = []

    class Plain:
        def observe(self, value: float) -> None:
            seen.append(value)

    observe_many(Plain(), [1.0, 2.0])
    assert seen == [1.0, 2.0]


def test_a_histogram_with_its_own_buckets() -> None:
    registry = CollectorRegistry()
    hist = Histogram("h", "doc", buckets=(1, 2, 3), registry=registry)
    observe_many(hist, [0.5, 1, 1.5, 3, 3.5])
    text = generate_latest(registry).decode()
    assert 'h_bucket{le="1.0"} 2.0' in text
    assert 'h_bucket{le="2.0"} 3.0' in text
    assert 'h_bucket{le="3.0"} 4.0' in text
    assert 'h_bucket{le="+Inf"} 5.0' in text
    assert "h_sum 9.5" in text


def test_a_batch_spread_over_every_bucket_and_on_their_bounds() -> None:
    """Counted per bucket from the sorted values: every value lands where observe puts it, those
    equal to a bound included, in any order, with infinity in the last bucket."""
    bounds = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
    rng = random.Random(37)
    values = [rng.uniform(0, 12) for _ in range(300)] + bounds + [math.inf, -5.0, 0.0]
    rng.shuffle(values)
    assert _exposition(values, bulk=True) == _exposition(values, bulk=False)
    # The usual batch: a hundred short durations, all in the first bucket.
    short = [rng.uniform(1e-6, 5e-6) for _ in range(100)]
    assert _exposition(short, bulk=True) == _exposition(short, bulk=False)
