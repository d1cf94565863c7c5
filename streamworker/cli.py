"""The ``streamworker`` command: the composition root (flags -> Settings -> objects).

Errors a user can fix (bad target, bad URL, unreachable Redis) print one line and exit non-zero:
2 for a command line or configuration that cannot work, 1 for a failure at run time.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from streamworker import __version__
from streamworker.app import App
from streamworker.cli_admin import add_admin_commands
from streamworker.cli_archive import add_archive_command
from streamworker.cli_backfill import add_backfill_command
from streamworker.cli_dashboard import add_dashboard_commands
from streamworker.cli_engine import add_engine_commands
from streamworker.cli_produce import add_produce_commands
from streamworker.errors import ConfigError, ConnectionLost, StreamworkerError, TargetError
from streamworker.extras import require_extra
from streamworker.observability.health import HealthServer
from streamworker.observability.logging import configure_logging
from streamworker.observability.metrics import Metrics
from streamworker.progress import Progress
from streamworker.redisio import connection_errors, open_redis, redact_url
from streamworker.runtime.worker import Worker, WorkerOptions
from streamworker.settings import DEFAULT_REDIS_URL, Settings, load_settings

EXIT_RUNTIME = 1
EXIT_CONFIG = 2


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
        async with connection_errors():
            await client.ping()
    finally:
        await client.aclose()


async def _run(app: App, settings: Settings) -> int:
    redis_url = settings.redis_url or app.redis_url or DEFAULT_REDIS_URL
    options = WorkerOptions(
        redis_url=redis_url,
        consumer=default_consumer_name(settings),
        shutdown_timeout_s=settings.shutdown_timeout_s,
        reconnect_backoff_initial_s=settings.reconnect_backoff_initial_s,
        reconnect_backoff_max_s=settings.reconnect_backoff_max_s,
        db_url=settings.db_url or app.db_url,
        prune_interval_s=settings.prune_interval_s,
        liveness_timeout_s=settings.liveness_timeout_s,
        consumer_name_ttl_ms=settings.consumer_name_ttl_ms,
        db_deadline_s=settings.db_deadline_s,
        redis_timeout_s=settings.redis_timeout_s,
        tracing=settings.tracing,
    )
    try:
        await _check_redis(redis_url)
    except ConnectionLost as exc:
        raise ConnectionLost(f"cannot reach Redis at {redact_url(redis_url)}: {exc}") from exc
    metrics = Metrics()
    worker = Worker(app, options, metrics)
    server: HealthServer | None = None
    if settings.metrics_port is not None:
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
    )
    configure_logging(settings.log_format, settings.log_level)
    app = load_target(args.target)
    return asyncio.run(_run(app, settings))


def _db_url(args: argparse.Namespace) -> str:
    settings = load_settings(db_url=args.db_url)
    if not settings.db_url:
        raise ConfigError("no database URL: pass --db-url or set STREAMWORKER_DB_URL")
    return settings.db_url


def _cmd_migrate(args: argparse.Namespace) -> int:
    require_extra("sql", "streamworker migrate")
    from streamworker.errors import DatabaseUnavailable
    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql_migrate import upgrade

    db = SqlDatabase(_db_url(args))
    shown = db.url.render_as_string(hide_password=True)
    try:
        before, after = upgrade(db)
    except Exception as exc:
        if isinstance(exc, StreamworkerError):
            raise
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [""])[0]
        raise DatabaseUnavailable(
            f"cannot migrate {shown}: {type(orig).__name__}: {first}"
        ) from exc
    finally:
        db.sync_engine.dispose()
    if before == after:
        print(f"{shown}: already at revision {after}")
    else:
        print(f"{shown}: migrated from {before or 'an empty schema'} to revision {after}")
    return 0


async def _prune(db_url: str, redis_url: str, stream: str, group: str) -> Any:
    from streamworker.idempotency.sql import SqlDatabase, prune

    db = SqlDatabase(db_url)
    client = open_redis(redis_url, socket_timeout_s=10.0)
    try:
        await asyncio.to_thread(db.check_ready)
        return await prune(db, client, stream, group)
    finally:
        await client.aclose()
        await db.dispose()


def _cmd_prune(args: argparse.Namespace) -> int:
    require_extra("sql", "streamworker prune")
    settings = load_settings(redis_url=args.redis_url, db_url=args.db_url)
    if not settings.db_url:
        raise ConfigError("no database URL: pass --db-url or set STREAMWORKER_DB_URL")
    redis_url = settings.redis_url or DEFAULT_REDIS_URL
    progress = Progress(f"prune {args.stream}/{args.group}", sys.stderr, unit="rows")
    # One range DELETE: nothing to count while it runs, so a phase shows it is alive.
    with progress.phase("deleting processed rows"):
        result = asyncio.run(_prune(settings.db_url, redis_url, args.stream, args.group))
    if args.json:
        cut = None if result.cut is None else str(result.cut)
        data = {"stream": args.stream, "group": args.group, "deleted": result.deleted, "cut": cut}
        print(json.dumps(data, indent=2))
        return 0
    if result.cut is None:
        print(
            f"{args.stream} / {args.group}: nothing can be pruned (no such group, or nothing "
            f"delivered)"
        )
    else:
        print(
            f"{args.stream} / {args.group}: deleted {result.deleted} processed row(s) with id "
            f"{result.cut}"
        )
    return 0


def _add_sql_commands(sub: Any) -> None:
    migrate = sub.add_parser(
        "migrate",
        help="create or upgrade the tables of idempotency='sql' in a database",
        description=(
            "Bring the database's streamworker schema (the processed-messages table) up to date. "
            "Idempotent. The version is kept in streamworker_alembic_version, apart from your "
            "own Alembic history."
        ),
        epilog="example: streamworker migrate --db-url postgresql://app@db/billing",
    )
    migrate.add_argument(
        "--db-url", metavar="URL", help="SQLAlchemy database URL (or STREAMWORKER_DB_URL)"
    )
    migrate.set_defaults(func=_cmd_migrate)

    prune = sub.add_parser(
        "prune",
        help="delete processed rows whose messages can no longer be redelivered",
        description=(
            "Delete the processed rows of STREAM/GROUP below the group's oldest pending entry "
            "(or up to its last-delivered id when nothing is pending): those messages are acked "
            "and can never come back. Workers do this on their own every "
            "STREAMWORKER_PRUNE_INTERVAL_S; safe to run at any time."
        ),
    )
    prune.add_argument("stream", metavar="STREAM")
    prune.add_argument("group", metavar="GROUP")
    prune.add_argument("--redis-url", metavar="URL", help="Redis URL (or STREAMWORKER_REDIS_URL)")
    prune.add_argument("--db-url", metavar="URL", help="database URL (or STREAMWORKER_DB_URL)")
    prune.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    prune.set_defaults(func=_cmd_prune)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="streamworker",
        description="Consume Redis Streams with effectively-once processing.",
    )
    parser.add_argument("--version", action="version", version=f"streamworker {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run",
        help="run an App's handlers until SIGTERM/SIGINT",
        description=(
            "Run every handler of an App until SIGTERM or SIGINT. Each handler first re-reads this "
            "consumer's own pending entries, then new ones. Every flag can also be set as "
            "STREAMWORKER_<FLAG> in the environment or a .env file (flags win)."
        ),
        epilog="example: streamworker run billing.app:app --redis-url redis://127.0.0.1:6379/0",
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
    run.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        help="log output (default: console on a terminal, else JSON)",
    )
    run.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="default: info"
    )
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
    run.set_defaults(func=_cmd_run)
    _add_sql_commands(sub)

    add_admin_commands(sub)
    add_engine_commands(sub)
    add_archive_command(sub)
    add_backfill_command(sub)
    add_dashboard_commands(sub)
    add_produce_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamworker`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"streamworker: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StreamworkerError as exc:
        print(f"streamworker: error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
