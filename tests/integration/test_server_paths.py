"""``io.capabilities``: which post-7.0 paths a server gets, asked once by its command table
(``COMMAND INFO`` for commands, ``COMMAND DOCS`` arguments for options), on redis-server 7.0 and
on the engine answering as each 8.x version; and the worker's ``server_paths`` start-up event."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
from structlog.testing import capture_logs

from streamworker import App, Message
from streamworker.engine.inproc import sync_client as engine_sync_client
from streamworker.io.capabilities import (
    ServerPaths,
    option_tokens,
    paths_from_replies,
    probe_server,
)
from streamworker.io.redisio import open_redis
from tests.support.cluster import LocalCluster
from tests.support.servers import free_port
from tests.support.worker import eventually, running_worker


def _engine_url(version: str) -> str:
    return f"engine://memory/paths-{uuid.uuid4().hex}?redis_version={version}"


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("7.0", ServerPaths()),
        ("8.2", ServerPaths(ackdel=True)),
        ("8.4", ServerPaths(ackdel=True, claim=True)),
        ("8.6", ServerPaths(ackdel=True, claim=True, idmp=True)),
        ("8.8", ServerPaths(ackdel=True, claim=True, idmp=True, xnack=True)),
        ("8.10", ServerPaths(ackdel=True, claim=True, idmp=True, xnack=True, read_caps=True)),
    ],
)
async def test_each_engine_version_gets_the_paths_its_commands_and_options_offer(
    version: str, expected: ServerPaths
) -> None:
    client = open_redis(_engine_url(version))
    try:
        assert await probe_server(client) == expected
    finally:
        await client.aclose()


async def test_redis_server_7_0_gets_the_fallbacks(redis_url: str) -> None:
    client = open_redis(redis_url)
    try:
        assert await probe_server(client) == ServerPaths()
        # The answer comes from Redis 7.0's real (nested) docs, not from a failed probe.
        docs = await client.execute_command("COMMAND DOCS", "XREADGROUP")
        tokens = option_tokens(docs)["XREADGROUP"]
        assert {"GROUP", "COUNT", "BLOCK", "NOACK", "STREAMS"} <= tokens
        assert "CLAIM" not in tokens
    finally:
        await client.aclose()


async def test_a_server_that_cannot_be_asked_gets_the_fallbacks() -> None:
    client = open_redis(f"redis://127.0.0.1:{free_port()}/0", socket_timeout_s=1.0)
    try:
        assert await probe_server(client) == ServerPaths()
    finally:
        await client.aclose()


def test_options_are_read_from_nested_docs_in_resp2_and_resp3_shapes() -> None:
    """Redis's COMMAND DOCS nests option tokens in blocks (``GROUP group consumer``, the
    ``IDMP pid iid`` block); a path needs the token anywhere in the tree."""
    nested = [
        b"name", b"idmp", b"type", b"oneof", b"arguments",
        [[b"name", b"idmp-with-pid-iid", b"type", b"block", b"arguments",
          [[b"name", b"idmp-token", b"type", b"pure-token", b"token", b"IDMP"]]]],
    ]  # fmt: skip
    resp2_docs = [b"xadd", [b"summary", b"x", b"arguments", [nested]], b"xreadgroup", []]
    resp3_docs = {
        b"xreadgroup": {b"arguments": [{b"token": b"CLAIM"}, {b"token": b"MAXCOUNT"}]},
        b"xadd": {b"arguments": []},
    }
    info = [None, [b"xackdel"], [b"xdelex"], [b"xcfgset"]]
    assert paths_from_replies(info, resp2_docs) == ServerPaths(idmp=True, ackdel=True)
    assert paths_from_replies([None] * 4, resp3_docs) == ServerPaths(claim=True, read_caps=True)


@pytest.mark.parametrize(("version", "claim"), [("7.0", False), ("8.10", True)])
async def test_the_worker_says_at_start_up_which_paths_the_server_gets(
    version: str, claim: bool
) -> None:
    url = _engine_url(version)
    app = App("t")

    @app.handler("orders", group="billing", block_ms=100)
    async def handle(msg: Message) -> None:
        pass

    with capture_logs() as logs:
        async with running_worker(app, url):
            await eventually(lambda: any(e["event"] == "worker_started" for e in logs))
    (event,) = [e for e in logs if e["event"] == "server_paths"]
    assert event["claim"] is claim
    assert event["xnack"] is claim
    assert event["release"] == ("xnack" if claim else "xclaim")
    assert event["reclaim"] == ("claim+xautoclaim" if claim else "xautoclaim")


async def test_on_a_server_with_claim_the_consume_loop_takes_a_dead_consumers_entries() -> None:
    """https://redis.io/docs/latest/commands/xreadgroup/ (CLAIM): the idle entries come with
    the read; the reclaimer's XAUTOCLAIM pass is left for hygiene and does not get there first."""
    url = _engine_url("8.10")
    sync: redis.Redis = engine_sync_client(url)
    sync.xadd("orders", {"n": "1"})
    sync.xgroup_create("orders", "billing", id="0")
    sync.xreadgroup("billing", "dead-pod", {"orders": ">"}, count=1)
    seen: list[int] = []
    app = App("t")

    @app.handler("orders", group="billing", claim_idle_ms=300, block_ms=50)
    async def handle(msg: Message) -> None:
        seen.append(msg.delivery_count)

    with capture_logs() as logs:
        async with running_worker(app, url) as worker:
            await eventually(lambda: seen == [2], timeout_s=10)
            await asyncio.sleep(0.1)
            taken_by_reclaimer = worker.reclaimers[0].claimed_total
    reclaimed = [e for e in logs if e["event"] == "entries_reclaimed"]
    assert [e.get("by") for e in reclaimed] == ["claim"]
    assert taken_by_reclaimer == 0


async def test_every_node_of_a_redis_cluster_is_asked(redis_cluster: LocalCluster) -> None:
    """A 3-master Redis 7.0 cluster: every node answers, none has the 8.x paths."""
    client = open_redis(redis_cluster.url)
    try:
        assert await probe_server(client) == ServerPaths()
    finally:
        await client.aclose()
