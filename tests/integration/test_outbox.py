"""The transactional outbox: SQL handlers stage entries in their transaction, the relay moves
each to its stream once, in order. SQLite (file, WAL) and PostgreSQL 15, real redis-server."""

from __future__ import annotations

import threading
import time

import pytest
import redis
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker import App, Message
from streamworker.core.codec import decode_message
from streamworker.errors import ConfigError
from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.outbox import Relay, _row_xadd, outbox, pending_rows, publish
from streamworker.io.keys import partition_stream
from streamworker.io.redisio import open_sync_redis
from streamworker.producing.partitions import partition_of
from tests.support.sql import (
    Charge,
    charges_per_message,
    create_business_tables,
    pending_ids,
    running_sql_worker,
    sync_url,
)
from tests.support.worker import eventually


class Payment(BaseModel):
    order_id: int
    cents: int


def _relay(db_url: str, redis_url: str, **kwargs: int) -> Relay:
    return Relay(SqlDatabase(db_url), open_sync_redis(redis_url), **kwargs)


def _payments(client: redis.Redis, stream: str = "payments") -> list[Payment]:
    out = []
    for entry_id, raw in client.xrange(stream):
        msg = decode_message(
            entry_id,
            raw,
            stream=stream,
            group="g",
            consumer="c",
            delivery_count=1,
            model=Payment,
            body_field=None,
        )
        out.append(msg.body)
    return out


def _staged(db_url: str) -> int:
    engine = sa.create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar_one())
    finally:
        engine.dispose()


def _billing_app(fail: frozenset[str] = frozenset()) -> App:
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100, batch_size=10)
    def bill(msg: Message, session: Session) -> None:
        n = int(msg.fields["n"])
        session.add(Charge(message_id=msg.id, order_id=str(n), amount_cents=n))
        publish(session, "payments", Payment(order_id=n, cents=n))
        if msg.fields["n"] in fail:
            raise RuntimeError("declined")

    return app


