"""What every backend must show: delivery, ack, backlog replay, failures left pending, shutdown.

Each test runs on a real redis-server and on the embedded engine (see conftest).
"""

from __future__ import annotations

import asyncio

import redis
from pydantic import BaseModel

from streamworker import App, DeadLetter, Message
from tests.support.worker import eventually, running_worker

# Also on the engine in 8.10 mode (tests/conformance/conftest.py): the post-7.0 paths.
REDIS8_PATHS = True


def pending_ids(client: redis.Redis, stream: str, group: str) -> list[bytes]:
    return [row["message_id"] for row in client.xpending_range(stream, group, "-", "+", 1000)]


async def test_every_message_is_delivered_once_in_order_and_acked(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = [sync_client.xadd("orders", {"n": str(i)}) for i in range(25)]
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", batch_size=10, block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.id)

    async with running_worker(app, backend_url):
        await eventually(lambda: len(seen) == 25, what="25 messages")
        await eventually(lambda: not pending_ids(sync_client, "orders", "g"), what="empty PEL")
    assert seen == [i.decode() for i in ids]


async def test_messages_added_while_running_are_delivered(
    backend_url: str, sync_client: redis.Redis
) -> None:
    seen: list[str] = []
    app = App("t")

    @app.handler("live", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.fields["n"])

    async with running_worker(app, backend_url) as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].backlog_drained.is_set())
        for i in range(5):
            sync_client.xadd("live", {"n": str(i)})
        await eventually(lambda: len(seen) == 5)
    assert seen == ["0", "1", "2", "3", "4"]


async def test_failing_message_stays_pending_while_the_rest_are_acked(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = [sync_client.xadd("orders", {"n": str(i)}) for i in range(5)]
    app = App("t")
    handled: list[str] = []

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        handled.append(msg.fields["n"])
        if msg.fields["n"] == "2":
            raise RuntimeError("cannot charge")

    async with running_worker(app, backend_url):
        await eventually(lambda: len(handled) == 5)
        await eventually(lambda: pending_ids(sync_client, "orders", "g") == [ids[2]])


async def test_backlog_is_replayed_before_new_messages_after_a_restart(
    backend_url: str, sync_client: redis.Redis
) -> None:
    first = [sync_client.xadd("orders", {"n": f"old{i}"}) for i in range(3)]
    sync_client.xgroup_create("orders", "g", id="0")
    # A previous run of consumer c1 read these and died before acking them.
    sync_client.xreadgroup("g", "c1", {"orders": ">"}, count=3)
    later = [sync_client.xadd("orders", {"n": f"new{i}"}) for i in range(2)]
    seen: list[tuple[str, int]] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append((msg.id, msg.delivery_count))

    async with running_worker(app, backend_url, consumer="c1"):
        await eventually(lambda: len(seen) == 5)
        await eventually(lambda: not pending_ids(sync_client, "orders", "g"))
    assert seen == [(i.decode(), 2) for i in first] + [(i.decode(), 1) for i in later]


async def test_another_consumers_pending_entries_are_not_taken_by_the_backlog_read(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"n": "1"})
    sync_client.xgroup_create("orders", "g", id="0")
    sync_client.xreadgroup("g", "someone-else", {"orders": ">"}, count=1)
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.id)

    async with running_worker(app, backend_url, consumer="c1") as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].backlog_drained.is_set())
        await asyncio.sleep(0.2)  # a delivery, were there one, would show by now
    assert seen == []
    assert len(pending_ids(sync_client, "orders", "g")) == 1


