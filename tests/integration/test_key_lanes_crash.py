"""Per-key concurrency under SIGKILL (issue #36 item 2): ``streamworker run`` of
tests/apps/lua_keyed.py (``idempotency="lua"``, ``key_field="customer"``, ``concurrency=3``) on a
real redis-server, killed while lanes of a batch run, then restarted: every order's effects apply
exactly once, one customer's orders never run at the same time and run in stream order in each
run, and the PEL ends empty."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

from tests.support.proc import assert_killed, read_lines, stop_process, streamworker, wait_for
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow

APP = "tests/apps/lua_keyed.py:app"
CUSTOMERS = "abcd"


def _start(url: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        url,
        "--consumer",
        "pod-0",
        env={"SW_TEST_LOG": str(log), "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5", **env},
    )


def _applied(client: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall("{orders}:applied").items()}


def _check_lanes(log: Path, order: list[str]) -> None:
    """In one run's log: a customer's orders never overlap (each start follows the previous
    one's end) and start in stream order."""
    running: dict[str, str] = {}
    started: dict[str, list[str]] = {}
    for row in read_lines(log):
        if row[0] == "start":
            _, mid, customer, _n = row
            assert customer not in running, f"{mid} started while {running[customer]} ran"
            running[customer] = mid
            started.setdefault(customer, []).append(mid)
        elif row[0] == "end":
            running.pop(row[2], None)
    position = {mid: i for i, mid in enumerate(order)}
    for customer, mids in started.items():
        assert mids == sorted(mids, key=position.__getitem__), customer


def test_sigkill_while_lanes_run_applies_every_order_once_after_a_restart(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    client = redis_server.client()
    client.flushall()
    ids = [
        client.xadd("orders", {"customer": CUSTOMERS[i % 3 if i < 20 else 3], "n": str(i)}).decode()
        for i in range(30)
    ]
    # Order 13 is in the middle of customer b's lane while a's and c's lanes run beside it.
    first = _start(redis_server.url, tmp_path / "run1.log", SW_TEST_KILL="handler:13")
    assert_killed(first)
    started_before = [r[1] for r in read_lines(tmp_path / "run1.log") if r[0] == "start"]
    assert len(set(started_before)) > 3  # several lanes had run when the kill came
    assert (
        client.xpending("orders", "billing")["pending"] == 30
    )  # one script per batch: none applied

    second = _start(redis_server.url, tmp_path / "run2.log")
    try:
        wait_for(lambda: len(_applied(client)) == len(ids), 30, "every order applied")
        wait_for(lambda: client.xpending("orders", "billing")["pending"] == 0, 30, "empty PEL")
    finally:
        stop_process(second)
    assert _applied(client) == dict.fromkeys(ids, 1)
    assert client.get("{orders}:total") == b"30"
    assert sorted(f[b"id"].decode() for _, f in client.xrange("{orders}:ledger")) == sorted(ids)
    for run in ("run1.log", "run2.log"):
        _check_lanes(tmp_path / run, ids)
