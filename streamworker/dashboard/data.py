"""What the dashboard shows, read from Redis: streams, groups, consumers, PELs and dead letters.

Every function takes an asyncio redis-py client (bytes replies, from
:func:`streamworker.io.redisio.open_redis`, so ``engine://`` works too) and returns plain dataclasses;
nothing here renders HTML. Lists that can be long (stream entries, PELs, dead letters) are read one
page at a time with COUNT and an exclusive cursor, so no request reads more than ``MAX_PAGE_SIZE``
entries whatever the size of the stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.io.keys import dead_letter_stream, delayed_key
from streamworker.ops import dead_letters, pending

MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50
# Values longer than this are cut on list pages; the entry page shows them whole.
PREVIEW_CHARS = 200
MAX_STREAMS = 1000

T = TypeVar("T")


class NotFound(LookupError):
    """The stream, group or entry the request names does not exist."""


class NotDeadLetters(ValueError):
    """The key or entry a dead-letter page or action names is not a dead letter (it carries no
    streamworker dead-letter provenance): shown and refused, never acted on."""


def now_ms() -> int:
    """Wall-clock milliseconds (stream ids carry the same clock)."""
    return int(time.time() * 1000)


def text(value: Any) -> str:
    """A reply value as text (bytes decoded as UTF-8, undecodable bytes replaced)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def id_ms(entry_id: str) -> int | None:
    """The millisecond timestamp of a stream id, or None for something that is not an id."""
    head = entry_id.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def age_ms(entry_id: str | None, now: int | None = None) -> int | None:
    """How long ago the entry ``entry_id`` was added, from its id."""
    if entry_id is None:
        return None
    ms = id_ms(entry_id)
    if ms is None or ms == 0:
        return None
    return max(0, (now if now is not None else now_ms()) - ms)


def clamp_count(count: int | None) -> int:
    """A page size within 1..MAX_PAGE_SIZE (DEFAULT_PAGE_SIZE when not given)."""
    if count is None:
        return DEFAULT_PAGE_SIZE
    return max(1, min(MAX_PAGE_SIZE, count))


# --- field values --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Value:
    """A field name or value made safe to show: text, or hex for binary data; maybe cut short.

    ``shown`` is plain text; templates escape it (autoescaping), so a value holding markup shows
    the markup as text.
    """

    shown: str
    binary: bool
    truncated: bool
    size: int  # bytes


def _is_text(data: bytes) -> str | None:
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any((ord(ch) < 32 and ch not in "\t\n\r") or ord(ch) == 127 for ch in decoded):
        return None
    return decoded


