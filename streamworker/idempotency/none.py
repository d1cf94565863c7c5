"""``idempotency="none"``: at-least-once. Effects happen before the ack, so a crash in between
redelivers the message and the handler runs again; handlers must tolerate that."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import redis.asyncio as aioredis

from streamworker.core.keyed import KeyFunc, run_keyed
from streamworker.core.message import Message
from streamworker.core.outcomes import ACKED, Action, Outcome
from streamworker.idempotency.base import (
    Batch,
    BuildContext,
    HandlerConfig,
    PlainPlugin,
    Strategy,
)
from streamworker.io.redisio import NextRead, connection_errors, xack_then_read

# What this strategy provides to handlers: nothing (one shared empty mapping, not one per call).
_NOTHING: Mapping[type, Any] = MappingProxyType({})

# After the shutdown deadline, finished messages are still acked, within this bound.
_ACK_ON_CANCEL_TIMEOUT_S = 2.0


class AtLeastOnce:
    """Run the batch's handlers (``concurrency`` at a time), then one XACK for the successes.
    A batch handler (``batch=True``) is called once for the batch; its successes are acked
    together the same way. With ``key`` (``key_field``), messages of one key run one after
    another in batch order, up to ``concurrency`` keys at once."""

    name = "none"

    def __init__(
        self,
        client: aioredis.Redis,
        stream: str,
        group: str,
        concurrency: int,
        key: KeyFunc | None = None,
    ) -> None:
        self._client = client
        self._stream = stream
        self._group = group
        self._concurrency = concurrency
        self._key = key

    async def process(self, batch: Batch) -> list[Outcome]:
        """See :class:`~streamworker.idempotency.base.Strategy` (no ownership check to skip)."""
        messages = batch.messages
        if not messages:
            return []
        next_read = batch.next_read
        many = batch.handle_batch
        if many is not None:
            outcomes = (await many(messages, _NOTHING)).outcomes
            await self._ack(messages, outcomes, next_read)
            return outcomes
        handle = batch.handle
        if self._concurrency == 1:
            each: list[Outcome] = []
            try:
                # One after another; each outcome lands in the list as it is known.
                await batch.handle_each(messages, _NOTHING, each)
            except asyncio.CancelledError:
                await self._ack_finished(messages[: len(each)], each)
                raise
            await self._ack(messages, each, next_read)
            return each

        if self._key is not None:
            return await self._process_keyed(batch, self._key)

        sem = asyncio.Semaphore(self._concurrency)

        async def limited(msg: Message[Any]) -> Outcome:
            async with sem:
                return await handle(msg, _NOTHING)

        tasks = [asyncio.ensure_future(limited(m)) for m in messages]
        try:
            outcomes = list(await asyncio.gather(*tasks))
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            done = [(m, t.result()) for m, t in zip(messages, tasks, strict=True) if _succeeded(t)]
            await self._ack_finished([m for m, _ in done], [o for _, o in done])
            raise
        await self._ack(messages, outcomes, next_read)
        return outcomes

    async def _process_keyed(self, batch: Batch, key: KeyFunc) -> list[Outcome]:
        """The batch's messages as per-key lanes (:func:`~streamworker.core.keyed.run_keyed`),
        each through ``batch.handle``; one XACK (with the batch's next read behind it)."""
        messages = batch.messages
        handle = batch.handle
        results: list[Outcome | None] = [None] * len(messages)

        async def one(index: int, msg: Message[Any]) -> None:
            results[index] = await handle(msg, _NOTHING)

        try:
            await run_keyed(messages, self._concurrency, key, one)
        except asyncio.CancelledError:
            done = [(m, o) for m, o in zip(messages, results, strict=True) if o is not None]
            await self._ack_finished([m for m, _ in done], [o for _, o in done])
            raise
        outcomes = [o for o in results if o is not None]
        await self._ack(messages, outcomes, batch.next_read)
        return outcomes

    async def _ack(
        self,
        batch: Sequence[Message[Any]],
        outcomes: Sequence[Outcome],
        next_read: NextRead | None,
    ) -> None:
        # As bytes: redis-py passes bytes through, a str it checks and encodes per argument.
        if len(outcomes) == len(batch) and outcomes.count(ACKED) == len(batch):
            # The common batch, every message acked (list.count compares by identity first; an
            # Outcome equal to ACKED is an ACK).
            ids = [m.id.encode() for m in batch]
        else:
            ids = [
                m.id.encode()
                for m, o in zip(batch, outcomes, strict=True)
                if o.action is Action.ACK
            ]
        if ids:
            # The batch's last call: the consume loop's next read goes out behind it.
            async with connection_errors():
                await xack_then_read(self._client, self._stream, self._group, ids, next_read)

    async def _ack_finished(
        self, batch: Sequence[Message[Any]], outcomes: Sequence[Outcome]
    ) -> None:
        # Shielded: we are being cancelled, but what finished must still be acked (or it runs
        # again). Without the next read: the loop is stopping.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.shield(self._ack(batch, outcomes, None)), _ACK_ON_CANCEL_TIMEOUT_S
            )


def _succeeded(task: asyncio.Future[Outcome]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


class AtLeastOncePlugin(PlainPlugin):
    """``idempotency="none"`` as a plug-in: no provided types, no backing."""

    name = "none"
    applies_effects = False
    supports_dedup_field = False
    supports_batch = True

    def build(self, spec: HandlerConfig, context: BuildContext) -> Strategy:
        """An :class:`AtLeastOnce` for ``spec``."""
        return AtLeastOnce(
            context.client, spec.stream, spec.group, spec.concurrency, spec.message_key
        )


PLUGIN = AtLeastOncePlugin()
"""Found by :mod:`streamworker.idempotency.registry` as ``"none"``."""
