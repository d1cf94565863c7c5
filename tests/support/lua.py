"""Drive :class:`LuaStrategy` directly (read, process, repeat) for tests that need exact control
over who holds which entry when the scripts run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from streamworker.core.codec import MessageDecoder
from streamworker.core.message import Message
from streamworker.core.outcomes import ACKED, Outcome, decide
from streamworker.idempotency.base import Batch, CoroutineHandler
from streamworker.idempotency.lua import LuaStrategy
from streamworker.io.redisio import parse_read_reply

Handler = Callable[[Message[Any]], Any]


def make_invoke(handler: Handler, max_deliveries: int = 5) -> CoroutineHandler:
    """A :class:`~streamworker.idempotency.base.RunHandler` as the consume loop's: the handler's return value rides on the ACK outcome;
    an exception becomes the outcome ``decide`` gives."""

    @CoroutineHandler
    async def invoke(msg: Message[Any], provided: Any) -> Outcome:
        try:
            result = handler(msg)
            if hasattr(result, "__await__"):
                result = await result
        except Exception as exc:
            return decide(exc, msg.delivery_count, max_deliveries)
        return dataclasses.replace(ACKED, value=result) if result is not None else ACKED

    return invoke


async def read(
    client: aioredis.Redis,
    stream: str,
    group: str,
    consumer: str,
    *,
    start: str = ">",
    count: int = 100,
) -> list[Message[Any]]:
    """XREADGROUP one batch and decode it as the consume loop would (delivery counts: 1 for
    ``>`` reads, else from XPENDING)."""
    reply = await client.xreadgroup(group, consumer, {stream: start}, count=count)
    entries = parse_read_reply(reply, stream.encode())
    counts: dict[bytes, int] = {}
    if start != ">" and entries:
        rows = await client.xpending_range(
            stream, group, min=entries[0].id, max=entries[-1].id, count=len(entries)
        )
        counts = {r["message_id"]: int(r["times_delivered"]) for r in rows}
    decode = MessageDecoder(
        stream=stream, group=group, consumer=consumer, model=None, body_field=None
    ).decode
    return [decode(e.id, e.fields or [], counts.get(e.id, 1)) for e in entries]


async def drain(
    strategy: LuaStrategy, client: aioredis.Redis, handler: Handler, *, count: int = 100
) -> list[Outcome]:
    """Read and process new entries until none are left; every outcome, in order."""
    invoke = make_invoke(handler)
    outcomes: list[Outcome] = []
    while True:
        batch = await read(client, strategy.stream, strategy.group, strategy.consumer, count=count)
        if not batch:
            return outcomes
        outcomes += await strategy.process(Batch(batch, invoke))
