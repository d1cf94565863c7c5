"""Release on a graceful stop: entries a stopping consumer read but never started go back to the
group at once, and their read does not count as a delivery.

Without it, such entries (the rest of a batch whose handlers had not started when the stop came,
or a read sent behind the last batch's ack) stay in the stopping consumer's PEL until another
consumer's reclaimer finds them idle past ``claim_idle_ms``; and a restart loop would count one
delivery per start towards ``max_deliveries``.

Two paths, chosen once per server by capability (``COMMAND INFO XNACK``, never the version string):

* ``xnack`` (Redis 8.8+, the engine in 8.8+ mode): ``XNACK … SILENT`` takes one off the delivery
  counter and leaves the entry unowned with delivery time 0, so any claim takes it at once.
* ``xclaim`` (Redis 7.x, the emulation): ``XCLAIM <self> 0 id IDLE <idle> RETRYCOUNT <count-1>
  JUSTID`` keeps the entry in the caller's PEL but makes it look idle for ``idle`` ms with the
  counter it had before the read; the other consumers' reclaimers (XAUTOCLAIM with min-idle
  ``claim_idle_ms``) take it at their next pass.

Both run inside ``lua/release_unstarted.lua``, which first checks that each entry is still the
caller's (XNACK names no consumer). Only entries the caller knows it never started are released:
an entry whose handler ran, or may still run (an abandoned batch), is never released.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from streamworker.io.capabilities import ServerPaths, probe_server
from streamworker.io.redisio import LuaScript

_RELEASE = LuaScript("release_unstarted")

XNACK = "xnack"
"""Release path: the server has XNACK."""
XCLAIM = "xclaim"
"""Release path: the XCLAIM emulation (Redis 7.x, engine in 7.0 mode)."""

RELEASED_IDLE_FLOOR_MS = 24 * 3600 * 1000
"""The least idle time an emulated release gives an entry: past any sensible ``claim_idle_ms``
of the group's other consumers (a consumer with a longer one takes released entries late)."""


async def release_path(client: aioredis.Redis) -> str:
    """:data:`XNACK` when the server knows the XNACK command, else :data:`XCLAIM`, by
    :func:`~streamworker.io.capabilities.probe_server` (``COMMAND INFO``, never the version
    string). A server that refuses COMMAND (renamed or ACL-denied), or that cannot be asked now
    (down, or the reply lost: the worker starts anyway and its loops ride the outage), gets the
    emulation, which needs only 7.0 commands and works on every server."""
    return path_for(await probe_server(client))


def path_for(paths: ServerPaths) -> str:
    """The release path of a server offering ``paths``."""
    return XNACK if paths.xnack else XCLAIM


async def release_unstarted(
    client: aioredis.Redis,
    stream: str,
    group: str,
    consumer: str,
    ids: Iterable[bytes],
    *,
    path: str,
    claim_idle_ms: int,
) -> int:
    """Hand ``ids`` (entries ``consumer`` read and never started) back to ``group``; returns how
    many were released. Entries no longer ``consumer``'s (claimed or acked meanwhile) are left
    alone. Idempotent per entry on the XNACK path; on the emulation a second call takes one more
    off the counter, so call it once per read. Raises ConnectionLost when Redis does not answer.
    """
    todo = list(dict.fromkeys(ids))
    if not todo:
        return 0
    idle_ms = max(RELEASED_IDLE_FLOOR_MS, claim_idle_ms)
    reply = await _RELEASE(client, [stream], [group, consumer, path, idle_ms, *todo])
    return int(reply)


async def uncount_deliveries(
    client: aioredis.Redis, stream: str, group: str, consumer: str, ids: Iterable[bytes]
) -> int:
    """Take one off the delivery counter of each of ``ids`` that ``consumer`` still owns, and
    keep it there with its idle time reset: a delivery that must not count (the handler was
    rate-limited, or paused by a rate limit, and the entry waits for its retry here). The
    emulated release with idle 0, on every server (XNACK would take the entry from its owner).
    Returns how many were handed back; raises ConnectionLost when Redis does not answer."""
    todo = list(dict.fromkeys(ids))
    if not todo:
        return 0
    reply = await _RELEASE(client, [stream], [group, consumer, XCLAIM, 0, *todo])
    return int(reply)
