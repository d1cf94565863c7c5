"""Calling a handler for one message: its arguments, the call, the timing, and the runtime's
decision (:func:`~streamworker.outcomes.decide`). The consume loop hands a :class:`HandlerInvoker`
to its idempotency strategy as the strategy's ``invoke``."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from streamworker.app import HandlerSpec
from streamworker.deps import Resolver
from streamworker.errors import Retry
from streamworker.message import Message
from streamworker.observability.metrics import Metrics
from streamworker.outcomes import NOT_STARTED, Action, Outcome, decide
from streamworker.runtime.threads import HandlerThreads


class HandlerInvoker:
    """``await invoker(msg, provided)`` runs ``spec``'s handler for ``msg`` and returns the
    outcome; it never raises for the handler's errors (it does for CancelledError). Once the
    consumer is stopping it returns NOT_STARTED without running the handler.

    ``async def`` handlers run on the event loop, ``def`` handlers in the worker's thread pool,
    one thread hop per message. :attr:`inline` is the blocking form of the same call, for
    strategies that already work in a pool thread and run a whole batch there in one hop (the SQL
    strategy): it is set for ``def`` handlers whose arguments need nothing awaited per message
    (no message-scoped ``Depends``), None otherwise.
    """

    def __init__(
        self,
        spec: HandlerSpec,
        *,
        resolver: Resolver,
        threads: HandlerThreads,
        metrics: Metrics,
        stopping: Callable[[], bool],
        log: Any,
    ) -> None:
        self._spec = spec
        self._resolver = resolver
        self._threads = threads
        self._duration = metrics.handler_duration.labels(stream=spec.stream, group=spec.group)
        self._stopping = stopping
        self._log = log
        self._is_async = spec.is_async
        # Arguments without message-scoped dependencies are looked up, not created: no exit
        # stack to open and close per message.
        self._plain_arguments = resolver.resolves_inline(spec.plan)
        self.inline: Callable[[Message[Any], Mapping[type, Any]], Outcome] | None = None
        if not self._is_async and self._plain_arguments:
            self.inline = self._call_inline

    async def __call__(self, msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        spec = self._spec
        if self._stopping():
            return NOT_STARTED
        started = time.perf_counter()
        try:
            if self._plain_arguments:
                result = await self._call(self._resolver.arguments_inline(spec.plan, msg, provided))
            else:
                async with self._resolver.arguments(spec.plan, msg, dict(provided)) as kwargs:
                    result = await self._call(kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return self._conclude(msg, started, error)
        return self._conclude(msg, started, None, result)

    async def _call(self, kwargs: dict[str, Any]) -> Any:
        if self._is_async:
            return await self._spec.func(**kwargs)
        return await self._threads.run(self._spec.func, **kwargs)

    def _call_inline(self, msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        # Runs in a pool thread (the caller's): the same steps as __call__, nothing awaited.
        if self._stopping():
            return NOT_STARTED
        started = time.perf_counter()
        try:
            result = self._spec.func(
                **self._resolver.arguments_inline(self._spec.plan, msg, provided)
            )
        except Exception as error:
            return self._conclude(msg, started, error)
        return self._conclude(msg, started, None, result)

    def _conclude(
        self, msg: Message[Any], started: float, exc: BaseException | None, result: Any = None
    ) -> Outcome:
        spec = self._spec
        elapsed = time.perf_counter() - started
        self._duration.observe(elapsed)
        outcome = decide(exc, msg.delivery_count, spec.max_deliveries)
        if outcome.action is Action.ACK and result is not None:
            # e.g. the Effects of idempotency="lua", applied by the strategy with the ack
            outcome = dataclasses.replace(outcome, value=result)
        if outcome.action is Action.LEAVE_PENDING:
            log = self._log.bind(message_id=msg.id, delivery_count=msg.delivery_count)
            if isinstance(exc, Retry):
                log.info("retry_requested", reason=outcome.error, delay_ms=outcome.retry_delay_ms)
            else:
                log.warning("handler_failed", error=outcome.error, exc_info=exc)
        elif outcome.action is Action.ACK:
            self._log.debug(
                "message_handled",
                message_id=msg.id,
                delivery_count=msg.delivery_count,
                duration_s=elapsed,
            )
        return outcome


def make_invoker(
    spec: HandlerSpec,
    *,
    resolver: Resolver,
    threads: HandlerThreads,
    metrics: Metrics,
    stopping: Callable[[], bool],
    consumer: str = "",
) -> HandlerInvoker:
    """A :class:`HandlerInvoker` logging as the consume loop does (benchmarks and tests use it
    to drive a strategy with the runtime's own handler calls)."""
    log = structlog.get_logger("streamworker.consumer").bind(
        stream=spec.stream, group=spec.group, consumer=consumer, handler=spec.name
    )
    return HandlerInvoker(
        spec, resolver=resolver, threads=threads, metrics=metrics, stopping=stopping, log=log
    )
