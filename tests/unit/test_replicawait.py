"""The pure parts of ``wait_replicas``: validation, the command sent, how a reply is judged and
worded, the capability check, which wait a batch sends, the settings and the Spark option."""

from __future__ import annotations

import pickle

import pytest

from streamworker import PublishError, ReplicaWaitTimeout
from streamworker.errors import ConfigError, ConnectionLost
from streamworker.io.replicawait import NO_WAIT, ReplicaWait, Stopwatch, command_exists
from streamworker.producing.producer import StreamOptions, batch_wait, plan_publish, wait_terms
from streamworker.settings import load_settings
from streamworker.spark.options import parse_write_options


@pytest.mark.parametrize("replicas", [-1, True, 1.5, "1"])
def test_wait_replicas_must_be_an_integer_of_at_least_zero(replicas: object) -> None:
    with pytest.raises(ConfigError, match="wait_replicas must be an integer >= 0"):
        ReplicaWait(replicas)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout_ms", [0, -5, False])
def test_a_wait_timeout_of_zero_is_refused_because_wait_0_blocks_forever(
    timeout_ms: object,
) -> None:
    with pytest.raises(ConfigError, match="0 would wait forever"):
        ReplicaWait(1, timeout_ms)  # type: ignore[arg-type]


def test_no_replicas_and_no_aof_is_no_wait_at_all() -> None:
    assert not NO_WAIT.active
    assert ReplicaWait(1).active
    assert ReplicaWait(0, aof_local=True).active


def test_the_command_is_wait_or_waitaof_with_the_local_fsync() -> None:
    assert ReplicaWait(2, 750).command() == ("WAIT", 2, 750)
    assert ReplicaWait(1, 750, aof_local=True).command() == ("WAITAOF", 1, 1, 750)


def test_enough_acknowledgements_pass() -> None:
    ReplicaWait(2).check(3, "publish to 's'", retry_safe=False, retry="r")
    ReplicaWait(1, aof_local=True).check([1, 1], "publish to 's'", retry_safe=False, retry="r")


def test_too_few_acknowledgements_raise_with_the_counts_and_the_retry_advice() -> None:
    with pytest.raises(ReplicaWaitTimeout) as caught:
        ReplicaWait(2, 250).check(1, "publish to 'orders'", retry_safe=True, retry="safe to go")
    error = caught.value
    assert (error.requested, error.acknowledged, error.retry_safe) == (2, 1, True)
    assert str(error) == (
        "publish to 'orders': written on the primary, but only 1 of 2 replica(s) acknowledged "
        "it within 250 ms, so it may be lost on a failover; safe to go"
    )
    assert isinstance(error, PublishError)


def test_waitaof_without_the_local_fsync_says_so() -> None:
    with pytest.raises(ReplicaWaitTimeout, match="the primary did not fsync it to its AOF"):
        ReplicaWait(0, aof_local=True).check([0, 0], "publish to 's'", retry_safe=True, retry="")


def test_an_error_reply_to_the_wait_is_a_lost_connection_not_a_timeout() -> None:
    with pytest.raises(ConnectionLost, match="WAIT failed"):
        ReplicaWait(1).check(RuntimeError("READONLY"), "publish", retry_safe=True, retry="")


def test_the_stopwatch_reports_each_checked_wait_and_whether_it_timed_out() -> None:
    seen: list[tuple[str, bool]] = []

    def observe(operation: str, seconds: float, timed_out: bool) -> None:
        assert seconds >= 0
        seen.append((operation, timed_out))

    ReplicaWait(1).check(1, "s", retry_safe=True, retry="", stopwatch=Stopwatch(observe, "relay"))
    with pytest.raises(ReplicaWaitTimeout):
        ReplicaWait(1).check(0, "s", retry_safe=True, retry="", stopwatch=Stopwatch(observe, "x"))
    assert seen == [("relay", False), ("x", True)]


def test_command_info_names_a_command_the_server_has_and_none_for_one_it_lacks() -> None:
    # What redis-server 7.0 answers to COMMAND INFO WAITAOF, and to COMMAND INFO WAIT.
    assert not command_exists([None])
    assert not command_exists([])
    assert command_exists([[b"wait", 3, [b"noscript"], 0, 0, 0, [], [], [], []]])


def test_the_error_pickles_with_its_counts() -> None:
    error = ReplicaWaitTimeout("m", requested=2, acknowledged=1, retry_safe=True)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.requested, copy.acknowledged, copy.retry_safe) == ("m", 2, 1, True)


# -- which wait a publish / a batch sends -------------------------------------------------------


