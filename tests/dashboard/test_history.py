"""The dashboard's pure parts: the one-hour history rings, charts, thresholds, the login
throttle and the dead-letter filter."""

from __future__ import annotations

import dataclasses

import pytest

from streamworker.dashboard.bulk import DeadLetterFilter
from streamworker.dashboard.charts import nice_ceiling, time_chart, time_step
from streamworker.dashboard.history import SERIES_BYTES, SLOTS, UNKNOWN, History
from streamworker.dashboard.overview import CRIT, OK, WARN, Thresholds, grade
from streamworker.dashboard.security import LoginThrottle
from streamworker.errors import ConfigError


def test_a_series_keeps_one_sample_per_second_the_latest_winning() -> None:
    h = History()
    for i in range(6):  # twice a second
        h.record("s", "g", (i, 0, 0, i, 0), at=1000.0 + i * 0.5)
    samples = h.samples("s", "g", 0, 2000)
    assert [s.second for s in samples] == [1000, 1001, 1002]
    assert [s.added for s in samples] == [1, 3, 5]


def test_a_series_forgets_what_is_older_than_its_slots() -> None:
    h = History(slots=60)
    for t in range(1000, 1100):
        h.record("s", "g", (t, 0, 0, 0, 0), at=t)
    samples = h.samples("s", "g", 0, 1099)
    assert samples[0].second == 1040
    assert len(samples) == 60


def test_memory_is_fixed_per_series_and_bounded_by_the_series_limit() -> None:
    h = History(max_series=3)
    for i in range(5):
        h.record(f"s{i}", "g", (0, 0, 0, 0, 0), at=1000)
    assert h.keys() == [("s2", "g"), ("s3", "g"), ("s4", "g")]  # the least recently updated go
    assert h.memory_bytes == 3 * SERIES_BYTES
    assert SERIES_BYTES == 6 * 8 * SLOTS == 172_800


