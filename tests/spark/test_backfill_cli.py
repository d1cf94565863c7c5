"""``streamworker backfill`` as an operator runs it: progress on stderr, the outcome on stdout."""

from __future__ import annotations

import json
import re

import pytest
import redis

from tests.spark.conftest import spark_env
from tests.spark.test_backfill import APP, migrate, orders
from tests.support.proc import run_cli
from tests.support.sql import charges_per_message

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)  # a JVM on a loaded 2-core machine
def test_the_cli_backfills_once_and_reports_outcomes_as_json(
    redis_client: redis.Redis, redis_url: str, sqlite_url: str
) -> None:
    migrate(sqlite_url)
    good = orders(redis_client, 60)
    bad = orders(redis_client, 2, poison="1")
    result = run_cli(
        "backfill", APP, "--stream", "orders", "--db-url", sqlite_url, "--redis-url", redis_url,
        "--master", "local[1]", "--partitions", "2", "--dead-letter", "--json",
        env=spark_env(), timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert (data["ok"], data["duplicate"], data["failed"]) == (60, 0, 2)
    assert sorted(f["id"] for f in data["failures"]) == sorted(bad)
    assert all("ValueError: order" in f["error"] for f in data["failures"])
    assert charges_per_message(sqlite_url) == dict.fromkeys(good, 1)
    # Progress: Spark's start, then tasks done of total; plain lines (not a terminal).
    assert "backfill orders: starting Spark... (0s)" in result.stderr
    # (Up to --partitions tasks: ranges are cut by entry counts, never inside a millisecond, and
    # 62 entries added at once may share a few.)
    assert re.match(r"backfill orders: (\d+)/\1 tasks \(100%", result.stderr.splitlines()[-1])


def test_the_cli_refuses_a_stream_that_does_not_exist_before_starting_spark(
    redis_url: str, sqlite_url: str
) -> None:
    result = run_cli(
        "backfill", APP, "--stream", "nope", "--db-url", sqlite_url, "--redis-url", redis_url
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == "streamworker: error: stream 'nope' does not exist"
