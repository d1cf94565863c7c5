"""Archive to Parquet and safe trim: after both, no pending or undelivered entry of any group is
gone, and everything trimmed is in the archive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from streamworker.spark import archive, redisops, safe_trim
from tests.spark.conftest import spark_env
from tests.support.proc import run_cli

pytestmark = pytest.mark.slow

DAY_MS = 86_400_000
DAY1 = 1_763_769_600_000  # 2025-11-22T00:00:00Z


def events(client: redis.Redis, n: int, start_ms: int) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd("events", {"n": str(i)}, id=f"{start_ms + i}-0")
    return [i.decode() for i in pipe.execute()]


def groups_state(client: redis.Redis) -> dict[str, tuple[str, list[str]]]:
    """group -> (last-delivered id, pending ids)."""
    out = {}
    for info in client.xinfo_groups("events"):
        name = info["name"].decode()
        pending = client.xpending_range("events", name, "-", "+", 10_000)
        out[name] = (
            info["last-delivered-id"].decode(),
            [p["message_id"].decode() for p in pending],
        )
    return out


def archived_ids(spark: Any, path: Path) -> list[str]:
    return [r.id for r in spark.read.parquet(str(path)).select("id").collect()]


def test_archive_then_safe_trim_keeps_what_groups_need_and_trims_only_archived(
    spark: Any, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    ids = events(redis_client, 600, DAY1 - 300) + events(redis_client, 600, DAY1 + DAY_MS)
    # "slow" read 400 and acked the first 250: pending 250..399. "fast" has everything up to 900.
    redis_client.xgroup_create("events", "slow", id="0")
    redis_client.xreadgroup("slow", "c", {"events": ">"}, count=400)
    redis_client.xack("events", "slow", *ids[:250])
    redis_client.xgroup_create("events", "fast", id=ids[900])
    before = groups_state(redis_client)

    result = archive(
        spark, "events", str(tmp_path / "arch"), url=redis_url, max_records_per_batch=500
    )
    assert (result.rows, result.batches, result.position) == (1200, 3, ids[-1])
    dates = sorted(p.name for p in (tmp_path / "arch").iterdir() if p.name.startswith("date="))
    assert dates == ["date=2025-11-21", "date=2025-11-22", "date=2025-11-23"]
    assert redisops.read_cursors(redis_client, "events")["archive"] == ids[-1]

    trim = safe_trim(redis_url, "events", require=("archive",))
    assert (trim.trimmed, trim.floor) == (250, ids[250])
    left = [e[0].decode() for e in redis_client.xrange("events")]
    assert left == ids[250:]
    for last, pending in before.values():
        assert set(pending) <= set(left)  # every pending entry is still readable
        assert all(i in left for i in ids if i > last)  # and every undelivered one
    assert groups_state(redis_client) == before  # the groups were not touched
    assert set(ids[:250]) <= set(archived_ids(spark, tmp_path / "arch"))


def test_a_second_archive_run_appends_only_new_entries(
    spark: Any, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    ids = events(redis_client, 300, DAY1)
    archive(spark, "events", str(tmp_path / "arch"), url=redis_url)
    ids += events(redis_client, 50, DAY1 + 1000)
    again = archive(spark, "events", str(tmp_path / "arch"), url=redis_url)
    assert (again.rows, again.position) == (50, ids[-1])
    assert sorted(archived_ids(spark, tmp_path / "arch")) == sorted(ids)


@pytest.mark.timeout(900)  # two JVMs on a loaded 2-core machine
def test_the_cli_archives_with_progress_and_trims(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    ids = events(redis_client, 500, DAY1)
    redis_client.xgroup_create("events", "g", id=ids[199])  # nothing pending: keep 200..
    result = run_cli(
        "archive", "events", "--to", str(tmp_path / "arch"), "--redis-url", redis_url,
        "--master", "local[1]", "--max-records-per-batch", "200", "--trim",
        env=spark_env(), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "archive events: " in result.stderr  # progress lines
    assert f"archived 500 entries in 3 batch(es) to {tmp_path / 'arch'}" in result.stdout
    assert "trimmed 200 entries" in result.stdout
    assert redis_client.xrange("events", count=1)[0][0].decode() == ids[200]


def test_the_cli_refuses_an_unreachable_redis_before_starting_spark(tmp_path: Path) -> None:
    result = run_cli(
        "archive", "events", "--to", str(tmp_path), "--redis-url", "redis://127.0.0.1:1/0"
    )
    assert result.returncode == 1
    assert "cannot reach Redis" in result.stderr


def test_trimming_without_the_archive_cursor_is_refused(
    redis_client: redis.Redis, redis_url: str
) -> None:
    events(redis_client, 10, DAY1)
    with pytest.raises(Exception, match="cursor archive of events is missing"):
        safe_trim(redis_url, "events", require=("archive",))
    assert redis_client.xlen("events") == 10
