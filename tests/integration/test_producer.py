"""Producer / SyncProducer against a real redis-server (and the embedded engine): typed entries
decode back into the model, trimming, partition routing, idempotency keys and explicit ids."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import functools
import uuid
from collections.abc import Iterator

import pytest
import redis
from pydantic import BaseModel

from streamworker.core.codec import decode_message
from streamworker.errors import ConfigError
from streamworker.io.keys import partition_stream
from streamworker.io.redisio import open_redis, open_sync_redis
from streamworker.producing.partitions import partition_of
from streamworker.producing.producer import Producer as DefaultProducer
from streamworker.producing.producer import PublishError, StreamOptions
from streamworker.producing.producer import SyncProducer as DefaultSyncProducer
from tests.support.waiting import wait_until

# Every producer of this module opts in to XADD … IDMP (use_idmp=True), so that the tests run on
# both keyed paths: IDMP on the engine in 8.10 mode, the marker script on the 7.0 servers (which
# have no IDMP). The default (the marker script everywhere) has a test of its own below.
Producer = functools.partial(DefaultProducer, use_idmp=True)
SyncProducer = functools.partial(DefaultSyncProducer, use_idmp=True)


class Payment(BaseModel):
    order_id: int
    amount: decimal.Decimal
    at: datetime.datetime
    tags: list[str] = []
    note: str | None = None


PAYMENT = Payment(
    order_id=7,
    amount=decimal.Decimal("9.90"),
    at=datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC),
    tags=["a"],
)


def _url(backend: str, redis_url: str) -> str:
    if backend == "redis":
        return redis_url
    if backend == "engine-8.10":
        # Keyed publishes go by XADD … IDMP there (streamworker/producing/idmp.py).
        return f"engine://memory/producer-{uuid.uuid4().hex}?redis_version=8.10"
    return "engine://memory"


def _client(backend: str, redis_url: str) -> redis.Redis:
    client = open_sync_redis(_url(backend, redis_url))
    client.flushall()
    return client


@pytest.fixture(params=["redis", "engine", "engine-8.10"])
def sync_client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    """redis-server 7.0 and the 7.0 engine (keyed publishes by the marker script), the engine in
    8.10 mode (by IDMP): the same expectations on each."""
    client = _client(request.param, redis_url)
    yield client
    client.close()


@pytest.fixture(params=["redis", "engine"])
def marker_client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    """Servers without IDMP, where keyed publishes write a marker key."""
    client = _client(request.param, redis_url)
    yield client
    client.close()


def _body(client: redis.Redis, stream: str, entry_id: str, body_field: str | None = None) -> object:
    [(raw_id, raw)] = client.xrange(stream, entry_id, entry_id)
    return decode_message(
        raw_id,
        raw,
        stream=stream,
        group="g",
        consumer="c",
        delivery_count=1,
        model=Payment,
        body_field=body_field,
    ).body


def test_a_published_model_decodes_back_from_the_stream(sync_client: redis.Redis) -> None:
    receipt = SyncProducer(sync_client).publish("payments", PAYMENT)
    assert _body(sync_client, "payments", receipt.id) == PAYMENT


def test_a_stream_with_a_body_field_gets_json_in_that_field(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client, streams={"payments": StreamOptions(body_field="p")})
    receipt = producer.publish("payments", PAYMENT)
    assert list(sync_client.xrange("payments")[0][1]) == [b"p"]
    assert _body(sync_client, "payments", receipt.id, body_field="p") == PAYMENT


def test_stream_defaults_trim_by_maxlen(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client, streams={"s": StreamOptions(maxlen=3, approximate=False)})
    for n in range(10):
        producer.publish("s", {"n": n})
    assert [e[1][b"n"] for e in sync_client.xrange("s")] == [b"7", b"8", b"9"]


def test_a_per_call_minid_trims_older_entries(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client)
    for n in range(1, 4):
        producer.publish("s", {"n": n}, id=f"{n}-0")
    producer.publish("s", {"n": 4}, id="4-0", minid="3", approximate=False)
    assert [e[0] for e in sync_client.xrange("s")] == [b"3-0", b"4-0"]


def test_a_partitioned_stream_routes_by_key_as_consumers_expect(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client, streams={"orders": StreamOptions(partitions=4)})
    for key in ("alice", "bob", "carol", "dave"):
        receipt = producer.publish("orders", {"k": key}, partition_key=key)
        assert receipt.stream == partition_stream("orders", partition_of(key, 4))
        assert sync_client.xrange(receipt.stream, receipt.id, receipt.id)[0][1] == {
            b"k": key.encode()
        }


def test_a_partitioned_stream_needs_a_partition_key(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client, streams={"orders": StreamOptions(partitions=4)})
    with pytest.raises(ConfigError, match="publish with partition_key"):
        producer.publish("orders", {"k": 1})


def test_a_partition_key_for_an_unpartitioned_stream_is_refused(sync_client: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="not declared partitioned"):
        SyncProducer(sync_client).publish("orders", {"k": 1}, partition_key="x")


def test_a_retried_publish_with_the_same_idempotency_key_adds_nothing(
    sync_client: redis.Redis,
) -> None:
    producer = SyncProducer(sync_client)
    first = producer.publish("s", {"n": 1}, idempotency_key="order-1")
    again = producer.publish("s", {"n": 1}, idempotency_key="order-1")
    assert (first.duplicate, again.duplicate, again.id) == (False, True, first.id)
    assert sync_client.xlen("s") == 1


def test_an_idempotency_key_is_forgotten_after_its_window(marker_client: redis.Redis) -> None:
    producer = SyncProducer(marker_client, idempotency_window_ms=50)
    producer.publish("s", {"n": 1}, idempotency_key="k")
    marker_client.delete("{s}:published:k")  # what expiry does; the engine's clock is not ours
    assert producer.publish("s", {"n": 1}, idempotency_key="k").duplicate is False
    assert marker_client.pttl("{s}:published:k") <= 50


def test_idempotency_markers_live_in_the_partitions_slot(marker_client: redis.Redis) -> None:
    producer = SyncProducer(marker_client, streams={"o": StreamOptions(partitions=2)})
    receipt = producer.publish("o", {"n": 1}, partition_key="a", idempotency_key="k")
    assert marker_client.get(f"{receipt.stream}:published:k") == receipt.id.encode()


def test_a_retried_explicit_id_is_reported_as_a_duplicate(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client)
    assert producer.publish("s", {"n": 1}, id="5-1").duplicate is False
    again = producer.publish("s", {"n": 1}, id="5-1")
    assert (again.id, again.duplicate, sync_client.xlen("s")) == ("5-1", True, 1)


def test_an_explicit_id_below_the_last_that_never_existed_is_an_error(
    sync_client: redis.Redis,
) -> None:
    producer = SyncProducer(sync_client)
    producer.publish("s", {"n": 1}, id="5-1")
    with pytest.raises(PublishError, match="refused"):
        producer.publish("s", {"n": 0}, id="4-0")


def test_a_malformed_id_is_refused_before_sending(sync_client: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="explicit entry id"):
        SyncProducer(sync_client).publish("s", {"n": 1}, id="*")


def test_maxlen_and_minid_together_are_refused(sync_client: redis.Redis) -> None:
    with pytest.raises(ConfigError, match="mutually exclusive"):
        SyncProducer(sync_client).publish("s", {"n": 1}, maxlen=5, minid="1")


def test_publish_many_pipelines_and_keeps_idempotency(sync_client: redis.Redis) -> None:
    producer = SyncProducer(sync_client)
    plans = [producer.plan("s", {"n": n}, idempotency_key=f"k{n % 3}") for n in range(6)]
    receipts = producer.publish_many(plans)
    assert [r.duplicate for r in receipts] == [False, False, False, True, True, True]
    assert sync_client.xlen("s") == 3


@pytest.mark.parametrize(("backend", "path"), [("redis", "marker"), ("engine-8.10", "idmp")])
def test_the_async_producer_publishes_and_dedups(redis_url: str, backend: str, path: str) -> None:
    url = redis_url
    if backend == "engine-8.10":
        url = f"engine://memory/async-{uuid.uuid4().hex}?redis_version=8.10"

    async def main() -> list[object]:
        client = open_redis(url)
        try:
            await client.flushall()
            producer = Producer(client, streams={"p": StreamOptions(body_field="b")})
            first = await producer.publish("p", PAYMENT, idempotency_key="x")
            again = await producer.publish("p", PAYMENT, idempotency_key="x")
            many = await producer.publish_many([producer.plan("p", PAYMENT)] * 2)
            keyed = await producer.publish_many(
                [producer.plan("p", PAYMENT, idempotency_key=k) for k in ("x", "y")]
            )
            return [
                first.duplicate,
                again.duplicate,
                again.id == first.id,
                len(many),
                [r.duplicate for r in keyed],
                await client.xlen("p"),
                producer.keyed_path,
            ]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [False, True, True, 2, [True, False], 4, path]


def test_app_publish_uses_the_partitions_and_body_field_of_its_handler(redis_url: str) -> None:
    from streamworker import App, Message

    app = App("p", redis_url=redis_url)

    @app.handler("orders", group="g", partitions=3, body_field="b")
    async def handle(msg: Message[Payment]) -> None: ...

    receipt = app.publish_sync("orders", PAYMENT, partition_key="k")
    assert receipt.stream == partition_stream("orders", partition_of("k", 3))
    client = open_sync_redis(redis_url)
    assert _body(client, receipt.stream, receipt.id, body_field="b") == PAYMENT


def test_app_stream_declarations_set_trimming_for_async_publish(redis_url: str) -> None:
    from streamworker import App

    app = App("p", redis_url=redis_url)
    app.stream("events", maxlen=2, approximate=False)

    async def main() -> int:
        for n in range(5):
            await app.publish("events", {"n": n})
        client = open_redis(redis_url)
        try:
            return int(await client.xlen("events"))
        finally:
            await client.aclose()

    open_sync_redis(redis_url).delete("events")
    assert asyncio.run(main()) == 2


def test_app_publish_without_a_redis_url_says_what_to_do() -> None:
    from streamworker import App

    with pytest.raises(ConfigError, match="has no redis_url"):
        App("p").publish_sync("s", {"n": 1})


def test_publish_many_resends_what_a_server_without_the_script_did_not_run(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = SyncProducer(redis_client)
    plans = [producer.plan("s", {"n": n}, idempotency_key=f"k{n}") for n in range(3)]
    plans.append(producer.plan("s", {"n": 3}))  # a plain XADD in the same pipeline
    redis_client.script_flush()
    load = redis_client.script_load
    loads: list[str] = []

    def lost_after_first_load(src: str) -> object:
        # The server loses its script cache between the pipeline's SCRIPT LOAD and its EVALSHAs;
        # the loads that follow (the single resends') work.
        loads.append(src)
        return None if len(loads) == 1 else load(src)

    monkeypatch.setattr(redis_client, "script_load", lost_after_first_load)
    receipts = producer.publish_many(plans)
    assert [r.duplicate for r in receipts] == [False] * 4
    assert [int(f[b"n"]) for _, f in redis_client.xrange("s")] == [3, 0, 1, 2]


# --- Keyed publishes on both paths: XADD … IDMP (engine-8.10) and the marker script ------------


@pytest.fixture(params=["redis", "engine", "engine-8.10"])
def server_url(request: pytest.FixtureRequest, redis_url: str) -> Iterator[str]:
    """A server for several clients: redis-server 7.0, the 7.0 engine, the 8.10 engine."""
    url = _url(request.param, redis_url)
    client = open_sync_redis(url)
    client.flushall()
    yield url
    client.close()


def test_a_retry_from_another_producer_and_connection_is_a_duplicate(server_url: str) -> None:
    """A retry may come from another process (a restarted producer): every producer shares one
    IDMP producer id, as every producer shares the marker keys, so it is caught on both paths.

    The duplicate flag on the IDMP path: XADD's page (``IDMP producer-id idempotent-id``,
    https://redis.io/docs/latest/commands/xadd/) and the idempotency page ("Manual mode",
    https://redis.io/docs/latest/develop/data-types/streams/idempotency/) say a resend with the
    same pid and iid adds nothing and answers the ID of the first add: the same bulk-string
    reply as a new entry, so publish_idmp.lua tells them apart by the stream's last id."""
    one, two = open_sync_redis(server_url), open_sync_redis(server_url)
    try:
        first = SyncProducer(one).publish("s", {"n": 1}, idempotency_key="order-1")
        receipt = SyncProducer(two).publish("s", {"n": 1}, idempotency_key="order-1")
        assert (first.duplicate, receipt.duplicate, receipt.id) == (False, True, first.id)
        assert one.xlen("s") == 1
    finally:
        one.close()
        two.close()


