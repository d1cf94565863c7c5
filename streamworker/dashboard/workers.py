"""Workers: the heartbeat records of live worker processes, and the recently dead ones.

Every worker process keeps, per (stream, group) it consumes, a hash at
:func:`streamworker.io.keys.consumer_name_key` with a time to live (see
:mod:`streamworker.runtime.names`): who it is (host, pid, version, handlers, started at) and how
it does (last batch at, in flight, processed, failed). A graceful stop deletes it; a killed
worker's record expires. Redis therefore forgets the dead, and the dashboard remembers what it saw:
:class:`WorkerMemory` keeps the last record of every consumer for an hour, so a worker that
vanished shows with its last heartbeat, and whether it stopped (the record went before its time
to live ran out) or was lost (it expired). Consumers that the group lists but that have no record
at all are shown too ("not running": a worker killed before the dashboard first looked, e.g. before
a dashboard restart), with what Redis itself holds of them: how long ago they last read
(XINFO CONSUMERS), so a restarted dashboard shows the same picture as the one before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.dashboard.data import NotFound, now_ms, text
from streamworker.io.keys import consumer_name_key

REMEMBER_MS = 3600 * 1000
MAX_REMEMBERED = 10_000
# A record gone this long before its time to live would have run out was deleted, not expired.
_EARLY_MS = 1000


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One worker's record in one (stream, group); numbers are 0 when the record lacks them."""

    stream: str
    group: str
    consumer: str
    token: str
    host: str
    pid: int
    version: str
    handlers: list[str]
    started_at_ms: int
    beat_at_ms: int
    last_batch_at_ms: int
    in_flight: int
    processed: int
    failed: int
    ttl_ms: int | None
    read_at_ms: int = 0
    claim_idle_ms: int | None = None  # the handler's, in records of workers that write it

    @property
    def late(self) -> bool:
        """Whether the heartbeat is overdue: a worker renews its record every third of its time
        to live, so a record older than half of it (``beat_at`` to expiry) has missed a renewal;
        the process is probably gone, and the record will expire."""
        if self.ttl_ms is None or not self.beat_at_ms or not self.read_at_ms:
            return False
        age = self.read_at_ms - self.beat_at_ms
        return age > (age + self.ttl_ms) / 2


def _int(raw: dict[str, str], name: str) -> int:
    try:
        return int(raw.get(name) or 0)
    except ValueError:
        return 0


def parse_heartbeat(
    stream: str, group: str, consumer: str, raw: Mapping[Any, Any], ttl_ms: int | None
) -> Heartbeat:
    """A record as read by HGETALL (bytes), fields the runtime did not write left empty."""
    f = {text(k): text(v) for k, v in raw.items()}
    return Heartbeat(
        stream=stream,
        group=group,
        consumer=f.get("consumer") or consumer,
        token=f.get("token", ""),
        host=f.get("host", ""),
        pid=_int(f, "pid"),
        version=f.get("version", ""),
        handlers=[h for h in f.get("handlers", "").split(",") if h],
        started_at_ms=_int(f, "started_at_ms"),
        beat_at_ms=_int(f, "beat_at_ms"),
        last_batch_at_ms=_int(f, "last_batch_at_ms"),
        in_flight=_int(f, "in_flight"),
        processed=_int(f, "processed"),
        failed=_int(f, "failed"),
        ttl_ms=ttl_ms if ttl_ms is not None and ttl_ms >= 0 else None,
        read_at_ms=now_ms(),
        claim_idle_ms=_int(f, "claim_idle_ms") or None,
    )


async def read_heartbeat(
    client: aioredis.Redis, stream: str, group: str, consumer: str
) -> Heartbeat | None:
    """The live record of ``consumer`` in (stream, group), or None."""
    key = consumer_name_key(stream, group, consumer)
    raw = await client.hgetall(key)
    if not raw:
        return None
    ttl = int(await client.pttl(key))
    return parse_heartbeat(stream, group, consumer, raw, ttl)


@dataclass
class _Seen:
    beat: Heartbeat
    seen_at_ms: int
    expires_at_ms: int | None
    missing_since_ms: int | None = None


class WorkerMemory:
    """The last record the dashboard saw of each consumer, for ``remember_ms``; bounded to
    ``limit`` consumers (the least recently seen is forgotten first). Use from one event loop."""

    def __init__(self, remember_ms: int = REMEMBER_MS, limit: int = MAX_REMEMBERED) -> None:
        self.remember_ms = remember_ms
        self.limit = limit
        self._seen: OrderedDict[tuple[str, str, str], _Seen] = OrderedDict()

    def saw(self, beat: Heartbeat, at_ms: int | None = None) -> None:
        """Remember ``beat`` as alive at ``at_ms``."""
        now = now_ms() if at_ms is None else at_ms
        key = (beat.stream, beat.group, beat.consumer)
        expires = None if beat.ttl_ms is None else now + beat.ttl_ms
        self._seen[key] = _Seen(beat, now, expires)
        self._seen.move_to_end(key)
        while len(self._seen) > self.limit:
            self._seen.popitem(last=False)

    def missing(self, stream: str, group: str, consumer: str, at_ms: int | None = None) -> None:
        """Note that the record is gone (first noticed at ``at_ms``)."""
        seen = self._seen.get((stream, group, consumer))
        if seen is not None and seen.missing_since_ms is None:
            seen.missing_since_ms = now_ms() if at_ms is None else at_ms

    def recall(self, stream: str, group: str, consumer: str) -> _Seen | None:
        """What was last seen of this consumer (within ``remember_ms``)."""
        seen = self._seen.get((stream, group, consumer))
        if seen is None or now_ms() - seen.seen_at_ms > self.remember_ms:
            return None
        return seen

    def of_group(self, stream: str, group: str) -> list[_Seen]:
        """Everything remembered of (stream, group), forgetting what is too old."""
        cutoff = now_ms() - self.remember_ms
        for key in [k for k, v in self._seen.items() if v.seen_at_ms < cutoff]:
            del self._seen[key]
        return [v for (s, g, _), v in self._seen.items() if s == stream and g == group]


