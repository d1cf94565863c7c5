"""Everything Spark ships to executors pickles (no JVM): readers, writers, partitions, commit
messages. A reader holding a live redis client would fail here with "cannot pickle
'_thread.RLock'" instead of at run time on a cluster."""

from __future__ import annotations

import pickle
import subprocess
import sys

from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from streamworker.spark.backfill import BackfillConfig
from streamworker.spark.options import parse_read_options, parse_write_options
from streamworker.spark.source import (
    BatchReader,
    BatchWriter,
    RedisStreamsDataSource,
    Staged,
    StreamRange,
    StreamReader,
    StreamWriter,
    session_source,
)

URL = "redis://127.0.0.1:1/0"  # never connected to: construction must not touch Redis
SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("id", StringType()),
        StructField("ms", LongType()),
        StructField("seq", LongType()),
        StructField("fields", MapType(StringType(), BinaryType())),
    ]
)


def roundtrip(obj: object) -> object:
    return pickle.loads(pickle.dumps(obj))


def test_readers_pickle_without_connecting() -> None:
    opts = parse_read_options({"url": URL, "streams": "a,b", "numpartitions": "2"})
    for reader in (BatchReader(opts), StreamReader(opts)):
        copy = roundtrip(reader)
        assert type(copy) is type(reader)
        assert copy.opts == opts  # type: ignore[attr-defined]


def test_writers_pickle_and_share_their_batch_token() -> None:
    batch = BatchWriter(
        parse_write_options({"url": URL, "stream": "o"}, streaming=False), SCHEMA, False
    )
    copy = roundtrip(batch)
    assert isinstance(copy, BatchWriter)
    assert copy.token == batch.token  # every task of one write stages under the same token
    stream = StreamWriter(
        parse_write_options({"url": URL, "stream": "o", "queryname": "q"}, streaming=True),
        SCHEMA,
        False,
    )
    assert isinstance(roundtrip(stream), StreamWriter)


def test_partitions_and_commit_messages_pickle() -> None:
    part = StreamRange("orders", "5-0", "9-3", check_from="5-0/12")
    assert roundtrip(part) == part
    assert roundtrip(part).id_range.hi.seq == 3  # type: ignore[attr-defined]
    staged = Staged([("o", "{o}:spark:stg:q:b1:0", 3)])
    assert roundtrip(staged) == staged


def test_backfill_config_pickles() -> None:
    config = BackfillConfig("m:app", None, "sqlite:///x.db", URL, "spark", False, 500, 1000)
    assert roundtrip(config) == config


def test_data_source_pickles() -> None:
    source = RedisStreamsDataSource({"url": URL, "streams": "a"})
    assert isinstance(roundtrip(source), RedisStreamsDataSource)


def test_the_registered_source_carries_the_session_settings_by_value() -> None:
    from pyspark import cloudpickle

    data = cloudpickle.dumps(session_source(12, True))
    # Loaded in a fresh interpreter, as Spark's planner workers load it.
    code = (
        "import pickle, sys; c = pickle.loads(sys.stdin.buffer.read()); "
        "print(c.parallelism, c.pushdown, c.name(), c.__mro__[1].__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == [
        "12", "True", "streamworker_redis", "RedisStreamsDataSource"
    ]  # fmt: skip


def test_importing_streamworker_spark_needs_no_pyspark() -> None:
    code = (
        "import sys; import streamworker, streamworker.spark, streamworker.cli; "
        "assert 'pyspark' not in sys.modules, sorted(m for m in sys.modules if 'spark' in m)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
