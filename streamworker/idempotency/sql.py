"""``idempotency="sql"``: the handler's database writes and the message's processed row commit in
one transaction; the XACK follows the commit. A redelivered message whose row exists is acked
without running the handler, so its writes commit exactly once.

The guarantee, precisely: for a message M of stream S read by group G, the writes a handler makes
through the ``Session``/``AsyncSession`` it is given commit at most once, in the same transaction as
the row (G, S, M) of :data:`processed_messages`; M is acked only after that commit (or after finding
the row already there). Anything else the handler does (HTTP calls, e-mails, writes through another
connection) is at-least-once.

How one batch goes (:class:`SqlStrategy`)
-----------------------------------------

1. ``BEGIN``; claim the batch's rows with one ``INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING
   RETURNING message_id``. A message whose row was not inserted is a duplicate: it is acked without
   running its handler.
2. Check in Redis (one XPENDING) that this consumer still owns the claimed messages (see
   *Retention* for why); a message claimed away by another consumer is un-claimed and left alone.
3. Run the handlers one after another with a session bound to this transaction, then flush,
   ``COMMIT`` and one ``XACK`` for the successes and the duplicates. ``def`` handlers whose
   arguments need nothing awaited per message (no message-scoped ``Depends``) run in one worker
   thread hop for the whole batch, not one hop each
   (:func:`~streamworker.idempotency.base.inline_of`).

That is three database round trips per batch (claim, flush, commit) plus one fsync, whatever the
batch size, when handlers write through the ORM (``session.add``: the flush sends the batch's
inserts together). The article's per-message transaction pays round trips *and* an fsync per
message.

Failures: the fast path takes no savepoints. When a handler fails (or its flush, or the commit),
the transaction is rolled back and the batch is redone once with a ``SAVEPOINT`` per message: the
failed message is not claimed again (its outcome is known), every other message runs in its own
savepoint, and a message that fails now is rolled back to its savepoint and its row deleted, while
the rest of the batch commits. The trade-off: a batch with a failure costs its handlers twice (the
first run's writes were rolled back, so nothing commits twice; non-database side effects of the
handlers before the failed one do happen twice), and 2-3 extra round trips per message in the redo;
a batch without failures pays nothing for the possibility. Savepoints on every message would
cost those round trips always (and, past 64 per transaction, PostgreSQL's subtransaction cache).

Messages whose outcome is DEAD_LETTER are failures here too: their writes are undone and their row
is not kept; the consume loop then dead-letters them (its script XACKs them).

Why insert first, not ``SELECT … FOR UPDATE``
---------------------------------------------

The article checks the row with ``SELECT … FOR UPDATE`` and inserts it after the business writes.
``FOR UPDATE`` locks rows that exist; a row that does not exist yet locks nothing (PostgreSQL takes
no predicate or gap lock in READ COMMITTED). Two holders of the same message (an XCLAIM race) both
see "no row", both run the handler, and one of them fails only at its final INSERT on the primary
key, or, without a key, both commit the effects. Inserting the row first makes the primary key the
lock: the second inserter blocks on the first one's uncommitted row until it commits (conflict: a
duplicate, skip) or rolls back (insert succeeds: process). On SQLite the transaction starts with
``BEGIN IMMEDIATE``, which serialises writers for the whole transaction. Claiming all rows of a
batch in one statement, in id order, also gives concurrent claimers the same lock order.

Database outages
----------------

A connection refused, dropped mid-transaction, or a transaction the database would not take (lock
timeout, deadlock) raises :class:`~streamworker.errors.DatabaseUnavailable` before anything was
acked; the consume loop retries the same batch after a capped backoff. A commit whose outcome is
unknown (connection lost during COMMIT) is retried the same way: if it had committed, the retry
finds the rows and only acks. A database that stops answering without closing the connection is
bounded by the batch deadline (:mod:`streamworker.idempotency.deadline`): the connection is aborted
and thrown away, and :class:`~streamworker.errors.DatabaseTimeout` retries the batch likewise.

Retention
---------

A row is needed while its message can still be delivered to the group, i.e. while it is in the
group's PEL: an acked entry never comes back (XCLAIM and XAUTOCLAIM move only pending entries), and
an entry not delivered yet has no row. So, from the group's state:

* PEL not empty, oldest pending id P: delete rows with ``message_id < P``;
* PEL empty, last-delivered id L: delete rows with ``message_id <= L``.

(``message_id`` is stored zero-padded, :func:`sortable_id`, so that it sorts as stream ids do.)
Rows above the cut whose messages were acked stay until the oldest pending entry moves on; the exact
rule (every acked id) would need a scan of the whole PEL each time. One entry that stays pending
(failing until ``max_deliveries``) holds the cut back for that long.

Races, and why the rule holds anyway:

* The group's state is read in two commands. L is read *before* the PEL: every id up to L was
  delivered by then, so if the PEL is empty afterwards they were all acked. Read the other way
  round, entries delivered between the two reads (pending, possibly committed but not acked) would
  fall under L.
* Entries acked after the reads are simply pruned next time; entries delivered after them are above
  both cuts (delivery follows id order).
* A consumer can still *hold* a message that another consumer claimed away and acked (it stalled
  past ``claim_idle_ms``); the row may then be pruned while the stale holder is about to claim it.
  That is why step 2 checks ownership *after* the claim INSERT: if the message is still pending and
  ours at that moment, it was never acked, so its row (if any) was never pruned, and any other
  holder that claims it later blocks on our uncommitted row. If it is not ours any more, we skip it.
* ``XGROUP SETID`` to an earlier id re-delivers acked entries on purpose; those whose rows were
  pruned are processed again.

Thread and task safety: one :class:`SqlStrategy` serves one subscription; ``process`` is called by
one consume loop at a time. :class:`SqlDatabase` engines are shared by the whole worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import redis.asyncio as aioredis
import sqlalchemy as sa
import structlog
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    AsyncSessionTransaction,
    create_async_engine,
)
from sqlalchemy.orm import Session, SessionTransaction

from streamworker.errors import ConfigError, DatabaseTimeout, DatabaseUnavailable, StreamworkerError
from streamworker.idempotency.base import InlineInvoke, Invoke, inline_of
from streamworker.idempotency.deadline import (
    DEFAULT_DB_DEADLINE_S,
    DeadlineState,
    abort_driver_connection,
    bounded,
    connect_args,
)
from streamworker.message import Message
from streamworker.outcomes import (
    CLAIMED_AWAY,
    DUPLICATE,
    NOT_STARTED,
    Action,
    Outcome,
    decide,
    describe,
)
from streamworker.redisio import connection_errors, redact_url

T = TypeVar("T")

TABLE_NAME = "streamworker_processed_messages"
"""The processed-messages table."""

VERSION_TABLE = "streamworker_alembic_version"
"""Alembic's version table for streamworker's own migrations (kept apart from an application's
``alembic_version``)."""

TABLE_NAMES = frozenset({TABLE_NAME, VERSION_TABLE, "streamworker_outbox"})
"""Every table streamworker creates; filter them out of your own Alembic autogenerate."""

metadata = sa.MetaData()
"""The MetaData holding :data:`processed_messages`; include it in your own Alembic
``target_metadata`` if your migrations, not ``streamworker migrate``, should own the table."""

processed_messages = sa.Table(
    TABLE_NAME,
    metadata,
    sa.Column("group_name", sa.String(255), nullable=False),
    sa.Column("stream", sa.String(512), nullable=False),
    # sortable_id(): "<ms>-<seq>", both zero-padded to 20 digits, so ids compare as strings.
    sa.Column("message_id", sa.String(41), nullable=False),
    sa.Column("consumer", sa.String(255), nullable=False),
    sa.Column(
        "processed_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.func.current_timestamp(),
    ),
    # The claim's ON CONFLICT target, and the index that pruning's range delete walks.
    sa.PrimaryKeyConstraint(
        "group_name", "stream", "message_id", name="pk_streamworker_processed_messages"
    ),
    sqlite_with_rowid=False,
)
"""One row per (group, stream, message) whose effects committed."""

_ID_WIDTH = 20  # digits of 2**64 - 1, the largest ms or seq part of a stream id


def sortable_id(entry_id: str) -> str:
    """``"1700000000000-3"`` -> ``"00000001700000000000-00000000000000000003"``: stored form whose
    string order is the stream's id order. Raises ValueError for anything that is not an id."""
    ms, sep, seq = entry_id.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        raise ValueError(f"not a stream entry id: {entry_id!r}")
    return f"{int(ms):0{_ID_WIDTH}d}-{int(seq):0{_ID_WIDTH}d}"


