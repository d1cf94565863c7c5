"""The operator commands on a real 3-master Redis Cluster (``redis+cluster://``), on a partition
of a partitioned stream: ``pending``, ``dlq list``, ``dlq replay``."""

from __future__ import annotations

import json

from streamworker import App, DeadLetter, Message
from streamworker.producing.partitions import PartitionedStream
from tests.support.cluster import LocalCluster
from tests.support.proc import run_cli
from tests.support.servers import RedisServer, free_port
from tests.support.worker import eventually, running_worker

ORDERS = PartitionedStream("orders", 4)


async def test_pending_and_dead_letters_of_a_partition_on_a_cluster(
    redis_cluster: LocalCluster,
) -> None:
    redis_cluster.flushall()
    client = redis_cluster.client()
    stream = ORDERS.stream_for("customer-1")
    app = App("t")

    @app.handler(ORDERS.name, group="billing", partitions=ORDERS.partitions, block_ms=100)
    async def refuse(msg: Message) -> None:
        raise DeadLetter("no amount")

    client.xadd(stream, {"order_id": "1"})
    client.xadd(stream, {"order_id": "2"})
    async with running_worker(app, redis_cluster.url):
        await eventually(lambda: client.xlen(f"{stream}:dlq") == 2, 30, "two dead letters")
    env = {"STREAMWORKER_REDIS_URL": redis_cluster.url}

    pending = run_cli("pending", stream, "billing", "--json", env=env)
    assert pending.returncode == 0, pending.stderr
    assert json.loads(pending.stdout)["pending"] == 0

    listed = run_cli("dlq", "list", stream, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "no amount" in listed.stdout
    assert listed.stdout.count("order_id") == 2

    replayed = run_cli("dlq", "replay", stream, "--all", env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert client.xlen(f"{stream}:dlq") == 0
    assert [f[b"order_id"] for _, f in client.xrange(stream)][-2:] == [b"1", b"2"]
    client.close()


def test_a_cluster_url_naming_a_plain_server_is_a_clear_configuration_error(
    redis_server: RedisServer,
) -> None:
    url = f"redis+cluster://127.0.0.1:{redis_server.port}"
    for args in (["pending", "orders", "g"], ["run", "tests/apps/ordered_events.py:app"]):
        result = run_cli(*args, "--redis-url", url)
        assert result.returncode != 0
        assert "not a cluster node" in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr


def test_an_unreachable_cluster_is_reported_without_a_traceback() -> None:
    url = f"redis+cluster://u:secret@127.0.0.1:{free_port()}"
    for args in (["pending", "orders", "g"], ["run", "tests/apps/ordered_events.py:app"]):
        result = run_cli(*args, "--redis-url", url)
        assert result.returncode != 0
        assert "cannot reach" in result.stderr, result.stderr[-2000:]
        assert "secret" not in result.stderr
        assert "Traceback" not in result.stderr
