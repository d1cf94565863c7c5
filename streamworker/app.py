"""The App registry and the ``@app.handler`` decorator."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from streamworker.core import timing
from streamworker.core.codec import BodyModel, body_model_for
from streamworker.core.deps import CallPlan
from streamworker.core.effects import Effects
from streamworker.core.keyed import (
    KeyField,
    KeyFunc,
    check_in_flight,
    check_key_field,
    check_key_field_in_model,
    key_func,
)
from streamworker.core.message import Message
from streamworker.core.ratelimit import RateLimit, parse_rate_limit
from streamworker.errors import ConfigError
from streamworker.idempotency import registry
from streamworker.io.keys import dead_letter_stream, partition_stream
from streamworker.io.replicawait import DEFAULT_WAIT_TIMEOUT_MS, ReplicaWait, WaitObserver
from streamworker.producing.partitions import check_partitioned_name
from streamworker.producing.producer import AppProducers, Receipt, StreamOptions

Idempotency = str
Retention = Literal["keep", "acked"]
"""What happens to an entry once acked: ``"keep"`` it (until trimmed), or delete it when no
consumer group needs it any more (``"acked"``)."""
"""The name of an idempotency strategy: ``"none"``, ``"sql"``, ``"lua"`` or a registered plug-in's
(:mod:`streamworker.idempotency.registry`)."""

F = TypeVar("F", bound=Callable[..., Any])

_ID_RE = re.compile(r"^(\$|0|\d+(-\d+)?)$")


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """Everything the runtime needs to know about one handler. Immutable once registered.

    One spec is one subscription: the worker runs one consume loop per spec.
    """

    name: str
    func: Callable[..., Any]
    stream: str
    group: str
    idempotency: Idempotency
    model: BodyModel | None
    """The body's validator: a pydantic model, or a TypeAdapter (dataclass, TypedDict)."""
    body_field: str | None
    batch_size: int
    block_ms: int
    concurrency: int
    start_id: str
    max_deliveries: int
    claim_idle_ms: int
    dead_letter_stream: str
    plan: CallPlan
    retry_backoff_ms: int = 1_000
    retry_backoff_max_ms: int = 60_000
    consumer_gc_idle_ms: int = 3_600_000
    dedup_field: str | None = None
    """``idempotency="lua"``: the entry field holding the business key of producer dedup."""
    dedup_window_ms: int = 600_000
    """How long an applied business key is remembered (``dedup_field``)."""
    partition_of: str | None = None
    """The logical stream when ``stream`` is one partition of a partitioned stream."""
    ordered: bool = False
    """Per-partition ordering: one consumer at a time holds the stream's partition lock and
    handles its messages in id order, a failing message blocking the rest (see runtime.ordering)."""
    recreate_lost_group: bool = False
    """A group deleted while the worker runs is re-created at ``start_id`` (every entry from there
    is delivered again) instead of stopping this handler."""
    batch: bool = False
    """A batch handler: called once per batch with ``list[Message[Model]]`` (see
    :func:`streamworker.core.outcomes.batch_outcomes` and docs/handlers.md, "Batch handlers")."""
    key_field: KeyField | None = None
    """Per-key concurrency: the field (or function of the message) whose value is the message's
    key. Messages with one key never run at the same time and run in stream order within the
    worker; different keys run in parallel, up to ``concurrency`` (see streamworker.core.keyed)."""
    max_in_flight: int | None = None
    """At most this many of this handler's messages held by the worker at once (None: no bound
    beyond ``batch_size``)."""
    max_in_flight_bytes: int | None = None
    """At most this many bytes of fields of this handler's messages held at once (None: no bound)."""
    rate_limit: RateLimit | None = None
    """The handler's shared rate limit: at most so many starts per period over every worker of
    the group (None: no limit; see streamworker.runtime.ratelimit)."""
    read_ahead: bool = False
    """Each full batch's successor is read while the batch is handled (opt-in: the worker then
    holds up to two batches; see runtime.consumer)."""
    retention: Retention = "keep"
    """``"acked"``: an entry is deleted from the stream once every consumer group has acked it
    and every Spark cursor has passed it (``XDELEX … ACKED``, Redis 8.2+; see
    docs/redis-versions.md). ``"keep"``: entries stay until trimmed."""

    @property
    def partition_lock_ttl_ms(self) -> int:
        """``ordered=True``: how long the stream's partition lock lives unless renewed
        (:func:`streamworker.core.timing.partition_lock_ttl_ms`)."""
        return timing.partition_lock_ttl_ms(self.claim_idle_ms)

    @property
    def lease_interval_ms(self) -> int:
        """How often held entries get their idle time reset, so an entry this worker holds never
        looks idle long enough to be reclaimed (:func:`streamworker.core.timing.renew_interval_ms`)."""
        return timing.renew_interval_ms(self.claim_idle_ms)

    @property
    def claim_interval_ms(self) -> int:
        """How often the reclaimer looks for entries idle past ``claim_idle_ms``
        (:func:`streamworker.core.timing.claim_interval_ms`)."""
        return timing.claim_interval_ms(self.claim_idle_ms)

    @property
    def message_key(self) -> KeyFunc | None:
        """``key_field`` as a function of the message (None without one). A user function that
        raises gives the key None: its messages share one lane, one after another, which keeps
        the promise (never two of one key at once) whatever key they should have had."""
        if self.key_field is None:
            return None
        of = key_func(self.key_field, body_field=self.body_field)

        def safe(message: Message[Any]) -> Hashable:
            try:
                return of(message)
            except Exception:
                return None

        return safe

    @property
    def is_async(self) -> bool:
        """True for ``async def`` handlers (run on the event loop), False for ``def`` (run in threads)."""
        return inspect.iscoroutinefunction(self.func)


