"""Partitioned streams and cluster URLs, without a server: stable routing, key names that keep
each partition in one slot, handler registration, and the errors for bad input."""

from __future__ import annotations

import zlib

import pytest
from redis.crc import key_slot

from streamworker import App, Message
from streamworker.errors import ConfigError
from streamworker.io.keys import dead_letter_stream, lease_key, partition_stream
from streamworker.io.redisio import _stream_keys, cluster_nodes, is_cluster_url, validate_redis_url
from streamworker.producing.partitions import PartitionedStream, partition_of


def test_a_key_routes_by_crc32_modulo_the_partition_count() -> None:
    assert partition_of("customer-42", 8) == zlib.crc32(b"customer-42") % 8
    assert partition_of(b"customer-42", 8) == partition_of("customer-42", 8)
    # Known values: the routing must never change between versions.
    assert [partition_of(f"k{i}", 8) for i in range(6)] == [
        zlib.crc32(f"k{i}".encode()) % 8 for i in range(6)
    ]
    assert partition_of("anything", 1) == 0


def test_partition_streams_are_hash_tagged_and_their_keys_share_the_slot() -> None:
    orders = PartitionedStream("orders", 4)
    assert orders.streams() == ["{orders:p0}", "{orders:p1}", "{orders:p2}", "{orders:p3}"]
    for stream in orders.streams():
        slot = key_slot(stream.encode())
        assert key_slot(dead_letter_stream(stream).encode()) == slot
        assert key_slot(lease_key(stream, "billing").encode()) == slot
    # The partitions spread over slots (distinct tags), rather than all sharing one.
    assert len({key_slot(s.encode()) for s in orders.streams()}) == 4
    assert orders.stream_for("k1") == partition_stream("orders", partition_of("k1", 4))


def test_plain_stream_keys_keep_their_names() -> None:
    # The dead-letter stream of 'orders' is '{orders}:dlq' (unchanged), in the slot of 'orders'.
    assert dead_letter_stream("orders") == "{orders}:dlq"
    assert key_slot(b"{orders}:dlq") == key_slot(b"orders")
    assert lease_key("orders", "g") == "{orders}:lease:g"
    assert lease_key("{shop}:orders", "g") == "{shop}:orders:lease:g"


@pytest.mark.parametrize(
    ("name", "partitions", "message"),
    [
        ("{orders}", 4, "must not contain"),
        ("", 4, "non-empty"),
        ("orders", 0, "from 1 to 1024"),
        ("orders", 5000, "from 1 to 1024"),
        ("orders", True, "from 1 to 1024"),
    ],
)
def test_bad_partitioned_streams_are_refused(name: str, partitions: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PartitionedStream(name, partitions)


def test_a_partitioned_handler_registers_one_subscription_per_partition() -> None:
    app = App("t")

    @app.handler("orders", group="g", partitions=3, ordered=True)
    def handle(msg: Message) -> None: ...

    specs = app.handlers
    assert [s.stream for s in specs] == ["{orders:p0}", "{orders:p1}", "{orders:p2}"]
    assert {s.partition_of for s in specs} == {"orders"}
    assert [s.dead_letter_stream for s in specs] == [
        "{orders:p0}:dlq",
        "{orders:p1}:dlq",
        "{orders:p2}:dlq",
    ]
    assert all(s.ordered and s.partition_lock_ttl_ms == s.claim_idle_ms for s in specs)
    assert len({s.name for s in specs}) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ordered": True, "concurrency": 2}, "concurrency must be 1"),
        ({"ordered": "yes"}, "ordered must be True or False"),
        ({"partitions": 4, "dead_letter": "dlq"}, "own dead-letter stream"),
        ({"partitions": 0}, "from 1 to 1024"),
    ],
)
def test_bad_partition_and_ordering_options_fail_at_decoration(
    options: dict[str, object], message: str
) -> None:
    app = App("t")
    with pytest.raises(ConfigError, match=message):
        app.handler("orders", group="g", **options)  # type: ignore[arg-type]


def test_a_partition_taken_by_another_handler_is_refused() -> None:
    app = App("t")

    @app.handler("{orders:p1}", group="g")
    def one(msg: Message) -> None: ...

    with pytest.raises(ConfigError, match=r"'\{orders:p1\}' group 'g' already has handler"):

        @app.handler("orders", group="g", partitions=2)
        def many(msg: Message) -> None: ...

    assert [s.stream for s in app.handlers] == ["{orders:p1}"]  # nothing half-registered


def test_cluster_urls_list_their_startup_nodes() -> None:
    url = "redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002,node4"
    assert is_cluster_url(url)
    assert is_cluster_url("rediss+cluster://h:1")
    assert not is_cluster_url("redis://h:1")
    assert validate_redis_url(url) == url
    assert cluster_nodes(url) == [
        ("10.0.0.1", 7000),
        ("10.0.0.2", 7001),
        ("::1", 7002),
        ("node4", 6379),
    ]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://", "empty node"),
        ("redis+cluster://h:1,,h:2", "empty node"),
        ("redis+cluster://h:notaport", "bad port"),
        ("redis+cluster://h:0", "bad port"),
        ("redis+cluster://:7000", "has no host"),
        ("redis+cluster://h:7000/3", "database 0 only"),
    ],
)
def test_bad_cluster_urls_are_explained(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_redis_url(url)


def test_stream_keys_of_xreadgroup_are_read_after_streams() -> None:
    args = ["GROUP", "g", "c", "COUNT", 10, "BLOCK", 100, "STREAMS", "{a}:x", "{a}:y", ">", ">"]
    assert _stream_keys(args) == ["{a}:x", "{a}:y"]
    assert _stream_keys([b"streams", b"s", b"0"]) == [b"s"]
    assert _stream_keys(["COUNT", 1]) is None
    assert _stream_keys(["STREAMS", "s"]) is None
