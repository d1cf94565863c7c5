"""A Redis reached over a Unix socket (``unix://``): the clients streamworker opens work on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamworker.io.redisio import open_redis, open_sync_redis
from tests.support.servers import RedisServer


@pytest.fixture
def unix_redis(tmp_path: Path):  # type: ignore[no-untyped-def]
    sock = tmp_path / "redis.sock"
    server = RedisServer(tmp_path / "data", extra_args=["--unixsocket", str(sock)]).start()
    yield f"unix://{sock}"
    server.stop()


async def test_the_asyncio_client_works_over_a_unix_socket(unix_redis: str) -> None:
    client = open_redis(unix_redis, socket_timeout_s=5.0)
    try:
        assert await client.ping()
        await client.xadd("s", {"n": "1"})
        assert await client.xlen("s") == 1
    finally:
        await client.aclose()


def test_the_sync_client_works_over_a_unix_socket(unix_redis: str) -> None:
    client = open_sync_redis(unix_redis)
    try:
        assert client.ping()
    finally:
        client.close()
