"""A stream deleted while the consume loop waits on it (a blocked XREADGROUP answered with
``UNBLOCKED``, or ``NOGROUP`` on Redis 7.0): the group went with it. By default the handler stops
(re-creating the group at ``start_id`` would replay the stream); with ``recreate_lost_group=True``
the loop re-creates it and goes on. Either way the worker itself keeps running."""

from __future__ import annotations

import redis

from streamworker import App, Message
from tests.support.worker import eventually, running_worker

# Also on the engine in 8.10 mode (tests/conformance/conftest.py): the post-7.0 paths.
REDIS8_PATHS = True


async def test_a_stream_deleted_under_a_blocked_read_stops_the_handler(
    backend_url: str, sync_client: redis.Redis
) -> None:
    seen: list[str] = []
    app = App("t")

    @app.handler("jobs", group="g", block_ms=5_000)
    async def handle(msg: Message) -> None:
        seen.append(msg.fields["n"])

    async with running_worker(app, backend_url) as worker:
        sync_client.xadd("jobs", {"n": "1"})
        await eventually(lambda: seen == ["1"], 20, "the first message")
        sync_client.delete("jobs")
        await eventually(lambda: worker.consumers[0].group_lost, 20, "the handler stopped")
        assert not sync_client.exists("jobs")


async def test_a_stream_deleted_under_a_blocked_read_is_recreated_when_opted_in(
    backend_url: str, sync_client: redis.Redis
) -> None:
    seen: list[str] = []
    app = App("t")

    @app.handler("jobs", group="g", block_ms=5_000, recreate_lost_group=True)
    async def handle(msg: Message) -> None:
        seen.append(msg.fields["n"])

    async with running_worker(app, backend_url):
        sync_client.xadd("jobs", {"n": "1"})
        await eventually(lambda: seen == ["1"], 20, "the first message")
        sync_client.delete("jobs")
        # The group comes back (MKSTREAM, at start_id) once the blocked read has been told.
        await eventually(lambda: sync_client.exists("jobs"), 20, "the stream recreated")
        sync_client.xadd("jobs", {"n": "2"})
        await eventually(lambda: seen == ["1", "2"], 20, "the message after the deletion")
