"""The worker: every subscription of an App in one process, and its shutdown.

Shutdown (SIGTERM/SIGINT, or :meth:`Worker.stop`): every consume loop stops reading and finishes the
batch in hand. Batches still running after ``shutdown_timeout_s`` are cancelled: what had finished
is acked, the rest stays pending for the next start (or another consumer). A second signal exits the
process at once, acking nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.app import App, HandlerSpec
from streamworker.core.deps import Resolver
from streamworker.core.keyed import check_in_flight
from streamworker.errors import ConfigError, ConnectionLost, ConsumerNameTaken, StreamworkerError
from streamworker.extras import require_extra
from streamworker.idempotency import registry
from streamworker.idempotency.base import Backing, BuildContext, Strategy
from streamworker.io.capabilities import ServerPaths, probe_server
from streamworker.io.redisio import (
    PrimaryWatch,
    discover_primary,
    open_redis,
    open_sync_redis,
    redact_url,
    sync_primary_address,
)
from streamworker.observability.metrics import GroupStateCollector, Metrics
from streamworker.observability.state import missing_groups, read_group_states
from streamworker.producing.delayed import (
    DEFAULT_DELAYED_BATCH,
    DEFAULT_DELAYED_POLL_MS,
    DelayedMover,
)
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.inflight import InFlight
from streamworker.runtime.names import ConsumerNames
from streamworker.runtime.reclaimer import Reclaimer
from streamworker.runtime.release import path_for
from streamworker.runtime.tasks import end_task
from streamworker.runtime.threads import HandlerThreads

if TYPE_CHECKING:
    from streamworker.tracing import Tracing


# The event loop must answer within this (a sync call in an async handler blocks it).
_EVENT_LOOP_DEADLINE_S = 10.0
_HEARTBEAT_S = 0.5

DEFAULT_REDIS_TIMEOUT_S = 5.0
"""``redis_timeout_s`` when not given: a Redis reply that has not come within it is a lost
connection (the consume loop reconnects and re-reads its backlog)."""


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """What a worker needs besides the App; the CLI builds it from Settings."""

    redis_url: str
    consumer: str
    shutdown_timeout_s: float = 30.0
    reconnect_backoff_initial_s: float = 0.1
    reconnect_backoff_max_s: float = 5.0
    liveness_timeout_s: float = 300.0
    """A consume loop that has not gone round for this long (a batch stuck in a handler) makes
    ``/healthz`` fail. Set it above the longest batch you expect."""
    reclaim: bool = True
    consumer_name_ttl_ms: int = 15_000
    """Time to live of the records that reserve the consumer name for this process
    (:mod:`streamworker.runtime.names`), renewed every third of it."""
    redis_timeout_s: float = DEFAULT_REDIS_TIMEOUT_S
    """Socket timeout of every Redis command but the blocking reads, which get ``block_ms``
    plus this on a client of their own."""
    tracing: bool = False
    """OpenTelemetry spans per message (the ``tracing`` extra; :mod:`streamworker.tracing`)."""
    tracer_provider: Any = None
    """Where the spans go (an OpenTelemetry TracerProvider); default the global one."""
    delayed_poll_ms: int = DEFAULT_DELAYED_POLL_MS
    """How often the worker moves the due delayed entries of the streams it consumes into them
    (:mod:`streamworker.producing.delayed`); 0: this worker moves none (another must)."""
    delayed_batch: int = DEFAULT_DELAYED_BATCH
    """Most delayed entries one move script takes (a full batch is followed by the next)."""
    strategy_options: Mapping[str, object] = field(default_factory=dict)
    """The options of the idempotency strategies the App's handlers use, by strategy name, each
    of the plug-in's own type, given to it as they are: e.g.
    ``{"sql": SqlOptions(db_url=...)}`` (:class:`~streamworker.idempotency.sql.SqlOptions`:
    the database, its deadline, the pruning interval). The worker reads none of them."""
    max_in_flight: int | None = None
    """At most this many messages held at once over all handlers (:mod:`~streamworker.runtime.inflight`);
    None: no worker-wide bound."""
    max_in_flight_bytes: int | None = None
    """At most this many bytes of entry fields held at once over all handlers; None: no bound."""

    def __post_init__(self) -> None:
        # The same one-line refusal as the handler's options (a bound of 0 would never read).
        check_in_flight("max_in_flight", self.max_in_flight)
        check_in_flight("max_in_flight_bytes", self.max_in_flight_bytes)


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """How a worker ended. ``abandoned_threads`` counts sync handlers still running at the deadline:
    their messages were not acked, but their threads keep the interpreter alive, so the caller
    should end the process without waiting for them."""

    abandoned_threads: int = 0


def _open_backings(app: App, options: WorkerOptions) -> dict[str, Backing]:
    """The backings of the strategies the app's handlers use (the SQL database, say), by strategy
    name: not connected yet; a missing or wrong setting raises ConfigError now."""
    by_strategy: dict[str, list[HandlerSpec]] = {}
    for spec in app.handlers:
        by_strategy.setdefault(spec.idempotency, []).append(spec)
    backings: dict[str, Backing] = {}
    for name, specs in by_strategy.items():
        backing = registry.get(name).open(specs, options.strategy_options.get(name))
        if backing is not None:
            backings[name] = backing
    return backings


def _open_tracing(options: WorkerOptions, metrics: Metrics) -> Tracing | None:
    if not options.tracing:
        return None
    require_extra("tracing", "tracing=True")
    from streamworker.tracing import Tracing

    return Tracing(metrics, tracer_provider=options.tracer_provider)


class Worker:
    """Runs all of an App's handlers until stopped. Create, then ``await run()`` once."""

    def __init__(self, app: App, options: WorkerOptions, metrics: Metrics | None = None) -> None:
        if not app.handlers:
            raise ConfigError(
                f"App {app.name!r} has no handlers; decorate functions with @app.handler"
            )
        self.app = app
        self.options = options
        self.metrics = metrics or Metrics()
        self.consumers: list[Consumer] = []
        self.reclaimers: list[Reclaimer] = []
        self.backings = _open_backings(app, options)
        self._tracing = _open_tracing(options, self.metrics)
        self._stopping = asyncio.Event()
        self._signals = 0
        self._log = structlog.get_logger("streamworker.worker").bind(
            app=app.name, consumer=options.consumer
        )
        # Probes and gauges run in the HTTP server's threads with a sync client of their own.
        self._probe_client: redis.Redis | None = None
        self._probe_lock = threading.Lock()
        self._heartbeat = time.monotonic()
        self._running = False
        self._names_lost = False
        self.metrics.registry.register(
            GroupStateCollector(lambda: read_group_states(self._probe(), self.app.handlers))
        )

    def _probe(self) -> redis.Redis:
        with self._probe_lock:
            if self._probe_client is None:
                self._probe_client = open_sync_redis(self.options.redis_url, socket_timeout_s=2.0)
            return self._probe_client

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """``/healthz``: the event loop answers, and every consume loop went round within
        ``liveness_timeout_s``. Thread-safe (reads timestamps only)."""
        now = time.monotonic()
        if not self._running:
            return True, {"starting": True}
        blocked_s = now - self._heartbeat
        loops = {
            f"{c.spec.stream}/{c.spec.group}": round(now - c.last_turn, 3) for c in self.consumers
        }
        stuck = {k: v for k, v in loops.items() if v > self.options.liveness_timeout_s}
        ok = blocked_s < _EVENT_LOOP_DEADLINE_S and not stuck
        details: dict[str, Any] = {"loops_s_since_turn": loops}
        if blocked_s >= _EVENT_LOOP_DEADLINE_S:
            details["event_loop_blocked_s"] = round(blocked_s, 3)
        if stuck:
            details["stuck_loops"] = sorted(stuck)
        return ok, details

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: running and not shutting down, Redis answers, every group exists, no
        handler is paused by a schema error (``paused_handlers`` names the error), and the
        idempotency database answers. Called from the HTTP thread."""
        if self._stopping.is_set():
            return False, {"shutting_down": True}
        if not self._running:
            return False, {"starting": True}
        try:
            client = self._probe()
            client.ping()
            missing = missing_groups(client, self.app.handlers)
        except Exception as exc:
            return False, {"redis": f"{type(exc).__name__}: {exc}"}
        details: dict[str, Any] = {"redis": "ok"}
        with contextlib.suppress(Exception):
            primary = sync_primary_address(client)
            if primary is not None:
                details["primary"] = primary
        ok = True
        if missing:
            ok = False
            details["missing_groups"] = missing
        lost = [f"{c.spec.stream}/{c.spec.group}" for c in self.consumers if c.group_lost]
        if lost:
            ok = False
            details["stopped_handlers"] = lost
        paused = {
            f"{c.spec.stream}/{c.spec.group}": c.batches.paused
            for c in self.consumers
            if c.batches.paused is not None
        }
        if paused:
            ok = False
            details["paused_handlers"] = paused
        for backing in self.backings.values():
            try:
                backing.ping()
                details[backing.readiness_name] = "ok"
            except Exception as exc:
                ok = False
                details[backing.readiness_name] = f"{type(exc).__name__}: {exc}"
        return ok, details

    async def _beat(self) -> None:
        # If this stops, something blocks the event loop (a sync call in an async handler).
        while True:
            self._heartbeat = time.monotonic()
            await asyncio.sleep(_HEARTBEAT_S)

    def stop(self) -> None:
        """Begin a graceful shutdown (idempotent). Safe to call from the event loop thread only."""
        self._stopping.set()
        for consumer in self.consumers:
            consumer.stop()

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            self._log.info(
                "shutdown_requested", signal=name, timeout_s=self.options.shutdown_timeout_s
            )
            self.stop()
            return
        # A second signal: leave now. Nothing unfinished has been or will be acked.
        self._log.warning("shutdown_forced", signal=name)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    async def run(self, *, install_signal_handlers: bool = True) -> WorkerResult:
        """Consume until stopped. Raises the first unexpected error of any loop (after stopping the
        others), or ConfigError for a configuration that cannot run."""
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        specs = self.app.handlers
        if self._tracing is not None:
            specs = [self._tracing.instrument(s) for s in specs]
        block_max_s = max(s.block_ms for s in specs) / 1000
        # Two clients: a blocking read waits up to block_ms for its reply, every other command
        # gets the shorter redis_timeout_s (a silent connection is noticed that soon).
        timeout_s = self.options.redis_timeout_s
        # One watch for both clients: a failover is counted once, whichever client meets it.
        watch = PrimaryWatch(None)
        watch.listen(self._primary_changed)
        url = self.options.redis_url
        client = open_redis(url, socket_timeout_s=timeout_s, watch=watch)
        read_client = open_redis(url, socket_timeout_s=block_max_s + timeout_s, watch=watch)
        sync_slots = sum(s.concurrency for s in specs if not s.is_async) or 1
        threads = HandlerThreads(sync_slots)
        resolver = Resolver()
        abandoned = 0
        names: ConsumerNames | None = None
        try:
            for backing in self.backings.values():
                # A database that is unreachable or not set up is said now, in one line, not
                # as warnings at the first message.
                await backing.start()
            scripting = await _has_scripting(client)
            if scripting:
                names = ConsumerNames(
                    client,
                    self.options.consumer,
                    [(s.stream, s.group) for s in specs],
                    ttl_ms=self.options.consumer_name_ttl_ms,
                    handlers=[s.name for s in specs],
                    version=_version(),
                    stats=self._heartbeat_stats,
                    claim_idle_ms={(s.stream, s.group): s.claim_idle_ms for s in specs},
                )
                await self._acquire_names(names)
            else:
                self._log.warning(
                    "consumer_name_unguarded", reason="the server has no Lua scripting"
                )
            await resolver.start([s.plan for s in specs])
            # Checked once per server, by its command table: the paths the loops take.
            paths = await probe_server(client) if scripting else ServerPaths()
            released_by = path_for(paths) if scripting else None
            self._log.info(
                "server_paths",
                **paths.fields(),
                release=released_by or "none",
                reclaim="claim+xautoclaim" if paths.claim else "xautoclaim",
            )
            self._log.info("release_path_chosen", path=released_by or "none")
            keeping = [s.name for s in specs if s.retention == "acked"]
            if keeping and not paths.ackdel:
                raise ConfigError(
                    f"retention='acked' (handlers {', '.join(keeping)}) needs XDELEX (Redis 8.2+, "
                    f"Valkey 9.2+), and this server has none (COMMAND INFO XACKDEL is empty): "
                    f"use retention='keep' with trimming, or upgrade the server"
                )
            # One budget for the whole worker, shared by its handlers' reads.
            budget = InFlight(self.options.max_in_flight, self.options.max_in_flight_bytes)
            self.consumers = [
                Consumer(
                    spec,
                    worker_budget=budget,
                    claim_in_reads=paths.claim and scripting,
                    client=client,
                    name=self.options.consumer,
                    strategy=self._strategy(spec, client, threads),
                    read_client=read_client,
                    resolver=resolver,
                    metrics=self.metrics,
                    threads=threads,
                    backoff=Backoff(
                        self.options.reconnect_backoff_initial_s,
                        self.options.reconnect_backoff_max_s,
                    ),
                )
                for spec in specs
            ]
            self.reclaimers = []
            if self.options.reclaim:
                if scripting:
                    self.reclaimers = [
                        Reclaimer(
                            c,
                            client,
                            Backoff(
                                self.options.reconnect_backoff_initial_s,
                                self.options.reconnect_backoff_max_s,
                            ),
                            claim_in_reads=c.claim_in_reads,
                        )
                        for c in self.consumers
                    ]
                else:
                    # Leases, retries and dead-consumer clean-up run as Lua scripts.
                    self._log.warning(
                        "reclaimer_disabled", reason="the server has no Lua scripting"
                    )
            if self._stopping.is_set():
                self.stop()
            self._log.info(
                "worker_started",
                handlers=[s.name for s in specs],
                redis_url=redact_url(self.options.redis_url),
                primary=await self._primary_at_start(client),
            )
            background = [
                asyncio.ensure_future(backing.run(client, self._stopping.wait))
                for backing in self.backings.values()
            ]
            if scripting and self.options.delayed_poll_ms > 0:
                # Every worker moves, for the streams it consumes: no extra process to run.
                mover = DelayedMover(
                    client,
                    [s.stream for s in specs],
                    poll_ms=self.options.delayed_poll_ms,
                    batch=self.options.delayed_batch,
                    observe=lambda stream, r: self.metrics.observe_delayed(
                        stream, r.moved, r.delayed
                    ),
                )
                background.append(asyncio.ensure_future(mover.run()))
            try:
                await self._supervise(names)
                if released_by is not None:
                    await self._release_unstarted(released_by)
            finally:
                for task in background:
                    if not await end_task(task):
                        self._log.warning("background_task_did_not_stop", task=task.get_name())
            abandoned = threads.busy
        finally:
            threads.shutdown()
            if names is not None and not self._names_lost:
                # The next start (a rolling restart) takes the name at once.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(names.release(), 2.0)
            for backing in self.backings.values():
                with contextlib.suppress(Exception):
                    await backing.close()
            with contextlib.suppress(Exception):
                await resolver.close()
            with contextlib.suppress(Exception):
                await client.aclose()
            with contextlib.suppress(Exception):
                await read_client.aclose()
            with self._probe_lock:
                if self._probe_client is not None:
                    self._probe_client.close()
                    self._probe_client = None
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        self._log.info("worker_stopped", abandoned_threads=abandoned)
        return WorkerResult(abandoned_threads=abandoned)

    async def _primary_at_start(self, client: aioredis.Redis) -> str | None:
        # For the start-up log only: the Sentinels were asked (or the address is known) already.
        try:
            return await discover_primary(client)
        except StreamworkerError:
            return None

    def _primary_changed(self, old: str | None, new: str | None) -> None:
        """A client of this worker saw the primary change (a Sentinel named another one, or the
        one at a managed address answered READONLY): an outage the loops ride through."""
        self.metrics.failovers.inc()
        self._log.warning("primary_changed", old_primary=old, new_primary=new)

    def _heartbeat_stats(self) -> dict[str, int]:
        """What the consumer-name record reports besides who owns it (see runtime.names)."""
        consumers = self.consumers
        return {
            "last_batch_at_ms": int(
                max((c.batches.last_batch_at for c in consumers), default=0) * 1000
            ),
            "in_flight": sum(len(c.holdings.in_flight) for c in consumers),
            "processed": sum(c.batches.processed for c in consumers),
            "failed": sum(c.batches.failed for c in consumers),
        }

    async def _acquire_names(self, names: ConsumerNames) -> None:
        backoff = Backoff(
            self.options.reconnect_backoff_initial_s, self.options.reconnect_backoff_max_s
        )
        while True:
            try:
                await names.acquire(self._stopping.is_set)
                return
            except ConsumerNameTaken:
                self._names_lost = True
                raise
            except ConnectionLost as exc:
                if self._stopping.is_set():
                    return
                delay = backoff.next_delay()
                self._log.warning("connection_lost", error=str(exc), retry_in_s=round(delay, 3))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)

    async def _renew_names(self, names: ConsumerNames) -> None:
        """Renew the consumer-name records every third of their TTL; raises ConsumerNameTaken
        (which stops the worker) when another process took the name over."""
        while True:
            await asyncio.sleep(names.renew_interval_s)
            try:
                await names.renew()
            except ConsumerNameTaken:
                self._names_lost = True
                self._log.error("consumer_name_lost", name=names.consumer)
                raise
            except (ConnectionLost, rex.ResponseError) as exc:
                # The consume loops see the outage too; the record outlives a short one.
                self._log.debug("consumer_name_renewal_failed", error=str(exc))

    def _strategy(
        self, spec: HandlerSpec, client: aioredis.Redis, threads: HandlerThreads
    ) -> Strategy:
        plugin = registry.get(spec.idempotency)

        def make(strategy_client: aioredis.Redis) -> Strategy:
            return plugin.build(
                spec,
                BuildContext(
                    client=strategy_client,
                    consumer=self.options.consumer,
                    backing=self.backings.get(spec.idempotency),
                    on_timeout=self.metrics.database_timeouts.labels(
                        stream=spec.stream, group=spec.group, handler=spec.name
                    ).inc,
                ),
            )

        if self._tracing is None:
            return make(client)
        return self._tracing.wrap(spec, client, make, self.options.consumer)

    async def _release_unstarted(self, path: str) -> None:
        """Every loop has ended: hand back what the consumers read but did not start, so another
        worker starts it at once (bounded: a silent Redis leaves it to ``claim_idle_ms``)."""
        for consumer in self.consumers:
            try:
                await asyncio.wait_for(consumer.release_unstarted(path), 5.0)
            except (TimeoutError, StreamworkerError, rex.RedisError) as exc:
                self._log.warning(
                    "release_failed",
                    stream=consumer.spec.stream,
                    group=consumer.spec.group,
                    error=str(exc) or type(exc).__name__,
                )

    async def _supervise(self, names: ConsumerNames | None) -> None:
        loops = [c.run() for c in self.consumers] + [r.run() for r in self.reclaimers]
        tasks = [asyncio.ensure_future(loop) for loop in loops]
        # The name stays reserved until every loop has finished (the shutdown deadline included).
        renewer = asyncio.ensure_future(
            self._renew_names(names) if names is not None else asyncio.Event().wait()
        )
        stopping = asyncio.ensure_future(self._stopping.wait())
        beat = asyncio.ensure_future(self._beat())
        self._running = True
        try:
            waiting = {*tasks, renewer, stopping}
            failed: asyncio.Future[Any] | None = None
            while failed is None and not stopping.done():
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                failed = next(
                    (t for t in done if t is not stopping and t.exception() is not None), None
                )
                # Otherwise a loop ended by itself: a handler stopped because its group was lost
                # (readiness reports it), or that handler's reclaimer. The others go on.
            self.stop()
            pending = [t for t in tasks if not t.done()]
            if pending:
                _, late = await asyncio.wait(pending, timeout=self.options.shutdown_timeout_s)
                if late:
                    self._log.warning("shutdown_deadline_passed", unfinished_loops=len(late))
                    for t in late:
                        t.cancel()
                    # Cancelled batches ack what had finished, within a bound of their own.
                    await asyncio.wait(late, timeout=5.0)
            if failed is not None:
                exc = failed.exception()
                assert exc is not None
                raise exc
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            stopping.cancel()
            beat.cancel()
            if not await end_task(renewer):
                self._log.warning("background_task_did_not_stop", task="consumer-name renewal")
            self._running = False


async def _has_scripting(client: aioredis.Redis) -> bool:
    try:
        await client.script_exists("0" * 40)
    except rex.ResponseError as exc:
        return "unknown command" not in str(exc).lower()
    except Exception:  # not reachable now: assume a real Redis; the loops handle the outage
        return True
    return True


def _version() -> str:
    from streamworker.version import __version__

    return __version__
