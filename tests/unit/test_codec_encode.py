"""Model -> entry fields (the producer's encoding): every type a user sends round-trips through
``decode_message``, flat and in ``body_field``; structured flat fields are JSON."""

from __future__ import annotations

import datetime
import decimal
import enum
import ipaddress
import pathlib
import uuid
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, HttpUrl

from streamworker.core.codec import (
    EncodeError,
    decode_message,
    encode,
    encode_body,
    encode_fields,
)
from streamworker.errors import PermanentFailure


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    city: str
    zip_code: str | None = None


class Line(BaseModel):
    sku: str
    qty: int
    price: decimal.Decimal


class Everything(BaseModel):
    text: str
    count: int
    ratio: float
    flag: bool
    off: bool
    price: decimal.Decimal
    at: datetime.datetime
    naive_at: datetime.datetime
    day: datetime.date
    clock: datetime.time
    took: datetime.timedelta
    ident: uuid.UUID
    color: Color
    level: Level
    kind: Literal["a", "b"]
    address: Address
    lines: list[Line]
    tags: set[str]
    pair: tuple[int, str]
    counts: dict[str, int]
    note: str | None = None
    maybe_count: int | None = None
    maybe_address: Address | None = None
    aliased: int = Field(alias="aliasedField")
    empty_text: str = ""


def _sample(**over: Any) -> Everything:
    data: dict[str, Any] = {
        "text": 'héllo = world, "quoted" {not json}',
        "count": -42,
        "ratio": 0.1,
        "flag": True,
        "off": False,
        "price": decimal.Decimal("12.3400"),
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC),
        "naive_at": datetime.datetime(2026, 1, 2, 3, 4, 5),
        "day": datetime.date(2026, 2, 28),
        "clock": datetime.time(23, 59, 1, 5),
        "took": datetime.timedelta(hours=1, seconds=3, microseconds=7),
        "ident": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "color": Color.BLUE,
        "level": Level.HIGH,
        "kind": "b",
        "address": Address(city="Lyon"),
        "lines": [Line(sku="x", qty=2, price=decimal.Decimal("1.50"))],
        "tags": {"a", "b"},
        "pair": (1, "one"),
        "counts": {"k": 3},
        "aliasedField": 5,
    }
    data.update(over)
    return Everything(**data)


def _decode(fields: dict[str, str], model: type[BaseModel], body_field: str | None = None) -> Any:
    raw = {k.encode(): v.encode() for k, v in fields.items()}
    msg = decode_message(
        b"1-0",
        raw,
        stream="s",
        group="g",
        consumer="c",
        delivery_count=1,
        model=model,
        body_field=body_field,
    )
    return msg.body


def test_every_listed_type_round_trips_through_flat_fields() -> None:
    original = _sample()
    assert _decode(encode_fields(original), Everything) == original


def test_every_listed_type_round_trips_through_a_body_field() -> None:
    original = _sample(note="n", maybe_count=0, maybe_address=Address(city="Oslo", zip_code="1"))
    fields = encode_body(original, "payload")
    assert list(fields) == ["payload"]
    assert _decode(fields, Everything, body_field="payload") == original


def test_optional_fields_that_are_set_round_trip_flat() -> None:
    original = _sample(note="n", maybe_count=0, maybe_address=Address(city="Oslo", zip_code="1"))
    assert _decode(encode_fields(original), Everything) == original


def test_none_leaves_the_field_out() -> None:
    fields = encode_fields(_sample())
    assert "note" not in fields
    assert "maybe_count" not in fields
    assert "maybe_address" not in fields


def test_scalars_are_plain_text_and_structures_compact_json() -> None:
    fields = encode_fields(_sample())
    assert fields["count"] == "-42"
    assert fields["flag"] == "true"
    assert fields["price"] == "12.3400"
    assert fields["color"] == "blue"
    assert fields["level"] == "2"
    assert fields["at"] == "2026-01-02T03:04:05.678901Z"
    assert fields["address"] == '{"city":"Lyon","zip_code":null}'
    assert fields["aliasedField"] == "5"


