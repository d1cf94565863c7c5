"""``streamworker run --processes 2`` with ``idempotency="lua"`` under SIGKILL: one child is
killed mid-run (the supervisor restarts it under its name), later the supervisor itself (its
children stop with it), then the whole thing is started again. Each order must be applied exactly
once and none lost: each field of ``{orders}:applied`` is 1, the ledger has one entry per order,
the PEL is empty."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import redis

from tests.support.proc import (
    children_by_consumer,
    kill_when,
    process_gone,
    read_lines,
    stop_process,
    streamworker,
    wait_for,
)

pytestmark = pytest.mark.slow

APP = "tests/apps/lua_counters.py:app"


def _start(redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        "pod",
        "--processes",
        "2",
        env={"SW_TEST_LOG": str(log), "SW_TEST_SLEEP_S": "0.01", "SW_TEST_BATCH": "5"},
    )


def _applied(client: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall("{orders}:applied").items()}


def _pending(client: redis.Redis, consumer: str | None = None) -> list[str]:
    rows = client.xpending_range("orders", "billing", "-", "+", 1000, consumername=consumer)
    return [r["message_id"].decode() for r in rows]


def _replayed(log: Path) -> list[str]:
    return [r[1] for r in read_lines(log) if r[0] == "start" and r[3] == "2"]


def test_sigkill_of_a_child_then_of_the_supervisor_applies_every_order_exactly_once(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ids = [redis_client.xadd("orders", {"n": str(i)}).decode() for i in range(600)]
    log = tmp_path / "run1.log"
    proc = _start(redis_url, log)
    try:
        wait_for(lambda: len(_applied(redis_client)) >= 60, 60, "60 applied")
        victim = children_by_consumer(proc.pid)["pod-0"]
        # Killed while it holds a batch (frozen first). A script it sent just before may still
        # land, so what it left behind is read once it is gone.
        kill_when(victim, lambda: _pending(redis_client, "pod-0"))
        wait_for(lambda: process_gone(victim), 10, "pod-0 dead")
        held = _pending(redis_client, "pod-0")
        wait_for(
            lambda: children_by_consumer(proc.pid).get("pod-0") not in (None, victim),
            30,
            "pod-0 restarted",
        )
        # The restarted pod-0 re-reads exactly its own in-flight batch first (delivery count 2).
        wait_for(lambda: set(held) <= set(_replayed(log)), 30, "pod-0 replayed its batch")
        at_replay = len(_applied(redis_client))
        wait_for(lambda: len(_applied(redis_client)) >= at_replay + 60, 60, "60 more applied")
        assert len(_applied(redis_client)) < len(ids), "the backlog outlasts the first run"
        children = list(children_by_consumer(proc.pid).values())
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        wait_for(lambda: all(process_gone(p) for p in children), 60, "children stopped")
    finally:
        proc.kill()
    assert sorted(_replayed(log)) == sorted(held)
    assert {r[4] for r in read_lines(log) if r[0] == "start" and r[3] == "2"} <= {"pod-0"}

    log2 = tmp_path / "run2.log"
    proc = _start(redis_url, log2)
    try:
        wait_for(lambda: len(_applied(redis_client)) == len(ids), 120, "every order applied")
        wait_for(lambda: not _pending(redis_client), 30, "empty PEL")
    finally:
        err = stop_process(proc)
    assert proc.returncode == 0, err
    assert _applied(redis_client) == dict.fromkeys(ids, 1)
    assert redis_client.get("{orders}:total") == str(len(ids)).encode()
    ledger = [f[b"id"].decode() for _, f in redis_client.xrange("{orders}:ledger")]
    assert sorted(ledger) == sorted(ids)
