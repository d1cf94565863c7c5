"""The Redis side of streamworker.spark against a real redis-server, without a JVM: the sink's
commit script, safe_trim.lua, the backfill's dead-letter script, the data-loss check, and the
source's driver and executor methods called in-process."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from streamworker.errors import StreamworkerError
from streamworker.idempotency.sql import sortable_id
from streamworker.spark import redisops
from streamworker.spark.options import parse_read_options, parse_write_options
from streamworker.spark.source import (
    BatchReader,
    StreamRange,
    StreamReader,
    _RowLayout,
    _stage_rows,
)
from tests.unit.test_spark_pickle import SCHEMA


def add(client: redis.Redis, stream: str, n: int, start_ms: int = 1000) -> list[str]:
    return [
        client.xadd(stream, {"n": str(i)}, id=f"{start_ms + i // 3}-{i % 3}").decode()
        for i in range(n)
    ]


def rows_of(reader: Any, part: Any) -> list[tuple[Any, ...]]:
    """What ``reader.read(part)`` yields (Arrow batches or tuples), as row tuples."""
    out: list[tuple[Any, ...]] = []
    for item in reader.read(part):
        if isinstance(item, tuple):
            out.append(item)
        else:
            out.extend(tuple(d.values()) for d in item.to_pylist())
    return out


def staged_rows(client: redis.Redis, key: str, ids: list[str], mode: str = "auto") -> None:
    rows = [
        redisops.encode_row(sortable_id(i), i if mode == "explicit" else "", [(b"src", i.encode())])
        for i in ids
    ]
    redisops.stage(client, key, rows, 600)


# -------------------------------------------------------------------------------------------
# The sink


def test_commit_appends_every_task_rows_in_id_order(redis_client: redis.Redis) -> None:
    ids = [f"{10 + i}-0" for i in range(40)]
    # Four tasks, each with every fourth id: interleaved ranges, as a shuffle produces.
    keys = [redisops.staging_key("out", "q", "b0", p) for p in range(4)]
    for p, key in enumerate(keys):
        staged_rows(redis_client, key, ids[p::4], mode="explicit")
    result = redisops.commit_staged(
        redis_client, "out", keys, query="q", batch_id=0, id_mode="explicit"
    )
    assert (result.added, result.replayed) == (40, False)
    assert [e[0].decode() for e in redis_client.xrange("out")] == ids
    assert not any(redis_client.exists(k) for k in keys)  # staging is cleaned up


def test_a_replayed_batch_adds_nothing(redis_client: redis.Redis) -> None:
    key = redisops.staging_key("out", "q", "7", 0)
    staged_rows(redis_client, key, ["1-0", "2-0"])
    first = redisops.commit_staged(
        redis_client, "out", [key], query="q", batch_id=7, id_mode="auto"
    )
    staged_rows(redis_client, key, ["1-0", "2-0"])  # the re-run batch stages again
    again = redisops.commit_staged(
        redis_client, "out", [key], query="q", batch_id=7, id_mode="auto"
    )
    assert (first.added, again.added, again.replayed) == (2, 0, True)
    assert redis_client.xlen("out") == 2
    assert redisops.last_committed_batch(redis_client, "out", "q") == 7
    assert not redis_client.exists(key)


def test_markers_are_per_query(redis_client: redis.Redis) -> None:
    for query in ("q1", "q2"):
        key = redisops.staging_key("out", query, "0", 0)
        staged_rows(redis_client, key, ["1-0"])
        redisops.commit_staged(redis_client, "out", [key], query=query, batch_id=0, id_mode="auto")
    assert redis_client.xlen("out") == 2


def test_explicit_ids_not_above_the_stream_top_write_nothing(redis_client: redis.Redis) -> None:
    redis_client.xadd("out", {"x": "1"}, id="50-0")
    key = redisops.staging_key("out", "q", "0", 0)
    staged_rows(redis_client, key, ["60-0", "40-0"], mode="explicit")
    with pytest.raises(StreamworkerError, match="40-0 is not above"):
        redisops.commit_staged(
            redis_client, "out", [key], query="q", batch_id=0, id_mode="explicit"
        )
    assert redis_client.xlen("out") == 1  # not even 60-0: the check runs before any XADD
    assert redisops.last_committed_batch(redis_client, "out", "q") is None


def test_a_row_without_fields_is_refused_before_staging() -> None:
    with pytest.raises(ValueError, match="no fields"):
        redisops.encode_row("", "", [])


def test_binary_fields_survive_the_round_trip(redis_client: redis.Redis) -> None:
    value = bytes(range(256)) + b"12:ab"
    key = redisops.staging_key("out", "q", "0", 0)
    redisops.stage(redis_client, key, [redisops.encode_row("", "", [(b"k:3", value)])], 600)
    redisops.commit_staged(redis_client, "out", [key], query="q", batch_id=0, id_mode="auto")
    [(_, fields)] = redis_client.xrange("out")
    assert fields == {b"k:3": value}


def test_writer_tasks_stage_and_commit_in_process(
    redis_client: redis.Redis, redis_url: str
) -> None:
    opts = parse_write_options(
        {"url": redis_url, "stream": "copy", "queryname": "q"}, streaming=True
    )
    layout = _RowLayout(opts, SCHEMA)
    rows = [("src", f"{i}-0", i, 0, {"n": str(i).encode()}) for i in range(1, 11)]
    messages = [_stage_rows(opts, layout, iter(rows[p::2]), "q", "3", p) for p in range(2)]
    from streamworker.spark.source import _commit_all

    results = _commit_all(opts, messages, "q", 3)
    assert [r.added for r in results] == [10]
    assert [f[b"n"] for _, f in redis_client.xrange("copy")] == [
        str(i).encode() for i in range(1, 11)
    ]
    assert _commit_all(opts, messages, "q", 3)[0].replayed


# -------------------------------------------------------------------------------------------
# Reading


def test_batch_reader_pins_the_end_and_reads_every_entry_once(
    redis_client: redis.Redis, redis_url: str
) -> None:
    ids = add(redis_client, "s", 300)
    reader = BatchReader(
        parse_read_options({"url": redis_url, "streams": "s", "numpartitions": "4"})
    )
    parts = reader.partitions()
    redis_client.xadd("s", {"n": "late"})  # after planning: must not leak in
    seen = [row[1] for p in parts for row in rows_of(reader, p)]
    assert len(parts) == 4
    assert seen == ids


def test_batch_reader_honours_start_and_end(redis_client: redis.Redis, redis_url: str) -> None:
    ids = add(redis_client, "s", 30)
    reader = BatchReader(
        parse_read_options(
            {
                "url": redis_url,
                "streams": "s",
                "startid": ids[5],
                "endid": ids[20],
                "numpartitions": "3",
            }
        )
    )
    assert [row[1] for p in reader.partitions() for row in rows_of(reader, p)] == ids[5:21]


def test_batch_reader_of_a_missing_stream_reads_nothing(redis_url: str) -> None:
    reader = BatchReader(parse_read_options({"url": redis_url, "streams": "nothing"}))
    assert [row for p in reader.partitions() for row in rows_of(reader, p)] == []


def test_stream_reader_caps_batches_across_streams(
    redis_client: redis.Redis, redis_url: str
) -> None:
    add(redis_client, "a", 50)
    add(redis_client, "b", 5)
    reader = StreamReader(
        parse_read_options({"url": redis_url, "streams": "a,b", "maxrecordsperbatch": "20"})
    )
    start = reader.initialOffset()
    assert start == {"a": "0-0/0", "b": "0-0/0"}
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    end = reader.latestOffset(start, ReadMaxRows(20))
    rows = [r for p in reader.partitions(start, end) for r in rows_of(reader, p)]
    assert len(rows) == 20
    assert sum(r[0] == "b" for r in rows) == 5  # what b could not use went to a
    everything = reader.latestOffset(start, ReadAllAvailable())
    assert len([r for p in reader.partitions(start, everything) for r in rows_of(reader, p)]) == 55


def test_stream_reader_available_now_stops_at_the_heads_seen_first(
    redis_client: redis.Redis, redis_url: str
) -> None:
    ids = add(redis_client, "a", 10)
    reader = StreamReader(parse_read_options({"url": redis_url, "streams": "a"}))
    reader.prepareForTriggerAvailableNow()
    redis_client.xadd("a", {"n": "later"})
    assert reader.latestOffset(reader.initialOffset(), ReadAllAvailable()) == {"a": f"{ids[-1]}/10"}


def test_stream_reader_fails_loudly_when_its_next_range_was_trimmed(
    redis_client: redis.Redis, redis_url: str
) -> None:
    ids = add(redis_client, "a", 30)
    reader = StreamReader(parse_read_options({"url": redis_url, "streams": "a"}))
    start = reader.latestOffset(reader.initialOffset(), ReadMaxRows(5))
    assert start == {"a": f"{ids[4]}/5"}
    redis_client.xtrim("a", minid=ids[10], approximate=False)  # ids[5:10] were never read
    with pytest.raises(redisops.DataLoss, match="5 entries after"):
        reader.latestOffset(start, ReadAllAvailable())
    with pytest.raises(redisops.DataLoss):
        reader.partitions(start, {"a": f"{ids[-1]}/30"})
    part = StreamRange("a", ids[4], ids[-1], check_from=start["a"])
    with pytest.raises(redisops.DataLoss):
        list(reader.read(part))
    lenient = StreamReader(
        parse_read_options({"url": redis_url, "streams": "a", "failondataloss": "false"})
    )
    assert lenient.latestOffset(start, ReadAllAvailable()) == {"a": f"{ids[-1]}/30"}


def test_trimming_only_what_was_read_is_not_data_loss(
    redis_client: redis.Redis, redis_url: str
) -> None:
    ids = add(redis_client, "a", 30)
    reader = StreamReader(parse_read_options({"url": redis_url, "streams": "a"}))
    start = reader.latestOffset(reader.initialOffset(), ReadMaxRows(10))
    redis_client.xtrim("a", minid=ids[10], approximate=False)  # exactly what was read
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": f"{ids[-1]}/30"}
    end = reader.latestOffset(start, ReadAllAvailable())
    redis_client.xtrim("a", maxlen=0, approximate=False)  # everything, all read
    redis_client.xadd("a", {"n": "new"})
    newest = reader.latestOffset(end, ReadAllAvailable())
    assert [r[1] for p in reader.partitions(end, newest) for r in rows_of(reader, p)] == [
        redis_client.xrange("a")[0][0].decode()
    ]


def test_entries_trimmed_before_an_earliest_query_started_are_not_a_loss(
    redis_client: redis.Redis, redis_url: str
) -> None:
    ids = add(redis_client, "a", 30)
    redis_client.xtrim("a", minid=ids[10], approximate=False)
    reader = StreamReader(parse_read_options({"url": redis_url, "streams": "a"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert [r[1] for p in reader.partitions(start, end) for r in rows_of(reader, p)] == ids[10:]


def test_the_committed_position_is_published(redis_client: redis.Redis, redis_url: str) -> None:
    reader = StreamReader(parse_read_options({"url": redis_url, "streams": "a", "cursorname": "q"}))
    reader.commit({"a": "5-0/3"})
    assert redisops.read_cursors(redis_client, "a") == {"q": "5-0"}


# -------------------------------------------------------------------------------------------
# safe_trim.lua


def test_trim_keeps_every_pending_and_undelivered_entry(redis_client: redis.Redis) -> None:
    ids = add(redis_client, "s", 30)
    redis_client.xgroup_create("s", "slow", id="0")
    redis_client.xreadgroup("slow", "c", {"s": ">"}, count=12)
    redis_client.xack("s", "slow", *ids[:7])  # oldest pending: ids[7]
    redis_client.xgroup_create("s", "fast", id=ids[20])  # nothing pending: keep ids[21:]
    result = redisops.safe_trim(redis_client, "s")
    assert (result.trimmed, result.floor, result.groups) == (7, ids[7], 2)
    assert redis_client.xrange("s")[0][0].decode() == ids[7]


def test_trim_respects_every_published_cursor(redis_client: redis.Redis) -> None:
    ids = add(redis_client, "s", 30)
    redis_client.xgroup_create("s", "g", id="$")
    redisops.publish_cursor(redis_client, "archive", {"s": ids[15]})
    redisops.publish_cursor(redis_client, "other", {"s": ids[3]})
    result = redisops.safe_trim(redis_client, "s", require=["archive"])
    assert (result.trimmed, result.floor, result.cursors) == (4, ids[4], 2)


def test_trim_refuses_without_a_required_cursor(redis_client: redis.Redis) -> None:
    add(redis_client, "s", 10)
    redis_client.xgroup_create("s", "g", id="$")
    with pytest.raises(StreamworkerError, match="cursor archive of s is missing"):
        redisops.safe_trim(redis_client, "s", require=["archive"])
    assert redis_client.xlen("s") == 10


def test_trim_with_nothing_protecting_the_stream_trims_nothing(redis_client: redis.Redis) -> None:
    add(redis_client, "s", 10)
    assert redisops.safe_trim(redis_client, "s").trimmed == 0
    assert redis_client.xlen("s") == 10


def test_trim_when_everyone_is_done_empties_the_stream(redis_client: redis.Redis) -> None:
    add(redis_client, "s", 10)
    redis_client.xgroup_create("s", "g", id="$")
    result = redisops.safe_trim(redis_client, "s")
    assert (result.trimmed, result.floor) == (10, "+")
    assert redis_client.exists("s")
    assert redis_client.xinfo_groups("s")


def test_trim_of_a_missing_stream_is_a_no_op(redis_client: redis.Redis) -> None:
    assert redisops.safe_trim(redis_client, "nothing").trimmed == 0


# -------------------------------------------------------------------------------------------
# dead_letter_backfill.lua


def test_backfill_dead_letters_once_with_provenance(redis_client: redis.Redis) -> None:
    script = redisops.SyncScript("dead_letter_backfill")
    args = ["orders", "5-0", "billing", "spark", "ValueError: bad", "h", 123, 60_000, b"n", b"5"]
    keys = ["{orders}:dlq", "{orders}:dlq:spark:billing"]
    first = script(redis_client, keys, args)
    again = script(redis_client, keys, args)
    assert first == again
    [(_, fields)] = redis_client.xrange("{orders}:dlq")
    assert fields[b"n"] == b"5"
    assert fields[b"dlq_id"] == b"5-0"
    assert fields[b"dlq_error"] == b"ValueError: bad"
    assert fields[b"dlq_group"] == b"billing"
    assert fields[b"dlq_stream"] == b"orders"


def test_a_write_without_a_batch_id_appends_and_keeps_no_marker(redis_client: redis.Redis) -> None:
    for _ in range(2):
        key = redisops.staging_key("out", "q", "tok", 0)
        staged_rows(redis_client, key, ["1-0"])
        redisops.commit_staged(redis_client, "out", [key], query="q", batch_id=None, id_mode="auto")
    assert redis_client.xlen("out") == 2
    assert redisops.last_committed_batch(redis_client, "out", "q") is None


# -------------------------------------------------------------------------------------------
# The backfill's partition function, in-process (SQLite)


def backfill_rows(
    redis_url: str, db_url: str, rows: list[dict[str, Any]], **overrides: Any
) -> dict[str, tuple[str, str | None]]:
    from streamworker.spark.backfill import BackfillConfig, process_partition

    settings: dict[str, Any] = {
        "target": "tests.spark.backfill_app:app",
        "handler": None,
        "db_url": db_url,
        "redis_url": redis_url,
        "consumer": "bf:1",
        "dead_letter": False,
        "chunk_size": 4,
        "sqlite_busy_timeout_ms": 5_000,
        **overrides,
    }
    out = process_partition(BackfillConfig(**settings), iter(rows))
    return {r[1]: (r[2], r[3]) for r in out}


@pytest.fixture
def shop(redis_client: redis.Redis, sqlite_url: str) -> tuple[list[str], list[dict[str, Any]]]:
    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql.migrate import upgrade
    from tests.support.sql import create_business_tables

    db = SqlDatabase(sqlite_url)
    upgrade(db)
    db.sync_engine.dispose()
    create_business_tables(sqlite_url)
    ids = [redis_client.xadd("orders", {"n": str(i)}).decode() for i in range(10)]
    rows = [
        {"stream": "orders", "id": i, "fields": {"n": str(n).encode()}} for n, i in enumerate(ids)
    ]
    return ids, rows


def test_backfill_applies_once_and_a_rerun_reports_duplicates(
    redis_url: str, sqlite_url: str, shop: tuple[list[str], list[dict[str, Any]]]
) -> None:
    from tests.support.sql import charges_per_message

    ids, rows = shop
    first = backfill_rows(redis_url, sqlite_url, rows)
    assert {o for o, _ in first.values()} == {"ok"}
    again = backfill_rows(redis_url, sqlite_url, rows, consumer="bf:2")
    assert {o for o, _ in again.values()} == {"duplicate"}
    assert charges_per_message(sqlite_url) == dict.fromkeys(ids, 1)


def test_backfill_skips_what_the_group_delivered_and_acked(
    redis_client: redis.Redis,
    redis_url: str,
    sqlite_url: str,
    shop: tuple[list[str], list[dict[str, Any]]],
) -> None:
    ids, rows = shop
    redis_client.xgroup_create("orders", "billing", id=ids[5])  # as if 0..5 were handled
    out = backfill_rows(redis_url, sqlite_url, rows)
    assert [out[i][0] for i in ids] == ["duplicate"] * 6 + ["ok"] * 4
    assert "acked by group 'billing'" in str(out[ids[0]][1])
    # History the group never delivered (it was created past it) is backfilled on request.
    out = backfill_rows(redis_url, sqlite_url, rows, skip_delivered=False, consumer="bf:3")
    assert [out[i][0] for i in ids] == ["ok"] * 6 + ["duplicate"] * 4


def test_backfill_refuses_entries_of_another_stream(
    redis_url: str, sqlite_url: str, shop: tuple[list[str], list[dict[str, Any]]]
) -> None:
    _, rows = shop
    other = [{**rows[0], "stream": "refunds"}]
    [(outcome, why)] = backfill_rows(redis_url, sqlite_url, other).values()
    assert outcome == "failed"
    assert "consumes 'orders'" in str(why)