async def test_a_staged_entry_commits_with_the_handlers_rows_and_is_relayed_once(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    for n in range(20):
        redis_client.xadd("orders", {"n": str(n)})
    async with running_sql_worker(_billing_app(), redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 20, what="20 charges")
    db = SqlDatabase(db_url)
    assert pending_rows(db) == 20
    assert redis_client.exists("payments") == 0  # nothing reaches Redis before the relay
    relay = _relay(db_url, redis_url, batch_size=7)
    while relay.relay_once().rows:
        pass
    assert _payments(redis_client) == [Payment(order_id=n, cents=n) for n in range(20)]
    assert pending_rows(db) == 0
    assert redis_client.keys("{payments}:published:*") == []  # markers go once rows are gone


async def test_a_failed_handler_leaves_no_outbox_row(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    for n in range(6):
        redis_client.xadd("orders", {"n": str(n)})
    async with running_sql_worker(_billing_app(fail=frozenset({"3"})), redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 5, what="5 charges")
        await eventually(
            lambda: len(pending_ids(redis_client, "orders", "g")) == 1, what="one pending"
        )
    _relay(db_url, redis_url).relay_once()
    assert sorted(p.order_id for p in _payments(redis_client)) == [0, 1, 2, 4, 5]


async def test_an_async_handler_stages_through_its_async_session(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", block_ms=100)
    async def bill(msg: Message, session: AsyncSession) -> None:
        publish(session, "payments", {"order_id": msg.fields["n"], "cents": 1})

    for n in range(3):
        redis_client.xadd("orders", {"n": str(n)})
    async with running_sql_worker(app, redis_url, db_url):
        # A plain WAL reader: it never waits for the worker's write lock, which the worker (on
        # this event loop) could not release while this poll blocks the loop.
        await eventually(lambda: _staged(db_url) == 3, what="3 staged rows")
    _relay(db_url, redis_url).relay_once()
    assert [p.order_id for p in _payments(redis_client)] == [0, 1, 2]


def _stage(db_url: str, *values: Payment, **kwargs: object) -> None:
    engine = SqlDatabase(db_url).sync_engine
    with Session(engine) as session, session.begin():
        for value in values:
            publish(session, "payments", value, **kwargs)  # type: ignore[arg-type]


def test_a_row_added_before_a_relay_died_is_not_added_again(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    _stage(db_url, Payment(order_id=1, cents=1), Payment(order_id=2, cents=2))
    relay = _relay(db_url, redis_url)
    # A relay that added the entries and died before deleting the rows: its markers remain.
    with relay.db.sync_engine.connect() as conn:
        conn.begin()
        relay._add([_row_xadd(row, 60_000) for row in relay._lock_rows(conn)])
        conn.rollback()
    assert redis_client.xlen("payments") == 2
    batch = relay.relay_once()
    assert (batch.rows, batch.duplicates) == (2, 2)
    assert redis_client.xlen("payments") == 2
    assert pending_rows(relay.db) == 0


def test_rows_reach_the_stream_in_the_order_they_were_staged(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    for chunk in range(5):
        _stage(db_url, *(Payment(order_id=chunk * 10 + i, cents=0) for i in range(10)))
    relay = _relay(db_url, redis_url, batch_size=3)
    while relay.relay_once().rows:
        pass
    assert [p.order_id for p in _payments(redis_client)] == list(range(50))


def test_a_staged_entry_routes_to_its_partition(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    _stage(db_url, Payment(order_id=1, cents=1), partitions=4, partition_key="cust-9")
    _relay(db_url, redis_url).relay_once()
    stream = partition_stream("payments", partition_of("cust-9", 4))
    assert _payments(redis_client, stream) == [Payment(order_id=1, cents=1)]


def test_an_own_idempotency_key_dedups_across_transactions_and_its_marker_stays(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    _stage(db_url, Payment(order_id=1, cents=1), idempotency_key="order-1")
    _stage(db_url, Payment(order_id=1, cents=1), idempotency_key="order-1")
    batch = _relay(db_url, redis_url).relay_once()
    assert (batch.rows, batch.duplicates, redis_client.xlen("payments")) == (2, 1, 1)
    assert redis_client.exists("{payments}:published:order-1") == 1


def test_stream_trimming_is_stored_with_the_row(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    _stage(db_url, *(Payment(order_id=i, cents=0) for i in range(5)), maxlen=2, approximate=False)
    _relay(db_url, redis_url).relay_once()
    assert [p.order_id for p in _payments(redis_client)] == [3, 4]


def test_publish_refuses_something_that_is_not_a_session(db_url: str) -> None:
    engine = SqlDatabase(db_url).sync_engine
    with engine.connect() as conn, pytest.raises(ConfigError, match="Session or AsyncSession"):
        publish(conn, "payments", {"a": 1})  # type: ignore[arg-type]


def test_the_outbox_table_is_created_by_migrate(db_url: str) -> None:
    engine = SqlDatabase(db_url).sync_engine
    assert sa.inspect(engine).has_table(outbox.name)


def test_rows_a_server_without_the_script_did_not_run_are_resent_in_order(
    db_url: str, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stage(db_url, *(Payment(order_id=i, cents=0) for i in range(5)))
    relay = _relay(db_url, redis_url)
    relay.client.script_flush()
    load = relay.client.script_load
    calls = []

    def load_once_late(source: str) -> object:
        calls.append(source)
        # The first load "happens" before a restart that empties the cache: it is skipped.
        return None if len(calls) == 1 else load(source)

    monkeypatch.setattr(relay.client, "script_load", load_once_late)
    assert relay.relay_once().rows == 5
    assert len(calls) == 2
    assert [p.order_id for p in _payments(redis_client)] == list(range(5))


def test_rows_for_several_streams_each_keep_their_order(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    engine = SqlDatabase(db_url).sync_engine
    with Session(engine) as session, session.begin():
        for i in range(12):
            publish(session, f"s{i % 3}", {"i": i})
    _relay(db_url, redis_url, batch_size=5).relay_once()
    _relay(db_url, redis_url, batch_size=50).relay_once()
    for k in range(3):
        assert [int(f[b"i"]) for _, f in redis_client.xrange(f"s{k}")] == list(range(k, 12, 3))


def test_the_relay_runs_on_the_embedded_engine(sqlite_url: str) -> None:
    from streamworker.idempotency.sql.migrate import upgrade

    db = SqlDatabase(sqlite_url)
    upgrade(db)
    _stage(sqlite_url, *(Payment(order_id=i, cents=i) for i in range(3)), maxlen=10)
    client = open_sync_redis("engine://memory")
    batch = Relay(db, client).relay_once()
    assert (batch.rows, batch.duplicates) == (3, 0)
    assert [p.order_id for p in _payments(client)] == [0, 1, 2]


def test_a_relay_stalled_inside_its_transaction_is_ended_and_another_takes_over(
    postgres_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    from streamworker.errors import DatabaseUnavailable
    from streamworker.idempotency.sql.migrate import upgrade

    upgrade(SqlDatabase(postgres_url))
    _stage(postgres_url, *(Payment(order_id=i, cents=0) for i in range(3)))
    stalled = _relay(postgres_url, redis_url, stalled_timeout_ms=1_000)
    added = threading.Event()
    add = stalled._add

    def add_then_stall(xadds):  # type: ignore[no-untyped-def]
        result = add(xadds)
        added.set()
        time.sleep(3.0)  # e.g. SIGSTOPped, holding the rows' locks, idle in its transaction
        return result

    stalled._add = add_then_stall  # type: ignore[method-assign]
    outcome: list[BaseException] = []

    def run_stalled() -> None:
        try:
            stalled.relay_once()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run_stalled)
    thread.start()
    assert added.wait(10)
    other = _relay(postgres_url, redis_url, lock_timeout_ms=200)
    with pytest.raises(DatabaseUnavailable, match="lock timeout"):
        other.relay_once()
    time.sleep(1.5)  # past the stalled transaction's idle timeout: the server ends it
    batch = other.relay_once()
    thread.join(10)
    assert (batch.rows, batch.duplicates) == (3, 3)
    assert [p.order_id for p in _payments(redis_client)] == [0, 1, 2]
    assert len(outcome) == 1
    assert isinstance(outcome[0], DatabaseUnavailable)  # its delete found its session ended
