"""``idempotency="lua"`` handler options: registration, ``dedup_field``/``dedup_window_ms`` rules,
and the strategy the worker builds from them."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from streamworker import App, Effects, Message
from streamworker.errors import ConfigError
from streamworker.idempotency import registry
from streamworker.idempotency.base import BuildContext
from streamworker.idempotency.lua import LuaStrategy


def test_a_lua_handler_registers_with_its_dedup_options() -> None:
    app = App("clicks")

    @app.handler(
        "clicks",
        group="counters",
        idempotency="lua",
        dedup_field="click_id",
        dedup_window_ms=60_000,
        concurrency=4,
    )
    def count(msg: Message) -> Effects:
        return Effects().incr("{clicks}:total")

    (spec,) = app.handlers
    assert (spec.idempotency, spec.dedup_field, spec.dedup_window_ms) == ("lua", "click_id", 60_000)


def test_dedup_field_is_refused_outside_lua_mode() -> None:
    app = App("a")
    with pytest.raises(ConfigError, match="dedup_field works with idempotency='lua' only"):
        app.handler("s", group="g", idempotency="none", dedup_field="order_id")


@pytest.mark.parametrize("window", [0, -1, 1.5, True])
def test_dedup_window_must_be_a_positive_integer(window: object) -> None:
    app = App("a")
    with pytest.raises(ConfigError, match="dedup_window_ms must be an integer >= 1"):
        app.handler("s", group="g", idempotency="lua", dedup_window_ms=window)  # type: ignore[arg-type]


def test_an_empty_dedup_field_is_refused() -> None:
    app = App("a")
    with pytest.raises(ConfigError, match="non-empty field name"):
        app.handler("s", group="g", idempotency="lua", dedup_field="")


def test_the_worker_builds_a_lua_strategy_with_the_handlers_options() -> None:
    app = App("a")

    @app.handler(
        "{shop}:orders",
        group="billing",
        idempotency="lua",
        dedup_field="order_id",
        dedup_window_ms=5_000,
        max_deliveries=3,
    )
    async def charge(msg: Message) -> None: ...

    client = aioredis.Redis()

    strategy = registry.get("lua").build(
        app.handlers[0], BuildContext(client=client, consumer="pod-0")
    )
    assert isinstance(strategy, LuaStrategy)
    assert strategy.name == "lua"
    assert (strategy.stream, strategy.group, strategy.consumer) == (
        "{shop}:orders",
        "billing",
        "pod-0",
    )
    assert (strategy.dedup_field, strategy.dedup_window_ms) == ("order_id", 5_000)
    assert strategy.record_key == "{shop}:orders:dedup:billing"
