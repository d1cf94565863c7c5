"""Release on a graceful stop (#36 item 4), in real ``streamworker run`` processes: entries a
SIGTERMed worker read but never started go back to the group at once, and their read does not
count toward ``max_deliveries``. Run on redis-server 7.0 (the XCLAIM emulation) and on the
engine server in 8.10 mode (XNACK … SILENT, https://redis.io/docs/latest/commands/xnack/), with
the same expectations."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.engine_server import EngineServerProcess
from tests.support.proc import read_lines, stop_process, streamworker, wait_for

APP = "tests/apps/recorder.py:app"
STREAM, GROUP = "orders", "billing"


@pytest.fixture(params=["redis-server-7.0", "engine-8.10"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(url, the release path the worker must choose there)."""
    if request.param == "redis-server-7.0":
        yield request.getfixturevalue("redis_url"), "xclaim"
        return
    engine = EngineServerProcess(extra=("--redis-version", "8.10")).start()
    try:
        yield engine.url, "xnack"
    finally:
        engine.stop()


def _worker(url: str, consumer: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        url,
        "--consumer",
        consumer,
        env={
            "SW_TEST_LOG": str(log),
            "SW_TEST_SLEEP_S": "0.3",
            "SW_TEST_BATCH": "10",
            "SW_TEST_CLAIM_IDLE_MS": "60000",
            **env,
        },
    )


def _publish(client: redis.Redis, n: int) -> list[str]:
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    return [client.xadd(STREAM, {"n": str(i)}).decode() for i in range(n)]


def _starts(log: Path) -> list[list[str]]:
    return [line for line in read_lines(log) if line[0] == "start"]


def _done(log: Path) -> list[str]:
    return [line[1] for line in read_lines(log) if line[0] == "done"]


def _stop(proc: subprocess.Popen[bytes], *, signalled: bool = False) -> str:
    """One SIGTERM (a second one forces the stop), then its exit: 0, and its stderr."""
    if not signalled:
        proc.send_signal(signal.SIGTERM)
    try:
        _, raw = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    err = raw.decode(errors="replace")
    assert proc.returncode == 0, err[-3000:]
    return err


def _pending_counts(client: redis.Redis) -> dict[str, int]:
    rows = client.xpending_range(STREAM, GROUP, "-", "+", 1000)
    return {r["message_id"].decode(): int(r["times_delivered"]) for r in rows}


def test_sigterm_hands_unstarted_entries_to_the_other_worker_within_5_s(
    server: tuple[str, str], tmp_path: Path
) -> None:
    url, path = server
    log = tmp_path / "handled.log"
    client = redis.Redis.from_url(url)
    ids = _publish(client, 10)
    go = tmp_path / "go"
    # "a" reads all ten in one batch (batch size 10) and starts the first, which goes on only
    # once the test says so: "a" is mid-batch however long "b" takes to start.
    holder = _worker(url, "a", log, SW_TEST_HOLD=str(go))
    other: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: _starts(log), 30, "the holder to start its slow batch")
        other = _worker(url, "b", log)
        wait_for(
            lambda: any(c["name"] == b"b" for c in client.xinfo_consumers(STREAM, GROUP)),
            30,
            "the other worker to join the group",
        )
        stopped_at = time.monotonic()
        holder.send_signal(signal.SIGTERM)
        go.touch()  # the handler in hand finishes; the nine unstarted ones are released
        wait_for(
            lambda: any(line[4] == "b" for line in _starts(log)),
            5.0,
            "the other worker to start a released entry",
        )
        assert time.monotonic() - stopped_at <= 5.0
        err = _stop(holder, signalled=True)
        assert f'"path": "{path}"' in err or f"path={path}" in err, err[-3000:]
        assert "unstarted_released" in err, err[-3000:]
        wait_for(lambda: len(set(_done(log))) == 10, 30, "every message to be handled")
    finally:
        stop_process(holder)
        if other is not None:
            _stop(other)
    starts = _starts(log)
    # Handled once: one start and one done per message, none run by both workers.
    assert sorted(line[1] for line in starts) == sorted(ids)
    assert sorted(_done(log)) == sorted(ids)
    # The released entries' first start counts as their first delivery: the read "a" made and
    # never started does not count.
    assert {int(line[3]) for line in starts if line[4] == "b"} == {1}
    assert {line[4] for line in starts} == {"a", "b"}
    assert _pending_counts(client) == {}


def test_restart_loop_does_not_raise_delivery_counts(
    server: tuple[str, str], tmp_path: Path
) -> None:
    url, path = server
    log = tmp_path / "handled.log"
    client = redis.Redis.from_url(url)
    ids = _publish(client, 20)
    for round_ in range(5):
        before = len(_starts(log))
        proc = _worker(url, "a", log)
        try:
            # SIGTERM once this run has started one of its slow messages.
            wait_for(lambda n=before: len(_starts(log)) > n, 30, f"round {round_} to start one")
            err = _stop(proc)
        finally:
            stop_process(proc)
        assert f'"path": "{path}"' in err or f"path={path}" in err, err[-3000:]
        counts = _pending_counts(client)
        assert counts, "the restart loop handled everything: too fast to test"
        # Every entry left pending was read (again) and never started: none counts a delivery.
        assert set(counts.values()) == {0}, counts
    starts = _starts(log)
    # Nothing ran twice, and each message that ran did so on its first counted delivery.
    assert len({line[1] for line in starts}) == len(starts)
    assert {int(line[3]) for line in starts} == {1}
    # What ran is acked; what is pending never ran.
    assert set(_done(log)) <= set(ids)
    assert not set(_done(log)) & set(_pending_counts(client))