def test_a_retry_after_its_entry_was_deleted_is_still_a_duplicate(
    sync_client: redis.Redis,
) -> None:
    """The key outlives its entry (XDEL, a trim) on both paths; the IDMP path compares with the
    stream's last *generated* id (XINFO STREAM), not its last remaining entry."""
    producer = SyncProducer(sync_client)
    producer.publish("s", {"n": 0})
    first = producer.publish("s", {"n": 1}, idempotency_key="k")
    sync_client.xdel("s", first.id)
    again = producer.publish("s", {"n": 1}, idempotency_key="k")
    assert (again.duplicate, again.id) == (True, first.id)
    assert sync_client.xlen("s") == 1


def test_a_bad_idempotency_key_is_refused_before_anything_is_sent(
    sync_client: redis.Redis,
) -> None:
    producer = SyncProducer(sync_client)
    with pytest.raises(ConfigError, match="idempotency_key must be a non-empty str"):
        producer.publish("s", {"n": 1}, idempotency_key="")
    with pytest.raises(ConfigError, match="idempotency_window_ms must be an integer >= 1"):
        SyncProducer(sync_client, idempotency_window_ms=0).publish(
            "s", {"n": 1}, idempotency_key="k"
        )
    assert (sync_client.keys("*"), producer.keyed_path) == ([], None)


