"""The reclaimer on every backend: leases, retries, dead letters, deleted entries, dead consumers.
(A SIGKILLed worker process taken over: tests/integration/test_reclaimer.py.)"""

from __future__ import annotations

import asyncio
import time

import redis
from pydantic import BaseModel

from streamworker import App, Message, Retry
from tests.support.worker import eventually, running_worker

# Also on the engine in 8.10 mode (tests/conformance/conftest.py): the post-7.0 paths.
REDIS8_PATHS = True


def _pending(client: redis.Redis, stream: str = "orders", group: str = "billing") -> list[bytes]:
    return [r["message_id"] for r in client.xpending_range(stream, group, "-", "+", 1000)]


async def test_handler_three_times_longer_than_claim_idle_is_not_reclaimed(
    backend_url: str, sync_client: redis.Redis
) -> None:
    for i in range(4):
        sync_client.xadd("orders", {"n": str(i)})
    calls: list[tuple[str, str]] = []

    def make_app(who: str) -> App:
        app = App(who)

        @app.handler("orders", group="billing", batch_size=2, claim_idle_ms=300, block_ms=100)
        async def slow(msg: Message) -> None:
            calls.append((who, msg.id))
            await asyncio.sleep(0.9)

        return app

    async with (
        running_worker(make_app("a"), backend_url, consumer="a"),
        running_worker(make_app("b"), backend_url, consumer="b"),
    ):
        await eventually(lambda: len(calls) >= 4 and not _pending(sync_client), timeout_s=20)
        await asyncio.sleep(0.7)  # a stolen entry would show up as a second call by now
    ids = [mid for _, mid in calls]
    assert len(ids) == 4
    assert len(set(ids)) == 4


async def test_always_failing_handler_ends_in_exactly_one_dead_letter_after_max_deliveries(
    backend_url: str, sync_client: redis.Redis
) -> None:
    mid = sync_client.xadd("orders", {"n": "1"})
    deliveries: list[int] = []
    app = App("t")

    @app.handler("orders", group="billing", max_deliveries=3, retry_backoff_ms=20, block_ms=100)
    async def always_fails(msg: Message) -> None:
        deliveries.append(msg.delivery_count)
        raise RuntimeError(f"payment gateway down (delivery {msg.delivery_count})")

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.xlen("{orders}:dlq") == 1, timeout_s=15)
        await asyncio.sleep(0.3)  # a fourth delivery, were there one, would show by now
    assert deliveries == [1, 2, 3]
    assert sync_client.xlen("{orders}:dlq") == 1
    ((_, fields),) = sync_client.xrange("{orders}:dlq")
    assert fields[b"dlq_id"] == mid
    assert fields[b"dlq_deliveries"] == b"3"
    assert fields[b"dlq_error"] == b"RuntimeError: payment gateway down (delivery 3)"
    assert fields[b"dlq_stream"] == b"orders"
    assert fields[b"n"] == b"1"
    assert not _pending(sync_client)


class Order(BaseModel):
    order_id: int


async def test_body_failing_validation_is_dead_lettered_on_first_delivery(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"order_id": "twelve"})
    calls: list[int] = []
    app = App("t")

    @app.handler("orders", group="billing", block_ms=100)
    async def handle(msg: Message[Order]) -> None:
        calls.append(1)

    async with running_worker(app, backend_url):
        await eventually(lambda: sync_client.xlen("{orders}:dlq") == 1)
    ((_, fields),) = sync_client.xrange("{orders}:dlq")
    assert fields[b"dlq_deliveries"] == b"1"
    assert fields[b"dlq_error"].startswith(b"PermanentFailure: body failed validation: order_id")
    assert calls == []
    assert not _pending(sync_client)


async def test_retries_back_off_with_the_delivery_count(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"n": "1"})
    times: list[float] = []
    app = App("t")

    @app.handler("orders", group="billing", retry_backoff_ms=150, max_deliveries=5, block_ms=100)
    async def flaky(msg: Message) -> None:
        times.append(time.monotonic())
        if len(times) < 3:
            raise RuntimeError("not yet")

    async with running_worker(app, backend_url):
        await eventually(lambda: len(times) == 3 and not _pending(sync_client), timeout_s=10)
    first_gap, second_gap = times[1] - times[0], times[2] - times[1]
    assert first_gap >= 0.15
    assert second_gap >= 0.30


async def test_retry_delay_from_the_handler_is_respected(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"n": "1"})
    times: list[float] = []
    app = App("t")

    @app.handler("orders", group="billing", retry_backoff_ms=10, block_ms=100)
    async def later(msg: Message) -> None:
        times.append(time.monotonic())
        if len(times) == 1:
            raise Retry(delay_ms=400)

    async with running_worker(app, backend_url):
        await eventually(lambda: len(times) == 2 and not _pending(sync_client), timeout_s=10)
    assert times[1] - times[0] >= 0.4


