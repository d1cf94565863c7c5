"""Late replies: a lease starts when the read is *sent*.

XREADGROUP (``>`` and backlog reads) and XAUTOCLAIM start an entry's idle time when the server
runs them. The reply may reach the worker much later (a slow network, a stalled proxy, a paused
process): if that is later than ``claim_idle_ms``, another consumer's reclaimer may have claimed,
processed and acked those entries meanwhile. So every read and claim records when it was sent;
a batch whose handlers would start later than :func:`late_after_s` after that (the reply came
late, or the batch waited for the one in hand, while a lease renewal may have failed) is checked
first (:func:`touch_owned`): entries still this consumer's get their idle time reset, the others
are dropped unhandled.

A blocking read counts from its send too: the server does not say when the entries arrived, so
on a quiet stream whose ``block_ms`` exceeds a quarter of ``claim_idle_ms`` a batch that came out
of a long wait is checked although its reply was prompt (one more round trip, on a quiet stream).

Why a quarter of ``claim_idle_ms``: :mod:`streamworker.core.timing` owns the figure
(:func:`~streamworker.core.timing.late_reply_ms`) and states the invariant it keeps with the renewal
period. Half (the limit the ``fresh`` rule uses) would leave 1/6 of ``claim_idle_ms`` for the
renewal's round trip, too little for a renewal that is itself delayed.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis

from streamworker.core.timing import late_reply_ms
from streamworker.io.redisio import LuaScript

_TOUCH = LuaScript("touch_owned")

OWNED = 0
"""Still pending for the caller; its idle time was reset."""
NOT_PENDING = 1
"""Acked meanwhile (by a consumer that had claimed it)."""
CLAIMED = 2
"""Pending for another consumer."""
DELETED = 3
"""Deleted from the stream while pending (now out of the PEL)."""


def late_after_s(claim_idle_ms: int) -> float:
    """Seconds after which a read or claim reply is late
    (:func:`streamworker.core.timing.late_reply_ms`)."""
    return late_reply_ms(claim_idle_ms) / 1000


def _sort_key(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


async def touch_owned(
    client: aioredis.Redis, stream: str, group: str, consumer: str, ids: Sequence[bytes]
) -> list[int]:
    """One status per id of ``ids`` (:data:`OWNED`, :data:`NOT_PENDING`, :data:`CLAIMED`,
    :data:`DELETED`), atomically resetting the idle time of the ones still ``consumer``'s.

    Counts no delivery. Raises ConnectionLost when Redis does not answer (nothing is known then:
    the caller must not run the handlers)."""
    if not ids:
        return []
    ordered = sorted(ids, key=_sort_key)
    reply = await _TOUCH(client, [stream], [group, consumer, ordered[0], ordered[-1], *ids])
    return [int(s) for s in reply]
