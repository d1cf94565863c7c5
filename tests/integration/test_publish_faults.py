"""Producing through a faulty network (the fault proxy in front of a real redis-server): lost
requests and lost replies, about one in fifty requests each.

A plain XADD whose reply is lost cannot be told from one that never ran: retried (by a caller, or
by a client that retries on its own), the entry is added twice. ``publish(..., idempotency_key=…)``
must add every entry exactly once however often it is retried, and an error must say that the
outcome is unknown and whether publishing again is safe.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from streamworker.errors import ConnectionLost
from streamworker.io.redisio import open_redis
from streamworker.producing.producer import Producer
from tests.support.engine_server import EngineServerProcess
from tests.support.faultproxy import FaultProxy, FaultRates, FaultSchedule
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow

MESSAGES = 2_000
SEED = 20261125
RATES = FaultRates(request_loss=0.02, reply_loss=0.02)


def _proxy(port: int) -> FaultProxy:
    schedule = FaultSchedule(SEED, RATES, protocol="redis")
    return FaultProxy(port, protocol="redis", schedule=schedule)


@pytest.fixture(params=["redis-7.0", "engine-8.10"])
def keyed_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[int, str, str]]:
    """(port, url, the keyed path the producer must take): redis-server 7.0 (the marker
    script), ``streamworker engine serve --redis-version 8.10`` (XADD … IDMP)."""
    if request.param == "redis-7.0":
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        redis_server.client().flushall()
        yield redis_server.port, redis_server.url, "marker"
        return
    engine = EngineServerProcess(tmp_path / "engine", extra=("--redis-version", "8.10")).start()
    try:
        yield engine.port, engine.url, "idmp"
    finally:
        engine.stop()


async def _numbers(client: aioredis.Redis, stream: str) -> Counter[str]:
    entries = await client.xrange(stream, "-", "+")
    return Counter(fields[b"n"].decode() for _, fields in entries)


async def test_publish_with_an_idempotency_key_adds_each_entry_once_through_lost_replies(
    keyed_server: tuple[int, str, str],
) -> None:
    port, url, path = keyed_server
    direct = open_redis(url)
    errors: list[str] = []
    duplicates = 0
    with _proxy(port) as proxy:
        # A short socket timeout: a lost request is noticed after it, like a lost reply.
        client = open_redis(proxy.url, socket_timeout_s=0.5)
        producer = Producer(client, use_idmp=True)
        try:
            for n in range(MESSAGES):
                while True:  # what a caller does with "outcome unknown, safe to retry"
                    try:
                        receipt = await producer.publish(
                            "orders", {"n": str(n)}, idempotency_key=f"order-{n}"
                        )
                    except ConnectionLost as exc:
                        errors.append(str(exc))
                        continue
                    duplicates += receipt.duplicate
                    break
        finally:
            await client.aclose()
        faults = proxy.counts()
    assert producer.keyed_path == path
    counts = await _numbers(direct, "orders")
    await direct.aclose()
    print(
        f"{MESSAGES} publishes, faults {dict(faults)}, errors raised {len(errors)}, "
        f"retries recognised as duplicates {duplicates}, entries {sum(counts.values())}"
    )
    assert sum(faults.values()) > 0.02 * MESSAGES  # the network did fail
    assert counts == dict.fromkeys((str(n) for n in range(MESSAGES)), 1)
    assert duplicates > 0  # some retries happened after Redis had added the entry
    for text in errors:
        assert "outcome unknown" in text
        assert "same idempotency_key is safe" in text


async def test_plain_publish_errors_say_the_outcome_is_unknown_and_retries_nothing_itself(
    redis_server: RedisServer,
) -> None:
    redis_server.client().flushall()
    direct = open_redis(redis_server.url)
    failed: dict[str, str] = {}
    with _proxy(redis_server.port) as proxy:
        client = open_redis(proxy.url, socket_timeout_s=0.5)
        producer = Producer(client)
        try:
            for n in range(MESSAGES):
                try:
                    await producer.publish("plain", {"n": str(n)})
                except ConnectionLost as exc:
                    failed[str(n)] = str(exc)
        finally:
            await client.aclose()
    counts = await _numbers(direct, "plain")
    await direct.aclose()
    added_anyway = sorted(n for n in failed if n in counts)
    print(
        f"{MESSAGES} plain publishes: {len(failed)} errors, of which {len(added_anyway)} were "
        f"added all the same (reply lost); entries added twice: "
        f"{sum(1 for c in counts.values() if c > 1)}"
    )
    # streamworker's client does not retry a command behind the caller's back: nothing twice.
    assert set(counts.values()) == {1}
    # Every publish that returned is there; one that raised may or may not be, which is exactly
    # what its error says (and that only a key or an id makes a retry safe).
    assert set(counts) >= {str(n) for n in range(MESSAGES)} - set(failed)
    assert added_anyway, "a lost reply after the XADD ran should have left its entry behind"
    for text in failed.values():
        assert "outcome unknown" in text
        assert "without idempotency_key= or id=, publishing again may add it twice" in text