def test_decimal_keeps_its_exponent() -> None:
    decoded = _decode(encode_fields(_sample(price=decimal.Decimal("1E+2"))), Everything)
    assert str(decoded.price) == str(decimal.Decimal("1E+2"))


def test_existing_flat_decodes_are_unchanged() -> None:
    class Order(BaseModel):
        order_id: int
        note: str
        tags: list[str] | str

    # A str-or-list field is not purely structured: its text stays text.
    body = _decode({"order_id": "7", "note": "[1]", "tags": "[1]"}, Order)
    assert body == Order(order_id=7, note="[1]", tags="[1]")


def test_a_structured_field_that_is_not_json_still_fails_validation() -> None:
    class Order(BaseModel):
        lines: list[int]

    with pytest.raises(PermanentFailure, match="lines"):
        _decode({"lines": "1,2"}, Order)


def test_a_required_none_field_cannot_be_encoded_flat() -> None:
    class Reading(BaseModel):
        value: int | None

    with pytest.raises(EncodeError, match=r"Reading\.value is None and has no default"):
        encode_fields(Reading(value=None))
    assert _decode(encode_body(Reading(value=None), "b"), Reading, "b") == Reading(value=None)


def test_a_structure_in_an_untyped_field_is_refused_flat() -> None:
    class Loose(BaseModel):
        data: Any

    with pytest.raises(EncodeError, match=r"Loose\.data: a list value"):
        encode_fields(Loose(data=[1, 2]))


def test_a_mapping_is_encoded_value_by_value() -> None:
    fields = encode(
        {
            "n": 3,
            "ok": False,
            "at": datetime.date(2026, 1, 1),
            "items": [1, 2],
            "skip": None,
            "color": Color.RED,
        }
    )
    assert fields == {"n": "3", "ok": "false", "at": "2026-01-01", "items": "[1,2]", "color": "red"}


def test_encode_with_body_field_puts_the_json_in_that_field() -> None:
    assert encode({"a": 1}, body_field="payload") == {"payload": '{"a":1}'}


def test_an_empty_mapping_is_refused() -> None:
    with pytest.raises(EncodeError, match="at least one field"):
        encode_fields({"only": None})


def test_a_non_str_field_name_is_refused() -> None:
    with pytest.raises(EncodeError, match="field names must be str"):
        encode_fields({1: "x"})  # type: ignore[dict-item]


def test_something_that_is_neither_model_nor_mapping_is_refused() -> None:
    with pytest.raises(EncodeError, match="expected a pydantic model or a mapping"):
        encode_fields([("a", "b")])  # type: ignore[arg-type]


class Web(BaseModel):
    raw: bytes
    url: HttpUrl
    ip: ipaddress.IPv4Address
    at: datetime.datetime
    positive: Annotated[int, Field(gt=0)]
    path: pathlib.Path
    level: float
    nested: list[dict[str, list[int]]] | None = None


WEB = Web(
    raw=b"hi",
    url="https://example.org/a?b=1",  # type: ignore[arg-type]
    ip="10.0.0.1",  # type: ignore[arg-type]
    at=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    positive=3,
    path="/tmp/x",  # type: ignore[arg-type]
    level=-0.5,
    nested=[{"a": [1, 2]}],
)


def test_urls_addresses_offsets_bytes_and_constrained_types_round_trip_flat() -> None:
    assert _decode(encode_fields(WEB), Web) == WEB


def test_urls_addresses_offsets_bytes_and_constrained_types_round_trip_in_a_body() -> None:
    assert _decode(encode_body(WEB, "b"), Web, "b") == WEB


def test_an_infinite_float_round_trips_flat() -> None:
    infinite = WEB.model_copy(update={"level": float("inf")})
    assert _decode(encode_fields(infinite), Web) == infinite


def test_an_infinite_float_is_refused_in_a_body_field() -> None:
    with pytest.raises(EncodeError, match="infinite or NaN float cannot travel as JSON"):
        encode_body(WEB.model_copy(update={"level": float("nan")}), "b")