async def test_stop_lets_the_running_handler_finish_and_acks_only_it(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = [sync_client.xadd("orders", {"n": str(i)}) for i in range(3)]
    started = asyncio.Event()
    release = asyncio.Event()
    done: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", batch_size=3, block_ms=100)
    async def handle(msg: Message) -> None:
        started.set()
        await release.wait()
        done.append(msg.id)

    async with running_worker(app, backend_url) as worker:
        await asyncio.wait_for(started.wait(), 10)
        worker.stop()  # takes effect at once: the loop checks it before each next message
        release.set()
    # The first message finished and was acked; the rest of the batch were never started.
    assert done == [ids[0].decode()]
    assert pending_ids(sync_client, "orders", "g") == ids[1:]


async def test_shutdown_deadline_abandons_unfinished_work_without_acking(
    backend_url: str, sync_client: redis.Redis
) -> None:
    ids = [sync_client.xadd("orders", {"n": str(i)}) for i in range(2)]
    app = App("t")
    done: list[str] = []
    started = asyncio.Event()

    @app.handler("orders", group="g", batch_size=2, concurrency=2, block_ms=100)
    async def handle(msg: Message) -> None:
        if msg.fields["n"] == "1":
            started.set()
            await asyncio.sleep(60)
        done.append(msg.id)

    async with running_worker(app, backend_url, shutdown_timeout_s=0.3):
        await asyncio.wait_for(started.wait(), 10)
    assert done == [ids[0].decode()]
    assert pending_ids(sync_client, "orders", "g") == [ids[1]]


async def test_sync_handlers_run_with_concurrency(
    backend_url: str, sync_client: redis.Redis
) -> None:
    import threading
    import time

    for i in range(8):
        sync_client.xadd("orders", {"n": str(i)})
    active = 0
    peak = 0
    lock = threading.Lock()
    seen: list[str] = []

    app = App("t")

    @app.handler("orders", group="g", batch_size=8, concurrency=4, block_ms=100)
    def handle(msg: Message) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
            seen.append(msg.fields["n"])

    async with running_worker(app, backend_url):
        await eventually(lambda: len(seen) == 8)
        await eventually(lambda: not pending_ids(sync_client, "orders", "g"))
    assert peak > 1
    assert sorted(seen) == [str(i) for i in range(8)]


async def test_entry_deleted_while_pending_is_acked_not_retried(
    backend_url: str, sync_client: redis.Redis
) -> None:
    gone = sync_client.xadd("orders", {"n": "gone"})
    kept = sync_client.xadd("orders", {"n": "kept"})
    sync_client.xgroup_create("orders", "g", id="0")
    sync_client.xreadgroup("g", "c1", {"orders": ">"}, count=2)
    sync_client.xdel("orders", gone)
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.id)

    async with running_worker(app, backend_url, consumer="c1") as worker:
        await eventually(lambda: not pending_ids(sync_client, "orders", "g"))
        deleted = worker.metrics.messages.labels(
            stream="orders", group="g", handler=worker.app.handlers[0].name, outcome="deleted"
        )._value.get()
    assert seen == [kept.decode()]
    assert deleted == 1


async def test_group_is_created_at_start_id_dollar_skipping_history(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"n": "history"})
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", start_id="$", block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.fields["n"])

    async with running_worker(app, backend_url) as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].backlog_drained.is_set())
        sync_client.xadd("orders", {"n": "new"})
        await eventually(lambda: seen == ["new"])


async def test_group_deleted_under_a_running_worker_stops_its_handler_not_the_others(
    backend_url: str, sync_client: redis.Redis
) -> None:
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        seen.append(msg.fields["n"])

    @app.handler("refunds", group="g", block_ms=100)
    async def refund(msg: Message) -> None:
        seen.append("refund " + msg.fields["n"])

    async with running_worker(app, backend_url) as worker:
        sync_client.xadd("orders", {"n": "1"})
        await eventually(lambda: seen == ["1"])
        sync_client.xgroup_destroy("orders", "g")
        await eventually(lambda: worker.consumers[0].group_lost, what="the handler stopped")
        sync_client.xadd("orders", {"n": "2"})
        sync_client.xadd("refunds", {"n": "3"})
        await eventually(lambda: seen == ["1", "refund 3"], what="the other handler going on")
        ready, details = await asyncio.to_thread(worker.readiness)
        assert not ready
        assert details["stopped_handlers"] == ["orders/g"]
        # Not re-created at start_id "0", which would have delivered "1" again.
        assert sync_client.xinfo_groups("orders") == []


