"""``streamworker run TARGET``: load an App and run its handlers in a worker until a signal.

This is where flags become :class:`~streamworker.settings.Settings` and Settings become the
worker's objects (options, metrics, the health endpoint).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import socket
import sys
from pathlib import Path
from typing import Any

import structlog

from streamworker.app import App
from streamworker.cli.common import is_in_memory_engine, refuse_in_memory_engine
from streamworker.cli.parsing import log_flags, runs
from streamworker.cli.processes import ChildLink, Supervisor
from streamworker.errors import ConfigError, ConnectionLost, StreamworkerError, TargetError
from streamworker.io.redisio import connection_errors, discover_primary, open_redis, redact_url
from streamworker.observability.health import HealthServer
from streamworker.observability.logging import configure_logging
from streamworker.observability.metrics import Metrics
from streamworker.runtime.worker import Worker, WorkerOptions
from streamworker.settings import DEFAULT_REDIS_URL, Settings, load_settings


def load_target(target: str) -> App:
    """Load ``module:attr`` or ``path/to/file.py:attr`` (``:attr`` defaults to ``app``).

    The current directory is importable, as with ``python -m``. Raises TargetError with a message
    that says what to fix.
    """
    spec, _, attr = target.rpartition(":") if ":" in target else (target, "", "app")
    attr = attr or "app"
    if not spec:
        raise TargetError(
            f"invalid target {target!r}: expected module:attribute or file.py:attribute"
        )
    if spec.endswith(".py") or os.sep in spec:
        path = Path(spec)
        if not path.is_file():
            raise TargetError(f"cannot load {target!r}: no such file {spec!r}")
        # The file's stem names the module (so handler names read well), unless that name is taken.
        name = path.stem if path.stem not in sys.modules else f"streamworker_target_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise TargetError(f"cannot load {target!r}: {spec!r} is not a Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            raise TargetError(f"cannot load {target!r}: {type(exc).__name__}: {exc}") from exc
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as exc:
            if exc.name and spec.startswith(exc.name):
                raise TargetError(
                    f"cannot import module {spec!r}: no module named {exc.name!r}"
                ) from exc
            raise TargetError(f"cannot import module {spec!r}: {exc}") from exc
        except Exception as exc:
            raise TargetError(
                f"cannot import module {spec!r}: {type(exc).__name__}: {exc}"
            ) from exc
    try:
        obj: Any = getattr(module, attr)
    except AttributeError:
        raise TargetError(f"module {spec!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise TargetError(f"{spec}:{attr} is a {type(obj).__name__}, not a streamworker App")
    return obj


def default_consumer_name(settings: Settings) -> str:
    """``--consumer``/``STREAMWORKER_CONSUMER``, else ``POD_NAME``, else the host name.

    Stable across restarts on purpose: a restarted worker must find its own pending entries.
    """
    return settings.consumer or socket.gethostname()


async def _check_redis(url: str) -> None:
    client = open_redis(url, socket_timeout_s=5.0)
    try:
        # Through Sentinels: ConfigError when they monitor no such service (a typo that no
        # retry fixes), ConnectionLost when none answers.
        await discover_primary(client)
        async with connection_errors():
            await client.ping()
    finally:
        await client.aclose()


def _redis_url(app: App, settings: Settings) -> str:
    return settings.redis_url_or(app.redis_url or DEFAULT_REDIS_URL)


def _strategy_options(app: App, settings: Settings) -> dict[str, object]:
    """The options of the strategies ``app``'s handlers use, from ``settings``: the database of
    ``idempotency="sql"`` handlers (the flag or environment, else the App's)."""
    if not any(s.idempotency == "sql" for s in app.handlers):
        return {}
    # Only here: the SQL package imports SQLAlchemy (an extra).
    from streamworker.idempotency.sql import SqlOptions

    return {
        "sql": SqlOptions(
            db_url=settings.db_url or app.db_url,
            deadline_s=settings.db_deadline_s,
            prune_interval_s=settings.prune_interval_s,
        )
    }


async def _run(app: App, settings: Settings, link: ChildLink | None = None) -> int:
    redis_url = _redis_url(app, settings)
    # A handler's app.publish goes where this worker reads: the flag beats the environment.
    app.use_redis_url(redis_url)
    options = WorkerOptions(
        redis_url=redis_url,
        consumer=default_consumer_name(settings),
        shutdown_timeout_s=settings.shutdown_timeout_s,
        reconnect_backoff_initial_s=settings.reconnect_backoff_initial_s,
        reconnect_backoff_max_s=settings.reconnect_backoff_max_s,
        liveness_timeout_s=settings.liveness_timeout_s,
        consumer_name_ttl_ms=settings.consumer_name_ttl_ms,
        strategy_options=_strategy_options(app, settings),
        redis_timeout_s=settings.redis_timeout_s,
        tracing=settings.tracing,
        delayed_poll_ms=settings.delayed_poll_ms,
        max_in_flight=settings.max_in_flight,
        max_in_flight_bytes=settings.max_in_flight_bytes,
    )
    try:
        await _check_redis(redis_url)
    except ConnectionLost as exc:
        raise ConnectionLost(f"cannot reach Redis at {redact_url(redis_url)}: {exc}") from exc
    metrics = Metrics()
    # app.publish inside handlers: the settings' replica wait, timed into this worker's metrics.
    app.configure_publish(
        wait_replicas=settings.wait_replicas,
        wait_timeout_ms=settings.wait_timeout_ms,
        wait_observer=metrics.observe_replica_wait,
    )
    worker = Worker(app, options, metrics)
    server: HealthServer | None = None
    if link is not None:
        # A child of --processes: probes on a private loopback port the supervisor asks; the
        # metrics reach the supervisor's endpoint through PROMETHEUS_MULTIPROC_DIR.
        server = HealthServer(metrics.registry, worker.liveness, worker.readiness)
        link.publish_probe_port(server.start("127.0.0.1", 0))
    elif settings.metrics_port is not None:
        server = HealthServer(metrics.registry, worker.liveness, worker.readiness)
        try:
            port = server.start(settings.metrics_host, settings.metrics_port)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: {exc}"
            ) from None
        structlog.get_logger("streamworker.cli").info(
            "http_endpoint_started",
            host=settings.metrics_host,
            port=port,
            paths=["/metrics", "/healthz", "/readyz"],
        )
    try:
        result = await worker.run()
    finally:
        if server is not None:
            server.stop()
    if result.abandoned_threads:
        # Sync handlers still running past the deadline: their messages stay pending; do not let
        # their threads hold the process (the interpreter would join them at exit).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    """Run every handler of an App until SIGTERM or SIGINT. Each handler first re-reads this
    consumer's own pending entries, then new ones. Every flag can also be set as
    STREAMWORKER_<FLAG> in the environment or a .env file (flags win)."""
    settings = load_settings(
        redis_url=args.redis_url,
        db_url=args.db_url,
        consumer=args.consumer,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        liveness_timeout_s=args.liveness_timeout_s,
        log_format=args.log_format,
        log_level=args.log_level,
        shutdown_timeout_s=args.shutdown_timeout_s,
        tracing=args.tracing or None,
        processes=args.processes,
    )
    configure_logging(settings.log_format, settings.log_level)
    link: ChildLink | None = None
    if args.supervisor_dir is not None:
        link = ChildLink(Path(args.supervisor_dir), args.process_index, args.supervisor_pid)
        link.stop_with_parent()
    try:
        app = load_target(args.target)
        url = _redis_url(app, settings)
        if link is None and is_in_memory_engine(url):
            if settings.processes > 1:
                # Each process would get an engine of its own: N unrelated, empty worlds.
                refuse_in_memory_engine(url, "streamworker run --processes")
            # The demo's path (an app that publishes to itself in-process) works; nothing
            # outside this process can reach the worker, though: say so once.
            print(
                f"streamworker: warning: {url} lives only in this process: "
                f"nothing else can publish to this worker, and its data is gone when it exits "
                f"(share one with `streamworker engine serve` or engine:///DIR)",
                file=sys.stderr,
            )
        if link is None and settings.processes > 1:
            redis_url = _redis_url(app, settings)
            try:
                asyncio.run(_check_redis(redis_url))
            except ConnectionLost as exc:
                raise ConnectionLost(
                    f"cannot reach Redis at {redact_url(redis_url)}: {exc}"
                ) from exc
            return Supervisor(
                app,
                args.target,
                settings,
                processes=settings.processes,
                base_consumer=default_consumer_name(settings),
                redis_url=redis_url,
            ).run()
        return asyncio.run(_run(app, settings, link))
    except StreamworkerError as exc:
        if link is not None:
            link.report_error(str(exc))
        raise


def run_arguments(run: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker run``."""
    runs(
        run,
        _cmd_run,
        example="streamworker run billing.app:app --redis-url redis://127.0.0.1:6379/0",
    )
    run.add_argument(
        "target",
        metavar="TARGET",
        help="module:attr or path/to/file.py:attr (attr defaults to app)",
    )
    run.add_argument(
        "--redis-url",
        metavar="URL",
        help=f"redis://, rediss://, unix:// or engine:// URL (default: the App's, else {DEFAULT_REDIS_URL})",
    )
    run.add_argument(
        "--db-url", metavar="URL", help="SQLAlchemy database URL for idempotency='sql' handlers"
    )
    run.add_argument(
        "--consumer",
        metavar="NAME",
        help="consumer name; keep it stable across restarts (default: $POD_NAME, else the host name)",
    )
    run.add_argument(
        "--metrics-port",
        metavar="N",
        type=int,
        help="serve /metrics, /healthz and /readyz over HTTP on this port",
    )
    run.add_argument(
        "--metrics-host",
        metavar="ADDR",
        help="address to bind that port to (default: 127.0.0.1; 0.0.0.0 for Prometheus in Kubernetes)",
    )
    run.add_argument(
        "--liveness-timeout-s",
        metavar="S",
        type=float,
        help="/healthz fails when a consume loop has not gone round for this long (default: 300)",
    )
    log_flags(run)
    run.add_argument(
        "--shutdown-timeout-s",
        metavar="S",
        type=float,
        help="how long in-flight batches may finish after a signal (default: 30)",
    )
    run.add_argument(
        "--tracing",
        action="store_true",
        help=(
            "OpenTelemetry spans per message (pip install 'streamworker[tracing]'), to the tracer "
            "provider your app or `opentelemetry-instrument` sets up"
        ),
    )
    run.add_argument(
        "--processes",
        metavar="N",
        type=int,
        help=(
            "run N worker processes under a supervisor, consumer names NAME-0 … NAME-{N-1} "
            "(NAME from --consumer); it restarts crashed ones, forwards SIGTERM/SIGINT and serves "
            "one /metrics, /healthz and /readyz for all (default: 1, this process alone, consumer "
            "name NAME unchanged)"
        ),
    )
    # Internal: how the supervisor tells a child who it is (not for users).
    run.add_argument("--supervisor-dir", help=argparse.SUPPRESS)
    run.add_argument("--process-index", type=int, default=0, help=argparse.SUPPRESS)
    run.add_argument("--supervisor-pid", type=int, default=0, help=argparse.SUPPRESS)
