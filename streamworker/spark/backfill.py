"""Run a streamworker handler over a DataFrame of stream entries on the executors, exactly once
together with the live workers.

The handler must be an ``idempotency="sql"`` ``def`` handler. Each executor task takes its
partition's entries in chunks; one chunk is one database transaction built from the SQL
strategy's own parts (:mod:`streamworker.idempotency.sql`): the same ``processed_messages``
table and key (handler's group, stream, message id), the same claim statement (``INSERT … ON
CONFLICT DO NOTHING RETURNING``), the same session class, SQLite opened the same way (WAL,
``BEGIN IMMEDIATE``). So:

* a message whose row exists (a live worker or an earlier attempt committed it) is a
  ``duplicate`` and its handler does not run;
* a live worker that reaches a message this backfill has claimed blocks on the uncommitted row
  (PostgreSQL) or on the write lock (SQLite), then sees the row and acks without running;
* after claiming, the backfill reads the group's state (last-delivered id, then the PEL, in that
  order, as the SQL strategy's retention rule requires): a message at or below the group's
  last-delivered id that is no longer pending was acked by the group, and its row may have been
  pruned since, so it is a ``duplicate`` too and its claim is released;
  (Pass ``skip_delivered=False`` to backfill history a group never delivered, e.g. one created
  at ``$``: its last-delivered id starts above that history. Safe only for entries no worker of
  the group has handled, since their processed rows may have been pruned.)
* a task that dies mid-partition (executor lost, injected failure) rolls back its open chunk;
  Spark's retry re-reads the partition and finds the committed chunks' rows.

Every message gets one outcome row: ``ok`` (handled and committed by this run, possibly by an
earlier attempt of a retried task), ``duplicate`` (handled elsewhere: a live worker, an earlier
run) or ``failed`` (its writes rolled back; with ``dead_letter=True`` sent to the handler's
dead-letter stream once, with the live worker's provenance fields). The returned DataFrame is
materialised (``localCheckpoint``), so counting or showing it does not run the handlers again.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker.app import App, HandlerSpec
from streamworker.core.codec import decode_message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import describe
from streamworker.errors import ConfigError, DatabaseUnavailable, PermanentFailure
from streamworker.idempotency.sql import (
    TABLE_NAME,
    BatchSession,
    SqlDatabase,
    claim_call,
    database_errors,
    processed_messages,
    sortable_id,
    unclaim_statement,
)
from streamworker.io.redisio import as_text
from streamworker.spark import redisops
from streamworker.spark.ranges import StreamId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OUTCOME_SCHEMA = "stream STRING, id STRING, outcome STRING, error STRING, dead_letter_id STRING"
"""The columns of :func:`run_handler`'s result."""

OK, DUPLICATE, FAILED = "ok", "duplicate", "failed"

_DEAD_LETTER = redisops.SyncScript("dead_letter_backfill")
_DLQ_RECORD_TTL_MS = 7 * 86_400_000