def stream_id(stored: str) -> str:
    """The inverse of :func:`sortable_id`."""
    ms, _, seq = stored.partition("-")
    return f"{int(ms)}-{int(seq)}"


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """Rows of one (group, stream) with ``message_id`` below ``bound`` (or equal, when
    ``inclusive``) can never be needed again."""

    bound: str  # a sortable_id
    inclusive: bool

    def __str__(self) -> str:
        return f"{'<=' if self.inclusive else '<'} {stream_id(self.bound)}"


def retention_cut(last_delivered_id: str, oldest_pending_id: str | None) -> RetentionCut | None:
    """The tightest safe pruning rule from a group's state (see the module docstring).

    ``last_delivered_id`` must have been read *before* the PEL that gave ``oldest_pending_id``
    (None when the PEL was empty). Returns None when nothing can be pruned (nothing delivered yet).
    """
    if oldest_pending_id is not None:
        return RetentionCut(sortable_id(oldest_pending_id), inclusive=False)
    if last_delivered_id in ("0", "0-0"):
        return None
    return RetentionCut(sortable_id(last_delivered_id), inclusive=True)


# --------------------------------------------------------------------------------------------
# Engines


_SQLITE_DRIVERS = {None, "pysqlite", "aiosqlite"}
# PostgreSQL drivers a URL may name (None: the bare postgresql://). psycopg2 serves def handlers
# (it reports transaction status as psycopg 3 does); async def handlers always get psycopg 3.
_PG_DRIVERS = {None, "psycopg", "psycopg2"}
_PG_SYNC_KEEP = {"psycopg2"}


def _sync_url(url: URL) -> URL:
    if url.get_backend_name() == "sqlite":
        return url.set(drivername="sqlite")
    driver = url.get_driver_name() if "+" in url.drivername else None
    return url.set(drivername=f"postgresql+{driver if driver in _PG_SYNC_KEEP else 'psycopg'}")


def _async_url(url: URL) -> URL:
    if url.get_backend_name() == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    return url.set(drivername="postgresql+psycopg")


