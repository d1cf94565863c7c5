"""The contract between the runtime and an idempotency strategy, and the plug-in interface.

A strategy is a plug-in (:class:`StrategyPlugin`): it says what it gives handlers (the parameter
types it provides, e.g. a SQL session), checks a handler when it is registered, may open a
backing shared by a worker's handlers (a database), and builds one :class:`Strategy` per
subscription. The plug-ins are found by name in :mod:`streamworker.idempotency.registry`;
neither the App nor the runtime knows any strategy by name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis

from streamworker.core.deps import CallPlan, build_plan
from streamworker.core.keyed import KeyFunc
from streamworker.core.message import Message
from streamworker.core.outcomes import BatchOutcomes, Outcome

InlineInvoke = Callable[[Message[Any], Mapping[type, Any]], Outcome]
"""The blocking form of an :class:`Invoke`, to be called from a pool thread."""


class Invoke(Protocol):
    """Runs the handler for one message with the given provided resources (e.g. a SQL session)
    and returns the runtime's decision. It never raises for handler errors, but for a schema error
    where the strategy pauses on them (:class:`~streamworker.errors.SchemaError`); it does raise
    CancelledError."""

    inline: InlineInvoke | None
    """The blocking form of the same call, when it has one (a ``def`` handler without
    message-scoped dependencies). A strategy that already runs blocking database work in a pool
    thread may call it there for a whole batch, one thread hop instead of one per message; the
    result is the same as awaiting the invoke."""

    batch: BatchInvoke | None
    """The batch form, when the handler is a batch handler (``batch=True``), else None. A
    strategy that :attr:`StrategyPlugin.supports_batch` calls it once for the messages whose
    handler is to run (not the duplicates, nor the ones claimed away) instead of the invoke for
    each."""

    batch_inline: BatchInlineInvoke | None
    """The blocking form of :attr:`batch` (a ``def`` batch handler whose arguments need nothing
    awaited), to be called from a pool thread: a strategy doing the batch's database work in one
    thread hop calls the handler there too. Same result as awaiting :attr:`batch`."""

    def __call__(self, msg: Message[Any], provided: Mapping[type, Any], /) -> Awaitable[Outcome]:
        """Run the handler for ``msg``."""
        ...


class BatchInvoke(Protocol):
    """Runs a batch handler (``batch=True``) once for ``msgs`` with the given provided resources.
    Never raises for handler errors (it does raise CancelledError). Messages the consume loop
    decided before (over-delivered) get their verdict and are not passed to the handler; when
    the consumer is stopping, none is and every message is NOT_STARTED."""

    def __call__(
        self, msgs: Sequence[Message[Any]], provided: Mapping[type, Any], /
    ) -> Awaitable[BatchOutcomes]:
        """Run the handler for ``msgs``: one outcome per message, in order."""
        ...


BatchInlineInvoke = Callable[[Sequence[Message[Any]], Mapping[type, Any]], BatchOutcomes]
"""The blocking form of a :class:`BatchInvoke`, to be called from a pool thread."""


class CoroutineInvoke:
    """An :class:`Invoke` made of a coroutine function, without a blocking form (for tools and
    tests that drive a strategy with their own handler runner)."""

    inline: InlineInvoke | None = None
    batch: BatchInvoke | None = None
    batch_inline: BatchInlineInvoke | None = None

    def __init__(
        self, func: Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]
    ) -> None:
        self._func = func

    def __call__(self, msg: Message[Any], provided: Mapping[type, Any], /) -> Awaitable[Outcome]:
        return self._func(msg, provided)


class Strategy(Protocol):
    """Processes one batch of messages of one subscription.

    ``process`` runs the handler for every message through ``invoke`` and makes the effects of the
    messages whose outcome is ACK durable *before* it XACKs exactly those messages. Messages with
    other outcomes must be left pending and their effects undone. When cancelled (shutdown deadline),
    it acks what had finished and re-raises.
    """

    name: str

    async def process(
        self, batch: Sequence[Message[Any]], invoke: Invoke, *, fresh: bool = False
    ) -> list[Outcome]:
        """Handle ``batch``; return one outcome per message, in order.

        ``fresh``: every message was delivered to this consumer by a ``>`` read sent less than
        half of ``claim_idle_ms`` ago, so no other consumer can have claimed one yet; a strategy
        may skip its ownership check before the handlers (never the one with the ack). One whose
        check guards more than the handlers (the SQL strategy's: its processed rows) may skip it
        only for what completes before the other half has passed too, by its own clock.
        """
        ...


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


class WorkerConfig(Protocol):
    """The worker options a strategy's backing may read (a
    :class:`~streamworker.runtime.worker.WorkerOptions` is one)."""

    @property
    def db_url(self) -> str | None: ...
    @property
    def db_deadline_s(self) -> float: ...
    @property
    def prune_interval_s(self) -> float: ...


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
    run_sync: Callable[[Callable[[], Any]], Awaitable[Any]]
    """Runs a blocking callable in the worker's handler threads."""
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
    """True if it runs batch handlers (``batch=True``: see :attr:`Invoke.batch`);
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

    def open(self, specs: Sequence[HandlerConfig], config: WorkerConfig) -> Backing | None:
        """The backing the worker's ``specs`` of this strategy share, or None. Raise ConfigError
        when a setting is missing or wrong (nothing is connected yet)."""
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

    def open(self, specs: Sequence[HandlerConfig], config: WorkerConfig) -> Backing | None:
        """Nothing shared."""
        return None
