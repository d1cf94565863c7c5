"""The timing model's invariants (streamworker.core.timing), for every ``claim_idle_ms`` from the
smallest safe one up: each is the reason an entry cannot be claimed away while it is used."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamworker import Message
from streamworker.app import App
from streamworker.core import timing

# Up to a day: the App accepts any positive value; the arithmetic must hold across the range.
claim_idle = st.integers(min_value=timing.MIN_SAFE_CLAIM_IDLE_MS, max_value=86_400_000)


@given(claim_idle)
def test_a_held_entry_is_renewed_before_it_can_be_claimed_even_when_its_batch_started_late(
    c: int,
) -> None:
    # Worst unchecked case: handlers start just under the late threshold after the read was
    # sent, and the first renewal comes a full period later.
    assert timing.late_reply_ms(c) + timing.renew_interval_ms(c) < c
    assert timing.renewal_slack_ms(c) > 0


@given(claim_idle)
def test_the_renewal_slack_is_at_least_a_sixth_of_claim_idle(c: int) -> None:
    """5/12 of claim_idle_ms once the renewal period is a third of it; never below 1/6 (what
    half as a late threshold would leave) wherever the floor of the period does not apply."""
    if c // 3 >= timing.MIN_RENEW_INTERVAL_MS:
        assert timing.renewal_slack_ms(c) >= c / 6


@given(claim_idle)
def test_a_late_batch_is_never_fresh_on_the_strength_of_its_first_read(c: int) -> None:
    assert timing.late_reply_ms(c) < timing.fresh_batch_window_ms(c)


@given(claim_idle)
def test_a_fresh_batch_is_used_before_anyone_may_claim_its_entries(c: int) -> None:
    assert timing.fresh_batch_window_ms(c) < c


@given(claim_idle)
def test_an_unchecked_sql_claim_completes_before_anyone_may_claim_the_entries(c: int) -> None:
    """The SQL strategy skips its ownership check for a claim that completes within its window
    after a fresh batch began: read + fresh window + claim window stays below claim_idle_ms,
    with slack for the moments between the freshness test and the strategy's start."""
    used = timing.fresh_batch_window_ms(c) + timing.sql_fresh_claim_window_ms(c)
    assert used < c
    assert c - used >= c * 0.05 * (1 - 1e-9)


@given(claim_idle)
def test_the_reclaimer_looks_for_abandoned_entries_often_enough(c: int) -> None:
    interval = timing.claim_interval_ms(c)
    assert 50 <= interval <= 5_000
    assert interval <= max(50, c // 2)


@given(st.integers(min_value=timing.MIN_SAFE_CLAIM_IDLE_MS, max_value=86_400_000))
def test_a_partition_lock_is_renewed_twice_within_the_time_its_holder_trusts_it(
    ttl: int,
) -> None:
    renew = timing.partition_lock_renew_interval_ms(ttl)
    trusted = timing.partition_lock_trusted_ms(ttl)
    # Trusted for less than it lives: a stalled holder stops before another may take it over.
    assert trusted < ttl
    # And a renewal that fails once still leaves the next one inside the trusted time.
    assert 2 * renew < trusted


@given(claim_idle)
def test_the_handler_spec_takes_its_periods_from_the_timing_model(c: int) -> None:
    app = App("t")
    app.handler("s", group="g", claim_idle_ms=c)(_handle)
    spec = app.handlers[0]
    assert spec.lease_interval_ms == timing.renew_interval_ms(c)
    assert spec.claim_interval_ms == timing.claim_interval_ms(c)
    assert spec.partition_lock_ttl_ms == timing.partition_lock_ttl_ms(c) == c


async def _handle(msg: Message) -> None: ...
