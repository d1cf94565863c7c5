"""Body types beyond pydantic models (dataclasses, TypedDicts), the refusals at registration, and
the encoder that is the inverse of the decoder."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
import typing
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from streamworker import App, Message
from streamworker.core.codec import EncodeError, decode_body, decode_message, encode_for
from streamworker.errors import ConfigError, PermanentFailure


@dataclasses.dataclass
class Click:
    page: str
    count: int


class Signup(TypedDict):
    email: str
    age: int


class Order(BaseModel):
    order_id: int
    amount_cents: int
    express: bool = False
    note: str | None = None


class Nested(BaseModel):
    order: Order
    tags: list[str]


def _decode(app: App, raw: dict[bytes, bytes]) -> Message[Any]:
    spec = app.handlers[0]
    return decode_message(
        b"1-0",
        raw,
        stream=spec.stream,
        group=spec.group,
        consumer="c",
        delivery_count=1,
        model=spec.model,
        body_field=spec.body_field,
    )


def test_a_dataclass_body_is_validated_from_the_fields() -> None:
    app = App("a")

    @app.handler("clicks", group="g")
    async def handle(msg: Message[Click]) -> None: ...

    assert _decode(app, {b"page": b"/home", b"count": b"3"}).body == Click("/home", 3)


def test_a_typeddict_body_is_validated_from_the_fields() -> None:
    app = App("a")

    @app.handler("signups", group="g")
    async def handle(msg: Message[Signup]) -> None: ...

    assert _decode(app, {b"email": b"a@b", b"age": b"30"}).body == {"email": "a@b", "age": 30}


def test_an_invalid_dataclass_body_is_a_permanent_failure() -> None:
    app = App("a")

    @app.handler("clicks", group="g")
    async def handle(msg: Message[Click]) -> None: ...

    with pytest.raises(PermanentFailure, match="count"):
        _decode(app, {b"page": b"/home", b"count": b"many"})


def test_an_unsupported_body_type_is_refused_at_registration_in_one_line() -> None:
    app = App("a")
    with pytest.raises(ConfigError) as info:

        @app.handler("s", group="g")
        async def handle(msg: Message[int]) -> None: ...

    assert "\n" not in str(info.value)
    assert "a pydantic model, a dataclass or a TypedDict" in str(info.value)


class OldStyle(typing.TypedDict):
    x: int


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="pydantic takes typing.TypedDict from 3.12")
def test_a_typing_typeddict_on_python_3_11_is_refused_in_one_line() -> None:
    app = App("a")
    with pytest.raises(ConfigError, match=r"typing_extensions\.TypedDict") as info:

        @app.handler("s", group="g")
        async def handle(msg: Message[OldStyle]) -> None: ...

    assert "\n" not in str(info.value)


def test_message_of_any_has_no_body() -> None:
    app = App("a")

    @app.handler("s", group="g")
    async def handle(msg: Message[Any]) -> None: ...

    assert app.handlers[0].model is None


def test_a_bare_decorator_explains_itself_in_one_line() -> None:
    app = App("a")
    with pytest.raises(ConfigError) as info:

        @app.handler  # type: ignore[arg-type]
        async def on_order(msg: Message[Order]) -> None: ...

    text = str(info.value)
    assert "\n" not in text
    assert '@app.handler("orders", group="billing")' in text
    assert "on_order" in text


def test_a_missing_group_says_how_to_write_it() -> None:
    app = App("a")
    with pytest.raises(ConfigError, match="a consumer group is required"):
        app.handler("orders")


@pytest.mark.parametrize(
    "body",
    [
        Order(order_id=1, amount_cents=250),
        Order(order_id=2, amount_cents=-5, express=True, note="fragile"),
    ],
)
def test_encode_body_is_the_inverse_of_decode_body(body: Order) -> None:
    fields = encode_for(body)
    assert all(isinstance(v, str) for v in fields.values())
    assert decode_body(fields, Order, None) == body


def test_encode_body_writes_numbers_and_booleans_as_lax_mode_reads_them() -> None:
    assert encode_for(Order(order_id=7, amount_cents=1, express=True)) == {
        "order_id": "7",
        "amount_cents": "1",
        "express": "true",
    }


def test_encode_body_puts_the_whole_body_in_body_field_as_json() -> None:
    body = Nested(order=Order(order_id=1, amount_cents=2), tags=["a", "b"])
    fields = encode_for(body, body_field="payload")
    assert list(fields) == ["payload"]
    assert decode_body(fields, Nested, "payload") == body


def test_nested_model_values_travel_as_json_in_their_flat_field() -> None:
    body = Nested(order=Order(order_id=1, amount_cents=2), tags=["a"])
    fields = encode_for(body)
    assert fields["tags"] == '["a"]'
    assert decode_body(fields, Nested, None) == body


def test_a_dataclass_body_with_nested_values_needs_body_field() -> None:
    @dataclasses.dataclass
    class Basket:
        items: list[int]

    with pytest.raises(EncodeError, match="body_field"):
        encode_for(Basket([1, 2]))
    assert encode_for(Basket([1, 2]), body_field="b") == {"b": '{"items":[1,2]}'}


def test_encode_body_handles_dataclasses_and_dates() -> None:
    @dataclasses.dataclass
    class Shipped:
        order_id: int
        at: dt.date

    body = Shipped(3, dt.date(2026, 1, 2))
    fields = encode_for(body)
    assert fields == {"order_id": "3", "at": "2026-01-02"}
