"""The contract between the runtime and an idempotency strategy, and the plug-in interface.

A strategy is a plug-in (:class:`StrategyPlugin`): it says what it gives handlers (the parameter
types it provides, e.g. a SQL session), checks a handler when it is registered, may open a
backing shared by a worker's handlers (a database), and builds one :class:`Strategy` per
subscription. The plug-ins are found by name in :mod:`streamworker.idempotency.registry`;
neither the App nor the runtime knows any strategy by name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import redis.asyncio as aioredis

from streamworker.core.deps import CallPlan, build_plan
from streamworker.core.keyed import KeyFunc
from streamworker.core.message import Message
from streamworker.core.outcomes import BatchOutcomes, Outcome, decide, describe
from streamworker.io.redisio import NextRead

T = TypeVar("T")

InlineRun = Callable[[Message[Any], Mapping[type, Any]], Outcome]
"""The blocking form of a :class:`RunHandler`, to be called from a pool thread."""

BatchInlineRun = Callable[[Sequence[Message[Any]], Mapping[type, Any]], BatchOutcomes]
"""The blocking form of a :class:`RunBatchHandler`, to be called from a pool thread."""

RunEach = Callable[[Sequence[Message[Any]], Mapping[type, Any], list[Outcome]], Awaitable[None]]
"""Runs the handler for each message in turn, appending each outcome to the list as it is
known (:attr:`Batch.handle_each`)."""


class RunHandler(Protocol):
    """Runs the handler for one message with the given provided resources (e.g. a SQL session)
    and returns the runtime's decision. It never raises for handler errors, but for a schema error
    where the strategy pauses on them (:class:`~streamworker.errors.SchemaError`); it does raise
    CancelledError. Once the consumer is stopping it returns NOT_STARTED without running the
    handler. The runtime's :class:`~streamworker.runtime.invoker.HandlerInvoker` is one."""

    inline: InlineRun | None
    """The blocking form of the same call, when it has one (a ``def`` handler without
    message-scoped dependencies). A strategy that already runs blocking database work in a pool
    thread may call it there for a whole batch, one thread hop instead of one per message; the
    result is the same as awaiting the call."""

    def __call__(self, msg: Message[Any], provided: Mapping[type, Any], /) -> Awaitable[Outcome]:
        """Run the handler for ``msg``."""
        ...


class RunBatchHandler(Protocol):
    """Runs a batch handler (``batch=True``) once for ``msgs`` with the given provided resources.
    Never raises for handler errors (it does raise CancelledError). When the consumer is stopping
    the handler is not called and every message is NOT_STARTED."""

    inline: BatchInlineRun | None
    """The blocking form (a ``def`` batch handler whose arguments need nothing awaited), to be
    called from a pool thread: a strategy doing the batch's database work in one thread hop
    calls the handler there too. Same result as awaiting the call."""

    def __call__(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any], /
    ) -> Awaitable[BatchOutcomes]:
        """Run the handler for ``msgs``: one outcome per message, in order."""
        ...


class RunBlocking(Protocol):
    """Runs a blocking callable off the event loop (the worker's handler threads) and returns
    its result."""

    def __call__(self, func: Callable[[], T], /) -> Awaitable[T]:
        """``func()`` in a pool thread."""
        ...


class CoroutineHandler:
    """A :class:`RunHandler` made of a coroutine function, without a blocking form (for tools
    and tests that drive a strategy with their own handler runner)."""

    inline: InlineRun | None = None

    def __init__(
        self, func: Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]
    ) -> None:
        self._func = func

    def __call__(self, msg: Message[Any], provided: Mapping[type, Any], /) -> Awaitable[Outcome]:
        return self._func(msg, provided)


async def _to_thread(func: Callable[[], T], /) -> T:
    return await asyncio.to_thread(func)


_NO_VERDICTS: Mapping[str, Outcome] = MappingProxyType({})


