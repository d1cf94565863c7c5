"""A ready conformance suite for idempotency strategies, built-in or third-party.

It checks the :class:`~streamworker.idempotency.base.Strategy` contract on a real Redis-compatible
server: one outcome per message, in order; exactly the ACK outcomes acked, after their effects;
the batch's verdicts kept without running their handlers; a stopping consumer's messages left
pending; the batch's next read sent behind its last call, after the ack.

Use it from a test module of your own: import the tests and provide the fixture
``strategy_subject`` (and, to test on another server than the in-process engine,
``conformance_redis_url``)::

    import pytest
    from streamworker.testing.conformance import *  # noqa: F403  (the tests)
    from streamworker.testing.conformance import StrategySubject

    @pytest.fixture
    def strategy_subject() -> StrategySubject:
        return StrategySubject(
            "mine", lambda target: MyStrategy(target.client, target.stream, target.group)
        )

The tests are ``async def`` and marked for pytest-asyncio (``streamworker[testing]``). Each
uses a stream and group of its own, so one server serves them all. streamworker runs the same
suite for ``none``, ``lua`` and ``sql`` (``tests/conformance/test_strategy_suite.py``).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from streamworker.core.message import Message
from streamworker.core.outcomes import ACKED, NOT_STARTED, Action, BatchOutcomes, Outcome
from streamworker.core.outcomes import over_delivered_verdict as _over_delivered_verdict
from streamworker.idempotency.base import Batch, BatchInlineRun, CoroutineHandler, Strategy
from streamworker.io.redisio import NextRead, as_bytes, open_redis, parse_read_reply

__all__ = [
    "StrategyHarness",
    "StrategySubject",
    "StrategyTarget",
    "conformance_redis_url",
    "strategy_harness",
    "test_a_batch_handler_is_called_once_with_the_messages_without_a_verdict",
    "test_a_failed_message_stays_pending_while_the_rest_are_acked",
    "test_a_stopping_consumer_acks_nothing_it_did_not_start",
    "test_a_verdict_is_kept_without_running_the_handler",
    "test_an_empty_batch_gives_no_outcomes_and_acks_nothing",
    "test_every_handled_message_is_acked_and_its_outcome_returned_in_order",
    "test_the_next_read_goes_out_behind_the_last_call_after_the_ack",
]

MAX_DELIVERIES = 3
"""The ``max_deliveries`` of the subscriptions the suite builds."""


@dataclass(frozen=True, slots=True)
class StrategyTarget:
    """The subscription a :class:`StrategySubject` builds a strategy for."""

    client: aioredis.Redis
    stream: str
    group: str
    consumer: str
    max_deliveries: int = MAX_DELIVERIES


@dataclass(frozen=True, slots=True)
class StrategySubject:
    """The strategy under test: a name (for messages), how to build it for a subscription (a
    function or a coroutine function), and whether it runs batch handlers
    (:attr:`~streamworker.idempotency.base.StrategyPlugin.supports_batch`)."""

    name: str
    build: Callable[[StrategyTarget], Strategy | Awaitable[Strategy]]
    supports_batch: bool = False


@pytest.fixture
def conformance_redis_url() -> str:
    """The server the suite runs on: the in-process engine unless overridden."""
    return "engine://memory"


@pytest_asyncio.fixture
async def strategy_harness(
    conformance_redis_url: str, strategy_subject: StrategySubject
) -> AsyncIterator[StrategyHarness]:
    client = open_redis(conformance_redis_url)
    harness = StrategyHarness(client, strategy_subject)
    try:
        yield harness
    finally:
        await client.aclose()


class StrategyHarness:
    """What each test of the suite gets (the fixture ``strategy_harness``): one stream and group
    of its own, entries read as the consume loop reads them, and the
    strategy built for them."""

    def __init__(self, client: aioredis.Redis, subject: StrategySubject) -> None:
        self.client = client
        self.subject = subject
        tag = uuid.uuid4().hex[:12]
        self.stream = f"{{conf-{tag}}}:s"
        self.group = "g"
        self.consumer = "c1"

    async def strategy(self) -> Strategy:
        built = self.subject.build(
            StrategyTarget(self.client, self.stream, self.group, self.consumer)
        )
        return await built if inspect.isawaitable(built) else built

    async def deliver(self, n: int, *, times: int = 1) -> list[Message[Any]]:
        """``n`` new entries, read by this consumer ``times`` times (the delivery counter)."""
        await self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        for i in range(n):
            await self.client.xadd(self.stream, {"n": str(i)})
        reply = await self.client.xreadgroup(self.group, self.consumer, {self.stream: ">"}, count=n)
        entries = parse_read_reply(reply, self.stream.encode())
        for _ in range(times - 1):
            await self.client.xreadgroup(self.group, self.consumer, {self.stream: "0"}, count=n)
        return [
            Message(
                id=e.id.decode(),
                stream=self.stream,
                group=self.group,
                consumer=self.consumer,
                fields={"n": str(i)},
                body=None,
                delivery_count=times,
            )
            for i, e in enumerate(entries)
        ]

    async def pending(self) -> list[str]:
        rows = await self.client.xpending_range(self.stream, self.group, "-", "+", 1000)
        return [as_bytes(r["message_id"]).decode() for r in rows]


def _recording(
    ran: list[str], outcome_of: Callable[[Message[Any]], Outcome] = lambda m: ACKED
) -> CoroutineHandler:
    async def handle(msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        ran.append(msg.id)
        return outcome_of(msg)

    return CoroutineHandler(handle)


class _RecordingBatch:
    """A batch handler that records the messages of each call and acks them all."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.inline: BatchInlineRun | None = None

    async def __call__(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any], /
    ) -> BatchOutcomes:
        self.calls.append([m.id for m in msgs])
        return BatchOutcomes([ACKED] * len(msgs), raised=False)


