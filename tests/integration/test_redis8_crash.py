"""SIGKILL of ``streamworker run`` mid-batch, then another consumer takes the dead one's entries
over: on ``streamworker engine serve --redis-version 8.10`` by the consume loop's ``XREADGROUP …
CLAIM``, on redis-server 7.0 by the reclaimer's XAUTOCLAIM; the same expectations on both
(tests/apps/lua_counters.py, ``idempotency="lua"``): every order applied exactly once, the
taken-over orders delivered a second time, and the PEL empty."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.engine_server import EngineServerProcess
from tests.support.proc import assert_killed, read_lines, run_app, stop_process, wait_for
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow

APP = "tests/apps/lua_counters.py:app"


@pytest.fixture(params=["redis-7.0", "engine-8.10"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url, the reclaim path the worker must report)."""
    if request.param == "redis-7.0":
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        redis_server.client().flushall()
        yield redis_server.url, "xautoclaim"
        return
    engine = EngineServerProcess(tmp_path / "engine", extra=("--redis-version", "8.10")).start()
    try:
        yield engine.url, "claim+xautoclaim"
    finally:
        engine.stop()


def _start(url: str, log: Path, consumer: str, **env: str) -> subprocess.Popen[bytes]:
    return run_app(
        APP, url, consumer, {"SW_TEST_LOG": str(log), "SW_TEST_CLAIM_IDLE_MS": "500", **env}
    )


def _events(stderr: str, name: str) -> list[dict[str, object]]:
    out = []
    for line in stderr.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == name:
            out.append(event)
    return out


def test_sigkill_mid_batch_then_another_consumer_takes_over_and_applies_each_order_once(
    server: tuple[str, str], tmp_path: Path
) -> None:
    url, reclaim = server
    client = redis.Redis.from_url(url)
    ids = [client.xadd("orders", {"n": str(i)}).decode() for i in range(12)]
    # Order 7 is the third message of batch 2: orders 5 and 6 have run, nothing of it applied.
    first = _start(url, tmp_path / "run1.log", "pod-0", SW_TEST_KILL="handler:7")
    assert_killed(first)
    applied = {k.decode() for k in client.hkeys("{orders}:applied")}
    assert applied == set(ids[:5])
    stranded = [
        r["message_id"].decode() for r in client.xpending_range("orders", "billing", "-", "+", 100)
    ]
    assert stranded == ids[5:10]

    second = _start(url, tmp_path / "run2.log", "pod-1")
    try:
        wait_for(lambda: client.hlen("{orders}:applied") == len(ids), 30, "every order applied")
        wait_for(lambda: client.xpending("orders", "billing")["pending"] == 0, 30, "empty PEL")
    finally:
        err = stop_process(second)
    assert {
        k.decode(): int(v) for k, v in client.hgetall("{orders}:applied").items()
    } == dict.fromkeys(ids, 1)
    assert client.get("{orders}:total") == b"12"
    # pod-1 handled the dead pod's batch as second deliveries, then the rest as first ones.
    runs = {row[1]: int(row[3]) for row in read_lines(tmp_path / "run2.log") if row[0] == "start"}
    assert {i: runs[i] for i in ids[5:10]} == dict.fromkeys(ids[5:10], 2)
    assert {i: runs[i] for i in ids[10:]} == dict.fromkeys(ids[10:], 1)
    (paths,) = _events(err, "server_paths")
    assert paths["reclaim"] == reclaim
    by = {e.get("by") for e in _events(err, "entries_reclaimed")}
    assert by == ({"claim"} if reclaim.startswith("claim") else {None})
