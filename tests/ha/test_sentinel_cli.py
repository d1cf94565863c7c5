"""``redis+sentinel://`` URLs through the CLI, as a user runs it (subprocesses), against a real
primary + replica + three Sentinels; and the one-line refusals of bad Sentinel input."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from sqlalchemy.orm import Session

from streamworker.cli import EXIT_CONFIG, EXIT_RUNTIME
from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from streamworker.idempotency.sql.outbox import publish
from tests.support.proc import read_lines, run_cli, stop_process, streamworker, wait_for
from tests.support.sentinel import SentinelSetup
from tests.support.servers import free_port

RECORDER = "tests/apps/recorder.py:app"


@pytest.fixture
def primary(sentinel_setup: SentinelSetup) -> redis.Redis:
    """A client of the current primary, flushed (the replica follows)."""
    client = sentinel_setup.primary.client()
    client.flushall()
    return client


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_publish_through_sentinels_writes_to_the_primary(
    sentinel_setup: SentinelSetup, primary: redis.Redis
) -> None:
    done = run_cli("publish", "orders", "n=1", "--redis-url", sentinel_setup.url)
    assert done.returncode == 0, done.stderr
    _stream, entry_id = done.stdout.split()
    assert [i.decode() for i, _ in primary.xrange("orders")] == [entry_id]


def test_pending_and_dlq_read_through_sentinels(
    sentinel_setup: SentinelSetup, primary: redis.Redis
) -> None:
    primary.xadd("orders", {"n": "1"})
    primary.xgroup_create("orders", "billing", id="0")
    primary.xreadgroup("billing", "c1", {"orders": ">"})
    primary.xadd("orders:dlq", {"original_id": "1-1", "reason": "r"})
    pending = run_cli("pending", "orders", "billing", "--json", "--redis-url", sentinel_setup.url)
    assert pending.returncode == 0, pending.stderr
    assert json.loads(pending.stdout)["pending"] == 1
    listed = run_cli("dlq", "list", "orders", "--redis-url", sentinel_setup.url)
    assert listed.returncode == 0, listed.stderr


def test_run_consumes_through_sentinels_and_logs_the_primary(
    sentinel_setup: SentinelSetup, primary: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "handled.log"
    for n in range(5):
        primary.xadd("orders", {"n": str(n)})
    port = free_port()
    proc = streamworker(
        "run", RECORDER, "--redis-url", sentinel_setup.url, "--metrics-port", str(port),
        env={"SW_TEST_LOG": str(log)},
    )  # fmt: skip
    try:
        wait_for(lambda: len([x for x in read_lines(log) if x[0] == "done"]) == 5, 30, "5 done")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
            ready = json.loads(reply.read())
        assert ready["primary"] == f"127.0.0.1:{sentinel_setup.primary.port}"
    finally:
        err = stop_process(proc)
    started = [json.loads(x) for x in err.splitlines() if '"worker_started"' in x]
    assert started
    assert started[0]["primary"] == f"127.0.0.1:{sentinel_setup.primary.port}"


def test_run_with_processes_consumes_through_sentinels(
    sentinel_setup: SentinelSetup, primary: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "handled.log"
    for n in range(10):
        primary.xadd("orders", {"n": str(n)})
    proc = streamworker(
        "run", RECORDER, "--redis-url", sentinel_setup.url, "--processes", "2",
        env={"SW_TEST_LOG": str(log)},
    )  # fmt: skip
    try:
        wait_for(lambda: len([x for x in read_lines(log) if x[0] == "done"]) == 10, 60, "10 done")
    finally:
        stop_process(proc)
    assert not primary.xpending("orders", "billing")["pending"]


def test_the_sentinel_password_setting_reaches_password_protected_sentinels(
    tmp_path: Path,
) -> None:
    setup = SentinelSetup(tmp_path / "sentinel", sentinel_password="s3nt!nel").start()
    try:
        without = run_cli("publish", "orders", "n=1", "--redis-url", setup.url)
        assert without.returncode == EXIT_RUNTIME
        assert "s3nt!nel" not in without.stderr
        done = run_cli(
            "publish", "orders", "n=1", "--redis-url", setup.url,
            env={"STREAMWORKER_SENTINEL_PASSWORD": "s3nt!nel"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert setup.primary.client().xlen("orders") == 1
    finally:
        setup.stop()


def test_no_sentinel_reachable_exits_1_with_one_line_naming_them() -> None:
    ports = [free_port(), free_port()]
    url = f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster"
    for args in (("publish", "orders", "n=1"), ("run", RECORDER)):
        done = run_cli(*args, "--redis-url", url, timeout=60)
        assert done.returncode == EXIT_RUNTIME, done.stderr
        line = _one_line(done.stderr)
        assert "no Sentinel reachable" in line
        assert f"127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}" in line


def test_an_unknown_service_exits_2_with_one_line(sentinel_setup: SentinelSetup) -> None:
    url = sentinel_setup.url.replace("/mymaster/", "/nosuchservice/")
    for args in (("publish", "orders", "n=1"), ("pending", "orders", "g"), ("run", RECORDER)):
        done = run_cli(*args, "--redis-url", url)
        assert done.returncode == EXIT_CONFIG, done.stderr
        line = _one_line(done.stderr)
        assert "monitor no service named 'nosuchservice'" in line
        assert "mymaster" in line  # what they do monitor


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://127.0.0.1:26379", "redis+sentinel://127.0.0.1:x/mymaster"],
)
def test_a_malformed_sentinel_url_exits_2_with_one_line(url: str) -> None:
    for args in (("publish", "orders", "n=1"), ("run", RECORDER)):
        done = run_cli(*args, "--redis-url", url)
        assert done.returncode == EXIT_CONFIG, done.stderr
        assert "invalid Redis URL" in _one_line(done.stderr)


def test_relay_moves_outbox_rows_through_sentinels(
    sentinel_setup: SentinelSetup, primary: redis.Redis, sqlite_url: str
) -> None:
    db = SqlDatabase(sqlite_url)
    upgrade(db)
    with Session(db.sync_engine) as session, session.begin():
        for n in range(5):
            publish(session, "payments", {"n": n})
    db.sync_engine.dispose()
    done = run_cli("relay", "--once", "--db-url", sqlite_url, "--redis-url", sentinel_setup.url)
    assert done.returncode == 0, done.stderr
    assert [int(f[b"n"]) for _, f in primary.xrange("payments")] == list(range(5))


def test_the_dashboard_reads_through_sentinels_and_names_the_primary(
    sentinel_setup: SentinelSetup, primary: redis.Redis
) -> None:
    primary.xadd("orders", {"n": "1"})
    port = free_port()
    proc = streamworker("dashboard", "--redis-url", sentinel_setup.url, "--port", str(port))
    pages: list[str] = []

    def fetch() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/streams", timeout=5) as r:
                pages.append(r.read().decode())
                return True
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_for(fetch, 60, "the dashboard answering")
        assert "orders" in pages[-1]
        assert f"primary 127.0.0.1:{sentinel_setup.primary.port}" in pages[-1]
    finally:
        stop_process(proc)
