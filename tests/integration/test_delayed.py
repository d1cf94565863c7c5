"""Delayed delivery end to end, on a real redis-server and on the embedded engine in-process:
the acceptance figure (two workers, 60 messages delayed 2 s, each handled once 2 to 4 s after its
publish), retry-safe keyed and partitioned delayed publishes, bounded moves, trimming kept,
metrics, and the mover's exactly-once under SIGKILL with several real worker processes."""

from __future__ import annotations

import asyncio
import datetime
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

from streamworker import App, Message, ReplicaWaitTimeout
from streamworker.engine.inproc import forget_engine
from streamworker.io.keys import consumer_name_key, delayed_key
from streamworker.io.redisio import open_redis, open_sync_redis
from streamworker.producing.delayed import DelayedMover, move_due, now_ms
from streamworker.producing.producer import Producer, StreamOptions, SyncProducer
from tests.support.proc import read_lines, run_cli, streamworker, wait_for
from tests.support.replication import Replicated
from tests.support.servers import RedisServer
from tests.support.worker import eventually, running_worker


@pytest.fixture(params=["redis", "engine"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A flushed real redis-server, or a fresh in-process engine."""
    if request.param == "redis":
        yield request.getfixturevalue("redis_url")
        return
    engine_url = f"engine://memory/delayed-{uuid.uuid4().hex}"
    yield engine_url
    forget_engine(engine_url)


def _entries(client: redis.Redis, stream: str) -> list[dict[bytes, bytes]]:
    return [fields for _id, fields in client.xrange(stream)]


def test_two_workers_handle_each_delayed_message_once_two_to_four_seconds_after_publish(
    redis_url: str,
) -> None:
    app = App("delayed-acceptance")
    handled: list[tuple[str, int, int]] = []

    @app.handler("jobs", group="g", block_ms=200, batch_size=10)
    async def handle(msg: Message) -> None:
        handled.append((msg.fields["n"], int(msg.fields["published_ms"]), now_ms()))

    sync = open_sync_redis(redis_url)

    async def main() -> None:
        async with (
            running_worker(app, redis_url, consumer="w1"),
            running_worker(app, redis_url, consumer="w2"),
        ):
            producer = Producer(open_redis(redis_url))
            for n in range(60):
                await producer.publish(
                    "jobs", {"n": str(n), "published_ms": str(now_ms())}, delay_ms=2_000
                )
            await eventually(lambda: len(handled) >= 60, 10.0, "60 handled")
            # Nothing is left to hand out: every entry moved once, every delivery acked.
            await eventually(
                lambda: (
                    sync.zcard(delayed_key("jobs")) == 0
                    and sync.xlen("jobs") == 60
                    and sync.xpending("jobs", "g")["pending"] == 0
                ),
                5.0,
                "all moved and acked",
            )
            await producer.client.aclose()

    asyncio.run(main())
    assert sorted(int(n) for n, _, _ in handled) == list(range(60))
    latencies = [done - published for _, published, done in handled]
    assert min(latencies) >= 2_000, latencies
    assert max(latencies) <= 4_000, latencies


def test_a_worker_on_the_in_process_engine_moves_and_handles_a_delayed_message() -> None:
    url = f"engine://memory/delayed-{uuid.uuid4().hex}"
    app = App("delayed-engine")
    handled: list[int] = []

    @app.handler("jobs", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        handled.append(now_ms())

    async def main() -> int:
        async with running_worker(app, url):
            receipt = await app.publish("jobs", {"a": "1"}, delay_ms=300)
            assert receipt.id is None
            assert receipt.due_ms is not None
            await eventually(lambda: handled, 5.0, "the delayed message handled")
            return receipt.due_ms

    app.use_redis_url(url)
    try:
        due = asyncio.run(main())
    finally:
        forget_engine(url)
    assert len(handled) == 1
    assert due <= handled[0] < due + 2_000


def test_a_retried_keyed_delayed_publish_schedules_nothing_twice(url: str) -> None:
    client = open_sync_redis(url)
    producer = SyncProducer(client)
    first = producer.publish("jobs", {"a": "1"}, delay_ms=60_000, idempotency_key="order-7")
    again = producer.publish("jobs", {"a": "1"}, delay_ms=60_000, idempotency_key="order-7")
    assert (first.id, first.duplicate) == (None, False)
    assert again.duplicate
    assert again.id is None
    assert again.due_ms == first.due_ms
    assert client.zcard(delayed_key("jobs")) == 1
    # The key is remembered past the due time: the window counts from then.
    assert client.pttl("{jobs}:published:order-7") > 24 * 3_600_000


def test_a_keyed_delayed_publish_enters_the_stream_once_even_when_retried_after_the_move(
    url: str,
) -> None:
    client = open_sync_redis(url)
    producer = SyncProducer(client)
    producer.publish("jobs", {"a": "1"}, delay_ms=0, idempotency_key="k")

    async def move() -> None:
        aclient = open_redis(url)
        await move_due(aclient, "jobs")
        await aclient.aclose()

    asyncio.run(move())
    retry = producer.publish("jobs", {"a": "1"}, delay_ms=0, idempotency_key="k")
    asyncio.run(move())
    assert retry.duplicate
    assert client.xlen("jobs") == 1
    assert client.zcard(delayed_key("jobs")) == 0


def test_a_keyed_publish_after_a_delayed_one_reports_its_due_time(url: str) -> None:
    producer = SyncProducer(open_sync_redis(url))
    first = producer.publish("jobs", {"a": "1"}, delay_ms=5_000, idempotency_key="k")
    plain = producer.publish("jobs", {"a": "1"}, idempotency_key="k")
    assert plain.duplicate
    assert (plain.id, plain.due_ms) == (None, first.due_ms)


def test_partitioned_delayed_publishes_wait_in_their_partition_and_retry_safely(url: str) -> None:
    client = open_sync_redis(url)
    producer = SyncProducer(client, streams={"orders": StreamOptions(partitions=4)})
    keys = [f"customer-{i}" for i in range(8)]
    for _ in range(2):
        for key in keys:
            producer.publish(
                "orders", {"k": key}, partition_key=key, idempotency_key=key, delay_ms=0
            )
    partitions = [f"{{orders:p{i}}}" for i in range(4)]
    assert sum(client.zcard(delayed_key(p)) for p in partitions) == len(keys)

    async def move() -> None:
        aclient = open_redis(url)
        for p in partitions:
            await move_due(aclient, p)
        await aclient.aclose()

    asyncio.run(move())
    moved = sorted(f[b"k"].decode() for p in partitions for f in _entries(client, p))
    assert moved == sorted(keys)


def test_publish_many_schedules_delayed_and_plain_entries_in_one_pipeline(url: str) -> None:
    client = open_sync_redis(url)
    producer = SyncProducer(client)
    plans = [
        producer.plan("jobs", {"n": "0"}),
        producer.plan("jobs", {"n": "1"}, delay_ms=60_000),
        producer.plan("jobs", {"n": "2"}, delay_ms=60_000, idempotency_key="two"),
    ]
    receipts = producer.publish_many(plans)
    assert receipts[0].id is not None
    assert receipts[0].due_ms is None
    assert [r.id for r in receipts[1:]] == [None, None]
    assert client.xlen("jobs") == 1
    assert client.zcard(delayed_key("jobs")) == 2


def test_deliver_at_schedules_at_that_instant(url: str) -> None:
    client = open_sync_redis(url)
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=5)
    receipt = SyncProducer(client).publish("jobs", {"a": "1"}, deliver_at=when)
    assert receipt.due_ms == int(when.timestamp() * 1000)
    assert client.zscore(delayed_key("jobs"), client.zrange(delayed_key("jobs"), 0, 0)[0]) == (
        receipt.due_ms
    )


def test_the_mover_takes_only_due_entries_a_bounded_batch_at_a_time_and_keeps_trimming(
    url: str,
) -> None:
    client = open_sync_redis(url)
    producer = SyncProducer(client, streams={"jobs": StreamOptions(maxlen=3, approximate=False)})
    for n in range(5):
        producer.publish("jobs", {"n": str(n)}, delay_ms=0)
    later = producer.publish("jobs", {"n": "later"}, delay_ms=60_000)

    async def move(batch: int) -> tuple[int, int]:
        aclient = open_redis(url)
        result = await move_due(aclient, "jobs", batch=batch, now=now_ms())
        await aclient.aclose()
        return result.moved, result.delayed

    assert asyncio.run(move(2)) == (2, 4)
    assert asyncio.run(move(10)) == (3, 1)
    assert [f[b"n"] for f in _entries(client, "jobs")] == [b"2", b"3", b"4"]
    assert later.due_ms is not None
    assert client.zcard(delayed_key("jobs")) == 1


def test_the_worker_reports_delayed_and_moved_counts_in_its_metrics(redis_url: str) -> None:
    app = App("delayed-metrics")

    @app.handler("jobs", group="g", block_ms=100)
    async def handle(msg: Message) -> None:
        return None

    producer = SyncProducer(open_sync_redis(redis_url))
    for n in range(3):
        producer.publish("jobs", {"n": str(n)}, delay_ms=0)
    producer.publish("jobs", {"n": "later"}, delay_ms=3_600_000)

    async def main() -> tuple[float, float]:
        async with running_worker(app, redis_url) as worker:
            moved = worker.metrics.delayed_moved.labels(stream="jobs")
            await eventually(lambda: moved._value.get() == 3, 5.0, "3 moved")
            gauge = worker.metrics.delayed_messages.labels(stream="jobs")
            return moved._value.get(), gauge._value.get()

    assert asyncio.run(main()) == (3, 1)


def test_cli_publish_with_delay_schedules_the_entry(redis_url: str) -> None:
    # Due 2 s after the moment the command published, which lies between these two (a loaded
    # machine may take longer than 2 s to start the command, so "now" is no reference).
    before = now_ms()
    result = run_cli("publish", "jobs", "a=1", "--delay", "2s", "--redis-url", redis_url)
    after = now_ms()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("jobs delayed until ")
    client = open_sync_redis(redis_url)
    ((_member, score),) = client.zrange(delayed_key("jobs"), 0, -1, withscores=True)
    assert before + 2_000 <= score <= after + 2_000
    assert client.xlen("jobs") == 0


def test_cli_publish_refuses_a_negative_delay_in_one_line(redis_url: str) -> None:
    result = run_cli("publish", "jobs", "a=1", "--delay=-2s", "--redis-url", redis_url)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "streamworker: error: --delay must be a duration >= 0 like 500ms, 2s, 1.5m or 1h, not '-2s'"
    ]
    assert open_sync_redis(redis_url).exists(delayed_key("jobs")) == 0


def _handled(tmp_path: Path) -> set[int]:
    return {int(line[2]) for line in read_lines(tmp_path / "handled.log") if line[0] == "done"}


KILLS = 6
"""Mover processes SIGKILLed in the crash test."""


@pytest.mark.slow
def test_each_delayed_entry_enters_once_while_movers_run_and_one_is_sigkilled_repeatedly(
    redis_url: str, tmp_path: Path
) -> None:
    client = open_sync_redis(redis_url)
    producer = SyncProducer(client)
    published = 0

    def schedule(count: int, over_ms: int) -> None:
        """``count`` more entries, due evenly over the next ``over_ms``."""
        nonlocal published
        producer.publish_many(
            [
                producer.plan("jobs", {"n": str(published + n)}, delay_ms=n * over_ms // count)
                for n in range(count)
            ]
        )
        published += count

    # Due over about 6 s, so the moves go on while processes are killed; should a slow machine
    # let the steady workers move them all before the last kill, more are scheduled, so that
    # every victim is killed while there is moving to do (the fault count does not depend on
    # the machine's speed).
    schedule(3_000, 6_000)
    env = {
        "SW_TEST_STREAM": "jobs",
        "SW_TEST_GROUP": "g",
        "SW_TEST_LOG": str(tmp_path / "handled.log"),
        "STREAMWORKER_DELAYED_POLL_MS": "5",
        # The victims' unfinished batches go to the steady workers soon.
        "SW_TEST_CLAIM_IDLE_MS": "1000",
    }

    def start(name: str) -> subprocess.Popen[bytes]:
        return streamworker(
            "run", "tests/apps/recorder.py:app", "--redis-url", redis_url, "--consumer", name,
            env=env,
        )  # fmt: skip

    steady = [start("steady-1"), start("steady-2")]
    kills = 0
    rng = random.Random(36)
    try:
        while kills < KILLS:
            if not client.zcard(delayed_key("jobs")):
                schedule(500, 1_000)
            name = f"victim-{kills}"
            victim = start(name)
            # The mover starts right after the consumer name is taken.
            record = consumer_name_key("jobs", "g", name)
            wait_for(lambda: client.exists(record), 20.0, name)  # noqa: B023 (called at once)
            # A random moment to kill at (not a wait for anything): mid-move or between moves.
            time.sleep(rng.uniform(0.0, 0.3))
            victim.send_signal(signal.SIGKILL)
            victim.communicate(timeout=10)
            kills += 1
        wait_for(lambda: client.zcard(delayed_key("jobs")) == 0, 20.0, "every entry moved")
        wait_for(lambda: _handled(tmp_path) == set(range(published)), 60.0, "every entry handled")
    finally:
        for proc in steady:
            proc.terminate()
        stuck = []
        for proc in steady:
            # communicate, not wait: a worker blocked on a full log pipe would never exit.
            try:
                _, err = proc.communicate(timeout=45)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                stuck.append(err.decode(errors="replace")[-4000:])
            else:
                # A worker whose handlers are done stops at once, not at the shutdown deadline.
                text = err.decode(errors="replace")
                if "shutdown_deadline_passed" in text:
                    stuck.append(text[-6000:])
    assert not stuck, f"a steady worker did not stop on SIGTERM:\n{stuck[0]}"
    numbers = [int(f[b"n"]) for f in _entries(client, "jobs")]
    assert len(numbers) == published
    assert sorted(numbers) == list(range(published))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    servers = Replicated(tmp_path_factory.mktemp("delayed-replicated"))
    yield servers
    servers.stop()


def test_a_delayed_publish_with_wait_replicas_returns_once_the_replica_has_the_schedule(
    pair: Replicated,
) -> None:
    primary = open_sync_redis(pair.url)
    primary.flushall()
    pair.wait_synced()
    producer = SyncProducer(primary, wait_replicas=1, wait_timeout_ms=5_000)
    producer.publish("jobs", {"a": "1"}, delay_ms=60_000, idempotency_key="k")
    # No polling: WAIT returned 1, so the replica applied the ZADD before the reply came.
    assert pair.replica.client().zcard(delayed_key("jobs")) == 1


def test_a_keyed_delayed_publish_to_a_stopped_replica_times_out_and_its_retry_is_safe(
    pair: Replicated,
) -> None:
    primary = open_sync_redis(pair.url)
    primary.flushall()
    pair.wait_synced()
    producer = SyncProducer(primary, wait_replicas=1, wait_timeout_ms=300)
    with pair.replica_paused(), pytest.raises(ReplicaWaitTimeout) as caught:
        producer.publish("jobs", {"a": "1"}, delay_ms=60_000, idempotency_key="k")
    assert caught.value.retry_safe
    again = producer.publish("jobs", {"a": "1"}, delay_ms=60_000, idempotency_key="k")
    assert again.duplicate
    assert pair.replica.client().zcard(delayed_key("jobs")) == 1


def test_the_mover_rides_out_a_redis_outage_and_moves_what_is_due_after_it(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path / "redis").start()

    async def main() -> list[str]:
        client = open_redis(server.url, socket_timeout_s=1.0)
        mover = DelayedMover(client, ["jobs"], poll_ms=20, max_pause_s=0.2)
        task = asyncio.ensure_future(mover.run())
        try:
            with capture_logs() as logs:
                server.stop()
                await eventually(
                    lambda: any(e["event"] == "delayed_move_failed" for e in logs), 10.0, "a fail"
                )
                server.start()
                SyncProducer(server.client()).publish("jobs", {"a": "1"}, delay_ms=0)
                await eventually(lambda: server.client().xlen("jobs") == 1, 10.0, "moved")
            assert not task.done()
            return [e["event"] for e in logs]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()

    try:
        events = asyncio.run(main())
    finally:
        server.stop()
    assert "delayed_move_failed" in events
