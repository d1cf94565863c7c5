"""The quick-start handler's tests, with streamworker's test kit: no Redis needed.

pytest examples/quickstart
"""

from __future__ import annotations

from app import OrderPlaced, app, processed


async def test_an_order_is_charged(streamworker_run):
    worker = await streamworker_run(app)
    sent = await worker.publish("orders", OrderPlaced(order_id=1, amount_cents=1250))
    await worker.drain()
    worker.assert_acked(sent)
    assert "charged order 1: 12.50 EUR" in processed


async def test_an_order_without_an_amount_is_dead_lettered(streamworker_run):
    worker = await streamworker_run(app)
    sent = await worker.publish("orders", OrderPlaced(order_id=3, amount_cents=0))
    await worker.drain()
    worker.assert_dead_lettered(sent, "DeadLetter: order 3 has no amount")


async def test_an_order_that_is_not_an_order_is_dead_lettered(streamworker_run):
    worker = await streamworker_run(app)
    sent = await worker.publish("orders", fields={"order_id": "not-a-number", "amount_cents": 1})
    await worker.drain()
    worker.assert_dead_lettered(sent, "body failed validation")
