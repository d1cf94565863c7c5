"""The transactional outbox: exactly-once consume-transform-produce for ``idempotency="sql"``.

A SQL handler cannot XADD to Redis inside its database transaction: the XADD would happen even
when the transaction rolls back, or be lost when the process dies after the commit. Instead it
*stages* the entry as a row of :data:`outbox` through the session it was given::

    from streamworker.idempotency.sql.outbox import publish

    @app.handler("orders", group="billing", idempotency="sql")
    def bill(msg: Message[Order], session: Session) -> None:
        session.add(Charge(order_id=msg.body.order_id, cents=msg.body.cents))
        publish(session, "payments", Payment(order_id=msg.body.order_id, cents=msg.body.cents))

The row commits in the same transaction as the handler's rows and the message's processed row, so
it exists exactly when those writes do (once). :class:`Relay` (``streamworker relay``) then moves
rows to their streams. Each row is added to its stream exactly once:

* In one database transaction the relay locks the oldest rows (``SELECT … ORDER BY id FOR UPDATE``;
  SQLite's ``BEGIN IMMEDIATE``), adds each under the row's publish key
  (a marker in the stream's hash tag records that the key was added; ``relay_outbox.lua``, one
  call per target stream carrying its rows in order), deletes the rows and commits; then it
  deletes the markers of generated keys.
* Dying after an XADD and before the commit leaves the rows (the transaction rolls back) and the
  markers: the next relay finds the markers and adds nothing again. Dying after the commit leaves
  markers only, which expire after ``window_ms``. So a row is added twice only if a relay dies
  between its XADD and its commit and no relay runs again within ``window_ms`` (default 24 h).
* With ``wait_replicas=N`` the pipeline ends with a WAIT, and the rows are deleted only once N
  replicas acknowledged their adds: a failover that takes an add back cannot also have taken its
  row away. Too few within ``wait_timeout_ms`` raise ReplicaWaitTimeout; the rows stay, and the
  next round's adds find their markers (which it re-sets, so that its WAIT covers them).
* Order: rows are added in id order, one relay at a time (the lock), in one pipeline per batch.
  Rows written by one transaction, or by transactions that commit one after another (one consume
  loop: one stream, one partition), reach each target stream in the order they were staged.

Retention: relayed rows are deleted in the transaction that relays them; markers of generated
keys are deleted after it commits (those of your own ``idempotency_key`` expire after the window,
so they keep deduplicating a business key for that long).

The table: ``streamworker migrate`` creates it (Alembic revision ``sw0002``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.exceptions as rex
import sqlalchemy as sa
import structlog
from pydantic import BaseModel
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session, registry

from streamworker.errors import ConfigError, ConnectionLost, DatabaseUnavailable
from streamworker.idempotency.sql import SqlDatabase, database_errors
from streamworker.idempotency.sql.schema import OUTBOX_TABLE, outbox
from streamworker.io.keys import published_marker_key
from streamworker.io.redisio import CONNECTION_ERRORS
from streamworker.io.redisio import LuaScript as _LuaScript
from streamworker.io.replicawait import (
    DEFAULT_WAIT_TIMEOUT_MS,
    ReplicaWait,
    Stopwatch,
    WaitObserver,
)
from streamworker.producing.producer import (
    DEFAULT_IDEMPOTENCY_WINDOW_MS,
    PublishError,
    StreamOptions,
    StreamsConfig,
    Xadd,
    plan_publish,
)

_GENERATED = "outbox:"  # prefix of the publish keys the outbox generates (deleted once relayed)


class OutboxRow:
    """An outbox row as an ORM object, so that ``session.add`` stages it on ``Session`` and
    ``AsyncSession`` alike (it is flushed with the handler's own writes)."""

    id: int
    stream: str
    publish_key: str
    fields: str
    trim: str
    threshold: str
    approximate: bool

    def __init__(self, **values: Any) -> None:
        for name, value in values.items():
            setattr(self, name, value)


_registry = registry()
_registry.map_imperatively(OutboxRow, outbox)


def publish(
    session: Session | AsyncSession,
    stream: str,
    value: BaseModel | Mapping[str, Any],
    *,
    maxlen: int | None = None,
    minid: str | None = None,
    approximate: bool | None = None,
    partition_key: str | bytes | None = None,
    idempotency_key: str | None = None,
    body_field: str | None = None,
    partitions: int | None = None,
    streams: StreamsConfig | None = None,
) -> None:
    """Stage ``value`` for ``stream`` in ``session``'s transaction (see the module docstring).

    Encodes as :meth:`streamworker.producing.producer.Producer.publish` does (a model as the consumer's
    ``Message[Model]`` decodes it; ``body_field``; trimming). ``partitions=N`` (or ``streams``,
    the per-stream defaults a Producer takes) routes a partitioned stream by ``partition_key``
    now, so the row names its partition's stream. ``idempotency_key`` replaces the generated
    publish key: the entry is then also deduplicated against other publishes of that key within
    the relay's window. Explicit ids are not available here (the relay generates them).

    Synchronous for both session kinds: the row is flushed with the handler's writes and commits
    with them. Raises ConfigError/EncodeError for bad arguments (a permanent failure of the
    message, as the same input fails on every delivery).
    """
    if not isinstance(session, Session | AsyncSession):
        raise ConfigError(
            f"publish() takes the handler's Session or AsyncSession, not {type(session).__name__}"
        )
    if streams is not None and partitions is not None:
        raise ConfigError("pass partitions= or streams=, not both")
    if streams is None:
        options = StreamOptions(partitions=partitions)
    elif callable(streams):
        options = streams(stream)
    else:
        options = streams.get(stream, StreamOptions())
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > 255
    ):
        raise ConfigError(
            f"idempotency_key must be a non-empty str of at most 255 characters, not "
            f"{idempotency_key!r}"
        )
    xadd = plan_publish(
        stream,
        value,
        options,
        maxlen=maxlen,
        minid=minid,
        approximate=approximate,
        partition_key=partition_key,
        body_field=body_field,
    )
    key = idempotency_key if idempotency_key is not None else _GENERATED + uuid.uuid4().hex
    session.add(
        OutboxRow(
            stream=xadd.stream,
            publish_key=key,
            fields=json.dumps(xadd.fields, separators=(",", ":"), ensure_ascii=False),
            trim=xadd.trim,
            threshold=xadd.threshold,
            approximate=xadd.approximate,
        )
    )


