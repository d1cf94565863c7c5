"""OpenTelemetry tracing (the ``tracing`` extra: ``pip install 'streamworker[tracing]'``).

Producer side: :func:`inject_traceparent` adds the current span's W3C ``traceparent`` (and
``tracestate``) to the fields of an entry before XADD; :func:`xadd_traced` does it inside a
``send {stream}`` PRODUCER span of its own.

Worker side (``WorkerOptions(tracing=True)``, ``streamworker run --tracing``): one CONSUMER span
``process {stream}`` per message, *linked* to the producer's span when the entry carries a
``traceparent`` (messaging semantic conventions: ``messaging.system=redis``,
``messaging.destination.name``, ``messaging.message.id``, ``messaging.consumer.group.name``,
``messaging.redis.message.delivery_count``, ``messaging.operation.type=process``). The handler
runs with that span as the current one (its own spans are children, in threads too), and an
exception it raises is recorded on it (``Retry`` is an event, not an error). The span gets two
children when the message is acked: ``streamworker.idempotency.commit`` (where the strategy has
such a step: ``sql``'s database commit; ``lua``'s script that applies the effects and acks,
atomically) and ``streamworker.ack`` (the XACK; for ``lua``, the same script). Each strategy
describes its steps (``trace_phases``, :class:`~streamworker.idempotency.base.SpanPhases`);
tracing knows none by name. A batch's messages share one commit and one ack, so their children
carry the same times. Counters and the handler-duration
histogram get exemplars with the trace id (shown by ``/metrics`` in the OpenMetrics format).

Spans go to the tracer provider given (default: OpenTelemetry's global one, which the SDK or
``opentelemetry-instrument`` configures). Without ``tracing=True`` none of this code runs: the
consume loop has nothing to skip per message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import redis.asyncio as aioredis
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from streamworker.app import HandlerSpec
from streamworker.core.deps import MessageParam
from streamworker.core.message import Message
from streamworker.core.outcomes import Action, Outcome
from streamworker.errors import Retry
from streamworker.idempotency.base import Batch, SpanPhases, Strategy
from streamworker.io.redisio import as_text
from streamworker.observability.metrics import Metrics

__all__ = [
    "TRACEPARENT_FIELD",
    "TRACESTATE_FIELD",
    "Tracing",
    "inject_traceparent",
    "xadd_traced",
]

TRACEPARENT_FIELD = "traceparent"
"""The entry field holding the producer's W3C trace context."""
TRACESTATE_FIELD = "tracestate"

_W3C = TraceContextTextMapPropagator()


def _tracer(provider: TracerProvider | None) -> trace.Tracer:
    from streamworker.version import __version__

    return trace.get_tracer("streamworker", __version__, tracer_provider=provider)


