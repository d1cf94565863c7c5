"""Option parsing of the streamworker_redis source (no JVM): Spark hands over lower-cased keys
and string values; typos and bad values fail with a message naming the option."""

from __future__ import annotations

import pytest

from streamworker.errors import ConfigError
from streamworker.spark.options import (
    DEFAULT_PAGE_SIZE,
    parse_read_options,
    parse_write_options,
)
from streamworker.spark.ranges import StreamId

URL = "redis://127.0.0.1:6379/0"


def test_lower_cased_keys_and_string_values_are_read() -> None:
    opts = parse_read_options(
        {
            "url": URL,
            "streams": "a, b",
            "numpartitions": "4",
            "maxrecordsperbatch": "20000",
            "failondataloss": "false",
            "startid": "100-0",
        }
    )
    assert opts.streams == ("a", "b")
    assert opts.num_partitions == 4
    assert opts.max_records_per_batch == 20_000
    assert opts.fail_on_data_loss is False
    assert opts.start_id == StreamId(100, 0)


def test_camel_case_keys_work_too() -> None:
    # A caller that passes the options as written in the docs (not through Spark).
    opts = parse_read_options({"url": URL, "streams": "a", "numPartitions": "3"})
    assert opts.num_partitions == 3


def test_defaults() -> None:
    opts = parse_read_options({"url": URL, "streams": "a"})
    # numPartitions None: the session's parallelism decides (see the source's task budget).
    assert (opts.start_id, opts.end_id, opts.num_partitions) == (None, None, None)
    assert (opts.page_size, opts.fields_type) == (DEFAULT_PAGE_SIZE, "binary")
    assert opts.fail_on_data_loss is True
    assert opts.starting_id == "earliest"
    assert opts.max_records_per_batch is None


def test_options_survive_the_round_trip_to_strings() -> None:
    opts = parse_read_options({"url": URL, "streams": "a,b", "startid": "5-1", "cursorname": "q"})
    assert parse_read_options(opts.as_dict) == opts


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"streams": "a"}, "option url is required"),
        ({"url": URL}, "option streams is required"),
        ({"url": URL, "streams": "a,a"}, "listed twice"),
        (
            {"url": URL, "streams": "a", "numpartitions": "four"},
            "option numPartitions: expected an int",
        ),
        ({"url": URL, "streams": "a", "numpartitions": "0"}, "between 1 and"),
        ({"url": URL, "streams": "a", "failondataloss": "maybe"}, "true or false"),
        ({"url": URL, "streams": "a", "startid": "9-0", "endid": "1-0"}, "above endId"),
        ({"url": URL, "streams": "a", "numpartition": "2"}, "unknown streamworker_redis read"),
        ({"url": "http://x", "streams": "a"}, "scheme"),
        ({"url": "engine://memory", "streams": "a"}, "in-process"),
        ({"url": URL, "streams": "a", "model": "NoColon"}, "module:Class"),
        ({"url": URL, "streams": "a", "fieldstype": "json"}, "option fieldsType: expected one"),
        ({"url": URL, "streams": "a", "starttime": "yesterday"}, "option startTime: expected an"),
        ({"url": URL, "streams": "a", "endtime": "1969-12-31"}, "option endTime: .* before 1970"),
        (
            {"url": URL, "streams": "a", "starttime": "2026-01-02", "endtime": "2026-01-01"},
            "the range is empty",
        ),
    ],
)
def test_bad_read_options_fail_clearly(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_read_options(options)


def test_start_and_end_time_become_an_id_range() -> None:
    opts = parse_read_options(
        {"url": URL, "streams": "a", "starttime": "2025-11-22", "endtime": "2025-11-22T02:00+01:00"}
    )
    midnight = 1_763_769_600_000  # 2025-11-22T00:00:00Z: no zone is UTC
    assert opts.start_id == StreamId(midnight, 0)
    assert opts.end_id == StreamId(midnight + 3_600_000 - 1, 2**64 - 1)  # the end is exclusive


def test_write_options_for_a_partitioned_stream() -> None:
    opts = parse_write_options(
        {"url": URL, "stream": "orders", "partitions": "8", "keycolumn": "customer"},
        streaming=False,
    )
    assert (opts.stream, opts.partitions, opts.key_column) == ("orders", 8, "customer")
    with pytest.raises(ConfigError, match="must not contain"):
        parse_write_options({"url": URL, "stream": "{orders}", "partitions": "8"}, streaming=False)
    with pytest.raises(ConfigError, match="cannot be combined"):
        parse_write_options(
            {"url": URL, "stream": "o", "partitions": "2", "idmode": "explicit"}, streaming=False
        )


def test_a_cluster_url_is_accepted() -> None:
    opts = parse_read_options({"url": "redis+cluster://h1:7000,h2:7001", "streams": "orders"})
    assert opts.url == "redis+cluster://h1:7000,h2:7001"


def test_starting_id_accepts_the_redis_spellings() -> None:
    assert parse_read_options({"url": URL, "streams": "a", "startingid": "$"}).starting_id == (
        "latest"
    )
    assert parse_read_options({"url": URL, "streams": "a", "startingid": "0"}).starting_id == (
        "earliest"
    )
    assert parse_read_options({"url": URL, "streams": "a", "startingid": "7"}).starting_id == "7-0"


def test_streaming_writes_need_a_query_name() -> None:
    with pytest.raises(ConfigError, match="queryName is required"):
        parse_write_options({"url": URL, "stream": "out"}, streaming=True)
    opts = parse_write_options(
        {"url": URL, "stream": "out", "queryname": "q", "checkpointlocation": "/x"}, streaming=True
    )
    assert (opts.stream, opts.query_name, opts.id_mode) == ("out", "q", "auto")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": URL, "stream": "a,b"}, "one target stream"),
        ({"url": URL, "batchid": "3"}, "needs option queryName"),
        ({"url": URL, "idmode": "guess"}, "idMode"),
        ({"url": URL, "target": "x"}, "unknown streamworker_redis write"),
    ],
)
def test_bad_write_options_fail_clearly(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_write_options(options, streaming=False)