def parse_db_url(db_url: str) -> URL:
    """Check that ``db_url`` names a database the SQL strategy supports; ConfigError otherwise."""
    try:
        url = make_url(db_url)
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise ConfigError(f"invalid database URL {_redact(db_url)!r}: {exc}") from None
    backend = url.get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        raise ConfigError(
            f"database URL {_redact(db_url)!r}: idempotency='sql' supports postgresql:// and "
            f"sqlite:/// databases, not {backend!r}"
        )
    driver = url.get_driver_name() if "+" in url.drivername else None
    if backend == "postgresql" and driver not in _PG_DRIVERS:
        # Telling a statement that failed inside a handler (and was caught there) from a clean
        # transaction needs the driver's transaction status: psycopg's, which the other drivers
        # do not expose. Without it, such a COMMIT is a silent ROLLBACK we would ack.
        raise ConfigError(
            f"database URL {_redact(db_url)!r}: the {driver} driver is not supported by "
            f"idempotency='sql'; use postgresql:// or postgresql+psycopg:// (psycopg 3, for def "
            f"and async def handlers alike)"
        )
    if backend == "sqlite" and driver not in (None, "pysqlite", "aiosqlite"):
        raise ConfigError(
            f"database URL {_redact(db_url)!r}: the {driver} driver is not supported; use "
            f"sqlite:///path"
        )
    if backend == "sqlite" and url.database in (None, "", ":memory:"):
        raise ConfigError(
            "an in-memory SQLite database is private to one connection; use a file: sqlite:///path"
        )
    return url


def _redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not even a URL SQLAlchemy can parse: never print it as it is
        return redact_url(url)


def _sqlite_setup(engine: Engine, busy_timeout_ms: int) -> None:
    # pysqlite's own transaction handling issues BEGIN lazily and commits around some statements,
    # which breaks SAVEPOINT; take it over. BEGIN IMMEDIATE takes the write lock at the start, so
    # two workers' transactions serialise instead of failing to upgrade a read lock later.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            # WAL with synchronous=NORMAL may lose the last commits on power loss; we ack after
            # commit, so a commit must be durable when it returns.
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


class SqlDatabase:
    """The worker's engines for one database URL: a sync engine (``def`` handlers, pruning,
    migrations) and an async one (``async def`` handlers), each created on first use.

    SQLite databases are opened in WAL mode with ``synchronous=FULL`` and transactions start with
    ``BEGIN IMMEDIATE``. Engines are thread-safe; call :meth:`dispose` once at the end.

    ``deadline_s`` bounds every wait on the database (see
    :mod:`streamworker.idempotency.deadline`): connections get a connect timeout and keepalives,
    a batch of :class:`SqlStrategy` must finish within it, and :meth:`ping` fails while batches
    pass it. SQLite's busy timeout is kept below it.
    """

    def __init__(
        self,
        db_url: str,
        *,
        sqlite_busy_timeout_ms: int = 5_000,
        deadline_s: float = DEFAULT_DB_DEADLINE_S,
    ) -> None:
        if deadline_s <= 0:
            raise ConfigError(f"db_deadline_s must be positive, not {deadline_s!r}")
        self.url = parse_db_url(db_url)
        self.dialect = self.url.get_backend_name()
        self._busy_timeout_ms = min(sqlite_busy_timeout_ms, int(deadline_s * 1000))
        self.deadline = DeadlineState(deadline_s)
        self._sync: Engine | None = None
        self._async: AsyncEngine | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SqlDatabase({self.url.render_as_string(hide_password=True)!r})"

    @property
    def sync_engine(self) -> Engine:
        """The sync engine (psycopg 3 or pysqlite)."""
        with self._lock:
            if self._sync is None:
                url = _sync_url(self.url)
                engine = sa.create_engine(url, connect_args=self._connect_args(url))
                if self.dialect == "sqlite":
                    _sqlite_setup(engine, self._busy_timeout_ms)
                self._sync = engine
            return self._sync

    @property
    def async_engine(self) -> AsyncEngine:
        """The async engine (psycopg 3 or aiosqlite)."""
        with self._lock:
            if self._async is None:
                url = _async_url(self.url)
                engine = create_async_engine(url, connect_args=self._connect_args(url))
                if self.dialect == "sqlite":
                    _sqlite_setup(engine.sync_engine, self._busy_timeout_ms)
                self._async = engine
            return self._async

    def _connect_args(self, url: URL) -> dict[str, Any]:
        return connect_args(url.get_driver_name(), self.deadline.deadline_s)

    def has_schema(self) -> bool:
        """True when the processed-messages table exists (``streamworker migrate`` was run).

        Raises DatabaseUnavailable when the database cannot be reached."""
        with (
            _unavailable("checking the schema"),
            self.sync_engine.connect() as conn,
            bounded(conn.connection.driver_connection, self.deadline.deadline_s),
        ):
            return bool(sa.inspect(conn).has_table(TABLE_NAME))

    def check_ready(self) -> None:
        """What a worker (or ``streamworker prune``) checks before it starts. Blocking.

        Raises ConfigError for a SQLite file that does not exist (a mistyped path would otherwise
        be created empty) or a database without the processed-messages table (``streamworker
        migrate`` was not run), DatabaseUnavailable when the database cannot be reached.
        """
        shown = self.url.render_as_string(hide_password=True)
        try:
            schema = self._sqlite_has_schema() if self.dialect == "sqlite" else self.has_schema()
        except DatabaseUnavailable as exc:
            cause = exc.__cause__
            orig = getattr(cause, "orig", None) or cause or exc
            first = (str(orig).strip().splitlines() or [""])[0]
            raise DatabaseUnavailable(
                f"cannot reach the database {shown}: {type(orig).__name__}: {first}"
            ) from exc
        if not schema:
            raise ConfigError(
                f"table {TABLE_NAME!r} is missing in {shown}; run `streamworker migrate "
                f"--db-url URL` first"
            )

    def _sqlite_has_schema(self) -> bool:
        # Read-only and outside the engine: the engine's connections begin with BEGIN IMMEDIATE,
        # and a start-up check must not wait for (or fail on) another worker's write lock.
        shown = self.url.render_as_string(hide_password=True)
        path = Path(self.url.database or "")
        if not path.is_file():
            raise ConfigError(
                f"SQLite database {path} does not exist; check the path in {shown!r}, or "
                f"create it with `streamworker migrate --db-url {shown}`"
            )
        try:
            conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=self._busy_timeout_ms / 1000
            )
            try:
                row = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE_NAME,)
                ).fetchone()
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                raise DatabaseUnavailable(f"{type(exc).__name__}: {exc}") from exc
            raise ConfigError(f"{path} is not a usable SQLite database: {exc}") from None
        return row is not None

    def ping(self) -> None:
        """One ``SELECT 1`` (readiness probes). Blocking; thread-safe.

        Raises DatabaseUnavailable when the database cannot be reached, does not answer within
        the deadline, or while batches pass their deadline (:class:`DeadlineState`)."""
        with (
            _unavailable("pinging"),
            self.sync_engine.connect() as conn,
            bounded(conn.connection.driver_connection, self.deadline.deadline_s),
        ):
            conn.exec_driver_sql("SELECT 1")
        problem = self.deadline.problem()
        if problem is not None:
            raise DatabaseUnavailable(problem)

    async def dispose(self) -> None:
        """Close every pooled connection of both engines."""
        if self._async is not None:
            await self._async.dispose()
        if self._sync is not None:
            self._sync.dispose()