@dataclass(frozen=True, slots=True)
class RelayedBatch:
    """What one :meth:`Relay.relay_once` did: rows relayed, and how many of them had been added
    already (a relay died after adding them, before deleting their rows)."""

    rows: int
    duplicates: int


_RELAY = _LuaScript("relay_outbox")


def _row_xadd(row: Any, window_ms: int) -> Xadd:
    return Xadd(
        stream=row.stream,
        fields=json.loads(row.fields),
        id="*",
        trim=row.trim,
        approximate=bool(row.approximate),
        threshold=row.threshold,
        marker=published_marker_key(row.stream, row.publish_key),
        window_ms=window_ms,
    )


class Relay:
    """Moves outbox rows to their streams, each exactly once (see the module docstring).

    Args:
        db: the database holding the outbox (``streamworker migrate`` run).
        client: a sync redis-py client (``open_sync_redis``; cluster clients work: each row's
            script touches one slot).
        batch_size: rows per transaction (and per pipeline).
        window_ms: how long a marker outlives a relay that died before its commit.
        lock_timeout_ms: PostgreSQL: how long a relay waits for another one's row lock before
            it gives up this round (DatabaseUnavailable; :meth:`run` tries again later).
        stalled_timeout_ms: PostgreSQL: a relay's transaction that stays idle this long (its
            process stopped, or hung on Redis) is ended by the server, which frees its rows for
            the other relays; its markers make their adds no duplicates. Keep it above the
            Redis client's socket timeout.
        wait_replicas: delete rows only once this many replicas acknowledged their adds (0:
            do not wait).
        wait_timeout_ms: how long a round waits for them before it raises ReplicaWaitTimeout.
        wait_observer: told how long each wait took (``Metrics.observe_replica_wait``).

    Several relays may run on one database: they take turns (the row lock). Blocking; run it in
    its own thread or process (``streamworker relay``).
    """

    def __init__(
        self,
        db: SqlDatabase,
        client: redis.Redis,
        *,
        batch_size: int = 100,
        window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS,
        lock_timeout_ms: int = 10_000,
        stalled_timeout_ms: int = 60_000,
        wait_replicas: int = 0,
        wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
        wait_observer: WaitObserver | None = None,
    ) -> None:
        for label, value in (
            ("batch_size", batch_size),
            ("window_ms", window_ms),
            ("lock_timeout_ms", lock_timeout_ms),
            ("stalled_timeout_ms", stalled_timeout_ms),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{label} must be an integer >= 1, not {value!r}")
        self.lock_timeout_ms = lock_timeout_ms
        self.stalled_timeout_ms = stalled_timeout_ms
        self.db = db
        self.client = client
        self.batch_size = batch_size
        self.window_ms = window_ms
        self.wait = ReplicaWait(wait_replicas, wait_timeout_ms)
        self.wait_observer = wait_observer
        self._log = structlog.get_logger("streamworker.relay")

    # Each step is a method so that crash tests can stop the process between them.
    def _lock_rows(self, conn: Connection) -> list[Any]:
        c = outbox.c
        stmt = (
            sa.select(c.id, c.stream, c.publish_key, c.fields, c.trim, c.threshold, c.approximate)
            .order_by(c.id)
            .limit(self.batch_size)
            .with_for_update()
        )
        return list(conn.execute(stmt))

    def _add(self, xadds: Sequence[Xadd]) -> list[bool]:
        """Add every entry: one ``relay_outbox.lua`` call per target stream carrying its rows in
        order, the calls pipelined. True for each entry added now, False for one whose marker
        said it had been added. With a replica wait, the pipeline ends with it (on the adds'
        connection) and ReplicaWaitTimeout is raised when too few replicas acknowledged."""
        groups: dict[str, list[int]] = {}
        for i, x in enumerate(xadds):
            groups.setdefault(x.stream, []).append(i)
        calls = [self._call(xadds, rows) for rows in groups.values()]
        stopwatch = Stopwatch(self.wait_observer, "relay")
        try:
            self.client.script_load(_RELAY.source)
            pipe = self.client.pipeline(transaction=False)
            for call in calls:
                pipe.execute_command("EVALSHA", _RELAY.sha, *call)  # type: ignore[no-untyped-call]
            if self.wait.active:
                pipe.execute_command(*self.wait.command())  # type: ignore[no-untyped-call]
            replies = pipe.execute(raise_on_error=False)
        except CONNECTION_ERRORS as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        if self.wait.active:
            self._check_wait(replies.pop(), len(xadds), stopwatch)
        added = [False] * len(xadds)
        for rows, call, reply in zip(groups.values(), calls, replies, strict=True):
            if isinstance(reply, rex.NoScriptError):
                # A node that lost its script cache ran none of this stream's rows: resend them
                # together, so their order holds.
                reply = self._resend(call)
            if isinstance(reply, Exception):
                raise PublishError(f"relaying to {xadds[rows[0]].stream!r}: {reply}")
            for i, (flag, _entry_id) in zip(rows, reply, strict=True):
                added[i] = bool(int(flag))
        return added

    @staticmethod
    def _call(xadds: Sequence[Xadd], rows: Sequence[int]) -> list[str | int]:
        """numkeys, KEYS and ARGV of one relay_outbox.lua call for ``rows`` (one stream)."""
        markers = [xadds[i].marker or "" for i in rows]
        args: list[str | int] = [xadds[rows[0]].window_ms]
        for i in rows:
            x = xadds[i]
            args += [x.trim, "~" if x.approximate else "=", x.threshold, len(x.fields)]
            for name, value in x.fields.items():
                args += [name, value]
        return [1 + len(markers), xadds[rows[0]].stream, *markers, *args]

    def _resend(self, call: Sequence[str | int]) -> Any:
        try:
            self.client.script_load(_RELAY.source)
            if not self.wait.active:
                return self.client.execute_command("EVALSHA", _RELAY.sha, *call)  # type: ignore[no-untyped-call]
            # Its own WAIT, on the connection of this add.
            stopwatch = Stopwatch(self.wait_observer, "relay")
            pipe = self.client.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", _RELAY.sha, *call)  # type: ignore[no-untyped-call]
            pipe.execute_command(*self.wait.command())  # type: ignore[no-untyped-call]
            reply, waited = pipe.execute(raise_on_error=False)
        except rex.ResponseError as exc:
            return exc
        except CONNECTION_ERRORS as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        self._check_wait(waited, int(call[0]) - 1, stopwatch)
        return reply

    def _check_wait(self, reply: Any, rows: int, stopwatch: Stopwatch) -> None:
        self.wait.check(
            reply,
            f"relay of {rows} outbox row(s)",
            retry_safe=True,
            retry="the rows stay in the outbox, and relaying them again adds nothing twice "
            "(their markers) and waits again",
            stopwatch=stopwatch,
        )

    def _delete(self, conn: Connection, ids: Sequence[int]) -> None:
        conn.execute(sa.delete(outbox).where(outbox.c.id.in_(ids)))

    def _commit(self, conn: Connection) -> None:
        conn.commit()

    def _forget(self, markers: Sequence[str]) -> None:
        if not markers:
            return
        # One DEL per key: on a cluster the markers of a batch span slots.
        pipe = self.client.pipeline(transaction=False)
        for marker in markers:
            pipe.delete(marker)
        try:
            pipe.execute()
        except CONNECTION_ERRORS:
            pass  # they expire after the window anyway

    def relay_once(self) -> RelayedBatch:
        """Relay the oldest ``batch_size`` rows. Raises DatabaseUnavailable, ConnectionLost or
        PublishError (a row Redis refuses, e.g. its stream key holds another type: it blocks
        the relay until fixed); the rows then stay, and markers make the retry add nothing twice.
        """
        with database_errors("relaying the outbox"), self.db.sync_engine.connect() as conn:
            conn.begin()
            if conn.dialect.name == "postgresql":
                # Every wait bounded: another relay's lock, and a relay of ours that stalls
                # inside its transaction (the server ends it and frees its rows).
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {int(self.lock_timeout_ms)}")
                conn.exec_driver_sql(
                    "SET LOCAL idle_in_transaction_session_timeout = "
                    f"{int(self.stalled_timeout_ms)}"
                )
            rows = self._lock_rows(conn)
            if not rows:
                conn.rollback()
                return RelayedBatch(0, 0)
            xadds = [_row_xadd(row, self.window_ms) for row in rows]
            added = self._add(xadds)
            self._delete(conn, [row.id for row in rows])
            self._commit(conn)
        markers = [
            x.marker
            for x, row in zip(xadds, rows, strict=True)
            if x.marker is not None and row.publish_key.startswith(_GENERATED)
        ]
        self._forget(markers)
        duplicates = added.count(False)
        self._log.info("outbox_relayed", rows=len(rows), duplicates=duplicates)
        return RelayedBatch(len(rows), duplicates)

    def run(
        self,
        stop: threading.Event,
        *,
        idle_ms: int = 200,
        retry_ms: int = 1_000,
    ) -> int:
        """Relay until ``stop`` is set: batch after batch while rows remain, then poll every
        ``idle_ms``; after an outage wait ``retry_ms`` and try again. Returns rows relayed."""
        total = 0
        self._log.info("outbox_relay_started", batch_size=self.batch_size, window_ms=self.window_ms)
        while not stop.is_set():
            try:
                batch = self.relay_once()
            except (DatabaseUnavailable, ConnectionLost, PublishError) as exc:
                self._log.warning("outbox_relay_failed", error=str(exc))
                stop.wait(retry_ms / 1000)
                continue
            total += batch.rows
            if batch.rows < self.batch_size:
                stop.wait(idle_ms / 1000)
        return total


def check_outbox(db: SqlDatabase) -> None:
    """What the relay checks before it starts: the database is reachable and migrated, outbox
    table included. ConfigError (run ``streamworker migrate``) or DatabaseUnavailable. Blocking."""
    db.check_ready()
    with database_errors("checking the schema"), db.sync_engine.connect() as conn:
        present = sa.inspect(conn).has_table(OUTBOX_TABLE)
    if not present:
        shown = db.redacted_url
        raise ConfigError(
            f"table {OUTBOX_TABLE!r} is missing in {shown}; run `streamworker migrate --db-url "
            f"URL` (revision sw0002 adds it)"
        )


def pending_rows(db: SqlDatabase) -> int:
    """How many rows wait in the outbox. Blocking."""
    with database_errors("counting the outbox"), db.sync_engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar_one())
