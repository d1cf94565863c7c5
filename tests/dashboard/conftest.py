"""Fixtures of the dashboard tests: the same data on a real redis-server and on the embedded
engine, built with plain commands and streamworker's own dead-letter script."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from streamworker.io.keys import dead_letter_stream
from streamworker.io.luasource import lua_source
from streamworker.io.redisio import open_sync_redis

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 1">'
BINARY = b"\x00\xff\xfe binary \x01"
HUGE = "A" * 5000


@dataclass
class Store:
    """A database to show: its URL and a sync client (bytes replies)."""

    kind: str
    url: str
    client: redis.Redis


@pytest.fixture(params=["redis", "engine"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """An empty database on the real redis-server 7.0, then on the embedded engine."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        client = redis.Redis.from_url(url)
        yield Store("redis", url, client)
        client.close()
        return
    from streamworker.engine.inproc import forget_engine

    url = f"engine://memory/dashboard-{uuid.uuid4().hex}"
    client = open_sync_redis(url)
    yield Store("engine", url, client)
    client.close()
    forget_engine(url)


def dead_letter(
    client: redis.Redis, stream: str, group: str, consumer: str, entry_id: bytes, error: str
) -> bytes:
    """Dead-letter a pending entry with the runtime's own script (as a worker would)."""
    script = client.register_script(lua_source("dead_letter"))
    result: bytes = script(
        keys=[stream, dead_letter_stream(stream)],
        args=[group, entry_id, consumer, 5, error, "tests.bill", 1_700_000_000_000],
    )
    return result


@dataclass
class Scene:
    """What :func:`scene` made: ids by role."""

    stream: str
    dlq: str
    ids: list[bytes]
    dead: list[bytes]


def build_scene(client: redis.Redis, *, extra: int = 0) -> Scene:
    """orders: 8 entries (+ ``extra``); group billing: c1 holds 3, c2 holds 2 (one acked), c3
    idle and empty; group audit: nothing read; 3 dead letters (hostile, binary, huge)."""
    stream = "orders"
    ids = [client.xadd(stream, {"n": str(i), "action": "ok"}) for i in range(5)]
    ids.append(client.xadd(stream, {"n": "5", "note": HOSTILE}))
    ids.append(client.xadd(stream, {"n": "6", "blob": BINARY}))
    ids.append(client.xadd(stream, {"n": "7", "big": HUGE}))
    for i in range(extra):
        client.xadd(stream, {"n": f"x{i}"})
    client.xgroup_create(stream, "billing", id="0")
    client.xgroup_create(stream, "audit", id="$")
    client.xreadgroup("billing", "c1", {stream: ">"}, count=3)
    client.xreadgroup("billing", "c2", {stream: ">"}, count=3)
    client.xack(stream, "billing", ids[3])
    # c1 holds 0,1,2; c2 holds 4,5 (3 acked); then c4 reads 6,7 and they are dead-lettered.
    client.xreadgroup("billing", "c4", {stream: ">"}, count=2)
    dead = [
        dead_letter(client, stream, "billing", "c4", i, "ValueError: bad order") for i in ids[6:8]
    ]
    # The hostile entry is dead-lettered by c2 with a hostile error text too.
    dead.append(dead_letter(client, stream, "billing", "c2", ids[5], "KeyError: " + HOSTILE))
    client.xgroup_createconsumer(stream, "billing", "c3")
    return Scene(stream, dead_letter_stream(stream), ids, dead)


@pytest.fixture
def scene(store: Store) -> Scene:
    """The standard scene in ``store``."""
    return build_scene(store.client)
