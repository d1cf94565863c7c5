"""Dependency resolution: caching, generators, scopes, cleanup order."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from streamworker import Depends, Message
from streamworker.core.deps import Resolver, build_plan
from streamworker.errors import ConfigError

MSG: Message[None] = Message(id="1-0", stream="s", group="g", consumer="c", fields={}, body=None)


async def test_message_and_dependencies_are_injected() -> None:
    def number() -> int:
        return 41

    async def plus_one(n: int = Depends(number)) -> int:
        return n + 1

    def handler(msg: Message, value: int = Depends(plus_one)) -> None: ...

    resolver = Resolver()
    async with resolver.arguments(build_plan(handler), MSG) as kwargs:
        assert kwargs == {"msg": MSG, "value": 42}


async def test_a_dependency_is_called_once_per_resolution() -> None:
    calls = []

    def shared() -> object:
        calls.append(1)
        return object()

    def a(x: object = Depends(shared)) -> object:
        return x

    def handler(msg: Message, x: object = Depends(shared), y: object = Depends(a)) -> None: ...

    async with Resolver().arguments(build_plan(handler), MSG) as kwargs:
        assert kwargs["x"] is kwargs["y"]
    assert len(calls) == 1


async def test_generator_cleanup_runs_after_the_handler_in_reverse_order() -> None:
    events: list[str] = []

    def outer() -> Iterator[str]:
        events.append("outer open")
        yield "o"
        events.append("outer close")

    async def inner(o: str = Depends(outer)) -> AsyncIterator[str]:
        events.append("inner open")
        yield "i"
        events.append("inner close")

    def handler(msg: Message, i: str = Depends(inner)) -> None: ...

    async with Resolver().arguments(build_plan(handler), MSG):
        events.append("handler")
    assert events == ["outer open", "inner open", "handler", "inner close", "outer close"]


async def test_generator_sees_the_handler_exception() -> None:
    seen: list[BaseException] = []

    def resource() -> Iterator[int]:
        try:
            yield 1
        except ValueError as exc:
            seen.append(exc)
            raise

    def handler(msg: Message, r: int = Depends(resource)) -> None: ...

    with pytest.raises(ValueError, match="boom"):
        async with Resolver().arguments(build_plan(handler), MSG):
            raise ValueError("boom")
    assert len(seen) == 1


async def test_worker_scoped_dependency_is_created_once_and_closed_at_stop() -> None:
    events: list[str] = []

    async def pool() -> AsyncIterator[str]:
        events.append("open")
        yield "pool"
        events.append("close")

    def handler(msg: Message, p: str = Depends(pool, scope="worker")) -> None: ...

    plan = build_plan(handler)
    resolver = Resolver()
    await resolver.start([plan])
    for _ in range(3):
        async with resolver.arguments(plan, MSG) as kwargs:
            assert kwargs["p"] == "pool"
    await resolver.close()
    assert events == ["open", "close"]


def test_depends_rejects_non_callables() -> None:
    with pytest.raises(ConfigError):
        Depends(42)  # type: ignore[arg-type]


async def test_worker_scoped_dependency_cannot_take_the_message() -> None:
    def per_message(msg: Message) -> int:
        return 1

    def handler(msg: Message, x: int = Depends(per_message, scope="worker")) -> None: ...

    with pytest.raises(ConfigError, match="worker-scoped dependency cannot take the Message"):
        await Resolver().start([build_plan(handler)])


def test_message_is_recognised_when_its_annotation_cannot_be_evaluated() -> None:
    def handler(msg: Message) -> None: ...

    # As `from __future__ import annotations` leaves it when the model is a local name.
    handler.__annotations__["msg"] = "Message[ModelDefinedInAFunction]"
    plan = build_plan(handler)
    assert plan.params[0][0] == "msg"
    assert type(plan.params[0][1]).__name__ == "MessageParam"
