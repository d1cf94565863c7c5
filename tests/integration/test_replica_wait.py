"""``wait_replicas``: a publish (and every step that deletes or reports on the strength of a write)
returns only once N replicas have the write. Real redis-server primary + replica (SIGSTOPped to
play a lagging one), the embedded engine without replicas, and the CLI in subprocesses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy.orm import Session

from streamworker import App, ReplicaWaitTimeout
from streamworker.errors import ConfigError
from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.outbox import Relay, pending_rows, publish
from streamworker.io.keys import dead_letter_stream
from streamworker.io.redisio import open_redis, open_sync_redis
from streamworker.observability.metrics import Metrics
from streamworker.ops.dead_letters import replay_dead_letters
from streamworker.producing.producer import Producer, StreamOptions, SyncProducer
from tests.support.proc import run_cli
from tests.support.replication import Replicated

TIMEOUT_MS = 300


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    servers = Replicated(tmp_path_factory.mktemp("replicated"))
    yield servers
    servers.stop()


@pytest.fixture
def primary(pair: Replicated) -> Iterator[redis.Redis]:
    client = open_sync_redis(pair.url)
    client.flushall()
    pair.wait_synced()
    yield client
    client.close()


@pytest.fixture
def replica(pair: Replicated) -> Iterator[redis.Redis]:
    client = pair.replica.client()
    yield client
    client.close()


def _wait_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


# -- the producers ------------------------------------------------------------------------------


def test_publish_with_wait_replicas_returns_once_the_replica_has_the_entry(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    producer = SyncProducer(primary, wait_replicas=1, wait_timeout_ms=5_000)
    receipt = producer.publish("orders", {"n": 1})
    # No polling: WAIT returned 1, so the replica applied the XADD before the reply came.
    assert replica.xrange("orders") == [(receipt.id.encode(), {b"n": b"1"})]


def test_a_keyed_publish_to_a_stopped_replica_times_out_saying_a_retry_is_safe(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    producer = SyncProducer(primary, wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
    with pair.replica_paused():
        started = time.monotonic()
        with pytest.raises(ReplicaWaitTimeout) as caught:
            producer.publish("orders", {"n": 1}, idempotency_key="order-1")
        elapsed = time.monotonic() - started
    error = caught.value
    assert (error.requested, error.acknowledged, error.retry_safe) == (1, 0, True)
    assert "written on the primary" in str(error)
    assert "may be lost on a failover" in str(error)
    assert "publishing again with the same idempotency_key is safe" in str(error)
    assert TIMEOUT_MS / 1000 <= elapsed < TIMEOUT_MS / 1000 + 0.5
    assert primary.xlen("orders") == 1  # on the primary, as the message says
    # The replica back: the retry adds nothing and returns once the replica has the entry.
    again = producer.publish("orders", {"n": 1}, idempotency_key="order-1")
    assert again.duplicate
    assert replica.xrange("orders") == [(again.id.encode(), {b"n": b"1"})]


@pytest.mark.parametrize("primary_kind", ["redis", "engine"])
def test_a_keyed_retry_on_another_connection_waits_for_the_earlier_add(
    primary_kind: str, tmp_path: Path
) -> None:
    # WAIT waits for its own connection's last write. A duplicate writes nothing of its own, so
    # on a server that moves a connection's offset on writes only (the engine) a retry on a
    # connection whose last write has replicated would be vouched for at once: publish_once.lua
    # re-sets the marker so that the WAIT reaches the earlier add.
    servers = Replicated(tmp_path, primary=primary_kind)
    first, other = open_sync_redis(servers.url), open_sync_redis(servers.url)
    try:
        retrying = SyncProducer(other, wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
        retrying.publish("warmup", {"n": 0})  # this connection's last write: replicated
        with servers.replica_paused():
            with pytest.raises(ReplicaWaitTimeout):
                SyncProducer(first, wait_replicas=1, wait_timeout_ms=TIMEOUT_MS).publish(
                    "orders", {"n": 1}, idempotency_key="order-1"
                )
            with pytest.raises(ReplicaWaitTimeout) as caught:
                retrying.publish("orders", {"n": 1}, idempotency_key="order-1")
        assert caught.value.acknowledged == 0
        assert first.xlen("orders") == 1
    finally:
        first.close()
        other.close()
        servers.stop()


def test_a_plain_publish_to_a_stopped_replica_says_a_retry_may_add_it_twice(
    pair: Replicated, primary: redis.Redis
) -> None:
    producer = SyncProducer(primary, wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
    with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout) as caught:
        producer.publish("orders", {"n": 1})
    assert (caught.value.acknowledged, caught.value.retry_safe) == (0, False)
    assert "may add it twice" in str(caught.value)


def test_more_replicas_than_exist_raises_within_the_timeout_with_the_count(
    primary: redis.Redis,
) -> None:
    producer = SyncProducer(primary)
    started = time.monotonic()
    with pytest.raises(ReplicaWaitTimeout) as caught:
        producer.publish("orders", {"n": 1}, wait_replicas=3, wait_timeout_ms=TIMEOUT_MS)
    assert time.monotonic() - started < TIMEOUT_MS / 1000 + 0.5
    assert (caught.value.requested, caught.value.acknowledged) == (3, 1)
    assert "only 1 of 3 replica(s) acknowledged it within 300 ms" in str(caught.value)


def test_publish_many_sends_one_wait_for_the_whole_pipeline(
    primary: redis.Redis, replica: redis.Redis
) -> None:
    producer = SyncProducer(primary, wait_replicas=1, wait_timeout_ms=5_000)
    plans = [producer.plan("orders", {"n": n}, idempotency_key=f"k{n}") for n in range(5)]
    plans += [producer.plan("other", {"n": n}) for n in range(5)]
    before = _wait_calls(primary)
    receipts = producer.publish_many(plans)
    assert _wait_calls(primary) - before == 1
    assert [r.duplicate for r in receipts] == [False] * 10
    assert replica.xlen("orders") == 5
    assert replica.xlen("other") == 5


def test_wait_replicas_zero_sends_no_wait(primary: redis.Redis) -> None:
    producer = SyncProducer(primary)
    before = _wait_calls(primary)
    producer.publish("orders", {"n": 1})
    producer.publish("orders", {"n": 2}, idempotency_key="k")
    producer.publish_many([producer.plan("orders", {"n": 3})])
    assert _wait_calls(primary) == before


def test_a_stream_declared_with_wait_replicas_waits_and_others_do_not(
    pair: Replicated, primary: redis.Redis
) -> None:
    producer = SyncProducer(
        primary,
        streams={"safe": StreamOptions(wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)},
    )
    with pair.replica_paused():
        producer.publish("fast", {"n": 1})  # no wait: returns although the replica is stopped
        with pytest.raises(ReplicaWaitTimeout):
            producer.publish("safe", {"n": 1})


def test_the_async_producer_waits_and_times_out_like_the_sync_one(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    async def scenario() -> tuple[str, ReplicaWaitTimeout | None]:
        client = open_redis(pair.url)
        try:
            producer = Producer(client, wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
            receipt = await producer.publish("orders", {"n": 1}, idempotency_key="a")
            with pair.replica_paused():
                try:
                    await producer.publish_many([producer.plan("orders", {"n": 2})])
                except ReplicaWaitTimeout as exc:
                    return receipt.id, exc
            return receipt.id, None
        finally:
            await client.aclose()

    entry_id, error = asyncio.run(scenario())
    assert replica.xrange("orders", entry_id, entry_id)
    assert error is not None
    assert error.acknowledged == 0


def test_app_publish_takes_the_wait_of_its_stream_declaration(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    app = App("shop", redis_url=pair.url)
    app.stream("orders", wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
    receipt = app.publish_sync("orders", {"n": 1})
    assert replica.xrange("orders", receipt.id, receipt.id)
    with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout):
        app.publish_sync("orders", {"n": 2})


def test_the_wait_is_timed_and_a_timeout_counted_in_the_metrics(
    pair: Replicated, primary: redis.Redis
) -> None:
    metrics = Metrics(process_collectors=False)
    producer = SyncProducer(
        primary,
        wait_replicas=1,
        wait_timeout_ms=TIMEOUT_MS,
        wait_observer=metrics.observe_replica_wait,
    )
    producer.publish("orders", {"n": 1})
    with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout):
        producer.publish("orders", {"n": 2})
    sample = metrics.registry.get_sample_value
    labels = {"operation": "publish"}
    assert sample("streamworker_publish_wait_seconds_count", labels) == 2
    assert sample("streamworker_publish_wait_timeouts_total", labels) == 1
    assert (sample("streamworker_publish_wait_seconds_sum", labels) or 0) >= TIMEOUT_MS / 1000


def test_wait_aof_local_is_refused_on_a_server_without_waitaof(primary: redis.Redis) -> None:
    producer = SyncProducer(primary, wait_aof_local=True)
    with pytest.raises(ConfigError, match=r"WAITAOF .*Redis 7\.2"):
        producer.publish("orders", {"n": 1})
    assert primary.xlen("orders") == 0  # refused before anything was written


# -- the embedded engine ------------------------------------------------------------------------


def test_the_engine_without_replicas_raises_cleanly_when_replicas_are_asked() -> None:
    client = open_sync_redis("engine://memory")
    producer = SyncProducer(client, wait_replicas=1, wait_timeout_ms=100)
    with pytest.raises(ReplicaWaitTimeout) as caught:
        producer.publish("orders", {"n": 1}, idempotency_key="k")
    assert (caught.value.acknowledged, caught.value.retry_safe) == (0, True)
    assert SyncProducer(client).publish("orders", {"n": 2}).stream == "orders"


# -- the outbox relay ---------------------------------------------------------------------------


def test_the_relay_keeps_the_rows_while_the_replica_is_stopped_and_deletes_them_after(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis, db_url: str
) -> None:
    db = SqlDatabase(db_url)
    try:
        with Session(db.sync_engine) as session, session.begin():
            for n in range(3):
                publish(session, "payments", {"n": n})
        relay = Relay(db, primary, wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
        with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout) as caught:
            relay.relay_once()
        assert caught.value.retry_safe
        assert pending_rows(db) == 3  # not deleted: the adds may vanish with the primary
        assert primary.xlen("payments") == 3
        batch = relay.relay_once()
        assert (batch.rows, batch.duplicates) == (3, 3)  # found by their markers: not re-added
        assert pending_rows(db) == 0
        assert [int(f[b"n"]) for _, f in replica.xrange("payments")] == [0, 1, 2]
    finally:
        db.sync_engine.dispose()


# -- dlq replay ---------------------------------------------------------------------------------


def test_dlq_replay_with_a_stopped_replica_raises_after_moving_the_entry(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    fields = {"n": "1", "dlq_stream": "orders", "dlq_group": "g", "dlq_id": "1-1"}
    primary.xadd("orders:dlq", fields, id="5-1")
    with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout) as caught:
        replay_dead_letters(primary, "orders:dlq", wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
    assert "replay of dead letter 5-1 to 'orders'" in str(caught.value)
    primary.xadd("orders:dlq", fields, id="5-2")
    result = replay_dead_letters(primary, "orders:dlq", wait_replicas=1, wait_timeout_ms=5_000)
    [(_, target, new_id)] = result.replayed
    assert target == "orders"
    assert replica.xrange("orders", new_id, new_id)


# -- the command line ---------------------------------------------------------------------------


def test_cli_publish_with_wait_replicas_exits_0_once_the_replica_has_it(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    done = run_cli("publish", "orders", "n=1", "--wait-replicas", "1", "--redis-url", pair.url)
    assert done.returncode == 0, done.stderr
    _, entry_id = done.stdout.split()
    assert replica.xrange("orders", entry_id, entry_id)


def test_cli_publish_takes_wait_replicas_from_the_environment(
    pair: Replicated, primary: redis.Redis
) -> None:
    env = {"STREAMWORKER_WAIT_REPLICAS": "2", "STREAMWORKER_WAIT_TIMEOUT_MS": "200"}
    done = run_cli("publish", "orders", "n=1", "--redis-url", pair.url, env=env)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert "only 1 of 2 replica(s) acknowledged it within 200 ms" in line
    assert "may add it twice" in line


def test_cli_relay_with_wait_replicas_relays_once_the_replica_has_the_rows(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis, tmp_path: Path
) -> None:
    from tests.support.sql import migrated_db_url

    url = migrated_db_url("sqlite", tmp_path, None)  # type: ignore[arg-type]
    db = SqlDatabase(url)
    try:
        with Session(db.sync_engine) as session, session.begin():
            publish(session, "payments", {"n": 1})
    finally:
        db.sync_engine.dispose()
    args = ("relay", "--once", "--db-url", url, "--redis-url", pair.url, "--wait-replicas", "1")
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    assert "relayed 1 row(s)" in done.stdout
    assert replica.xlen("payments") == 1


def test_cli_rejects_a_wait_timeout_of_zero(pair: Replicated) -> None:
    done = run_cli("publish", "s", "n=1", "--wait-timeout-ms", "0", "--redis-url", pair.url)
    assert done.returncode == 2
    assert "--wait-timeout-ms" in done.stderr


def test_cli_dlq_replay_with_wait_replicas_fails_while_the_replica_is_stopped(
    pair: Replicated, primary: redis.Redis
) -> None:
    fields = {"n": "1", "dlq_stream": "orders", "dlq_group": "g", "dlq_id": "1-1"}
    primary.xadd(dead_letter_stream("orders"), fields, id="5-1")
    args = ("dlq", "replay", "orders", "--all", "--redis-url", pair.url, "--wait-replicas", "1")
    with pair.replica_paused():
        done = run_cli(*args, "--wait-timeout-ms", str(TIMEOUT_MS))
    assert done.returncode == 1
    assert "replay of dead letter 5-1 to 'orders'" in done.stderr
    assert "only 0 of 1 replica(s)" in done.stderr


_FORWARDER = """
import os

