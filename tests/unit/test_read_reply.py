"""Parsing XREADGROUP replies in every shape redis-py may hand them over, and redis-py's
failures seen as lost connections."""

from __future__ import annotations

import pytest

from streamworker.errors import ConnectionLost
from streamworker.io.redisio import Entry, connection_errors, parse_read_reply


def test_null_reply_is_empty() -> None:
    assert parse_read_reply(None, b"s") == []
    assert parse_read_reply([], b"s") == []
    assert parse_read_reply({}, b"s") == []


def test_resp2_shape() -> None:
    reply = [[b"s", [(b"1-0", {b"a": b"1"}), (b"2-0", {b"b": b"2"})]]]
    assert parse_read_reply(reply, b"s") == [
        Entry(b"1-0", [b"a", b"1"]),
        Entry(b"2-0", [b"b", b"2"]),
    ]


def test_resp3_wrapped_shape() -> None:
    reply = {b"s": [[(b"1-0", {b"a": b"1"})]]}
    assert parse_read_reply(reply, b"s") == [Entry(b"1-0", [b"a", b"1"])]


def test_resp3_wrapped_empty_history() -> None:
    assert parse_read_reply({b"s": [[]]}, b"s") == []


def test_unified_shape() -> None:
    assert parse_read_reply({b"s": [(b"1-0", {b"a": b"1"})]}, b"s") == [Entry(b"1-0", [b"a", b"1"])]


def test_deleted_entries_have_no_fields() -> None:
    reply = [[b"s", [(b"1-0", {}), (b"2-0", None), [b"3-0", [b"k", b"v"]]]]]
    assert parse_read_reply(reply, b"s") == [
        Entry(b"1-0", None),
        Entry(b"2-0", None),
        Entry(b"3-0", [b"k", b"v"]),
    ]


async def test_a_connection_closed_under_a_command_is_a_lost_connection() -> None:
    writer = None
    with pytest.raises(ConnectionLost, match="closed under a command"):
        async with connection_errors():
            writer.writelines([b"XACK"])  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        async with connection_errors():
            object().nope  # type: ignore[attr-defined]  # noqa: B018
