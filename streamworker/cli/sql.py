"""``streamworker migrate`` and ``streamworker prune``: the database side of ``idempotency="sql"``
(argparse glue and output; the work is in :mod:`streamworker.idempotency.sql`).

SQLAlchemy and Alembic come with the ``sql`` extra and are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import redis

from streamworker.cli.common import refuse_in_memory_engine, require_group
from streamworker.cli.parsing import db_url_flag, redis_url_flag, runs
from streamworker.errors import ConfigError, ConnectionLost, StreamworkerError
from streamworker.extras import require_extra
from streamworker.io.redisio import open_redis, open_sync_redis, redact_url
from streamworker.ops.progress import Progress
from streamworker.settings import DEFAULT_REDIS_URL, load_settings


def _db_url(args: argparse.Namespace) -> str:
    settings = load_settings(db_url=args.db_url)
    if not settings.db_url:
        raise ConfigError("no database URL: pass --db-url or set STREAMWORKER_DB_URL")
    return settings.db_url


def _cmd_migrate(args: argparse.Namespace) -> int:
    """Bring the database's streamworker schema (the processed-messages table) up to date.
    Idempotent. The version is kept in streamworker_alembic_version, apart from your own
    Alembic history."""
    require_extra("sql", "streamworker migrate")
    from streamworker.errors import DatabaseUnavailable
    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql.migrate import upgrade

    db = SqlDatabase(_db_url(args))
    shown = db.redacted_url
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
    """Delete the processed rows of STREAM/GROUP below the group's oldest pending entry (or up
    to its last-delivered id when nothing is pending): those messages are acked and can never
    come back. Workers do this on their own every STREAMWORKER_PRUNE_INTERVAL_S; safe to run at
    any time."""
    require_extra("sql", "streamworker prune")
    settings = load_settings(redis_url=args.redis_url, db_url=args.db_url)
    if not settings.db_url:
        raise ConfigError("no database URL: pass --db-url or set STREAMWORKER_DB_URL")
    redis_url = settings.redis_url_or(DEFAULT_REDIS_URL)
    refuse_in_memory_engine(redis_url, "streamworker prune")
    client = open_sync_redis(redis_url)
    try:
        require_group(client, args.stream, args.group)
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise ConnectionLost(f"cannot reach Redis at {redact_url(redis_url)}: {exc}") from None
    finally:
        client.close()
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
        print(f"{args.stream} / {args.group}: nothing can be pruned (nothing delivered yet)")
    else:
        print(
            f"{args.stream} / {args.group}: deleted {result.deleted} processed row(s) with id "
            f"{result.cut}"
        )
    return 0


def migrate_arguments(migrate: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker migrate``."""
    runs(migrate, _cmd_migrate, example="streamworker migrate --db-url postgresql://app@db/billing")
    migrate.add_argument(
        "--db-url", metavar="URL", help="SQLAlchemy database URL (or STREAMWORKER_DB_URL)"
    )


def prune_arguments(prune: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker prune``."""
    runs(prune, _cmd_prune)
    prune.add_argument("stream", metavar="STREAM")
    prune.add_argument("group", metavar="GROUP")
    redis_url_flag(prune)
    db_url_flag(prune)
    prune.add_argument("--json", action="store_true", help="machine-readable result on stdout")
