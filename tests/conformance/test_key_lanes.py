"""Per-key concurrency (``key_field=`` with ``concurrency=N``, issue #36 item 2) on every backend,
with a real worker: one key's messages never run at the same time and run in stream order,
different keys run in parallel, and a slow key does not hold up the others."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import redis
from pydantic import BaseModel

from streamworker import App, Effects, Message
from tests.support.worker import eventually, running_worker


class Order(BaseModel):
    customer_id: str
    n: int


def _publish_interleaved(client: redis.Redis, keys: str, per_key: int) -> None:
    for n in range(per_key):
        for key in keys:
            client.xadd("{orders}", {"customer_id": key, "n": str(n)})


def _publish_bursts(client: redis.Redis, keys: str, total: int) -> dict[str, int]:
    """``total`` messages whose keys come in runs (one key several times in a row, as a busy
    customer's do), numbered per key; returns each key's count."""
    pick = random.Random(7)
    counts = dict.fromkeys(keys, 0)
    while sum(counts.values()) < total:
        key = pick.choice(keys)
        for _ in range(min(pick.randint(1, 4), total - sum(counts.values()))):
            client.xadd("{orders}", {"customer_id": key, "n": str(counts[key])})
            counts[key] += 1
    return counts


@pytest.mark.parametrize("idempotency", ["none", "lua"])
async def test_one_keys_messages_never_overlap_and_run_in_stream_order(
    backend_url: str, sync_client: redis.Redis, idempotency: str
) -> None:
    keys, total = "abcdef", 72
    counts = _publish_bursts(sync_client, keys, total)
    running: dict[str, int] = {}
    overlaps: list[str] = []
    order: dict[str, list[int]] = {k: [] for k in keys}
    active = 0
    peak = 0
    app = App("t")

    @app.handler(
        "{orders}",
        group="g",
        idempotency=idempotency,
        key_field="customer_id",
        concurrency=3,
        batch_size=total,
        block_ms=100,
    )
    async def handle(msg: Message[Order]) -> Any:  # Effects with "lua", None with "none"
        nonlocal active, peak
        key = msg.body.customer_id
        if running.get(key):
            overlaps.append(key)
        running[key] = running.get(key, 0) + 1
        active += 1
        peak = max(peak, active)
        # Let the other lanes run: without lanes, or with a broken one, they would overlap here.
        for _ in range(3):
            await asyncio.sleep(0)
        order[key].append(msg.body.n)
        active -= 1
        running[key] -= 1
        return Effects().incr("{orders}:handled") if idempotency == "lua" else None

    async with running_worker(app, backend_url):
        await eventually(lambda: sum(map(len, order.values())) == total)
    assert overlaps == []
    assert order == {k: list(range(counts[k])) for k in keys}
    assert peak == 3  # different keys ran in parallel, never more than concurrency
    if idempotency == "lua":
        assert sync_client.get("{orders}:handled") == str(total).encode()


async def test_a_slow_key_does_not_hold_up_the_other_keys(
    backend_url: str, sync_client: redis.Redis
) -> None:
    # The slow key's three messages come first and wait until every fast message has run: with
    # one lane, or slots that a hot key's waiting messages could fill, the worker would never get
    # to the fast ones.
    for n in range(3):
        sync_client.xadd("{orders}", {"customer_id": "slow", "n": str(n)})
    _publish_interleaved(sync_client, "xyz", 4)
    fast_done = asyncio.Event()
    handled: list[tuple[str, int]] = []
    app = App("t")

    @app.handler(
        "{orders}", group="g", key_field="customer_id", concurrency=2, batch_size=20, block_ms=100
    )
    async def handle(msg: Message[Order]) -> None:
        if msg.body.customer_id == "slow":
            await fast_done.wait()
        handled.append((msg.body.customer_id, msg.body.n))
        if sum(1 for key, _ in handled if key != "slow") == 12:
            fast_done.set()

    async with running_worker(app, backend_url):
        await eventually(lambda: len(handled) == 15)
    assert handled[-3:] == [("slow", 0), ("slow", 1), ("slow", 2)]
    assert sync_client.xpending("{orders}", "g")["pending"] == 0


async def test_a_key_function_picks_the_lanes(backend_url: str, sync_client: redis.Redis) -> None:
    # The key is the customer's region: two customers of one region share a lane.
    for n in range(6):
        sync_client.xadd("{orders}", {"customer_id": f"eu-{n % 2}", "n": str(n)})
    running = 0
    overlaps = 0
    seen: list[int] = []
    app = App("t")

    @app.handler(
        "{orders}",
        group="g",
        key_field=lambda m: m.body.customer_id.split("-")[0],
        concurrency=4,
        batch_size=6,
        block_ms=100,
    )
    async def handle(msg: Message[Order]) -> None:
        nonlocal running, overlaps
        overlaps += running
        running += 1
        await asyncio.sleep(0)
        seen.append(msg.body.n)
        running -= 1

    async with running_worker(app, backend_url):
        await eventually(lambda: len(seen) == 6)
    assert overlaps == 0
    assert seen == list(range(6))


async def test_a_handlers_in_flight_bound_caps_its_running_messages(
    backend_url: str, sync_client: redis.Redis
) -> None:
    for n in range(40):
        sync_client.xadd("{orders}", {"customer_id": f"c{n}", "n": str(n)})
    active = 0
    peak = 0
    seen = 0
    app = App("t")

    @app.handler(
        "{orders}", group="g", batch_size=20, concurrency=20, block_ms=100, max_in_flight=3
    )
    async def handle(msg: Message[Order]) -> None:
        nonlocal active, peak, seen
        active += 1
        peak = max(peak, active)
        for _ in range(3):
            await asyncio.sleep(0)
        active -= 1
        seen += 1

    async with running_worker(app, backend_url):
        await eventually(lambda: seen == 40)
    assert peak == 3


async def test_the_workers_in_flight_bound_is_shared_by_its_handlers(
    backend_url: str, sync_client: redis.Redis
) -> None:
    for n in range(30):
        sync_client.xadd("{a}", {"n": str(n)})
        sync_client.xadd("{b}", {"n": str(n)})
    active = 0
    peak = 0
    seen = 0
    app = App("t")

    async def handle(msg: Message) -> None:
        nonlocal active, peak, seen
        active += 1
        peak = max(peak, active)
        for _ in range(3):
            await asyncio.sleep(0)
        active -= 1
        seen += 1

    for stream in ("{a}", "{b}"):
        app.handler(stream, group="g", batch_size=10, concurrency=10, block_ms=100)(handle)
    async with running_worker(app, backend_url, max_in_flight=4):
        await eventually(lambda: seen == 60)
    assert 1 < peak <= 4


async def test_a_byte_bound_sizes_reads_by_the_entries_seen(
    backend_url: str, sync_client: redis.Redis
) -> None:
    # Entries of ~1 KB under a 3.5 KB bound: after a first read of one entry (to learn the size)
    # each read asks for 3, so no more than 3 run at once however large the batch.
    for n in range(30):
        sync_client.xadd("{orders}", {"customer_id": f"c{n}", "n": str(n), "pad": "x" * 1000})
    active = 0
    peak = 0
    seen = 0
    app = App("t")

    @app.handler(
        "{orders}",
        group="g",
        batch_size=30,
        concurrency=30,
        block_ms=100,
        max_in_flight_bytes=3_500,
    )
    async def handle(msg: Message) -> None:
        nonlocal active, peak, seen
        active += 1
        peak = max(peak, active)
        for _ in range(3):
            await asyncio.sleep(0)
        active -= 1
        seen += 1

    async with running_worker(app, backend_url):
        await eventually(lambda: seen == 30)
    assert peak == 3
