"""The click counter's tests, with streamworker's test kit: no Redis needed.

pytest examples/click_counters
"""

from __future__ import annotations

from app import TOTAL, VIEWS, Click, app


async def test_each_click_counts_once(streamworker_run):
    worker = await streamworker_run(app)
    sent = await worker.publish("clicks", Click(click_id="c1", page="/home", user="ann"))
    await worker.drain()
    worker.assert_effects_applied(sent)
    assert worker.sync_client.hget(VIEWS, "/home") == b"1"


async def test_a_producer_duplicate_is_acked_without_its_effects(streamworker_run):
    worker = await streamworker_run(app)
    click = Click(click_id="c2", page="/docs", user="bob")
    first = await worker.publish("clicks", click)
    again = await worker.publish("clicks", click)  # a retrying producer's second XADD
    await worker.drain()
    worker.assert_acked(first)
    worker.assert_acked(again)
    assert worker.sync_client.get(TOTAL) == b"1"


async def test_a_click_without_its_id_is_dead_lettered(streamworker_run):
    worker = await streamworker_run(app)
    sent = await worker.publish("clicks", fields={"page": "/home", "user": "ann"})
    await worker.drain()
    worker.assert_dead_lettered(sent)