@pytest.fixture
def idmp_client() -> Iterator[redis.Redis]:
    client = open_sync_redis(f"engine://memory/idmp-{uuid.uuid4().hex}?redis_version=8.10")
    yield client
    client.close()


def _idmp_settings(client: redis.Redis, stream: str) -> tuple[int, int, int]:
    info = client.xinfo_stream(stream)
    return info["idmp-duration"], info["idmp-maxsize"], info["iids-tracked"]


def test_on_a_server_with_idmp_a_keyed_publish_writes_no_marker(
    idmp_client: redis.Redis, redis_client: redis.Redis
) -> None:
    """The producer asks the server once (COMMAND INFO / DOCS) and says what it chose."""
    producer = SyncProducer(idmp_client)
    assert producer.keyed_path is None
    producer.publish("s", {"n": 1}, idempotency_key="k")
    assert (producer.keyed_path, idmp_client.keys("*")) == ("idmp", [b"s"])
    assert _idmp_settings(idmp_client, "s") == (86_400, 10_000, 1)
    on_7 = SyncProducer(redis_client)
    on_7.publish("s", {"n": 1}, idempotency_key="k")
    assert (on_7.keyed_path, sorted(redis_client.keys("*"))) == (
        "marker",
        [b"s", b"{s}:published:k"],
    )


