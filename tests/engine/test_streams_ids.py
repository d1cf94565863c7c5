"""Stream ID packing, formatting and Redis 7.0's ID parsers (``streamworker.engine.ids``)."""

from __future__ import annotations

import pytest

from streamworker.engine.ids import (
    MAX_ID,
    MAX_U64,
    decr,
    format_id,
    incr,
    make_id,
    ms_of,
    parse_id,
    parse_interval_id,
    parse_ll,
    parse_strict_id,
    parse_u64,
    parse_xadd_id,
    seq_of,
)


def test_packed_ids_order_like_redis_ids() -> None:
    assert make_id(1, MAX_U64) < make_id(2, 0) < make_id(2, 1)


def test_ms_and_seq_unpack_a_packed_id() -> None:
    sid = make_id(1700000000000, 42)
    assert (ms_of(sid), seq_of(sid)) == (1700000000000, 42)


def test_format_id_writes_ms_dash_seq() -> None:
    assert format_id(make_id(5, 7)) == b"5-7"
    assert format_id(MAX_ID) == b"18446744073709551615-18446744073709551615"


def test_incr_carries_into_ms_and_stops_at_max() -> None:
    assert incr(make_id(1, MAX_U64)) == make_id(2, 0)
    assert incr(MAX_ID) is None


def test_decr_borrows_from_ms_and_stops_at_zero() -> None:
    assert decr(make_id(2, 0)) == make_id(1, MAX_U64)
    assert decr(0) is None


def test_parse_id_accepts_minus_and_plus() -> None:
    assert parse_id(b"-") == 0
    assert parse_id(b"+") == MAX_ID


def test_parse_strict_id_rejects_minus_and_plus() -> None:
    assert parse_strict_id(b"-") is None
    assert parse_strict_id(b"+") is None


def test_bare_ms_takes_the_missing_seq() -> None:
    assert parse_id(b"5") == make_id(5, 0)
    assert parse_id(b"5", MAX_U64) == make_id(5, MAX_U64)


def test_parse_rejects_garbage_and_overflow() -> None:
    for bad in (b"", b"abc", b"1-x", b"1-2-3", b"18446744073709551616-0", b"-5", b"1-"):
        assert parse_id(bad) is None, bad


def test_parse_follows_strtoull_for_blanks_signs_and_leading_zeros() -> None:
    # string2ull falls back to strtoull: blanks, '+', leading zeros, and a wrapping '-'.
    assert parse_id(b" 5-+3") == make_id(5, 3)
    assert parse_id(b"007-01") == make_id(7, 1)
    assert parse_id(b"6--01") == make_id(6, MAX_U64)


def test_parse_stops_at_a_nul_byte_like_c_strings() -> None:
    assert parse_id(b"5-1\x00junk") == make_id(5, 1)


def test_parse_rejects_ids_longer_than_127_bytes() -> None:
    assert parse_id(b"0" * 126 + b"1") == make_id(1, 0)
    assert parse_id(b"0" * 127 + b"1") is None
    assert parse_strict_id(b"0" * 127 + b"1") is None


def test_xadd_id_ms_star_leaves_seq_to_the_stream() -> None:
    assert parse_xadd_id(b"5-*") == (make_id(5, 0), False)
    assert parse_xadd_id(b"5-3") == (make_id(5, 3), True)
    assert parse_xadd_id(b"*-1") is None


def test_interval_parenthesis_means_exclusive_and_strict() -> None:
    assert parse_interval_id(b"(5-1", 0) == (make_id(5, 1), True)
    assert parse_interval_id(b"(-", 0) is None
    assert parse_interval_id(b"(", 0) is None
    assert parse_interval_id(b"5", MAX_U64) == (make_id(5, MAX_U64), False)


def test_parse_u64_bounds() -> None:
    assert parse_u64(b"18446744073709551615") == MAX_U64
    assert parse_u64(b"18446744073709551616") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [(b"0", 0), (b"-1", -1), (b"9223372036854775807", 2**63 - 1), (b"01", None), (b"-0", None)],
)
def test_parse_ll_is_redis_string2ll(text: bytes, value: int | None) -> None:
    assert parse_ll(text) == value
