"""The shared rate limit end to end on redis-server 7.0, with real ``streamworker run``
processes: the acceptance figure (two workers of one group, ``rate_limit="100/s"``, 800
messages spread over at least 7 s, no 1-second window above 120 starts, each handled once), and
``RateLimited`` (a 429): every worker pauses, the message is retried after the pause on an
uncounted delivery (``max_deliveries=1`` does not dead-letter it); with each idempotency
strategy in-process, and the metrics."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from streamworker import App, Message, RateLimited, Retry
from streamworker.io.keys import consumer_name_key, rate_limit_key
from streamworker.io.redisio import open_sync_redis
from tests.support.proc import read_lines, stop_process, streamworker, wait_for
from tests.support.sql import migrated_db_url, running_sql_worker
from tests.support.worker import eventually, running_worker

STREAM, GROUP = "jobs", "g"


def _starts(log: Path, kind: str = "start") -> list[tuple[str, int, str, float]]:
    """(n, delivery_count, consumer, epoch s) of each logged line of ``kind``."""
    return [
        (line[2], int(line[3]), line[4], float(line[5]))
        for line in read_lines(log)
        if line[0] == kind and len(line) == 6
    ]


def _busiest_second(times: list[float]) -> int:
    """The most starts in any half-open 1-second window (each start opens one)."""
    times = sorted(times)
    most, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        most = max(most, i - j + 1)
    return most


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[Any]:
    """Start two ``streamworker run`` processes of tests/apps/rate_limited.py with ``env``;
    stopped (SIGTERM) at the end of the test."""
    procs: list[subprocess.Popen[bytes]] = []
    client = open_sync_redis(redis_url)

    def start(env: dict[str, str]) -> None:
        full = {
            "SW_TEST_STREAM": STREAM,
            "SW_TEST_GROUP": GROUP,
            "SW_TEST_LOG": str(tmp_path / "handled.log"),
            "SW_TEST_SEEN_DIR": str(tmp_path),
            **env,
        }
        for name in ("w1", "w2"):
            procs.append(
                streamworker(
                    "run",
                    "tests/apps/rate_limited.py:app",
                    "--redis-url",
                    redis_url,
                    "--consumer",
                    name,
                    env=full,
                )
            )
        for name in ("w1", "w2"):
            record = consumer_name_key(STREAM, GROUP, name)
            wait_for(lambda: client.exists(record), 30.0, f"{name} started")  # noqa: B023

    yield start
    errors = [stop_process(p) for p in procs]
    for proc, err in zip(procs, errors, strict=True):
        assert proc.returncode == 0, err[-4000:]


def _publish(client: redis.Redis, fields: list[dict[str, str]]) -> None:
    pipe = client.pipeline(transaction=False)
    for f in fields:
        pipe.xadd(STREAM, f)  # type: ignore[arg-type]
    pipe.execute()


def test_two_workers_at_100_per_s_spread_800_messages_over_7_s_without_a_busy_second(
    redis_url: str, tmp_path: Path, workers: Any
) -> None:
    workers({"SW_TEST_RATE": "100/s"})
    client = open_sync_redis(redis_url)
    _publish(client, [{"n": str(n)} for n in range(800)])
    log = tmp_path / "handled.log"
    wait_for(lambda: len(_starts(log)) >= 800, 60.0, "800 handled")
    wait_for(lambda: client.xpending(STREAM, GROUP)["pending"] == 0, 10.0, "all acked")
    starts = _starts(log)
    times = [t for _, _, _, t in starts]
    assert sorted(int(n) for n, _, _, _ in starts) == list(range(800))  # each once
    assert max(times) - min(times) >= 7.0
    assert _busiest_second(times) <= 120
    # Both workers shared the work (the limit is the group's, not each worker's).
    assert {c for _, _, c, _ in starts} == {"w1", "w2"}


@pytest.mark.parametrize(
    ("rate", "batch", "sleep_s", "reaction_s"),
    [
        # A limited handler's workers see the pause at their next ask for permits.
        ("200/s", "50", "0", 0.5),
        # Without a limit, a worker looks for the pause before a read, at most once a second.
        ("", "5", "0.02", 1.5),
    ],
    ids=["limited", "unlimited"],
)
def test_rate_limited_pauses_both_workers_and_retries_uncounted(
    redis_url: str,
    tmp_path: Path,
    workers: Any,
    rate: str,
    batch: str,
    sleep_s: str,
    reaction_s: float,
) -> None:
    workers(
        {
            "SW_TEST_RATE": rate,
            "SW_TEST_BATCH": batch,
            "SW_TEST_SLEEP_S": sleep_s,
            "SW_TEST_MAX_DELIVERIES": "1",
        }
    )
    client = open_sync_redis(redis_url)
    _publish(client, [{"n": "0", "pause_ms": "3000"}, *({"n": str(n)} for n in range(1, 300))])
    log = tmp_path / "handled.log"
    wait_for(lambda: len(_starts(log)) >= 300, 60.0, "300 handled")
    wait_for(lambda: client.xpending(STREAM, GROUP)["pending"] == 0, 10.0, "all acked")
    ((_, _, _, raised_at),) = _starts(log, "limited")
    starts = _starts(log)
    assert sorted(int(n) for n, _, _, _ in starts) == list(range(300))  # each once
    # Nobody started anything while the pause lasted (after the time it takes to hear of it).
    during = [t for _, _, _, t in starts if raised_at + reaction_s <= t < raised_at + 2.95]
    assert during == []
    # The limited message ran after the pause, on a delivery that counts as its first.
    ((_, count, _, at),) = [s for s in starts if s[0] == "0"]
    assert at >= raised_at + 2.95
    assert count == 1
    assert client.xlen("{jobs}:dlq") == 0
    # Both workers went on after the pause.
    assert {c for _, _, c, t in starts if t >= raised_at + 2.95} == {"w1", "w2"}


# --- every idempotency strategy, in-process ------------------------------------------------------


def _app(idempotency: str, seen: set[str], handled: list[tuple[str, int]]) -> App:
    app = App("rate-strategies")

    @app.handler(
        STREAM,
        group=GROUP,
        idempotency=idempotency,
        max_deliveries=1,
        block_ms=100,
        rate_limit="50/s",
        claim_idle_ms=5_000,
    )
    def handle(msg: Message) -> None:
        if msg.fields["n"] == "0" and "0" not in seen:
            seen.add("0")
            raise RateLimited(retry_after_ms=700)
        handled.append((msg.fields["n"], msg.delivery_count))

    return app


@pytest.mark.parametrize("idempotency", ["none", "lua", "sql"])
def test_a_rate_limited_message_is_retried_after_the_pause_and_never_dead_lettered(
    redis_url: str, tmp_path: Path, request: pytest.FixtureRequest, idempotency: str
) -> None:
    db_url = migrated_db_url("sqlite", tmp_path, request) if idempotency == "sql" else None
    client = open_sync_redis(redis_url)
    seen: set[str] = set()
    handled: list[tuple[str, int]] = []
    app = _app(idempotency, seen, handled)
    _publish(client, [{"n": str(n)} for n in range(5)])

    async def main() -> float:
        runner = (
            running_sql_worker(app, redis_url, db_url)
            if idempotency == "sql"
            else running_worker(app, redis_url)
        )
        async with runner as worker:
            await eventually(lambda: len(handled) >= 5, 15.0, "5 handled")
            await eventually(
                lambda: client.xpending(STREAM, GROUP)["pending"] == 0, 5.0, "all acked"
            )
            labels = {"stream": STREAM, "group": GROUP, "handler": app.handlers[0].name}
            return float(worker.metrics.rate_limited.labels(**labels)._value.get())

    waited_s = asyncio.run(main())
    assert sorted(handled) == [(str(n), 1) for n in range(5)]
    assert client.xlen("{jobs}:dlq") == 0
    # The worker's reads waited out the pause, and that shows in the metric.
    assert waited_s >= 0.3
    assert client.exists(rate_limit_key(STREAM, GROUP)) in (0, 1)


def test_retries_take_permits_too(redis_url: str) -> None:
    # Every message fails once (Retry at once): the reclaimer's retries are starts the limit
    # counts, so 20 messages make 40 starts at 10/s (burst 1): about 4 s, never above 10 a second.
    client = open_sync_redis(redis_url)
    app = App("rate-retries")
    starts: list[float] = []
    failed: set[str] = set()

    @app.handler(STREAM, group=GROUP, block_ms=100, rate_limit="10/s", retry_backoff_ms=0)
    async def handle(msg: Message) -> None:
        starts.append(time.monotonic())
        if msg.id not in failed:
            failed.add(msg.id)
            raise Retry(delay_ms=0)

    _publish(client, [{"n": str(n)} for n in range(20)])

    async def main() -> None:
        async with running_worker(app, redis_url):
            await eventually(lambda: len(starts) >= 40, 30.0, "40 starts")
            await eventually(
                lambda: client.xpending(STREAM, GROUP)["pending"] == 0, 5.0, "all acked"
            )

    asyncio.run(main())
    assert len(starts) == 40
    assert max(starts) - min(starts) >= 3.5
    assert _busiest_second(starts) <= 11
