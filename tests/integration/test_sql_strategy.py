"""``idempotency="sql"`` in a worker in this process, on SQLite (file, WAL) and PostgreSQL 15.

Every test ends with the exactly-once counts: business rows per message, processed rows, PEL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker import App, ConfigError, DeadLetter, Depends, Message
from streamworker.core.outcomes import Action, Outcome
from streamworker.idempotency.base import Batch, CoroutineHandler
from streamworker.idempotency.sql import (
    TABLE_NAME,
    SqlDatabase,
    SqlStrategy,
    prune,
    sortable_id,
)
from streamworker.io.redisio import open_redis
from tests.support.sql import (
    Charge,
    charges_per_message,
    create_business_tables,
    pending_ids,
    processed_ids,
    running_sql_worker,
    sync_url,
)
from tests.support.worker import eventually


def _add(client: redis.Redis, n: int, stream: str = "orders") -> list[str]:
    return [client.xadd(stream, {"n": str(i)}).decode() for i in range(n)]


def _sql_app(fail: set[str] = frozenset(), dead: set[str] = frozenset(), **opts) -> App:  # type: ignore[no-untyped-def, assignment]
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, **opts)
    def charge(msg: Message, session: Session) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=100))
        if msg.fields["n"] in fail:
            raise RuntimeError(f"cannot charge {msg.fields['n']}")
        if msg.fields["n"] in dead:
            raise DeadLetter("never chargeable")

    return app


async def test_each_message_commits_its_writes_and_its_row_once_then_is_acked(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 25)
    async with running_sql_worker(_sql_app(batch_size=10), redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 25, what="25 charges")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="empty PEL")
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == sorted(ids, key=sortable_id)


async def test_message_whose_row_exists_is_acked_without_running_the_handler(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 3)
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:  # a previous run committed ids[1] and died before its XACK
        conn.execute(
            sa.text(
                f"INSERT INTO {TABLE_NAME} (group_name, stream, message_id, consumer) "
                "VALUES ('g', 'orders', :m, 'old')"
            ),
            {"m": sortable_id(ids[1])},
        )
    engine.dispose()
    async with running_sql_worker(_sql_app(), redis_url, db_url):
        await eventually(
            lambda: (
                not pending_ids(redis_client, "orders", "g")
                and len(charges_per_message(db_url)) == 2
            ),
            what="done",
        )
    assert charges_per_message(db_url) == {ids[0]: 1, ids[2]: 1}


async def test_failing_handler_is_undone_and_stays_pending_while_the_rest_commit(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 6)
    async with running_sql_worker(_sql_app(fail={"2", "4"}, batch_size=6), redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 4, what="4 charges")
        await eventually(
            lambda: pending_ids(redis_client, "orders", "g") == [ids[2].encode(), ids[4].encode()],
            what="the failures pending",
        )
    assert charges_per_message(db_url) == {i: 1 for n, i in enumerate(ids) if n not in (2, 4)}
    assert ids[2] not in processed_ids(db_url)


async def test_handler_with_a_per_message_dependency_gets_the_same_guarantees(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    # A message-scoped Depends is resolved on the event loop, so these handlers are called one
    # thread hop each instead of the whole batch in one: same transaction, same outcomes.
    create_business_tables(db_url)
    ids = _add(redis_client, 6)
    closed: list[str] = []

    def order_of(msg: Message) -> Iterator[str]:
        try:
            yield msg.fields["n"]
        finally:
            closed.append(msg.id)

    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, batch_size=6)
    def charge(msg: Message, session: Session, order: str = Depends(order_of)) -> None:
        session.add(Charge(message_id=msg.id, order_id=order, amount_cents=100))
        if order == "3":
            raise RuntimeError("cannot charge 3")

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 5, what="5 charges")
        await eventually(
            lambda: pending_ids(redis_client, "orders", "g") == [ids[3].encode()],
            what="the failure pending",
        )
    assert charges_per_message(db_url) == {i: 1 for n, i in enumerate(ids) if n != 3}
    assert set(ids) <= set(closed)


async def test_dead_lettered_message_keeps_no_writes_and_no_row(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 3)
    async with running_sql_worker(_sql_app(dead={"1"}), redis_url, db_url):
        await eventually(lambda: redis_client.xlen("{orders}:dlq") == 1, what="dead letter")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="empty PEL")
    assert charges_per_message(db_url) == {ids[0]: 1, ids[2]: 1}
    assert processed_ids(db_url) == [ids[0], ids[2]]


async def test_write_failing_at_the_batch_flush_is_pinned_on_its_own_message(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE orders_seen (order_id VARCHAR(64) PRIMARY KEY)"))
    engine.dispose()
    seen = sa.table("orders_seen", sa.column("order_id"))
    # Message 3 carries an order id already used by message 1: its insert breaks the primary key
    # only when the batch is flushed, after its handler returned.
    ids = [
        redis_client.xadd("orders", {"n": str(i), "order": o}).decode()
        for i, o in enumerate(["a", "b", "c", "b", "d"])
    ]
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100)
    def handle(msg: Message, session: Session) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["order"], amount_cents=1))
        session.execute(sa.insert(seen).values(order_id=msg.fields["order"]))

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(
            lambda: (
                pending_ids(redis_client, "orders", "g") == [ids[3].encode()]
                and len(charges_per_message(db_url)) == 4
            ),
            what="4 charged",
        )
    assert charges_per_message(db_url) == {i: 1 for n, i in enumerate(ids) if n != 3}


async def test_async_handler_gets_an_async_session_in_the_batch_transaction(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 8)
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, batch_size=4)
    async def handle(msg: Message, session: AsyncSession) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))
        if msg.fields["n"] == "5":
            await session.flush()
            raise RuntimeError("after a flush: must be rolled back too")

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(
            lambda: (
                pending_ids(redis_client, "orders", "g") == [ids[5].encode()]
                and len(charges_per_message(db_url)) == 7
            ),
            what="7 charged",
        )
    assert charges_per_message(db_url) == {i: 1 for n, i in enumerate(ids) if n != 5}


async def test_handler_calling_commit_fails_its_message_and_commits_nothing_of_it(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 2)
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100)
    def handle(msg: Message, session: Session) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))
        if msg.fields["n"] == "0":
            session.commit()

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(
            lambda: (
                pending_ids(redis_client, "orders", "g") == [ids[0].encode()]
                and charges_per_message(db_url) == {ids[1]: 1}
            ),
            what="1 charged",
        )


async def test_handler_swallowing_a_failed_statement_never_gets_its_batch_acked_unwritten(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 4)
    app = App("t")

    # Short backoffs: the batch fails as a whole first and its messages are retried on their
    # own; with the default 1 s, growing, a loaded machine ran past the wait below.
    @app.handler(
        "orders",
        group="g",
        idempotency="sql",
        block_ms=100,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
    )
    def handle(msg: Message, session: Session) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))
        session.flush()
        if msg.fields["n"] == "1":
            try:  # on PostgreSQL this aborts the transaction; COMMIT would silently roll back
                session.execute(sa.text("SELECT * FROM no_such_table"))
            except sa.exc.DBAPIError:
                pass

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) >= 3, 30, what="charges")
        await asyncio.sleep(0.3)  # room for retries of message 1: none may charge twice
    charged = charges_per_message(db_url)
    assert all(n == 1 for n in charged.values())
    # Whatever was acked has its writes; on PostgreSQL message 1 stays pending.
    pending = {p.decode() for p in pending_ids(redis_client, "orders", "g")}
    assert set(ids) == set(charged) | pending
    assert not set(charged) & pending


async def test_stop_mid_batch_commits_and_acks_only_the_finished_messages(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 3)
    started = asyncio.Event()
    release = asyncio.Event()
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, batch_size=3)
    async def handle(msg: Message, session: AsyncSession) -> None:
        started.set()
        await release.wait()
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))

    async with running_sql_worker(app, redis_url, db_url) as worker:
        await asyncio.wait_for(started.wait(), 10)
        worker.stop()  # takes effect at once: the loop checks it before each next message
        release.set()
    assert charges_per_message(db_url) == {ids[0]: 1}
    assert pending_ids(redis_client, "orders", "g") == [i.encode() for i in ids[1:]]
    assert processed_ids(db_url) == [ids[0]]


async def test_sql_handler_without_a_database_url_is_a_config_error_at_start(
    redis_url: str,
) -> None:
    with pytest.raises(ConfigError, match="no database URL"):
        async with running_sql_worker(_sql_app(), redis_url, None):
            pass


async def test_missing_table_is_a_config_error_that_names_migrate(
    sqlite_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    _add(redis_client, 1)
    with pytest.raises(ConfigError, match="streamworker migrate"):
        async with running_sql_worker(_sql_app(), redis_url, sqlite_url):
            pass  # the schema is checked at start, before a stop is looked at


async def test_connection_lost_mid_transaction_retries_the_batch_without_acking(
    postgres_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    from streamworker.idempotency.sql.migrate import upgrade

    db = SqlDatabase(postgres_url)
    upgrade(db)
    db.sync_engine.dispose()
    create_business_tables(postgres_url)
    ids = _add(redis_client, 5)
    killed: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, max_deliveries=1)
    def handle(msg: Message, session: Session) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))
        session.flush()
        if msg.fields["n"] == "3" and not killed:
            killed.append(msg.id)
            # The server drops this connection in the middle of the batch's transaction.
            session.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))

    async with running_sql_worker(app, redis_url, postgres_url):
        await eventually(lambda: len(charges_per_message(postgres_url)) == 5, what="5 charged")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="empty PEL")
    assert killed
    assert charges_per_message(postgres_url) == dict.fromkeys(ids, 1)
    # max_deliveries=1: the outage must not have counted as a failed delivery.
    assert redis_client.xlen("{orders}:dlq") == 0


async def test_concurrent_holders_of_one_message_serialise_on_its_row(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    """An XCLAIM race: c1 holds M and is slow; M is claimed to c2, which processes it meanwhile.
    Exactly one of them commits the effects; both ack."""
    create_business_tables(db_url)
    (mid,) = _add(redis_client, 1)
    redis_client.xgroup_create("orders", "g", id="0")
    redis_client.xreadgroup("g", "c1", {"orders": ">"}, count=1)
    db = SqlDatabase(db_url)
    client = open_redis(redis_url)
    in_handler = asyncio.Event()
    go_on = asyncio.Event()
    runs: list[str] = []

    def strategy(consumer: str) -> SqlStrategy:
        return SqlStrategy(
            db,
            client,
            stream="orders",
            group="g",
            consumer=consumer,
            max_deliveries=5,
            is_async=True,
        )

    def message(consumer: str) -> Message:
        return Message(
            id=mid, stream="orders", group="g", consumer=consumer, fields={"n": "0"}, body=None
        )

    @CoroutineHandler
    async def invoke(msg: Message, provided) -> Outcome:  # type: ignore[no-untyped-def]
        runs.append(msg.consumer)
        session = provided[AsyncSession]
        session.add(Charge(message_id=msg.id, order_id="0", amount_cents=1))
        if msg.consumer == "c1":
            in_handler.set()
            await go_on.wait()
        return Outcome(Action.ACK)

    try:
        first = asyncio.ensure_future(strategy("c1").process(Batch([message("c1")], invoke)))
        await asyncio.wait_for(in_handler.wait(), 10)
        # c1 is stuck in its handler (its row claimed, uncommitted); the group hands M to c2.
        redis_client.xclaim("orders", "g", "c2", 0, [mid])
        second = asyncio.ensure_future(strategy("c2").process(Batch([message("c2")], invoke)))
        await asyncio.sleep(0.5)
        assert not second.done()  # blocked on c1's row
        go_on.set()
        outcomes = await asyncio.wait_for(asyncio.gather(first, second), 20)
    finally:
        await client.aclose()
        await db.dispose()
    assert [o[0].action for o in outcomes] == [Action.ACK, Action.ACK]
    assert outcomes[1][0].duplicate
    assert runs == ["c1"]
    assert charges_per_message(db_url) == {mid: 1}
    assert not pending_ids(redis_client, "orders", "g")


async def test_prune_keeps_rows_from_the_oldest_pending_message_on(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 6)
    async with running_sql_worker(_sql_app(fail={"3"}), redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 5, what="5 charged")
        await eventually(lambda: len(pending_ids(redis_client, "orders", "g")) == 1)
    db = SqlDatabase(db_url)
    client = open_redis(redis_url)
    try:
        result = await prune(db, client, "orders", "g")
        assert result.deleted == 3
        # Message 3 is pending: its row and every row above it stay (4 and 5 were acked, but
        # the cheap rule keeps them until the oldest pending entry moves on).
        assert processed_ids(db_url) == ids[4:]
        redis_client.xack("orders", "g", ids[3])
        result = await prune(db, client, "orders", "g")
        assert result.deleted == 2
        assert processed_ids(db_url) == []
    finally:
        await client.aclose()
        await db.dispose()


async def test_worker_prunes_acked_rows_periodically(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    _add(redis_client, 10)
    async with running_sql_worker(_sql_app(), redis_url, db_url, prune_interval_s=0.2):
        await eventually(lambda: len(charges_per_message(db_url)) == 10, what="10 charged")
        await eventually(lambda: processed_ids(db_url) == [], what="rows pruned")


async def test_stale_holder_of_an_acked_and_pruned_message_does_not_apply_it_again(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    """c1 read M and stalled; M was claimed to c2, processed, acked and its row pruned. When c1
    wakes up, it must not take the missing row for a new message."""
    create_business_tables(db_url)
    (mid,) = _add(redis_client, 1)
    redis_client.xgroup_create("orders", "g", id="0")
    redis_client.xreadgroup("g", "c1", {"orders": ">"}, count=1)
    redis_client.xclaim("orders", "g", "c2", 0, [mid])
    db = SqlDatabase(db_url)
    client = open_redis(redis_url)
    runs: list[str] = []

    @CoroutineHandler
    async def invoke(msg: Message, provided) -> Outcome:  # type: ignore[no-untyped-def]
        runs.append(msg.consumer)
        provided[AsyncSession].add(Charge(message_id=msg.id, order_id="0", amount_cents=1))
        return Outcome(Action.ACK)

    def held_by(consumer: str) -> tuple[SqlStrategy, Message]:
        return (
            SqlStrategy(
                db,
                client,
                stream="orders",
                group="g",
                consumer=consumer,
                max_deliveries=5,
                is_async=True,
            ),
            Message(id=mid, stream="orders", group="g", consumer=consumer, fields={}, body=None),
        )

    try:
        c2, m2 = held_by("c2")
        assert (await c2.process(Batch([m2], invoke)))[0].acked
        assert (await prune(db, client, "orders", "g")).deleted == 1
        c1, m1 = held_by("c1")
        outcome = (await c1.process(Batch([m1], invoke)))[0]
    finally:
        await client.aclose()
        await db.dispose()
    assert outcome.action is Action.LEAVE_PENDING
    assert runs == ["c2"]
    assert charges_per_message(db_url) == {mid: 1}


@pytest.mark.slow
async def test_database_down_then_back_loses_nothing_and_applies_nothing_twice(
    own_postgres,
    redis_url: str,
    redis_client: redis.Redis,  # type: ignore[no-untyped-def]
) -> None:
    from streamworker.idempotency.sql.migrate import upgrade

    url = own_postgres.create_database("outage")
    db = SqlDatabase(url)
    upgrade(db)
    db.sync_engine.dispose()
    create_business_tables(url)
    ids = _add(redis_client, 10)
    app = _sql_app(max_deliveries=2)
    async with running_sql_worker(app, redis_url, url) as worker:
        await eventually(lambda: len(charges_per_message(url)) == 10, what="first 10")
        own_postgres.stop()  # fast shutdown: connections are dropped, new ones refused
        ids += _add(redis_client, 10)
        await asyncio.sleep(2.0)  # the worker backs off (capped), it does not crash
        assert not worker.consumers[0].stopping()
        own_postgres.start()
        await eventually(lambda: len(charges_per_message(url)) == 20, 30, what="all 20")
        await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="empty PEL")
        errors = worker.metrics.idempotency_errors.labels(
            stream="orders", group="g", handler=worker.app.handlers[0].name, strategy="sql"
        )._value.get()
    assert charges_per_message(url) == dict.fromkeys(ids, 1)
    assert errors >= 1
    assert redis_client.xlen("{orders}:dlq") == 0