def load_app(target: str) -> App:
    """Import ``module:attr`` (importable on the executors too); ConfigError otherwise."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"backfill target must be module:attribute, got {target!r}")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {target!r}: {exc}") from None
    if not isinstance(obj, App):
        raise ConfigError(f"{target} is a {type(obj).__name__}, not a streamworker App")
    return obj


def find_handler(app: App, handler: str | None) -> HandlerSpec:
    """The handler named ``handler`` (its name or its stream), or the App's only handler; it
    must be a ``def`` handler with ``idempotency="sql"``."""
    specs = app.handlers
    if handler is not None:
        specs = [s for s in specs if handler in (s.name, s.stream)]
    if len(specs) != 1:
        names = ", ".join(s.name for s in app.handlers) or "none"
        raise ConfigError(
            f"choose one handler of {app.name!r} with handler=NAME (found {len(specs)}; "
            f"handlers: {names})"
        )
    spec = specs[0]
    if spec.idempotency != "sql":
        raise ConfigError(
            f"{spec.name}: a backfill needs an idempotency='sql' handler (the processed rows are "
            f"what keeps it exactly-once with live workers), not {spec.idempotency!r}"
        )
    if spec.is_async:
        raise ConfigError(f"{spec.name}: backfills run def handlers (not async def) for now")
    return spec


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    """Everything a task needs, as plain values (it is pickled to the executors)."""

    target: str
    handler: str | None
    db_url: str
    redis_url: str
    consumer: str
    dead_letter: bool
    chunk_size: int
    sqlite_busy_timeout_ms: int
    skip_delivered: bool = True


@dataclass(frozen=True, slots=True)
class _Entry:
    stream: str
    id: str
    fields: dict[bytes, bytes]


def _group_acked(client: Any, stream: str, group: str, ids: list[str]) -> set[str]:
    """Of ``ids`` (sorted), those the group has delivered and acked already."""
    groups: Any = None
    try:
        groups = client.xinfo_groups(stream)
    except Exception as exc:
        if "no such key" in str(exc).lower():
            return set()
        raise
    last: StreamId | None = None
    for info in groups:
        name = info.get("name")
        if as_text(name) == group:
            last = StreamId.parse(info["last-delivered-id"])
    if last is None:
        return set()
    # The PEL after the last-delivered id (see the SQL strategy's retention rule).
    pending: set[str] = set()
    low = ids[0]
    while True:
        rows: Any = client.xpending_range(stream, group, min=low, max=ids[-1], count=1000)
        for row in rows:
            mid = row["message_id"]
            pending.add(as_text(mid))
        if len(rows) < 1000:
            break
        top = rows[-1]["message_id"]
        low = "(" + as_text(top)
    return {i for i in ids if StreamId.parse(i) <= last and i not in pending}


class _Runner:
    """One task's work: chunks of one stream, one transaction each."""

    def __init__(self, config: BackfillConfig) -> None:
        self.config = config
        self.spec = find_handler(load_app(config.target), config.handler)
        self.db = SqlDatabase(config.db_url, sqlite_busy_timeout_ms=config.sqlite_busy_timeout_ms)
        self.redis = redisops.connect(config.redis_url)
        self.resolver = Resolver()

    def close(self) -> None:
        self.redis.close()
        self.db.sync_engine.dispose()

    async def chunk(self, stream: str, entries: list[_Entry]) -> list[tuple[Any, ...]]:
        spec, consumer = self.spec, self.config.consumer
        if stream != spec.stream:
            why = f"entry of stream {stream!r}; handler {spec.name} consumes {spec.stream!r}"
            return [(stream, e.id, FAILED, why, None) for e in entries]
        engine = self.db.sync_engine
        sids = [sortable_id(e.id) for e in entries]
        with database_errors("connecting"):
            conn = engine.connect()
        try:
            with database_errors("beginning"):
                trans = conn.begin()
            session = BatchSession(
                bind=conn, join_transaction_mode="rollback_only", expire_on_commit=False
            )
            stmt, params = claim_call(engine.dialect.name, spec.group, stream, consumer, sids)
            with database_errors("claiming"):
                claimed = set(session.connection().execute(stmt, params).scalars())
            # Rows an earlier attempt of this run committed (a retried task) count as its own.
            ours = self._ours(session, stream, [sid for sid in sids if sid not in claimed])
            # After the claim, as the SQL strategy checks ownership after its claim.
            acked = (
                _group_acked(self.redis, stream, spec.group, [e.id for e in entries])
                if self.config.skip_delivered
                else set()
            )
            release: list[str] = []
            results: list[tuple[Any, ...]] = []
            failures: list[tuple[_Entry, str]] = []
            for entry, sid in zip(entries, sids, strict=True):
                if sid in ours:
                    results.append((stream, entry.id, OK, None, None))
                    continue
                if sid not in claimed:
                    results.append((stream, entry.id, DUPLICATE, None, None))
                    continue
                if entry.id in acked:
                    release.append(sid)
                    why = f"delivered to and acked by group {spec.group!r}"
                    results.append((stream, entry.id, DUPLICATE, why, None))
                    continue
                error = await self._handle(session, conn, stream, entry)
                if error is None:
                    results.append((stream, entry.id, OK, None, None))
                else:
                    release.append(sid)
                    failures.append((entry, error))
                    results.append((stream, entry.id, FAILED, error, None))
            if release:
                with database_errors("releasing claims"):
                    session.execute(unclaim_statement(spec.group, stream, release))
            with database_errors("flushing"):
                session.flush()
            session.close()
            with database_errors("committing"):
                trans.commit()
        finally:
            conn.close()
        if failures and self.config.dead_letter:
            dlq = {e.id: self._dead_letter(stream, e, err) for e, err in failures}
            results = [(s, i, o, err, dlq.get(i)) for s, i, o, err, _ in results]
        return results

    def _ours(self, session: Session, stream: str, sids: list[str]) -> set[str]:
        if not sids:
            return set()
        c = processed_messages.c
        query = sa.select(c.message_id).where(
            c.group_name == self.spec.group,
            c.stream == stream,
            c.message_id.in_(sids),
            c.consumer == self.config.consumer,
        )
        with database_errors("reading processed rows"):
            return set(session.execute(query).scalars())

    async def _handle(
        self, session: Session, conn: sa.Connection, stream: str, entry: _Entry
    ) -> str | None:
        spec = self.spec
        try:
            msg = decode_message(
                entry.id.encode(),
                entry.fields,
                stream=stream,
                group=spec.group,
                consumer=self.config.consumer,
                delivery_count=1,
                model=spec.model,
                body_field=spec.body_field,
            )
        except PermanentFailure as exc:
            return describe(exc)
        with database_errors("taking a savepoint"):
            savepoint = session.begin_nested()
        try:
            async with self.resolver.arguments(spec.plan, msg, {Session: session}) as kwargs:
                spec.func(**kwargs)
            with database_errors("flushing a message's writes"):
                session.flush()
                savepoint.commit()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            if conn.invalidated or conn.closed:
                raise DatabaseUnavailable(f"connection lost handling {entry.id}: {exc}") from exc
            with database_errors("rolling back to a savepoint"):
                if savepoint.is_active:
                    savepoint.rollback()
            return describe(exc)
        return None

    def _dead_letter(self, stream: str, entry: _Entry, error: str) -> str:
        spec = self.spec
        record = f"{spec.dead_letter_stream}:spark:{spec.group}"
        args: list[str | bytes | int] = [
            stream,
            entry.id,
            spec.group,
            self.config.consumer,
            error,
            spec.name,
            int(time.time() * 1000),
            _DLQ_RECORD_TTL_MS,
        ]
        for name, value in entry.fields.items():
            args.extend((name, value))
        result = _DEAD_LETTER(self.redis, [spec.dead_letter_stream, record], args)
        return as_text(result)


