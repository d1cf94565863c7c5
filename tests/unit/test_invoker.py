"""The runtime's handler invoker: the awaited call and its blocking (inline) form agree."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from sqlalchemy.orm import Session

from streamworker import App, DeadLetter, Depends, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import NOT_STARTED, Action, Outcome
from streamworker.observability.metrics import Metrics
from streamworker.runtime.invoker import HandlerInvoker
from streamworker.runtime.threads import HandlerThreads


def _message(n: str) -> Message[Any]:
    return Message(id="1-0", stream="s", group="g", consumer="c", fields={"n": n}, body=None)


async def _invoker(app: App, stop: threading.Event | None = None) -> HandlerInvoker:
    spec = app.handlers[0]
    resolver = Resolver()
    await resolver.start([spec.plan])
    stop = stop or threading.Event()
    return HandlerInvoker(
        spec,
        resolver=resolver,
        threads=HandlerThreads(1),
        metrics=Metrics(),
        stopping=stop.is_set,
        log=structlog.get_logger("test"),
    )


def _pool() -> str:
    return "pool"


def _sync_app(calls: list[tuple[str, str, bool]]) -> App:
    app = App("t")

    @app.handler("s", group="g")
    def handle(msg: Message, pool: str = Depends(_pool, scope="worker")) -> int:
        calls.append((msg.fields["n"], pool, threading.current_thread() is threading.main_thread()))
        if msg.fields["n"] == "fail":
            raise RuntimeError("boom")
        if msg.fields["n"] == "dead":
            raise DeadLetter("never")
        return 7

    return app


@pytest.mark.parametrize("n", ["ok", "fail", "dead"])
async def test_inline_call_gives_the_outcome_of_the_awaited_call(n: str) -> None:
    calls: list[tuple[str, str, bool]] = []
    invoker = await _invoker(_sync_app(calls))
    inline = invoker.inline
    assert inline is not None
    awaited = await invoker(_message(n), {})
    direct: Outcome = inline(_message(n), {})
    assert (direct.action, direct.error, direct.value) == (
        awaited.action,
        awaited.error,
        awaited.value,
    )
    expected = {"ok": Action.ACK, "fail": Action.LEAVE_PENDING, "dead": Action.DEAD_LETTER}[n]
    assert direct.action is expected
    # The awaited call ran in the pool, the inline one in the caller's thread.
    assert [(c[1], c[2]) for c in calls] == [("pool", False), ("pool", True)]


async def test_inline_call_gets_what_the_strategy_provides() -> None:
    app = App("t")
    seen: list[Session] = []

    @app.handler("s", group="g", idempotency="sql")
    def handle(msg: Message, session: Session) -> None:
        seen.append(session)

    inline = (await _invoker(app)).inline
    assert inline is not None
    session = Session()
    assert inline(_message("x"), {Session: session}).acked
    assert seen == [session]


async def test_no_inline_form_for_async_handlers_or_per_message_dependencies() -> None:
    app = App("t")

    @app.handler("s", group="g")
    async def handle(msg: Message) -> None: ...

    assert (await _invoker(app)).inline is None

    def per_message(msg: Message) -> Iterator[str]:
        yield msg.id

    app = App("t")

    @app.handler("s", group="g")
    def handle2(msg: Message, value: str = Depends(per_message)) -> None: ...

    assert (await _invoker(app)).inline is None


async def test_inline_call_does_not_start_a_handler_once_stopping() -> None:
    calls: list[tuple[str, str, bool]] = []
    stop = threading.Event()
    invoker = await _invoker(_sync_app(calls), stop)
    inline = invoker.inline
    assert inline is not None
    stop.set()
    assert inline(_message("ok"), {}) is NOT_STARTED
    assert calls == []
