"""Values from Redis replies as text or bytes (:func:`streamworker.io.redisio.as_text` and
:func:`~streamworker.io.redisio.as_bytes`), whether redis-py decoded them or not."""

from __future__ import annotations

import pytest

from streamworker.io.redisio import as_bytes, as_text


def test_bytes_are_decoded_as_utf_8() -> None:
    assert as_text("été-1".encode()) == "été-1"


def test_text_and_numbers_pass_through_str() -> None:
    assert as_text("1-0") == "1-0"
    assert as_text(7) == "7"


def test_invalid_utf_8_fails_unless_replacement_is_asked_for() -> None:
    with pytest.raises(UnicodeDecodeError):
        as_text(b"\xff1-0")
    assert as_text(b"\xff1-0", errors="replace") == "\ufffd1-0"


def test_bytes_stay_as_they_are() -> None:
    raw = b"\xff\x00id"
    assert as_bytes(raw) is raw


def test_bytearrays_and_memoryviews_become_bytes() -> None:
    assert as_bytes(bytearray(b"1-0")) == b"1-0"
    assert as_bytes(memoryview(b"1-0")) == b"1-0"


def test_text_and_numbers_become_their_utf_8() -> None:
    assert as_bytes("été") == "été".encode()
    assert as_bytes(12) == b"12"


def test_as_bytes_inverts_as_text() -> None:
    for raw in (b"1700000000000-3", "naïve".encode()):
        assert as_bytes(as_text(raw)) == raw