def inject_traceparent(
    fields: MutableMapping[str, Any],
    *,
    context: Context | None = None,
    field: str = TRACEPARENT_FIELD,
) -> MutableMapping[str, Any]:
    """Add the W3C ``traceparent`` of ``context`` (default: the current span) to ``fields`` under
    ``field`` (and ``tracestate`` when there is one); returns ``fields``. Nothing is added when no
    span is recording."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    if "traceparent" in carrier:
        fields[field] = carrier["traceparent"]
        if carrier.get("tracestate"):
            fields[TRACESTATE_FIELD] = carrier["tracestate"]
    return fields


async def xadd_traced(
    client: aioredis.Redis,
    stream: str,
    fields: Mapping[str, Any],
    *,
    tracer_provider: TracerProvider | None = None,
    field: str = TRACEPARENT_FIELD,
    **xadd_options: Any,
) -> str:
    """XADD ``fields`` to ``stream`` inside a ``send {stream}`` PRODUCER span whose context goes
    into the entry (``field``); returns the entry id."""
    tracer = _tracer(tracer_provider)
    attributes = {
        "messaging.system": "redis",
        "messaging.destination.name": stream,
        "messaging.operation.type": "send",
        "messaging.operation.name": "xadd",
    }
    with tracer.start_as_current_span(
        f"send {stream}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        entry: dict[Any, Any] = dict(fields)
        inject_traceparent(entry, field=field)
        entry_id = await client.xadd(stream, entry, **xadd_options)
        text = as_text(entry_id)
        span.set_attribute("messaging.message.id", text)
        return text


def _link(fields: Mapping[str, str], field: str) -> Link | None:
    parent = fields.get(field)
    if not parent:
        return None
    carrier = {"traceparent": parent}
    if fields.get(TRACESTATE_FIELD):
        carrier["tracestate"] = fields[TRACESTATE_FIELD]
    context = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
    return Link(context) if context.is_valid else None


class _TimedClient:
    """The strategy's Redis client, noting when XACK and EVALSHA calls ran (to place the commit
    and ack spans). Everything else passes through. Used only with tracing on."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self.calls: list[tuple[str, int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def _timed(self, command: str, *args: Any, **kwargs: Any) -> Any:
        started = time.time_ns()
        try:
            return await getattr(self._client, command)(*args, **kwargs)
        finally:
            self.calls.append((command, started, time.time_ns()))

    async def xack(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("xack", *args, **kwargs)

    async def evalsha(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("evalsha", *args, **kwargs)


@dataclasses.dataclass
class _Running:
    """A message's span while its batch is processed, and when its handler ran (ns)."""

    span: Span
    started_ns: int = 0
    ended_ns: int = 0


class Tracing:
    """The worker's tracing: wraps handlers, strategies and their clients (see the module doc).

    Args:
        metrics: the worker's metrics (exemplars are attached to them).
        tracer_provider: where spans go; default OpenTelemetry's global provider.
        traceparent_field: the entry field with the producer's context.
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        tracer_provider: TracerProvider | None = None,
        traceparent_field: str = TRACEPARENT_FIELD,
    ) -> None:
        self.metrics = metrics
        self.tracer = _tracer(tracer_provider)
        self.field = traceparent_field
        # id(message) -> its span, while its batch is in a strategy (one batch per subscription
        # at a time; handlers look their span up here, from any thread).
        self.running: dict[int, _Running] = {}

    def instrument(self, spec: HandlerSpec) -> HandlerSpec:
        """``spec`` with its function wrapped: the message's span is current while it runs, and
        what it raises is recorded."""
        func = spec.func
        name = next((n for n, p in spec.plan.params if isinstance(p, MessageParam)), None)
        running = self.running

        def lookup(kwargs: Mapping[str, Any]) -> _Running | None:
            msg = kwargs.get(name) if name else None
            return running.get(id(msg)) if isinstance(msg, Message) else None

        def enter(state: _Running) -> object:
            """The message's span made current (so that what the handler publishes carries
            its context, sampled or not); the token for :func:`leave`. Written out rather than
            with ``trace.use_span``: two generator-based context managers per message were
            most of what tracing cost a message whose trace is not sampled."""
            state.started_ns = time.time_ns()
            return otel_context.attach(trace.set_span_in_context(state.span))

        def leave(state: _Running, token: object, exc: BaseException | None) -> None:
            otel_context.detach(token)  # type: ignore[arg-type]
            state.ended_ns = time.time_ns()
            if exc is None or not state.span.is_recording():
                return
            if isinstance(exc, Retry):
                state.span.add_event("retry_requested", {"streamworker.retry.reason": str(exc)})
                return
            state.span.record_exception(exc)
            state.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

        if inspect.iscoroutinefunction(func):

            async def traced_async(**kwargs: Any) -> Any:
                state = lookup(kwargs)
                if state is None:
                    return await func(**kwargs)
                token = enter(state)
                try:
                    result = await func(**kwargs)
                except BaseException as exc:
                    leave(state, token, exc if isinstance(exc, Exception) else None)
                    raise
                leave(state, token, None)
                return result

            wrapped: Callable[..., Any] = traced_async
        else:

            def traced(**kwargs: Any) -> Any:
                state = lookup(kwargs)
                if state is None:
                    return func(**kwargs)
                token = enter(state)
                try:
                    result = func(**kwargs)
                except BaseException as exc:
                    leave(state, token, exc if isinstance(exc, Exception) else None)
                    raise
                leave(state, token, None)
                return result

            wrapped = traced
        return dataclasses.replace(spec, func=wrapped)

    def wrap(
        self,
        spec: HandlerSpec,
        client: aioredis.Redis,
        make: Callable[[aioredis.Redis], Strategy],
        consumer: str,
    ) -> Strategy:
        """The strategy ``make(client)`` builds, with a span per message: ``make`` gets a
        client whose XACK and EVALSHA calls are timed (duck-typed, redis-py's methods)."""
        timed = _TimedClient(client)
        proxy: Any = timed
        return _TracedStrategy(self, spec, make(proxy), timed, consumer)


class _TracedStrategy:
    """A Strategy that opens each message's span around the inner strategy's batch."""

    def __init__(
        self,
        tracing: Tracing,
        spec: HandlerSpec,
        inner: Strategy,
        client: _TimedClient,
        consumer: str,
    ) -> None:
        self.name = inner.name
        # How the strategy's steps show in a trace: it says so itself (tracing knows no names).
        self._phases_of: SpanPhases = getattr(inner, "trace_phases", SpanPhases())
        self._tracing = tracing
        self._spec = spec
        self._inner = inner
        self._client = client
        self._consumer = consumer
        labels = {"stream": spec.stream, "group": spec.group, "handler": spec.name}
        self._labels = labels
        self._duration = tracing.metrics.handler_duration.labels(**labels)

    def _start(self, msg: Message[Any], at_ns: int) -> Span:
        spec = self._spec
        link = _link(msg.fields, self._tracing.field)
        return self._tracing.tracer.start_span(
            f"process {spec.stream}",
            kind=SpanKind.CONSUMER,
            links=None if link is None else [link],
            start_time=at_ns,
            attributes={
                "messaging.system": "redis",
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": spec.stream,
                "messaging.consumer.group.name": spec.group,
                "messaging.client.id": self._consumer,
                "messaging.message.id": msg.id,
                "messaging.redis.message.delivery_count": msg.delivery_count,
                "streamworker.handler": spec.name,
            },
        )

    async def process(self, work: Batch) -> list[Outcome]:
        """The inner strategy's outcomes; spans opened before it and closed after it."""
        batch = work.messages
        started = time.time_ns()
        running = self._tracing.running
        states = [_Running(self._start(msg, started)) for msg in batch]
        for msg, state in zip(batch, states, strict=True):
            running[id(msg)] = state
        self._client.calls.clear()
        try:
            outcomes = await self._inner.process(work)
        except BaseException as exc:
            for state in states:
                if not isinstance(exc, asyncio.CancelledError):
                    state.span.record_exception(exc)
                    state.span.set_status(Status(StatusCode.ERROR, str(exc)))
                state.span.end()
            raise
        finally:
            for msg in batch:
                running.pop(id(msg), None)
        self._finish(states, outcomes, started)
        return outcomes

    def _phases(self, handlers_done: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """(commit, ack) windows of the batch, from the timed calls, as the strategy describes
        its steps (:class:`~streamworker.idempotency.base.SpanPhases`)."""
        calls = self._client.calls
        phases = self._phases_of
        script: tuple[int, int] | None = None
        if "script" in (phases.commit, phases.ack):
            scripts = [(s, e) for name, s, e in calls if name == "evalsha" and s >= handlers_done]
            script = scripts[-1] if scripts else None
        if phases.ack == "script":
            ack = script
        else:
            acks = [(s, e) for name, s, e in calls if name == "xack"]
            ack = acks[-1] if acks else None
        if phases.commit == "script":
            return script, ack
        if phases.commit == "until_ack" and ack is not None:
            return (handlers_done, ack[0]), ack
        return None, ack

    def _finish(self, states: list[_Running], outcomes: list[Outcome], started: int) -> None:
        ended = time.time_ns()
        handlers_done = max((s.ended_ns for s in states), default=started) or started
        commit, ack = self._phases(handlers_done)
        tracer = self._tracing.tracer
        exemplars: dict[str, _Running] = {}
        for state, outcome in zip(states, outcomes, strict=True):
            span = state.span
            if not span.is_recording():  # not sampled: no children, no exemplar
                span.end(end_time=ended)
                continue
            span.set_attribute("streamworker.outcome", outcome.metric)
            if outcome.action is Action.ACK:
                parent = trace.set_span_in_context(span)
                if commit is not None:
                    tracer.start_span(
                        "streamworker.idempotency.commit",
                        context=parent,
                        start_time=commit[0],
                        attributes={"streamworker.idempotency": self.name},
                    ).end(end_time=max(commit))
                if ack is not None:
                    tracer.start_span(
                        "streamworker.ack",
                        context=parent,
                        start_time=ack[0],
                        attributes={"messaging.operation.type": "settle"},
                    ).end(end_time=max(ack))
            elif outcome.action is Action.DEAD_LETTER:
                span.set_status(Status(StatusCode.ERROR, outcome.error))
            exemplars[outcome.metric] = state  # one exemplar per outcome and batch: the last
            span.end(end_time=ended)
        messages = self._tracing.metrics.messages
        for label, state in exemplars.items():
            context = state.span.get_span_context()
            exemplar = {
                "trace_id": f"{context.trace_id:032x}",
                "span_id": f"{context.span_id:016x}",
            }
            # inc(0) attaches the exemplar without counting: the consume loop counts.
            messages.labels(outcome=label, **self._labels).inc(0, exemplar=exemplar)
            if state.ended_ns:
                seconds = (state.ended_ns - state.started_ns) / 1e9
                _histogram_exemplar(self._duration, seconds, exemplar)


def _histogram_exemplar(child: Any, value: float, exemplar: dict[str, str]) -> None:
    """Attach ``exemplar`` to the bucket of ``child`` (a Histogram child) that ``value`` falls
    in, without observing it (the invoker does). Uses prometheus_client internals; does nothing
    where they are not there."""
    from prometheus_client.samples import Exemplar

    bounds: Sequence[float] | None = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    if not bounds or not buckets or len(bounds) != len(buckets):
        return
    index = next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds) - 1)
    setter = getattr(buckets[index], "set_exemplar", None)
    if callable(setter):
        setter(Exemplar(exemplar, value, time.time()))
