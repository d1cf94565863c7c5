"""``idempotency="sql"`` under SIGKILL: ``streamworker run`` of tests/apps/sql_charges.py in real
subprocesses, on SQLite (file, WAL) and PostgreSQL 15 with one redis-server, and on PostgreSQL 15
with a real 3-master Redis Cluster.

Every test ends the same way: each order's charge row exists exactly once and the PEL is empty.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.cluster import sync_client_for, url_and_flush
from tests.support.proc import (
    assert_killed,
    read_lines,
    run_cli,
    stop_process,
    wait_for,
)
from tests.support.sql import (
    add_orders,
    charges_per_message,
    create_business_tables,
    finish_charges,
    migrated_db_url,
    pending_ids,
    processed_ids,
    start_charges_worker,
)

pytestmark = pytest.mark.slow


# (database, Redis) pairs. The cluster runs with PostgreSQL only: what the cluster changes is on
# the Redis side, and the suite's time budget is better spent elsewhere than on SQLite twice.
_BACKENDS = [("sqlite", "redis"), ("postgresql", "redis"), ("postgresql", "cluster")]


@pytest.fixture(params=_BACKENDS, ids=["-".join(b) for b in _BACKENDS])
def backends(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def db_url(backends: tuple[str, str], request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new database with streamworker's schema (SQLite file in WAL mode, or PostgreSQL 15)."""
    return migrated_db_url(backends[0], tmp_path, request)


@pytest.fixture
def redis_url(backends: tuple[str, str], request: pytest.FixtureRequest) -> str:
    """A flushed redis-server, or the flushed 3-master Redis Cluster."""
    return url_and_flush(request, backends[1])


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = sync_client_for(redis_url)
    yield client
    client.close()


def test_sigkill_before_the_commit_loses_the_batch_effects_and_redoes_them_once(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 15)
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="before_commit:2"
    )
    assert_killed(proc)
    # Batch 1 committed and acked; batch 2 ran its handlers but never committed.
    assert sorted(charges_per_message(db_url)) == sorted(ids[:5])
    assert pending_ids(redis_client, "orders", "billing") == [i.encode() for i in ids[5:10]]
    finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "run2.log")
    # The restart ran batch 2's handlers again (their first run never committed).
    rerun = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert rerun[:5] == ids[5:10]


def test_sigkill_after_the_commit_before_the_xack_is_recognised_as_duplicates(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 15)
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="after_commit:2"
    )
    assert_killed(proc)
    # Batch 2 is committed (charges and processed rows) but still pending.
    assert sorted(charges_per_message(db_url)) == sorted(ids[:10])
    assert pending_ids(redis_client, "orders", "billing") == [i.encode() for i in ids[5:10]]
    err = finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "run2.log")
    # Redelivered, acked as duplicates: their handlers did not run again.
    started = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert started == ids[10:]
    assert err.count('"duplicate_acked"') == 5


def test_sigkill_between_commit_and_xack_on_the_last_allowed_delivery_acks_duplicates(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 10)
    # max_deliveries=1: the first delivery is the last allowed one.
    env = {"SW_TEST_MAX_DELIVERIES": "1"}
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="after_commit:1", **env
    )
    assert_killed(proc)
    assert sorted(charges_per_message(db_url)) == sorted(ids[:5])
    # The restart redelivers batch 1 as delivery 2, over the limit: its processed rows win, so
    # it is acked as duplicates; dead-lettering it would let a replay charge it twice.
    proc = start_charges_worker(redis_url, db_url, tmp_path / "run2.log", **env)
    try:
        wait_for(lambda: len(charges_per_message(db_url)) == 10, 30, "every order charged")
        wait_for(lambda: not pending_ids(redis_client, "orders", "billing"), 30, "empty PEL")
    finally:
        err = stop_process(proc)
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert redis_client.xlen("{orders}:dlq") == 0
    assert err.count('"duplicate_acked"') == 5
    started = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert started == ids[5:]


def test_sigkill_between_two_messages_of_a_batch_redoes_the_batch_once(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    create_business_tables(db_url)
    ids = add_orders(redis_client, 12)
    # Order 7 is the third message of batch 2: orders 5 and 6 are done, in the open transaction.
    proc = start_charges_worker(redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="handler:7")
    assert_killed(proc)
    assert sorted(charges_per_message(db_url)) == sorted(ids[:5])
    first = [r[2] for r in read_lines(tmp_path / "run1.log") if r[0] == "start"]
    assert first == [str(i) for i in range(8)]
    finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "run2.log")


