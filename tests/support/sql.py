"""Helpers for the ``idempotency="sql"`` tests: a business table, a worker with a database URL,
and the counts every exactly-once test ends with."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from streamworker import App
from streamworker.idempotency.sql import TABLE_NAME, SqlOptions
from streamworker.runtime.worker import Worker, WorkerOptions, WorkerResult
from tests.support.proc import stop_process, streamworker, wait_for


def migrated_db_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A new database with streamworker's schema: a SQLite file (WAL) under ``tmp_path`` for
    ``"sqlite"``, else a new database on the session's PostgreSQL 15."""
    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql.migrate import upgrade

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'streamworker.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    db = SqlDatabase(url)
    upgrade(db)
    db.sync_engine.dispose()
    return url


class Base(DeclarativeBase):
    pass


class Charge(Base):
    """The business row. No unique constraint on ``message_id`` on purpose: a message applied twice
    must show up as two rows, not be hidden by the database."""

    __tablename__ = "charges"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(sa.String(41))
    order_id: Mapped[str] = mapped_column(sa.String(64))
    amount_cents: Mapped[int]


def sync_url(url: str) -> str:
    """``url`` for a plain sync engine in the test process."""
    if url.startswith("sqlite"):
        return "sqlite:///" + url.split(":///", 1)[1]
    return url


def create_business_tables(url: str) -> None:
    engine = sa.create_engine(sync_url(url))
    Base.metadata.create_all(engine)
    engine.dispose()


def charges_per_message(url: str) -> dict[str, int]:
    engine = sa.create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(Charge.message_id, sa.func.count()).group_by(Charge.message_id)
            ).all()
    finally:
        engine.dispose()
    return {str(m): int(n) for m, n in rows}


def processed_ids(url: str) -> list[str]:
    """Processed rows' message ids, in stream form, sorted."""
    from streamworker.idempotency.sql import stream_id

    engine = sa.create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(f"SELECT message_id FROM {TABLE_NAME} ORDER BY message_id")
            ).scalars()
            return [stream_id(r) for r in rows]
    finally:
        engine.dispose()


def pending_ids(client: redis.Redis, stream: str, group: str) -> list[bytes]:
    """The group's PEL; ``[b"no group"]`` before the worker created the group (never empty)."""
    try:
        rows = client.xpending_range(stream, group, "-", "+", 10_000)
    except redis.ResponseError as exc:
        if "NOGROUP" in str(exc):
            return [b"no group"]
        raise
    return [row["message_id"] for row in rows]


@contextlib.asynccontextmanager
async def running_sql_worker(
    app: App,
    redis_url: str,
    db_url: str | None,
    *,
    consumer: str = "c1",
    shutdown_timeout_s: float = 5.0,
    prune_interval_s: float = 60.0,
) -> AsyncIterator[Worker]:
    """Run ``app`` in this loop until the block exits; then stop it and re-raise its errors."""
    worker = Worker(
        app,
        WorkerOptions(
            redis_url=redis_url,
            consumer=consumer,
            shutdown_timeout_s=shutdown_timeout_s,
            reconnect_backoff_initial_s=0.05,
            reconnect_backoff_max_s=0.3,
            strategy_options={"sql": SqlOptions(db_url=db_url, prune_interval_s=prune_interval_s)},
        ),
    )
    task: asyncio.Task[WorkerResult] = asyncio.ensure_future(
        worker.run(install_signal_handlers=False)
    )
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


CHARGES_APP = "tests/apps/sql_charges.py:app"
"""The crash suites' SQL app: one charge row per order (``SW_TEST_*`` variables steer it)."""


def start_charges_worker(
    redis_url: str, db_url: str, log: Path, consumer: str = "pod-0", **env: str
) -> subprocess.Popen[bytes]:
    """``streamworker run`` of :data:`CHARGES_APP` logging its handler calls to ``log``."""
    return streamworker(
        "run",
        CHARGES_APP,
        "--redis-url",
        redis_url,
        "--db-url",
        db_url,
        "--consumer",
        consumer,
        env={"SW_TEST_LOG": str(log), "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5", **env},
    )


def add_orders(client: redis.Redis, n: int) -> list[str]:
    """Add ``n`` orders to the ``orders`` stream; their ids."""
    return [client.xadd("orders", {"n": str(i)}).decode() for i in range(n)]


def finish_charges(
    redis_url: str, db_url: str, client: redis.Redis, ids: list[str], log: Path, **env: str
) -> str:
    """Run a clean worker until every order is charged and nothing is pending; check each order
    was charged exactly once. Returns the worker's stderr."""
    proc = start_charges_worker(redis_url, db_url, log, **env)
    try:
        wait_for(lambda: len(charges_per_message(db_url)) == len(ids), 30, "every order charged")
        wait_for(lambda: not pending_ids(client, "orders", "billing"), 30, "empty PEL")
    finally:
        err = stop_process(proc)
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    return err
