"""A consumer group's pending entries, as ``streamworker pending`` and the dashboard show them.

Takes a sync redis-py client (bytes replies) and does no printing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from streamworker.errors import StreamworkerError
from streamworker.io.redisio import as_text


def _id_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


@dataclass(frozen=True, slots=True)
class ConsumerPending:
    """One consumer's share of a group's PEL."""

    name: str
    pending: int
    oldest_id: str | None
    oldest_idle_ms: int | None
    idle_ms: int | None


@dataclass(frozen=True, slots=True)
class PendingReport:
    """A group's pending entries: totals, and per consumer with the age of its oldest entry."""

    stream: str
    group: str
    pending: int
    min_id: str | None
    max_id: str | None
    consumers: list[ConsumerPending]
    lag: int | None
    last_delivered_id: str | None

    @property
    def oldest_age_ms(self) -> int | None:
        """Age of the oldest pending entry, from its id's timestamp."""
        return (
            None if self.min_id is None else max(0, int(time.time() * 1000) - _id_ms(self.min_id))
        )


def pending_report(client: redis.Redis, stream: str, group: str) -> PendingReport:
    """Summarise ``group``'s pending entries on ``stream``.

    Raises StreamworkerError when the stream or group does not exist.
    """
    try:
        summary = client.xpending(stream, group)
        groups = client.xinfo_groups(stream)
        idle_by_name = {
            as_text(c["name"], errors="replace"): int(c["idle"])
            for c in client.xinfo_consumers(stream, group)
        }
    except redis.ResponseError as exc:
        raise StreamworkerError(f"stream {stream!r} group {group!r}: {exc}") from None
    info = next((g for g in groups if as_text(g["name"], errors="replace") == group), {})
    consumers = []
    for row in summary.get("consumers") or []:
        name = as_text(row["name"], errors="replace")
        oldest = client.xpending_range(stream, group, "-", "+", 1, consumername=name)
        consumers.append(
            ConsumerPending(
                name=name,
                pending=int(row["pending"]),
                oldest_id=as_text(oldest[0]["message_id"], errors="replace") if oldest else None,
                oldest_idle_ms=int(oldest[0]["time_since_delivered"]) if oldest else None,
                idle_ms=idle_by_name.get(name),
            )
        )
    for name, idle in idle_by_name.items():
        if not any(c.name == name for c in consumers):
            consumers.append(ConsumerPending(name, 0, None, None, idle))
    lag = info.get("lag")
    last = info.get("last-delivered-id")
    return PendingReport(
        stream=stream,
        group=group,
        pending=int(summary["pending"]),
        min_id=as_text(summary["min"], errors="replace") if summary.get("min") else None,
        max_id=as_text(summary["max"], errors="replace") if summary.get("max") else None,
        consumers=sorted(consumers, key=lambda c: c.name),
        lag=None if lag is None else int(lag),
        last_delivered_id=None if last is None else as_text(last, errors="replace"),
    )
