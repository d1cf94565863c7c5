"""Bounded client output buffers (``client-output-buffer-limit``) on the engine's TCP server,
side by side with redis-server 7.0.15: a subscriber (pubsub class) or a normal client that
never reads is disconnected once its pending output passes the hard limit, or the soft limit
for longer than its seconds; everyone else keeps being served."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from streamworker.engine import Engine
from tests.engine.conftest import pack
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

# Redis 7.0 leaves normal clients unbounded (normal 0 0 0); the engine bounds them (a client that
# never reads must not exhaust its memory) and keeps Redis's replica and subscriber limits.
ENGINE_DEFAULT = (
    "normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
)
MESSAGE = b"m" * 65536
PARAM = "client-output-buffer-limit"


@pytest.fixture
def servers(redis_server: RedisServer) -> Iterator[list[tuple[str, redis.Redis]]]:
    """The session's redis-server (limits restored afterwards) and a fresh engine server."""
    engine = ThreadedServer()
    real = redis_server.client()
    original = real.config_get(PARAM)[PARAM]
    yield [("redis", real), ("engine", engine.client())]
    real.config_set(PARAM, original)
    real.close()
    engine.close()


def _never_reading(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    # A small receive window: the server's socket fills after a few KB.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


def _port(client: redis.Redis) -> int:
    return int(client.connection_pool.connection_kwargs["port"])


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _next_message(pubsub: redis.client.PubSub, timeout_s: float = 20) -> dict[str, object]:
    """The subscriber's next message, waiting for it up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1)
        if message is not None:
            return message
    raise AssertionError(f"no message within {timeout_s} s")


def _subscribers(client: redis.Redis, channel: str) -> int:
    return int(client.pubsub_numsub(channel)[0][1])


def _pending_output(client: redis.Redis) -> int:
    """The largest output buffer (``omem``) of the server's subscribers."""
    return max((int(c["omem"]) for c in client.client_list(_type="pubsub")), default=0)


def test_the_default_limits_bound_normal_clients_and_keep_redis_subscriber_limits() -> None:
    assert Engine().config.get(PARAM) == ENGINE_DEFAULT


@pytest.mark.parametrize("resp", [2, 3], ids=["resp2", "resp3"])
def test_a_subscriber_that_never_reads_is_dropped_at_the_pubsub_hard_limit(
    servers: list[tuple[str, redis.Redis]], resp: int
) -> None:
    for name, client in servers:
        client.config_set(PARAM, "pubsub 1mb 0 0")
        channel = f"obuf-hard-{resp}"
        hostile = _never_reading(_port(client))
        if resp == 3:
            hostile.sendall(pack(("HELLO", "3")))
        hostile.sendall(pack(("SUBSCRIBE", channel)))
        watcher = client.pubsub()
        watcher.subscribe(channel)
        assert _wait_for(lambda c=client, ch=channel: _subscribers(c, ch) == 2), name
        assert _next_message(watcher)["type"] == "subscribe", name
        sent = 0
        # The watcher reads each message before the next is published, so only the subscriber
        # that never reads can fall behind, however slowly the machine lets the watcher run (a
        # watcher that read at the end was itself dropped on a loaded machine). At most 64 MB:
        # far past 1 MB plus what the kernel buffers.
        while _subscribers(client, channel) == 2 and sent < 1000:
            client.publish(channel, MESSAGE)
            sent += 1
            assert _next_message(watcher)["data"] == MESSAGE, name
        assert _wait_for(lambda c=client, ch=channel: _subscribers(c, ch) == 1), (
            f"{name} kept the subscriber that never reads after {sent} messages"
        )
        # The server stays responsive, and the reading subscriber is still subscribed.
        assert client.ping()
        assert _subscribers(client, channel) == 1, name
        client.publish(channel, b"after")
        assert _next_message(watcher)["data"] == b"after", name
        watcher.close()
        hostile.close()


def test_a_subscriber_over_the_soft_limit_for_its_seconds_is_dropped(
    servers: list[tuple[str, redis.Redis]],
) -> None:
    for name, client in servers:
        client.config_set(PARAM, "pubsub 0 512kb 1")
        channel = "obuf-soft"
        hostile = _never_reading(_port(client))
        hostile.sendall(pack(("SUBSCRIBE", channel)))
        assert _wait_for(lambda c=client, ch=channel: _subscribers(c, ch) == 1), name
        # The soft limit's second counts from when the buffer first passed 512 kB, which on a
        # loaded machine may be early in the publishing: the last moment its buffer was seen
        # under the limit is when the count can have started, at the earliest.
        under_since = time.monotonic()
        for _ in range(200):  # 12.5 MB: past what the kernel buffers and the soft limit
            client.publish(channel, MESSAGE)
            asked = time.monotonic()
            if _pending_output(client) <= 512 * 1024:
                under_since = asked
        # Redis drops it on the first write after the seconds have passed.
        while _subscribers(client, channel) == 1 and time.monotonic() - under_since < 10:
            client.publish(channel, b"x")
            time.sleep(0.1)
        elapsed = time.monotonic() - under_since
        assert _subscribers(client, channel) == 0, name
        assert elapsed >= 1, f"{name} dropped it {elapsed:.2f} s after it passed the soft limit"
        hostile.close()


def test_a_subscriber_under_the_soft_limit_is_kept(
    servers: list[tuple[str, redis.Redis]],
) -> None:
    for name, client in servers:
        client.config_set(PARAM, "pubsub 0 64mb 1")
        channel = "obuf-under"
        hostile = _never_reading(_port(client))
        hostile.sendall(pack(("SUBSCRIBE", channel)))
        assert _wait_for(lambda c=client, ch=channel: _subscribers(c, ch) == 1), name
        for _ in range(20):
            client.publish(channel, MESSAGE)
        time.sleep(1.5)
        client.publish(channel, b"x")
        assert _subscribers(client, channel) == 1, name
        hostile.close()


def test_a_normal_client_with_a_hard_limit_is_dropped_the_same_way(
    servers: list[tuple[str, redis.Redis]],
) -> None:
    for name, client in servers:
        client.set("obuf-big", MESSAGE * 4)
        client.config_set(PARAM, "normal 1mb 0 0")
        hostile = _never_reading(_port(client))
        hostile.sendall(pack(("CLIENT", "SETNAME", "hostile")) + pack(("GET", "obuf-big")) * 200)

        def gone(c: redis.Redis = client) -> bool:
            return all(entry["name"] != "hostile" for entry in c.client_list())

        assert _wait_for(gone), f"{name} kept the normal client that never reads"
        assert client.ping()
        hostile.close()


def test_a_subscriber_that_never_reads_keeps_its_connection_without_a_pubsub_limit(
    servers: list[tuple[str, redis.Redis]],
) -> None:
    for name, client in servers:
        client.config_set(PARAM, "pubsub 0 0 0")
        channel = "obuf-unbounded"
        hostile = _never_reading(_port(client))
        hostile.sendall(pack(("SUBSCRIBE", channel)))
        assert _wait_for(lambda c=client, ch=channel: _subscribers(c, ch) == 1), name
        for _ in range(200):  # 12.5 MB: past what the kernel buffers
            client.publish(channel, MESSAGE)
        assert _subscribers(client, channel) == 1, name
        omem = max(int(entry["omem"]) for entry in client.client_list(_type="pubsub"))
        assert omem > 1024 * 1024, f"{name}: CLIENT LIST omem={omem}"
        hostile.close()
