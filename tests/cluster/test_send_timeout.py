"""A Redis Cluster client's sends are bounded as a single server's are (``io.redisio._TimedSends``,
tested under a stopped server in tests/integration/test_send_timeout.py), not through
``asyncio.wait_for``: redis-py's cluster client fixes its connection class, and streamworker
swaps its own in for every node, those it starts from and those it finds later. On a real
3-master Redis Cluster."""

from __future__ import annotations

import pytest
import redis.asyncio.cluster as aiocluster

from streamworker.io.redisio import _TimedSends, open_redis
from tests.support.cluster import LocalCluster


@pytest.mark.asyncio
async def test_every_node_sends_without_wait_for(
    redis_cluster: LocalCluster, request: pytest.FixtureRequest
) -> None:
    redis_cluster.flushall()
    # One startup node: the other two masters are found from its slot map.
    first = redis_cluster.nodes[0].address
    client = open_redis(f"redis+cluster://{first}", socket_timeout_s=5.0)
    try:
        assert isinstance(client, aiocluster.RedisCluster)
        keys = [f"s{i}" for i in range(30)]
        # A connection's first send (connect and handshake) goes redis-py's way: one to each
        # node first.
        assert [await client.xlen(k) for k in keys] == [0] * 30
        calls = request.getfixturevalue("wait_for_calls")  # from here on
        for n, key in enumerate(keys):
            await client.xadd(key, {"n": n})
        assert [await client.xlen(k) for k in keys] == [1] * 30
        assert calls == []
        nodes = client.get_nodes()
        # The keys span every master, each reached on a connection of streamworker's class
        # with the client's timeout.
        assert len({client.get_node_from_key(k).name for k in keys}) == len(nodes) == 3
        connections = [c for node in nodes for c in node._connections]
        assert connections
        assert all(isinstance(c, _TimedSends) for c in connections)
        assert {c.socket_timeout for c in connections} == {5.0}
    finally:
        await client.aclose()