class Batch:
    """One batch of one subscription, as it flows down the message path: the batch processor
    builds it, the strategy processes it, and its last Redis call (the XACK, or the script that
    acks) sends :attr:`next_read` behind it. Everything a strategy needs is here; it calls
    nothing above it.

    A strategy runs each message through :attr:`handle` (or a batch handler's messages through
    :attr:`handle_batch`), never through :attr:`run_handler` directly: those apply the
    :attr:`verdicts` first. Not changed once built: a retry later builds another (:meth:`stale`).
    """

    __slots__ = (
        "fresh",
        "handle",
        "handle_batch",
        "handle_batch_inline",
        "handle_each",
        "handle_inline",
        "messages",
        "next_read",
        "run_batch_handler",
        "run_blocking",
        "run_handler",
        "verdicts",
    )

    messages: Sequence[Message[Any]]
    """The messages, in stream order."""
    verdicts: Mapping[str, Outcome]
    """Outcomes decided before the handler, by message id (over-delivered messages: their
    ``preset`` outcome, a dead-letter). The strategy's duplicate check comes first: a message
    whose effects are recorded as applied is acked as a duplicate; only the others get their
    verdict, without their handler running."""
    run_handler: RunHandler | None
    """The handler, for a single-message handler (None for a batch handler)."""
    run_batch_handler: RunBatchHandler | None
    """The handler, for a batch handler (``batch=True``), else None. A strategy that
    :attr:`StrategyPlugin.supports_batch` calls it (through :attr:`handle_batch`) once for the
    messages whose handler is to run (not the duplicates, nor the ones claimed away)."""
    run_blocking: RunBlocking
    """How to run blocking work (a sync database driver's calls): the worker's handler threads."""
    next_read: NextRead | None
    """The consume loop's next ``>`` read, to be sent behind the batch's last call
    (:func:`~streamworker.io.redisio.xack_then_read`,
    :meth:`~streamworker.io.redisio.LuaScript.then_read`): one round trip per batch instead of two.
    None for batches of other sources."""
    fresh: bool
    """Every message was delivered to this consumer by a ``>`` read sent so recently that no other
    consumer can have claimed one yet (:func:`streamworker.core.timing.fresh_batch_window_ms`); a
    strategy may skip its ownership check before the handlers (never the one with the ack). One
    whose check guards more than the handlers (the SQL strategy's: its processed rows) may skip
    it only for what completes within its own window
    (:func:`streamworker.core.timing.sql_fresh_claim_window_ms`), by its own clock."""
    handle: Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]
    """The outcome of one message: its verdict, or :attr:`run_handler`'s."""
    handle_inline: InlineRun | None
    """The blocking form of :attr:`handle`, when the handler has one."""
    handle_each: RunEach
    """:attr:`handle` for each message of a sequence in turn, one after another, each outcome
    appended to the given list as soon as it is known (so that after a cancellation the list
    holds the finished ones): ``await handle_each(msgs, provided, outcomes)``. The same
    outcomes as awaiting :attr:`handle` per message; the runtime's handler runs them in one
    loop, without a call per message (a strategy running a batch's handlers one at a time
    should use it)."""
    handle_batch: (
        Callable[[Sequence[Message[Any]], Mapping[type, Any]], Awaitable[BatchOutcomes]] | None
    )
    """The outcomes of messages of a batch handler: their verdicts, and
    :attr:`run_batch_handler`'s (one call) for the others."""
    handle_batch_inline: BatchInlineRun | None
    """The blocking form of :attr:`handle_batch`, when the handler has one."""

    def __init__(
        self,
        messages: Sequence[Message[Any]],
        run_handler: RunHandler | None = None,
        *,
        run_batch_handler: RunBatchHandler | None = None,
        verdicts: Mapping[str, Outcome] = _NO_VERDICTS,
        run_blocking: RunBlocking = _to_thread,
        next_read: NextRead | None = None,
        fresh: bool = False,
    ) -> None:
        if (run_handler is None) == (run_batch_handler is None):
            raise TypeError("a Batch takes one of run_handler and run_batch_handler")
        self.messages = messages
        self.run_handler = run_handler
        self.run_batch_handler = run_batch_handler
        self.verdicts = verdicts
        self.run_blocking = run_blocking
        self.next_read = next_read
        self.fresh = fresh
        # Built from the runners and the verdicts, never from this object's own methods: a
        # bound method kept on the instance would make every batch a reference cycle, its
        # messages freed only by the cyclic collector.
        self.handle_batch = self.handle_batch_inline = None
        self.handle_inline = None
        if run_handler is not None:
            inline = run_handler.inline
            if not verdicts:
                # Nearly every batch: the handler is called directly, no extra call per message.
                self.handle = run_handler
                self.handle_inline = inline
                each: RunEach | None = getattr(run_handler, "run_each", None)
                self.handle_each = each if each is not None else _each(run_handler)
            else:
                self.handle = _decided(verdicts, run_handler)
                self.handle_each = _each(self.handle)
                if inline is not None:
                    self.handle_inline = _decided_inline(verdicts, inline)
        else:
            assert run_batch_handler is not None
            batch_inline = run_batch_handler.inline
            self.handle = _no_single_handler
            self.handle_each = _each(_no_single_handler)
            if not verdicts:
                self.handle_batch = run_batch_handler
                self.handle_batch_inline = batch_inline
            else:
                self.handle_batch = _decided_batch(verdicts, run_batch_handler)
                if batch_inline is not None:
                    self.handle_batch_inline = _decided_batch_inline(verdicts, batch_inline)

    def stale(self) -> Batch:
        """The same batch, no longer fresh (retried after a wait)."""
        if not self.fresh:
            return self
        return Batch(
            self.messages,
            self.run_handler,
            run_batch_handler=self.run_batch_handler,
            verdicts=self.verdicts,
            run_blocking=self.run_blocking,
            next_read=self.next_read,
        )


