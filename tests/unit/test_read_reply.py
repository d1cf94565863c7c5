"""Parsing XREADGROUP replies in every shape redis-py may hand them over."""

from __future__ import annotations

from streamworker.redisio import Entry, parse_read_reply


def test_null_reply_is_empty() -> None:
    assert parse_read_reply(None, b"s") == []
    assert parse_read_reply([], b"s") == []
    assert parse_read_reply({}, b"s") == []


def test_resp2_shape() -> None:
    reply = [[b"s", [(b"1-0", {b"a": b"1"}), (b"2-0", {b"b": b"2"})]]]
    assert parse_read_reply(reply, b"s") == [
        Entry(b"1-0", {b"a": b"1"}),
        Entry(b"2-0", {b"b": b"2"}),
    ]


def test_resp3_wrapped_shape() -> None:
    reply = {b"s": [[(b"1-0", {b"a": b"1"})]]}
    assert parse_read_reply(reply, b"s") == [Entry(b"1-0", {b"a": b"1"})]


def test_resp3_wrapped_empty_history() -> None:
    assert parse_read_reply({b"s": [[]]}, b"s") == []


def test_unified_shape() -> None:
    assert parse_read_reply({b"s": [(b"1-0", {b"a": b"1"})]}, b"s") == [Entry(b"1-0", {b"a": b"1"})]


def test_deleted_entries_have_no_fields() -> None:
    reply = [[b"s", [(b"1-0", {}), (b"2-0", None), [b"3-0", [b"k", b"v"]]]]]
    assert parse_read_reply(reply, b"s") == [
        Entry(b"1-0", None),
        Entry(b"2-0", None),
        Entry(b"3-0", {b"k": b"v"}),
    ]