def test_rates_are_counter_differences_over_time() -> None:
    h = History()
    # 10 added and 4 done per second; 1 dead letter every 2 seconds.
    for i in range(11):
        h.record("s", "g", (10 * i, 4 * i, i // 2, 6 * i, 0), at=1000 + i)
    rates = h.rates("s", "g", 1000, 1010)
    assert len(rates) == 10
    assert all(r.added == 10 and r.done == 4 for r in rates)
    recent = h.recent_rates("s", "g", window_s=10)
    assert recent is not None
    assert (recent.added, recent.done, recent.dead) == (10.0, 4.0, 0.5)


def test_bucketed_rates_average_over_each_bucket_and_lose_nothing() -> None:
    h = History()
    for i in range(601):
        h.record("s", "g", (3 * i, 0, 0, 0, 0), at=1000 + i)
    rates = h.rates("s", "g", 1000, 1600, buckets=60)
    assert len(rates) == 60
    assert all(r.added == 3 for r in rates)
    assert rates[0].start == 1000
    assert rates[-1].end == 1600


def test_a_counter_that_went_down_or_is_unknown_has_no_negative_rate() -> None:
    h = History()
    h.record("s", "g", (100, UNKNOWN, 0, 0, UNKNOWN), at=1000)
    h.record("s", "g", (5, UNKNOWN, 0, 0, UNKNOWN), at=1001)  # stream deleted and re-created
    (r,) = h.rates("s", "g", 1000, 1001)
    assert r.added == 0
    assert r.done is None
    assert r.lag is None


def test_a_chart_of_one_sample_draws_a_point_with_axes() -> None:
    c = time_chart("t", "entries", [("pending", "pending", [(1000.0, 5.0)])], 999.0, 1000.0)
    (line,) = c.lines
    assert line.last is not None  # drawn from the first sample
    assert c.samples == 1
    assert [label for _, label in c.y_ticks] == ["0", "2", "4", "6", "8"]
    assert c.x_ticks  # a time axis even over one second


def test_a_chart_breaks_its_line_where_a_value_is_unknown() -> None:
    pts = [(1000.0, 1.0), (1001.0, None), (1002.0, 2.0)]
    c = time_chart("t", "entries", [("lag", "lag", pts)], 1000.0, 1002.0)
    assert c.lines[0].path.count("M") == 2


def test_time_ticks_are_round_and_few() -> None:
    assert time_step(60) == 10
    assert time_step(3600) == 600
    c = time_chart("t", "entries/s", [("a", "added", [])], 3600.0 * 10, 3600.0 * 11)
    assert [label for _, label in c.x_ticks] == [
        "10:00",
        "10:10",
        "10:20",
        "10:30",
        "10:40",
        "10:50",
        "11:00",
    ]


@pytest.mark.parametrize(("value", "top"), [(0, 1), (0.3, 0.5), (7, 10), (10, 10), (11, 20)])
def test_the_value_axis_ends_at_a_round_number(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)


def test_thresholds_parse_a_spec_and_grade_values() -> None:
    t = Thresholds.parse("work_left=10/100,dead_letters=5/50")
    assert t.work_left == (10, 100)
    assert t.oldest_pending_s == Thresholds().oldest_pending_s
    assert [grade(v, t.work_left) for v in (0, 9, 10, 99, 100, None)] == [
        OK,
        OK,
        WARN,
        WARN,
        CRIT,
        OK,
    ]
    assert Thresholds.parse(t.spec()) == t


@pytest.mark.parametrize(
    "spec", ["work_left=10", "nope=1/2", "work_left=a/b", "work_left=10/5", "work_left=-1/5"]
)
def test_bad_thresholds_are_a_clear_error(spec: str) -> None:
    with pytest.raises(ConfigError, match="bad threshold"):
        Thresholds.parse(spec)


def test_thresholds_from_the_query_override_the_configured_ones() -> None:
    t = Thresholds().with_query({"work_left_warn": "5", "oldest_pending_s_crit": "120"})
    assert t.work_left == (5, Thresholds().work_left[1])
    assert t.oldest_pending_s == (Thresholds().oldest_pending_s[0], 120)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_login_attempts_are_limited_per_client_address() -> None:
    clock = FakeClock()
    throttle = LoginThrottle(per_client=3, overall=100, window_s=60, clock=clock)
    assert [throttle.admit("10.0.0.1") for _ in range(3)] == [None, None, None]
    refused = throttle.admit("10.0.0.1")
    assert refused is not None
    assert refused[0] == "client"
    assert refused[1] == pytest.approx(60)
    assert throttle.admit("10.0.0.2") is None  # another address is not held back
    clock.now += 60
    assert throttle.admit("10.0.0.1") is None  # the window moved on


def test_login_attempts_are_limited_overall() -> None:
    throttle = LoginThrottle(per_client=100, overall=5, window_s=60, clock=FakeClock())
    for i in range(5):
        assert throttle.admit(f"10.0.0.{i}") is None
    refused = throttle.admit("10.0.0.99")
    assert refused is not None
    assert refused[0] == "overall"


def test_a_successful_login_clears_its_address() -> None:
    throttle = LoginThrottle(per_client=2, overall=100, window_s=60, clock=FakeClock())
    throttle.admit("a")
    throttle.admit("a")
    throttle.succeeded("a")
    assert throttle.admit("a") is None


def test_the_throttle_remembers_a_bounded_number_of_addresses() -> None:
    throttle = LoginThrottle(per_client=1, overall=10_000, window_s=60, max_clients=10)
    for i in range(50):
        throttle.admit(f"10.0.{i}.1")
    assert throttle.admit("10.0.0.1") is None  # forgotten: the oldest went first


def test_the_dead_letter_filter_matches_error_text_and_handler() -> None:
    flt = DeadLetterFilter(error="DECLINED", handler="app.bill")
    s = {"dlq_stream": "orders"}
    assert flt.matches({**s, "dlq_error": "card declined for order 5", "dlq_handler": "app.bill"})
    assert not flt.matches({**s, "dlq_error": "card declined", "dlq_handler": "app.ship"})
    assert not flt.matches({**s, "dlq_error": "timeout", "dlq_handler": "app.bill"})
    assert DeadLetterFilter().matches(s)


def test_the_dead_letter_filter_never_matches_an_entry_that_is_not_a_dead_letter() -> None:
    assert not DeadLetterFilter().matches({})
    assert not DeadLetterFilter(error="x").matches({"dlq_error": "x"})


def test_the_dead_letter_filter_turns_ages_into_an_id_range() -> None:
    flt = DeadLetterFilter(older_than_s=60, newer_than_s=3600)
    assert flt.id_range(at_ms=10_000_000) == (str(10_000_000 - 3_600_000), str(10_000_000 - 60_000))
    assert DeadLetterFilter().id_range() == ("-", "+")


def test_a_bad_age_in_the_filter_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="older_than_s must be a whole number"):
        DeadLetterFilter.from_params({"older_than_s": "soon"})


def test_a_heartbeat_older_than_half_its_time_to_live_is_late() -> None:
    from streamworker.dashboard.workers import parse_heartbeat

    fresh = parse_heartbeat("s", "g", "c", {b"beat_at_ms": b"1000"}, 14_000)
    assert not dataclasses.replace(fresh, read_at_ms=2000).late  # 1 s old, 14 s to live
    assert dataclasses.replace(fresh, read_at_ms=10_000, ttl_ms=6000).late  # 9 s old, 6 s left