def test_the_window_becomes_idmp_duration_in_seconds_rounded_up(idmp_client: redis.Redis) -> None:
    SyncProducer(idmp_client, idempotency_window_ms=1_500).publish(
        "s", {"n": 1}, idempotency_key="k"
    )
    assert _idmp_settings(idmp_client, "s") == (2, 10_000, 1)


def test_a_window_idmp_cannot_keep_takes_the_marker_script(idmp_client: redis.Redis) -> None:
    """IDMP-DURATION is at most 86,400 s (https://redis.io/docs/latest/commands/xcfgset/)."""
    producer = SyncProducer(idmp_client, idempotency_window_ms=86_400_001)
    first = producer.publish("s", {"n": 1}, idempotency_key="k")
    assert idmp_client.get("{s}:published:k") == first.id.encode()
    assert producer.publish("s", {"n": 1}, idempotency_key="k").duplicate is True


def test_by_default_a_keyed_publish_takes_the_marker_script_even_with_idmp(
    idmp_client: redis.Redis,
) -> None:
    producer = DefaultSyncProducer(idmp_client)
    first = producer.publish("s", {"n": 1}, idempotency_key="k")
    again = producer.publish("s", {"n": 1}, idempotency_key="k")
    assert (producer.keyed_path, idmp_client.exists("{s}:published:k")) == ("marker", 1)
    assert (again.duplicate, again.id) == (True, first.id)


