"""The reclaimer's XAUTOCLAIM cursor loop (and its XPENDING + XCLAIM fallback) on every backend."""

from __future__ import annotations

import pytest
import redis

from streamworker.io.redisio import open_redis
from streamworker.runtime.reclaimer import autoclaim_pages


def _fill_pel(client: redis.Redis, n: int) -> list[bytes]:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd("big", {"i": str(i)})
    ids: list[bytes] = pipe.execute()
    client.xgroup_create("big", "g", id="0")
    client.xreadgroup("g", "dead-pod", {"big": ">"}, count=n)
    return ids


@pytest.mark.parametrize("use_xautoclaim", [True, False], ids=["xautoclaim", "xpending-xclaim"])
async def test_cursor_loop_claims_every_eligible_entry_exactly_once(
    backend_url: str, sync_client: redis.Redis, use_xautoclaim: bool
) -> None:
    n = 50_000 if use_xautoclaim else 5_000
    ids = _fill_pel(sync_client, n)
    deleted = set(ids[::997])  # deleted from the stream while pending
    sync_client.xdel("big", *deleted)
    acked = set(ids[5::1009])  # already handled
    sync_client.xack("big", "g", *acked)

    client = open_redis(backend_url)
    claimed: list[bytes] = []
    reported_deleted: list[bytes] = []
    async for page in autoclaim_pages(
        client, "big", "g", "rescuer", 0, count=100, use_xautoclaim=use_xautoclaim
    ):
        claimed += [e.id for e in page.entries]
        reported_deleted += page.deleted
        assert set(page.counts) == {e.id for e in page.entries}
        assert all(c == 2 for c in page.counts.values())
    await client.aclose()

    expected = [i for i in ids if i not in deleted and i not in acked]
    assert claimed == expected  # each once, in PEL order
    assert sorted(reported_deleted) == sorted(deleted - acked)
    summary = sync_client.xpending("big", "g")
    assert summary["pending"] == len(expected)
    assert {c["name"]: c["pending"] for c in summary["consumers"]} == {b"rescuer": len(expected)}


async def test_entries_not_idle_long_enough_are_left_alone(
    backend_url: str, sync_client: redis.Redis
) -> None:
    _fill_pel(sync_client, 10)
    client = open_redis(backend_url)
    pages = [p async for p in autoclaim_pages(client, "big", "g", "rescuer", 60_000, count=3)]
    await client.aclose()
    assert all(not p.entries for p in pages)
    assert sync_client.xpending("big", "g")["consumers"] == [{"name": b"dead-pod", "pending": 10}]
