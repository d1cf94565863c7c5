"""The Batch a strategy is given (streamworker.idempotency.base): verdicts come before the
handler, a batch without verdicts calls the handler directly, and a dropped batch is freed at
once (no reference cycle keeping its messages until the cyclic collector runs)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from streamworker.core.message import Message
from streamworker.core.outcomes import ACKED, BatchOutcomes, Outcome, over_delivered_verdict
from streamworker.idempotency.base import Batch, CoroutineHandler

VERDICT = over_delivered_verdict(4, 3)


def _messages(n: int) -> list[Message[Any]]:
    return [
        Message(id=f"1-{i}", stream="s", group="g", consumer="c", fields={}, body=None)
        for i in range(n)
    ]


def _handler(ran: list[str]) -> CoroutineHandler:
    async def handle(msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        ran.append(msg.id)
        return ACKED

    return CoroutineHandler(handle)


class _BatchHandler:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.inline = self._inline

    def _inline(self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any]) -> BatchOutcomes:
        self.calls.append([m.id for m in msgs])
        return BatchOutcomes([ACKED] * len(msgs), raised=False)

    async def __call__(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any], /
    ) -> BatchOutcomes:
        return self._inline(msgs, provided)


class _Messages(list[Message[Any]]):
    """A list that can be watched with a weak reference."""


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_a_message_with_a_verdict_gets_it_without_its_handler_running() -> None:
    msgs = _messages(3)
    ran: list[str] = []
    batch = Batch(msgs, _handler(ran), verdicts={msgs[1].id: VERDICT})
    outcomes = [await batch.handle(m, {}) for m in msgs]
    assert outcomes == [ACKED, VERDICT, ACKED]
    assert ran == [msgs[0].id, msgs[2].id]


async def test_a_batch_without_verdicts_calls_the_handler_directly() -> None:
    handler = _handler([])
    batch = Batch(_messages(1), handler)
    assert batch.handle is handler
    assert batch.handle_batch is None


async def test_a_batch_handler_is_called_once_with_the_messages_without_a_verdict() -> None:
    msgs = _messages(4)
    handler = _BatchHandler()
    batch = Batch(msgs, run_batch_handler=handler, verdicts={msgs[2].id: VERDICT})
    assert batch.handle_batch is not None
    assert batch.handle_batch_inline is not None
    awaited = await batch.handle_batch(msgs, {})
    blocking = batch.handle_batch_inline(msgs, {})
    assert awaited == blocking
    assert awaited.outcomes == [ACKED, ACKED, VERDICT, ACKED]
    assert handler.calls == [[msgs[i].id for i in (0, 1, 3)]] * 2


def test_a_batch_takes_exactly_one_kind_of_handler() -> None:
    with pytest.raises(TypeError):
        Batch(_messages(1))
    with pytest.raises(TypeError):
        Batch(_messages(1), _handler([]), run_batch_handler=_BatchHandler())


@pytest.mark.usefixtures("no_cyclic_gc")
@pytest.mark.parametrize("verdicts", [False, True])
@pytest.mark.parametrize("kind", ["single", "batch"])
def test_a_dropped_batch_frees_its_messages_at_once(kind: str, verdicts: bool) -> None:
    msgs = _Messages(_messages(3))
    watched = weakref.ref(msgs)
    decided = {msgs[0].id: VERDICT} if verdicts else {}
    if kind == "single":
        batch = Batch(msgs, _handler([]), verdicts=decided)
    else:
        batch = Batch(msgs, run_batch_handler=_BatchHandler(), verdicts=decided)
    del msgs, batch
    assert watched() is None