def _returns_effects(func: Callable[..., Any]) -> bool:
    """True when ``func``'s return annotation names :class:`~streamworker.core.effects.Effects`
    (``Effects``, ``Effects | None``, ``Optional[Effects]``, or the same as a string)."""
    try:
        annotation = typing.get_type_hints(func).get("return")
    except Exception:  # unresolvable forward references: look at the text
        raw = inspect.signature(func).return_annotation
        if raw is inspect.Signature.empty:
            return False
        text = raw if isinstance(raw, str) else getattr(raw, "__name__", repr(raw))
        return bool(re.search(r"\bEffects\b", text))
    if annotation is None:
        return False
    if annotation is Effects:
        return True
    return any(arg is Effects for arg in typing.get_args(annotation))


def _model_from_annotation(annotation: Any, where: str) -> BodyModel | None:
    args = typing.get_args(annotation)
    return body_model_for(args[0], where) if args else None


class App:
    """A named collection of handlers; what ``streamworker run module:app`` runs.

    An App holds configuration only: it opens no connection and reads no environment. The CLI (or
    :func:`streamworker.runtime.worker.run_app`) turns it into a running worker.

    Args:
        name: the application's name; shows in logs and metrics.
        redis_url: default Redis URL, overridden by ``--redis-url`` / ``STREAMWORKER_REDIS_URL``.
        db_url: default database URL for ``idempotency="sql"`` handlers, overridden by ``--db-url``
            / ``STREAMWORKER_DB_URL``.
    """

    def __init__(
        self, name: str, *, redis_url: str | None = None, db_url: str | None = None
    ) -> None:
        if not name or not name.strip():
            raise ConfigError("App name must not be empty")
        self.name = name
        self.redis_url = redis_url
        self.db_url = db_url
        self._handlers: dict[str, HandlerSpec] = {}
        self._producers = AppProducers(self)

    @property
    def handlers(self) -> list[HandlerSpec]:
        """The registered handlers, in registration order."""
        return list(self._handlers.values())

    def add_spec(self, spec: HandlerSpec) -> None:
        """Register ``spec`` as it is: one the decorator built and checked, on this or another
        App (a test harness registers changed copies). ConfigError if its (stream, group) has a
        handler already."""
        key = f"{spec.stream}\x00{spec.group}"
        other = self._handlers.get(key)
        if other is not None:
            raise ConfigError(
                f"stream {spec.stream!r} group {spec.group!r} already has handler {other.name}; "
                f"one handler per (stream, group)"
            )
        self._handlers[key] = spec

    def handler(
        self,
        stream: str,
        *,
        group: str = "",
        idempotency: Idempotency = "none",
        model: type[Any] | None = None,
        body_field: str | None = None,
        batch_size: int = 100,
        block_ms: int = 5_000,
        concurrency: int = 1,
        start_id: str = "0",
        max_deliveries: int = 5,
        claim_idle_ms: int = 60_000,
        dead_letter: str | None = None,
        name: str | None = None,
        retry_backoff_ms: int = 1_000,
        retry_backoff_max_ms: int = 60_000,
        consumer_gc_idle_ms: int = 3_600_000,
        dedup_field: str | None = None,
        dedup_window_ms: int = 600_000,
        partitions: int | None = None,
        ordered: bool = False,
        recreate_lost_group: bool = False,
        batch: bool = False,
        key_field: KeyField | None = None,
        max_in_flight: int | None = None,
        max_in_flight_bytes: int | None = None,
        rate_limit: str | None = None,
        rate_limit_burst: int | None = None,
        retention: Retention = "keep",
        read_ahead: bool = False,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``stream`` in consumer ``group``.

        The function may be ``async def`` (runs on the event loop) or ``def`` (runs in a thread).
        Its parameters are filled by annotation and ``Depends``: a parameter annotated
        ``Message[Model]`` receives the message (and, when ``model`` is not given, ``Model``
        becomes the body model).

        Args:
            stream: the stream key to consume.
            group: the consumer group; created at ``start_id`` (with MKSTREAM) when missing.
            idempotency: ``"none"`` (at-least-once: the handler may see a message again after a
                crash), ``"sql"`` or ``"lua"`` (effectively-once; see the docs). With ``"lua"``
                the handler returns :class:`~streamworker.core.effects.Effects` (or None), applied
                with the XACK in one script (:mod:`streamworker.idempotency.lua`).
            model: a pydantic model (or a dataclass or TypedDict, validated through pydantic's
                TypeAdapter) validated from the entry's fields (or from the JSON in
                ``body_field``). A body that fails validation is a permanent failure: the message
                is dead-lettered at once, never retried.
            body_field: when set, the body is the JSON document in this field instead of the whole
                field map.
            batch_size: COUNT of each XREADGROUP; one XACK per batch.
            block_ms: BLOCK of each XREADGROUP for new entries.
            concurrency: how many messages of a batch run at once (1 keeps stream order).
            start_id: where a newly created group starts: ``"0"`` (the whole stream), ``"$"``
                (only new entries) or an entry id.
            max_deliveries: a message delivered more often than this is dead-lettered.
            claim_idle_ms: how long an entry may sit idle in a consumer's PEL before another
                consumer reclaims it. Entries this worker holds (running, or waiting for a
                retry) are kept fresh by a lease, so this can be short (seconds) even for
                handlers that run longer.
            dead_letter: the dead-letter stream; default ``{stream}:dlq`` (see ``keys``).
            recreate_lost_group: a group is created at start-up only; one that disappears while
                the worker runs (XGROUP DESTROY, the stream deleted, a Redis restarted without
                persistence) stops this handler with an error and readiness fails, because
                re-creating it at ``start_id`` would deliver, and apply, every entry again. True
                re-creates it instead (for streams whose handlers tolerate a full replay).
            name: the handler's name in logs and metrics; default the function's qualified name.
            retry_backoff_ms: the wait before retrying a failed message after its first
                delivery; doubles with each delivery (``Retry(delay_ms=…)`` overrides it).
            retry_backoff_max_ms: the cap of that wait.
            consumer_gc_idle_ms: consumers of the group idle this long with nothing pending are
                deleted (the reclaimer takes over their entries first).
            dedup_field: ``idempotency="lua"`` only: an entry field holding the message's
                business key (e.g. ``"order_id"``). A message whose business key was applied
                less than ``dedup_window_ms`` ago (a producer's duplicate XADD) is acked without
                its effects; one without the field is dead-lettered.
            dedup_window_ms: how long an applied business key is remembered; the record holds
                the distinct keys of one window (about 100 bytes each plus the key's length).
            partitions: consume the partitioned stream ``stream`` (:mod:`streamworker.producing.partitions`)
                of this many partitions, ``{stream:p0}`` … : one consume loop per partition,
                each with its own dead-letter stream ``{stream:pN}:dlq``. Must match the
                producers' count.
            ordered: per-key ordering. Each stream (each partition) is handled by at most one
                consumer of the group at a time, which holds a partition lock in Redis (renewed
                while it works; taken over ``claim_idle_ms`` after its holder stopped renewing), and its
                messages are handled in id order, even across retries: a failing message blocks
                its stream until it succeeds or is dead-lettered. Needs ``concurrency=1``. Off by
                default (the group balances messages over its consumers).
            batch: call the handler once per batch with the batch's messages, a parameter
                annotated ``list[Message[Model]]``, instead of once per message. Messages that
                fail to decode, over-delivered ones and (``"sql"``/``"lua"``) those already
                processed or claimed away are decided before the call and are not in the list.
                It returns None (all succeeded) or a mapping from message id to that message's
                result: None, :class:`~streamworker.core.effects.Effects` (``"lua"``), or an
                exception (``Retry``, ``DeadLetter``, any error), which fails only that message;
                raising fails the whole batch. docs/handlers.md ("Batch handlers") states the contract
                per strategy. Needs ``concurrency=1`` and ``ordered=False``.
            key_field: per-key concurrency: a field name (``"customer_id"``: the body's field, or
                the entry field without a body) or a function of the
                :class:`~streamworker.core.message.Message` returning its key. Each batch is split
                into one lane per key; up to ``concurrency`` lanes run at once, a lane's messages
                one after another in stream order, so one key's messages never run at the same
                time and a slow key holds one lane, never the others. Order holds within a worker
                only: for per-key order across workers, use partitions (docs/flow-control.md,
                "Per-key concurrency"). Not with ``batch=True`` or ``ordered=True``.
            max_in_flight: at most this many of this handler's messages held at once in this
                worker (read but not yet acked or dead-lettered); reads shrink to the room left
                and wait when there is none. None: no bound beyond ``batch_size``.
            max_in_flight_bytes: the same bound on the bytes of the held entries' fields.
            rate_limit: a shared rate limit on the handler's starts over every worker and
                process of the group, ``"<number>/s"``, ``"/min"`` or ``"/h"`` (``"100/s"``,
                ``"6000/min"``): a worker reads only as many entries as it may start now, so
                messages never wait for the limit in a worker, and waiting is never a failed
                delivery. With partitions, one limit over all of them. Not with ``ordered=True``
                (docs/flow-control.md, "Shared rate limit").
            rate_limit_burst: how many starts may go at once after an idle time (an integer
                >= 1); default a twentieth of a second's worth of the limit plus one, so that
                no 1-second window has more than a tenth above the limit.
            retention: ``"keep"`` (default: entries stay until trimmed) or ``"acked"``: each
                entry this handler acks or dead-letters is deleted from the stream as soon as
                no consumer group needs it any more and every Spark cursor of the stream has
                passed it (``XDELEX … ACKED``). Needs a server with XDELEX (Redis 8.2+, Valkey
                9.2+): the worker refuses to start otherwise. Set it on every group of the
                stream (an entry the last group to ack leaves is kept until trimmed).
            read_ahead: when a read brings a full batch, read the next one at once, while this
                one is handled, instead of after its ack: Redis prepares the next batch while
                the handlers run (more throughput when handlers are short). The worker then
                holds up to two batches (both pending at a crash, both redelivered; nothing is
                lost). Not with ``ordered=True`` or ``rate_limit``.
        """
        given: object = stream  # ``@app.handler`` without parentheses passes the function here
        if callable(given) and not isinstance(given, str):
            fname = getattr(given, "__qualname__", repr(given))
            raise ConfigError(
                f"@app.handler needs the stream and the group: write "
                f'@app.handler("orders", group="billing") above {fname}'
            )
        strategy = registry.get(idempotency) if isinstance(idempotency, str) else None
        if strategy is None:
            raise ConfigError(
                f"idempotency must be one of {', '.join(registry.names())}, not {idempotency!r}"
            )
        if not stream:
            raise ConfigError("stream must not be empty")
        if not group:
            raise ConfigError(
                f"stream {stream!r}: a consumer group is required: "
                f'@app.handler({stream!r}, group="...")'
            )
        for label, value, low in (
            ("batch_size", batch_size, 1),
            ("block_ms", block_ms, 1),
            ("concurrency", concurrency, 1),
            ("max_deliveries", max_deliveries, 1),
            ("claim_idle_ms", claim_idle_ms, 1),
            ("retry_backoff_ms", retry_backoff_ms, 0),
            ("retry_backoff_max_ms", retry_backoff_max_ms, 0),
            ("consumer_gc_idle_ms", consumer_gc_idle_ms, 1),
            ("dedup_window_ms", dedup_window_ms, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{label} must be an integer >= {low}, got {value!r}")
        if not _ID_RE.match(start_id):
            raise ConfigError(
                f"start_id must be '0', '$' or an entry id like '1700000000000-0', got {start_id!r}"
            )
        model_given = (
            None
            if model is None
            else body_model_for(model, f"stream {stream!r} group {group!r}: model")
        )
        if dedup_field is not None:
            if not strategy.supports_dedup_field:
                raise ConfigError(
                    f"dedup_field works with idempotency='lua' only, not {idempotency!r} (with "
                    f"'sql', put a unique constraint on the business key in your table)"
                )
            if not isinstance(dedup_field, str) or not dedup_field:
                raise ConfigError(
                    f"dedup_field must be a non-empty field name, got {dedup_field!r}"
                )
        if not isinstance(ordered, bool):
            raise ConfigError(f"ordered must be True or False, got {ordered!r}")
        if ordered and concurrency != 1:
            raise ConfigError(
                "ordered=True handles a stream's messages one after another; concurrency must be 1 "
                "(use more partitions for more throughput)"
            )
        if partitions is not None:
            check_partitioned_name(stream, partitions)
            if dead_letter is not None:
                raise ConfigError(
                    "with partitions, each partition has its own dead-letter stream "
                    "('{stream:pN}:dlq', in the partition's cluster slot); do not pass dead_letter"
                )
        if not isinstance(batch, bool):
            raise ConfigError(f"batch must be True or False, got {batch!r}")
        if batch:
            if concurrency != 1:
                raise ConfigError(
                    "batch=True calls the handler once for the whole batch, one batch at a time "
                    "per subscription; concurrency must be 1 (run more worker processes, or "
                    "raise batch_size, for more throughput)"
                )
            if ordered:
                raise ConfigError(
                    "batch=True does not combine with ordered=True (an ordered stream stops at "
                    "its first failing message; a batch handler is called for many at once)"
                )
            if not strategy.supports_batch:
                raise ConfigError(
                    f"idempotency={idempotency!r} does not support batch handlers (batch=True)"
                )
        if key_field is not None:
            where = f"stream {stream!r} group {group!r}"
            check_key_field(key_field, where)
            if batch:
                raise ConfigError(
                    f"{where}: key_field does not combine with batch=True (a batch handler is "
                    f"called once for the whole batch, so there are no lanes to run per key)"
                )
            if ordered:
                raise ConfigError(
                    f"{where}: key_field does not combine with ordered=True (an ordered stream "
                    f"already runs every message one after another; use partitions keyed by "
                    f"the same field for per-key order across workers)"
                )
        limit = parse_rate_limit(
            rate_limit, rate_limit_burst, where=f"stream {stream!r} group {group!r}"
        )
        if limit is not None and ordered:
            raise ConfigError(
                f"stream {stream!r} group {group!r}: rate_limit does not combine with "
                f"ordered=True (an ordered stream runs one message at a time under its "
                f"partition lock; pace it in the handler, or raise RateLimited)"
            )
        if not isinstance(read_ahead, bool):
            raise ConfigError(f"read_ahead must be True or False, got {read_ahead!r}")
        if read_ahead and ordered:
            raise ConfigError(
                f"stream {stream!r} group {group!r}: read_ahead does not combine with "
                f"ordered=True (an ordered stream is read one message at a time under its "
                f"partition lock)"
            )
        if read_ahead and limit is not None:
            raise ConfigError(
                f"stream {stream!r} group {group!r}: read_ahead does not combine with "
                f"rate_limit (a rate-limited read is sized by the permits granted for it)"
            )
        max_in_flight = check_in_flight("max_in_flight", max_in_flight)
        max_in_flight_bytes = check_in_flight("max_in_flight_bytes", max_in_flight_bytes)
        if retention not in ("keep", "acked"):
            raise ConfigError(f"retention must be 'keep' or 'acked', got {retention!r}")
        strategy.check_options(concurrency=concurrency)

        def register(func: F) -> F:
            if not callable(func):
                raise ConfigError(f"@app.handler decorates functions, not {func!r}")
            if inspect.isasyncgenfunction(func) or inspect.isgeneratorfunction(func):
                raise ConfigError(f"{func.__qualname__}: a handler must not be a generator")
            plan = strategy.plan(func)
            if plan.batch and not batch:
                raise ConfigError(
                    f"{func.__qualname__} takes a list of messages: register it with "
                    f"batch=True, or annotate its parameter as Message[...]"
                )
            if batch and not plan.batch:
                raise ConfigError(
                    f"{func.__qualname__}: a batch handler (batch=True) takes the batch as a "
                    f"parameter annotated list[Message[...]]"
                )
            if not strategy.applies_effects and _returns_effects(func):
                raise ConfigError(
                    f"{func.__qualname__} returns Effects, which only idempotency='lua' applies; "
                    f"with idempotency={idempotency!r} they would be dropped (write through "
                    f"your own client, or use idempotency='lua')"
                )
            body_model = model_given or _model_from_annotation(
                plan.message_type, f"{func.__qualname__}: Message[...]"
            )
            if key_field is not None:
                check_key_field_in_model(key_field, body_model, f"{func.__qualname__}")
            hname = name or f"{func.__module__}.{func.__qualname__}"
            streams = (
                [stream]
                if partitions is None
                else [partition_stream(stream, i) for i in range(partitions)]
            )
            for one in streams:
                other = self._handlers.get(f"{one}\x00{group}")
                if other is not None:
                    raise ConfigError(
                        f"stream {one!r} group {group!r} already has handler {other.name}; "
                        f"one handler per (stream, group)"
                    )
            for one in streams:
                self._handlers[f"{one}\x00{group}"] = HandlerSpec(
                    name=hname,
                    func=func,
                    stream=one,
                    group=group,
                    idempotency=idempotency,
                    model=body_model,
                    body_field=body_field,
                    batch_size=batch_size,
                    block_ms=block_ms,
                    concurrency=concurrency,
                    start_id=start_id,
                    max_deliveries=max_deliveries,
                    claim_idle_ms=claim_idle_ms,
                    dead_letter_stream=dead_letter or dead_letter_stream(one),
                    plan=plan,
                    retry_backoff_ms=retry_backoff_ms,
                    retry_backoff_max_ms=max(retry_backoff_max_ms, retry_backoff_ms),
                    consumer_gc_idle_ms=consumer_gc_idle_ms,
                    dedup_field=dedup_field,
                    dedup_window_ms=dedup_window_ms,
                    partition_of=None if partitions is None else stream,
                    ordered=ordered,
                    recreate_lost_group=bool(recreate_lost_group),
                    batch=batch,
                    key_field=key_field,
                    max_in_flight=max_in_flight,
                    max_in_flight_bytes=max_in_flight_bytes,
                    rate_limit=limit,
                    retention=retention,
                    read_ahead=read_ahead,
                )
            return func

        return register

    # Producing ---------------------------------------------------------------------------------

    def stream(
        self,
        name: str,
        *,
        maxlen: int | None = None,
        minid: str | None = None,
        approximate: bool = True,
        partitions: int | None = None,
        body_field: str | None = None,
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
    ) -> None:
        """Declare the producer defaults of stream ``name`` (see
        :class:`~streamworker.producing.producer.StreamOptions`; ``wait_replicas``: a publish to it
        returns only once that many replicas have the entry). Undeclared streams take their
        partition count and ``body_field`` from this app's handler of that stream, if any."""
        self._producers.declare(
            name,
            StreamOptions(
                maxlen=maxlen,
                minid=minid,
                approximate=approximate,
                partitions=partitions,
                body_field=body_field,
                wait_replicas=wait_replicas,
                wait_timeout_ms=wait_timeout_ms,
            ),
        )

    def configure_publish(
        self,
        *,
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
        wait_observer: WaitObserver | None = None,
    ) -> None:
        """Defaults of :meth:`publish`/:meth:`publish_sync` for every stream that does not set
        its own (:meth:`stream`): wait for ``wait_replicas`` replicas, at most
        ``wait_timeout_ms``; tell ``wait_observer`` about each wait. ``streamworker run`` sets
        them from ``STREAMWORKER_WAIT_REPLICAS``/``_WAIT_TIMEOUT_MS`` and its metrics. None
        leaves a value as it is. ConfigError for bad values."""
        wait = ReplicaWait(
            wait_replicas if wait_replicas is not None else 0,
            wait_timeout_ms if wait_timeout_ms is not None else DEFAULT_WAIT_TIMEOUT_MS,
        )
        self._producers.configure(
            None if wait_replicas is None else wait.replicas,
            None if wait_timeout_ms is None else wait.timeout_ms,
            wait_observer,
        )

    def stream_options(self, name: str) -> StreamOptions:
        """The producer defaults of stream ``name``: declared by :meth:`stream`, else derived
        from this app's handlers (partitions, body_field), else none."""
        return self._producers.options(name)

    async def publish(self, stream: str, value: Any, **kwargs: Any) -> Receipt:
        """Publish ``value`` (a model or a mapping) to ``stream`` with this app's stream
        defaults: :meth:`streamworker.producing.producer.Producer.publish` on a client opened at first use
        (one per event loop) on the URL a worker of this app would use: the one set by
        :meth:`use_redis_url` (``streamworker run`` sets its own), else
        ``STREAMWORKER_REDIS_URL``, else ``redis_url``. Keyword arguments: ``maxlen``,
        ``minid``, ``approximate``, ``id``, ``partition_key``, ``idempotency_key``,
        ``body_field``, ``wait_replicas``, ``wait_timeout_ms`` (ReplicaWaitTimeout when fewer
        replicas acknowledged the entry in time)."""
        return await self._producers.async_producer().publish(stream, value, **kwargs)

    def publish_sync(self, stream: str, value: Any, **kwargs: Any) -> Receipt:
        """The blocking form of :meth:`publish` (a sync client on the same URL)."""
        return self._producers.sync_producer().publish(stream, value, **kwargs)

    def use_redis_url(self, url: str) -> None:
        """Make :meth:`publish` and :meth:`publish_sync` use ``url`` from now on, whatever the
        environment says. ``streamworker run`` calls it with the URL its worker uses (the
        ``--redis-url`` flag included), so a handler's ``app.publish`` reaches the same Redis."""
        self._producers.bind(url)

    def __repr__(self) -> str:
        return f"App({self.name!r}, handlers={len(self._handlers)})"
