"""inproc.py: redis-py (sync and asyncio) talking to the engine with no socket."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.exceptions import ExecAbortError, ResponseError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from streamworker.engine.inproc import (
    AsyncEngineConnection,
    EngineConnection,
    async_client,
    engine_from_url,
    forget_engine,
    sync_client,
)


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh named engine per test."""
    u = f"engine://memory/{uuid.uuid4().hex}"
    yield u
    forget_engine(u)


@pytest.fixture
def r(url: str) -> Iterator[redis.Redis]:
    client = sync_client(url)
    yield client
    client.close()


@pytest.fixture
async def ar(url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = async_client(url)
    yield client
    await client.aclose()


# --- URLs ----------------------------------------------------------------------------------


def test_same_url_gives_the_same_engine() -> None:
    assert engine_from_url("engine://memory") is engine_from_url("engine://memory")


def test_named_engines_are_separate(url: str) -> None:
    assert engine_from_url(url) is not engine_from_url("engine://memory")


def test_clients_of_one_url_share_data(url: str) -> None:
    a, b = sync_client(url), sync_client(url)
    a.set("k", "v")
    assert b.get("k") == b"v"


def test_non_engine_url_is_refused() -> None:
    with pytest.raises(ValueError, match="engine://"):
        engine_from_url("redis://localhost")


def test_pool_uses_the_engine_connection_class(r: redis.Redis) -> None:
    assert r.connection_pool.connection_class is EngineConnection


# --- sync commands -------------------------------------------------------------------------


def test_sync_client_negotiates_resp3_by_default(r: redis.Redis, url: str) -> None:
    r.ping()
    assert [c.resp for c in engine_from_url(url).clients.values()] == [3]


def test_sync_basic_commands(r: redis.Redis) -> None:
    assert r.set("k", "v") is True
    assert r.get("k") == b"v"
    assert r.incr("n") == 1
    assert r.delete("k", "n") == 2


def test_sync_resp3_types_reach_redis_py_callbacks(r: redis.Redis) -> None:
    r.hset("h", mapping={"a": "1"})
    r.zadd("z", {"m": 1.5})
    r.sadd("s", "x")
    assert r.hgetall("h") == {b"a": b"1"}
    assert r.zrange("z", 0, -1, withscores=True) == [(b"m", 1.5)]
    assert r.zscore("z", "m") == 1.5
    assert r.smembers("s") == {b"x"}


def test_sync_resp2_client_gets_resp2_shapes(url: str) -> None:
    c = sync_client(url, protocol=2)
    c.zadd("z", {"m": 1.5})
    c.hset("h", "a", "1")
    assert c.zrange("z", 0, -1, withscores=True) == [(b"m", 1.5)]
    assert c.hgetall("h") == {b"a": b"1"}
    assert [cl.resp for cl in engine_from_url(url).clients.values()] == [2]


def test_sync_decode_responses(url: str) -> None:
    c = sync_client(url, decode_responses=True)
    c.set("k", "välue")
    assert c.get("k") == "välue"
    assert c.info()["redis_version"] == "7.0.15"


def test_sync_error_is_a_response_error(r: redis.Redis) -> None:
    r.set("s", "text")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        r.hget("s", "f")
    assert r.ping() is True


def test_sync_unknown_command_error(r: redis.Redis) -> None:
    with pytest.raises(ResponseError, match="unknown command 'NOPE'"):
        r.execute_command("NOPE", "a")


def test_sync_db_and_client_name_are_applied_on_connect(url: str) -> None:
    c = sync_client(url, db=3, client_name="worker")
    c.set("k", "v")
    assert c.client_getname() == "worker"
    assert engine_from_url(url).keyspace.dbs[3].get(b"k") == b"v"


def test_sync_binary_and_numeric_arguments_are_encoded(r: redis.Redis) -> None:
    r.set(b"\xff\x00", 1.5)
    assert r.get(b"\xff\x00") == b"1.5"


def test_sync_multi_word_command_names_are_split(r: redis.Redis) -> None:
    assert r.execute_command("CONFIG GET", "maxmemory") == {"maxmemory": "0"}


def test_quit_closes_the_connection_and_the_next_command_reconnects(url: str) -> None:
    c = sync_client(url, single_connection_client=True)
    c.set("k", "v")
    first_id = c.client_id()
    assert c.execute_command("QUIT") is True
    assert c.get("k") == b"v"
    assert c.client_id() != first_id
    c.close()


def test_closing_the_client_disconnects_it_from_the_engine(url: str) -> None:
    c = sync_client(url)
    c.ping()
    c.close()
    assert engine_from_url(url).clients == {}


# --- sync pipelines ------------------------------------------------------------------------


def test_transaction_pipeline_returns_the_exec_replies(r: redis.Redis) -> None:
    p = r.pipeline()
    p.set("k", 1).incr("k").get("k")
    assert p.execute() == [True, 2, b"2"]


def test_non_transaction_pipeline_returns_each_reply(r: redis.Redis) -> None:
    p = r.pipeline(transaction=False)
    p.set("k", 1).incr("k").hget("nokey", "f")
    assert p.execute() == [True, 2, None]


def test_pipeline_error_is_returned_when_not_raising(r: redis.Redis) -> None:
    r.set("s", "text")
    p = r.pipeline(transaction=False)
    p.incr("s").set("k", "v")
    out = p.execute(raise_on_error=False)
    assert isinstance(out[0], ResponseError)
    assert out[1] is True


def test_transaction_with_queue_time_error_raises_it(r: redis.Redis) -> None:
    p = r.pipeline()
    p.execute_command("SET", "k")
    p.set("k", "v")
    with pytest.raises((ResponseError, ExecAbortError)):
        p.execute()
    assert r.exists("k") == 0


def test_watch_conflict_raises_watch_error(r: redis.Redis, url: str) -> None:
    other = sync_client(url)
    with r.pipeline() as p:
        p.watch("k")
        other.set("k", "x")
        p.multi()
        p.set("k", "mine")
        with pytest.raises(WatchError):
            p.execute()
    assert r.get("k") == b"x"


def test_watch_without_conflict_commits(r: redis.Redis) -> None:
    with r.pipeline() as p:
        p.watch("k")
        current = p.get("k")
        p.multi()
        p.set("k", (current or b"") + b"!")
        assert p.execute() == [True]
    assert r.get("k") == b"!"


# --- sync blocking -------------------------------------------------------------------------


def test_blpop_wakes_when_another_thread_pushes(r: redis.Redis, url: str) -> None:
    other = sync_client(url)
    _when_blocked(url, 1, lambda: other.rpush("l", "x"))
    start = time.monotonic()
    assert r.blpop(["l"], timeout=5) == (b"l", b"x")
    assert time.monotonic() - start < 2


def test_blpop_times_out_with_none(r: redis.Redis) -> None:
    start = time.monotonic()
    assert r.blpop(["l"], timeout=0.1) is None
    assert time.monotonic() - start >= 0.1


def test_socket_timeout_shorter_than_block_raises_and_drops_the_waiter(url: str) -> None:
    c = sync_client(url, socket_timeout=0.05, retry=Retry(NoBackoff(), 0))
    with pytest.raises(RedisTimeoutError):
        c.blpop(["l"], timeout=5)
    engine = engine_from_url(url)
    assert all(cl.blocked is None for cl in engine.clients.values())


def test_commands_pipelined_behind_a_blocked_one_run_after_it(r: redis.Redis, url: str) -> None:
    other = sync_client(url)
    _when_blocked(url, 1, lambda: other.rpush("l", "x"))
    p = r.pipeline(transaction=False)
    p.blpop(["l"], timeout=5).set("after", "1").get("after")
    assert p.execute() == [(b"l", b"x"), True, b"1"]


def _blocked(url: str) -> int:
    return sum(c.blocked is not None for c in list(engine_from_url(url).clients.values()))


def _when_blocked(url: str, n: int, action: Callable[[], object]) -> None:
    """Run ``action`` in a thread once ``n`` clients of the engine are blocked."""

    def run() -> None:
        deadline = time.monotonic() + 10
        while _blocked(url) < n and time.monotonic() < deadline:
            time.sleep(0.002)
        action()

    threading.Thread(target=run, daemon=True).start()


async def _until_blocked(url: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while _blocked(url) < n:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.002)


def test_xread_block_wakes_on_xadd_from_another_thread(r: redis.Redis, url: str) -> None:
    other = sync_client(url)
    r.xadd("s", {"f": "v0"})
    _when_blocked(url, 1, lambda: other.xadd("s", {"f": "v1"}))
    reply = r.xread({"s": "$"}, block=5000)
    assert reply[0][0] == b"s"
    assert reply[0][1][0][1] == {b"f": b"v1"}


def test_xread_block_times_out_with_none(r: redis.Redis) -> None:
    start = time.monotonic()
    assert r.xread({"s": "$"}, block=100) == []
    assert time.monotonic() - start >= 0.1


# --- asyncio -------------------------------------------------------------------------------


async def test_async_pool_uses_the_async_connection_class(ar: redis.asyncio.Redis) -> None:
    assert ar.connection_pool.connection_class is AsyncEngineConnection


async def test_async_basic_commands(ar: redis.asyncio.Redis) -> None:
    assert await ar.set("k", "v") is True
    assert await ar.get("k") == b"v"
    await ar.hset("h", mapping={"a": "1"})
    assert await ar.hgetall("h") == {b"a": b"1"}


async def test_async_error_is_a_response_error(ar: redis.asyncio.Redis) -> None:
    await ar.set("s", "text")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await ar.hget("s", "f")


async def test_async_quit_then_reconnect(url: str) -> None:
    c = async_client(url, single_connection_client=True)
    await c.set("k", "v")
    await c.execute_command("QUIT")
    assert await c.get("k") == b"v"
    await c.aclose()
    assert engine_from_url(url).clients == {}


async def test_async_transaction_pipeline(ar: redis.asyncio.Redis) -> None:
    async with ar.pipeline() as p:
        p.set("k", 1).incr("k").get("k")
        assert await p.execute() == [True, 2, b"2"]


async def test_async_non_transaction_pipeline(ar: redis.asyncio.Redis) -> None:
    async with ar.pipeline(transaction=False) as p:
        p.set("k", 1).incr("k")
        assert await p.execute() == [True, 2]


async def test_async_blpop_wakes_on_push_from_another_task(
    ar: redis.asyncio.Redis, url: str
) -> None:
    other = async_client(url)

    async def push_later() -> None:
        await _until_blocked(url, 1)
        await other.rpush("l", "x")

    task = asyncio.create_task(push_later())
    assert await ar.blpop(["l"], timeout=5) == (b"l", b"x")
    await task
    await other.aclose()


async def test_async_blpop_wakes_on_push_from_another_thread(
    ar: redis.asyncio.Redis, url: str
) -> None:
    other = sync_client(url)
    _when_blocked(url, 1, lambda: other.rpush("l", "y"))
    assert await ar.blpop(["l"], timeout=5) == (b"l", b"y")


async def test_async_blpop_times_out_with_none(ar: redis.asyncio.Redis) -> None:
    start = time.monotonic()
    assert await ar.blpop(["l"], timeout=0.1) is None
    assert time.monotonic() - start >= 0.1


async def test_async_waiters_are_served_in_fifo_order(url: str) -> None:
    clients = [async_client(url) for _ in range(3)]
    order: list[bytes] = []

    async def waiter(c: redis.asyncio.Redis) -> None:
        reply = await c.blpop(["l"], timeout=5)
        order.append(reply[1])

    tasks = []
    for c in clients:
        tasks.append(asyncio.create_task(waiter(c)))
        await _until_blocked(url, len(tasks))
    producer = async_client(url)
    await producer.rpush("l", "a", "b", "c")
    await asyncio.gather(*tasks)
    assert order == [b"a", b"b", b"c"]
    for c in [*clients, producer]:
        await c.aclose()


async def test_async_cancelled_blocking_read_drops_the_waiter(
    ar: redis.asyncio.Redis, url: str
) -> None:
    task = asyncio.create_task(ar.blpop(["l"], timeout=0))
    await _until_blocked(url, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(c.blocked is None for c in engine_from_url(url).clients.values())


async def test_async_xread_block_wakes_on_xadd_from_another_task(
    ar: redis.asyncio.Redis, url: str
) -> None:
    other = async_client(url)

    async def add_later() -> None:
        await _until_blocked(url, 1)
        await other.xadd("s", {"f": "v"})

    task = asyncio.create_task(add_later())
    reply = await ar.xread({"s": "$"}, block=5000)
    await task
    assert reply[0][1][0][1] == {b"f": b"v"}
    await other.aclose()


# --- same redis-py results as a real server ------------------------------------------------


def _exercise(c: redis.Redis) -> list[object]:
    """A tour of commands whose redis-py results depend on reply shapes."""
    out: list[object] = []
    out.append(c.set("s", "v", ex=100))
    out.append(c.get("s"))
    out.append(c.ttl("s"))
    out.append(c.mget("s", "nokey"))
    out.append(c.incrbyfloat("f", 1.5))
    out.append(c.hset("h", mapping={"a": "1", "b": "2"}))
    out.append(c.hgetall("h"))
    out.append(c.hmget("h", "a", "z"))
    out.append(c.hincrbyfloat("h", "a", 0.5))
    out.append(c.sadd("set", "1", "2"))
    out.append(c.smembers("set"))
    out.append(c.smismember("set", ["1", "9"]))
    out.append(c.zadd("z", {"a": 1.5, "b": 2}))
    out.append(c.zrange("z", 0, -1, withscores=True))
    out.append(c.zrange("z", 0, -1))
    out.append(c.zrangebyscore("z", 1, 2, withscores=True))
    out.append(c.zrevrange("z", 0, -1, withscores=True))
    out.append(c.zscore("z", "a"))
    out.append(c.zmscore("z", ["a", "nope"]))
    out.append(c.zincrby("z", 1, "a"))
    out.append(c.zadd("z", {"a": 1}, incr=True))
    out.append(c.zadd("z", {"new": 1}, xx=True, incr=True))
    out.append(c.zrank("z", "a"))
    out.append(c.zpopmin("z"))
    out.append(c.zpopmax("z", 2))
    out.append(c.rpush("l", "a", "b", "c"))
    out.append(c.lrange("l", 0, -1))
    out.append(c.lpop("l", 2))
    out.append(c.rpop("l"))
    out.append(c.lpop("l", 2))
    out.append(c.blpop(["l"], timeout=0.01))
    cursor, found = c.scan(0, match="s*", count=100)
    out.append((cursor, sorted(found)))
    out.append(c.type("h"))
    out.append(c.exists("s", "h", "nokey"))
    out.append(c.expire("h", 100, nx=True))
    out.append(c.persist("h"))
    out.append(c.config_get("stream-node-max-*"))
    out.append(c.config_set("stream-node-max-entries", 100))
    out.append(c.echo("hi"))
    out.append(c.ping())
    out.append(c.dbsize())
    out.append(c.xadd("st", {"f": "v"}, id="1-1"))
    out.append(c.xrange("st"))
    out.append(c.xread({"st": "0"}))
    out.append(c.xread({"st": "$"}, block=10))
    out.append(c.xlen("st"))
    p = c.pipeline()
    p.set("k", 1).incr("k").hgetall("h").zrange("z", 0, -1, withscores=True)
    out.append(p.execute())
    c.set("str", "x")
    try:
        c.hget("str", "f")
    except ResponseError as e:
        out.append(("error", type(e).__name__, str(e)))
    # HELLO in the middle of a pipeline: each reply is in the protocol of its moment.
    p = c.pipeline(transaction=False)
    p.execute_command("ZRANGE", "z", "0", "-1", "WITHSCORES")
    p.execute_command("HELLO", "2")
    p.execute_command("ZRANGE", "z", "0", "-1", "WITHSCORES")
    p.execute_command("HELLO", "3")
    p.execute_command("ZRANGE", "z", "0", "-1", "WITHSCORES")
    replies = p.execute()
    out.append([replies[0], replies[2], replies[4]])
    return out


@pytest.mark.redis
@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("decode", [False, True])
def test_redis_py_results_match_a_real_server(
    redis_port: int, url: str, protocol: int, decode: bool
) -> None:
    real = redis.Redis(port=redis_port, protocol=protocol, decode_responses=decode)
    real.flushall()
    fake = sync_client(url, protocol=protocol, decode_responses=decode)
    try:
        assert _exercise(fake) == _exercise(real)
    finally:
        real.flushall()
        real.close()
        fake.close()


@pytest.mark.redis
@pytest.mark.parametrize("protocol", [2, 3])
async def test_async_redis_py_results_match_a_real_server(
    redis_port: int, url: str, protocol: int
) -> None:
    async def tour(c: redis.asyncio.Redis) -> list[object]:
        out: list[object] = []
        out.append(await c.hset("h", mapping={"a": "1"}))
        out.append(await c.hgetall("h"))
        out.append(await c.zadd("z", {"a": 1.5}))
        out.append(await c.zrange("z", 0, -1, withscores=True))
        out.append(await c.blpop(["l"], timeout=0.01))
        out.append(await c.xadd("st", {"f": "v"}, id="1-1"))
        out.append(await c.xread({"st": "0"}))
        async with c.pipeline() as p:
            p.set("k", 1).incr("k").smembers("nokey")
            out.append(await p.execute())
        return out

    real = redis.asyncio.Redis(port=redis_port, protocol=protocol)
    await real.flushall()
    fake = async_client(url, protocol=protocol)
    try:
        assert await tour(fake) == await tour(real)
    finally:
        await real.flushall()
        await real.aclose()
        await fake.aclose()
