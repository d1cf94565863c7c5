"""``streamworker_reconnects_total`` counts outages recovered from, not retry attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamworker import App, Message
from streamworker.runtime.worker import Worker
from tests.support.servers import RedisServer
from tests.support.worker import eventually, running_worker

app = App("reconnects")


@app.handler("jobs", group="g", block_ms=200)
async def job(msg: Message) -> None:
    pass


LABELS = {"stream": "jobs", "group": "g", "handler": f"{__name__}.job"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    # With its append-only file: a restart keeps the group (one lost would stop the handler).
    srv = RedisServer(tmp_path / "redis", appendonly=True).start()
    yield srv
    srv.stop()


def _sample(worker: Worker, name: str) -> float:
    return worker.metrics.registry.get_sample_value(name, LABELS) or 0.0


async def _outage(server: RedisServer, worker: Worker, seconds: float) -> None:
    attempts = _sample(worker, "streamworker_reconnect_attempts_total")
    await asyncio.to_thread(server.stop)
    await eventually(
        lambda: _sample(worker, "streamworker_reconnect_attempts_total") >= attempts + 3,
        what="several failed attempts",
    )
    await asyncio.sleep(seconds)
    await asyncio.to_thread(server.start)


async def test_one_outage_counts_one_reconnect_however_many_attempts_it_took(
    server: RedisServer,
) -> None:
    async with running_worker(app, server.url) as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].backlog_drained.is_set())
        await _outage(server, worker, 0.5)
        await eventually(lambda: _sample(worker, "streamworker_reconnects_total") == 1)
        await asyncio.sleep(0.5)  # the loop is back at work: nothing more is counted
        assert _sample(worker, "streamworker_reconnects_total") == 1
        assert _sample(worker, "streamworker_reconnect_attempts_total") >= 3


async def test_each_outage_counts_once(server: RedisServer) -> None:
    async with running_worker(app, server.url) as worker:
        await eventually(lambda: worker.consumers and worker.consumers[0].backlog_drained.is_set())
        await _outage(server, worker, 0.2)
        await eventually(lambda: _sample(worker, "streamworker_reconnects_total") == 1)
        await _outage(server, worker, 0.2)
        await eventually(lambda: _sample(worker, "streamworker_reconnects_total") == 2)
