"""``idempotency="lua"`` on a Redis Cluster node (one node serving all 16384 slots): effects on
keys outside the stream's slot are refused with a clear error, hash-tagged ones apply."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.crc import key_slot

from streamworker import Effects, Message
from streamworker.idempotency.lua import LuaStrategy
from streamworker.outcomes import Action
from tests.support.lua import drain
from tests.support.servers import free_port, missing_service


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A cluster-enabled redis-server owning every slot; yields its port."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing_service("redis-server")
    workdir = tmp_path_factory.mktemp("cluster")
    port = free_port()
    while port > 55535 or not _free(port + 10000):  # the cluster bus listens at port + 10000
        port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(Path(workdir) / "nodes.conf"),
            "--logfile",
            str(Path(workdir) / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                log = (Path(workdir) / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the cluster node exited at start: {log}")
            try:
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        while client.cluster("info")["cluster_state"] != "ok":
            if time.monotonic() > deadline:
                raise RuntimeError("the one-node cluster did not become ok")
            time.sleep(0.05)
        client.close()
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
async def aclient(cluster_node: int) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis(host="127.0.0.1", port=cluster_node)
    await client.flushall()
    yield client
    await client.aclose()


async def test_effect_on_a_key_of_another_slot_is_refused_naming_both_slots(
    aclient: aioredis.Redis,
) -> None:
    await aclient.xgroup_create("clicks", "counters", id="0", mkstream=True)
    await aclient.xadd("clicks", {"page": "a"})
    await aclient.xadd("clicks", {"page": "b"})
    assert key_slot(b"views") != key_slot(b"clicks")

    def count(msg: Message[Any]) -> Effects:
        effects = Effects().incr("{clicks}:total")
        if msg.fields["page"] == "a":
            effects.hincrby("views", "a", 1)  # no hash tag: another slot
        return effects

    strategy = LuaStrategy(aclient, stream="clicks", group="counters", consumer="c1")
    refused, applied = await drain(strategy, aclient, count)
    assert refused.action is Action.LEAVE_PENDING
    assert refused.error == (
        f"EffectError: effect 2 (hincrby 'views'): the key hashes to slot {key_slot(b'views')}, "
        f"but stream 'clicks' is in slot {key_slot(b'clicks')}; on Redis Cluster every key an "
        f"effect writes must carry the stream's hash tag, e.g. '{{clicks}}:…'"
    )
    assert applied.action is Action.ACK
    assert await aclient.get("{clicks}:total") == b"1"  # message b only: nothing of a
    assert not await aclient.exists("views")


async def test_a_stream_with_a_hash_tag_takes_effects_and_dedup_in_its_slot(
    aclient: aioredis.Redis,
) -> None:
    stream = "{shop}:orders"
    await aclient.xgroup_create(stream, "billing", id="0", mkstream=True)
    await aclient.xadd(stream, {"order_id": "o1"})
    await aclient.xadd(stream, {"order_id": "o1"})
    strategy = LuaStrategy(
        aclient, stream=stream, group="billing", consumer="c1", dedup_field="order_id"
    )
    await drain(strategy, aclient, lambda msg: Effects().incr("{shop}:charged"))
    assert await aclient.get("{shop}:charged") == b"1"
    assert await aclient.zcard("{shop}:orders:dedup:billing") == 1