def _entries(rows: Iterable[Any]) -> Iterator[_Entry]:
    for row in rows:
        fields = row["fields"] or {}
        yield _Entry(
            row["stream"],
            row["id"],
            {
                (k.encode() if isinstance(k, str) else bytes(k)): (
                    v.encode() if isinstance(v, str) else bytes(v)
                )
                for k, v in fields.items()
            },
        )


def process_partition(config: BackfillConfig, rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Handle one partition's entries (in chunks, each one transaction); yield their outcomes."""
    runner = _Runner(config)

    async def run() -> list[tuple[Any, ...]]:
        await runner.resolver.start([runner.spec.plan])
        out: list[tuple[Any, ...]] = []
        try:
            pending: dict[str, list[_Entry]] = {}
            for entry in _entries(rows):
                bucket = pending.setdefault(entry.stream, [])
                bucket.append(entry)
                if len(bucket) >= config.chunk_size:
                    out.extend(await runner.chunk(entry.stream, _ordered(bucket)))
                    pending[entry.stream] = []
            for stream, bucket in pending.items():
                if bucket:
                    out.extend(await runner.chunk(stream, _ordered(bucket)))
        finally:
            await runner.resolver.close()
        return out

    try:
        yield from asyncio.run(run())
    finally:
        runner.close()


def _ordered(entries: list[_Entry]) -> list[_Entry]:
    unique = {e.id: e for e in entries}  # the same entry twice in the input is handled once
    return sorted(unique.values(), key=lambda e: StreamId.parse(e.id))


def run_handler(
    df: DataFrame,
    target: str,
    *,
    db_url: str,
    redis_url: str,
    handler: str | None = None,
    consumer: str = "spark-backfill",
    dead_letter: bool = False,
    chunk_size: int = 500,
    sqlite_busy_timeout_ms: int = 60_000,
    skip_delivered: bool = True,
) -> DataFrame:
    """Run the handler of App ``target`` (``"module:app"``) over ``df`` (columns ``stream``,
    ``id``, ``fields`` as read by ``streamworker_redis``); return one outcome row per entry
    (:data:`OUTCOME_SCHEMA`), materialised. See the module docstring for the guarantees.

    ``db_url``: the handler's database (with the processed-messages table: run ``streamworker
    migrate``); ``redis_url``: the stream's server (group state, dead letters). Use
    ``spark.task.maxFailures`` > 1 so a lost task is retried. ``chunk_size``: entries per
    transaction. ``skip_delivered``: see the module docstring. ``dead_letter``: send failed
    entries to the handler's dead-letter stream (once per entry and group).
    """
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    config = BackfillConfig(
        target=target,
        handler=handler,
        db_url=db_url,
        redis_url=redis_url,
        # Unique per run: a retried task recognises the rows its failed attempt committed.
        consumer=f"{consumer}:{uuid.uuid4().hex[:12]}",
        dead_letter=dead_letter,
        chunk_size=chunk_size,
        sqlite_busy_timeout_ms=sqlite_busy_timeout_ms,
        skip_delivered=skip_delivered,
    )
    # Fail on the driver, before any task starts, when the target or the database is wrong.
    spec = find_handler(load_app(target), handler)
    db = SqlDatabase(db_url)
    try:
        if not db.has_schema():
            raise ConfigError(
                f"table {TABLE_NAME!r} is missing in {db.redacted_url}; "
                f"run `streamworker migrate --db-url URL` first"
            )
    finally:
        db.sync_engine.dispose()
    missing = {"stream", "id", "fields"} - set(df.columns)
    if missing:
        raise ConfigError(f"the DataFrame lacks column(s) {', '.join(sorted(missing))}")
    del spec

    def work(rows: Iterable[Any]) -> Iterable[tuple[Any, ...]]:
        return process_partition(config, rows)

    outcomes = df.select("stream", "id", "fields").rdd.mapPartitions(work)
    result = df.sparkSession.createDataFrame(outcomes, OUTCOME_SCHEMA)
    return result.localCheckpoint(eager=True)
