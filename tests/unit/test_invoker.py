"""The runtime's handler invoker: the awaited call and its blocking (inline) form agree."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from sqlalchemy.orm import Session

from streamworker import App, DeadLetter, Depends, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import NOT_STARTED, Action, Outcome
from streamworker.idempotency.base import Batch
from streamworker.observability.metrics import Metrics
from streamworker.runtime.invoker import HandlerInvoker
from streamworker.runtime.threads import HandlerThreads
from tests.support.waiting import eventually


def _message(n: str) -> Message[Any]:
    return Message(id="1-0", stream="s", group="g", consumer="c", fields={"n": n}, body=None)


async def _invoker(
    app: App, stop: threading.Event | None = None, *, debug: bool = True
) -> HandlerInvoker:
    spec = app.handlers[0]
    resolver = Resolver()
    await resolver.start([spec.plan])
    stop = stop or threading.Event()
    # Without debug logs (the default level, info) the invoker takes its short paths.
    level = logging.DEBUG if debug else logging.INFO
    log = structlog.wrap_logger(
        structlog.PrintLogger(), wrapper_class=structlog.make_filtering_bound_logger(level)
    )
    return HandlerInvoker(
        spec,
        resolver=resolver,
        threads=HandlerThreads(1),
        metrics=Metrics(),
        stopping=stop.is_set,
        log=log,
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


def _async_app(ran: list[str], stop: threading.Event) -> App:
    app = App("t")

    @app.handler("s", group="g")
    async def handle(msg: Message) -> Any:
        n = msg.fields["n"]
        ran.append(n)
        if n == "fail":
            raise RuntimeError("boom")
        if n == "dead":
            raise DeadLetter("never")
        if n == "value":
            return 7
        if n == "stop":
            stop.set()
        if n == "hang":
            await asyncio.Event().wait()
        return None

    return app


async def _outcomes_one_by_one(names: list[str], debug: bool) -> tuple[list[Outcome], list[str]]:
    ran: list[str] = []
    stop = threading.Event()
    invoker = await _invoker(_async_app(ran, stop), stop, debug=debug)
    return [await invoker(_message(n), {}) for n in names], ran


def _shape(outcomes: list[Outcome]) -> list[tuple[Action, str | None, Any]]:
    return [(o.action, o.error, o.value) for o in outcomes]


@pytest.mark.parametrize(
    "names",
    [
        ["ok", "ok", "ok"],
        ["ok", "fail", "ok", "dead", "value", "ok"],
        ["ok", "stop", "ok", "fail"],  # stopping: the rest is not started
    ],
)
@pytest.mark.parametrize("debug", [False, True])
async def test_run_each_gives_the_outcomes_of_one_call_per_message(
    names: list[str], debug: bool
) -> None:
    expected, ran_singly = await _outcomes_one_by_one(names, debug)
    ran: list[str] = []
    stop = threading.Event()
    invoker = await _invoker(_async_app(ran, stop), stop, debug=debug)
    outcomes: list[Outcome] = []
    await invoker.run_each([_message(n) for n in names], {}, outcomes)
    assert _shape(outcomes) == _shape(expected)
    assert ran == ran_singly
    if "stop" in names:
        assert outcomes[names.index("stop") + 1] is NOT_STARTED
    # One handler duration per message run, recorded in the histogram at the flush.
    invoker.flush_timings()
    assert invoker._duration._sum.get() >= 0
    assert sum(b.get() for b in invoker._duration._buckets) == len(ran)


@pytest.mark.parametrize("debug", [False, True])
async def test_run_each_leaves_the_finished_outcomes_when_cancelled(debug: bool) -> None:
    ran: list[str] = []
    stop = threading.Event()
    invoker = await _invoker(_async_app(ran, stop), stop, debug=debug)
    outcomes: list[Outcome] = []
    task = asyncio.ensure_future(
        invoker.run_each([_message(n) for n in ["ok", "value", "hang", "ok"]], {}, outcomes)
    )
    await eventually(lambda: "hang" in ran)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [o.action for o in outcomes] == [Action.ACK, Action.ACK]
    assert outcomes[1].value == 7
    assert ran == ["ok", "value", "hang"]


async def test_batch_handle_each_is_the_invokers_loop_and_applies_verdicts_otherwise() -> None:
    ran: list[str] = []
    stop = threading.Event()
    invoker = await _invoker(_async_app(ran, stop), stop, debug=False)
    msgs = [_message("ok"), _message("fail")]
    plain = Batch(msgs, invoker)
    assert plain.handle_each == invoker.run_each
    # With a verdict for the message id "1-0" (both messages here), no handler runs.
    verdict = Outcome(Action.DEAD_LETTER, "over-delivered")
    decided = Batch(msgs, invoker, verdicts={"1-0": verdict})
    outcomes: list[Outcome] = []
    await decided.handle_each(msgs, {}, outcomes)
    assert outcomes == [verdict, verdict]
    assert ran == []
