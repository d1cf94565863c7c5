"""A consumer name has one live owner (real redis-server; the CLI in subprocesses as a user runs
it): a second process with the same name refuses to start, a restart after kill -9 takes the name
back, a holder that died elsewhere is waited for one TTL."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest
import redis

from streamworker.errors import ConsumerNameTaken
from streamworker.io.keys import consumer_name_key
from streamworker.io.redisio import open_redis
from streamworker.runtime.names import ConsumerNames
from tests.support.proc import read_lines, stop_process, streamworker, wait_for

APP = "tests/apps/recorder.py:app"
SUBS = [("orders", "billing")]


def _start(redis_url: str, log: Path, **env: str):  # type: ignore[no-untyped-def]
    return streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        "pod-0",
        env={"SW_TEST_LOG": str(log), "STREAMWORKER_CONSUMER_NAME_TTL_MS": "3000", **env},
    )


def _events(stderr: str) -> list[str]:
    events = []
    for line in stderr.splitlines():
        try:
            events.append(json.loads(line).get("event", ""))
        except ValueError:
            continue
    return events


def test_second_process_with_the_same_consumer_name_exits_2_and_the_first_goes_on(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    first = _start(redis_url, tmp_path / "first.log")
    try:
        wait_for(
            lambda: redis_client.exists(consumer_name_key("orders", "billing", "pod-0")),
            what="the first worker owns its name",
        )
        second = _start(redis_url, tmp_path / "second.log")
        second.wait(30)
        err = second.stderr.read().decode() if second.stderr else ""
        assert second.returncode == 2, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("streamworker: error: consumer name 'pod-0' is in use")
        assert "--consumer NAME" in last
        # The first one is untouched and still consumes.
        redis_client.xadd("orders", {"n": "after"})
        wait_for(
            lambda: any(
                r[0] == "done" and r[2] == "after" for r in read_lines(tmp_path / "first.log")
            ),
            what="the first worker handled a new message",
        )
        assert first.poll() is None
    finally:
        err = stop_process(first)
    assert "consumer_name_lost" not in _events(err)


def test_restart_after_kill_9_takes_its_name_back_at_once_and_replays_its_backlog(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # A TTL far longer than the restart takes: the name must be taken over, not found expired.
    ttl = {"STREAMWORKER_CONSUMER_NAME_TTL_MS": "30000"}
    first = _start(redis_url, tmp_path / "run1.log", SW_TEST_SLEEP_S="60", SW_TEST_BATCH="1", **ttl)
    mid = redis_client.xadd("orders", {"n": "m"}).decode()
    try:
        wait_for(lambda: read_lines(tmp_path / "run1.log"), what="the handler started")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    started = time.monotonic()
    second = _start(redis_url, tmp_path / "run2.log", **ttl)
    try:
        wait_for(
            lambda: ["done", mid, "m"] in read_lines(tmp_path / "run2.log"),
            what="the restarted worker replayed its backlog",
        )
        # Same host, the old pid is gone: no wait for the 30 s record to expire.
        assert time.monotonic() - started < 15
    finally:
        err = stop_process(second)
    assert "consumer_name_taken_over" in _events(err)


async def test_holder_that_died_on_another_host_is_waited_for_one_ttl(
    redis_url: str, redis_client: redis.Redis
) -> None:
    client = open_redis(redis_url)
    try:
        dead = ConsumerNames(client, "pod-0", SUBS, ttl_ms=1500, host="elsewhere", pid=1)
        await dead.acquire()  # and never renewed again: killed with its host
        restarted = ConsumerNames(client, "pod-0", SUBS, ttl_ms=1500)
        began = time.monotonic()
        await restarted.acquire()
        waited = time.monotonic() - began
        assert 0.5 < waited < 3.0
        key = consumer_name_key("orders", "billing", "pod-0")
        assert redis_client.hget(key, "token") == restarted.token.encode()
    finally:
        await client.aclose()


async def test_live_holder_on_another_host_makes_the_start_fail_within_one_renewal(
    redis_url: str,
) -> None:
    client = open_redis(redis_url)
    try:
        live = ConsumerNames(client, "pod-0", SUBS, ttl_ms=3000, host="elsewhere", pid=1)
        await live.acquire()
        second = ConsumerNames(client, "pod-0", SUBS, ttl_ms=3000)

        async def keep_renewing() -> None:
            while True:
                await asyncio.sleep(live.renew_interval_s)
                await live.renew()

        renewer = asyncio.ensure_future(keep_renewing())
        began = time.monotonic()
        try:
            with pytest.raises(ConsumerNameTaken, match="host elsewhere, pid 1"):
                await second.acquire()
        finally:
            renewer.cancel()
        assert time.monotonic() - began < 2.5  # refused on the first renewal seen, not at TTL
    finally:
        await client.aclose()


async def test_renewal_after_another_process_took_the_name_raises(redis_url: str) -> None:
    client = open_redis(redis_url)
    try:
        mine = ConsumerNames(client, "pod-0", SUBS, ttl_ms=1000, host="a", pid=1)
        await mine.acquire()
        await client.delete(consumer_name_key("orders", "billing", "pod-0"))  # outage past TTL
        other = ConsumerNames(client, "pod-0", SUBS, ttl_ms=1000, host="b", pid=2)
        await other.acquire()
        with pytest.raises(ConsumerNameTaken, match="host b, pid 2"):
            await mine.renew()
    finally:
        await client.aclose()


async def test_a_second_worker_with_the_same_name_in_one_process_is_refused(
    redis_url: str,
) -> None:
    client = open_redis(redis_url)
    try:
        first = ConsumerNames(client, "pod-0", SUBS, ttl_ms=900)
        await first.acquire()

        async def keep_renewing() -> None:
            while True:
                await asyncio.sleep(first.renew_interval_s)
                await first.renew()

        renewer = asyncio.ensure_future(keep_renewing())
        try:
            # Same host, same pid, same process start: alive, not an earlier run.
            with pytest.raises(ConsumerNameTaken):
                await ConsumerNames(client, "pod-0", SUBS, ttl_ms=900).acquire()
        finally:
            renewer.cancel()
    finally:
        await client.aclose()


async def test_graceful_stop_releases_the_name(redis_url: str, redis_client: redis.Redis) -> None:
    client = open_redis(redis_url)
    try:
        names = ConsumerNames(client, "pod-0", SUBS, ttl_ms=60_000)
        await names.acquire()
        await names.release()
        assert not redis_client.exists(consumer_name_key("orders", "billing", "pod-0"))
    finally:
        await client.aclose()


async def test_the_name_record_is_the_workers_heartbeat(
    redis_url: str, redis_client: redis.Redis
) -> None:
    from streamworker import App, Message
    from tests.support.worker import eventually, running_worker

    app = App("t")

    @app.handler("orders", group="billing", block_ms=100)
    async def handle(msg: Message) -> None:
        if msg.fields["n"] == "bad":
            raise RuntimeError("no")

    for n in ("1", "2", "bad"):
        redis_client.xadd("orders", {"n": n})
    key = consumer_name_key("orders", "billing", "pod-hb")
    before = int(time.time() * 1000)
    async with running_worker(
        app, redis_url, consumer="pod-hb", consumer_name_ttl_ms=1500
    ) as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].batches.failed == 1)

        record: dict[str, str] = {}

        def counters_written() -> bool:
            # The next renewal (every 0.5 s) after the failure writes the counters.
            record.clear()
            record.update({k.decode(): v.decode() for k, v in redis_client.hgetall(key).items()})
            return record.get("failed") == "1"

        await eventually(counters_written, what="a renewal with the counters")
    assert record["consumer"] == "pod-hb"
    assert record["processed"] == "2"
    assert record["failed"] == "1"
    assert int(record["last_batch_at_ms"]) >= before
    assert int(record["beat_at_ms"]) >= before
    assert record["in_flight"] == "0"
    assert record["handlers"].endswith("handle")
    assert record["claim_idle_ms"] == "60000"  # the handler's, for the dashboard's claim
    assert not redis_client.exists(key)  # released by the graceful stop
