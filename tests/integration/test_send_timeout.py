"""A command's send is bounded by the client's socket timeout without a Task per send.

streamworker's asyncio connections bound a send with ``asyncio.timeout`` on the caller's task
(``io.redisio._TimedSends``), where redis-py would run it under ``asyncio.wait_for``: the bound
must hold as redis-py's does (a server that stops reading fails the send after the timeout,
drops the connection, and the client recovers once the server is back), and the send must not
go through ``wait_for``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.io.redisio import open_redis
from tests.support.servers import RedisServer

_TIMEOUT_S = 0.5


@pytest.fixture
def stoppable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    yield server
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGCONT)  # whatever the test left it in
    server.stop()


@contextlib.asynccontextmanager
async def _connected_then_stopped(
    server: RedisServer,
) -> AsyncIterator[tuple[aioredis.Redis, Callable[[], None]]]:
    """A client of ``server`` whose connection is made (its next sends take the timed path),
    then the server SIGSTOPped; with the function that resumes it (SIGCONT)."""
    assert server.proc is not None
    pid = server.proc.pid
    client = open_redis(server.url, socket_timeout_s=_TIMEOUT_S)
    try:
        await client.ping()
        os.kill(pid, signal.SIGSTOP)
        yield client, lambda: os.kill(pid, signal.SIGCONT)
    finally:
        os.kill(pid, signal.SIGCONT)
        await client.aclose()


@pytest.mark.asyncio
async def test_a_send_to_a_server_that_stopped_reading_fails_after_the_timeout(
    stoppable_redis: RedisServer,
) -> None:
    async with _connected_then_stopped(stoppable_redis) as (client, resume):
        # More than the two sockets' buffers hold: the send itself must wait for the server.
        value = b"x" * (64 * 1024 * 1024)
        started = time.monotonic()
        with pytest.raises(rex.TimeoutError, match="Timeout writing to socket"):
            await client.set("big", value)
        waited = time.monotonic() - started
        assert _TIMEOUT_S * 0.9 <= waited < _TIMEOUT_S + 10, waited
        resume()
        # The half-sent connection was dropped: the next command gets a fresh one.
        assert await client.ping() is True
        assert await client.exists("big") == 0


@pytest.mark.asyncio
async def test_a_reply_that_does_not_come_still_times_out_the_read(
    stoppable_redis: RedisServer,
) -> None:
    async with _connected_then_stopped(stoppable_redis) as (client, resume):
        with pytest.raises(rex.TimeoutError):
            await client.get("k")  # sent (a few bytes fit), never answered
        resume()
        assert await client.ping() is True


@pytest.mark.asyncio
async def test_sends_on_a_connected_client_do_not_go_through_wait_for(
    redis_url: str, request: pytest.FixtureRequest
) -> None:
    client = open_redis(redis_url, socket_timeout_s=5.0)
    try:
        await client.ping()
        calls = request.getfixturevalue("wait_for_calls")  # from here on
        for n in range(20):
            await client.xadd("s", {"n": n})
        assert await client.xlen("s") == 20
        assert calls == []
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_send_cancelled_from_outside_stays_a_cancellation(
    stoppable_redis: RedisServer,
) -> None:
    # A worker that stops cancels its tasks: a send it cancels must end as a cancellation (not a
    # TimeoutError), leave the connection's timeout as it was, and the client must work after.
    async with _connected_then_stopped(stoppable_redis) as (client, resume):
        pool = client.connection_pool
        task = asyncio.ensure_future(client.set("big", b"x" * (64 * 1024 * 1024)))

        def sending() -> bool:  # the timed send is under way: redis-py's own bound is off
            in_use = pool._in_use_connections
            return any(conn.socket_timeout is None for conn in in_use)

        deadline = asyncio.get_running_loop().time() + 30
        while not sending():
            assert not task.done(), task
            assert asyncio.get_running_loop().time() < deadline, "the send never began"
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        resume()
        assert await client.ping() is True
        for conn in [*pool._available_connections, *pool._in_use_connections]:
            assert conn.socket_timeout == _TIMEOUT_S
