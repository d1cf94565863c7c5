"""``--metrics-port``: /metrics, /healthz and /readyz of a real ``streamworker run``."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from streamworker import App, Message
from streamworker.observability.state import read_group_states
from tests.support.proc import streamworker, wait_for
from tests.support.servers import RedisServer, free_port

APP = "tests/apps/ops.py:app"


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _, text = _get(port, "/metrics")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _value(port: int, name: str, **labels: str) -> float | None:
    return _samples(port).get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def worker(redis_url: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--metrics-port",
        str(port),
        "--liveness-timeout-s",
        "1.5",
        "--shutdown-timeout-s",
        "1",
    )
    wait_for(lambda: _get(port, "/readyz")[0] == 200, what="ready")
    yield proc, port
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)


def test_metrics_count_the_work_done_and_gauges_match_redis(
    worker: tuple[subprocess.Popen[bytes], int], redis_client: redis.Redis
) -> None:
    _, port = worker
    for _ in range(7):
        redis_client.xadd("jobs", {"action": "ok"})
    redis_client.xadd("jobs", {"action": "poison"})
    key = {"stream": "jobs", "group": "workers"}
    counted = {**key, "handler": "ops.work"}  # the counters carry the handler's name too
    wait_for(
        lambda: _value(port, "streamworker_messages_total", outcome="acked", **counted) == 7,
        what="7 acked",
    )
    wait_for(
        lambda: _value(port, "streamworker_messages_total", outcome="dead_lettered", **counted) == 1
    )
    assert _value(port, "streamworker_messages_total", outcome="failed", **counted) == 0
    assert (
        _value(
            port,
            "streamworker_dead_letter_messages",
            stream="jobs",
            dead_letter_stream="{jobs}:dlq",
        )
        == 1
    )

    for _ in range(5):
        redis_client.xadd("jobs", {"action": "ok"})
    wait_for(lambda: _value(port, "streamworker_messages_total", outcome="acked", **counted) == 12)
    info = next(g for g in redis_client.xinfo_groups("jobs") if g["name"] == b"workers")
    assert _value(port, "streamworker_group_lag", **key) == info["lag"] == 0
    assert (
        _value(port, "streamworker_pending_messages", **key)
        == redis_client.xpending("jobs", "workers")["pending"]
        == 0
    )
    assert _value(port, "streamworker_consumers", **key) == info["consumers"]
    assert _value(port, "streamworker_work_left", **key) == 0
    # 12 successes and the poisoned one: every handler run is timed
    assert _value(port, "streamworker_handler_duration_seconds_count", **counted) == 13


def test_work_left_is_lag_plus_pending(redis_url: str, redis_client: redis.Redis) -> None:
    # The gauges of a group nobody serves right now.
    app = App("t")

    @app.handler("jobs", group="idle-group")
    async def h(msg: Message) -> None: ...

    redis_client.xgroup_create("jobs", "idle-group", id="0", mkstream=True)
    for _ in range(5):
        redis_client.xadd("jobs", {"n": "1"})
    redis_client.xreadgroup("idle-group", "c", {"jobs": ">"}, count=2)
    (state,) = read_group_states(redis_client, app.handlers)
    assert (state.lag, state.pending) == (3, 2)
    assert state.oldest_pending_ms is not None


def test_healthz_fails_when_a_consume_loop_is_stuck(
    worker: tuple[subprocess.Popen[bytes], int], redis_client: redis.Redis
) -> None:
    _, port = worker
    assert _get(port, "/healthz")[0] == 200
    redis_client.xadd("jobs", {"action": "hang"})
    wait_for(lambda: _get(port, "/healthz")[0] == 503, timeout_s=15, what="unhealthy")
    body = json.loads(_get(port, "/healthz")[1])
    assert body["stuck_loops"] == ["jobs/workers"]


def test_unknown_path_is_404(worker: tuple[subprocess.Popen[bytes], int]) -> None:
    assert _get(worker[1], "/nope")[0] == 404


@pytest.mark.slow
def test_readyz_fails_while_redis_is_away_and_recovers(own_redis: RedisServer) -> None:
    port = free_port()
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        own_redis.url,
        "--metrics-port",
        str(port),
        env={"STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.3"},
    )
    try:
        wait_for(lambda: _get(port, "/readyz")[0] == 200, what="ready")
        own_redis.stop()
        wait_for(lambda: _get(port, "/readyz")[0] == 503, what="not ready without Redis")
        assert "redis" in json.loads(_get(port, "/readyz")[1])
        assert _get(port, "/healthz")[0] == 200  # an outage is not a reason to restart the pod
        own_redis.start()
        wait_for(lambda: _get(port, "/readyz")[0] == 200, timeout_s=20, what="ready again")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_metrics_port_in_use_is_one_clear_line(redis_url: str) -> None:
    import socket

    from tests.support.proc import run_cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            "run", APP, "--redis-url", redis_url, "--metrics-port", str(port), timeout=30
        )
    assert result.returncode == 2
    assert f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr
