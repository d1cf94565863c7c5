"""The order handler's tests, with streamworker's test kit: no Redis, and SQLite for the
database (override the ``streamworker_db_url`` fixture to use PostgreSQL).

    pytest examples/sql_orders
"""

from __future__ import annotations

from app import OrderPlaced, app, create_tables


async def test_an_order_becomes_one_charge(streamworker_run, streamworker_db_url):
    create_tables(streamworker_db_url)
    worker = await streamworker_run(app)
    sent = await worker.publish("orders", OrderPlaced(order_id=1, amount_cents=990))
    await worker.drain()
    worker.assert_acked(sent)
    assert worker.processed(sent)
    rows = worker.sql_rows("charges")
    assert [(r["order_id"], r["amount_cents"], r["message_id"]) for r in rows] == [
        (1, 990, sent.id)
    ]


async def test_an_order_without_an_amount_is_dead_lettered_and_charges_nothing(
    streamworker_run, streamworker_db_url
):
    create_tables(streamworker_db_url)
    worker = await streamworker_run(app)
    sent = await worker.publish("orders", OrderPlaced(order_id=7, amount_cents=0))
    await worker.drain()
    worker.assert_dead_lettered(sent, "order 7 has no amount")
    assert worker.sql_rows("charges") == []