# --------------------------------------------------------------------------------------------
# Errors


# SQLAlchemy wraps driver errors; these mean "the database is (or was) not usable", as opposed to a
# handler's or a statement's own mistake. Lock timeouts, deadlocks and serialization failures are
# OperationalErrors on both drivers too: a retry of the whole batch is the right answer for them.
def _is_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError):
        return bool(exc.connection_invalidated) or isinstance(
            exc, sa_exc.OperationalError | sa_exc.InterfaceError
        )
    return isinstance(exc, sa_exc.TimeoutError | ConnectionError | TimeoutError)


@contextlib.contextmanager
def _unavailable(doing: str) -> Iterator[None]:
    try:
        yield
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        if _is_unavailable(exc):
            raise DatabaseUnavailable(
                f"database unavailable while {doing}: {describe(exc)}"
            ) from exc
        raise


class TransactionOwned(StreamworkerError):
    """A handler called ``commit()`` or ``rollback()`` on the session streamworker gave it.

    The transaction belongs to the batch: streamworker commits it together with the processed rows,
    or undoes a failed handler's writes itself. Raise an exception to fail the message instead.
    """


_OWNED = (
    "the session's transaction belongs to streamworker (idempotency='sql'): it commits after the "
    "batch; raise an exception to fail this message instead of calling {}()"
)


class _BatchSession(Session):
    def commit(self) -> None:
        raise TransactionOwned(_OWNED.format("commit"))

    def rollback(self) -> None:
        raise TransactionOwned(_OWNED.format("rollback"))


class _AsyncBatchSession(AsyncSession):
    sync_session_class = _BatchSession

    async def commit(self) -> None:
        raise TransactionOwned(_OWNED.format("commit"))

    async def rollback(self) -> None:
        raise TransactionOwned(_OWNED.format("rollback"))


# --------------------------------------------------------------------------------------------
# One batch's transaction, sync or async behind one async interface


# The claim, one round trip for the whole batch. PostgreSQL gets the ids as one array parameter
# (a multi-row VALUES of N rows is compiled anew for every batch size and binds 4N parameters,
# several times slower); SQLite gets SQLAlchemy's cached executemany ("insertmanyvalues"), which
# sends one multi-row INSERT as well. Ids go in sorted, so concurrent claimers lock rows in the
# same order.
_PG_CLAIM = sa.text(
    f"INSERT INTO {TABLE_NAME} (group_name, stream, message_id, consumer) "
    "SELECT :group_name, :stream, m, :consumer FROM unnest(CAST(:ids AS VARCHAR[])) AS m "
    "ON CONFLICT (group_name, stream, message_id) DO NOTHING "
    "RETURNING message_id"
)
_SQLITE_CLAIM = (
    sqlite_dialect.insert(processed_messages)
    .on_conflict_do_nothing(
        index_elements=[
            processed_messages.c.group_name,
            processed_messages.c.stream,
            processed_messages.c.message_id,
        ]
    )
    .returning(processed_messages.c.message_id)
)


def _claim_call(
    dialect: str, group: str, stream: str, consumer: str, sids: Sequence[str]
) -> tuple[Any, Any]:
    """The statement and parameters that claim ``sids``; the result's scalars are the new ones."""
    ordered = sorted(sids)
    if dialect == "postgresql":
        params = {"group_name": group, "stream": stream, "consumer": consumer, "ids": ordered}
        return _PG_CLAIM, params
    rows = [
        {"group_name": group, "stream": stream, "message_id": sid, "consumer": consumer}
        for sid in ordered
    ]
    return _SQLITE_CLAIM, rows


def _unclaim_statement(group: str, stream: str, ids: Sequence[str]) -> sa.Delete:
    c = processed_messages.c
    return sa.delete(processed_messages).where(
        c.group_name == group, c.stream == stream, c.message_id.in_(ids)
    )