def show_value(raw: Any, limit: int | None = PREVIEW_CHARS) -> Value:
    """Render ``raw`` (bytes or str) for display: UTF-8 text as is, anything else as hex.

    With a ``limit``, text longer than ``limit`` characters (hex: ``limit // 2`` bytes) is cut.
    """
    data = raw if isinstance(raw, bytes) else str(raw).encode("utf-8", "surrogateescape")
    decoded = _is_text(data)
    if decoded is not None:
        if limit is not None and len(decoded) > limit:
            return Value(decoded[:limit], False, True, len(data))
        return Value(decoded, False, False, len(data))
    if limit is not None and len(data) > limit // 2:
        return Value(data[: limit // 2].hex(" "), True, True, len(data))
    return Value(data.hex(" "), True, False, len(data))


def _pairs(raw: Any) -> list[tuple[Any, Any]]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        return list(raw.items())
    return list(zip(raw[::2], raw[1::2], strict=True))


def show_fields(raw: Any, limit: int | None = PREVIEW_CHARS) -> list[tuple[Value, Value]]:
    """An entry's fields, in stream order, as (name, value) pairs ready to show."""
    return [(show_value(k, limit), show_value(v, limit)) for k, v in _pairs(raw)]


# --- streams -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """One stream: XINFO STREAM's counters, the age of its first and last entries, its memory."""

    name: str
    length: int
    first_id: str | None
    last_id: str | None
    first_age_ms: int | None
    last_age_ms: int | None
    last_generated_id: str | None
    groups: int
    memory_bytes: int | None
    is_dead_letter: bool
    delayed: int = 0
    """Entries published with a delay that have not entered the stream yet (ZCARD of its
    delayed set, :func:`streamworker.io.keys.delayed_key`)."""


def _info_map(reply: Any) -> dict[str, Any]:
    if isinstance(reply, dict):
        return {text(k): v for k, v in reply.items()}
    return {text(k): v for k, v in _pairs(reply)}


def _entry_id(entry: Any) -> str | None:
    # XINFO STREAM's first-entry/last-entry: redis-py parses them to (id, fields) or None.
    if not entry:
        return None
    first = entry[0] if isinstance(entry, list | tuple) else entry
    return text(first) if first else None


async def list_stream_names(
    client: aioredis.Redis, limit: int = MAX_STREAMS
) -> tuple[list[str], bool]:
    """Names of the stream keys (SCAN TYPE stream), sorted; and whether ``limit`` cut the list.

    On Redis Cluster each master has its own keyspace and SCAN cursor: redis-py's cluster
    ``scan_iter`` walks every master to the end of its own cursor, a plain server's walks one."""
    names: set[str] = set()
    async for key in client.scan_iter(count=500, _type="stream"):
        names.add(text(key))
        if len(names) > limit:
            return sorted(names)[:limit], True
    return sorted(names), False


async def stream_summary(client: aioredis.Redis, name: str) -> StreamSummary:
    """XINFO STREAM of ``name`` with MEMORY USAGE (None where the server lacks the command)."""
    try:
        info = _info_map(await client.xinfo_stream(name))
    except rex.ResponseError as exc:
        raise NotFound(f"no stream {name!r}: {exc}") from None
    try:
        memory = await client.memory_usage(name)
    except rex.ResponseError:
        memory = None
    delayed = int(await client.zcard(delayed_key(name)))
    first = _entry_id(info.get("first-entry"))
    last = _entry_id(info.get("last-entry"))
    now = now_ms()
    last_generated = info.get("last-generated-id")
    return StreamSummary(
        name=name,
        length=int(info.get("length") or 0),
        first_id=first,
        last_id=last,
        first_age_ms=age_ms(first, now),
        last_age_ms=age_ms(last, now),
        last_generated_id=text(last_generated) if last_generated is not None else None,
        groups=int(info.get("groups") or 0),
        memory_bytes=None if memory is None else int(memory),
        is_dead_letter=name.endswith(":dlq"),
        delayed=delayed,
    )


async def list_streams(client: aioredis.Redis) -> tuple[list[StreamSummary], bool]:
    """Every stream's summary (at most MAX_STREAMS); and whether the list was cut."""
    names, cut = await list_stream_names(client)
    out = []
    for name in names:
        try:
            out.append(await stream_summary(client, name))
        except NotFound:  # deleted between SCAN and XINFO
            continue
    return out, cut


# --- groups --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One consumer group (XINFO GROUPS): lag is None when Redis cannot tell (after XDEL/XTRIM)."""

    stream: str
    name: str
    consumers: int
    pending: int
    last_delivered_id: str
    entries_read: int | None
    lag: int | None


async def list_groups(client: aioredis.Redis, stream: str) -> list[GroupSummary]:
    """The groups of ``stream``, by name."""
    try:
        rows = await client.xinfo_groups(stream)
    except rex.ResponseError as exc:
        raise NotFound(f"no stream {stream!r}: {exc}") from None
    out = []
    for raw in rows:
        row = _info_map(raw)
        lag = row.get("lag")
        read = row.get("entries-read")
        out.append(
            GroupSummary(
                stream=stream,
                name=text(row.get("name")),
                consumers=int(row.get("consumers") or 0),
                pending=int(row.get("pending") or 0),
                last_delivered_id=text(row.get("last-delivered-id")),
                entries_read=None if read is None else int(read),
                lag=None if lag is None else int(lag),
            )
        )
    return sorted(out, key=lambda g: g.name)


async def get_group(client: aioredis.Redis, stream: str, group: str) -> GroupSummary:
    """One group of ``stream``; NotFound when either is missing."""
    for g in await list_groups(client, stream):
        if g.name == group:
            return g
    raise NotFound(f"stream {stream!r} has no group {group!r}")


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    """A consumer of a group: its pending count, idle time, and the age of its oldest entry."""

    name: str
    pending: int
    idle_ms: int | None
    oldest_id: str | None
    oldest_age_ms: int | None  # since the oldest pending entry was added to the stream
    oldest_idle_ms: int | None  # since the oldest pending entry was last delivered


def consumers_from_report(report: pending.PendingReport) -> list[ConsumerRow]:
    """Consumers of :func:`streamworker.ops.pending.pending_report`'s report, as the dashboard shows them."""
    now = now_ms()
    return [
        ConsumerRow(
            name=c.name,
            pending=c.pending,
            idle_ms=c.idle_ms,
            oldest_id=c.oldest_id,
            oldest_age_ms=age_ms(c.oldest_id, now),
            oldest_idle_ms=c.oldest_idle_ms,
        )
        for c in report.consumers
    ]


# --- pages of entries ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingRow:
    """One PEL entry (XPENDING extended form)."""

    id: str
    consumer: str
    idle_ms: int
    deliveries: int
    age_ms: int | None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a long list and the cursor of the next one (None on the last page)."""

    items: list[T]
    next_cursor: str | None
    count: int


def _after(cursor: str | None) -> str:
    return "-" if not cursor else "(" + cursor


def _before(cursor: str | None) -> str:
    return "+" if not cursor else "(" + cursor


async def pending_page(
    client: aioredis.Redis,
    stream: str,
    group: str,
    *,
    after: str | None = None,
    count: int | None = None,
    consumer: str | None = None,
) -> Page[PendingRow]:
    """PEL entries of ``group`` with ids above ``after``, oldest first (optionally one consumer's)."""
    size = clamp_count(count)
    try:
        rows = await client.xpending_range(
            stream, group, _after(after), "+", size + 1, consumername=consumer or None
        )
    except rex.ResponseError as exc:
        raise NotFound(f"stream {stream!r} group {group!r}: {exc}") from None
    now = now_ms()
    items = [
        PendingRow(
            id=text(r["message_id"]),
            consumer=text(r["consumer"]),
            idle_ms=int(r["time_since_delivered"]),
            deliveries=int(r["times_delivered"]),
            age_ms=age_ms(text(r["message_id"]), now),
        )
        for r in rows[:size]
    ]
    more = len(rows) > size
    return Page(items, items[-1].id if more and items else None, size)


@dataclass(frozen=True, slots=True)
class EntryRow:
    """A stream entry ready to show."""

    id: str
    age_ms: int | None
    fields: list[tuple[Value, Value]]


async def entries_page(
    client: aioredis.Redis,
    stream: str,
    *,
    before: str | None = None,
    count: int | None = None,
) -> Page[EntryRow]:
    """Entries of ``stream`` with ids below ``before``, newest first."""
    if not await client.exists(stream):
        raise NotFound(f"no stream {stream!r}")
    now = now_ms()

    def row(entry_id: Any, raw: Any) -> EntryRow:
        return EntryRow(text(entry_id), age_ms(text(entry_id), now), show_fields(raw))

    return await _newest_first(client, stream, before, count, row)


async def get_entry(client: aioredis.Redis, stream: str, entry_id: str) -> EntryRow:
    """One entry, its values shown whole (no truncation)."""
    found, raw = await _one_entry(client, stream, entry_id, f"no entry {entry_id} in {stream!r}")
    return EntryRow(text(found), age_ms(text(found)), show_fields(raw, None))


async def _newest_first(
    client: aioredis.Redis,
    key: str,
    before: str | None,
    count: int | None,
    row: Callable[[Any, Any], T],
) -> Page[T]:
    """A page of ``key``'s entries with ids below ``before``, newest first, each made by ``row``."""
    size = clamp_count(count)
    rows: Any = await client.xrevrange(key, max=_before(before), min="-", count=size + 1)
    items = [row(i, raw) for i, raw in rows[:size]]
    more = len(rows) > size
    return Page(items, text(rows[len(items) - 1][0]) if more and items else None, size)


async def _one_entry(
    client: aioredis.Redis, key: str, entry_id: str, missing: str
) -> tuple[Any, Any]:
    """The (id, fields) of one entry of ``key``; NotFound with ``missing`` when it is not there."""
    try:
        rows: Any = await client.xrange(key, min=entry_id, max=entry_id, count=1)
    except rex.ResponseError as exc:
        raise NotFound(f"bad entry id {entry_id!r}: {exc}") from None
    if not rows:
        raise NotFound(missing)
    return rows[0][0], rows[0][1]


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """A dead letter: its original fields (shown safely) and streamworker's provenance.

    ``is_dead_letter`` is False for an entry without the provenance (no ``dlq_stream``): not a
    dead letter, never offered for replay or purge. ``at_ms`` is when it was dead-lettered (the
    ``dlq_at_ms`` field, else its id's time); ``traceback`` the handler's traceback, when the
    worker recorded one (``dlq_traceback``)."""

    id: str
    age_ms: int | None
    fields: list[tuple[Value, Value]]
    provenance: dict[str, str]
    error: Value
    original_stream: str | None
    original_id: str | None
    replayable: bool
    is_dead_letter: bool
    at_ms: int | None
    traceback: str | None


def dead_letter_row(entry_id: Any, raw: Any, limit: int | None = PREVIEW_CHARS) -> DeadLetterRow:
    """Split a raw dead-letter entry with :func:`streamworker.ops.dead_letters.split_dead_letter`."""
    pairs = _pairs(raw)
    split = dead_letters.split_dead_letter(entry_id, [part for pair in pairs for part in pair])
    # The provenance fields (unique names) are the last ones; what comes before is the original
    # entry, kept here as raw bytes so binary values can be shown as hex.
    original = pairs[: len(pairs) - len(split.provenance)]
    prov = split.provenance
    at = prov.get("dlq_at_ms", "")
    return DeadLetterRow(
        id=split.id,
        age_ms=age_ms(split.id),
        fields=[(show_value(k, limit), show_value(v, limit)) for k, v in original],
        provenance={k: v for k, v in prov.items() if k != "dlq_traceback"},
        error=show_value(split.error, limit),
        original_stream=split.original_stream,
        original_id=split.original_id,
        replayable=split.original_stream is not None and bool(original),
        is_dead_letter=split.original_stream is not None,
        at_ms=int(at) if at.isdigit() else id_ms(split.id),
        traceback=prov.get("dlq_traceback") or None,
    )


async def dead_letter_page(
    client: aioredis.Redis, dlq: str, *, before: str | None = None, count: int | None = None
) -> Page[DeadLetterRow]:
    """Dead letters of ``dlq`` with ids below ``before``, newest first (empty if none yet)."""
    return await _newest_first(client, dlq, before, count, dead_letter_row)


async def get_dead_letter(client: aioredis.Redis, dlq: str, entry_id: str) -> DeadLetterRow:
    """One dead letter shown whole; NotDeadLetters for an entry without the provenance."""
    found, raw = await _one_entry(client, dlq, entry_id, f"no dead letter {entry_id} in {dlq!r}")
    row = dead_letter_row(found, raw, None)
    if not row.is_dead_letter:
        raise NotDeadLetters(_not_dead_letters(dlq, f"entry {row.id} of {dlq!r}"))
    return row


# How many of the newest entries are looked at to tell a dead-letter stream from a live one.
_SNIFF = 10


def _not_dead_letters(key: str, what: str) -> str:
    return (
        f"{what} is not a streamworker dead letter (no dlq_stream field): {key!r} is not a "
        f"dead-letter stream, and the dashboard shows, replays and purges dead letters only "
        f"(the dead letters of a stream S are in {dead_letter_stream(key)!r})"
    )


async def check_dead_letter_stream(client: aioredis.Redis, key: str) -> None:
    """NotDeadLetters when ``key`` holds entries and none of its newest ones is a dead letter
    (a live stream named as dead letters); a missing key is an empty dead-letter stream."""
    rows: Any = await client.xrevrange(key, max="+", min="-", count=_SNIFF)
    if rows and not any(dead_letter_row(i, raw).is_dead_letter for i, raw in rows):
        raise NotDeadLetters(_not_dead_letters(key, f"{key!r}: its newest entry"))


def stream_of_dlq(key: str) -> str | None:
    """The stream whose default dead-letter stream is ``key`` (``{S}:dlq`` -> ``S``,
    ``{T}S:dlq`` -> ``{T}S``), or None for a key not named that way."""
    if not key.endswith(":dlq"):
        return None
    base = key[: -len(":dlq")]
    if base.startswith("{") and base.endswith("}") and base.count("{") == 1:
        base = base[1:-1]
    return base if base and dead_letter_stream(base) == key else None


def dlq_of(stream: str) -> str:
    """The dead-letter stream of ``stream`` (see :func:`streamworker.io.keys.dead_letter_stream`)."""
    return dead_letter_stream(stream)
