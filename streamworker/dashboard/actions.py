"""The four operator actions: replay or purge a dead letter, claim a consumer's entries to another
consumer, delete an empty consumer. Each returns a one-line outcome for the page and the log.

Replay goes through :mod:`streamworker.admin` (the same code as ``streamworker dlq replay``),
with a sync client in a worker thread; purge through ``purge_dead_letters.lua``, which deletes an
entry only if it carries the dead-letter provenance (a live stream named by mistake loses
nothing); deleting a consumer uses the runtime's
``delete_consumer.lua``, which deletes only a consumer that holds nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker import admin
from streamworker.errors import StreamworkerError
from streamworker.redisio import LuaScript, as_text

_DELETE_CONSUMER = LuaScript("delete_consumer")
# Deletes only entries that carry the dead-letter provenance: {deleted, refused, gone}.
PURGE_DEAD_LETTERS = LuaScript("purge_dead_letters")
_CLAIM_PAGE = 500


class ActionFailed(StreamworkerError):
    """An action could not be done as asked (nothing was changed by it)."""


async def replay_dead_letter(sync_client: redis.Redis, dlq: str, entry_id: str) -> str:
    """Move one dead letter back to its stream with a fresh id (atomic; a repeat is a no-op)."""
    try:
        result = await asyncio.to_thread(admin.replay_dead_letters, sync_client, dlq, [entry_id])
    except (rex.ResponseError, StreamworkerError) as exc:
        raise ActionFailed(f"cannot replay {entry_id}: {exc}") from None
    if result.replayed:
        _, stream, new_id = result.replayed[0]
        return f"replayed dead letter {entry_id} to {stream} as {new_id}"
    reason = result.skipped[0][1] if result.skipped else "nothing to do"
    raise ActionFailed(f"did not replay {entry_id}: {reason}")


async def purge_dead_letter(client: aioredis.Redis, dlq: str, entry_id: str) -> str:
    """Delete one dead letter for good; ActionFailed, and nothing deleted, when the entry is
    not a streamworker dead letter (checked in the same script as the delete)."""
    try:
        deleted, refused, _ = await PURGE_DEAD_LETTERS(client, [dlq], [entry_id])
    except rex.ResponseError as exc:
        raise ActionFailed(f"cannot purge {entry_id}: {exc}") from None
    if int(refused):
        raise ActionFailed(
            f"refused to purge {entry_id}: it is not a streamworker dead letter (no dlq_stream "
            f"field), so {dlq} is not a dead-letter stream; nothing was deleted"
        )
    if int(deleted) == 0:
        raise ActionFailed(f"no dead letter {entry_id} in {dlq} (already gone)")
    return f"deleted dead letter {entry_id} from {dlq}"


async def claim_entries(
    client: aioredis.Redis,
    stream: str,
    group: str,
    source: str,
    target: str,
    min_idle_ms: int,
) -> str:
    """Give ``source``'s pending entries idle for at least ``min_idle_ms`` to ``target``.

    XCLAIM re-checks the idle time server-side, so an entry its owner touched meanwhile stays
    with it. JUSTID: the claim is not a delivery; ``target`` counts one when it reads the entry.
    """
    if not target or target == source:
        raise ActionFailed("name another consumer to claim the entries to")
    claimed = 0
    cursor = "-"
    try:
        while True:
            rows = await client.xpending_range(
                stream, group, cursor, "+", _CLAIM_PAGE, consumername=source
            )
            if not rows:
                break
            ids: list[Any] = [r["message_id"] for r in rows]
            got = await client.xclaim(stream, group, target, min_idle_ms, ids, justid=True)
            claimed += len(got)
            if len(rows) < _CLAIM_PAGE:
                break
            last = ids[-1]
            cursor = "(" + as_text(last)
    except rex.ResponseError as exc:
        raise ActionFailed(f"cannot claim from {source}: {exc}") from None
    return f"claimed {claimed} entries of {source} to {target}"


async def delete_consumer(client: aioredis.Redis, stream: str, group: str, consumer: str) -> str:
    """Delete ``consumer`` only if it holds no pending entries (checked atomically)."""
    try:
        deleted = await _DELETE_CONSUMER(client, [stream], [group, consumer, 0])
    except rex.ResponseError as exc:
        raise ActionFailed(f"cannot delete {consumer}: {exc}") from None
    if int(deleted) != 1:
        raise ActionFailed(f"did not delete {consumer}: it holds pending entries or is gone")
    return f"deleted consumer {consumer} of {stream}/{group}"
