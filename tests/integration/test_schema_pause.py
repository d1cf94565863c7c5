"""A schema error is the deployment's fault, not the message's (``idempotency="sql"``).

A handler whose table (or column) is missing, whether its ``session.execute`` meets it or the
flush of its ``session.add``, pauses with a capped backoff: ``/readyz`` answers 503 naming the
error, one log line per backoff step, no dead letter, no delivery counted, the batch kept in hand;
once the table exists the handler resumes by itself. Real worker, real Redis, SQLite and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
import redis
import sqlalchemy as sa
import structlog
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker import App, Message
from streamworker.observability.health import HealthServer
from streamworker.runtime.worker import Worker
from streamworker.testing import DrainTimeout, TestWorker
from tests.support.sql import Charge, charges_per_message, pending_ids, running_sql_worker, sync_url
from tests.support.worker import eventually

_INSERT_AUDIT = sa.text("INSERT INTO audit (message_id) VALUES (:m)")


def _execute_app(calls: list[str]) -> App:
    """A handler whose own statement names a table that does not exist yet."""
    app = App("schema")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, max_deliveries=2)
    def audit(msg: Message, session: Session) -> None:
        calls.append(msg.id)
        session.execute(_INSERT_AUDIT, {"m": msg.id})

    return app


def _flush_app(calls: list[str], *, is_async: bool) -> App:
    """A handler whose ORM write meets the missing table only at the batch's flush."""
    app = App("schema")
    options: dict[str, Any] = {"group": "g", "idempotency": "sql", "block_ms": 100}

    if is_async:

        @app.handler("orders", max_deliveries=2, **options)
        async def charge(msg: Message, session: AsyncSession) -> None:
            calls.append(msg.id)
            session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))

    else:

        @app.handler("orders", max_deliveries=2, **options)
        def charge_sync(msg: Message, session: Session) -> None:
            calls.append(msg.id)
            session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))

    return app


def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _serve_health(worker: Worker) -> tuple[HealthServer, int]:
    """The worker's /metrics, /healthz and /readyz on a free loopback port."""
    server = HealthServer(worker.metrics.registry, worker.liveness, worker.readiness)
    return server, server.start("127.0.0.1", 0)


def _create(db_url: str, ddl: str) -> None:
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text(ddl))
    engine.dispose()


def _audited(db_url: str) -> list[str]:
    engine = sa.create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text("SELECT message_id FROM audit")).scalars())
    finally:
        engine.dispose()


def _delivery_counts(client: redis.Redis) -> list[int]:
    rows = client.xpending_range("orders", "g", "-", "+", 100)
    return [int(r["times_delivered"]) for r in rows]


async def _paused_then_resumed(
    app: App,
    calls: list[str],
    redis_url: str,
    redis_client: redis.Redis,
    db_url: str,
    create: str,
    done: Any,
) -> list[dict[str, Any]]:
    ids = [redis_client.xadd("orders", {"n": str(i)}).decode() for i in range(3)]
    with structlog.testing.capture_logs() as logs:
        async with running_sql_worker(app, redis_url, db_url) as worker:
            server, port = _serve_health(worker)
            try:
                # Far more attempts than max_deliveries=2: none of them may count.
                await eventually(lambda: len(calls) >= 8, timeout_s=20, what="several attempts")
                status, body = await _in_thread(_readyz, port)
                assert status == 503
                paused = body["paused_handlers"]["orders/g"]
                assert "audit" in paused or "charges" in paused, paused
                assert redis_client.xlen("orders:dlq") == 0
                assert _delivery_counts(redis_client) == [1, 1, 1]
                _create(db_url, create)
                await eventually(lambda: done(db_url) == sorted(ids), what="resumed and applied")
                await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="acked")
                status, body = await _in_thread(_readyz, port)
                assert status == 200, body
            finally:
                server.stop()
    assert redis_client.xlen("orders:dlq") == 0
    return logs


async def _in_thread(func: Any, *args: Any) -> Any:
    return await asyncio.to_thread(func, *args)


def _pauses(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "handler_paused"]


