"""streamworker.testing: handlers tested on the in-process engine, no Redis."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from streamworker import App, Message, Retry
from streamworker.testing import DrainTimeout, TestWorker
from tests.kit import apps

Run = Callable[..., Awaitable[TestWorker]]


async def test_a_handled_message_is_acked(streamworker_run: Run) -> None:
    worker = await streamworker_run(apps.orders)
    sent = await worker.publish("orders", apps.Order(order_id=1, amount_cents=1250))
    await worker.drain()
    worker.assert_acked(sent)
    assert 1 in apps.charged


async def test_a_dead_letter_carries_its_reason(streamworker_run: Run) -> None:
    worker = await streamworker_run(apps.orders)
    sent = await worker.publish("orders", apps.Order(order_id=2, amount_cents=0))
    await worker.drain()
    worker.assert_dead_lettered(sent, "DeadLetter: order 2 has no amount")


async def test_a_body_that_fails_validation_is_dead_lettered_without_a_handler_call(
    streamworker_run: Run,
) -> None:
    worker = await streamworker_run(apps.orders)
    sent = await worker.publish("orders", fields={"order_id": "x", "amount_cents": "1"})
    await worker.drain()
    out = worker.assert_dead_lettered(sent, "body failed validation")
    assert out.attempts == ()


async def test_a_failure_is_retried_and_then_acked(streamworker_run: Run) -> None:
    apps.flaky_failures[3] = 1
    worker = await streamworker_run(apps.orders)
    sent = await worker.publish("orders", apps.Order(order_id=3, amount_cents=5))
    await worker.drain()
    worker.assert_retried(sent, times=1)
    worker.assert_acked(sent)


async def test_a_handler_failing_every_time_is_dead_lettered_after_max_deliveries(
    streamworker_run: Run,
) -> None:
    apps.flaky_failures[4] = 99
    worker = await streamworker_run(apps.orders)
    sent = await worker.publish("orders", apps.Order(order_id=4, amount_cents=5))
    await worker.drain()
    out = worker.assert_dead_lettered(sent, "RuntimeError: payment service timed out")
    assert [a.delivery_count for a in out.attempts] == [1, 2, 3]


async def test_assert_acked_explains_what_happened_instead(streamworker_run: Run) -> None:
    worker = await streamworker_run(apps.orders)
    sent = await worker.publish("orders", apps.Order(order_id=5, amount_cents=0))
    await worker.drain()
    with pytest.raises(
        AssertionError, match="dead-lettered \\(DeadLetter: order 5 has no amount\\)"
    ):
        worker.assert_acked(sent)


async def test_lua_effects_are_applied_with_the_ack(streamworker_run: Run) -> None:
    worker = await streamworker_run(apps.clicks)
    first = await worker.publish("clicks", apps.Click(page="/home", user="ann"))
    await worker.publish("clicks", apps.Click(page="/home", user="bob"))
    await worker.drain()
    effects = worker.assert_effects_applied(first)
    assert [op.command for op in effects] == ["hincrby", "sadd"]
    assert worker.sync_client.hget("{clicks}:views", "/home") == b"2"


async def test_sql_rows_commit_with_the_processed_row(
    streamworker_run: Run, streamworker_db_url: str
) -> None:
    apps.create_tables(streamworker_db_url)
    worker = await streamworker_run(apps.ledger)
    sent = await worker.publish("orders", apps.Order(order_id=7, amount_cents=100))
    bad = await worker.publish("orders", apps.Order(order_id=8, amount_cents=0))
    await worker.drain()
    assert [r["order_id"] for r in worker.sql_rows("charges")] == [7]
    assert worker.processed(sent)
    assert not worker.processed(bad)
    worker.assert_dead_lettered(bad, "no amount")


async def test_publish_encodes_the_body_as_the_handler_reads_it(streamworker_run: Run) -> None:
    worker = await streamworker_run(apps.nested)
    payload = apps.Payload(order=apps.Order(order_id=9, amount_cents=1), tags=["a", "b"])
    sent = await worker.publish("payloads", payload)
    await worker.drain()
    worker.assert_acked(sent)
    assert apps.seen_payloads[-1] == payload


async def test_drain_times_out_naming_the_message_left(streamworker_run: Run) -> None:
    worker = await streamworker_run(apps.slow)
    sent = await worker.publish("later", apps.Order(order_id=1, amount_cents=1))
    with pytest.raises(DrainTimeout) as info:
        await worker.drain(timeout_s=0.5)
    assert f"{sent.id}: delivered 1 time(s); last: Retry" in str(info.value)


async def test_each_worker_runs_on_a_fresh_engine() -> None:
    async with TestWorker(apps.orders) as one:
        await one.publish("orders", apps.Order(order_id=10, amount_cents=1))
        await one.drain()
    async with TestWorker(apps.orders) as two:
        assert await two.client.exists("orders") == 0


def test_the_plugin_is_registered_by_entry_point_for_a_users_suite(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            from pydantic import BaseModel
            from streamworker import App, Message

            app = App("user")

            class Ping(BaseModel):
                n: int

            @app.handler("pings", group="g")
            async def on_ping(msg: Message[Ping]) -> None:
                assert msg.body.n > 0

            async def test_ping(streamworker_run):
                worker = await streamworker_run(app)
                sent = await worker.publish("pings", Ping(n=1))
                await worker.drain()
                worker.assert_acked(sent)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


async def test_a_batch_handler_records_one_attempt_per_message_with_its_own_result() -> None:
    app = App("kit-batch")
    seen: list[int] = []

    @app.handler("orders", group="g", batch=True)
    async def handle(msgs: list[Message[apps.Order]]) -> dict[str, Exception]:
        seen.extend(m.body.order_id for m in msgs)
        first = len(seen) == len(msgs)  # the first call
        return {m.id: Retry(delay_ms=0) for m in msgs if first and m.body.order_id == 2}

    async with TestWorker(app) as worker:
        one = await worker.publish("orders", apps.Order(order_id=1, amount_cents=1))
        two = await worker.publish("orders", apps.Order(order_id=2, amount_cents=1))
        await worker.drain()
        worker.assert_acked(one)
        worker.assert_acked(two)
        worker.assert_retried(two, times=1)
        assert len(worker.attempts(one)) == 1