async def test_group_deleted_is_recreated_when_the_handler_opts_in(
    backend_url: str, sync_client: redis.Redis
) -> None:
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100, recreate_lost_group=True)
    async def handle(msg: Message) -> None:
        seen.append(msg.fields["n"])

    async with running_worker(app, backend_url):
        sync_client.xadd("orders", {"n": "1"})
        await eventually(lambda: seen == ["1"])
        sync_client.xgroup_destroy("orders", "g")
        await eventually(
            lambda: [g["name"] for g in sync_client.xinfo_groups("orders")] == [b"g"],
            what="the group re-created",
        )
        sync_client.xadd("orders", {"n": "2"})
        # Re-created at start_id "0": the whole stream again, as the option says.
        await eventually(lambda: seen == ["1", "1", "2"], what="the replay after re-creation")


class Order(BaseModel):
    order_id: int


async def test_validated_body_reaches_the_handler(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("orders", {"order_id": "12"})
    bodies: list[Order] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message[Order]) -> None:
        bodies.append(msg.body)

    async with running_worker(app, backend_url):
        await eventually(lambda: bodies == [Order(order_id=12)])


async def test_several_subscriptions_run_in_one_worker(
    backend_url: str, sync_client: redis.Redis
) -> None:
    sync_client.xadd("a", {"x": "1"})
    sync_client.xadd("b", {"x": "2"})
    seen: set[str] = set()
    app = App("t")

    @app.handler("a", group="g", block_ms=100)
    async def on_a(msg: Message) -> None:
        seen.add("a")

    @app.handler("b", group="g", block_ms=100)
    def on_b(msg: Message) -> None:
        seen.add("b")

    async with running_worker(app, backend_url):
        await eventually(lambda: seen == {"a", "b"})


async def test_dead_letter_raised_by_handler_is_not_retried(
    redis_url: str, redis_client: redis.Redis
) -> None:
    # Dead-lettering runs a Lua script: real Redis here; the engine gains scripting in part 2.
    mid = redis_client.xadd("orders", {"n": "1"})
    calls: list[int] = []
    app = App("t")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        calls.append(msg.delivery_count)
        raise DeadLetter("unknown customer")

    async with running_worker(app, redis_url):
        await eventually(lambda: redis_client.xlen("{orders}:dlq") == 1)
    assert calls == [1]
    assert not pending_ids(redis_client, "orders", "g")
    ((_, fields),) = redis_client.xrange("{orders}:dlq")
    assert fields[b"n"] == b"1"
    assert fields[b"dlq_id"] == mid
    assert fields[b"dlq_error"] == b"DeadLetter: unknown customer"
    assert fields[b"dlq_group"] == b"g"
    assert fields[b"dlq_consumer"] == b"c1"


async def test_a_dead_letter_records_the_handlers_traceback(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xadd("orders", {"n": "1"})
    app = App("t")

    def check_customer(n: str) -> None:
        raise DeadLetter(f"unknown customer {n}")

    @app.handler("orders", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        check_customer(msg.fields["n"])

    async with running_worker(app, redis_url):
        await eventually(lambda: redis_client.xlen("{orders}:dlq") == 1)
    ((_, fields),) = redis_client.xrange("{orders}:dlq")
    trace = fields[b"dlq_traceback"].decode()
    assert trace.startswith("Traceback (most recent call last):")
    assert "in check_customer" in trace
    assert trace.endswith("DeadLetter: unknown customer 1")
    # Additive: the fields before it are as they were, the original entry's first.
    names = list(fields)
    assert names[names.index(b"dlq_at_ms") + 1] == b"dlq_traceback"
