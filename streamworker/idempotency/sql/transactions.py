"""One batch's transaction for ``idempotency="sql"``, sync (:class:`_SyncTx`, its calls in worker
threads) or async (:class:`_AsyncTx`) behind one async interface (:class:`_Tx`): the claim of the
batch's processed rows, savepoints, the commit, and the driver connection the batch deadline
aborts. Also the sessions handlers are given, which refuse ``commit()`` and ``rollback()``.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session, SessionTransaction

from streamworker.core.message import Message
from streamworker.core.outcomes import Outcome
from streamworker.errors import DatabaseUnavailable, StreamworkerError
from streamworker.idempotency.base import InlineRun
from streamworker.idempotency.sql.errors import database_errors
from streamworker.idempotency.sql.schema import TABLE_NAME, processed_messages


class TransactionOwned(StreamworkerError):
    """A handler called ``commit()`` or ``rollback()`` on the session streamworker gave it.

    The transaction belongs to the batch: streamworker commits it together with the processed rows,
    or undoes a failed handler's writes itself. Raise an exception to fail the message instead.
    """


_OWNED = (
    "the session's transaction belongs to streamworker (idempotency='sql'): it commits after the "
    "batch; raise an exception to fail this message instead of calling {}()"
)


class BatchSession(Session):
    """The ``Session`` a ``def`` handler gets: the strategy owns its transaction, so commit and
    rollback raise :class:`TransactionOwned` (a handler that commits would record effects
    without the processed row)."""

    def commit(self) -> None:
        raise TransactionOwned(_OWNED.format("commit"))

    def rollback(self) -> None:
        raise TransactionOwned(_OWNED.format("rollback"))


class AsyncBatchSession(AsyncSession):
    """:class:`BatchSession` for ``async def`` handlers."""

    sync_session_class = BatchSession

    async def commit(self) -> None:
        raise TransactionOwned(_OWNED.format("commit"))

    async def rollback(self) -> None:
        raise TransactionOwned(_OWNED.format("rollback"))


# --------------------------------------------------------------------------------------------
# One batch's transaction, written once, run in threads or on the event loop


# The claim, one round trip for the whole batch. PostgreSQL gets the ids as one text parameter,
# comma-separated, that the server splits (a multi-row VALUES of N rows is compiled anew for every
# batch size and binds 4N parameters, several times slower; a list parameter costs the driver's
# array dumping, ~5% of a batch-handler batch); SQLite gets SQLAlchemy's cached executemany
# ("insertmanyvalues"), which sends one multi-row INSERT as well. Ids go in sorted, so
# concurrent claimers lock rows in the same order.
_PG_IDS = "unnest(string_to_array(:ids, ',')) AS m"  # stored ids are digits and one '-'
_PG_CLAIM = sa.text(
    f"INSERT INTO {TABLE_NAME} (group_name, stream, message_id, consumer) "
    f"SELECT :group_name, :stream, m, :consumer FROM {_PG_IDS} "
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


# The claim of a fresh batch (just read with ``>``: no row can exist yet, short of ``XGROUP
# SETID`` re-delivering): no conflict arbitration, nothing returned; a conflict raises
# IntegrityError and the batch is claimed again with the statements above (see SqlStrategy).
_PG_CLAIM_FRESH = sa.text(
    f"INSERT INTO {TABLE_NAME} (group_name, stream, message_id, consumer) "
    f"SELECT :group_name, :stream, m, :consumer FROM {_PG_IDS}"
)
_SQLITE_CLAIM_FRESH = sa.insert(processed_messages)


def claim_call(
    dialect: str,
    group: str,
    stream: str,
    consumer: str,
    sids: Sequence[str],
    *,
    fresh: bool = False,
) -> tuple[Any, Any]:
    """The statement and parameters that claim ``sids``; the result's scalars are the new ones.
    ``fresh``: the plain INSERT, which returns nothing and raises IntegrityError on a conflict."""
    ordered = sorted(sids)
    if dialect == "postgresql":
        ids = ",".join(ordered)
        params = {"group_name": group, "stream": stream, "consumer": consumer, "ids": ids}
        return (_PG_CLAIM_FRESH if fresh else _PG_CLAIM), params
    rows = [
        {"group_name": group, "stream": stream, "message_id": sid, "consumer": consumer}
        for sid in ordered
    ]
    return (_SQLITE_CLAIM_FRESH if fresh else _SQLITE_CLAIM), rows


def unclaim_statement(group: str, stream: str, ids: Sequence[str]) -> sa.Delete:
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


_T = TypeVar("_T")


class _SwallowedError(StreamworkerError):
    pass


_SWALLOWED = (
    "the transaction is in error state: a statement failed and the handler caught the error; "
    "let database errors propagate (or use session.begin_nested() around statements that may fail)"
)


def _caused(doing: str, step: Callable[[], object]) -> Exception | None:
    """Run ``step``; the error the batch's statements caused (a constraint, a serialization
    failure), or None. An outage is raised as DatabaseUnavailable."""
    try:
        with database_errors(doing):
            step()
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        return exc
    return None


class _Tx(abc.ABC):
    """One batch's transaction, written once: its steps (the ``*_now`` methods) work on a sync
    ``Connection`` and ``Session``; the async interface the strategy uses runs each step through
    :meth:`_step`, which a subclass supplies. :class:`_SyncTx` runs steps in a worker thread;
    :class:`_AsyncTx` runs them on the event loop through SQLAlchemy's greenlet bridge
    (``AsyncConnection.run_sync``), where each call the async driver makes is awaited. So the
    claim, savepoint, flush and commit logic cannot differ between ``def`` and ``async def``
    handlers; only how a step reaches the database does."""

    def __init__(self, dialect: str, group: str, stream: str) -> None:
        self._dialect = dialect
        self._group = group
        self._stream = stream
        self._conn: Connection | None = None
        self._trans: sa.RootTransaction | None = None
        self._session: Session | None = None
        self._sp: SessionTransaction | None = None
        self._done = False  # committed and closed
        self.provided: Mapping[type, Any] = {}

    @abc.abstractmethod
    async def _step(self, step: Callable[[], _T]) -> _T:
        """Run ``step`` where this transaction's blocking calls may run."""

    @abc.abstractmethod
    async def open(self, claim: Sequence[str] = (), consumer: str = "") -> set[str]:
        """Connect and begin; with ``claim``, also claim those ids (as :meth:`claim`). On a
        failed claim the connection is closed before the error is raised."""

    # The steps, on the sync Connection and Session ------------------------------------------

    def _begun(self, conn: Connection, session: Session) -> None:
        """Take ``conn`` (its transaction begun) and the ``session`` bound to it."""
        self._conn = conn
        self._trans = conn.get_transaction()
        self._session = session

    @property
    def session(self) -> Session:
        assert self._session is not None
        return self._session

    def _claim_or_close_now(
        self, sids: Sequence[str], consumer: str, *, fresh: bool = False
    ) -> set[str] | None:
        """:meth:`_claim_now` (``fresh``: :meth:`_claim_fresh_now`); on a failure the connection
        is closed before the error is raised."""
        try:
            if fresh:
                return self._claim_fresh_now(sids, consumer)
            return self._claim_now(sids, consumer)
        except BaseException:
            self.close_now()
            raise

    def _claim_now(self, sids: Sequence[str], consumer: str) -> set[str]:
        stmt, params = claim_call(self._dialect, self._group, self._stream, consumer, sids)
        with database_errors("claiming the batch"):
            return set(self.session.connection().execute(stmt, params).scalars())

    def _claim_fresh_now(self, sids: Sequence[str], consumer: str) -> set[str] | None:
        """Claim ``sids`` of a fresh batch (see ``_PG_CLAIM_FRESH``): all of them, or None after
        a conflict (the transaction, which held nothing else, is then rolled back and closed)."""
        stmt, params = claim_call(
            self._dialect, self._group, self._stream, consumer, sids, fresh=True
        )
        try:
            with database_errors("claiming the batch"):
                self.session.connection().execute(stmt, params)
        except sa.exc.IntegrityError:
            self.close_now()
            return None
        return set(sids)

    def unclaim_now(self, ids: Sequence[str]) -> None:
        """:meth:`unclaim`, in the calling thread."""
        with database_errors("releasing claims"):
            self.session.execute(unclaim_statement(self._group, self._stream, ids))

    def _savepoint_now(self) -> None:
        with database_errors("taking a savepoint"):
            self._sp = self.session.begin_nested()

    def _release_now(self) -> BaseException | None:
        assert self._sp is not None
        sp, self._sp = self._sp, None
        try:
            with database_errors("flushing a message's writes"):
                self.session.flush()
                # A statement the handler caught left the transaction in error state: roll
                # back to the savepoint (a failed RELEASE would leave it aborted).
                if _aborted(self._dialect, self._driver_connection_now()):
                    raise _SwallowedError(_SWALLOWED)
                sp.commit()
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            with database_errors("rolling back to a savepoint"):
                sp.rollback()
            return exc
        return None

    def _rollback_to_savepoint_now(self) -> None:
        assert self._sp is not None
        sp, self._sp = self._sp, None
        with database_errors("rolling back to a savepoint"):
            if sp.is_active:
                sp.rollback()

    def commit_now(self) -> BaseException | None:
        """:meth:`commit`, in the calling thread: flush, COMMIT, and the connection back to the
        pool. Returns the error of a flush or commit the batch's statements caused; raises
        DatabaseUnavailable for an outage."""
        assert self._trans is not None
        error = _caused("flushing the batch", self.session.flush)
        if error is not None:
            return error
        if _aborted(self._dialect, self._driver_connection_now()):
            return _SwallowedError(_SWALLOWED)
        self.session.close()
        error = _caused("committing", self._trans.commit)
        if error is not None:
            return error
        # Committed: hand the connection back to the pool in this same step, so that close()
        # has nothing left to do (one step per batch less).
        self.close_now()
        self._done = True
        return None

    def _aborted_now(self) -> bool:
        # A failed flush inside a handler rolls the whole transaction back (the session's
        # rollback reaches the connection's transaction), which shows as an inactive transaction.
        assert self._trans is not None
        if not self._trans.is_active:
            return True
        return _aborted(self._dialect, self._driver_connection_now())

    def _driver_connection_now(self) -> Any:
        assert self._conn is not None
        return self._conn.connection.driver_connection

    def close_now(self) -> None:
        """Roll back what was not committed and give the connection back (in the calling
        thread)."""
        with contextlib.suppress(Exception):
            if self._session is not None:
                self._session.close()
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self._conn.close()  # rolls back what was not committed

    # Read without a step (no I/O) -------------------------------------------------------------

    def broken(self) -> bool:
        """Whether the connection died under the batch (never after a commit)."""
        if self._done:
            return False
        return self._conn is None or self._conn.invalidated or self._conn.closed

    def driver_connection(self) -> Any:
        """The driver's connection in use (None before it is open), for the batch deadline."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.connection.driver_connection

    # The interface the strategy awaits ------------------------------------------------------

    async def claim(self, sids: Sequence[str], consumer: str) -> set[str]:
        return await self._step(lambda: self._claim_now(sids, consumer))

    async def unclaim(self, ids: Sequence[str]) -> None:
        await self._step(lambda: self.unclaim_now(ids))

    async def savepoint(self) -> None:
        await self._step(self._savepoint_now)

    async def release(self) -> BaseException | None:
        return await self._step(self._release_now)

    async def rollback_to_savepoint(self) -> None:
        await self._step(self._rollback_to_savepoint_now)

    async def commit(self) -> BaseException | None:
        return await self._step(self.commit_now)

    async def aborted(self) -> bool:
        return await self._step(self._aborted_now)

    async def close(self) -> None:
        if self._conn is not None and not self._done:
            await self._step(self.close_now)


class _SyncTx(_Tx):
    """A sync connection + Session; every step runs in a worker thread (``run``)."""

    def __init__(
        self,
        engine: Engine,
        run: Callable[[Callable[[], Any]], Awaitable[Any]],
        group: str,
        stream: str,
    ) -> None:
        super().__init__(engine.dialect.name, group, stream)
        self._engine = engine
        self._run = run

    async def _step(self, step: Callable[[], _T]) -> _T:
        result: _T = await self._run(step)
        return result

    async def open(self, claim: Sequence[str] = (), consumer: str = "") -> set[str]:
        """Connect, begin and claim in one thread hop (see :meth:`_Tx.open`)."""
        claimed = await self._step(lambda: self.open_now(claim, consumer))
        assert claimed is not None
        return claimed

    def open_now(
        self, claim: Sequence[str] = (), consumer: str = "", *, fresh: bool = False
    ) -> set[str] | None:
        """:meth:`open`, in the calling (pool) thread. ``fresh``: claim with the plain INSERT
        (see ``_PG_CLAIM_FRESH``); on a conflict the connection is closed and None returned
        (claim the normal way then)."""
        with database_errors("connecting"):
            conn = self._conn = self._engine.connect()
            conn.begin()
        session = BatchSession(
            bind=conn, join_transaction_mode="rollback_only", expire_on_commit=False
        )
        self._begun(conn, session)
        self.provided = {Session: session}
        if not claim:
            return set()
        return self._claim_or_close_now(claim, consumer, fresh=fresh)

    async def run_inline(
        self, inline: InlineRun, todo: Sequence[tuple[int, Message[Any]]]
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

        return await self._step(_handle)


class _AsyncTx(_Tx):
    """An AsyncConnection + AsyncSession; every step runs on the event loop, through
    ``AsyncConnection.run_sync`` on the sync connection and session they wrap."""

    def __init__(self, engine: AsyncEngine, group: str, stream: str) -> None:
        super().__init__(engine.dialect.name, group, stream)
        self._engine = engine
        self._async_conn: AsyncConnection | None = None

    async def _step(self, step: Callable[[], _T]) -> _T:
        assert self._async_conn is not None
        return await self._async_conn.run_sync(lambda _conn: step())

    async def open(self, claim: Sequence[str] = (), consumer: str = "") -> set[str]:
        with database_errors("connecting"):
            conn = self._async_conn = await self._engine.connect()
            self._conn = conn.sync_connection
            await conn.begin()
        session = AsyncBatchSession(
            bind=conn, join_transaction_mode="rollback_only", expire_on_commit=False
        )
        assert conn.sync_connection is not None
        self._begun(conn.sync_connection, session.sync_session)
        self.provided = {AsyncSession: session}
        if not claim:
            return set()
        claimed = await self._step(lambda: self._claim_or_close_now(claim, consumer))
        assert claimed is not None
        return claimed