_FAILED = Outcome(Action.LEAVE_PENDING, "RuntimeError: the handler failed")


@pytest.mark.asyncio
async def test_an_empty_batch_gives_no_outcomes_and_acks_nothing(
    strategy_harness: StrategyHarness,
) -> None:
    h = strategy_harness
    await h.deliver(2)
    ran: list[str] = []
    outcomes = await (await h.strategy()).process(Batch([], _recording(ran)))
    assert outcomes == []
    assert ran == []
    assert len(await h.pending()) == 2


@pytest.mark.asyncio
async def test_every_handled_message_is_acked_and_its_outcome_returned_in_order(
    strategy_harness: StrategyHarness,
) -> None:
    h = strategy_harness
    msgs = await h.deliver(5)
    ran: list[str] = []
    outcomes = await (await h.strategy()).process(Batch(msgs, _recording(ran)))
    assert [o.action for o in outcomes] == [Action.ACK] * 5
    assert sorted(ran) == sorted(m.id for m in msgs)
    assert await h.pending() == []


@pytest.mark.asyncio
async def test_a_failed_message_stays_pending_while_the_rest_are_acked(
    strategy_harness: StrategyHarness,
) -> None:
    h = strategy_harness
    msgs = await h.deliver(4)
    bad = msgs[1].id
    ran: list[str] = []
    handler = _recording(ran, lambda m: _FAILED if m.id == bad else ACKED)
    outcomes = await (await h.strategy()).process(Batch(msgs, handler))
    assert [o.action for o in outcomes] == [
        Action.ACK,
        Action.LEAVE_PENDING,
        Action.ACK,
        Action.ACK,
    ]
    assert await h.pending() == [bad]


@pytest.mark.asyncio
async def test_a_verdict_is_kept_without_running_the_handler(
    strategy_harness: StrategyHarness,
) -> None:
    """An over-delivered message (decided before its handler) gets its verdict; its handler does
    not run and it is not acked (the batch processor dead-letters it)."""
    h = strategy_harness
    msgs = await h.deliver(3, times=MAX_DELIVERIES + 1)
    verdict = _over_delivered_verdict(MAX_DELIVERIES + 1, MAX_DELIVERIES)
    decided = msgs[0].id
    ran: list[str] = []
    batch = Batch(msgs, _recording(ran), verdicts={decided: verdict})
    outcomes = await (await h.strategy()).process(batch)
    assert outcomes[0] == verdict
    assert [o.action for o in outcomes[1:]] == [Action.ACK, Action.ACK]
    assert decided not in ran
    assert await h.pending() == [decided]


@pytest.mark.asyncio
async def test_a_stopping_consumer_acks_nothing_it_did_not_start(
    strategy_harness: StrategyHarness,
) -> None:
    """Once the consumer stops, its handler runner answers NOT_STARTED: those messages stay
    pending, for the backlog read of the next start."""
    h = strategy_harness
    msgs = await h.deliver(3)
    started = msgs[0].id
    ran: list[str] = []
    handler = _recording(ran, lambda m: ACKED if m.id == started else NOT_STARTED)
    outcomes = await (await h.strategy()).process(Batch(msgs, handler))
    assert outcomes[0].action is Action.ACK
    assert outcomes[1:] == [NOT_STARTED, NOT_STARTED]
    assert await h.pending() == [m.id for m in msgs[1:]]


@pytest.mark.asyncio
async def test_a_batch_handler_is_called_once_with_the_messages_without_a_verdict(
    strategy_harness: StrategyHarness,
) -> None:
    h = strategy_harness
    if not h.subject.supports_batch:
        pytest.skip(f"{h.subject.name} does not run batch handlers")
    msgs = await h.deliver(4, times=MAX_DELIVERIES + 1)
    verdict = _over_delivered_verdict(MAX_DELIVERIES + 1, MAX_DELIVERIES)
    handler = _RecordingBatch()
    batch = Batch(msgs, run_batch_handler=handler, verdicts={msgs[2].id: verdict})
    outcomes = await (await h.strategy()).process(batch)
    assert handler.calls == [[msgs[0].id, msgs[1].id, msgs[3].id]]
    assert outcomes[2] == verdict
    assert [outcomes[i].action for i in (0, 1, 3)] == [Action.ACK] * 3
    assert await h.pending() == [msgs[2].id]


@pytest.mark.asyncio
async def test_the_next_read_goes_out_behind_the_last_call_after_the_ack(
    strategy_harness: StrategyHarness,
) -> None:
    """The batch's last Redis call sends ``batch.next_read`` (one round trip per batch); Redis
    runs it after the ack, so only the entries it read are pending afterwards."""
    h = strategy_harness
    msgs = await h.deliver(2)
    for i in range(3):
        await h.client.xadd(h.stream, {"n": f"next {i}"})
    slot = NextRead(h.client, h.group, h.consumer, h.stream, count=3, wanted=lambda: True)
    sends = slot.ready_for(h.client)  # only a plain redis.asyncio client shares its connection
    ran: list[str] = []
    await (await h.strategy()).process(Batch(msgs, _recording(ran), next_read=slot))
    pending = await h.pending()
    if not sends:
        assert pending == []
        return
    assert slot.holding(), f"{h.subject.name} did not send the batch's next read"
    read = [e.id.decode() for e in parse_read_reply(slot.take(), h.stream.encode())]
    assert len(read) == 3
    assert pending == read
