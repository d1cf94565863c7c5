"""The bounds on database waits (streamworker.idempotency.deadline) on real drivers: aborting a
connection under a waiting call makes that call fail at once, and the connection arguments are
ones the drivers accept."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest

from streamworker.errors import ConfigError, DatabaseUnavailable
from streamworker.idempotency.deadline import abort_driver_connection, connect_args
from streamworker.idempotency.sql import SqlDatabase
from tests.support.postgres import PostgresServer

SLEEP = "SELECT pg_sleep(30)"
ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"


def test_aborting_a_psycopg_connection_fails_the_blocked_query_at_once(
    postgres_server: PostgresServer,
) -> None:
    conn = psycopg.connect(host="127.0.0.1", port=postgres_server.port, user="postgres")
    timer = threading.Timer(0.3, abort_driver_connection, (conn,))
    timer.start()
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        conn.execute(SLEEP)
    assert time.monotonic() - started < 5
    assert conn.broken
    conn.close()


async def test_aborting_an_async_psycopg_connection_fails_the_awaited_query_at_once(
    postgres_server: PostgresServer,
) -> None:
    conn = await psycopg.AsyncConnection.connect(
        host="127.0.0.1", port=postgres_server.port, user="postgres"
    )
    asyncio.get_running_loop().call_later(0.3, abort_driver_connection, conn)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        await conn.execute(SLEEP)
    assert time.monotonic() - started < 5
    assert conn.broken
    await conn.close()


def test_aborting_a_sqlite_connection_interrupts_its_running_statement(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db.sqlite", check_same_thread=False)
    timer = threading.Timer(0.3, abort_driver_connection, (conn,))
    timer.start()
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        conn.execute(ENDLESS).fetchone()
    assert time.monotonic() - started < 5
    conn.close()


def test_an_unknown_driver_connection_is_left_alone() -> None:
    assert abort_driver_connection(object()) is False
    assert abort_driver_connection(None) is False


def test_libpq_accepts_the_connection_bounds(postgres_server: PostgresServer) -> None:
    args = connect_args("psycopg", 30.0)
    assert args["connect_timeout"] == 10
    assert args["tcp_user_timeout"] == 30_000
    with psycopg.connect(
        host="127.0.0.1", port=postgres_server.port, user="postgres", **args
    ) as conn:
        params = conn.info.get_parameters()
    assert params["tcp_user_timeout"] == "30000"
    assert params["keepalives_idle"] == "10"
    assert params["connect_timeout"] == "10"


def test_a_database_with_its_deadline_pings_through_both_engines(postgres_url: str) -> None:
    db = SqlDatabase(postgres_url, deadline_s=7.0)
    try:
        db.ping()
        assert db.sync_engine.url.drivername == "postgresql+psycopg"
    finally:
        asyncio.run(db.dispose())


def test_ping_fails_while_batches_pass_the_deadline_and_recovers(postgres_url: str) -> None:
    db = SqlDatabase(postgres_url, deadline_s=7.0)
    try:
        db.deadline.passed()
        with pytest.raises(DatabaseUnavailable, match="7 s database deadline"):
            db.ping()
        db.deadline.recovered()
        db.ping()
    finally:
        asyncio.run(db.dispose())


def test_a_deadline_that_is_not_positive_is_refused(postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="db_deadline_s"):
        SqlDatabase(postgres_url, deadline_s=0)


async def test_aborting_an_aiosqlite_connection_interrupts_its_running_statement(
    tmp_path: Path,
) -> None:
    import aiosqlite

    async with aiosqlite.connect(tmp_path / "db.sqlite") as conn:
        asyncio.get_running_loop().call_later(0.3, abort_driver_connection, conn)
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="interrupted"):
            await conn.execute_fetchall(ENDLESS)
        assert time.monotonic() - started < 5