LIVE, STOPPED, LOST, UNKNOWN = "live", "stopped", "lost", "not running"


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A consumer of a group as the workers page shows it.

    ``state``: ``live`` (its record is there); ``stopped`` (the record was deleted before its time
    to live ran out: a graceful stop); ``lost`` (the record expired: the process was killed or cut
    off); ``not running`` (the group lists the consumer, no record is there and the dashboard saw
    none: dead before it looked, e.g. before a dashboard restart). ``beat`` is the live record, or
    the last one seen. ``in_group`` is False for a consumer the group no longer lists (deleted
    after it stopped). ``active_ms`` is what Redis itself still holds of the consumer, whatever
    the dashboard saw: how long ago it last read or claimed (XINFO CONSUMERS ``inactive``, Redis
    7.2+), else last interacted with Redis (``idle``)."""

    stream: str
    group: str
    consumer: str
    state: str
    pending: int
    idle_ms: int | None
    beat: Heartbeat | None
    last_seen_ms: int | None
    in_group: bool
    active_ms: int | None = None


def _state_of(seen: _Seen) -> str:
    gone = seen.missing_since_ms
    if (
        gone is not None
        and seen.expires_at_ms is not None
        and gone < seen.expires_at_ms - _EARLY_MS
    ):
        return STOPPED
    return LOST


async def group_consumers(
    client: aioredis.Redis, stream: str, group: str, memory: WorkerMemory
) -> list[ConsumerState]:
    """Every consumer of (stream, group) with its record, and the remembered ones it no longer
    lists; updates ``memory``."""
    try:
        rows = await client.xinfo_consumers(stream, group)
    except rex.ResponseError as exc:
        raise NotFound(f"stream {stream!r} group {group!r}: {exc}") from None
    out: list[ConsumerState] = []
    listed = set()
    for raw in rows:
        row = {text(k): v for k, v in raw.items()}
        name = text(row.get("name"))
        listed.add(name)
        pending = int(row.get("pending") or 0)
        idle = row.get("idle")
        idle_ms = None if idle is None else int(idle)
        inactive = row.get("inactive")  # Redis 7.2+: -1 for a consumer that never read
        active_ms = int(inactive) if inactive is not None and int(inactive) >= 0 else idle_ms
        beat = await read_heartbeat(client, stream, group, name)
        if beat is not None:
            memory.saw(beat)
            out.append(
                ConsumerState(
                    stream, group, name, LIVE, pending, idle_ms, beat, now_ms(), True, active_ms
                )
            )
            continue
        memory.missing(stream, group, name)
        seen = memory.recall(stream, group, name)
        if seen is None:
            out.append(
                ConsumerState(
                    stream, group, name, UNKNOWN, pending, idle_ms, None, None, True, active_ms
                )
            )
        else:
            out.append(
                ConsumerState(
                    stream,
                    group,
                    name,
                    _state_of(seen),
                    pending,
                    idle_ms,
                    seen.beat,
                    seen.seen_at_ms,
                    True,
                    active_ms,
                )
            )
    for seen in memory.of_group(stream, group):
        name = seen.beat.consumer
        if name in listed:
            continue
        # Deleted from the group (by the reclaimer, once it held nothing): it may still be running
        # only if its record is there, which a consumer that reads would have re-created.
        beat = await read_heartbeat(client, stream, group, name)
        if beat is not None:
            memory.saw(beat)
            out.append(ConsumerState(stream, group, name, LIVE, 0, None, beat, now_ms(), False))
            continue
        memory.missing(stream, group, name)
        out.append(
            ConsumerState(
                stream, group, name, _state_of(seen), 0, None, seen.beat, seen.seen_at_ms, False
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    """A live worker process (one heartbeat token) and what it holds in each group: ``beat`` is
    its newest record (every record of one process carries the same counters), ``handlers``
    those of all its records."""

    token: str
    beat: Heartbeat
    handlers: list[str]
    consumers: list[ConsumerState]

    @property
    def pending(self) -> int:
        """Entries this process's consumer names hold, over all its groups."""
        return sum(c.pending for c in self.consumers)


def processes(states: Sequence[ConsumerState]) -> list[WorkerProcess]:
    """Group the live consumers by process (their record's token), newest heartbeat first."""
    by_token: dict[str, list[ConsumerState]] = {}
    for c in states:
        if c.state == LIVE and c.beat is not None:
            by_token.setdefault(c.beat.token or f"{c.beat.host}:{c.beat.pid}", []).append(c)
    out = []
    for token, cs in by_token.items():
        beats = [c.beat for c in cs if c.beat is not None]
        out.append(
            WorkerProcess(
                token=token,
                beat=max(beats, key=lambda b: b.beat_at_ms),
                handlers=sorted({h for b in beats for h in b.handlers}),
                consumers=sorted(cs, key=lambda c: (c.stream, c.group, c.consumer)),
            )
        )
    return sorted(out, key=lambda p: (p.beat.host, p.beat.pid, p.token))


def dead_or_unknown(states: Sequence[ConsumerState]) -> list[ConsumerState]:
    """The consumers that are not live, those holding the most entries first."""
    rest = [c for c in states if c.state != LIVE]
    return sorted(rest, key=lambda c: (-c.pending, c.stream, c.group, c.consumer))