def test_a_call_overrides_the_stream_which_overrides_the_producer() -> None:
    options = StreamOptions(wait_replicas=2, wait_timeout_ms=500)
    default = ReplicaWait(1, 100)
    by_stream = plan_publish("s", {"n": 1}, options)
    by_call = plan_publish("s", {"n": 1}, options, wait_replicas=0, wait_timeout_ms=50)
    plain = plan_publish("s", {"n": 1}, StreamOptions())
    assert batch_wait(default, [by_stream]) == ReplicaWait(2, 500)
    assert batch_wait(default, [by_call]) == ReplicaWait(0, 50)
    assert batch_wait(default, [plain]) == default


def test_a_batch_waits_as_its_most_demanding_entry_asks_unless_the_call_says_otherwise() -> None:
    default = ReplicaWait(0, 100)
    entries = [
        plan_publish("a", {"n": 1}, StreamOptions(wait_replicas=1, wait_timeout_ms=300)),
        plan_publish("b", {"n": 1}, StreamOptions(wait_replicas=2, wait_timeout_ms=200)),
    ]
    assert batch_wait(default, entries) == ReplicaWait(2, 300)
    assert batch_wait(default, entries, wait_replicas=1, wait_timeout_ms=50) == ReplicaWait(1, 50)


def test_stream_options_refuse_a_bad_wait() -> None:
    with pytest.raises(ConfigError, match="wait_timeout_ms"):
        StreamOptions(wait_timeout_ms=0)
    with pytest.raises(ConfigError, match="wait_replicas"):
        StreamOptions(wait_replicas=-1)


def test_only_a_batch_of_keyed_entries_is_safe_to_publish_again() -> None:
    keyed = plan_publish("s", {"n": 1}, StreamOptions(), idempotency_key="k")
    with_id = plan_publish("s", {"n": 1}, StreamOptions(), id="5-1")
    plain = plan_publish("t", {"n": 1}, StreamOptions())
    assert wait_terms([keyed])[:2] == ("publish to 's'", True)
    subject, safe, _ = wait_terms([keyed, with_id])
    assert (subject, safe) == ("publish of 2 entries to 's'", False)
    assert "may add it twice" in wait_terms([keyed, plain])[2]


# -- settings and the Spark sink option ---------------------------------------------------------


def test_settings_read_the_wait_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWORKER_WAIT_REPLICAS", "2")
    monkeypatch.setenv("STREAMWORKER_WAIT_TIMEOUT_MS", "750")
    settings = load_settings()
    assert (settings.wait_replicas, settings.wait_timeout_ms) == (2, 750)
    assert load_settings(wait_replicas=0).wait_replicas == 0  # a flag beats the environment


def test_settings_default_to_no_wait() -> None:
    settings = load_settings()
    assert (settings.wait_replicas, settings.wait_timeout_ms) == (0, 1_000)


def test_a_wait_timeout_past_the_socket_timeout_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match=r"wait_timeout_ms .* must be below redis_timeout_s"):
        load_settings(wait_replicas=1, wait_timeout_ms=6_000, redis_timeout_s=5.0)


def test_a_short_socket_timeout_is_fine_when_nothing_waits() -> None:
    assert load_settings(redis_timeout_s=0.5).redis_timeout_s == 0.5


def test_the_spark_sink_takes_wait_replicas_and_refuses_it_on_a_cluster() -> None:
    opts = parse_write_options(
        {"url": "redis://h:6379/0", "stream": "s", "waitReplicas": "1", "waitTimeoutMs": "2000"},
        streaming=False,
    )
    assert (opts.wait_replicas, opts.wait_timeout_ms) == (1, 2_000)
    assert parse_write_options({"url": "redis://h/0"}, streaming=False).wait_replicas == 0
    with pytest.raises(ConfigError, match="waitReplicas is not available on Redis Cluster"):
        parse_write_options(
            {"url": "redis+cluster://h:7000", "stream": "s", "waitReplicas": "1"},
            streaming=False,
        )


def test_the_partitioned_producer_refuses_a_wait_that_could_block_forever() -> None:
    import asyncio

    import redis.asyncio as aioredis

    from streamworker.producing.partitions import PartitionedProducer, PartitionedStream

    client = aioredis.Redis()  # never connected: the arguments are refused before any I/O
    producer = PartitionedProducer(client, PartitionedStream("orders", 2))
    with pytest.raises(ConfigError, match="0 would wait forever"):
        asyncio.run(producer.add("k", {"n": 1}, wait_replicas=1, wait_timeout_ms=0))