def _decided(
    verdicts: Mapping[str, Outcome], run: RunHandler
) -> Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]:
    """:attr:`Batch.handle` for a batch with verdicts."""

    def handle(msg: Message[Any], provided: Mapping[type, Any]) -> Awaitable[Outcome]:
        verdict = verdicts.get(msg.id)
        return _ready(verdict) if verdict is not None else run(msg, provided)

    return handle


def _each(handle: Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]) -> RunEach:
    """:attr:`Batch.handle_each` made of a per-message ``handle``."""

    async def each(
        msgs: Sequence[Message[Any]], provided: Mapping[type, Any], outcomes: list[Outcome]
    ) -> None:
        append = outcomes.append
        for msg in msgs:
            append(await handle(msg, provided))

    return each


def _decided_inline(verdicts: Mapping[str, Outcome], inline: InlineRun) -> InlineRun:
    """:attr:`Batch.handle_inline` for a batch with verdicts."""

    def handle(msg: Message[Any], provided: Mapping[type, Any]) -> Outcome:
        verdict = verdicts.get(msg.id)
        return verdict if verdict is not None else inline(msg, provided)

    return handle


def _split(
    verdicts: Mapping[str, Outcome], msgs: Sequence[Message[Any]]
) -> tuple[list[Outcome | None], list[Message[Any]], list[int]]:
    """The verdicts of ``msgs`` by position, the messages to pass to the handler and their
    positions in ``msgs``."""
    outcomes: list[Outcome | None] = [None] * len(msgs)
    run: list[Message[Any]] = []
    at: list[int] = []
    for i, msg in enumerate(msgs):
        verdict = verdicts.get(msg.id)
        if verdict is not None:
            outcomes[i] = verdict
        else:
            run.append(msg)
            at.append(i)
    return outcomes, run, at


def _decided_batch(
    verdicts: Mapping[str, Outcome], call: RunBatchHandler
) -> Callable[[Sequence[Message[Any]], Mapping[type, Any]], Awaitable[BatchOutcomes]]:
    """:attr:`Batch.handle_batch` for a batch with verdicts: one call for the others."""

    async def handle(msgs: Sequence[Message[Any]], provided: Mapping[type, Any]) -> BatchOutcomes:
        outcomes, run, at = _split(verdicts, msgs)
        ran = await call(run, provided) if run else BatchOutcomes([], raised=False)
        return _joined(outcomes, at, ran)

    return handle


