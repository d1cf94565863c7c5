"""A batch handler (``batch=True``) over ``idempotency="sql"`` under SIGKILL: ``streamworker run``
of tests/apps/sql_charges.py (``SW_TEST_BATCH_HANDLER=1``: one executemany per batch) in real
subprocesses, on SQLite (file, WAL) and PostgreSQL 15 with one redis-server.

Every test ends the same way: each order's charge row exists exactly once and the PEL is empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.support.proc import assert_killed, read_lines
from tests.support.sql import (
    add_orders,
    charges_per_message,
    create_business_tables,
    finish_charges,
    pending_ids,
    start_charges_worker,
)

pytestmark = pytest.mark.slow

# Every run of the app in this module calls the batch handler (one executemany per batch).
BATCH = {"SW_TEST_BATCH_HANDLER": "1"}


def test_sigkill_between_commit_and_xack_of_a_batch_acks_it_as_duplicates_after_restart(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 15)
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="after_commit:2", **BATCH
    )
    assert_killed(proc)
    # Batch 2 is committed (its executemany and its processed rows) but still pending.
    assert sorted(charges_per_message(db_url)) == sorted(ids[:10])
    assert pending_ids(redis_client, "orders", "billing") == [i.encode() for i in ids[5:10]]
    err = finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "run2.log", **BATCH)
    # Redelivered and acked as duplicates: the batch handler never saw them again.
    started = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert started == ids[10:]
    assert err.count('"duplicate_acked"') == 5


def test_sigkill_between_commit_and_xack_on_the_last_allowed_delivery_acks_the_batch(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 10)
    env = {"SW_TEST_MAX_DELIVERIES": "1"}
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="after_commit:1", **env, **BATCH
    )
    assert_killed(proc)
    assert sorted(charges_per_message(db_url)) == sorted(ids[:5])
    # Redelivered over the limit: the processed rows win over the delivery count.
    err = finish_charges(
        redis_url, db_url, redis_client, ids, tmp_path / "run2.log", **env, **BATCH
    )
    assert redis_client.xlen("{orders}:dlq") == 0
    assert err.count('"duplicate_acked"') == 5
    started = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert started == ids[5:]


def test_sigkill_before_the_commit_of_a_batch_redoes_it_once(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 15)
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="before_commit:2", **BATCH
    )
    assert_killed(proc)
    assert sorted(charges_per_message(db_url)) == sorted(ids[:5])
    finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "run2.log", **BATCH)
    rerun = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert rerun[:5] == ids[5:10]
