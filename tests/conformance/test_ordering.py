"""``ordered=True`` on a partitioned stream, on every backend: the lease scripts run, and each
key's messages are handled in the order they were added, a retried message holding back the
rest of its partition."""

from __future__ import annotations

import redis

from streamworker import App, Message, Retry
from streamworker.io.keys import lease_key
from streamworker.producing.partitions import PartitionedStream
from tests.support.worker import eventually, running_worker

EVENTS = PartitionedStream("events", 2)


async def test_ordered_partitions_handle_each_key_in_order_through_a_retry(
    backend_url: str, sync_client: redis.Redis
) -> None:
    produced = []
    for i in range(24):
        key = f"k{i % 4}"
        sync_client.xadd(EVENTS.stream_for(key), {"key": key, "i": str(i)})
        produced.append((key, i))
    attempts: dict[str, int] = {}
    handled: list[tuple[str, int]] = []
    app = App("t")

    @app.handler(
        EVENTS.name, group="g", partitions=EVENTS.partitions, ordered=True, block_ms=100,
        batch_size=5, retry_backoff_ms=10, retry_backoff_max_ms=10,
    )  # fmt: skip
    async def handle(msg: Message) -> None:
        attempts[msg.id] = attempts.get(msg.id, 0) + 1
        if msg.fields["i"] in ("5", "6") and attempts[msg.id] < 3:
            raise Retry(delay_ms=30)
        handled.append((msg.fields["key"], int(msg.fields["i"])))

    async with running_worker(app, backend_url, consumer="c1"):
        await eventually(lambda: len(handled) == 24, 30, "24 handled")
        holders = {sync_client.get(lease_key(s, "g")) for s in EVENTS.streams()}
        assert holders == {b"c1"}
    for key in ("k0", "k1", "k2", "k3"):
        assert [i for k, i in handled if k == key] == [i for k, i in produced if k == key]
    assert sorted(handled) == sorted(produced)
    # A graceful stop releases the leases.
    assert [sync_client.get(lease_key(s, "g")) for s in EVENTS.streams()] == [None, None]
