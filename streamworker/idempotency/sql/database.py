"""Database set-up for ``idempotency="sql"``: URL checks (supported dialects and drivers), the
worker's sync and async engines (:class:`SqlDatabase`), SQLite's connection settings, and the
start-up readiness check.

:class:`SqlDatabase` engines are shared by the whole worker and are thread-safe.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from streamworker.errors import ConfigError, DatabaseUnavailable
from streamworker.idempotency.deadline import (
    DEFAULT_DB_DEADLINE_S,
    DeadlineState,
    bounded,
    connect_args,
)
from streamworker.idempotency.sql.errors import database_errors
from streamworker.idempotency.sql.schema import TABLE_NAME
from streamworker.io.redisio import redact_url

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
    except sa_exc.ArgumentError as exc:
        raise ConfigError(f"invalid database URL {redact_url(db_url)!r}: {exc}") from None
    except ValueError:
        # SQLAlchemy's own text quotes what it took for the port, which can be the middle of a
        # password holding an unencoded "@" (its password ends at the first "@").
        raise ConfigError(
            f"invalid database URL {redact_url(db_url)!r}: the port is not a number (in a "
            f"password, write @ as %40, : as %3A and / as %2F)"
        ) from None
    if url.host is not None and "@" in url.host:
        # Part of the password became the host: the driver would quote it when the lookup fails.
        raise ConfigError(
            f"invalid database URL {redact_url(db_url)!r}: an unencoded @ in the password (write "
            f"it as %40)"
        )
    backend = url.get_backend_name()
    if backend not in ("postgresql", "sqlite"):
        raise ConfigError(
            f"database URL {redact_url(db_url)!r}: idempotency='sql' supports postgresql:// and "
            f"sqlite:/// databases, not {backend!r}"
        )
    driver = url.get_driver_name() if "+" in url.drivername else None
    if backend == "postgresql" and driver not in _PG_DRIVERS:
        # Telling a statement that failed inside a handler (and was caught there) from a clean
        # transaction needs the driver's transaction status: psycopg's, which the other drivers
        # do not expose. Without it, such a COMMIT is a silent ROLLBACK we would ack.
        raise ConfigError(
            f"database URL {redact_url(db_url)!r}: the {driver} driver is not supported by "
            f"idempotency='sql'; use postgresql:// or postgresql+psycopg:// (psycopg 3, for def "
            f"and async def handlers alike)"
        )
    if backend == "sqlite" and driver not in (None, "pysqlite", "aiosqlite"):
        raise ConfigError(
            f"database URL {redact_url(db_url)!r}: the {driver} driver is not supported; use "
            f"sqlite:///path"
        )
    if backend == "sqlite" and url.database in (None, "", ":memory:"):
        raise ConfigError(
            "an in-memory SQLite database is private to one connection; use a file: sqlite:///path"
        )
    return url


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

    ``redacted_url`` is the URL for messages and logs, its password hidden by
    :func:`streamworker.io.redisio.redact_url`, the one redaction for every URL.
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
        # Redacted from the URL as given, not from self.url: SQLAlchemy ends the password at
        # the first unencoded "@" and would show the rest of it as part of the host.
        self.redacted_url = redact_url(db_url)
        self.dialect = self.url.get_backend_name()
        self._busy_timeout_ms = min(sqlite_busy_timeout_ms, int(deadline_s * 1000))
        self.deadline = DeadlineState(deadline_s)
        self._sync: Engine | None = None
        self._async: AsyncEngine | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SqlDatabase({self.redacted_url!r})"

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
            database_errors("checking the schema"),
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
        shown = self.redacted_url
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
        shown = self.redacted_url
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
            database_errors("pinging"),
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
