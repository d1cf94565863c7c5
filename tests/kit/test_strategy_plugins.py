"""A strategy from outside streamworker, registered by name, runs handlers like a built-in one:
the App checks handlers with it and the worker builds and runs it (no core module names it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

import pytest

from streamworker import App, Message
from streamworker.core.outcomes import Outcome
from streamworker.errors import ConfigError
from streamworker.idempotency import registry
from streamworker.idempotency.base import Batch, BuildContext, HandlerConfig, PlainPlugin, Strategy
from streamworker.idempotency.none import AtLeastOnce
from streamworker.testing import TestWorker

Run = Callable[..., Awaitable[TestWorker]]


class _Counting:
    """At-least-once, counting the batches it was given."""

    name = "counting"

    def __init__(self, inner: AtLeastOnce, seen: list[int]) -> None:
        self._inner = inner
        self._seen = seen

    async def process(self, batch: Batch) -> list[Outcome]:
        self._seen.append(len(batch.messages))
        return await self._inner.process(batch)


class CountingPlugin(PlainPlugin):
    name = "counting"

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.concurrency_checked: list[int] = []

    def check_options(self, *, concurrency: int) -> None:
        self.concurrency_checked.append(concurrency)
        if concurrency > 4:
            raise ConfigError("counting runs at most 4 handlers at once")

    def build(self, spec: HandlerConfig, context: BuildContext) -> Strategy:
        inner = AtLeastOnce(context.client, spec.stream, spec.group, spec.concurrency)
        return _Counting(inner, self.seen)


@pytest.fixture
def plugin() -> Iterator[CountingPlugin]:
    found = CountingPlugin()
    registry.register(found)
    yield found
    registry.unregister("counting")
    assert "counting" not in registry.names()


def test_a_registered_strategy_checks_the_handlers_that_ask_for_it(plugin: CountingPlugin) -> None:
    app = App("plugged")

    @app.handler("orders", group="g", idempotency="counting", concurrency=2)
    async def handle(msg: Message) -> None: ...

    assert plugin.concurrency_checked == [2]
    assert "counting" in registry.names()
    with pytest.raises(ConfigError, match="at most 4 handlers"):
        app.handler("other", group="g", idempotency="counting", concurrency=5)


def test_an_unknown_strategy_is_refused_with_the_names_there_are(plugin: CountingPlugin) -> None:
    with pytest.raises(ConfigError, match=r"idempotency must be one of none, sql, lua, .*counting"):
        App("x").handler("orders", group="g", idempotency="nope")


async def test_the_worker_builds_and_runs_a_registered_strategy(
    plugin: CountingPlugin, streamworker_run: Run
) -> None:
    app = App("plugged")
    handled: list[str] = []

    @app.handler("orders", group="g", idempotency="counting")
    async def handle(msg: Message) -> None:
        handled.append(msg.fields["n"])

    worker = await streamworker_run(app)
    sent = [await worker.publish("orders", {"n": str(i)}) for i in range(3)]
    await worker.drain()
    for one in sent:
        worker.assert_acked(one)
    assert sorted(handled) == ["0", "1", "2"]
    assert sum(plugin.seen) == 3