def _aborted(dialect: str, driver_connection: Any) -> bool:
    """True when the driver's transaction can no longer commit.

    psycopg turns COMMIT of a transaction in error state (a handler swallowed a failed statement)
    into a silent ROLLBACK, which we would otherwise take for a commit and ack. SQLite rolls back
    on its own after some errors (disk full, I/O); then no transaction is open any more.
    """
    if dialect == "postgresql":
        info = getattr(driver_connection, "info", None)
        status = getattr(info, "transaction_status", None)
        return status is not None and int(status) == 3  # psycopg.pq.TransactionStatus.INERROR
    in_tx = getattr(driver_connection, "in_transaction", None)
    return in_tx is False


class _SwallowedError(StreamworkerError):
    pass


_SWALLOWED = (
    "the transaction is in error state: a statement failed and the handler caught the error; "
    "let database errors propagate (or use session.begin_nested() around statements that may fail)"
)


class _Tx(Protocol):
    provided: Mapping[type, Any]

    async def claim(self, sids: Sequence[str], consumer: str) -> set[str]: ...
    async def unclaim(self, ids: Sequence[str]) -> None: ...
    async def savepoint(self) -> None: ...
    async def release(self) -> BaseException | None: ...
    async def rollback_to_savepoint(self) -> None: ...
    async def commit(self) -> BaseException | None: ...
    async def close(self) -> None: ...
    async def aborted(self) -> bool: ...
    def broken(self) -> bool: ...
    def driver_connection(self) -> Any: ...


