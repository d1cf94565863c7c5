"""``waitReplicas`` on the Spark sink and ``wait_replicas`` on archive-then-trim: a commit Spark
would record, and a trim, count as done only once the replica has them. A real primary and a
SIGSTOPped replica; the shared local Spark session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from streamworker import ReplicaWaitTimeout
from streamworker.spark import archive, redisops, safe_trim
from tests.support.replication import Replicated

pytestmark = pytest.mark.slow

TIMEOUT_MS = 300


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    servers = Replicated(tmp_path_factory.mktemp("replicated"))
    yield servers
    servers.stop()


@pytest.fixture
def primary(pair: Replicated) -> Iterator[redis.Redis]:
    client = pair.primary.client()
    client.flushall()
    pair.wait_synced()
    yield client
    client.close()


def _fill(client: redis.Redis, stream: str, n: int, start_ms: int = 1_700_000_000_000) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"n": str(i)}, id=f"{start_ms + i}-0")
    return [i.decode() for i in pipe.execute()]


def _copy(spark: Any, url: str) -> None:
    (
        spark.read.format("streamworker_redis")
        .option("url", url)
        .option("streams", "src")
        .load()
        .select("id", "fields")
        .write.format("streamworker_redis")
        .option("url", url)
        .option("stream", "copy")
        .option("queryName", "nightly")
        .option("batchId", 7)
        .option("waitReplicas", 1)
        .option("waitTimeoutMs", TIMEOUT_MS)
        .mode("append")
        .save()
    )


def test_a_sink_commit_the_replica_did_not_acknowledge_fails_the_write_and_a_rerun_adds_nothing(
    spark: Any, pair: Replicated, primary: redis.Redis
) -> None:
    _fill(primary, "src", 50)
    with pair.replica_paused(), pytest.raises(Exception, match="may be lost on a failover"):
        _copy(spark, pair.url)
    assert primary.xlen("copy") == 50  # committed on the primary, but Spark saw the write fail
    _copy(spark, pair.url)  # the re-run: the marker says committed; it waits for the replica
    assert primary.xlen("copy") == 50
    with pair.replica.client() as replica:
        assert replica.xlen("copy") == 50


def test_a_trim_with_wait_replicas_raises_while_the_replica_is_stopped(
    pair: Replicated, primary: redis.Redis
) -> None:
    ids = _fill(primary, "events", 100)
    redisops.publish_cursor(primary, "archive", {"events": ids[59]})
    with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout) as caught:
        safe_trim(
            pair.url,
            "events",
            require=("archive",),
            wait_replicas=1,
            wait_timeout_ms=TIMEOUT_MS,
        )
    assert caught.value.retry_safe
    left = primary.xlen("events")
    assert left < 100  # trimmed on the primary; the replica had not acknowledged it
    again = safe_trim(pair.url, "events", require=("archive",), wait_replicas=1)
    assert again.trimmed == 0  # nothing more to trim, but it returns once the replica has it
    with pair.replica.client() as replica:
        assert replica.xlen("events") == left


def test_archive_with_wait_replicas_publishes_its_cursor_to_the_replica_before_a_trim(
    spark: Any, pair: Replicated, primary: redis.Redis, tmp_path: Path
) -> None:
    ids = _fill(primary, "events", 40)
    result = archive(spark, "events", str(tmp_path / "arch"), url=pair.url, wait_replicas=1)
    assert result.position == ids[-1]
    with pair.replica.client() as replica:
        assert redisops.read_cursors(replica, "events")["archive"] == ids[-1]
    trim = safe_trim(pair.url, "events", require=("archive",), wait_replicas=1)
    assert trim.trimmed == 40
    with pair.replica.client() as replica:
        assert replica.xlen("events") == 0
