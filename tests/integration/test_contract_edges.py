"""The exactly-once contract at its edges, on a real redis-server (and SQLite + PostgreSQL 15):
the last allowed delivery after a commit, a handler longer than ``claim_idle_ms`` beside a
failing one, an ownership check that must page, drivers that cannot tell a swallowed failure,
Effects returned where nothing applies them, and a database that is not there at start-up.

(Two processes with one consumer name: ``test_consumer_names.py``; a group that disappears:
``tests/conformance/test_consume.py``.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker import App, ConfigError, Effects, Message
from streamworker.core.outcomes import Outcome
from streamworker.idempotency.base import Batch, CoroutineHandler
from streamworker.idempotency.sql import (
    TABLE_NAME,
    SqlDatabase,
    SqlStrategy,
    parse_db_url,
    sortable_id,
)
from streamworker.io.redisio import open_redis
from streamworker.runtime.worker import Worker, WorkerOptions
from tests.support.proc import run_cli
from tests.support.sql import (
    Charge,
    charges_per_message,
    create_business_tables,
    pending_ids,
    running_sql_worker,
    sync_url,
)
from tests.support.worker import eventually, running_worker


def _deliver(client: redis.Redis, stream: str, group: str, consumer: str, times: int) -> None:
    """Deliver every entry of ``stream`` to ``consumer`` ``times`` times (one ``>`` read, then
    re-reads of its PEL), as a worker that crashed after each delivery would have."""
    client.xgroup_create(stream, group, id="0", mkstream=True)
    client.xreadgroup(group, consumer, {stream: ">"}, count=1000)
    for _ in range(times - 1):
        client.xreadgroup(group, consumer, {stream: "0"}, count=1000)


def _commit_charge(db_url: str, message_id: str, consumer: str = "c1") -> None:
    """What a run that committed ``message_id`` and died before its XACK left behind."""
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(
            sa.insert(Charge.__table__).values(
                message_id=message_id, order_id="0", amount_cents=100
            )
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {TABLE_NAME} (group_name, stream, message_id, consumer) "
                "VALUES ('g', 'orders', :m, :c)"
            ),
            {"m": sortable_id(message_id), "c": consumer},
        )
    engine.dispose()


def _charging_app(ran: list[str], **opts: object) -> App:
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, **opts)  # type: ignore[arg-type]
    def charge(msg: Message, session: Session) -> None:
        ran.append(msg.id)
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=100))

    return app


# ------------------------------------------------------------------------------------------------
# Processed beats over-delivered


async def test_message_committed_on_its_last_delivery_is_acked_as_a_duplicate_not_dead_lettered(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    mid = redis_client.xadd("orders", {"n": "0"}).decode()
    # max_deliveries=2: delivery 2 committed, then the worker died before its XACK.
    _deliver(redis_client, "orders", "g", "c1", times=2)
    _commit_charge(db_url, mid)
    ran: list[str] = []
    async with running_sql_worker(_charging_app(ran, max_deliveries=2), redis_url, db_url):
        # The backlog read is delivery 3, over the limit: the processed row decides first.
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="acked")
    assert ran == []
    assert redis_client.xlen("{orders}:dlq") == 0
    assert charges_per_message(db_url) == {mid: 1}


async def test_committed_message_reclaimed_past_max_deliveries_is_acked_as_a_duplicate(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    mid = redis_client.xadd("orders", {"n": "0"}).decode()
    # Another consumer committed it on its last allowed delivery and vanished before the XACK.
    _deliver(redis_client, "orders", "g", "dead-pod", times=2)
    _commit_charge(db_url, mid, consumer="dead-pod")
    ran: list[str] = []
    app = _charging_app(ran, max_deliveries=2, claim_idle_ms=200)
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="reclaimed")
    assert ran == []
    assert redis_client.xlen("{orders}:dlq") == 0
    assert charges_per_message(db_url) == {mid: 1}


async def test_over_delivered_message_without_a_record_is_dead_lettered_unrun_and_replays_once(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    mid = redis_client.xadd("orders", {"n": "0"}).decode()
    _deliver(redis_client, "orders", "g", "c1", times=2)  # crashed the process twice, say
    ran: list[str] = []
    async with running_sql_worker(_charging_app(ran, max_deliveries=2), redis_url, db_url):
        await eventually(lambda: redis_client.xlen("{orders}:dlq") == 1, what="dead-lettered")
    assert ran == []
    (_, fields), *_ = redis_client.xrange("{orders}:dlq")
    assert fields[b"dlq_id"] == mid.encode()
    assert fields[b"dlq_error"] == b"delivered 3 times (max_deliveries=2)"
    assert charges_per_message(db_url) == {}
    # Its dead letter has no committed effects (that is the rule above), so a replay applies it
    # exactly once.
    out = run_cli("dlq", "replay", "orders", "--all", "--redis-url", redis_url)
    assert out.returncode == 0, out.stderr
    async with running_sql_worker(_charging_app(ran, max_deliveries=2), redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 1, what="the replay")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="acked")
    assert list(charges_per_message(db_url).values()) == [1]


async def test_batch_goes_on_past_an_over_delivered_message_of_a_def_handler(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    over = redis_client.xadd("orders", {"n": "0"}).decode()
    fine = redis_client.xadd("orders", {"n": "1"}).decode()
    _deliver(redis_client, "orders", "g", "c1", times=1)
    for _ in range(2):  # the first entry only: delivered 3 times, the second once
        redis_client.xreadgroup("g", "c1", {"orders": "0"}, count=1)
    ran: list[str] = []
    # def handler without per-message dependencies: the whole batch runs in one thread hop.
    async with running_sql_worker(_charging_app(ran, max_deliveries=3), redis_url, db_url):
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="done")
    assert ran == [fine]
    assert charges_per_message(db_url) == {fine: 1}
    assert [f[b"dlq_id"] for _, f in redis_client.xrange("{orders}:dlq")] == [over.encode()]


@pytest.mark.parametrize("idempotency", ["none", "lua"])
async def test_over_delivered_message_is_dead_lettered_without_running_its_handler(
    idempotency: str, redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xadd("orders", {"n": "0"})
    _deliver(redis_client, "orders", "g", "c1", times=3)
    ran: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency=idempotency, max_deliveries=3, block_ms=100)  # type: ignore[arg-type]
    async def handle(msg: Message) -> None:
        ran.append(msg.id)

    async with running_worker(app, redis_url):
        await eventually(lambda: redis_client.xlen("{orders}:dlq") == 1, what="dead-lettered")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="acked")
    assert ran == []


# ------------------------------------------------------------------------------------------------
# A lease is renewed by nothing but time


@pytest.mark.parametrize("idempotency", ["none", "lua"])
async def test_handler_longer_than_claim_idle_beside_a_failing_retry_is_never_stolen(
    idempotency: str, redis_url: str, redis_client: redis.Redis
) -> None:
    runs: list[tuple[str, str]] = []
    app = App("t")

    @app.handler(
        "orders",
        group="g",
        idempotency=idempotency,  # type: ignore[arg-type]
        claim_idle_ms=600,
        batch_size=1,
        retry_backoff_ms=100,
        max_deliveries=50,
        block_ms=100,
    )
    async def handle(msg: Message) -> None:
        runs.append((msg.fields["n"], msg.consumer))
        if msg.fields["n"] == "fail":
            raise RuntimeError("fails every time")
        await asyncio.sleep(3.0)  # five times claim_idle_ms

    # "fail" is a batch of its own before "slow": its retry falls due while "slow" holds the
    # batch lock, and waits for it; the lease renewal must not wait behind that retry.
    redis_client.xadd("orders", {"n": "fail"})
    redis_client.xadd("orders", {"n": "slow"})
    async with running_worker(app, redis_url, consumer="a"):
        await eventually(lambda: ("slow", "a") in runs, what="a runs the slow one")
        async with running_worker(app, redis_url, consumer="b"):
            await asyncio.sleep(4.0)
    slow = [r for r in runs if r[0] == "slow"]
    assert slow == [("slow", "a")], runs


@pytest.mark.parametrize("idempotency", ["none", "lua"])
async def test_lease_holds_through_a_graceful_stop_until_the_batch_in_hand_finishes(
    idempotency: str, redis_url: str, redis_client: redis.Redis
) -> None:
    runs: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency=idempotency, claim_idle_ms=600, block_ms=100)  # type: ignore[arg-type]
    async def handle(msg: Message) -> None:
        runs.append(msg.consumer)
        await asyncio.sleep(2.5)  # four times claim_idle_ms, mostly after the stop began

    redis_client.xadd("orders", {"n": "slow"})
    a = Worker(app, WorkerOptions(redis_url=redis_url, consumer="a", shutdown_timeout_s=10))
    a_run = asyncio.ensure_future(a.run(install_signal_handlers=False))
    await eventually(lambda: runs == ["a"], what="a started the handler")
    async with running_worker(app, redis_url, consumer="b"):
        a.stop()  # graceful: the handler in hand runs on for 2 s
        await asyncio.wait_for(a_run, 15)
        assert not pending_ids(redis_client, "orders", "g")  # a finished and acked it
        await asyncio.sleep(1.0)
    assert runs == ["a"]


# ------------------------------------------------------------------------------------------------
# The SQL ownership check pages through this consumer's PEL


async def test_ownership_check_finds_a_batch_spread_over_other_pending_entries(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = [redis_client.xadd("orders", {"n": str(i)}).decode() for i in range(12)]
    # c1 holds all twelve (ten of them failed and wait for a retry, say); the batch is the two
    # at the ends of the range, as a retry or a reclaim hands them over.
    _deliver(redis_client, "orders", "g", "c1", times=1)
    client = open_redis(redis_url)
    db = SqlDatabase(db_url)
    strategy = SqlStrategy(
        db, client, stream="orders", group="g", consumer="c1", max_deliveries=5, is_async=False
    )
    batch = [
        Message(id=i, stream="orders", group="g", consumer="c1", fields={"n": "x"}, body=None)
        for i in (ids[0], ids[-1])
    ]

    @CoroutineHandler
    async def invoke(msg: Message, provided) -> Outcome:  # type: ignore[no-untyped-def]
        provided[Session].add(Charge(message_id=msg.id, order_id="x", amount_cents=1))
        from streamworker.core.outcomes import ACKED

        return ACKED

    try:
        outcomes = await strategy.process(Batch(batch, invoke))
    finally:
        await client.aclose()
        await db.dispose()
    assert [o.acked for o in outcomes] == [True, True]
    assert charges_per_message(db_url) == {ids[0]: 1, ids[-1]: 1}


# ------------------------------------------------------------------------------------------------
# Drivers, Effects and the database at start-up


@pytest.mark.parametrize(
    "url",
    ["postgresql+asyncpg://u@localhost/db", "postgresql+pg8000://u@localhost/db"],
)
def test_postgres_drivers_that_cannot_report_a_failed_transaction_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"postgresql\+psycopg://"):
        parse_db_url(url)


def test_run_with_an_asyncpg_url_exits_2_with_one_line(redis_url: str) -> None:
    out = run_cli(
        "run",
        "tests/apps/sql_charges.py:app",
        "--redis-url",
        redis_url,
        "--db-url",
        "postgresql+asyncpg://u@127.0.0.1:1/db",
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert "asyncpg driver is not supported" in out.stderr


def test_sql_handler_annotated_to_return_effects_is_refused() -> None:
    app = App("t", db_url="sqlite:///x.db")

    def charge(msg: Message, session: Session) -> Effects | None:
        return None

    with pytest.raises(ConfigError, match="only idempotency='lua' applies"):
        app.handler("orders", group="g", idempotency="sql")(charge)


def test_at_least_once_handler_annotated_to_return_effects_is_refused() -> None:
    app = App("t")

    async def handle(msg: Message) -> Effects:
        return Effects()

    with pytest.raises(ConfigError, match="only idempotency='lua' applies"):
        app.handler("orders", group="g")(handle)


async def test_effects_returned_without_lua_are_dead_lettered_with_the_reason(
    redis_url: str, redis_client: redis.Redis
) -> None:
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message):  # type: ignore[no-untyped-def]  # no annotation to refuse
        return Effects().incr("{orders}:count")

    redis_client.xadd("orders", {"n": "0"})
    async with running_worker(app, redis_url):
        await eventually(lambda: redis_client.xlen("{orders}:dlq") == 1, what="dead-lettered")
    (_, fields), *_ = redis_client.xrange("{orders}:dlq")
    assert b"does not apply" in fields[b"dlq_error"]
    assert redis_client.get("{orders}:count") is None


def _run_sql_app(redis_url: str, db_url: str) -> tuple[int, str]:
    out = run_cli(
        "run", "tests/apps/sql_charges.py:app", "--redis-url", redis_url, "--db-url", db_url
    )
    return out.returncode, out.stderr


def test_unreachable_database_exits_1_at_start(redis_url: str) -> None:
    code, err = _run_sql_app(redis_url, "postgresql://sw@127.0.0.1:1/nothing")
    assert code == 1
    assert err.count("\n") == 1
    assert "cannot reach the database" in err


def test_unmigrated_database_exits_2_naming_migrate(redis_url: str, postgres_url: str) -> None:
    code, err = _run_sql_app(redis_url, postgres_url)
    assert code == 2
    assert err.count("\n") == 1
    assert "streamworker migrate" in err


@pytest.mark.parametrize("command", ["run", "prune"])
def test_mistyped_sqlite_path_is_refused_and_not_created(
    command: str, redis_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "typo" / "billing.db"
    url = f"sqlite:///{missing}"
    if command == "run":
        code, err = _run_sql_app(redis_url, url)
    else:
        out = run_cli("prune", "orders", "g", "--redis-url", redis_url, "--db-url", url)
        code, err = out.returncode, out.stderr
    assert code == 2
    assert "does not exist" in err
    assert not missing.exists()
