"""The worker's asyncio clients pack commands with hiredis: the same bytes, and the same errors,
as redis-py's own Python packing."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.io.redisio import open_redis

ARGS: list[tuple[Any, ...]] = [
    ("XACK", "orders", "billing", b"1-0", b"2-1"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", 100, "STREAMS", "s", ">"),
    ("EVALSHA", "ab" * 20, 2, "k1", "k2", 1.5, -0.0, 2**70, "é", memoryview(b"mv")),
    ("CONFIG GET", "maxmemory"),
    (b"SET", b"k", bytearray(b"v")),
    (b"CONFIG GET", b"maxmemory"),
    ("XACK", "orders", "billing", bytearray(b"1-0"), b"2-1"),
    ("XACK", "orders", "billing", *[f"{i}-0".encode() for i in range(100)]),
]


def test_every_scheme_keeps_its_connection_class() -> None:
    for url, base in [
        ("redis://127.0.0.1:1/0", aioredis.Connection),
        ("rediss://127.0.0.1:1/0", aioredis.SSLConnection),
        ("unix:///x", aioredis.UnixDomainSocketConnection),
    ]:
        assert issubclass(open_redis(url).connection_pool.connection_class, base)


def _python_packing(*args: Any) -> bytes:
    return b"".join(bytes(p) for p in aioredis.Connection().pack_command(*args))


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0"])
@pytest.mark.parametrize("args", ARGS)
def test_the_same_bytes_as_redis_pys_python_packing(url: str, args: tuple[Any, ...]) -> None:
    connection = open_redis(url).connection_pool.make_connection()
    assert b"".join(connection.pack_command(*args)) == _python_packing(*args)


@pytest.mark.parametrize("bad", [None, True, object()])
def test_what_cannot_be_sent_is_a_data_error(bad: object) -> None:
    connection = open_redis("redis://127.0.0.1:1/0").connection_pool.make_connection()
    with pytest.raises(rex.DataError):
        connection.pack_command("SET", "k", bad)
    with pytest.raises(rex.DataError):
        aioredis.Connection().pack_command("SET", "k", bad)
