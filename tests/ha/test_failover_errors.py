"""The replies of a primary in transition are outages, not failures: they reach the loops as
ConnectionLost. Against a real replica (READONLY, for plain commands and for scripts), and for
the replies a failover produces that a test cannot provoke on demand (LOADING, MASTERDOWN)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.errors import ConnectionLost
from streamworker.io.redisio import LuaScript, connection_errors, open_redis, primary_watch
from tests.support.proc import wait_for
from tests.support.servers import RedisServer


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[RedisServer]:
    """A replica whose primary holds one entry pending in group ``g`` of ``orders``."""
    primary = RedisServer(tmp_path / "primary").start()
    server = RedisServer(
        tmp_path / "replica", extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    ).start()
    p = primary.client()
    p.xadd("orders", {"n": "1"}, id="1-1")
    p.xgroup_create("orders", "g", id="0")
    p.xreadgroup("g", "c", {"orders": ">"})

    def replicated() -> bool:
        try:
            return bool(server.client().xpending("orders", "g")["pending"] == 1)
        except redis.ResponseError:  # NOGROUP until the group arrives
            return False

    wait_for(replicated, 20, "the pending entry on the replica")
    yield server
    server.stop()
    primary.stop()


@pytest.fixture
async def replica_client(replica: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = open_redis(replica.url, socket_timeout_s=5)
    yield client
    await client.aclose()


@pytest.mark.parametrize(
    "error",
    [
        rex.ReadOnlyError("You can't write against a read only replica."),
        rex.BusyLoadingError("Redis is loading the dataset in memory"),
        rex.MasterDownError(
            "Link with MASTER is down and replica-serve-stale-data is set to 'no'."
        ),
        rex.ConnectionError("Connection reset by peer"),
    ],
    ids=["READONLY", "LOADING", "MASTERDOWN", "reset"],
)
async def test_a_failover_reply_is_a_lost_connection(error: Exception) -> None:
    with pytest.raises(ConnectionLost):
        async with connection_errors():
            raise error


async def test_a_write_to_a_demoted_primary_is_a_lost_connection_counted_once(
    replica_client: aioredis.Redis,
) -> None:
    watch = primary_watch(replica_client)
    assert watch is not None
    for _ in range(2):
        with pytest.raises(ConnectionLost, match="ReadOnlyError"):
            async with connection_errors():
                await replica_client.xadd("orders", {"n": "1"})
    assert watch.changes == 1  # the second READONLY came on a connection made after the first


async def test_a_script_that_writes_on_a_demoted_primary_is_a_lost_connection(
    replica_client: aioredis.Redis,
) -> None:
    # The strategies' scripts (apply effects, dead-letter, ack) meet READONLY at their first
    # write: the script stops there, nothing of it applied; the entry stays pending.
    script = LuaScript("dead_letter")
    with pytest.raises(ConnectionLost, match="ReadOnlyError"):
        await script(replica_client, ["orders", "orders:dlq"], ["g", "1-1", "c", 1, "r", "h", 0])
    assert await replica_client.xlen("orders:dlq") == 0
    assert (await replica_client.xpending("orders", "g"))["pending"] == 1
