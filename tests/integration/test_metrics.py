"""``--metrics-port`` serves Prometheus metrics with the documented names."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path

import redis

from tests.support.proc import read_lines, streamworker, wait_for
from tests.support.servers import free_port


def test_metrics_endpoint_counts_acked_messages(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    for i in range(3):
        redis_client.xadd("orders", {"n": str(i)})
    port = free_port()
    proc = streamworker(
        "run",
        "tests/apps/recorder.py:app",
        "--redis-url",
        redis_url,
        "--metrics-port",
        str(port),
        env={"SW_TEST_LOG": str(log)},
    )
    try:
        wait_for(lambda: sum(1 for r in read_lines(log) if r[0] == "done") == 3, what="3 done")

        def scrape() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    return str(resp.read().decode())
            except OSError:
                return ""

        acked = (
            'streamworker_messages_total{group="billing",handler="recorder.record",'
            'outcome="acked",stream="orders"} 3.0'
        )
        wait_for(lambda: acked in scrape(), what="acked counter at 3")
        body = scrape()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert "streamworker_handler_duration_seconds_bucket" in body
    assert proc.returncode == 0
