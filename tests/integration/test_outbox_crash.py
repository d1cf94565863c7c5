"""The relay SIGKILLed at each step of a batch (a real subprocess): once restarted, every outbox
row is in its stream exactly once, in the order it was staged, and the outbox is empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from sqlalchemy.orm import Session

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.outbox import pending_rows, publish
from tests.support.proc import ROOT, run_cli

ROWS = 50
BATCH = 10


def _relay_until_killed(db_url: str, redis_url: str, kill: str, log: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SW_TEST_KILL": kill, "SW_TEST_LOG": str(log)}
    args = ["--once", "--batch-size", str(BATCH), "--db-url", db_url, "--redis-url", redis_url]
    done = subprocess.run(
        [sys.executable, "-m", "tests.apps.outbox_relay", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    return log.read_text()


@pytest.mark.parametrize("point", ["after_add", "after_delete", "after_commit"])
def test_a_relay_killed_mid_batch_leaves_every_row_added_once_in_order(
    point: str, db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with Session(SqlDatabase(db_url).sync_engine) as session, session.begin():
        for n in range(ROWS):
            publish(session, "payments", {"n": n})
    log = _relay_until_killed(db_url, redis_url, f"{point}:2", tmp_path / "relay.log")
    assert f"kill {point}" in log
    assert redis_client.xlen("payments") == 2 * BATCH  # the second batch reached Redis
    done = run_cli("relay", "--once", "--db-url", db_url, "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    assert [int(f[b"n"]) for _, f in redis_client.xrange("payments")] == list(range(ROWS))
    assert pending_rows(SqlDatabase(db_url)) == 0
