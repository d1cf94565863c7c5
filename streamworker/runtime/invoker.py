"""Calling a handler for one message: its arguments, the call, the timing, and the runtime's
decision (:func:`~streamworker.core.outcomes.decide`). The batch processor puts a
:class:`HandlerInvoker` in every :class:`~streamworker.idempotency.base.Batch` it hands to its
idempotency strategy; the invoker knows nothing of verdicts or strategies' internals."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from streamworker.app import HandlerSpec
from streamworker.core.deps import MessageParam, Resolver
from streamworker.core.effects import Effects
from streamworker.core.message import Message
from streamworker.core.outcomes import (
    ACKED,
    NOT_STARTED,
    Action,
    BadBatchResult,
    BatchOutcomes,
    Outcome,
    batch_outcomes,
    decide,
    describe,
    rate_limited,
    schema_error,
)
from streamworker.errors import RateLimited, Retry, SchemaError
from streamworker.idempotency import registry
from streamworker.idempotency.base import BatchInlineRun, RunBatchHandler, RunHandler
from streamworker.observability.metrics import Metrics, observe_many
from streamworker.runtime.ratelimit import HandlerPause
from streamworker.runtime.threads import HandlerThreads

_PAUSED = "not started: the handler is paused (RateLimited)"

_FLUSH_EVERY = 512


class HandlerInvoker:
    """``await invoker(msg, provided)`` runs ``spec``'s handler for ``msg`` and returns the
    outcome; it never raises for the handler's errors (it does for CancelledError). Once the
    consumer is stopping it returns NOT_STARTED without running the handler.

    ``async def`` handlers run on the event loop, ``def`` handlers in the worker's thread pool,
    one thread hop per message. :attr:`inline` is the blocking form of the same call, for
    strategies that already work in a pool thread and run a whole batch there in one hop (the SQL
    strategy): it is set for ``def`` handlers whose arguments need nothing awaited per message
    (no message-scoped ``Depends``), None otherwise.

    It is the :class:`~streamworker.idempotency.base.RunHandler` the batch processor puts in
    each :class:`~streamworker.idempotency.base.Batch` (:attr:`run_handler`). A batch handler
    (``batch=True``) is called through :attr:`run_batch_handler` instead, once per batch;
    ``__call__`` and :attr:`inline` are not used for it.

    With a strategy whose plug-in sets ``pauses_on_schema_errors`` (``idempotency="sql"``), a
    handler error that says the schema does not fit (:func:`~streamworker.core.outcomes.schema_error`)
    is raised as :class:`~streamworker.errors.SchemaError` instead of becoming the message's
    outcome: the strategy rolls the batch back and the consume loop pauses the handler.

    A handler that raises :class:`~streamworker.errors.RateLimited` pauses ``pause`` at once:
    until it ends, the invoker starts no handler and returns a rate-limited outcome (the
    message is retried after the pause, uncounted; the batch processor tells the group).
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
        pause: HandlerPause | None = None,
    ) -> None:
        self._spec = spec
        self.pause = pause or HandlerPause()
        self._resolver = resolver
        self._threads = threads
        self._duration = metrics.handler_duration.labels(
            stream=spec.stream, group=spec.group, handler=spec.name
        )
        # Handler durations not yet in the histogram: recorded in bulk by flush_timings().
        self._timings: list[float] = []
        self._flush_lock = threading.Lock()
        self._stopping = stopping
        self._log = log
        self._is_async = spec.is_async
        # Arguments without message-scoped dependencies are looked up, not created: no exit
        # stack to open and close per message.
        self._plain_arguments = resolver.resolves_inline(spec.plan)
        self.inline: Callable[[Message[Any], Mapping[type, Any]], Outcome] | None = None
        if not self._is_async and self._plain_arguments and not spec.batch:
            self.inline = self._call_inline
        self.run_handler: RunHandler | None = None if spec.batch else self
        """This invoker as a :class:`~streamworker.idempotency.base.Batch`'s ``run_handler``
        (None for a batch handler)."""
        self.run_batch_handler: RunBatchHandler | None = None
        """A batch handler's call, as a :class:`~streamworker.idempotency.base.Batch`'s
        ``run_batch_handler`` (None for a single-message handler)."""
        if spec.batch:
            # Its blocking form (a ``def`` batch handler whose arguments need nothing awaited),
            # for a strategy that runs the batch's database work in one pool thread.
            self.run_batch_handler = _BatchCall(
                self._call_batch,
                self._call_batch_inline if not self._is_async and self._plain_arguments else None,
            )
        # The usual handler, ``async def handle(msg)``: called with the message, nothing to look up.
        params = spec.plan.params
        self._message_only = (
            params[0][0]
            if self._is_async and len(params) == 1 and isinstance(params[0][1], MessageParam)
            else None
        )
        # ... and when that parameter comes first and takes a positional argument (not a wrapper
        # such as tracing's, which takes keywords only), the message is passed positionally.
        self._message_positional = self._message_only is not None and _first_positional(
            spec.func, self._message_only
        )
        plugin = registry.get(spec.idempotency)
        self._drops_effects = not plugin.applies_effects
        # Only where a transaction holds the whole batch: the strategy rolls it back and nothing
        # of it is acked. Lua and none ack per batch without one, and streamworker knows nothing
        # of the database a handler of theirs writes to: a schema error there is the message's
        # failure (retried, then dead-lettered, and replayable from the dead-letter stream).
        self._pauses_on_schema = bool(getattr(plugin, "pauses_on_schema_errors", False))
        # Whether debug logs are kept: the per-message "message_handled" is skipped otherwise.
        enabled = getattr(log, "is_enabled_for", None)
        self._debug = enabled(logging.DEBUG) if callable(enabled) else True

    def flush_timings(self) -> None:
        """Record the handler durations measured since the last flush (the consume loop calls
        this after every batch; it also happens every few hundred calls by itself)."""
        # Safe against pool threads appending meanwhile: only the values taken are removed.
        with self._flush_lock:
            n = len(self._timings)
            taken = self._timings[:n]
            del self._timings[:n]
            observe_many(self._duration, taken)

    async def __call__(self, msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        spec = self._spec
        if self._stopping():
            return NOT_STARTED
        if self.pause.until:
            paused = self._paused()
            if paused is not None:
                return paused
        started = time.perf_counter()
        try:
            if self._message_positional:
                result = await spec.func(msg)
            elif self._message_only is not None:
                result = await spec.func(**{self._message_only: msg})
            elif self._plain_arguments:
                kwargs = self._resolver.arguments_inline(spec.plan, msg, provided)
                if self._is_async:
                    result = await spec.func(**kwargs)
                else:
                    result = await self._threads.run(spec.func, **kwargs)
            else:
                async with self._resolver.arguments(spec.plan, msg, dict(provided)) as kwargs:
                    result = await self._call(kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return self._conclude(msg, started, error)
        if result is None and not self._debug:
            # _conclude's common case, inlined: the handler returned nothing, no debug log.
            timings = self._timings
            timings.append(time.perf_counter() - started)
            if len(timings) >= _FLUSH_EVERY:
                self.flush_timings()
            return ACKED
        return self._conclude(msg, started, None, result)

    async def run_each(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any], outcomes: list[Outcome]
    ) -> None:
        """Run the handler for each of ``msgs`` in turn, appending each outcome to ``outcomes``
        as it is known: the same outcomes as awaiting ``self(msg, provided)`` for each, so that
        a cancellation leaves the finished ones in ``outcomes``
        (:attr:`~streamworker.idempotency.base.Batch.handle_each`).

        The usual handler (``async def handle(msg)``, no debug log) runs in this one loop, not
        through a call per message; its durations are taken by one clock read per message, each
        from the end of the previous call (the loop's own step between two calls, well under a
        microsecond, counts into the next one)."""
        append = outcomes.append
        if not self._message_positional or self._debug:
            for msg in msgs:
                append(await self(msg, provided))
            return
        func = self._spec.func
        stopping = self._stopping
        timings = self._timings
        record = timings.append
        clock = time.perf_counter
        pause = self.pause
        started = clock()
        for msg in msgs:
            if stopping():
                append(NOT_STARTED)
                continue
            if pause.until:
                # Paused by a RateLimited (this batch's or the group's): not started.
                paused = self._paused()
                if paused is not None:
                    append(paused)
                    continue
            try:
                result = await func(msg)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                append(self._conclude(msg, started, error))
                started = clock()
                continue
            if result is not None:
                append(self._conclude(msg, started, None, result))
                started = clock()
                continue
            ended = clock()
            record(ended - started)
            started = ended
            append(ACKED)
        if len(timings) >= _FLUSH_EVERY:
            self.flush_timings()

    async def _call(self, kwargs: dict[str, Any]) -> Any:
        if self._is_async:
            return await self._spec.func(**kwargs)
        return await self._threads.run(self._spec.func, **kwargs)

    def _call_inline(self, msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        # Runs in a pool thread (the caller's): the same steps as __call__, nothing awaited.
        withheld = self._withheld()
        if withheld is not None:
            return withheld
        started = time.perf_counter()
        try:
            result = self._spec.func(
                **self._resolver.arguments_inline(self._spec.plan, msg, provided)
            )
        except Exception as error:
            return self._conclude(msg, started, error)
        return self._conclude(msg, started, None, result)

    async def _call_batch(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any]
    ) -> BatchOutcomes:
        """Call the batch handler once with ``msgs`` (see
        :class:`~streamworker.idempotency.base.RunBatchHandler`)."""
        withheld = self._withheld()
        if withheld is not None:
            return BatchOutcomes([withheld] * len(msgs), raised=False)
        run = list(msgs)
        spec = self._spec
        started = time.perf_counter()
        try:
            if self._plain_arguments:
                kwargs = self._resolver.arguments_inline(spec.plan, run, provided)
                result = await self._call(kwargs)
            else:
                async with self._resolver.arguments(spec.plan, run, dict(provided)) as kwargs:
                    result = await self._call(kwargs)
            ran = self._batch_returned(run, result, started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return BatchOutcomes(self._batch_raised(run, exc, started), raised=True)
        return BatchOutcomes(ran, raised=False)

    def _call_batch_inline(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any]
    ) -> BatchOutcomes:
        # Runs in a pool thread (the caller's): the same steps as _call_batch, nothing awaited.
        withheld = self._withheld()
        if withheld is not None:
            return BatchOutcomes([withheld] * len(msgs), raised=False)
        run = list(msgs)
        started = time.perf_counter()
        try:
            kwargs = self._resolver.arguments_inline(self._spec.plan, run, provided)
            ran = self._batch_returned(run, self._spec.func(**kwargs), started)
        except Exception as exc:
            return BatchOutcomes(self._batch_raised(run, exc, started), raised=True)
        return BatchOutcomes(ran, raised=False)

    def _withheld(self) -> Outcome | None:
        """Why a handler is not started now (None: start it): NOT_STARTED while the worker
        stops, the pause's outcome while a RateLimited pauses the handler."""
        if self._stopping():
            return NOT_STARTED
        return self._paused()

    def _paused(self) -> Outcome | None:
        """The outcome of a message whose handler is not started because the handler is
        paused by a RateLimited (None when not paused): retried when the pause ends."""
        left_s = self.pause.left_s()
        if left_s <= 0:
            return None
        return rate_limited(int(left_s * 1000) + 1, _PAUSED, ran=False)

    def _note_rate_limited(self, exc: BaseException) -> None:
        """A handler raised RateLimited: pause at once, so that no further message of the batch
        starts (the batch processor tells the other workers)."""
        if isinstance(exc, RateLimited):
            self.pause.pause_for(exc.retry_after_ms)
            self._log.info("rate_limited", retry_after_ms=exc.retry_after_ms, reason=exc.reason)

    def _pause_on_schema_error(self, exc: BaseException) -> None:
        """Raise SchemaError when ``exc`` says the schema does not fit and this strategy pauses
        on that (see the class docstring)."""
        if self._pauses_on_schema:
            found = schema_error(exc)
            if found is not None:
                raise SchemaError(f"schema error in the handler: {describe(found)}") from exc

    def _batch_raised(
        self, run: list[Message[Any]], exc: Exception, started: float
    ) -> list[Outcome]:
        spec = self._spec
        self._timings.append(time.perf_counter() - started)
        self._pause_on_schema_error(exc)
        self._note_rate_limited(exc)
        if isinstance(exc, BadBatchResult):
            self._log.error("batch_result_invalid", error=str(exc), batch=len(run))
        else:
            self._log.warning(
                "batch_handler_failed",
                error=f"{type(exc).__name__}: {exc}",
                batch=len(run),
                exc_info=exc,
            )
        return [decide(exc, m.delivery_count, spec.max_deliveries) for m in run]

    def _batch_returned(
        self, run: list[Message[Any]], result: Any, started: float
    ) -> list[Outcome]:
        """The outcomes of a batch call that returned ``result``; raises BadBatchResult when it
        is not a result map."""
        outcomes = batch_outcomes(result, run, self._spec.max_deliveries)
        self._timings.append(time.perf_counter() - started)
        if isinstance(result, Mapping):
            for value in result.values():
                if isinstance(value, BaseException):
                    self._pause_on_schema_error(value)
                    self._note_rate_limited(value)
        for i, (msg, outcome) in enumerate(zip(run, outcomes, strict=True)):
            if outcome.action is Action.ACK:
                if self._drops_effects and isinstance(outcome.value, Effects):
                    outcomes[i] = self._effects_dropped(msg)
            elif outcome.action is Action.LEAVE_PENDING:
                log = self._log.bind(message_id=msg.id, delivery_count=msg.delivery_count)
                if outcome.retry:
                    log.info(
                        "retry_requested", reason=outcome.error, delay_ms=outcome.retry_delay_ms
                    )
                else:
                    log.warning("handler_failed", error=outcome.error)
        if self._debug:
            self._log.debug(
                "batch_handled", batch=len(run), duration_s=time.perf_counter() - started
            )
        return outcomes

    def _conclude(
        self, msg: Message[Any], started: float, exc: BaseException | None, result: Any = None
    ) -> Outcome:
        elapsed = time.perf_counter() - started
        timings = self._timings
        timings.append(elapsed)
        if len(timings) >= _FLUSH_EVERY:
            self.flush_timings()
        if exc is None:  # the common case, kept short: it runs for every message
            if self._debug:
                self._log.debug(
                    "message_handled",
                    message_id=msg.id,
                    delivery_count=msg.delivery_count,
                    duration_s=elapsed,
                )
            if result is None:
                return ACKED
            if self._drops_effects and isinstance(result, Effects):
                # Only idempotency="lua" applies returned Effects: acking would lose them.
                return self._effects_dropped(msg)
            # e.g. the Effects of idempotency="lua", applied by the strategy with the ack
            return Outcome(Action.ACK, value=result)
        self._pause_on_schema_error(exc)
        outcome = decide(exc, msg.delivery_count, self._spec.max_deliveries)
        if outcome.action is Action.LEAVE_PENDING:
            log = self._log.bind(message_id=msg.id, delivery_count=msg.delivery_count)
            if isinstance(exc, RateLimited):
                self._note_rate_limited(exc)
            elif isinstance(exc, Retry):
                log.info("retry_requested", reason=outcome.error, delay_ms=outcome.retry_delay_ms)
            else:
                log.warning("handler_failed", error=outcome.error, exc_info=exc)
        return outcome

    def _effects_dropped(self, msg: Message[Any]) -> Outcome:
        reason = (
            f"the handler returned Effects, which idempotency={self._spec.idempotency!r} does not "
            f"apply (only idempotency='lua' does); acking would drop them"
        )
        self._log.error("effects_dropped", message_id=msg.id, reason=reason)
        return Outcome(Action.DEAD_LETTER, f"ConfigError: {reason}")


class _BatchCall:
    """A :class:`~streamworker.idempotency.base.RunBatchHandler` of a :class:`HandlerInvoker`."""

    __slots__ = ("_call", "inline")

    def __init__(
        self,
        call: Callable[[Sequence[Message[Any]], Mapping[type, Any]], Awaitable[BatchOutcomes]],
        inline: BatchInlineRun | None,
    ) -> None:
        self._call = call
        self.inline = inline

    def __call__(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any], /
    ) -> Awaitable[BatchOutcomes]:
        return self._call(msgs, provided)


def _first_positional(func: Callable[..., Any], name: str) -> bool:
    """True when ``func``'s own first parameter is ``name`` and can be passed positionally."""
    try:
        params = list(inspect.signature(func, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].name == name and params[0].kind in _POSITIONAL


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def make_invoker(
    spec: HandlerSpec,
    *,
    resolver: Resolver,
    threads: HandlerThreads,
    metrics: Metrics,
    stopping: Callable[[], bool],
    consumer: str = "",
    pause: HandlerPause | None = None,
) -> HandlerInvoker:
    """A :class:`HandlerInvoker` logging as the consume loop does (benchmarks and tests use it
    to drive a strategy with the runtime's own handler calls, in a
    :class:`~streamworker.idempotency.base.Batch`)."""
    log = structlog.get_logger("streamworker.consumer").bind(
        stream=spec.stream, group=spec.group, consumer=consumer, handler=spec.name
    )
    return HandlerInvoker(
        spec,
        resolver=resolver,
        threads=threads,
        metrics=metrics,
        stopping=stopping,
        log=log,
        pause=pause,
    )
