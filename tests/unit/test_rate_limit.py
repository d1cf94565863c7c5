"""``rate_limit=`` and ``RateLimited``: parsing and checking the option at registration (one line
when wrong), the limit's arithmetic, the outcome of a RateLimited, and the invoker's pause."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import structlog

from streamworker import App, ConfigError, Message, RateLimited
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import Action, decide
from streamworker.core.ratelimit import RateLimit, default_burst, parse_rate_limit
from streamworker.observability.metrics import Metrics
from streamworker.runtime.invoker import HandlerInvoker
from streamworker.runtime.threads import HandlerThreads


@pytest.mark.parametrize(
    ("text", "count", "period_s"),
    [
        ("100/s", 100, 1),
        ("6000/min", 6000, 60),
        ("10/h", 10, 3600),
        (" 2.5 / second ", 2.5, 1),
        ("30/minute", 30, 60),
        ("1/hour", 1, 3600),
    ],
)
def test_a_limit_is_a_number_per_second_minute_or_hour(
    text: str, count: float, period_s: int
) -> None:
    limit = parse_rate_limit(text)
    assert limit is not None
    assert (limit.count, limit.period_s) == (count, period_s)


def test_no_limit_is_none() -> None:
    assert parse_rate_limit(None) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (
            "fast",
            "rate_limit must be a number per unit like '100/s', '6000/min' or '10/h', not 'fast'",
        ),
        ("100", "rate_limit must be a number per unit"),
        ("100/ms", "rate_limit must be a number per unit"),
        ("100/m", "rate_limit must be a number per unit"),
        ("-5/s", "rate_limit must be a number per unit"),
        (100, "rate_limit must be a number per unit like '100/s', '6000/min' or '10/h', not 100"),
        ("0/s", "rate_limit must be above 0 per s, not '0/s'"),
        ("0.0/min", "rate_limit must be above 0 per min"),
    ],
)
def test_a_bad_limit_is_refused_at_registration_in_one_line(value: object, says: str) -> None:
    app = App("rate")
    with pytest.raises(ConfigError) as caught:
        app.handler("orders", group="g", rate_limit=value)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("stream 'orders' group 'g': ")
    assert says in text


@pytest.mark.parametrize("burst", [0, -1, 1.5, True, "5"])
def test_a_bad_burst_is_refused_in_one_line(burst: object) -> None:
    with pytest.raises(ConfigError, match=r"rate_limit_burst must be an integer >= 1, got "):
        App("rate").handler("orders", group="g", rate_limit="10/s", rate_limit_burst=burst)  # type: ignore[arg-type]


def test_a_burst_without_a_limit_is_refused() -> None:
    with pytest.raises(ConfigError, match="rate_limit_burst needs rate_limit"):
        App("rate").handler("orders", group="g", rate_limit_burst=5)


def test_a_limit_with_ordered_is_refused() -> None:
    with pytest.raises(ConfigError, match="rate_limit does not combine with ordered=True"):
        App("rate").handler("orders", group="g", rate_limit="10/s", ordered=True)


def test_the_spec_carries_the_limit_with_its_burst() -> None:
    app = App("rate")

    @app.handler("orders", group="g", rate_limit="100/s", rate_limit_burst=3)
    async def handle(msg: Message) -> None: ...

    assert app.handlers[0].rate_limit == RateLimit(count=100, period_s=1, burst=3, text="100/s")


def test_without_a_burst_the_spec_gets_the_default() -> None:
    app = App("rate")

    @app.handler("orders", group="g", rate_limit="6000/min")
    async def handle(msg: Message) -> None: ...

    limit = app.handlers[0].rate_limit
    assert limit is not None
    assert (limit.burst, limit.interval_us) == (6, 10_000)


def test_every_partition_gets_the_one_limit() -> None:
    app = App("rate")

    @app.handler("orders", group="g", partitions=3, rate_limit="90/s")
    async def handle(msg: Message) -> None: ...

    assert {s.rate_limit.text for s in app.handlers if s.rate_limit} == {"90/s"}
    assert len(app.handlers) == 3


@pytest.mark.parametrize(
    ("per_second", "burst"), [(0.001, 1), (1, 1), (19.9, 1), (20, 2), (100, 6), (1000, 51)]
)
def test_the_default_burst_is_a_twentieth_of_a_second_of_the_limit(
    per_second: float, burst: int
) -> None:
    assert default_burst(per_second) == burst


@pytest.mark.parametrize(
    "text", ["1/s", "5/s", "19/s", "20/s", "100/s", "6000/min", "250/s", "10/h"]
)
def test_without_a_burst_no_one_second_window_exceeds_the_limit_by_a_fifth(text: str) -> None:
    # GCRA grants at most burst - 1 above the rate in any window, and one grant (at most a
    # burst) taken a batch ahead may start in the next: within a fifth of the limit per second
    # (or of one start, for limits below 5/s).
    limit = parse_rate_limit(text)
    assert limit is not None
    per_window = 2 * (limit.burst - 1) + limit.per_second
    assert per_window <= max(1.0, limit.per_second * 1.2)


def test_the_interval_is_rounded_up_so_the_limit_is_never_exceeded() -> None:
    limit = parse_rate_limit("7/s")
    assert limit is not None
    assert limit.interval_us == 142_858
    assert 1_000_000 / limit.interval_us <= 7


def test_rate_limited_is_left_pending_for_its_time_and_never_dead_lettered() -> None:
    # Even on the last allowed delivery: the pause is not the message's failure.
    outcome = decide(RateLimited(retry_after_ms=2_500), delivery_count=5, max_deliveries=5)
    assert outcome.action is Action.LEAVE_PENDING
    assert outcome.rate_limited
    assert outcome.retry_delay_ms == 2_500
    assert not outcome.preset


@pytest.mark.parametrize("bad", [-1, 1.5, None])
def test_rate_limited_needs_a_whole_number_of_ms(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        RateLimited(retry_after_ms=bad)


def _message(n: str) -> Message[Any]:
    return Message(id=f"{n}-0", stream="s", group="g", consumer="c", fields={"n": n}, body=None)


async def _invoker(app: App) -> HandlerInvoker:
    spec = app.handlers[0]
    resolver = Resolver()
    await resolver.start([spec.plan])
    return HandlerInvoker(
        spec,
        resolver=resolver,
        threads=HandlerThreads(1),
        metrics=Metrics(),
        stopping=threading.Event().is_set,
        log=structlog.get_logger("test"),
    )


async def test_after_a_rate_limited_the_invoker_starts_no_handler_until_the_pause_ends() -> None:
    app = App("rate")
    ran: list[str] = []

    @app.handler("s", group="g")
    async def handle(msg: Message) -> None:
        ran.append(msg.fields["n"])
        if msg.fields["n"] == "1":
            raise RateLimited(retry_after_ms=60_000)

    invoke = await _invoker(app)
    first = await invoke(_message("1"), {})
    second = await invoke(_message("2"), {})
    assert ran == ["1"]
    assert first.rate_limited
    assert not first.preset
    # Not started: preset (nothing written), retried when the pause is over.
    assert second.rate_limited
    assert second.preset
    assert 59_000 < (second.retry_delay_ms or 0) <= 60_001


async def test_a_batch_run_in_one_loop_starts_nothing_after_a_rate_limited() -> None:
    app = App("rate")
    ran: list[str] = []

    @app.handler("s", group="g")
    async def handle(msg: Message) -> None:
        ran.append(msg.fields["n"])
        if msg.fields["n"] == "2":
            raise RateLimited(retry_after_ms=60_000)

    invoke = await _invoker(app)
    outcomes: list[Any] = []
    await invoke.run_each([_message(str(n)) for n in range(1, 5)], {}, outcomes)
    assert ran == ["1", "2"]
    assert [o.rate_limited for o in outcomes] == [False, True, True, True]
    assert [o.preset for o in outcomes[1:]] == [False, True, True]
