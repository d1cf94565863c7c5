"""Stream-id arithmetic and range splitting of streamworker.spark (no JVM, no Redis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamworker.errors import ConfigError
from streamworker.spark.ranges import (
    MAX_PART,
    IdRange,
    Position,
    StreamId,
    StreamState,
    lost_entries,
    parse_id_option,
    split_range,
)


def test_ids_order_numerically_not_as_text() -> None:
    assert StreamId.parse("9-0") < StreamId.parse("10-0")
    assert StreamId.parse("5-2") < StreamId.parse("5-10")


def test_next_and_prev_cross_the_seq_boundary() -> None:
    assert StreamId(5, MAX_PART).next() == StreamId(6, 0)
    assert StreamId(6, 0).prev() == StreamId(5, MAX_PART)
    assert StreamId(0, 0).prev() is None


@pytest.mark.parametrize("bad", ["", "5", "a-1", "1-", "-1", "1-2-3", f"{2**64}-0"])
def test_parse_rejects_what_is_not_an_id(bad: str) -> None:
    with pytest.raises(ValueError, match="stream entry id"):
        StreamId.parse(bad)


def test_id_option_accepts_a_bare_ms_and_names_the_option_when_bad() -> None:
    assert parse_id_option("startId", "1700") == StreamId(1700, 0)
    with pytest.raises(ConfigError, match="option endId"):
        parse_id_option("endId", "yesterday")


def test_range_xrange_arguments_use_the_exclusive_start() -> None:
    rng = IdRange(StreamId(5, 1), StreamId(9, 0))
    assert (rng.xrange_min, rng.xrange_max) == ("(5-1", "9-0")
    assert IdRange(None, StreamId(9, 0)).xrange_min == "-"


def test_split_gives_k_ranges_at_millisecond_boundaries() -> None:
    ranges = split_range(None, StreamId(100, 0), StreamId(500, 3), 4)
    assert len(ranges) == 4
    assert ranges[0].lo is None
    assert ranges[-1].hi == StreamId(500, 3)
    assert all(r.hi.seq == MAX_PART for r in ranges[:-1])


def test_split_of_a_single_millisecond_is_one_range() -> None:
    assert split_range(None, StreamId(7, 0), StreamId(7, 9), 4) == [IdRange(None, StreamId(7, 9))]


def test_split_of_an_empty_interval_is_nothing() -> None:
    assert split_range(StreamId(9, 0), StreamId(9, 1), StreamId(9, 0), 3) == []


ids = st.builds(StreamId, st.integers(0, 10**6), st.integers(0, 5))


@given(lo=st.none() | ids, first=ids, hi=ids, k=st.integers(1, 9), probe=ids)
def test_split_covers_exactly_the_interval_once(
    lo: StreamId | None, first: StreamId, hi: StreamId, k: int, probe: StreamId
) -> None:
    if lo is not None and first <= lo:
        first = lo.next()
    if first > hi:
        return
    ranges = split_range(lo, first, hi, k)
    assert 1 <= len(ranges) <= k
    for a, b in itertools.pairwise(ranges):
        assert a.hi == b.lo  # consecutive: no gap, no overlap
    inside = (lo is None or probe > lo) and probe <= hi
    assert sum(r.contains(probe) for r in ranges) == (1 if inside else 0)


def state(length: int, added: int, first: str | None) -> StreamState:
    return StreamState(
        length, added, StreamId(99, 0), None if first is None else StreamId.parse(first)
    )


def test_no_loss_while_the_first_entry_is_at_or_below_the_position() -> None:
    assert lost_entries(state(3, 10, "5-0"), Position(StreamId(5, 0), 4)) == 0


def test_trimmed_unread_entries_are_counted() -> None:
    # 10 added, position after the 4th; 3 left: entries 5..7 were trimmed unread.
    assert lost_entries(state(3, 10, "8-0"), Position(StreamId(4, 0), 4)) == 3


def test_trimming_exactly_what_was_read_loses_nothing() -> None:
    assert lost_entries(state(6, 10, "5-0"), Position(StreamId(4, 0), 4)) == 0
    assert lost_entries(state(0, 10, None), Position(StreamId(10, 0), 10)) == 0


def test_an_unknown_count_checks_nothing() -> None:
    assert lost_entries(state(0, 10, None), Position(StreamId(1, 0), -1)) == 0


def test_positions_round_trip_as_text() -> None:
    assert Position.parse("5-1/7") == Position(StreamId(5, 1), 7)
    assert Position.parse(str(Position(StreamId(5, 1), 7))) == Position(StreamId(5, 1), 7)
    assert Position.parse("5-1").n == -1
