"""The test kit on a user-given database: the ``streamworker_db_url`` fixture overridden, as a
user's conftest.py would, with a PostgreSQL URL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from streamworker.testing import TestWorker
from tests.kit import apps

Run = Callable[..., Awaitable[TestWorker]]


@pytest.fixture
def streamworker_db_url(postgres_url: str) -> str:
    return postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)


async def test_sql_rows_on_a_user_given_postgresql(
    streamworker_run: Run, streamworker_db_url: str
) -> None:
    apps.create_tables(streamworker_db_url)
    worker = await streamworker_run(apps.ledger)
    sent = await worker.publish("orders", apps.Order(order_id=11, amount_cents=100))
    await worker.drain()
    worker.assert_acked(sent)
    assert worker.processed(sent)
    assert [r["order_id"] for r in worker.sql_rows("charges", order_id=11)] == [11]
