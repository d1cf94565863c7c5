"""``streamworker engine serve``: the embedded engine as a Redis server (argparse glue; the
server is :mod:`streamworker.engine.server`)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from streamworker.cli.parsing import runs
from streamworker.errors import ConfigError, StreamworkerError


def _cmd_serve(args: argparse.Namespace) -> int:
    """Serve the engine over TCP until SIGTERM or SIGINT (then it flushes its file and exits
    0). With --dir, every write is logged to DIR/appendonly.aof and replayed on start; without
    it the data lives in memory only."""
    from streamworker.engine.aof import PersistenceError
    from streamworker.engine.rdb.files import RdbLoadError
    from streamworker.engine.server import ListenError, ProtectedModeError, ServerOptions, serve

    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = ServerOptions(
        bind=args.bind,
        port=args.port,
        data_dir=Path(args.dir) if args.dir else None,
        appendfsync=args.appendfsync,
        requirepass=args.requirepass or None,
        aof_skip_damaged=args.aof_skip_damaged,
        load_rdb=Path(args.load_rdb) if args.load_rdb else None,
        replicaof=_replicaof(args.replicaof),
        masterauth=args.masterauth or None,
        redis_version=_redis_version(args.redis_version),
    )
    try:
        return serve(options)
    except ProtectedModeError as exc:
        raise ConfigError(str(exc)) from None
    except (PersistenceError, ListenError, RdbLoadError) as exc:
        raise StreamworkerError(str(exc)) from None
    except OSError as exc:
        # Say what failed (exc names the file, if any), not where the server would listen.
        raise StreamworkerError(f"engine serve failed: {exc}") from None


def _redis_version(text: str) -> str:
    from streamworker.engine.versions import parse_redis_version

    try:
        return parse_redis_version(text).text
    except ValueError as exc:
        raise ConfigError(f"--redis-version: {exc}") from None


def _replicaof(words: list[str] | None) -> tuple[str, int] | None:
    if not words:
        return None
    host, port = words
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--replicaof {host} {port}: the port must be a number in 0..65535")
    return host, int(port)


def engine_arguments(engine: argparse.ArgumentParser) -> None:
    """The subcommands of ``streamworker engine`` (``serve``) and their arguments."""
    engine.description = "The embedded Redis 7.0-compatible stream engine."
    engine_sub = engine.add_subparsers(dest="engine_command", metavar="COMMAND")
    engine_sub.required = True
    serve = engine_sub.add_parser(
        "serve", help="serve the engine over RESP (redis-cli, redis-py, any Redis client)"
    )
    runs(
        serve,
        _cmd_serve,
        example="streamworker engine serve --port 6390 --dir ./data --appendfsync always",
    )
    serve.add_argument(
        "--bind",
        metavar="ADDR",
        default="127.0.0.1",
        help="address(es) to listen on, space-separated (default: 127.0.0.1); a non-loopback "
        "address needs --requirepass",
    )
    serve.add_argument("--port", metavar="N", type=int, default=6390, help="default: 6390")
    serve.add_argument(
        "--dir", metavar="DIR", help="data directory (append-only file); default: in memory"
    )
    serve.add_argument(
        "--appendfsync",
        choices=("always", "everysec", "no"),
        default="everysec",
        help="when the file is fsynced: before each reply, once a second, or by the OS "
        "(default: everysec)",
    )
    serve.add_argument("--requirepass", metavar="PASS", help="password clients must AUTH with")
    serve.add_argument(
        "--aof-skip-damaged",
        action="store_true",
        help="load past damaged records of DIR/appendonly.aof, logging each with its offset, "
        "instead of refusing to start (their writes are lost)",
    )
    serve.add_argument(
        "--load-rdb",
        metavar="FILE",
        help="load an RDB file (redis-server 7.0's dump.rdb, or the engine's SAVE) at start; "
        "with --dir only into an empty data directory, whose append-only file then holds "
        "the data",
    )
    serve.add_argument(
        "--replicaof",
        nargs=2,
        metavar=("HOST", "PORT"),
        help="start as a replica of the master at HOST PORT (a redis-server 7.0 or another "
        "engine): full resync, then its writes; read-only for clients (REPLICAOF NO ONE "
        "makes it a master again)",
    )
    serve.add_argument("--masterauth", metavar="PASS", help="password to AUTH with at the master")
    serve.add_argument(
        "--redis-version",
        metavar="V",
        default="7.0.15",
        help="the Redis version to answer as: 7.0 (default, 7.0.15) or 8.0 .. 8.10, which adds "
        "that version's stream commands (XACKDEL, XDELEX, XREADGROUP CLAIM, XADD IDMP, XNACK; see "
        "docs/engine-redis8.md)",
    )