async def test_entry_deleted_while_held_by_a_dead_consumer_is_counted_not_retried(
    backend_url: str, sync_client: redis.Redis
) -> None:
    gone = sync_client.xadd("orders", {"n": "gone"})
    kept = sync_client.xadd("orders", {"n": "kept"})
    sync_client.xgroup_create("orders", "billing", id="0")
    sync_client.xreadgroup("billing", "dead-pod", {"orders": ">"}, count=2)
    sync_client.xdel("orders", gone)
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="billing", claim_idle_ms=100, block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.id)

    async with running_worker(app, backend_url, consumer="rescuer") as worker:
        await eventually(lambda: not _pending(sync_client), timeout_s=10)
        deleted = worker.metrics.messages.labels(
            stream="orders", group="billing", handler=worker.app.handlers[0].name, outcome="deleted"
        )._value.get()
    assert seen == [kept.decode()]
    assert deleted == 1


async def test_idle_consumer_is_deleted_only_after_its_entries_are_claimed(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"n": "1"})
    sync_client.xgroup_create("orders", "billing", id="0")
    sync_client.xreadgroup("billing", "ghost", {"orders": ">"}, count=1)
    sync_client.xgroup_createconsumer("orders", "billing", "empty-ghost")
    await asyncio.sleep(0.3)  # the ghosts have been idle for a while
    seen: list[str] = []
    app = App("t")

    @app.handler(
        "orders", group="billing", claim_idle_ms=200, consumer_gc_idle_ms=250, block_ms=100
    )
    async def handle(msg: Message) -> None:
        seen.append(msg.id)

    def names() -> set[bytes]:
        return {c["name"] for c in sync_client.xinfo_consumers("orders", "billing")}

    async with running_worker(app, backend_url, consumer="live"):
        await eventually(
            lambda: b"empty-ghost" not in names(), timeout_s=10, what="empty ghost deleted"
        )
        await eventually(lambda: len(seen) == 1, timeout_s=10)
        await eventually(
            lambda: names() == {b"live"}, timeout_s=10, what="ghost deleted after the claim"
        )
    assert not _pending(sync_client)


async def test_a_retry_scheduled_while_the_reclaimer_sleeps_wakes_it(
    backend_url: str, sync_client: redis.Redis
) -> None:
    deliveries: list[float] = []
    app = App("t")

    # claim_idle_ms=60000: the reclaimer's own timer comes round every 5 s.
    @app.handler("orders", group="billing", claim_idle_ms=60_000, block_ms=100)
    async def once_more(msg: Message) -> None:
        deliveries.append(time.monotonic())
        if msg.delivery_count == 1:
            raise Retry(delay_ms=0)

    async with running_worker(app, backend_url) as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].backlog_drained.is_set())
        await asyncio.sleep(0.5)  # the reclaimer has gone to sleep until its next round
        sync_client.xadd("orders", {"n": "1"})
        await eventually(lambda: len(deliveries) == 2 and not _pending(sync_client), timeout_s=10)
    # Delivered again at once, not at the reclaimer's next 5 s round.
    assert deliveries[1] - deliveries[0] < 2.0


async def test_a_dead_consumers_entries_are_taken_over_with_the_delivery_counts_they_had(
    backend_url: str, sync_client: redis.Redis
) -> None:
    """Taken over by XAUTOCLAIM (Redis 7.0) or by the consume loop's XREADGROUP … CLAIM (the
    engine in 8.10 mode): the same delivery counts reach the handler and the same entry is
    dead-lettered once over max_deliveries (rule 4 of DESIGN.md), on both paths."""
    fresh = sync_client.xadd("orders", {"n": "fresh"})
    sync_client.xgroup_create("orders", "billing", id="0")
    sync_client.xreadgroup("billing", "dead-pod", {"orders": ">"}, count=1)
    worn = sync_client.xadd("orders", {"n": "worn"})
    sync_client.xreadgroup("billing", "dead-pod", {"orders": ">"}, count=1)
    for _ in range(2):  # two more deliveries of 'worn' to the pod that died: 3 in all
        sync_client.xclaim("orders", "billing", "dead-pod", 0, [worn])
    seen: dict[str, int] = {}
    app = App("t")

    @app.handler("orders", group="billing", claim_idle_ms=200, block_ms=100, max_deliveries=3)
    async def handle(msg: Message) -> None:
        seen[msg.id] = msg.delivery_count

    async with running_worker(app, backend_url, consumer="rescuer"):
        await eventually(
            lambda: not _pending(sync_client) and sync_client.xlen("{orders}:dlq") == 1,
            timeout_s=15,
        )
    assert seen == {fresh.decode(): 2}
    ((_, fields),) = sync_client.xrange("{orders}:dlq")
    assert fields[b"dlq_id"] == worn
    assert fields[b"dlq_deliveries"] == b"4"
