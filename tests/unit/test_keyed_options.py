"""Per-key concurrency and in-flight bounds: the options checked at registration, the key of a
message, and how a batch splits into lanes (issue #36 items 2, 5, 6)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from streamworker import App, Message
from streamworker.core.keyed import entry_bytes, key_func, split_lanes
from streamworker.errors import ConfigError
from streamworker.settings import load_settings


class Order(BaseModel):
    customer_id: str
    amount: int = 0


class Aliased(BaseModel):
    customer: str = Field(alias="customer-id")


@dataclasses.dataclass
class Shipment:
    customer_id: str


class Refund(TypedDict):
    customer_id: str


def _message(body: Any, fields: dict[str, str] | None = None, mid: str = "1-0") -> Message[Any]:
    return Message(id=mid, stream="s", group="g", consumer="c", fields=fields or {}, body=body)


def test_key_field_and_concurrency_are_kept_on_the_spec() -> None:
    app = App("a")

    @app.handler("s", group="g", key_field="customer_id", concurrency=8)
    async def handle(msg: Message[Order]) -> None: ...

    spec = app.handlers[0]
    assert (spec.key_field, spec.concurrency) == ("customer_id", 8)


@pytest.mark.parametrize("model", [Order, Shipment, Refund])
def test_key_field_naming_a_field_of_the_model_is_accepted(model: type[Any]) -> None:
    app = App("a")

    @app.handler("s", group="g", model=model, key_field="customer_id", concurrency=4)
    async def handle(msg: Message) -> None: ...

    assert app.handlers[0].key_field == "customer_id"


def test_key_field_naming_a_field_the_model_lacks_is_refused_with_one_line() -> None:
    app = App("a")
    with pytest.raises(ConfigError) as info:

        @app.handler("s", group="g", key_field="customer", concurrency=4)
        async def handle(msg: Message[Order]) -> None: ...

    text = str(info.value)
    assert "\n" not in text
    assert "key_field 'customer' is not a field of the handler's model" in text
    assert "amount, customer_id" in text


def test_key_field_may_name_a_fields_alias() -> None:
    app = App("a")

    @app.handler("s", group="g", key_field="customer-id", concurrency=2)
    async def handle(msg: Message[Aliased]) -> None: ...

    assert app.handlers[0].key_field == "customer-id"


def test_key_field_without_a_model_names_an_entry_field_unchecked() -> None:
    app = App("a")

    @app.handler("s", group="g", key_field="anything", concurrency=2)
    async def handle(msg: Message) -> None: ...

    assert app.handlers[0].key_field == "anything"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key_field": ""}, "key_field must be a field name or a function of the message"),
        ({"key_field": 3}, "key_field must be a field name or a function of the message"),
        ({"key_field": "customer_id", "concurrency": 0}, "concurrency must be an integer >= 1"),
        ({"key_field": "customer_id", "batch": True}, "key_field does not combine with batch"),
        ({"key_field": "customer_id", "ordered": True}, "key_field does not combine with ordered"),
        ({"max_in_flight": 0}, "max_in_flight must be None .no bound. or an integer >= 1"),
        ({"max_in_flight": -5}, "max_in_flight must be None"),
        ({"max_in_flight": 2.5}, "max_in_flight must be None"),
        ({"max_in_flight": True}, "max_in_flight must be None"),
        ({"max_in_flight_bytes": 0}, "max_in_flight_bytes must be None"),
        ({"max_in_flight_bytes": "1MB"}, "max_in_flight_bytes must be None"),
    ],
)
def test_bad_flow_options_are_refused_at_registration_with_one_line(
    options: dict[str, object], message: str
) -> None:
    app = App("a")
    with pytest.raises(ConfigError, match=message) as info:
        app.handler("s", group="g", **options)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_sql_handlers_keep_concurrency_one_with_a_key_field() -> None:
    # One transaction per batch on one connection: lanes in parallel would need a connection
    # each, which the SQL strategy does not open (yet); refused rather than run sequentially
    # behind the user's back.
    app = App("a")
    with pytest.raises(ConfigError, match="concurrency must be 1"):
        app.handler("s", group="g", idempotency="sql", key_field="k", concurrency=4)


def test_in_flight_bounds_are_kept_on_the_spec() -> None:
    app = App("a")

    @app.handler("s", group="g", max_in_flight=50, max_in_flight_bytes=5_000_000)
    async def handle(msg: Message) -> None: ...

    spec = app.handlers[0]
    assert (spec.max_in_flight, spec.max_in_flight_bytes) == (50, 5_000_000)


def test_worker_wide_in_flight_bounds_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMWORKER_MAX_IN_FLIGHT", "200")
    monkeypatch.setenv("STREAMWORKER_MAX_IN_FLIGHT_BYTES", "10000000")
    settings = load_settings()
    assert (settings.max_in_flight, settings.max_in_flight_bytes) == (200, 10_000_000)


def test_a_bad_worker_wide_in_flight_bound_is_refused_with_its_name() -> None:
    with pytest.raises(ConfigError, match="max_in_flight: Input should be greater than or equal"):
        load_settings(max_in_flight=0)


def test_the_key_is_the_bodys_field() -> None:
    key = key_func("customer_id")
    assert key(_message(Order(customer_id="c7"))) == "c7"
    assert key(_message(Shipment(customer_id="c8"))) == "c8"
    assert key(_message({"customer_id": "c9"})) == "c9"


def test_without_a_body_the_key_is_the_entry_field() -> None:
    assert key_func("customer_id")(_message(None, {"customer_id": "c1"})) == "c1"


def test_a_message_without_the_key_goes_to_the_none_lane() -> None:
    assert key_func("customer_id")(_message(None, {"other": "x"})) is None
    # With a body_field the entry's other fields are not the body: no fallback to them.
    assert key_func("customer_id", body_field="body")(_message(None, {"customer_id": "c"})) is None


def test_a_callable_key_field_is_called_with_the_message() -> None:
    key = key_func(lambda m: m.fields["region"] + ":" + m.body.customer_id)
    assert key(_message(Order(customer_id="c1"), {"region": "eu"})) == "eu:c1"


def test_an_unhashable_key_value_keys_by_its_text() -> None:
    assert key_func("tags")(_message({"tags": ["a", "b"]})) == "['a', 'b']"


def test_lanes_keep_each_keys_stream_order_and_start_with_the_oldest_key() -> None:
    ids = [("1", "a"), ("2", "b"), ("3", "a"), ("4", "c"), ("5", "b"), ("6", "a")]
    lanes = split_lanes(ids, key=lambda item: item[1])
    assert [[i for i, _ in lane] for lane in lanes] == [["1", "3", "6"], ["2", "5"], ["4"]]


def test_every_item_is_in_exactly_one_lane() -> None:
    items = list(range(1_000))
    lanes = split_lanes(items, key=lambda n: n % 7)
    assert sorted(n for lane in lanes for n in lane) == items
    assert all(len({n % 7 for n in lane}) == 1 for lane in lanes)


def test_entry_bytes_count_names_and_values() -> None:
    assert entry_bytes([b"customer_id", b"c1", b"payload", b"x" * 100]) == 11 + 2 + 7 + 100
    assert entry_bytes(None) == 0
