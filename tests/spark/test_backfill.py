"""Handler backfills on Spark executors: exactly once with a lost task and a live worker on the
same stream, per-message outcomes, dead letters."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from streamworker.spark import run_handler
from tests.support.proc import ROOT, wait_for
from tests.support.sql import charges_per_message, create_business_tables, pending_ids, sync_url

pytestmark = pytest.mark.slow

APP = "tests.spark.backfill_app:app"


def migrate(url: str) -> None:
    db = SqlDatabase(url)
    upgrade(db)
    db.sync_engine.dispose()
    create_business_tables(url)


def orders(client: redis.Redis, n: int, **fields: str) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd("orders", {"n": str(i), **fields})
    return [i.decode() for i in pipe.execute()]


def cents(url: str) -> dict[int, int]:
    engine = sa.create_engine(sync_url(url))
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT amount_cents, count(*) FROM charges GROUP BY 1"))
        out = {int(a): int(c) for a, c in rows}
    engine.dispose()
    return out


def read_orders(spark: Any, url: str) -> Any:
    return (
        spark.read.format("streamworker_redis")
        .option("url", url)
        .option("streams", "orders")
        .option("numPartitions", 2)
        .load()
    )


def live_worker(redis_url: str, db_url: str, log: Path) -> subprocess.Popen[bytes]:
    """``streamworker run`` of the same App, logging to a file (a pipe nobody reads would fill
    up and stall the worker)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamworker",
                "run",
                APP,
                "--redis-url",
                redis_url,
                "--db-url",
                db_url,
                "--consumer",
                "live",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "STREAMWORKER_LOG_FORMAT": "json"},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(60)


@pytest.mark.timeout(900)  # two JVMs on a loaded 2-core machine
def test_backfill_with_a_lost_task_and_a_live_worker_applies_each_message_once(
    spark: Any, redis_client: redis.Redis, redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    migrate(postgres_url)
    (tmp_path / "crash").touch()
    ids = orders(redis_client, 1500, dir=str(tmp_path), slow_ms="10")
    df = read_orders(spark, redis_url)
    result: dict[str, Any] = {}

    def backfill() -> None:
        try:
            outcomes = run_handler(
                df, APP, db_url=postgres_url, redis_url=redis_url, chunk_size=100
            )
            result["rows"] = outcomes.collect()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=backfill)
    thread.start()
    worker: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: (tmp_path / "started").exists() or not thread.is_alive(), 240, "backfill")
        # The live worker of the same handler and group starts while the backfill runs.
        worker = live_worker(redis_url, postgres_url, tmp_path / "worker.log")
        thread.join(300)
        assert not thread.is_alive()
        assert "error" not in result, str(result.get("error"))[:3000]
        wait_for(lambda: len(charges_per_message(postgres_url)) == len(ids), 120, "all charged")
        wait_for(
            lambda: (
                not pending_ids(redis_client, "orders", "billing")
                and redis_client.xinfo_groups("orders")[0]["last-delivered-id"].decode() == ids[-1]
            ),
            120,
            "the live worker caught up",
        )
    finally:
        if worker is not None:
            stop(worker)
            print((tmp_path / "worker.log").read_text()[-5000:])  # shown when the test fails
        thread.join(300)
    assert not (tmp_path / "crash").exists()  # the injected task failure did happen
    assert charges_per_message(postgres_url) == dict.fromkeys(ids, 1)
    rows = result["rows"]
    assert sorted(r.id for r in rows) == sorted(ids)
    outcome = {r.id: r.outcome for r in rows}
    assert set(outcome.values()) <= {"ok", "duplicate"}
    # Every "ok" is a charge the backfill booked (100 cents); the rest the live worker booked.
    assert sum(o == "ok" for o in outcome.values()) == cents(postgres_url).get(100, 0)


def test_failures_come_back_as_outcomes_and_are_dead_lettered_once(
    spark: Any, redis_client: redis.Redis, redis_url: str, sqlite_url: str
) -> None:
    migrate(sqlite_url)
    good = orders(redis_client, 40)
    bad = orders(redis_client, 3, poison="1")
    df = read_orders(spark, redis_url)
    first = {
        r.id: r
        for r in run_handler(
            df, APP, db_url=sqlite_url, redis_url=redis_url, dead_letter=True
        ).collect()
    }
    assert {i: first[i].outcome for i in good} == dict.fromkeys(good, "ok")
    assert {i: first[i].outcome for i in bad} == dict.fromkeys(bad, "failed")
    assert all("ValueError: order" in first[i].error for i in bad)
    again = {
        r.id: r
        for r in run_handler(
            df, APP, db_url=sqlite_url, redis_url=redis_url, dead_letter=True
        ).collect()
    }
    assert {i: again[i].outcome for i in good} == dict.fromkeys(good, "duplicate")
    # A re-run fails the poison again but adds no second dead letter.
    assert {i: again[i].dead_letter_id for i in bad} == {i: first[i].dead_letter_id for i in bad}
    dead = redis_client.xrange("{orders}:dlq")
    assert sorted(f[b"dlq_id"].decode() for _, f in dead) == sorted(bad)
    assert charges_per_message(sqlite_url) == dict.fromkeys(good, 1)


def test_a_handler_without_sql_idempotency_is_refused(
    spark: Any, redis_url: str, sqlite_url: str
) -> None:
    from streamworker.errors import ConfigError

    df = read_orders(spark, redis_url)
    with pytest.raises(ConfigError, match="idempotency='sql'"):
        run_handler(df, "tests.spark.models:plain_app", db_url=sqlite_url, redis_url=redis_url)
