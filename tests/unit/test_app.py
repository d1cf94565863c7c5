"""The App registry and the handler decorator's validation."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from streamworker import App, Depends, Message
from streamworker.errors import ConfigError


class Order(BaseModel):
    order_id: int


def test_handler_registers_with_defaults() -> None:
    app = App("billing")

    @app.handler("orders", group="billing")
    async def on_order(msg: Message[Order]) -> None: ...

    (spec,) = app.handlers
    assert (spec.stream, spec.group, spec.idempotency) == ("orders", "billing", "none")
    assert spec.model is Order  # taken from Message[Order]
    assert spec.is_async
    assert spec.dead_letter_stream == "{orders}:dlq"


def test_sync_handlers_are_allowed() -> None:
    app = App("a")

    @app.handler("s", group="g")
    def handle(msg: Message) -> None: ...

    assert not app.handlers[0].is_async


def test_explicit_model_wins_over_annotation() -> None:
    class Other(BaseModel):
        x: int

    app = App("a")

    @app.handler("s", group="g", model=Other)
    async def handle(msg: Message[Order]) -> None: ...

    assert app.handlers[0].model is Other


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"block_ms": -1}, "block_ms"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_deliveries": 0}, "max_deliveries"),
        ({"start_id": "latest"}, "start_id"),
        ({"idempotency": "maybe"}, "idempotency must be one of"),
        ({"model": dict}, "a pydantic model, a dataclass or a TypedDict"),
    ],
)
def test_bad_options_fail_at_decoration(options: dict[str, object], message: str) -> None:
    app = App("a")
    with pytest.raises(ConfigError, match=message):
        app.handler("s", group="g", **options)  # type: ignore[arg-type]


def test_one_handler_per_stream_and_group() -> None:
    app = App("a")

    @app.handler("s", group="g")
    async def first(msg: Message) -> None: ...

    with pytest.raises(ConfigError, match="already has handler"):

        @app.handler("s", group="g")
        async def second(msg: Message) -> None: ...


def test_parameter_without_source_is_rejected() -> None:
    app = App("a")
    with pytest.raises(ConfigError, match="parameter 'client' has no source"):

        @app.handler("s", group="g")
        async def handle(msg: Message, client: object) -> None: ...


def test_generator_handlers_are_rejected() -> None:
    app = App("a")
    with pytest.raises(ConfigError, match="generator"):

        @app.handler("s", group="g")
        async def handle(msg: Message):  # type: ignore[no-untyped-def]
            yield


def test_dependencies_are_planned_recursively() -> None:
    def settings() -> dict[str, int]:
        return {"x": 1}

    def client(cfg: dict[str, int] = Depends(settings)) -> str:
        return "client"

    app = App("a")

    @app.handler("s", group="g")
    async def handle(msg: Message, c: str = Depends(client)) -> None: ...

    deps = [d.dependency for d in app.handlers[0].plan.dependencies()]
    assert deps == [settings, client]


def test_empty_app_name_is_rejected() -> None:
    with pytest.raises(ConfigError):
        App(" ")