def test_use_idmp_false_keeps_the_marker_script(idmp_client: redis.Redis) -> None:
    producer = SyncProducer(idmp_client, use_idmp=False)
    producer.publish("s", {"n": 1}, idempotency_key="k")
    assert (producer.keyed_path, idmp_client.exists("{s}:published:k")) == ("marker", 1)


def test_a_delayed_keyed_publish_keeps_its_schedule_path(idmp_client: redis.Redis) -> None:
    producer = SyncProducer(idmp_client)
    receipt = producer.publish("s", {"n": 1}, idempotency_key="k", delay_ms=60_000)
    assert receipt.id is None
    assert producer.publish("s", {"n": 1}, idempotency_key="k", delay_ms=60_000).duplicate
    assert idmp_client.exists("{s}:published:k") == 1


def test_a_shorter_window_never_lowers_the_streams_setting(idmp_client: redis.Redis) -> None:
    """XCFGSET forgets every key of the stream, so a producer with a shorter window leaves the
    longer setting (and the keys) as they are."""
    long = SyncProducer(idmp_client, idempotency_window_ms=20_000)
    first = long.publish("s", {"n": 1}, idempotency_key="k1")
    SyncProducer(idmp_client, idempotency_window_ms=5_000).publish(
        "s", {"n": 2}, idempotency_key="k2"
    )
    assert _idmp_settings(idmp_client, "s") == (20, 10_000, 2)
    again = long.publish("s", {"n": 1}, idempotency_key="k1")
    assert (again.duplicate, again.id) == (True, first.id)


def test_a_longer_window_raises_the_setting_and_forgets_the_keys_held(
    idmp_client: redis.Redis,
) -> None:
    """The documented cost of a window change (XCFGSET's page: "Calling XCFGSET clears all
    existing producer IDMP maps for the stream"): a retry of a key published before it adds
    a second entry."""
    SyncProducer(idmp_client, idempotency_window_ms=5_000).publish(
        "s", {"n": 1}, idempotency_key="k"
    )
    longer = SyncProducer(idmp_client, idempotency_window_ms=20_000)
    assert longer.publish("s", {"n": 1}, idempotency_key="k").duplicate is False
    assert _idmp_settings(idmp_client, "s") == (20, 10_000, 1)
    assert longer.publish("s", {"n": 1}, idempotency_key="k").duplicate is True


def test_a_key_is_forgotten_once_its_window_has_passed(idmp_client: redis.Redis) -> None:
    producer = SyncProducer(idmp_client, idempotency_window_ms=1_000)
    first = producer.publish("s", {"n": 1}, idempotency_key="k")
    assert producer.publish("s", {"n": 1}, idempotency_key="k").duplicate is True
    later = wait_until(
        lambda: (
            (r := producer.publish("s", {"n": 1}, idempotency_key="k")).duplicate is False and r
        ),
        timeout_s=30,
        what="the key forgotten after IDMP-DURATION (1 s)",
    )
    assert later.id != first.id
    assert idmp_client.xlen("s") == 2


def test_a_key_the_marker_script_recorded_is_a_duplicate_on_the_idmp_path(
    idmp_client: redis.Redis,
) -> None:
    """A retry across the switch (a key published by the marker script, retried once the
    producer goes by IDMP) adds nothing: publish_idmp.lua reads the marker, never writes it."""
    first = SyncProducer(idmp_client, use_idmp=False).publish("s", {"n": 1}, idempotency_key="k")
    producer = SyncProducer(idmp_client)
    again = producer.publish("s", {"n": 1}, idempotency_key="k")
    assert (producer.keyed_path, again.duplicate, again.id) == ("idmp", True, first.id)
    assert idmp_client.xlen("s") == 1


def test_a_keyed_publish_to_a_key_of_another_type_is_refused(sync_client: redis.Redis) -> None:
    """The server's WRONGTYPE as a PublishError, on both paths, and the key left as it was."""
    sync_client.set("s", "not a stream")
    with pytest.raises(PublishError, match="WRONGTYPE"):
        SyncProducer(sync_client).publish("s", {"n": 1}, idempotency_key="k")
    assert sync_client.get("s") == b"not a stream"
    assert sync_client.exists("{s}:published:k") == 0