def _decided_batch_inline(
    verdicts: Mapping[str, Outcome], inline: BatchInlineRun
) -> BatchInlineRun:
    """:attr:`Batch.handle_batch_inline` for a batch with verdicts."""

    def handle(msgs: Sequence[Message[Any]], provided: Mapping[type, Any]) -> BatchOutcomes:
        outcomes, run, at = _split(verdicts, msgs)
        ran = inline(run, provided) if run else BatchOutcomes([], raised=False)
        return _joined(outcomes, at, ran)

    return handle


async def _ready(outcome: Outcome) -> Outcome:
    return outcome


def _no_single_handler(msg: Message[Any], provided: Mapping[type, Any]) -> Awaitable[Outcome]:
    raise TypeError("a batch handler's Batch is handled with handle_batch")


def _joined(outcomes: list[Outcome | None], at: list[int], ran: BatchOutcomes) -> BatchOutcomes:
    """The batch's outcomes: those decided before the call, with ``ran``'s (the call's, for the
    messages passed) at their positions ``at``."""
    if len(at) == len(outcomes):
        return ran
    for i, outcome in zip(at, ran.outcomes, strict=True):
        outcomes[i] = outcome
    done = [o for o in outcomes if o is not None]
    assert len(done) == len(outcomes)
    return BatchOutcomes(done, raised=ran.raised)


class Strategy(Protocol):
    """Processes one batch of messages of one subscription.

    ``process`` runs the handler for every message of the :class:`Batch` (through
    :attr:`Batch.handle` or :attr:`Batch.handle_batch`) and makes the effects of the messages
    whose outcome is ACK durable *before* it XACKs exactly those messages, sending
    :attr:`Batch.next_read` with its last call. Messages with other outcomes must be left
    pending and their effects undone. When cancelled (shutdown deadline), it acks what had
    finished (without the next read) and re-raises.

    Optional, read with a default of ``SpanPhases()``: ``trace_phases``, how tracing shows
    the steps of its batches (:class:`SpanPhases`).
    """

    name: str

    async def process(self, batch: Batch) -> list[Outcome]:
        """Handle ``batch``; return one outcome per message, in order."""
        ...


@dataclass(frozen=True, slots=True)
class SpanPhases:
    """How a strategy's batch shows in each message's trace (:mod:`streamworker.tracing`): the
    children of an acked message's span. Tracing knows no strategy by name; each says this.

    ``commit``: the step that makes the effects durable: ``"script"`` (the last Redis script
    the strategy ran after the handlers, e.g. one that applies effects and acks),
    ``"until_ack"`` (from the end of the handlers to the XACK, e.g. a database commit), or None
    (no such step). ``ack``: the call that acks, ``"xack"`` or ``"script"`` (the same script).
    """

    commit: str | None = None
    ack: str = "xack"


class HandlerConfig(Protocol):
    """What a strategy may read of a registered handler (a
    :class:`~streamworker.app.HandlerSpec` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def stream(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def message_key(self) -> KeyFunc | None:
        """Per-key concurrency (``key_field``): a message's key, or None without one."""
        ...

    @property
    def max_deliveries(self) -> int: ...
    @property
    def dedup_field(self) -> str | None: ...
    @property
    def dedup_window_ms(self) -> int: ...
    @property
    def is_async(self) -> bool: ...
    @property
    def claim_idle_ms(self) -> int: ...


