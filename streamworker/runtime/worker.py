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
from dataclasses import dataclass

import redis.asyncio as aioredis
import structlog

from streamworker.app import App, HandlerSpec
from streamworker.deps import Resolver
from streamworker.errors import ConfigError
from streamworker.idempotency.base import Strategy
from streamworker.idempotency.none import AtLeastOnce
from streamworker.observability.metrics import Metrics
from streamworker.redisio import open_redis
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.threads import HandlerThreads


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """What a worker needs besides the App; the CLI builds it from Settings."""

    redis_url: str
    consumer: str
    shutdown_timeout_s: float = 30.0
    reconnect_backoff_initial_s: float = 0.1
    reconnect_backoff_max_s: float = 5.0
    db_url: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """How a worker ended. ``abandoned_threads`` counts sync handlers still running at the deadline:
    their messages were not acked, but their threads keep the interpreter alive, so the caller
    should end the process without waiting for them."""

    abandoned_threads: int = 0


def _make_strategy(spec: HandlerSpec, client: aioredis.Redis) -> Strategy:
    if spec.idempotency == "none":
        return AtLeastOnce(client, spec.stream, spec.group, spec.concurrency)
    raise ConfigError(f"{spec.name}: idempotency={spec.idempotency!r} is not available")


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
        self._stopping = asyncio.Event()
        self._signals = 0
        self._log = structlog.get_logger("streamworker.worker").bind(
            app=app.name, consumer=options.consumer
        )

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
        block_max_s = max(s.block_ms for s in specs) / 1000
        client = open_redis(self.options.redis_url, socket_timeout_s=block_max_s + 10.0)
        sync_slots = sum(s.concurrency for s in specs if not s.is_async) or 1
        threads = HandlerThreads(sync_slots)
        resolver = Resolver()
        abandoned = 0
        try:
            await resolver.start([s.plan for s in specs])
            self.consumers = [
                Consumer(
                    spec,
                    client=client,
                    consumer=self.options.consumer,
                    strategy=_make_strategy(spec, client),
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
            if self._stopping.is_set():
                self.stop()
            self._log.info(
                "worker_started",
                handlers=[s.name for s in specs],
                redis_url=_redact(self.options.redis_url),
            )
            await self._supervise()
            abandoned = threads.busy
        finally:
            threads.shutdown()
            with contextlib.suppress(Exception):
                await resolver.close()
            with contextlib.suppress(Exception):
                await client.aclose()
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
        self._log.info("worker_stopped", abandoned_threads=abandoned)
        return WorkerResult(abandoned_threads=abandoned)

    async def _supervise(self) -> None:
        tasks = {asyncio.ensure_future(c.run()): c for c in self.consumers}
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            done, _ = await asyncio.wait({*tasks, stopping}, return_when=asyncio.FIRST_COMPLETED)
            failed = next(
                (t for t in done if t is not stopping and t.exception() is not None), None
            )
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


def _redact(url: str) -> str:
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.split('@', 1)[1]}"
