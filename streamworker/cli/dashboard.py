"""``streamworker dashboard``: serve the web dashboard (:mod:`streamworker.dashboard`) with uvicorn.

Starlette, uvicorn and Jinja2 come with the ``dashboard`` extra and are imported only when the
command runs, so the rest of the CLI works without them.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import socket

import structlog

from streamworker.cli.parsing import log_flags, runs
from streamworker.errors import ConfigError
from streamworker.observability.logging import configure_logging
from streamworker.settings import DEFAULT_REDIS_URL, load_settings

TOKEN_ENV = "STREAMWORKER_DASHBOARD_TOKEN"
_MODULES = ("starlette", "uvicorn", "jinja2", "python_multipart")


def _require_dashboard_extra() -> None:
    missing = [m for m in _MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"streamworker dashboard needs the 'dashboard' extra ({', '.join(missing)} not "
            "installed): pip install 'streamworker[dashboard]'"
        )


def _allowed_hosts(bind: str) -> tuple[str, ...] | None:
    from streamworker.dashboard.security import is_loopback

    # On loopback only local names may reach the app (DNS rebinding); elsewhere the token guards.
    if is_loopback(bind):
        return ("127.0.0.1", "localhost", "::1", "[::1]", bind)
    return None


def _cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve a web dashboard: streams, consumer groups (lag, pending, a chart), consumers and
    their pending entries, dead letters. Read-only unless started with --allow-actions and a
    token. Needs the 'dashboard' extra."""
    _require_dashboard_extra()
    import uvicorn

    from streamworker.dashboard import DashboardConfig, create_app
    from streamworker.dashboard.overview import Thresholds
    from streamworker.io.redisio import redact_url

    settings = load_settings(
        redis_url=args.redis_url,
        dashboard_token=args.token or None,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    configure_logging(settings.log_format, settings.log_level)
    secret = settings.dashboard_token
    token = (secret.get_secret_value() if secret is not None else None) or None
    config = DashboardConfig(
        redis_url=settings.redis_url_or(DEFAULT_REDIS_URL),
        bind=args.bind,
        token=token,
        allow_actions=args.allow_actions,
        refresh_ms=args.refresh_ms,
        sample_interval_s=args.sample_interval_s,
        allowed_hosts=_allowed_hosts(args.bind),
        thresholds=Thresholds.parse(args.thresholds or ""),
        history_series=args.history_series,
    )
    if config.refresh_ms < 500:
        raise ConfigError("--refresh-ms must be at least 500")
    if not 0.5 <= config.sample_interval_s <= 60:
        raise ConfigError("--sample-interval-s must be between 0.5 and 60")
    if not 1 <= config.history_series <= 10_000:
        raise ConfigError("--history-series must be between 1 and 10000")
    app = create_app(config)  # raises ConfigError for an unsafe bind/token combination
    family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.bind, args.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot serve the dashboard on {args.bind}:{args.port}: {exc}") from None
    port = sock.getsockname()[1]
    host = f"[{args.bind}]" if ":" in args.bind else args.bind
    structlog.get_logger("streamworker.dashboard").info(
        "dashboard_started",
        url=f"http://{host}:{port}/",
        redis_url=redact_url(config.redis_url),
        actions=config.allow_actions,
        login=bool(token),
    )
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    )
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again for whoever
    # handled it before; a graceful stop is a clean exit here, as for `streamworker run`.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
    structlog.get_logger("streamworker.dashboard").info("dashboard_stopped")
    return 0


def dashboard_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker dashboard``."""
    runs(
        p,
        _cmd_dashboard,
        example="streamworker dashboard --redis-url redis://127.0.0.1:6379/0 --port 8080",
    )
    p.add_argument(
        "--redis-url",
        metavar="URL",
        help=f"redis://, rediss://, unix:// or engine:// URL (default: $STREAMWORKER_REDIS_URL, else {DEFAULT_REDIS_URL})",
    )
    p.add_argument(
        "--bind",
        metavar="ADDR",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; any other needs a token)",
    )
    p.add_argument("--port", metavar="N", type=int, default=8080, help="default 8080 (0: any)")
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"a secret of 8+ characters; pages then need a login (default: ${TOKEN_ENV})",
    )
    p.add_argument(
        "--allow-actions",
        action="store_true",
        help="allow replay/purge of dead letters, claiming and deleting consumers (needs a token)",
    )
    p.add_argument(
        "--refresh-ms",
        metavar="MS",
        type=int,
        default=3000,
        help="live refresh interval of the pages (default 3000)",
    )
    p.add_argument(
        "--sample-interval-s",
        metavar="S",
        type=float,
        default=1.0,
        help="how often every stream's counters are sampled: the resolution of the one-hour "
        "history behind the rates and charts (default 1)",
    )
    p.add_argument(
        "--history-series",
        metavar="N",
        type=int,
        default=100,
        help="at most N (stream, group) series kept for an hour (172.8 KB each at 1 s; default "
        "100 = 17.3 MB)",
    )
    p.add_argument(
        "--thresholds",
        metavar="SPEC",
        help="the overview's warn/critical levels, e.g. "
        "work_left=1000/10000,oldest_pending_s=60/600,dead_letters=1/100 (the defaults)",
    )
    log_flags(p)
