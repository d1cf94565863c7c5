"""The source's planning and reading in-process against a real redis-server, without a JVM:
pipelined pages, Arrow batches, cuts by entry counts, the default task budget, filter pruning,
partitioned streams and globs, the sink's routing by key, and one-line errors."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamworker.errors import ConfigError, StreamworkerError
from streamworker.io.keys import partition_stream
from streamworker.producing.partitions import partition_of
from streamworker.spark import read
from streamworker.spark.errors import carried_error, clear_errors
from streamworker.spark.fastread import BatchBuilder, raw_pages
from streamworker.spark.options import parse_read_options, parse_write_options
from streamworker.spark.ranges import IdRange, StreamId
from streamworker.spark.redisops import DataLoss, commit_staged, resolve_streams
from streamworker.spark.source import (
    MIN_ROWS_PER_TASK,
    BatchReader,
    PushdownBatchReader,
    StreamRange,
    StreamReader,
    _RowLayout,
    _stage_rows,
    arrow_schema,
)

pytestmark = pytest.mark.redis


def opts(url: str, **extra: str) -> Any:
    return parse_read_options({"url": url, **extra})


def rows(reader: Any, parts: Any) -> list[dict[str, Any]]:
    return [row for p in parts for batch in reader.read(p) for row in batch.to_pylist()]


def explicit(client: redis.Redis, stream: str, ms_list: list[int]) -> list[str]:
    """Entries at the given milliseconds (several in one ms get seq 0, 1, …)."""
    pipe = client.pipeline(transaction=False)
    seq: dict[int, int] = {}
    for i, ms in enumerate(ms_list):
        n = seq.get(ms, 0)
        seq[ms] = n + 1
        pipe.xadd(stream, {"n": str(i)}, id=f"{ms}-{n}")
        if len(pipe) >= 5_000:
            pipe.execute()
    pipe.execute()
    return [e[0].decode() for e in client.xrange(stream)]


# -------------------------------------------------------------------------------------------
# Reading


def test_pages_follow_the_exclusive_start_to_the_range_end(redis_client: redis.Redis) -> None:
    ids = explicit(redis_client, "a", list(range(1000, 1025)))
    rng = IdRange(StreamId.parse(ids[2]), StreamId.parse(ids[-3]))
    pages = list(raw_pages(redis_client, "a", rng, 4))
    assert [e[0].decode() for page in pages for e in page] == ids[3:-2]
    assert [len(p) for p in pages] == [4, 4, 4, 4, 4]


def test_an_abandoned_page_reader_leaves_no_reply_behind(redis_client: redis.Redis) -> None:
    explicit(redis_client, "a", list(range(1000, 1100)))
    pages = raw_pages(redis_client, "a", IdRange(None, StreamId(2000, 0)), 10)
    next(pages)  # the second page is requested already
    pages.close()
    # The connection went away with its pending reply: the next command reads its own.
    assert redis_client.xlen("a") == 100
    assert redis_client.ping()


def test_batches_carry_ids_times_and_fields(redis_client: redis.Redis) -> None:
    redis_client.xadd("a", {"amount": "12", b"\xffname": b"\x00\x01"}, id="1763769600123-7")
    options = opts(redis_client_url(redis_client), streams="a")
    builder = BatchBuilder("a", arrow_schema(options))
    [page] = raw_pages(redis_client, "a", IdRange(None, StreamId(2**63, 0)), 10)
    [row] = builder.batch(page).to_pylist()
    assert row["stream"] == "a"
    assert (row["id"], row["ms"], row["seq"]) == ("1763769600123-7", 1763769600123, 7)
    assert row["timestamp"] == datetime(2025, 11, 22, 0, 0, 0, 123_000, tzinfo=UTC)
    assert dict(row["fields"]) == {"amount": b"12", "\ufffdname": b"\x00\x01"}


def test_fields_type_string_gives_text_values(redis_client: redis.Redis) -> None:
    redis_client.xadd("a", {"amount": "12", "bad": b"\xff"}, id="5-0")
    options = opts(redis_client_url(redis_client), streams="a", fieldsType="string")
    [page] = raw_pages(redis_client, "a", IdRange(None, StreamId(9, 0)), 10)
    [row] = BatchBuilder("a", arrow_schema(options)).batch(page).to_pylist()
    assert dict(row["fields"]) == {"amount": "12", "bad": "\ufffd"}


@pytest.mark.parametrize("fields_type", ["binary", "string"])
def test_the_arrow_schema_is_the_one_spark_expects(fields_type: str) -> None:
    value = BinaryType() if fields_type == "binary" else StringType()
    spark_schema = StructType(
        [
            StructField("stream", StringType()),
            StructField("id", StringType()),
            StructField("ms", LongType()),
            StructField("seq", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("fields", MapType(StringType(), value)),
        ]
    )
    ours = arrow_schema(opts("redis://127.0.0.1:1/0", streams="a", fieldsType=fields_type))
    assert ours.equals(to_arrow_schema(spark_schema, timezone="UTC"))


def redis_client_url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


# -------------------------------------------------------------------------------------------
# Planning


def test_a_bursty_stream_is_cut_by_entry_counts(redis_client: redis.Redis, redis_url: str) -> None:
    """2,000 quiet entries (one per ms), a burst of 40,000 in 20 ms, 2,000 quiet again. Cut
    at equal times, one of four tasks would get the whole burst."""
    base = 1_700_000_000_000
    burst = [base + 2_000 + i // 2_000 for i in range(40_000)]
    ms_list = [base + i for i in range(2_000)] + burst + [base + 2_020 + i for i in range(2_000)]
    explicit(redis_client, "s", ms_list)
    reader = BatchReader(opts(redis_url, streams="s", numPartitions="4"))
    parts = reader.partitions()
    sizes = [len(rows(reader, [p])) for p in parts]
    assert sum(sizes) == 44_000
    assert len(parts) == 4
    assert max(sizes) < 1.5 * 44_000 / 4, sizes


def test_without_num_partitions_the_session_parallelism_is_shared_by_size(
    redis_client: redis.Redis, redis_url: str
) -> None:
    explicit(redis_client, "big", list(range(1, 4 * MIN_ROWS_PER_TASK + 1)))
    explicit(redis_client, "small", list(range(1, 101)))
    parts = BatchReader(opts(redis_url, streams="big,small"), parallelism=5).partitions()
    per_stream = {s: sum(1 for p in parts if p.stream == s) for s in ("big", "small")}
    assert per_stream == {"big": 4, "small": 1}  # 5 cores, but no task under the minimum rows


def test_a_small_stream_gets_one_task_however_many_cores(
    redis_client: redis.Redis, redis_url: str
) -> None:
    explicit(redis_client, "s", list(range(1, 1001)))
    assert len(BatchReader(opts(redis_url, streams="s"), parallelism=64).partitions()) == 1


def test_start_and_end_time_bound_the_read(redis_client: redis.Redis, redis_url: str) -> None:
    day = 1_763_769_600_000  # 2025-11-22T00:00:00Z
    ids = explicit(redis_client, "s", [day - 1, day, day + 5, day + 86_400_000])
    reader = BatchReader(
        opts(redis_url, streams="s", startTime="2025-11-22", endTime="2025-11-23T00:00:00Z")
    )
    assert [r["id"] for r in rows(reader, reader.partitions())] == ids[1:3]


def test_timestamp_filters_prune_the_ranges_read(redis_client: redis.Redis, redis_url: str) -> None:
    day = 1_763_769_600_000
    ids = explicit(redis_client, "s", [day + i * 1000 for i in range(10)])
    reader = PushdownBatchReader(opts(redis_url, streams="s", numPartitions="1"))
    since = datetime.fromtimestamp((day + 4_000) / 1000, UTC)
    filters = [GreaterThanOrEqual(("timestamp",), since), LessThan(("ms",), day + 7_000)]
    assert list(reader.pushFilters(filters)) == filters  # Spark checks them again
    assert [r["id"] for r in rows(reader, reader.partitions())] == ids[4:8]


def test_id_filters_prune_only_where_text_order_is_id_order(
    redis_client: redis.Redis, redis_url: str
) -> None:
    # ms of 1 to 4 digits: "900-0" > "1000-0" as text, so an id filter must not prune here.
    ids = explicit(redis_client, "s", [5, 90, 900, 1000])
    reader = PushdownBatchReader(opts(redis_url, streams="s", numPartitions="1"))
    reader.pushFilters([GreaterThan(("id",), "1000-0")])
    assert [r["id"] for r in rows(reader, reader.partitions())] == ids
    explicit(redis_client, "t", [1000, 2000, 3000])
    reader = PushdownBatchReader(opts(redis_url, streams="t", numPartitions="1"))
    reader.pushFilters([EqualTo(("id",), "2000-0")])
    assert [r["id"] for r in rows(reader, reader.partitions())] == ["2000-0"]


# -------------------------------------------------------------------------------------------
# Partitioned streams and globs


def test_a_partitioned_stream_name_reads_every_partition(
    redis_client: redis.Redis, redis_url: str
) -> None:
    for i in (0, 1, 3):  # partition 2 has never had an entry
        explicit(redis_client, partition_stream("orders", i), [100 + i, 200 + i])
    redis_client.xadd("orders:other", {"n": "1"})
    expected = [partition_stream("orders", i) for i in (0, 1, 3)]
    assert resolve_streams(redis_client, ["orders"]) == expected
    reader = BatchReader(opts(redis_url, streams="orders"))
    assert sorted({r["stream"] for r in rows(reader, reader.partitions())}) == expected


def test_a_glob_matches_stream_keys_and_partitioned_names(redis_client: redis.Redis) -> None:
    explicit(redis_client, partition_stream("orders", 0), [1])
    explicit(redis_client, "orders2", [1])
    explicit(redis_client, "refunds", [1])
    redis_client.set("orders3", "not a stream")
    # Partitions sort by their stream name: {orders:p0} as "orders", before "orders2".
    assert resolve_streams(redis_client, ["ord*"]) == [partition_stream("orders", 0), "orders2"]


def test_a_plain_stream_key_is_read_as_itself(redis_client: redis.Redis) -> None:
    explicit(redis_client, "orders", [1])
    explicit(redis_client, partition_stream("orders", 0), [1])
    assert resolve_streams(redis_client, ["orders", "missing"]) == ["orders", "missing"]


def test_streaming_offsets_are_per_partition_and_a_new_partition_joins(
    redis_client: redis.Redis, redis_url: str
) -> None:
    p0, p1 = partition_stream("orders", 0), partition_stream("orders", 1)
    explicit(redis_client, p0, [1, 2, 3])
    reader = StreamReader(opts(redis_url, streams="orders"))
    start = reader.initialOffset()
    assert start == {p0: "0-0/0"}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {p0: "3-0/3"}
    explicit(redis_client, p1, [5, 6])
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later == {p0: "3-0/3", p1: "6-0/2"}
    assert [r["id"] for r in rows(reader, reader.partitions(end, later))] == ["5-0", "6-0"]


# -------------------------------------------------------------------------------------------
# The sink's routing by key


def test_the_sink_routes_rows_to_partitions_by_key(
    redis_client: redis.Redis, redis_url: str
) -> None:
    options = parse_write_options(
        {"url": redis_url, "stream": "orders", "partitions": "4", "queryName": "q"},
        streaming=False,
    )
    schema = StructType([StructField("key", StringType()), StructField("amount", StringType())])
    layout = _RowLayout(options, schema)
    data = [(f"customer-{i % 10}", str(i)) for i in range(200)]
    staged = _stage_rows(options, layout, iter(data), "q", "b1", 0)
    for target, key, _ in staged.staged:
        commit_staged(redis_client, target, [key], query="q", batch_id=1, id_mode="auto")
    for i in range(4):
        entries = redis_client.xrange(partition_stream("orders", i))
        keys = {f[b"key"].decode() for _, f in entries}
        assert all(partition_of(k, 4) == i for k in keys)
    assert sum(redis_client.xlen(partition_stream("orders", i)) for i in range(4)) == 200


def test_the_sink_refuses_partitions_without_a_key_column(redis_url: str) -> None:
    options = parse_write_options(
        {"url": redis_url, "stream": "orders", "partitions": "4"}, streaming=False
    )
    with pytest.raises(ConfigError, match="need a 'key' column"):
        _RowLayout(options, StructType([StructField("amount", StringType())]))


# -------------------------------------------------------------------------------------------
# One-line errors


SPARK_TEXT = (
    "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most "
    'recent call last):\n  File "/x/streamworker/spark/options.py", line 101, in _int\n    raise '
    "ConfigError(...)\nstreamworker.errors.ConfigError: option numPartitions: expected an "
    "integer, got 'many'\n SQLSTATE: 38000"
)


def test_a_spark_error_carrying_a_config_error_becomes_that_one_line() -> None:
    found = carried_error(RuntimeError(SPARK_TEXT))
    assert isinstance(found, ConfigError)
    assert str(found) == "option numPartitions: expected an integer, got 'many'"


def test_clear_errors_re_raises_data_loss_as_itself() -> None:
    text = "org.apache.spark.SparkException: ...\nstreamworker.spark.redisops.DataLoss: gone\n"
    with pytest.raises(DataLoss, match=r"^gone$"), clear_errors():
        raise RuntimeError(text)


def test_clear_errors_passes_other_errors_unchanged() -> None:
    with pytest.raises(ZeroDivisionError), clear_errors():
        _ = 1 / 0


def test_the_read_helper_checks_options_before_spark_plans(redis_url: str) -> None:
    with pytest.raises(ConfigError) as info:
        read(None, url=redis_url, streams="a", numPartitions="many")  # type: ignore[arg-type]
    assert str(info.value) == "option numPartitions: expected an integer, got 'many'"
    assert isinstance(info.value, StreamworkerError)


def test_a_stream_partition_repr_names_its_range() -> None:
    assert repr(StreamRange("a", "1-0", "2-0")) == "StreamRange('a', (1-0, 2-0])"
