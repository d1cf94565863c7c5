"""``idempotency="sql"`` as a plug-in: the session types it gives handlers, its checks, the
database a worker's SQL handlers share (with its retention loop), and the strategy.

The registry imports this module when a handler asks for ``idempotency="sql"``; SQLAlchemy is
imported by the handler check and by the worker, not before.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker.core.deps import CallPlan, DependencyParam, ProvidedParam, build_plan
from streamworker.errors import ConfigError, StreamworkerError
from streamworker.idempotency.base import (
    Backing,
    BuildContext,
    HandlerConfig,
    Strategy,
)
from streamworker.idempotency.sql.database import SqlDatabase
from streamworker.idempotency.sql.options import SqlOptions
from streamworker.idempotency.sql.retention import prune
from streamworker.idempotency.sql.strategy import SqlStrategy


def _provided_types(plan: CallPlan) -> set[type]:
    """Every type the plan (and the dependencies it reaches) asks the strategy to provide."""
    found: set[type] = set()
    for _, param in plan.params:
        if isinstance(param, ProvidedParam):
            found.add(param.type_)
        elif isinstance(param, DependencyParam):
            found |= _provided_types(param.plan)
    return found


class SqlDatabaseBacking:
    """The database a worker's SQL handlers share: checked at start-up, pinged by ``/readyz``,
    pruned every ``prune_interval_s``, disposed at the end."""

    readiness_name = "database"

    def __init__(
        self, db: SqlDatabase, subscriptions: set[tuple[str, str]], prune_interval_s: float
    ):
        self.db = db
        self._subscriptions = subscriptions
        self._prune_interval_s = prune_interval_s

    async def start(self) -> None:
        """Unreachable (exit 1), a mistyped SQLite path or an unmigrated schema (exit 2): said
        now, in one line, not as warnings at the first message."""
        await asyncio.to_thread(self.db.check_ready)

    def ping(self) -> None:
        """One round trip to the database."""
        self.db.ping()

    async def run(self, client: aioredis.Redis, stopped: Callable[[], Awaitable[object]]) -> None:
        """Every ``prune_interval_s``, delete the processed rows no message can need any more."""
        log = structlog.get_logger("streamworker.sql")
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped(), self._prune_interval_s)
                return
            for stream, group in sorted(self._subscriptions):
                try:
                    result = await prune(self.db, client, stream, group)
                except StreamworkerError as exc:
                    # Redis or the database is away: the consume loops deal with it; try later.
                    log.warning("prune_failed", stream=stream, group=group, error=str(exc))
                    continue
                if result.deleted:
                    log.info(
                        "processed_rows_pruned",
                        stream=stream,
                        group=group,
                        rule=str(result.cut),
                        deleted=result.deleted,
                    )

    async def close(self) -> None:
        """Dispose of the connection pools."""
        await self.db.dispose()


class SqlPlugin:
    """``idempotency="sql"``: a ``Session`` (``def`` handlers) or ``AsyncSession`` (``async
    def``) whose transaction records the message as processed; one handler at a time."""

    name = "sql"
    applies_effects = False
    supports_dedup_field = False
    supports_batch = True
    pauses_on_schema_errors = True
    """A handler statement that meets a missing table or column pauses the handler (the batch's
    transaction is rolled back, nothing acked) instead of failing the message: see
    :class:`~streamworker.errors.SchemaError`."""

    def check_options(self, *, concurrency: int) -> None:
        """One transaction per batch, on one connection: its handlers run one after another."""
        if concurrency != 1:
            raise ConfigError(
                "idempotency='sql' runs a batch's handlers one at a time in one transaction; "
                "concurrency must be 1 (run more worker processes for more throughput)"
            )

    def plan(self, func: Callable[..., Any]) -> CallPlan:
        """``def`` handlers get a ``Session``, ``async def`` handlers an ``AsyncSession`` (a
        blocking Session would stall the event loop, and an AsyncSession cannot be driven from
        a worker thread)."""
        session, async_session = Session, AsyncSession
        plan = build_plan(func, provided=frozenset({session, async_session}))
        wanted = _provided_types(plan)
        fname = getattr(func, "__qualname__", repr(func))
        if inspect.iscoroutinefunction(func):
            if any(issubclass(t, session) for t in wanted):
                raise ConfigError(
                    f"{fname}: an async def handler gets an AsyncSession "
                    f"(sqlalchemy.ext.asyncio.AsyncSession), not a Session"
                )
        elif any(issubclass(t, async_session) for t in wanted):
            raise ConfigError(
                f"{fname}: a def handler gets a Session (sqlalchemy.orm.Session); AsyncSession is "
                f"for async def handlers"
            )
        return plan

    def open(self, specs: Sequence[HandlerConfig], options: object | None) -> Backing | None:
        """The database at the :class:`SqlOptions`' ``db_url`` (not connected yet)."""
        if options is None:
            options = SqlOptions()
        if not isinstance(options, SqlOptions):
            raise ConfigError(
                f"strategy_options['sql'] must be a SqlOptions, not {type(options).__name__}"
            )
        if not options.db_url:
            names = ", ".join(dict.fromkeys(s.name for s in specs))  # partitions share a name
            raise ConfigError(
                f"handler(s) {names} use idempotency='sql' but no database URL is set; pass "
                f"--db-url, set STREAMWORKER_DB_URL or App(db_url=...)"
            )
        db = SqlDatabase(options.db_url, deadline_s=options.deadline_s)
        subscriptions = {(s.stream, s.group) for s in specs}
        return SqlDatabaseBacking(db, subscriptions, options.prune_interval_s)

    def build(self, spec: HandlerConfig, context: BuildContext) -> Strategy:
        """A :class:`~streamworker.idempotency.sql.SqlStrategy` on the shared database."""
        backing = context.backing
        assert isinstance(backing, SqlDatabaseBacking)  # the worker opened it for this plug-in
        return SqlStrategy(
            backing.db,
            context.client,
            stream=spec.stream,
            group=spec.group,
            consumer=context.consumer,
            max_deliveries=spec.max_deliveries,
            claim_idle_ms=spec.claim_idle_ms,
            is_async=spec.is_async,
            on_timeout=context.on_timeout,
        )


PLUGIN = SqlPlugin()
"""Found by :mod:`streamworker.idempotency.registry` as ``"sql"``."""
