"""``streamworker run`` in a real subprocess against a real redis-server: crashes, signals, restarts."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis

from tests.support.proc import read_lines, streamworker, wait_for
from tests.support.servers import RedisServer

APP = "tests/apps/recorder.py:app"


def _env(log: Path, **extra: str) -> dict[str, str]:
    return {"SW_TEST_LOG": str(log), **{k: str(v) for k, v in extra.items()}}


def _pending(client: redis.Redis) -> list[bytes]:
    return [r["message_id"] for r in client.xpending_range("orders", "billing", "-", "+", 1000)]


def _finish(proc, timeout: float = 30) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    try:
        _, err = proc.communicate(timeout=timeout)
    except Exception:
        proc.kill()
        raise
    return proc.returncode, err.decode(errors="replace")


def test_worker_killed_mid_batch_replays_exactly_its_pending_entries_first(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run1.log"
    old = [redis_client.xadd("orders", {"n": f"m{i}"}).decode() for i in range(10)]
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        "pod-0",
        env=_env(log, SW_TEST_SLEEP_S="0.3", SW_TEST_BATCH="5"),
    )
    try:
        wait_for(lambda: sum(1 for r in read_lines(log) if r[0] == "done") >= 2, what="2 done")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    # The first batch (m0..m4) was read and not acked: it is pod-0's pending backlog.
    assert _pending(redis_client) == [i.encode() for i in old[:5]]
    new = [redis_client.xadd("orders", {"n": f"n{i}"}).decode() for i in range(3)]

    log2 = tmp_path / "run2.log"
    proc = streamworker("run", APP, "--redis-url", redis_url, "--consumer", "pod-0", env=_env(log2))
    try:
        wait_for(lambda: sum(1 for r in read_lines(log2) if r[0] == "done") == 13, what="13 done")
        wait_for(lambda: not _pending(redis_client), what="empty PEL")
    finally:
        proc.send_signal(signal.SIGTERM)
        code, _ = _finish(proc)
    starts = [r for r in read_lines(log2) if r[0] == "start"]
    assert [r[1] for r in starts] == old + new
    # The replayed backlog carries Redis's delivery counter (2); everything after it is new (1).
    assert [int(r[3]) for r in starts[:5]] == [2] * 5
    assert [int(r[3]) for r in starts[5:]] == [1] * 8
    assert code == 0


def test_sigterm_during_a_slow_handler_finishes_and_acks_it_and_nothing_else(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    ids = [redis_client.xadd("orders", {"n": f"m{i}"}) for i in range(3)]
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        "pod-0",
        env=_env(log, SW_TEST_SLEEP_S="1.5", SW_TEST_BATCH="3"),
    )
    try:
        wait_for(lambda: any(r[0] == "start" for r in read_lines(log)), what="first start")
        proc.send_signal(signal.SIGTERM)
        code, err = _finish(proc)
    finally:
        proc.kill()
    assert code == 0, err
    lines = read_lines(log)
    assert [r[:2] for r in lines] == [["start", ids[0].decode()], ["done", ids[0].decode()]]
    assert _pending(redis_client) == ids[1:]
    assert '"shutdown_requested"' in err


def test_shutdown_deadline_exits_zero_without_acking_the_unfinished_message(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    mid = redis_client.xadd("orders", {"n": "slow"})
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--shutdown-timeout-s",
        "0.5",
        env=_env(log, SW_TEST_SLEEP_S="30"),
    )
    try:
        wait_for(lambda: read_lines(log), what="start")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code, err = _finish(proc)
        elapsed = time.monotonic() - started
    finally:
        proc.kill()
    assert code == 0, err
    assert elapsed < 10
    assert _pending(redis_client) == [mid]
    assert not [r for r in read_lines(log) if r[0] == "done"]


def test_second_signal_exits_at_once(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    mid = redis_client.xadd("orders", {"n": "slow"})
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--shutdown-timeout-s",
        "60",
        env=_env(log, SW_TEST_SLEEP_S="30"),
    )
    try:
        wait_for(lambda: read_lines(log), what="start")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # two signals apart, not one burst (the handler shows no other sign)
        proc.send_signal(signal.SIGINT)
        code, err = _finish(proc, timeout=10)
    finally:
        proc.kill()
    assert code == 128 + signal.SIGINT
    assert '"shutdown_forced"' in err
    assert _pending(redis_client) == [mid]


@pytest.mark.slow
def test_redis_restarted_under_a_running_worker_loses_nothing(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    client = own_redis.client()
    ids = [client.xadd("orders", {"n": f"a{i}"}).decode() for i in range(20)]
    proc = streamworker(
        "run",
        APP,
        "--redis-url",
        own_redis.url,
        env={**_env(log), "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5"},
    )
    try:
        wait_for(lambda: sum(1 for r in read_lines(log) if r[0] == "done") == 20, what="first 20")
        own_redis.stop()  # SIGTERM: Redis flushes its AOF (appendfsync always) and exits
        time.sleep(1.0)  # the worker notices and backs off
        own_redis.start()
        client = own_redis.client()
        ids += [client.xadd("orders", {"n": f"b{i}"}).decode() for i in range(20)]
        wait_for(
            lambda: {r[1] for r in read_lines(log) if r[0] == "done"} >= set(ids),
            what="all 40 done",
        )
        wait_for(lambda: not _pending(client), what="empty PEL")
    finally:
        proc.send_signal(signal.SIGTERM)
        code, err = _finish(proc)
    assert code == 0, err
    assert '"connection_lost"' in err
