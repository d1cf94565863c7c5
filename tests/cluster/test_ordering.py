"""``ordered=True`` on a partitioned stream over a real 3-master Redis Cluster: per-key order and
exactly-once effects while workers are SIGKILLed, restarted and stopped."""

from __future__ import annotations

import signal
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import redis

from streamworker.io.keys import lease_key
from streamworker.producing.partitions import PartitionedStream
from tests.support.cluster import LocalCluster
from tests.support.proc import read_lines, stop_process, streamworker, wait_for

APP = "tests/apps/ordered_events.py:app"
EVENTS = PartitionedStream("events", 8)


@pytest.fixture
def cluster(redis_cluster: LocalCluster) -> LocalCluster:
    redis_cluster.flushall()
    return redis_cluster


def _start(url: str, log: Path, consumer: str, **env: str) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        url,
        "--consumer",
        consumer,
        env={"SW_TEST_LOG": str(log), "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5", **env},
    )


def _produce(client: redis.Redis, keys: int, seqs: range) -> dict[str, list[int]]:
    """Interleave the keys' messages, each key's seqs in order; return what was produced."""
    produced: dict[str, list[int]] = defaultdict(list)
    for seq in seqs:
        for k in range(keys):
            key = f"k{k}"
            client.xadd(EVENTS.stream_for(key), {"key": key, "seq": str(seq)})
            produced[key].append(seq)
    return produced


def _handled(client: redis.Redis) -> list[list[str]]:
    return [[v.decode() for v in client.lrange(f"{s}:handled", 0, -1)] for s in EVENTS.streams()]


def _count(client: redis.Redis) -> int:
    return sum(int(client.llen(f"{s}:handled")) for s in EVENTS.streams())


def _holders(client: redis.Redis) -> list[bytes | None]:
    return [client.get(lease_key(s, "audit")) for s in EVENTS.streams()]


def _pending(client: redis.Redis) -> int:
    total = 0
    for s in EVENTS.streams():
        if client.exists(s):
            total += int(client.xpending(s, "audit")["pending"])
    return total


def _check_order_and_once(client: redis.Redis, produced: dict[str, list[int]]) -> None:
    handled: dict[str, list[int]] = defaultdict(list)
    for index, items in enumerate(_handled(client)):
        for item in items:
            key, _, seq = item.partition(":")
            # Every key lives in one partition: the one the producer routed it to.
            assert EVENTS.stream_for(key) == EVENTS.streams()[index]
            handled[key].append(int(seq))
    assert dict(handled) == dict(produced)


@pytest.mark.slow
def test_eight_ordered_partitions_keep_per_key_order_through_sigkill_and_restart(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """pod-a takes all 8 leases, pod-b waits; pod-a is SIGKILLed mid-stream and pod-b takes
    over after the lease TTL; pod-a restarts; pod-b is stopped and pod-a takes over again. For
    every key the handled order is the produced order, and each message is applied once."""
    client = cluster.client()
    produced = _produce(client, keys=24, seqs=range(15))
    total = 24 * 15
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    pod_a = _start(cluster.url, log_a, "pod-a", SW_TEST_SLEEP_S="0.01")
    pod_b: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: _holders(client) == [b"pod-a"] * 8, 60, "pod-a holding every lease")
        pod_b = _start(cluster.url, log_b, "pod-b", SW_TEST_SLEEP_S="0.01")
        wait_for(lambda: _count(client) >= 60, 60, "pod-a at work")
        pod_a.send_signal(signal.SIGKILL)
        pod_a.wait(30)
        killed_at = _count(client)
        for key, seqs in _produce(client, keys=24, seqs=range(15, 25)).items():
            produced[key] += seqs
        total += 24 * 10
        wait_for(lambda: _holders(client) == [b"pod-b"] * 8, 60, "pod-b holding every lease")
        pod_a = _start(cluster.url, log_a, "pod-a", SW_TEST_SLEEP_S="0.01")
        wait_for(lambda: _count(client) >= min(total, killed_at + 100), 90, "pod-b at work")
        err_b = stop_process(pod_b)
        pod_b = None
        wait_for(lambda: _count(client) == total, 120, f"all {total} messages handled")
        wait_for(lambda: _pending(client) == 0, 60, "every PEL empty")
    finally:
        err_a = stop_process(pod_a)
        if pod_b is not None:
            err_b = stop_process(pod_b)
    _check_order_and_once(client, produced)
    assert err_b.count('"lease_taken"') >= 8, err_b[-3000:]
    started = [r[2] for r in read_lines(log_a) + read_lines(log_b) if r[0] == "start"]
    assert len(started) >= total
    assert '"lease_taken"' in err_a, err_a[-3000:]
    client.close()
