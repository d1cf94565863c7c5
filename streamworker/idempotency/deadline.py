"""Every database wait is bounded: connection arguments, and a deadline per batch.

A database connection can go silent: a partition without RST, a stalled proxy, a server that
stopped answering. The operating system would wait until TCP gives up (hours for a connection
with nothing to send). Two bounds apply:

* **Connection level** (:func:`connect_args`): a connect timeout, and TCP keepalives plus
  ``tcp_user_timeout`` (libpq's, for psycopg), so that a dead peer is noticed by the kernel.
  They help when the peer is gone; they do not help when something still answers TCP but the
  database's reply never comes (a proxy, a hung server). Hence:
* **The batch deadline** (``db_deadline_s``): a batch's database work (connect, claim, handlers,
  flush, COMMIT) must finish within it. Past it the batch's connection is aborted under the
  waiting call (:func:`abort_driver_connection`: its socket is shut down, or SQLite's statement
  interrupted): the call fails, SQLAlchemy invalidates the connection (it never goes back to the
  pool), and the consume loop retries the batch on a fresh one. A COMMIT whose reply was lost
  may have committed: the retry's claim then finds the processed rows and only acks.

The deadline bounds the whole batch: its handlers (they run inside its transaction) and the
strategy's Redis calls within it (the ownership check, the XACK) too. Set it above the longest
batch you expect (``batch_size`` x the slowest handler), as with ``liveness_timeout_s``. Pruning,
the schema check and the readiness probe's ``SELECT 1`` are bounded by it as well
(:func:`bounded`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

DEFAULT_DB_DEADLINE_S = 30.0
"""``db_deadline_s`` when not given."""

_CONNECT_TIMEOUT_CAP_S = 10


def connect_args(driver: str, deadline_s: float) -> dict[str, Any]:
    """The DBAPI ``connect()`` arguments that bound a connection's waits, for SQLAlchemy's
    ``connect_args``. ``driver``: ``psycopg``, ``psycopg2``, ``asyncpg``, ``pg8000``, ``pysqlite``
    or ``aiosqlite``."""
    connect_s = max(1, min(_CONNECT_TIMEOUT_CAP_S, int(deadline_s)))
    if driver in ("psycopg", "psycopg2"):
        # libpq: keepalive probes after a third of the deadline idle, three of them a ninth
        # apart: a dead peer is found within two thirds of the deadline; tcp_user_timeout drops
        # a connection whose sent data stays unacknowledged for the deadline.
        return {
            "connect_timeout": connect_s,
            "keepalives": 1,
            "keepalives_idle": max(1, int(deadline_s / 3)),
            "keepalives_interval": max(1, int(deadline_s / 9)),
            "keepalives_count": 3,
            "tcp_user_timeout": max(1000, int(deadline_s * 1000)),
        }
    if driver == "asyncpg":
        # asyncpg has no keepalive options; its command_timeout bounds every statement.
        return {"timeout": connect_s, "command_timeout": deadline_s}
    if driver == "pg8000":
        return {"timeout": deadline_s}
    return {}


def abort_driver_connection(driver_connection: Any) -> bool:
    """Make the call waiting on ``driver_connection`` fail now. Safe from any thread (for
    asyncpg: from its event loop's thread). Returns False when it knows no way for this driver.

    psycopg (sync and async), psycopg2: the socket is shut down (not closed: the driver still
    owns the descriptor), so a blocked read sees end-of-file and the driver marks the connection
    broken. asyncpg: ``terminate()``. SQLite: ``interrupt()`` (the running statement fails).
    """
    if driver_connection is None:
        return False
    try:
        return _abort(driver_connection)
    except Exception:  # a connection closing meanwhile: nothing left to abort
        return False


def _abort(driver_connection: Any) -> bool:
    fileno = getattr(driver_connection, "fileno", None)
    if callable(fileno) and not _is_sqlite(driver_connection):
        with contextlib.suppress(Exception):
            fd = int(fileno())
            dup = socket.socket(fileno=os.dup(fd))
            try:
                dup.shutdown(socket.SHUT_RDWR)
            finally:
                dup.close()
            return True
    terminate = getattr(driver_connection, "terminate", None)
    if callable(terminate):
        with contextlib.suppress(Exception):
            terminate()
            return True
    sqlite = getattr(driver_connection, "_conn", driver_connection)  # aiosqlite wraps sqlite3
    interrupt = getattr(sqlite, "interrupt", None)
    if callable(interrupt) and _is_sqlite(sqlite):
        with contextlib.suppress(Exception):
            interrupt()
            return True
    return False


def _is_sqlite(conn: Any) -> bool:
    return type(conn).__module__.startswith(("sqlite3", "aiosqlite"))


@contextlib.contextmanager
def bounded(driver_connection: Any, seconds: float) -> Iterator[None]:
    """Abort ``driver_connection`` if the block has not finished within ``seconds`` (a timer
    thread; for blocking calls such as the readiness probe's ``SELECT 1``)."""
    timer = threading.Timer(seconds, abort_driver_connection, (driver_connection,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class DeadlineState:
    """Whether a batch passed its deadline and no batch has finished in time since (shared by
    every subscription of one database; thread-safe). Readiness reports it."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._lock = threading.Lock()
        self._since: float | None = None
        self.count = 0

    def passed(self) -> None:
        """A batch passed the deadline now."""
        with self._lock:
            self.count += 1
            if self._since is None:
                self._since = time.monotonic()

    def recovered(self) -> None:
        """A batch finished within the deadline."""
        with self._lock:
            self._since = None

    def problem(self) -> str | None:
        """Why the database is not healthy now, or None."""
        with self._lock:
            since = self._since
        if since is None:
            return None
        return (
            f"a batch passed the {self.deadline_s:g} s database deadline "
            f"{time.monotonic() - since:.1f} s ago and none has finished in time since; "
            f"retrying on fresh connections"
        )
