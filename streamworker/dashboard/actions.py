"""The four operator actions: replay or purge a dead letter, claim a consumer's entries to another
consumer, delete an empty consumer. Each returns a one-line outcome for the page and the log.

Replay goes through :mod:`streamworker.ops.dead_letters` (the same code as ``streamworker dlq replay``),
with a sync client in a worker thread; purge through ``purge_dead_letters.lua``, which deletes an
entry only if it carries the dead-letter provenance (a live stream named by mistake loses
nothing); deleting a consumer uses the runtime's
``delete_consumer.lua``, which deletes only a consumer that holds nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.errors import StreamworkerError
from streamworker.io.keys import consumer_name_key
from streamworker.io.redisio import LuaScript, as_text
from streamworker.ops import dead_letters

_DELETE_CONSUMER = LuaScript("delete_consumer")
# Deletes only entries that carry the dead-letter provenance: {deleted, refused, gone}.
PURGE_DEAD_LETTERS = LuaScript("purge_dead_letters")
_CLAIM_PAGE = 500


class ActionFailed(StreamworkerError):
    """An action could not be done as asked (nothing was changed by it)."""


async def replay_dead_letter(sync_client: redis.Redis, dlq: str, entry_id: str) -> str:
    """Move one dead letter back to its stream with a fresh id (atomic; a repeat is a no-op)."""
    try:
        result = await asyncio.to_thread(
            dead_letters.replay_dead_letters, sync_client, dlq, [entry_id]
        )
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


# App.handler's default claim_idle_ms: the claim's minimum idle time where the handler's is
# not known (a worker that does not write it in its record).
DEFAULT_CLAIM_IDLE_MS = 60_000
# The confirmation counts at most this many of the entries a claim would move.
CLAIM_COUNT_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class ClaimPreview:
    """What a claim of ``source``'s entries to ``target`` would do, for its confirmation.

    ``moving`` is how many of the source's pending entries are idle at least ``min_idle_ms``
    (``moving_partial``: counting stopped at CLAIM_COUNT_LIMIT). ``min_idle_from`` says where
    the default minimum idle time came from. ``live`` lists the group's live consumers (their
    worker's name record is in Redis), the targets to offer."""

    source_pending: int
    min_idle_ms: int
    min_idle_from: str
    moving: int
    moving_partial: bool
    source_live: bool
    target_exists: bool
    target_live: bool
    live: list[str]


async def _listed(client: aioredis.Redis, stream: str, group: str) -> dict[str, int]:
    """The group's consumers and their pending counts (XINFO CONSUMERS)."""
    rows = await client.xinfo_consumers(stream, group)
    out = {}
    for raw in rows:
        row = {as_text(k): v for k, v in raw.items()}
        out[as_text(row.get("name"), errors="replace")] = int(row.get("pending") or 0)
    return out


async def _is_live(client: aioredis.Redis, stream: str, group: str, consumer: str) -> bool:
    return bool(await client.exists(consumer_name_key(stream, group, consumer)))


async def _handler_claim_idle_ms(
    client: aioredis.Redis, stream: str, group: str, source: str, live: list[str]
) -> int | None:
    """The handler's claim_idle_ms from the source's record, else a live consumer's of the group
    (the same handler serves a group), as written by the workers."""
    for name in [source, *live]:
        raw = await client.hget(consumer_name_key(stream, group, name), "claim_idle_ms")
        text = as_text(raw, errors="replace") if raw is not None else ""
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


async def claim_preview(
    client: aioredis.Redis,
    stream: str,
    group: str,
    source: str,
    target: str,
    min_idle_ms: int | None,
    remembered_claim_idle_ms: int | None = None,
) -> ClaimPreview:
    """Count what a claim would move and check both ends; ``min_idle_ms`` None means the
    handler's claim_idle_ms (from the records, else ``remembered_claim_idle_ms``, the last record
    the dashboard saw of the source), else DEFAULT_CLAIM_IDLE_MS."""
    try:
        listed = await _listed(client, stream, group)
        live = sorted([n for n in listed if await _is_live(client, stream, group, n)])
        if min_idle_ms is None:
            known = await _handler_claim_idle_ms(client, stream, group, source, live)
            known = known or remembered_claim_idle_ms
            if known:
                min_idle_ms, origin = known, "the handler's claim_idle_ms"
            else:
                min_idle_ms, origin = DEFAULT_CLAIM_IDLE_MS, "the default claim_idle_ms"
        else:
            origin = "set on this page"
        moving, cursor, partial = 0, "-", False
        while True:
            rows = await client.xpending_range(
                stream, group, cursor, "+", _CLAIM_PAGE, consumername=source, idle=min_idle_ms
            )
            moving += len(rows)
            if len(rows) < _CLAIM_PAGE:
                break
            if moving >= CLAIM_COUNT_LIMIT:
                partial = True
                break
            cursor = "(" + as_text(rows[-1]["message_id"])
    except rex.ResponseError as exc:
        raise ActionFailed(f"cannot look at {stream}/{group}: {exc}") from None
    return ClaimPreview(
        source_pending=listed.get(source, 0),
        min_idle_ms=min_idle_ms,
        min_idle_from=origin,
        moving=moving,
        moving_partial=partial,
        source_live=source in live,
        target_exists=bool(target) and target in listed,
        target_live=bool(target) and target in live,
        live=[n for n in live if n != source],
    )


async def claim_entries(
    client: aioredis.Redis,
    stream: str,
    group: str,
    source: str,
    target: str,
    min_idle_ms: int,
    *,
    create_target: bool = False,
) -> str:
    """Give ``source``'s pending entries idle for at least ``min_idle_ms`` to ``target``.

    XCLAIM re-checks the idle time server-side, so an entry its owner touched meanwhile stays
    with it. JUSTID: the claim is not a delivery; ``target`` counts one when it reads the entry.
    A ``target`` the group does not list is created by the claim: only with ``create_target``
    (a typo would otherwise park the entries on a consumer no worker reads as).
    """
    if not target or target == source:
        raise ActionFailed("name another consumer to claim the entries to")
    claimed = 0
    cursor = "-"
    try:
        if not create_target and target not in await _listed(client, stream, group):
            raise ActionFailed(
                f"refused: consumer {target!r} does not exist in {stream}/{group}; claiming "
                "would create it and no worker reads as it yet: confirm creating it, or pick "
                "a live consumer"
            )
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
