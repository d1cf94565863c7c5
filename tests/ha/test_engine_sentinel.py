"""Sentinel manages ``streamworker engine serve`` too: three redis-server Sentinels monitor an
engine primary with an engine replica (``engine serve --replicaof``); the primary is SIGKILLed,
the Sentinels promote the replica, and streamworker's ``redis+sentinel://`` clients follow."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.engine_server import EngineServerProcess
from tests.support.proc import run_cli, wait_for
from tests.support.sentinel import SERVICE, Sentinel

pytestmark = pytest.mark.slow


@pytest.fixture
def engine_pair(tmp_path: Path) -> Iterator[tuple[EngineServerProcess, EngineServerProcess]]:
    primary = EngineServerProcess(tmp_path / "primary").start()
    replica = EngineServerProcess(
        tmp_path / "replica", extra=("--replicaof", "127.0.0.1", str(primary.port))
    ).start()
    yield primary, replica
    for engine in (replica, primary):
        if engine.proc is not None and engine.proc.poll() is None:
            engine.stop()


def _replica_ready(sentinel: Sentinel, port: int) -> bool:
    try:
        client = sentinel.client()
        state = client.sentinel_master(SERVICE)
        replicas = client.sentinel_slaves(SERVICE)
    except redis.RedisError:
        return False
    return int(state.get("num-other-sentinels", 0)) >= 2 and any(
        int(r["port"]) == port and not r["is_sdown"] for r in replicas
    )


def test_sentinels_fail_an_engine_primary_over_to_its_engine_replica(
    engine_pair: tuple[EngineServerProcess, EngineServerProcess], tmp_path: Path
) -> None:
    primary, replica = engine_pair
    sentinels = [Sentinel(tmp_path / f"sentinel-{i}", primary.port).start() for i in range(3)]
    try:
        url = f"redis+sentinel://{','.join(f'127.0.0.1:{s.port}' for s in sentinels)}/{SERVICE}"
        wait_for(
            lambda: all(_replica_ready(s, replica.port) for s in sentinels),
            30,
            "the Sentinels to find the engine replica and each other",
        )
        first = run_cli("publish", "orders", "n=1", "--redis-url", url)
        assert first.returncode == 0, first.stderr
        replica_client = redis.Redis(port=replica.port, socket_timeout=5)
        wait_for(lambda: replica_client.xlen("orders") == 1, 20, "the entry on the replica")

        assert primary.proc is not None
        primary.proc.kill()
        primary.proc.wait(10)
        started = time.monotonic()
        wait_for(
            lambda: all(s.primary() == ("127.0.0.1", replica.port) for s in sentinels),
            30,
            "the Sentinels to promote the engine replica",
        )
        print(f"\nengine failover: promoted in {time.monotonic() - started:.1f} s")
        assert replica_client.info("replication")["role"] == "master"

        second = run_cli("publish", "orders", "n=2", "--redis-url", url)
        assert second.returncode == 0, second.stderr
        assert [f[b"n"] for _, f in replica_client.xrange("orders")] == [b"1", b"2"]

        # The old primary comes back: the Sentinels make it a replica of the new one.
        primary.start()
        old = redis.Redis(port=primary.port, socket_timeout=5)
        wait_for(
            lambda: old.info("replication")["role"] == "slave" and old.xlen("orders") == 2,
            60,
            "the old engine primary to rejoin as a replica and catch up",
        )
    finally:
        for s in sentinels:
            s.stop()