from streamworker import App, Message

app = App("fwd", redis_url=os.environ["FWD_REDIS_URL"])


@app.handler("in", group="g", block_ms=100)
async def forward(msg: Message) -> None:
    await app.publish("out", dict(msg.fields))
"""


def _metric(port: int, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_streamworker_run_makes_app_publish_wait_as_the_settings_say_and_counts_it(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis, tmp_path: Path
) -> None:
    from tests.support.proc import stop_process, streamworker, wait_for
    from tests.support.servers import free_port

    (tmp_path / "fwd.py").write_text(_FORWARDER)
    port = free_port()
    env = {
        "PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[2]}",
        "FWD_REDIS_URL": pair.url,
        "STREAMWORKER_WAIT_REPLICAS": "1",
        "STREAMWORKER_WAIT_TIMEOUT_MS": str(TIMEOUT_MS),
    }
    proc = streamworker(
        "run", "fwd:app", "--redis-url", pair.url, "--metrics-port", str(port), env=env
    )
    try:
        for n in range(3):
            primary.xadd("in", {"n": str(n)})
        wait_for(lambda: replica.xlen("out") == 3, what="3 entries on the replica")
        count = 'streamworker_publish_wait_seconds_count{operation="publish"}'
        wait_for(lambda: _metric(port, count) == 3, what="3 timed waits")
        with pair.replica_paused():
            primary.xadd("in", {"n": "3"})
            timeouts = 'streamworker_publish_wait_timeouts_total{operation="publish"}'
            wait_for(lambda: _metric(port, timeouts) >= 1, what="a wait that timed out")
    finally:
        stop_process(proc)
