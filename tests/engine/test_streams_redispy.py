"""Stream commands through redis-py on an in-process engine (``engine://memory/NAME``), RESP3 (the
redis-py 8 default) and RESP2: what a worker built on redis-py actually sees."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from redis.exceptions import ResponseError

from streamworker.engine.inproc import async_client, engine_from_url, forget_engine, sync_client


@pytest.fixture
def url() -> Iterator[str]:
    u = f"engine://memory/{uuid.uuid4().hex}"
    yield u
    forget_engine(u)


@pytest.fixture(params=[3, 2], ids=["resp3", "resp2"])
def r(request: pytest.FixtureRequest, url: str) -> Iterator[redis.Redis]:
    client = sync_client(url, protocol=request.param)
    yield client
    client.close()


def test_xadd_and_xrange_round_trip(r: redis.Redis) -> None:
    first = r.xadd("s", {"a": "1", "b": "2"})
    r.xadd("s", {"a": "3"})
    entries = r.xrange("s")
    assert entries[0] == (first, {b"a": b"1", b"b": b"2"})
    assert entries[1][1] == {b"a": b"3"}


def test_xadd_maxlen_approximate_through_redis_py(r: redis.Redis) -> None:
    for _ in range(250):
        r.xadd("s", {"f": "v"}, maxlen=100, approximate=True)
    assert 100 <= r.xlen("s") < 200


def test_consumer_group_flow(r: redis.Redis) -> None:
    r.xgroup_create("s", "g", id="0", mkstream=True)
    ids = [r.xadd("s", {"n": str(i)}) for i in range(5)]
    got = r.xreadgroup("g", "c", {"s": ">"}, count=3)
    batch = got[b"s"][0] if isinstance(got, dict) else got[0][1]
    assert [e[0] for e in batch] == ids[:3]
    assert r.xack("s", "g", *[e[0] for e in batch]) == 3
    summary = r.xpending("s", "g")
    assert summary["pending"] == 0


def test_xreadgroup_history_returns_deleted_entries_as_empty(r: redis.Redis) -> None:
    r.xgroup_create("s", "g", id="0", mkstream=True)
    sid = r.xadd("s", {"f": "v"})
    r.xreadgroup("g", "c", {"s": ">"})
    r.xdel("s", sid)
    got = r.xreadgroup("g", "c", {"s": "0"})
    batch = got[b"s"][0] if isinstance(got, dict) else got[0][1]
    assert batch[0][0] == sid
    assert not batch[0][1]


def test_xautoclaim_three_element_reply(r: redis.Redis) -> None:
    r.xgroup_create("s", "g", id="0", mkstream=True)
    a = r.xadd("s", {"f": "1"})
    b = r.xadd("s", {"f": "2"})
    r.xreadgroup("g", "c", {"s": ">"})
    r.xdel("s", a)
    cursor, claimed, deleted = r.xautoclaim("s", "g", "d", 0, "0-0")
    assert (cursor, [e[0] for e in claimed], deleted) == (b"0-0", [b], [a])


def test_xinfo_replies_parse(r: redis.Redis) -> None:
    r.xgroup_create("s", "g", id="0", mkstream=True)
    r.xadd("s", {"f": "v"})
    r.xreadgroup("g", "c", {"s": ">"})
    info = r.xinfo_stream("s")
    assert (info["length"], info["groups"]) == (1, 1)
    groups = r.xinfo_groups("s")
    assert (groups[0]["name"], groups[0]["lag"]) == (b"g", 0)
    consumers = r.xinfo_consumers("s", "g")
    assert (consumers[0]["name"], consumers[0]["pending"]) == (b"c", 1)
    assert "inactive" not in consumers[0]
    full = r.xinfo_stream("s", full=True)
    consumer = full["groups"][0]["consumers"][0]
    assert consumer.get("pel-count", consumer.get(b"pel-count")) == 1


def test_errors_map_to_redis_py_exceptions(r: redis.Redis) -> None:
    r.xgroup_create("s", "g", id="$", mkstream=True)
    with pytest.raises(ResponseError, match="BUSYGROUP"):
        r.xgroup_create("s", "g", id="$")
    with pytest.raises(ResponseError, match="NOGROUP"):
        r.xreadgroup("nog", "c", {"s": ">"})


def test_blocking_xreadgroup_wakes_on_xadd_from_another_thread(url: str) -> None:
    reader = sync_client(url)
    writer = sync_client(url)
    try:
        writer.xgroup_create("s", "g", id="$", mkstream=True)
        threading.Timer(0.05, lambda: writer.xadd("s", {"f": "v"})).start()
        got = reader.xreadgroup("g", "c", {"s": ">"}, block=5000)
        assert got  # woken with the entry (a timeout would give nothing)
        assert got[b"s"][0] if isinstance(got, dict) else got[0][1]
    finally:
        reader.close()
        writer.close()


def test_blocking_xread_times_out_empty(url: str) -> None:
    client = sync_client(url)
    try:
        assert not client.xread({"s": "$"}, block=30)
    finally:
        client.close()


def test_asyncio_blocking_xread_is_woken(url: str) -> None:
    async def main() -> object:
        reader = async_client(url)
        writer = async_client(url)
        try:
            task = asyncio.create_task(reader.xread({"s": "$"}, block=5000))
            engine = engine_from_url(url)
            deadline = time.monotonic() + 10
            while not any(c.blocked is not None for c in list(engine.clients.values())):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.002)
            await writer.xadd("s", {"f": "v"})
            return await asyncio.wait_for(task, 5)
        finally:
            await reader.aclose()
            await writer.aclose()

    got = asyncio.run(main())
    assert got
