"""Reading a consumer's entries: delivery counters and the entry replies of scripts and claims.

The replies of XREADGROUP itself are parsed by :func:`streamworker.io.redisio.parse_read_reply`;
what is here serves the other sources of entries (XPENDING for a backlog's delivery counters, the
claim scripts and XAUTOCLAIM, the ordered loop's ``read_owned.lua``).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from streamworker.io.redisio import Entry, as_bytes, connection_errors, flat_fields


def entry_from_reply(raw: Any) -> Entry:
    """An entry from a ``[id, fields]`` reply: fields as a flat list, a dict, or nil (deleted)."""
    entry_id, fields = raw[0], raw[1]
    return Entry(id=as_bytes(entry_id), fields=flat_fields(fields) if fields else None)


async def delivery_counts(
    client: aioredis.Redis,
    stream: str,
    group: str,
    consumer: str,
    entries: list[Entry],
    *,
    count: int | None = None,
) -> dict[bytes, int]:
    """Delivery counters of ``entries``, pending for ``consumer`` in id order (a history read
    such as a backlog's ``XREADGROUP … 0`` does not return them), by one XPENDING over their
    range of at most ``count`` rows (default: as many as entries). Entries no longer pending
    for ``consumer`` are missing from the result; with other entries of ``consumer`` in the
    range, they may be there too."""
    async with connection_errors():
        rows = await client.xpending_range(
            stream,
            group,
            min=entries[0].id,
            max=entries[-1].id,
            count=len(entries) if count is None else count,
            consumername=consumer,
        )
    return {as_bytes(row["message_id"]): int(row["times_delivered"]) for row in rows}
