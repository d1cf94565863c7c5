"""Entry -> Message decoding, and the permanent failures it reports."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from streamworker.core.codec import _MESSAGE_FIELDS, MessageDecoder, decode_fields, decode_message
from streamworker.core.message import Message
from streamworker.errors import PermanentFailure


class Order(BaseModel):
    order_id: int
    amount_cents: int


def _decode(
    raw: dict[bytes, bytes], model: type[BaseModel] | None = Order, body_field: str | None = None
):  # type: ignore[no-untyped-def]
    return decode_message(
        b"1-0",
        raw,
        stream="orders",
        group="g",
        consumer="c",
        delivery_count=2,
        model=model,
        body_field=body_field,
    )


def test_fields_validate_into_the_model_with_lax_coercion() -> None:
    msg = _decode({b"order_id": b"7", b"amount_cents": b"150"})
    assert msg.body == Order(order_id=7, amount_cents=150)
    assert msg.fields == {"order_id": "7", "amount_cents": "150"}
    assert (msg.id, msg.stream, msg.group, msg.consumer, msg.delivery_count) == (
        "1-0",
        "orders",
        "g",
        "c",
        2,
    )


def test_body_field_holds_json() -> None:
    msg = _decode({b"payload": b'{"order_id": 1, "amount_cents": 2}'}, body_field="payload")
    assert msg.body == Order(order_id=1, amount_cents=2)


def test_missing_body_field_is_permanent() -> None:
    with pytest.raises(PermanentFailure, match="body field 'payload' is missing"):
        _decode({b"other": b"x"}, body_field="payload")


def test_invalid_body_is_permanent_and_names_the_field() -> None:
    with pytest.raises(PermanentFailure, match="order_id"):
        _decode({b"order_id": b"seven", b"amount_cents": b"1"})


def test_invalid_json_is_permanent() -> None:
    with pytest.raises(PermanentFailure, match="body failed validation"):
        _decode({b"payload": b"{not json"}, body_field="payload")


def test_non_utf8_value_is_permanent() -> None:
    with pytest.raises(PermanentFailure, match="not valid UTF-8"):
        _decode({b"order_id": b"\xff\xfe", b"amount_cents": b"1"}, model=None)


def test_no_model_gives_no_body() -> None:
    assert _decode({b"a": b"b"}, model=None).body is None


def test_message_timestamp_comes_from_the_id() -> None:
    msg = decode_message(
        b"1700000000123-4",
        {b"a": b"b"},
        stream="s",
        group="g",
        consumer="c",
        delivery_count=1,
        model=None,
        body_field=None,
    )
    assert msg.timestamp_ms == 1700000000123


def test_the_fast_constructor_sets_every_field_of_message() -> None:
    """decode_message builds Message without its __init__: every field must be covered, and
    the result must be the Message the constructor makes (equal, frozen, same repr)."""
    assert tuple(f.name for f in dataclasses.fields(Message)) == _MESSAGE_FIELDS
    built = decode_message(
        b"7-1",
        {b"k": b"v", b"n": b"2"},
        stream="s",
        group="g",
        consumer="c",
        delivery_count=3,
        model=None,
        body_field=None,
    )
    expected = Message("7-1", "s", "g", "c", {"k": "v", "n": "2"}, None, 3)
    assert built == expected
    assert type(built) is Message
    assert repr(built) == repr(expected)
    assert sorted(_MESSAGE_FIELDS) == sorted(Message.__slots__)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.id = "8-0"  # type: ignore[misc]


def test_a_non_utf8_field_name_is_named_after_the_fast_path_fails() -> None:
    with pytest.raises(PermanentFailure, match="a field name is not valid UTF-8"):
        decode_fields({b"ok": b"1", b"\xff\xfe": b"2"})
    with pytest.raises(PermanentFailure, match="field 'bad' is not valid UTF-8"):
        decode_fields({b"ok": b"1", b"bad": b"\xc3"})
    assert decode_fields({b"\xc3\xa9": b"\xe2\x82\xac"}) == {"é": "€"}


def _consumer_decode(raw: list[bytes], model: type[BaseModel] | None = Order) -> Message:  # type: ignore[type-arg]
    decoder = MessageDecoder(stream="orders", group="g", consumer="c", model=model, body_field=None)
    return decoder.decode(b"1-0", raw, 2)


def test_the_consume_loops_decoder_reads_flat_fields_into_the_same_message() -> None:
    flat = [b"order_id", b"7", b"amount_cents", b"150"]
    expected = _decode({b"order_id": b"7", b"amount_cents": b"150"})
    built = _consumer_decode(flat)
    assert built == expected
    assert type(built) is Message
    assert repr(built) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.fields = {}  # type: ignore[misc]


def test_the_consume_loops_decoder_keeps_the_last_value_of_a_repeated_field() -> None:
    """XADD accepts a field twice; as redis-py's mapping would, the last value wins."""
    msg = _consumer_decode([b"k", b"1", b"k", b"2"], model=None)
    assert msg.fields == {"k": "2"}


def test_the_consume_loops_decoder_names_the_field_that_is_not_utf8() -> None:
    with pytest.raises(PermanentFailure, match="field 'bad' is not valid UTF-8"):
        _consumer_decode([b"ok", b"1", b"bad", b"\xc3"], model=None)
    with pytest.raises(PermanentFailure, match="a field name is not valid UTF-8"):
        _consumer_decode([b"\xff", b"1"], model=None)
