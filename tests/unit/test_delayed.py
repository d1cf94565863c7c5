"""Delayed delivery's pure parts: what a delay means, what is refused (one line each), the
envelope a delayed entry is kept in, and the CLI's durations."""

from __future__ import annotations

import datetime

import pytest

from streamworker.cli.produce import parse_duration_ms
from streamworker.errors import ConfigError
from streamworker.io.keys import delayed_key, partition_stream
from streamworker.producing.delayed import (
    PAST_TOLERANCE_MS,
    decode_envelope,
    due_time,
    encode_envelope,
    marker_value,
    parse_marker,
)
from streamworker.producing.producer import StreamOptions, plan_publish

NOW = 1_800_000_000_000
UTC = datetime.UTC


def at(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, UTC)


def test_no_delay_is_a_plain_publish() -> None:
    assert due_time(None, None, now=NOW) is None


def test_delay_ms_is_counted_from_now() -> None:
    assert due_time(2_000, now=NOW) == NOW + 2_000
    assert due_time(0, now=NOW) == NOW


def test_deliver_at_is_its_epoch_ms() -> None:
    assert due_time(deliver_at=at(NOW + 5_000), now=NOW) == NOW + 5_000


def test_deliver_at_in_another_zone_is_the_same_instant() -> None:
    tz = datetime.timezone(datetime.timedelta(hours=9))
    assert due_time(deliver_at=at(NOW + 5_000).astimezone(tz), now=NOW) == NOW + 5_000


def test_deliver_at_slightly_past_is_due_now() -> None:
    assert due_time(deliver_at=at(NOW - PAST_TOLERANCE_MS), now=NOW) == NOW


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delay_ms": -1}, "delay_ms must be >= 0, not -1"),
        ({"delay_ms": 1.5}, "delay_ms must be an integer number of ms >= 0, not 1.5"),
        ({"delay_ms": True}, "delay_ms must be an integer number of ms >= 0, not True"),
        ({"delay_ms": 1, "deliver_at": at(NOW)}, "give delay_ms or deliver_at, not both"),
        ({"deliver_at": NOW + 10}, "deliver_at must be a timezone-aware datetime"),
        ({"deliver_at": datetime.datetime(2030, 1, 1)}, "deliver_at must be timezone-aware"),
        ({"deliver_at": at(NOW - PAST_TOLERANCE_MS - 1_500)}, "2.5 s in the past"),
    ],
)
def test_a_bad_delay_is_refused_with_one_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        due_time(now=NOW, **kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_delay_with_an_explicit_id_is_refused() -> None:
    with pytest.raises(ConfigError, match="id= cannot be combined with delay_ms/deliver_at"):
        plan_publish("orders", {"a": 1}, StreamOptions(), id="1-1", delay_ms=10)


def test_a_delayed_plan_keeps_its_partition_and_trimming() -> None:
    options = StreamOptions(partitions=4, maxlen=100)
    plan = plan_publish("orders", {"a": 1}, options, partition_key="c-1", delay_ms=60_000)
    assert plan.due_ms is not None
    assert plan.stream.startswith("{orders:p")
    assert delayed_key(plan.stream) == f"{plan.stream}:delayed"
    assert (plan.trim, plan.threshold, plan.id) == ("MAXLEN", "100", "*")


def test_delayed_keys_share_the_stream_hash_tag() -> None:
    assert delayed_key("orders") == "{orders}:delayed"
    assert delayed_key("{shop}:orders") == "{shop}:orders:delayed"
    assert delayed_key(partition_stream("orders", 3)) == "{orders:p3}:delayed"


def test_an_envelope_round_trips_any_bytes() -> None:
    fields = {"text": "é:1:x", "empty": "", "nul": "a\x00b", "12:colon": "3:abc"}
    member = encode_envelope(fields, "MINID", False, "1700000000000-0", nonce=b"n1")
    env = decode_envelope(member)
    assert env.fields == {k.encode(): v.encode() for k, v in fields.items()}
    assert (env.nonce, env.trim, env.approximate, env.threshold) == (
        b"n1",
        "MINID",
        False,
        "1700000000000-0",
    )


def test_equal_publishes_are_distinct_members_in_publish_order() -> None:
    first = encode_envelope({"a": "1"})
    second = encode_envelope({"a": "1"})
    assert first != second
    assert first < second


def test_a_marker_records_an_id_or_a_due_time() -> None:
    assert parse_marker(marker_value(NOW)) == (None, NOW)
    assert parse_marker("1700000000000-3") == ("1700000000000-3", None)


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("2s", 2_000), ("1.5m", 90_000), ("1h", 3_600_000)]
)
def test_cli_durations_are_read_in_ms(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["-2s", "2", "2 days", "s", ""])
def test_a_bad_cli_duration_is_refused_with_one_line(text: str) -> None:
    with pytest.raises(ConfigError, match="--delay must be a duration >= 0"):
        parse_duration_ms(text)