class _SyncTx:
    """A sync connection + Session; every database call runs in a worker thread (``run``)."""

    def __init__(
        self,
        engine: Engine,
        run: Callable[[Callable[[], Any]], Awaitable[Any]],
        group: str,
        stream: str,
    ) -> None:
        self._engine = engine
        self._run = run
        self._dialect = engine.dialect.name
        self._group = group
        self._stream = stream
        self._conn: Connection | None = None
        self._trans: sa.RootTransaction | None = None
        self._session: _BatchSession | None = None
        self._sp: SessionTransaction | None = None
        self.provided: Mapping[type, Any] = {}

    async def open(self) -> None:
        def _open() -> None:
            with _unavailable("connecting"):
                self._conn = self._engine.connect()
                self._trans = self._conn.begin()
            self._session = _BatchSession(
                bind=self._conn, join_transaction_mode="rollback_only", expire_on_commit=False
            )
            self.provided = {Session: self._session}

        await self._run(_open)

    @property
    def session(self) -> _BatchSession:
        assert self._session is not None
        return self._session

    async def claim(self, sids: Sequence[str], consumer: str) -> set[str]:
        def _claim() -> set[str]:
            stmt, params = _claim_call(self._dialect, self._group, self._stream, consumer, sids)
            with _unavailable("claiming the batch"):
                return set(self.session.connection().execute(stmt, params).scalars())

        result: set[str] = await self._run(_claim)
        return result

    async def unclaim(self, ids: Sequence[str]) -> None:
        def _unclaim() -> None:
            with _unavailable("releasing claims"):
                self.session.execute(_unclaim_statement(self._group, self._stream, ids))

        await self._run(_unclaim)

    async def savepoint(self) -> None:
        def _savepoint() -> None:
            with _unavailable("taking a savepoint"):
                self._sp = self.session.begin_nested()

        await self._run(_savepoint)

    async def release(self) -> BaseException | None:
        def _release() -> BaseException | None:
            assert self._sp is not None
            sp, self._sp = self._sp, None
            assert self._conn is not None
            try:
                with _unavailable("flushing a message's writes"):
                    self.session.flush()
                    # A statement the handler caught left the transaction in error state: roll
                    # back to the savepoint (a failed RELEASE would leave it aborted).
                    if _aborted(self._dialect, self._conn.connection.driver_connection):
                        raise _SwallowedError(_SWALLOWED)
                    sp.commit()
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                with _unavailable("rolling back to a savepoint"):
                    sp.rollback()
                return exc
            return None

        result: BaseException | None = await self._run(_release)
        return result

    async def rollback_to_savepoint(self) -> None:
        def _rollback() -> None:
            assert self._sp is not None
            sp, self._sp = self._sp, None
            with _unavailable("rolling back to a savepoint"):
                if sp.is_active:
                    sp.rollback()

        await self._run(_rollback)

    async def commit(self) -> BaseException | None:
        def _commit() -> BaseException | None:
            assert self._conn is not None
            assert self._trans is not None
            try:
                with _unavailable("flushing the batch"):
                    self.session.flush()
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                return exc
            if _aborted(self._dialect, self._conn.connection.driver_connection):
                return _SwallowedError(_SWALLOWED)
            self.session.close()
            try:
                with _unavailable("committing"):
                    self._trans.commit()
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                return exc
            return None

        result: BaseException | None = await self._run(_commit)
        return result

    def broken(self) -> bool:
        return self._conn is None or self._conn.invalidated or self._conn.closed

    def driver_connection(self) -> Any:
        """The DBAPI connection in use (None before it is open), for the batch deadline."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.connection.driver_connection

    async def run_inline(
        self, inline: InlineInvoke, todo: Sequence[tuple[int, Message[Any]]]
    ) -> dict[int, Outcome]:
        """Run the handlers of ``todo`` (index, message) one after another in one thread hop,
        stopping after the first failure (an outcome that is neither an ack nor preset) or when
        the connection broke: the point where the batch loop would stop invoking too."""

        def _handle() -> dict[int, Outcome]:
            done: dict[int, Outcome] = {}
            for i, msg in todo:
                outcome = done[i] = inline(msg, self.provided)
                # A preset outcome (over-delivered) ran nothing: the batch goes on past it.
                if (not outcome.acked and not outcome.preset) or self.broken():
                    break
            return done

        result: dict[int, Outcome] = await self._run(_handle)
        return result

    async def aborted(self) -> bool:
        # A failed flush inside a handler rolls the whole transaction back (the session's
        # rollback reaches the connection's transaction), which shows as an inactive transaction.
        assert self._conn is not None
        assert self._trans is not None
        if not self._trans.is_active:
            return True
        return _aborted(self._dialect, self._conn.connection.driver_connection)

    async def close(self) -> None:
        def _close() -> None:
            with contextlib.suppress(Exception):
                if self._session is not None:
                    self._session.close()
            with contextlib.suppress(Exception):
                if self._conn is not None:
                    self._conn.close()  # rolls back what was not committed

        if self._conn is not None:
            await self._run(_close)


class _AsyncTx:
    """An AsyncConnection + AsyncSession on the event loop."""

    def __init__(self, engine: AsyncEngine, group: str, stream: str) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        self._group = group
        self._stream = stream
        self._conn: AsyncConnection | None = None
        self._trans: Any = None
        self._session: _AsyncBatchSession | None = None
        self._sp: AsyncSessionTransaction | None = None
        self.provided: Mapping[type, Any] = {}

    async def open(self) -> None:
        with _unavailable("connecting"):
            self._conn = await self._engine.connect()
            self._trans = await self._conn.begin()
        self._session = _AsyncBatchSession(
            bind=self._conn, join_transaction_mode="rollback_only", expire_on_commit=False
        )
        self.provided = {AsyncSession: self._session}

    @property
    def session(self) -> _AsyncBatchSession:
        assert self._session is not None
        return self._session

    async def claim(self, sids: Sequence[str], consumer: str) -> set[str]:
        stmt, params = _claim_call(self._dialect, self._group, self._stream, consumer, sids)
        with _unavailable("claiming the batch"):
            conn = await self.session.connection()
            return set((await conn.execute(stmt, params)).scalars())

    async def unclaim(self, ids: Sequence[str]) -> None:
        with _unavailable("releasing claims"):
            await self.session.execute(_unclaim_statement(self._group, self._stream, ids))

    async def savepoint(self) -> None:
        with _unavailable("taking a savepoint"):
            self._sp = await self.session.begin_nested()

    async def release(self) -> BaseException | None:
        assert self._sp is not None
        sp, self._sp = self._sp, None
        assert self._conn is not None
        try:
            with _unavailable("flushing a message's writes"):
                await self.session.flush()
                raw = await self._conn.get_raw_connection()
                if _aborted(self._dialect, raw.driver_connection):
                    raise _SwallowedError(_SWALLOWED)
                await sp.commit()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            with _unavailable("rolling back to a savepoint"):
                await sp.rollback()
            return exc
        return None

    async def rollback_to_savepoint(self) -> None:
        assert self._sp is not None
        sp, self._sp = self._sp, None
        with _unavailable("rolling back to a savepoint"):
            if sp.is_active:
                await sp.rollback()

    async def commit(self) -> BaseException | None:
        assert self._conn is not None
        assert self._trans is not None
        try:
            with _unavailable("flushing the batch"):
                await self.session.flush()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            return exc
        raw = await self._conn.get_raw_connection()
        if _aborted(self._dialect, raw.driver_connection):
            return _SwallowedError(_SWALLOWED)
        await self.session.close()
        try:
            with _unavailable("committing"):
                await self._trans.commit()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            return exc
        return None

    def broken(self) -> bool:
        return self._conn is None or self._conn.invalidated or self._conn.closed

    def driver_connection(self) -> Any:
        """The driver's connection in use (None before it is open), for the batch deadline."""
        conn = self._conn
        if conn is None or conn.closed:
            return None
        return conn.sync_connection.connection.driver_connection if conn.sync_connection else None

    async def aborted(self) -> bool:
        assert self._conn is not None
        assert self._trans is not None
        if not self._trans.is_active:
            return True
        raw = await self._conn.get_raw_connection()
        return _aborted(self._dialect, raw.driver_connection)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._session is not None:
                await self._session.close()
        with contextlib.suppress(Exception):
            if self._conn is not None:
                await self._conn.close()


# --------------------------------------------------------------------------------------------
# The strategy


LOST_OWNERSHIP = CLAIMED_AWAY
"""A message another consumer took over (XCLAIM) while this one held it: left to that consumer."""


