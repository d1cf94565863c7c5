"""The overview: per stream and group, how much work is left and whether that is a problem.

Work left is ``lag + pending`` (KEDA's two signals added: lag alone ignores a stuck PEL, the PEL
alone ignores the backlog nobody has read yet). Each row is graded against :class:`Thresholds`
(warn, critical) and the rows come worst first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.dashboard import data
from streamworker.dashboard.history import History, Rates
from streamworker.errors import ConfigError
from streamworker.io.keys import consumer_name_key

OK, WARN, CRIT = 0, 1, 2
LEVELS = ("ok", "warn", "crit")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """(warn, critical) levels: a value at or above ``warn`` is amber, at or above ``crit`` red.

    ``work_left`` is entries (lag + pending); ``oldest_pending_s`` how many seconds ago the
    longest-waiting pending entry was delivered (XPENDING's idle time); ``dead_letters`` the length of the stream's dead-letter stream.
    """

    work_left: tuple[int, int] = (1000, 10_000)
    oldest_pending_s: tuple[int, int] = (60, 600)
    dead_letters: tuple[int, int] = (1, 100)

    @staticmethod
    def parse(spec: str, base: Thresholds | None = None) -> Thresholds:
        """``"work_left=1000/10000,oldest_pending_s=60/600,dead_letters=1/100"`` (any subset,
        the rest from ``base`` or the defaults). Raises ConfigError with the reason."""
        values: dict[str, tuple[int, int]] = {
            f.name: getattr(base or Thresholds(), f.name) for f in fields(Thresholds)
        }
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, levels = part.partition("=")
            name = name.strip()
            if not sep or name not in values:
                raise ConfigError(
                    f"bad threshold {part!r}: expected NAME=WARN/CRIT with NAME one of "
                    + ", ".join(values)
                )
            warn, slash, crit = levels.partition("/")
            try:
                pair = (int(warn), int(crit))
            except ValueError:
                raise ConfigError(
                    f"bad threshold {part!r}: WARN and CRIT must be integers"
                ) from None
            if not slash or pair[0] < 0 or pair[1] < pair[0]:
                raise ConfigError(f"bad threshold {part!r}: need 0 <= WARN <= CRIT")
            values[name] = pair
        return Thresholds(**values)

    def with_query(self, query: Any) -> Thresholds:
        """These thresholds with any ``NAME_warn``/``NAME_crit`` query parameters applied (bad
        numbers raise ConfigError)."""
        parts = []
        for f in fields(Thresholds):
            warn = query.get(f"{f.name}_warn")
            crit = query.get(f"{f.name}_crit")
            if warn or crit:
                cur = getattr(self, f.name)
                parts.append(f"{f.name}={warn or cur[0]}/{crit or cur[1]}")
        return Thresholds.parse(",".join(parts), self) if parts else self

    def spec(self) -> str:
        """The thresholds in :meth:`parse`'s format."""
        return ",".join(
            f"{f.name}={v[0]}/{v[1]}" for f in fields(self) for v in [getattr(self, f.name)]
        )


def grade(value: int | float | None, levels: tuple[int, int]) -> int:
    """OK, WARN or CRIT for ``value`` against (warn, crit); None is OK (nothing to judge)."""
    if value is None:
        return OK
    if value >= levels[1]:
        return CRIT
    if value >= levels[0] and value > 0:
        return WARN
    return OK


@dataclass(frozen=True, slots=True)
class Health:
    """One group (or a stream without groups, ``group`` None) as the overview shows it.

    ``live_consumers`` counts the consumers whose worker is running (its name record, renewed
    every few seconds, is in Redis); ``oldest_pending_idle_ms`` is how long ago the longest-waiting
    pending entry was delivered (XPENDING's idle time: what a stuck entry shows, where a busy
    group's old entries are redelivered and fresh); ``problems`` says why a row is critical
    beyond its thresholds."""

    stream: str
    group: str | None
    length: int
    lag: int | None
    pending: int
    consumers: int
    live_consumers: int
    oldest_pending_id: str | None
    oldest_pending_idle_ms: int | None
    dlq: str
    dead_letters: int
    rates: Rates | None
    levels: dict[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def work_left(self) -> int | None:
        """lag + pending; None when Redis cannot tell the lag."""
        return None if self.lag is None else self.lag + self.pending

    @property
    def work_left_bound(self) -> int:
        """lag + pending, or where Redis cannot tell the lag its upper bound: the stream's length
        (no more entries can wait for delivery than the stream holds) + pending."""
        work = self.work_left
        return work if work is not None else self.length + self.pending

    @property
    def level(self) -> int:
        """The worst of the row's grades."""
        return max(self.levels.values(), default=OK)

    @property
    def level_name(self) -> str:
        return LEVELS[self.level]

    def sort_key(self) -> tuple[int, int, int, str, str]:
        """Worst first: grade, then work left (its bound where the lag is unknown), then how
        long the longest-waiting pending entry has waited since its delivery."""
        return (
            -self.level,
            -(self.work_left_bound if self.group is not None else 0),
            -(self.oldest_pending_idle_ms or 0),
            self.stream,
            self.group or "",
        )


async def _dlq_length(client: aioredis.Redis, dlq: str) -> int:
    try:
        return int(await client.xlen(dlq))
    except rex.ResponseError:  # a key of another type under that name
        return 0


@dataclass(frozen=True, slots=True)
class _Consumers:
    total: int
    live: int
    oldest_id: str | None
    oldest_idle_ms: int | None


async def _consumers(client: aioredis.Redis, stream: str, group: str) -> _Consumers:
    """The group's consumers: how many, how many live (a name record in Redis), and the
    pending entry delivered longest ago (each holder's oldest entry, XPENDING … 1 per holder)."""
    rows = await client.xinfo_consumers(stream, group)
    live = 0
    oldest: tuple[int, str] | None = None
    for raw in rows:
        row = {data.text(k): v for k, v in raw.items()}
        name = data.text(row.get("name"))
        if await client.exists(consumer_name_key(stream, group, name)):
            live += 1
        if int(row.get("pending") or 0):
            first = await client.xpending_range(stream, group, "-", "+", 1, consumername=name)
            if first:
                idle = int(first[0]["time_since_delivered"])
                if oldest is None or idle > oldest[0]:
                    oldest = (idle, data.text(first[0]["message_id"]))
    return _Consumers(
        len(rows),
        live,
        None if oldest is None else oldest[1],
        None if oldest is None else oldest[0],
    )


def _problems(row: Health) -> tuple[str, ...]:
    """Why a group with work left is stuck whatever the thresholds: nobody is there to do it, or
    entries come in and none is done."""
    if row.group is None or row.work_left_bound <= 0:
        return ()
    out = []
    if row.live_consumers == 0:
        out.append("no live consumer")
    r = row.rates
    if r is not None and r.added and r.done == 0:
        out.append("nothing done while entries come in")
    return tuple(out)


async def stream_health(
    client: aioredis.Redis, stream: str, history: History, thresholds: Thresholds
) -> list[Health]:
    """The rows of one stream: one per group, or one for the stream when it has none."""
    summary = await data.stream_summary(client, stream)
    groups = await data.list_groups(client, stream)
    dlq = data.dlq_of(stream)
    dead = await _dlq_length(client, dlq)
    rows: list[Health] = []
    targets: list[data.GroupSummary | None] = list(groups) if groups else [None]
    for g in targets:
        held = _Consumers(0, 0, None, None)
        lag = None
        if g is not None:
            try:
                held = await _consumers(client, stream, g.name)
            except rex.ResponseError:  # the group went away meanwhile
                continue
            lag = g.lag
            if lag is None and g.last_delivered_id == summary.last_generated_id:
                lag = 0  # delivered up to the newest entry: nothing waits, deletions or not
        row = Health(
            stream=stream,
            group=None if g is None else g.name,
            length=summary.length,
            lag=lag,
            pending=0 if g is None else g.pending,
            consumers=held.total,
            live_consumers=held.live,
            oldest_pending_id=held.oldest_id,
            oldest_pending_idle_ms=held.oldest_idle_ms,
            dlq=dlq,
            dead_letters=dead,
            rates=history.recent_rates(stream, None if g is None else g.name),
        )
        problems = _problems(row)
        idle = row.oldest_pending_idle_ms
        levels = {
            "work_left": grade(row.work_left_bound if g is not None else 0, thresholds.work_left),
            "oldest_pending": grade(
                None if idle is None else idle / 1000, thresholds.oldest_pending_s
            ),
            "dead_letters": grade(dead, thresholds.dead_letters),
            "stuck": CRIT if problems else OK,
        }
        rows.append(replace(row, levels=levels, problems=problems))
    return rows


async def overview(
    client: aioredis.Redis, history: History, thresholds: Thresholds
) -> tuple[list[Health], bool]:
    """Every stream's rows (dead-letter streams are shown with their stream, not as rows), worst
    first; and whether the stream list was cut at ``data.MAX_STREAMS``."""
    names, cut = await data.list_stream_names(client)
    rows: list[Health] = []
    for name in names:
        if name.endswith(":dlq"):
            continue
        try:
            rows += await stream_health(client, name, history, thresholds)
        except data.NotFound:  # deleted between SCAN and XINFO
            continue
    return sorted(rows, key=Health.sort_key), cut
