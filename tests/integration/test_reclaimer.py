"""The reclaimer with ``streamworker run`` processes on a real redis-server: a SIGKILLed worker's
entries are taken over (the rest of the reclaimer's behaviour is in tests/conformance/test_reclaimer.py,
on every backend)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import redis

from tests.support.proc import read_lines, streamworker, wait_for


def _pending(client: redis.Redis, stream: str = "orders", group: str = "billing") -> list[bytes]:
    return [r["message_id"] for r in client.xpending_range(stream, group, "-", "+", 1000)]


def test_entries_of_a_killed_worker_are_taken_over_within_claim_idle_plus_one_poll(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    claim_idle_ms = 1000
    ids = [redis_client.xadd("orders", {"n": f"m{i}"}).decode() for i in range(3)]
    log_a = tmp_path / "a.log"
    env = {"SW_TEST_CLAIM_IDLE_MS": str(claim_idle_ms), "SW_TEST_BATCH": "3"}
    a = streamworker(
        "run",
        "tests/apps/recorder.py:app",
        "--redis-url",
        redis_url,
        "--consumer",
        "pod-a",
        env={**env, "SW_TEST_LOG": str(log_a), "SW_TEST_SLEEP_S": "60"},
    )
    try:
        wait_for(lambda: read_lines(log_a), what="pod-a started a message")
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        killed_at = time.monotonic()
    finally:
        a.kill()
    log_b = tmp_path / "b.log"
    b = streamworker(
        "run",
        "tests/apps/recorder.py:app",
        "--redis-url",
        redis_url,
        "--consumer",
        "pod-b",
        env={**env, "SW_TEST_LOG": str(log_b)},
    )
    try:
        wait_for(
            lambda: sum(1 for r in read_lines(log_b) if r[0] == "done") == 3, what="pod-b done 3"
        )
        elapsed = time.monotonic() - killed_at
        wait_for(lambda: not _pending(redis_client), what="empty PEL")
    finally:
        b.send_signal(signal.SIGTERM)
        b.communicate(timeout=30)
    starts = [r for r in read_lines(log_b) if r[0] == "start"]
    assert sorted(r[1] for r in starts) == sorted(ids)
    assert all(r[3] == "2" for r in starts)  # a second delivery: the claim counted it
    # claim_idle_ms + one reclaim poll (claim_idle_ms / 2) + start-up and processing slack
    assert elapsed < (claim_idle_ms * 1.5) / 1000 + 3.0
