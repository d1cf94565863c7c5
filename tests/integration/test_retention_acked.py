"""``retention="acked"``: an entry leaves the stream once every consumer group has acked it
(``XDELEX … ACKED``, https://redis.io/docs/latest/commands/xdelex/), never before; dead letters
are copied to the DLQ first; a Spark cursor keeps what it has not passed. On the engine in 8.10
mode; redis-server 7.0 has no XDELEX and the worker refuses to start."""

from __future__ import annotations

import uuid

import pytest
import redis

from streamworker import App, ConfigError, Message
from streamworker.engine.inproc import sync_client as engine_sync_client
from streamworker.io.keys import spark_cursors_key
from tests.support.worker import eventually, running_worker


@pytest.fixture
def url() -> str:
    return f"engine://memory/retention-{uuid.uuid4().hex}?redis_version=8.10"


@pytest.fixture
def sync(url: str) -> redis.Redis:
    client: redis.Redis = engine_sync_client(url)
    return client


def _app(seen: list[str], *, fail: bool = False) -> App:
    app = App("t")

    @app.handler(
        "orders", group="billing", block_ms=50, retention="acked", max_deliveries=2,
        retry_backoff_ms=10,
    )  # fmt: skip
    async def handle(msg: Message) -> None:
        seen.append(msg.id)
        if fail:
            raise RuntimeError("no")

    return app


def _pending(sync: redis.Redis, group: str = "billing") -> int:
    return int(sync.xpending("orders", group)["pending"])


async def test_entries_acked_by_the_only_group_leave_the_stream(
    url: str, sync: redis.Redis
) -> None:
    seen: list[str] = []
    for i in range(5):
        sync.xadd("orders", {"n": str(i)})
    async with running_worker(_app(seen), url):
        await eventually(lambda: len(seen) == 5 and sync.xlen("orders") == 0, timeout_s=10)
    assert _pending(sync) == 0


async def test_an_entry_another_group_has_not_read_stays(url: str, sync: redis.Redis) -> None:
    sync.xgroup_create("orders", "audit", id="0", mkstream=True)
    seen: list[str] = []
    for i in range(3):
        sync.xadd("orders", {"n": str(i)})
    async with running_worker(_app(seen), url):
        await eventually(lambda: len(seen) == 3 and _pending(sync) == 0, timeout_s=10)
    assert sync.xlen("orders") == 3  # "audit" still needs them


async def test_a_dead_letter_is_copied_to_the_dlq_before_its_entry_leaves(
    url: str, sync: redis.Redis
) -> None:
    seen: list[str] = []
    mid = sync.xadd("orders", {"n": "poison"})
    async with running_worker(_app(seen, fail=True), url):
        await eventually(lambda: sync.xlen("{orders}:dlq") == 1, timeout_s=10)
        await eventually(lambda: sync.xlen("orders") == 0, timeout_s=10)
    ((_, fields),) = sync.xrange("{orders}:dlq")
    assert fields[b"dlq_id"] == mid
    assert fields[b"n"] == b"poison"


async def test_a_spark_cursor_keeps_what_it_has_not_passed(url: str, sync: redis.Redis) -> None:
    ids = [sync.xadd("orders", {"n": str(i)}) for i in range(4)]
    sync.hset(spark_cursors_key("orders"), "archive", ids[1])  # archived up to the second
    seen: list[str] = []
    async with running_worker(_app(seen), url):
        await eventually(lambda: len(seen) == 4 and _pending(sync) == 0, timeout_s=10)
        await eventually(lambda: sync.xlen("orders") == 2, timeout_s=10)
    assert [e[0] for e in sync.xrange("orders")] == ids[2:]


async def test_a_server_without_xdelex_refuses_the_worker_in_one_line(redis_url: str) -> None:
    with pytest.raises(ConfigError, match=r"retention='acked' .* needs XDELEX"):
        async with running_worker(_app([]), redis_url):
            pass