class Backing(Protocol):
    """What a strategy's subscriptions in one worker share (the SQL strategy's database), with
    its life cycle. The worker starts it before the consume loops, asks it in ``/readyz``, runs
    its background work beside them and closes it at the end."""

    readiness_name: str
    """The key under which ``/readyz`` reports :meth:`ping`."""

    async def start(self) -> None:
        """Check it is usable; raise a StreamworkerError that says why not (the worker exits)."""
        ...

    def ping(self) -> None:
        """Raise if it does not answer now. Called from the probe server's thread."""
        ...

    async def run(self, client: aioredis.Redis, stopped: Callable[[], Awaitable[object]]) -> None:
        """Background work until ``stopped()`` returns (retention, say); may return at once."""
        ...

    async def close(self) -> None:
        """Release what it holds."""
        ...


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What a plug-in gets to build one subscription's :class:`Strategy`."""

    client: aioredis.Redis
    consumer: str
    """The worker's consumer name in the group."""
    backing: Backing | None = None
    """What :meth:`StrategyPlugin.open` returned."""
    on_timeout: Callable[[], None] | None = None
    """Count a database deadline that passed (``streamworker_database_timeouts_total``)."""


class StrategyPlugin(Protocol):
    """An idempotency strategy, as the App and the worker see it. Stateless; one per name."""

    name: str
    """The ``idempotency=`` value that selects it."""
    applies_effects: bool
    """True if it applies the :class:`~streamworker.core.effects.Effects` a handler returns (the
    others refuse handlers annotated to return them, and dead-letter what is returned)."""
    supports_dedup_field: bool
    """True if it implements ``dedup_field`` (producer-side business-key dedup)."""
    supports_batch: bool
    """True if it runs batch handlers (``batch=True``: see :attr:`Batch.run_batch_handler`);
    :class:`PlainPlugin` says False.

    Optional, read with a default of False: ``pauses_on_schema_errors``, True when a handler's
    schema error (a missing table or column) is to pause the handler instead of failing the
    message; the strategy must then undo everything of a batch whose handler raises it."""

    def check_options(self, *, concurrency: int) -> None:
        """Raise ConfigError for handler options this strategy cannot honour."""
        ...

    def plan(self, func: Callable[..., Any]) -> CallPlan:
        """The handler's call plan, with the parameter types this strategy provides; raise
        ConfigError for a handler it cannot run."""
        ...

    def open(self, specs: Sequence[HandlerConfig], options: object | None) -> Backing | None:
        """The backing the worker's ``specs`` of this strategy share, or None. ``options``: what
        the worker was given for this plug-in
        (:attr:`~streamworker.runtime.worker.WorkerOptions.strategy_options` under its name; its
        own type, e.g. :class:`~streamworker.idempotency.sql.SqlOptions`), None when nothing.
        Raise ConfigError when a setting is missing or wrong (nothing is connected yet)."""
        ...

    def build(self, spec: HandlerConfig, context: BuildContext) -> Strategy:
        """The strategy of one subscription."""
        ...


class PlainPlugin:
    """Defaults for a :class:`StrategyPlugin` that provides handlers nothing, honours every
    option and shares no backing: a subclass sets ``name`` and the two flags, and writes
    :meth:`build`."""

    name: str
    applies_effects = False
    supports_dedup_field = False
    supports_batch = False

    def check_options(self, *, concurrency: int) -> None:
        """Every option is honoured."""

    def plan(self, func: Callable[..., Any]) -> CallPlan:
        """The handler's plain call plan (nothing provided)."""
        return build_plan(func)

    def open(self, specs: Sequence[HandlerConfig], options: object | None) -> Backing | None:
        """Nothing shared."""
        return None


def decide_failed(
    log: Any,
    event: str,
    msg: Message[Any],
    error: BaseException,
    max_deliveries: int,
    **context: Any,
) -> Outcome:
    """:func:`~streamworker.core.outcomes.decide` for ``msg``, whose handling ended in ``error``
    after its handler returned (its effects refused, its flush failed), logged as the warning
    ``event`` with the message's id and delivery count, the error and ``context``."""
    outcome = decide(error, msg.delivery_count, max_deliveries)
    log.warning(
        event,
        message_id=msg.id,
        delivery_count=msg.delivery_count,
        error=describe(error),
        **context,
    )
    return outcome
