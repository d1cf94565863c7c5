"""A stream's slot moves to another master (``CLUSTER SETSLOT … MIGRATING/IMPORTING``, ``MIGRATE``,
``SETSLOT … NODE``) while a producer adds and an ``idempotency="lua"`` worker processes: the
client follows MOVED/ASK, the scripts' TRYAGAIN while the slot's keys are split is retried, and
every message is applied once on the new master."""

from __future__ import annotations

import asyncio

import pytest
from redis.crc import key_slot

from streamworker import App, Effects, Message
from streamworker.io.keys import in_stream_slot
from tests.support.cluster import ClusterNodeProcess, LocalCluster
from tests.support.worker import eventually, running_worker

pytestmark = pytest.mark.slow

STREAM = "moving"
APPLIED = in_stream_slot(STREAM, "applied")


def _node_id(node: ClusterNodeProcess) -> str:
    with node.client() as c:
        return str(c.execute_command("CLUSTER", "MYID").decode())


def _move_slot(
    cluster: LocalCluster, slot: int, src: ClusterNodeProcess, dst: ClusterNodeProcess
) -> None:
    src_id, dst_id = _node_id(src), _node_id(dst)
    with src.client() as s, dst.client() as d:
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while True:
            keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not keys:
                break
            for key in keys:
                # One key at a time: the scripts meet a slot whose keys are split for a while.
                s.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 10_000, "KEYS", key)
        for node in cluster.live_nodes():
            with node.client() as c:
                if c.info("replication")["role"] == "master":
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


async def test_moving_a_streams_slot_under_load_applies_every_message_once(
    redis_cluster: LocalCluster,
) -> None:
    redis_cluster.flushall()
    client = redis_cluster.client()
    slot = key_slot(STREAM.encode())
    src = redis_cluster.master_of(STREAM)
    dst = next(n for n in redis_cluster.live_nodes() if n is not src)
    app = App("t")

    @app.handler(STREAM, group="g", idempotency="lua", block_ms=100, batch_size=10)
    def count(msg: Message) -> Effects:
        return Effects().hincrby(APPLIED, msg.fields["n"], 1)

    added: list[str] = []

    def produce(n: int) -> None:
        for _ in range(n):
            key = str(len(added))
            client.xadd(STREAM, {"n": key})
            added.append(key)

    try:
        async with running_worker(app, redis_cluster.url):
            produce(200)
            await eventually(lambda: client.hlen(APPLIED) >= 50, 30, "work under way")
            with src.client() as c:
                c.config_resetstat()
            mover = asyncio.ensure_future(
                asyncio.to_thread(_move_slot, redis_cluster, slot, src, dst)
            )
            while not mover.done():
                await asyncio.to_thread(produce, 5)
                await asyncio.sleep(0.01)
            await mover
            assert redis_cluster.master_of(STREAM) is dst
            # The worker's and the producer's commands were redirected (MOVED/ASK) by the old master.
            with src.client() as c:
                errors = c.info("errorstats")
            assert (
                errors.get("errorstat_MOVED", {}).get("count", 0)
                + errors.get("errorstat_ASK", {}).get("count", 0)
                > 0
            ), errors
            await asyncio.to_thread(produce, 100)
            await eventually(
                lambda: client.hlen(APPLIED) == len(added), 60, "every message applied"
            )
            await eventually(lambda: client.xpending(STREAM, "g")["pending"] == 0, 30, "empty PEL")
        applied = {k.decode(): int(v) for k, v in client.hgetall(APPLIED).items()}
        assert applied == dict.fromkeys(added, 1)
    finally:
        client.close()
        # Give the slot back, so the session's cluster keeps its original layout.
        await asyncio.to_thread(_move_slot, redis_cluster, slot, dst, src)
        redis_cluster.wait_healthy()