def test_prune_between_a_crash_after_commit_and_the_redelivery_keeps_the_rows_it_needs(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The retention rule under its worst case: rows committed, XACK lost, then a prune."""
    create_business_tables(db_url)
    ids = add_orders(redis_client, 15)
    proc = start_charges_worker(
        redis_url, db_url, tmp_path / "run1.log", SW_TEST_KILL="after_commit:2"
    )
    assert_killed(proc)
    result = run_cli("prune", "orders", "billing", "--redis-url", redis_url, "--db-url", db_url)
    assert result.returncode == 0, result.stderr
    # Batch 1 (acked) is pruned; batch 2 (committed, pending) keeps its rows.
    assert "deleted 5 processed row(s)" in result.stdout
    assert processed_ids(db_url) == ids[5:10]
    err = finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "run2.log")
    assert err.count('"duplicate_acked"') == 5
    started = [r[1] for r in read_lines(tmp_path / "run2.log") if r[0] == "start"]
    assert started == ids[10:]


def test_xclaim_race_between_two_live_consumers_applies_each_message_once(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """pod-0 is in the middle of batch 1 when its entries are claimed to pod-1, which starts and
    processes them concurrently; the processed row serialises the two."""
    create_business_tables(db_url)
    ids = add_orders(redis_client, 10)
    log0, log1, go = tmp_path / "pod0.log", tmp_path / "pod1.log", tmp_path / "go"
    # pod-0 keeps batch 1's transaction open until pod-1 has been handed the same entries (its
    # strategy got the batch; it then waits for pod-0's rows), however long pod-1 takes to start.
    pod0 = start_charges_worker(redis_url, db_url, log0, "pod-0", SW_TEST_HOLD=str(go))
    pod1 = None
    try:
        wait_for(lambda: read_lines(log0), 20, "pod-0 handling batch 1")
        claimed = redis_client.xclaim("orders", "billing", "pod-1", 0, ids[:5], justid=True)
        assert len(claimed) == 5
        pod1 = start_charges_worker(redis_url, db_url, log1, "pod-1", SW_TEST_LOG_BATCHES="1")
        wait_for(
            lambda: any(r[0] == "batch" and r[2:] == ids[:5] for r in read_lines(log1)),
            60,
            "pod-1 handed batch 1",
        )
        go.touch()
        wait_for(lambda: len(charges_per_message(db_url)) == 10, 60, "every order charged")
        wait_for(lambda: not pending_ids(redis_client, "orders", "billing"), 30, "empty PEL")
    finally:
        err0 = stop_process(pod0)
        err1 = stop_process(pod1) if pod1 is not None else ""
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    # Both held batch 1 at once; pod-1's claim waited for pod-0's commit and found duplicates.
    pod1_started = {r[1] for r in read_lines(log1) if r[0] == "start"}
    assert not pod1_started & set(ids[:5]), (err0[-3000:], err1[-3000:])
    assert err1.count('"duplicate_acked"') == 5


def test_claims_flying_between_two_live_consumers_never_apply_a_message_twice(
    db_url: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A storm: two workers, new orders arriving, and the test XCLAIMing pending entries back and
    forth (as stalled leases would) while both process."""
    create_business_tables(db_url)
    rng = random.Random(4)
    log0, log1 = tmp_path / "pod0.log", tmp_path / "pod1.log"
    ids = add_orders(redis_client, 20)
    pods = [
        start_charges_worker(
            redis_url, db_url, log0, "pod-0", SW_TEST_SLEEP_S="0.05", SW_TEST_BATCH="4"
        ),
        start_charges_worker(
            redis_url, db_url, log1, "pod-1", SW_TEST_SLEEP_S="0.05", SW_TEST_BATCH="4"
        ),
    ]
    try:
        wait_for(lambda: read_lines(log0) or read_lines(log1), 20, "the pods at work")
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            if len(ids) < 80:
                ids += add_orders(redis_client, 2)
            rows = redis_client.xpending_range("orders", "billing", "-", "+", 100)
            for row in rows:
                if rng.random() < 0.5:
                    other = "pod-1" if row["consumer"] == b"pod-0" else "pod-0"
                    redis_client.xclaim(
                        "orders", "billing", other, 0, [row["message_id"]], justid=True
                    )
            time.sleep(0.05)
        time.sleep(1.0)
    finally:
        for pod in pods:
            stop_process(pod)
    assert set(charges_per_message(db_url).values()) == {1}
    # Entries claimed to a pod after it had moved on sit in its PEL until its reclaimer takes
    # them (after claim_idle_ms); hand them all to pod-0 and let it drain them.
    stranded = [
        r["message_id"] for r in redis_client.xpending_range("orders", "billing", "-", "+", 1000)
    ]
    if stranded:
        redis_client.xclaim("orders", "billing", "pod-0", 0, stranded, justid=True)
    finish_charges(redis_url, db_url, redis_client, ids, tmp_path / "final.log")