class SqlStrategy:
    """``idempotency="sql"`` for one subscription: see the module docstring for the algorithm.

    Args:
        db: the worker's engines.
        client: the Redis client (XPENDING for the ownership check, XACK).
        stream, group, consumer: the subscription and this consumer's name (stored in each row).
        max_deliveries: to decide on a message whose flush failed after its handler returned.
        is_async: ``async def`` handler (AsyncSession on the event loop) or ``def`` (Session, its
            calls in worker threads through ``run_sync``).
        run_sync: runs a blocking callable off the event loop; the worker passes its handler pool.
        on_timeout: called (on the event loop) when a batch passes ``db.deadline``; the worker
            counts it (``streamworker_database_timeouts_total``).
    """

    name = "sql"

    def __init__(
        self,
        db: SqlDatabase,
        client: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        max_deliveries: int,
        is_async: bool,
        run_sync: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self._on_timeout = on_timeout
        self._tx: _Tx | None = None  # the batch's transaction, for the deadline to abort
        self._client = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self._max_deliveries = max_deliveries
        self._is_async = is_async
        self._run_sync = run_sync or _to_thread
        self._schema_ok = False
        self._log = structlog.get_logger("streamworker.sql").bind(
            stream=stream, group=group, consumer=consumer
        )

    # Kept as methods so that crash tests can stop the process at these exact points.
    async def _commit(self, tx: _Tx) -> BaseException | None:
        return await tx.commit()

    async def _xack(self, ids: Sequence[str]) -> None:
        async with connection_errors():
            await self._client.xack(self.stream, self.group, *ids)

    async def _open(self) -> _Tx:
        if not self._schema_ok:
            if not await self._run_sync(self.db.has_schema):
                raise ConfigError(
                    f"table {TABLE_NAME!r} is missing in {self.db.url.render_as_string()}; "
                    f"run `streamworker migrate --db-url URL` first"
                )
            self._schema_ok = True
        tx: _SyncTx | _AsyncTx
        if self._is_async:
            tx = _AsyncTx(self.db.async_engine, self.group, self.stream)
        else:
            tx = _SyncTx(self.db.sync_engine, self._run_sync, self.group, self.stream)
        self._tx = tx
        await tx.open()
        return tx

    async def _owned(self, ids: set[str], count_hint: int) -> set[str]:
        """Of ``ids`` (sortable), those still pending and owned by this consumer."""
        if not ids:
            return set()
        ordered = sorted(ids)
        low, high = stream_id(ordered[0]), stream_id(ordered[-1])
        count = max(count_hint, len(ids))
        owned: set[str] = set()
        # This consumer's PEL may hold other entries inside the batch's id range (failed ones
        # waiting for a retry, older claims), so one page of len(batch) rows can stop short of
        # the batch's own: page on until every id is found or the range is exhausted.
        while True:
            async with connection_errors():
                rows = await self._client.xpending_range(
                    self.stream,
                    self.group,
                    min=low,
                    max=high,
                    count=count,
                    consumername=self.consumer,
                )
            last = ""
            for row in rows:
                mid = row["message_id"]
                last = mid.decode() if isinstance(mid, bytes) else str(mid)
                owned.add(sortable_id(last))
            if len(rows) < count or ids <= owned:
                return owned & ids
            low = "(" + last

    async def process(
        self, batch: Sequence[Message[Any]], invoke: Invoke, *, fresh: bool = False
    ) -> list[Outcome]:
        """See :class:`~streamworker.idempotency.base.Strategy` (``fresh`` changes nothing here:
        ownership is checked in the batch's transaction). Raises DatabaseUnavailable
        (nothing acked) when the database cannot take the batch, DatabaseTimeout (one) when the
        batch passed ``db.deadline`` (its connection was aborted and is not reused); ConfigError
        when the table is missing."""
        if not batch:
            return []
        deadline = self.db.deadline
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            deadline.passed()
            tx = self._tx
            aborted = tx is not None and abort_driver_connection(tx.driver_connection())
            self._log.warning(
                "database_deadline_passed",
                deadline_s=deadline.deadline_s,
                batch=len(batch),
                connection_aborted=aborted,
            )
            if self._on_timeout is not None:
                self._on_timeout()

        timer = asyncio.get_running_loop().call_later(deadline.deadline_s, expire)
        try:
            outcomes = await self._process_batch(batch, invoke)
        except DatabaseUnavailable as exc:
            if expired:
                raise DatabaseTimeout(
                    f"the batch passed the {deadline.deadline_s:g} s database deadline: {exc}"
                ) from exc
            raise
        finally:
            timer.cancel()
            self._tx = None
        if not expired:
            deadline.recovered()
        return outcomes

    async def _process_batch(self, batch: Sequence[Message[Any]], invoke: Invoke) -> list[Outcome]:
        known: dict[int, Outcome] = {}
        outcomes = await self._attempt(batch, invoke, known, savepoints=False)
        if outcomes is None:
            self._log.info(
                "batch_redone_with_savepoints", batch=len(batch), failed=len(known) or None
            )
            outcomes = await self._attempt(batch, invoke, known, savepoints=True)
            assert outcomes is not None
        return outcomes

    async def _attempt(
        self,
        batch: Sequence[Message[Any]],
        invoke: Invoke,
        known: dict[int, Outcome],
        *,
        savepoints: bool,
    ) -> list[Outcome] | None:
        """One transaction over the batch. Returns None (rolled back) when the fast path met a
        failure it cannot undo without savepoints; ``known`` then holds the failed messages."""
        sids = [sortable_id(m.id) for m in batch]
        tx = await self._open()
        try:
            wanted = [sid for i, sid in enumerate(sids) if i not in known]
            claimed = await tx.claim(wanted, self.consumer) if wanted else set()
            # After the claim (our rows are locked now): see the module docstring, Retention.
            owned = await self._owned(claimed, len(batch))
            release = sorted(claimed - owned)
            # def handlers without per-message dependencies: the fast path runs them all in one
            # thread hop (the loop below then reads their outcomes instead of invoking).
            ran: dict[int, Outcome] | None = None
            inline = inline_of(invoke)
            if inline is not None and not savepoints and isinstance(tx, _SyncTx):
                todo = [
                    (i, msg)
                    for i, (msg, sid) in enumerate(zip(batch, sids, strict=True))
                    if i not in known and sid in owned
                ]
                ran = await tx.run_inline(inline, todo)
            outcomes: list[Outcome] = []
            stopping = False
            for i, (msg, sid) in enumerate(zip(batch, sids, strict=True)):
                if i in known:
                    outcomes.append(known[i])
                    continue
                if sid not in claimed:
                    self._log.info("duplicate_acked", message_id=msg.id)
                    outcomes.append(DUPLICATE)
                    continue
                if sid not in owned:
                    self._log.warning("message_claimed_away", message_id=msg.id)
                    outcomes.append(LOST_OWNERSHIP)
                    continue
                if stopping:
                    release.append(sid)
                    outcomes.append(NOT_STARTED)
                    continue
                if savepoints:
                    await tx.savepoint()
                outcome = ran[i] if ran is not None else await invoke(msg, tx.provided)
                if tx.broken():
                    # The handler's statements met a dead connection: an outage, not its fault.
                    raise DatabaseUnavailable(
                        f"database connection lost while handling {msg.id}: {outcome.error}"
                    )
                if outcome.preset:
                    # Decided before its handler (over-delivered, and not a duplicate: its row
                    # was free): nothing was written. Its row goes, and the loop dead-letters it.
                    if savepoints:
                        await tx.rollback_to_savepoint()
                    release.append(sid)
                    outcomes.append(outcome)
                    continue
                if outcome is NOT_STARTED:
                    # Shutdown began: this handler and the rest never ran, so they wrote nothing.
                    stopping = True
                    release.append(sid)
                    if savepoints:
                        await tx.rollback_to_savepoint()
                elif savepoints:
                    if outcome.acked:
                        error = await tx.release()
                        if error is not None:
                            outcome = self._flush_failed(msg, error)
                    else:
                        await tx.rollback_to_savepoint()
                    if not outcome.acked:
                        release.append(sid)
                elif not outcome.acked:
                    # No savepoint to undo this handler's writes: roll everything back, redo.
                    # In a transaction already in error state the failure may be an earlier
                    # handler's doing (it caught a failed statement): let the redo decide.
                    if not await tx.aborted():
                        known[i] = outcome
                    return None
                outcomes.append(outcome)
            if release:
                await tx.unclaim(release)
            error = await self._commit(tx)
            if error is not None:
                if not savepoints:
                    self._log.info("batch_commit_failed", error=describe(error))
                    return None
                self._log.error("batch_commit_failed", error=describe(error))
                failed = Outcome(Action.LEAVE_PENDING, f"commit failed: {describe(error)}")
                return [o if o.action is not Action.ACK else failed for o in outcomes]
        finally:
            await tx.close()
        acked = [m.id for m, o in zip(batch, outcomes, strict=True) if o.acked]
        if acked:
            await self._xack(acked)
        return outcomes

    def _flush_failed(self, msg: Message[Any], error: BaseException) -> Outcome:
        outcome = decide(error, msg.delivery_count, self._max_deliveries)
        self._log.warning(
            "handler_failed",
            message_id=msg.id,
            delivery_count=msg.delivery_count,
            error=describe(error),
            stage="flush",
        )
        return outcome


async def _to_thread(func: Callable[[], T]) -> T:
    return await asyncio.to_thread(func)


# --------------------------------------------------------------------------------------------
# Retention


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one prune did: the rule applied (None: nothing could be pruned) and rows deleted."""

    cut: RetentionCut | None
    deleted: int


async def read_retention_cut(
    client: aioredis.Redis, stream: str, group: str
) -> RetentionCut | None:
    """The group's current :func:`retention_cut` (None when the group does not exist)."""
    async with connection_errors():
        # Order matters: the last-delivered id first, then the PEL (module docstring, Retention).
        try:
            groups = await client.xinfo_groups(stream)
        except Exception as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        last: str | None = None
        for info in groups:
            name = info.get("name")
            if (name.decode() if isinstance(name, bytes) else name) == group:
                raw = info.get("last-delivered-id")
                last = raw.decode() if isinstance(raw, bytes) else str(raw)
        if last is None:
            return None
        summary = await client.xpending(stream, group)
    oldest = summary.get("min") if summary and int(summary.get("pending", 0)) else None
    if isinstance(oldest, bytes):
        oldest = oldest.decode()
    return retention_cut(last, oldest)


def delete_processed(
    engine: Engine,
    group: str,
    stream: str,
    cut: RetentionCut,
    *,
    deadline_s: float = DEFAULT_DB_DEADLINE_S,
) -> int:
    """Delete the (group, stream) rows below ``cut``; returns how many. Blocking; a database
    that does not answer within ``deadline_s`` gets its connection aborted (DatabaseUnavailable).
    """
    c = processed_messages.c
    below = c.message_id <= cut.bound if cut.inclusive else c.message_id < cut.bound
    stmt = sa.delete(processed_messages).where(c.group_name == group, c.stream == stream, below)
    with (
        _unavailable("pruning"),
        engine.begin() as conn,
        bounded(conn.connection.driver_connection, deadline_s),
    ):
        return int(conn.execute(stmt).rowcount)


async def prune(db: SqlDatabase, client: aioredis.Redis, stream: str, group: str) -> PruneResult:
    """Delete the processed rows of (group, stream) whose messages can no longer be delivered.

    Safe to run at any time, from any process, concurrently with workers (module docstring).
    Raises ConnectionLost (Redis) or DatabaseUnavailable.
    """
    cut = await read_retention_cut(client, stream, group)
    if cut is None:
        return PruneResult(None, 0)
    deleted = await asyncio.to_thread(
        functools.partial(delete_processed, deadline_s=db.deadline.deadline_s),
        db.sync_engine,
        group,
        stream,
        cut,
    )
    return PruneResult(cut, deleted)