async def test_missing_table_met_by_the_handlers_statement_pauses_it_until_created(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    calls: list[str] = []
    logs = await _paused_then_resumed(
        _execute_app(calls),
        calls,
        redis_url,
        redis_client,
        db_url,
        "CREATE TABLE audit (message_id VARCHAR(41) NOT NULL)",
        lambda url: sorted(_audited(url)),
    )
    pauses = _pauses(logs)
    assert pauses
    assert all("retry_in_s" in e and "audit" in e["error"] for e in pauses)
    assert not [e for e in logs if e["event"] in ("handler_failed", "message_dead_lettered")]
    assert [e["event"] for e in logs].count("handler_resumed") == 1


@pytest.mark.parametrize("is_async", [True, False], ids=["async-def", "def"])
async def test_missing_table_met_at_the_flush_pauses_the_handler_until_created(
    db_url: str, redis_url: str, redis_client: redis.Redis, is_async: bool
) -> None:
    calls: list[str] = []
    ddl = str(
        sa.schema.CreateTable(Charge.__table__).compile(  # type: ignore[arg-type]
            sa.create_engine(sync_url(db_url))
        )
    )
    logs = await _paused_then_resumed(
        _flush_app(calls, is_async=is_async),
        calls,
        redis_url,
        redis_client,
        db_url,
        ddl,
        lambda url: sorted(m for m, n in charges_per_message(url).items() for _ in range(n)),
    )
    assert _pauses(logs)
    assert all("flushing" in e["error"] for e in _pauses(logs))
    assert not [e for e in logs if e["event"] in ("handler_failed", "message_dead_lettered")]


async def test_one_log_line_per_backoff_step_while_paused(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    calls: list[str] = []
    redis_client.xadd("orders", {"n": "1"})
    with structlog.testing.capture_logs() as logs:
        async with running_sql_worker(_execute_app(calls), redis_url, db_url) as worker:
            await eventually(lambda: len(calls) >= 2, timeout_s=20, what="a pause")
            turned = worker.consumers[0].last_turn
            await eventually(lambda: len(calls) >= 6, timeout_s=20, what="six attempts")
            # Each step tells liveness the loop is alive: a restart would not fix the schema.
            assert worker.consumers[0].last_turn > turned
    # Every attempt of the batch is one step: one line, and its delay grows up to the cap.
    pauses = _pauses(logs)
    assert len(pauses) in (len(calls), len(calls) - 1)
    delays = [e["retry_in_s"] for e in pauses]
    assert max(delays) <= 0.3  # the helper's reconnect_backoff_max_s
    assert max(delays[3:]) > 0.05  # grown past the first step's ceiling


async def test_a_missing_column_pauses_the_handler_too(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    _create(db_url, "CREATE TABLE audit (id INTEGER)")
    calls: list[str] = []
    redis_client.xadd("orders", {"n": "1"})
    with structlog.testing.capture_logs() as logs:
        async with running_sql_worker(_execute_app(calls), redis_url, db_url) as worker:
            await eventually(lambda: len(calls) >= 3, timeout_s=20, what="three attempts")
            ok, details = await _in_thread(worker.readiness)
            assert not ok
            assert "message_id" in details["paused_handlers"]["orders/g"]
    assert redis_client.xlen("orders:dlq") == 0
    assert _pauses(logs)


async def test_drain_timeout_names_the_schema_error_that_paused_the_handler(
    tmp_path: Any,
) -> None:
    app = _execute_app([])
    async with TestWorker(app, db_url=f"sqlite:///{tmp_path / 'app.db'}") as worker:
        await worker.publish("orders", fields={"n": "1"})
        with pytest.raises(DrainTimeout) as caught:
            await worker.drain(timeout_s=1.5)
    text = str(caught.value)
    assert "handler paused" in text
    assert "no such table: audit" in text


async def test_a_batch_handler_meeting_a_missing_table_pauses_and_resumes(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    calls: list[str] = []
    app = App("schema")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, batch=True)
    def audit_all(msgs: list[Message], session: Session) -> None:
        calls.extend(m.id for m in msgs)
        for msg in msgs:
            session.execute(_INSERT_AUDIT, {"m": msg.id})

    ids = [redis_client.xadd("orders", {"n": str(i)}).decode() for i in range(3)]
    async with running_sql_worker(app, redis_url, db_url) as worker:
        await eventually(lambda: len(calls) >= 9, timeout_s=20, what="several batch attempts")
        assert (await _in_thread(worker.readiness))[1]["paused_handlers"]
        _create(db_url, "CREATE TABLE audit (message_id VARCHAR(41) NOT NULL)")
        await eventually(lambda: sorted(_audited(db_url)) == sorted(ids), what="resumed")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="acked")
        assert (await _in_thread(worker.readiness))[0]
    assert redis_client.xlen("orders:dlq") == 0
