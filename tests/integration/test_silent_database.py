"""Every database wait is bounded: a PostgreSQL reply that does not come (held by a proxy on an
open connection, as a partition without RST would) stalls a worker for the batch deadline, not
for as long as the silence lasts. The batch is retried on a fresh connection; a COMMIT whose
reply was lost is settled by the processed rows."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker import App, Message
from streamworker.idempotency.sql import SqlOptions
from streamworker.runtime.worker import Worker, WorkerOptions, WorkerResult
from tests.support.faultproxy import Fault, FaultProxy, Rule, is_commit_reply_bytes
from tests.support.postgres import PostgresServer
from tests.support.servers import RedisServer
from tests.support.sql import Charge, charges_per_message, create_business_tables, migrated_db_url

pytestmark = pytest.mark.slow  # each waits out two deadlines

STREAM, GROUP = "silent", "g"
MESSAGES = 300
DEADLINE_S = 3.0
HOLD_S = 120.0
SLACK_S = 4.0  # backoff, a fresh connection, the retried batch


def _app(is_async: bool) -> App:
    app = App("silent")
    options: dict[str, Any] = {"group": GROUP, "idempotency": "sql", "batch_size": 10}
    if is_async:

        @app.handler(STREAM, **options)
        async def charge_async(msg: Message, session: AsyncSession) -> None:
            session.add(Charge(message_id=msg.id, order_id=msg.id, amount_cents=1))

    else:

        @app.handler(STREAM, **options)
        def charge(msg: Message, session: Session) -> None:
            session.add(Charge(message_id=msg.id, order_id=msg.id, amount_cents=1))

    return app


def _done(client: redis.Redis) -> int:
    for info in client.xinfo_groups(STREAM):
        if info["name"] == GROUP.encode():
            return MESSAGES - int(info["pending"]) - int(info["lag"] or 0)
    return 0


def _batch_query(messages: list[bytes]) -> bool:
    """A query of a batch's transaction (not the readiness probe's SELECT 1)."""
    return not any(b"SELECT 1" in m for m in messages)


def _claim(messages: list[bytes]) -> bool:
    return any(b"INSERT INTO streamworker_processed_messages" in m for m in messages)


@pytest.mark.parametrize(
    ("held", "is_async"), [("commit", False), ("query", True)], ids=["commit-def", "query-async"]
)
async def test_a_silent_database_connection_stalls_the_worker_for_the_deadline_only(
    redis_server: RedisServer,
    redis_client: redis.Redis,
    postgres_server: PostgresServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    held: str,
    is_async: bool,
) -> None:
    db_url = migrated_db_url("postgresql", tmp_path, request)
    create_business_tables(db_url)
    redis_client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    pipe = redis_client.pipeline(transaction=False)
    for i in range(MESSAGES):
        pipe.xadd(STREAM, {"n": str(i)})
    pipe.execute()
    with FaultProxy(postgres_server.port, protocol="postgres") as proxy:
        # Two silences in a row: the retry's first reply is held as well.
        rule = proxy.add_rule(
            Rule(
                Fault("stall", HOLD_S),
                _batch_query if held == "commit" else _claim,
                is_commit_reply_bytes if held == "commit" else None,
                times=2,
                skip=3,
            )
        )
        proxied = db_url.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        worker = Worker(
            _app(is_async),
            WorkerOptions(
                redis_url=redis_server.url,
                consumer="c1",
                shutdown_timeout_s=5.0,
                reconnect_backoff_initial_s=0.05,
                reconnect_backoff_max_s=0.3,
                strategy_options={"sql": SqlOptions(db_url=proxied, deadline_s=DEADLINE_S)},
            ),
        )
        task: asyncio.Task[WorkerResult] = asyncio.ensure_future(
            worker.run(install_signal_handlers=False)
        )
        readiness: list[dict[str, Any]] = []

        async def probe() -> None:  # /readyz, as the HTTP thread would ask
            while True:
                if rule.used:
                    readiness.append((await asyncio.to_thread(worker.readiness))[1])
                await asyncio.sleep(0.1)

        prober = asyncio.ensure_future(probe())
        longest = 0.0
        try:
            last, last_change = -1, time.monotonic()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = _done(redis_client)
                now = time.monotonic()
                if done != last:
                    last, last_change = done, now
                longest = max(longest, now - last_change)
                if done == MESSAGES:
                    break
                await asyncio.sleep(0.05)
        finally:
            prober.cancel()
            worker.stop()
            await asyncio.wait_for(task, 30)
        print(
            f"held {held}: {rule.used} silences, longest stretch without progress {longest:.2f} s"
        )
        assert rule.used == 2
    assert _done(redis_client) == MESSAGES
    assert longest < 2 * DEADLINE_S + SLACK_S
    charges = charges_per_message(db_url)
    assert len(charges) == MESSAGES
    assert set(charges.values()) == {1}
    timeouts = worker.metrics.registry.get_sample_value(
        "streamworker_database_timeouts_total",
        {"stream": STREAM, "group": GROUP, "handler": worker.app.handlers[0].name},
    )
    assert timeouts == 2
    assert any("deadline" in str(r.get("database", "")) for r in readiness)
