"""Delayed delivery: a publish with ``delay_ms=`` or ``deliver_at=`` enters its stream when due.

A delayed publish does not XADD. It adds the entry, encoded as an *envelope* (its fields, its
trimming, a unique nonce), to the stream's sorted set ``{S}:delayed`` (:func:`delayed_key`, in
the stream's hash tag) with the due time in epoch milliseconds as score
(``schedule_delayed.lua``). Workers that consume the stream run :class:`DelayedMover`, which calls
``move_delayed.lua`` every ``delayed_poll_ms``: in one atomic step it takes at most ``batch``
envelopes due by the caller's clock, XADDs each to the stream (a fresh id: the entry's id is
decided when it moves) and removes it from the set. A script runs whole or not at all, and every
XADD is followed by its ZREM inside it, so each envelope enters the stream exactly once however
many movers run and whichever of them is killed. Nothing here reads the server's clock: the
caller's ``now_ms`` is an argument, as for every other script.

Contracts (checked by :func:`due_time`, one line each):

* ``delay_ms``: an integer >= 0, milliseconds from now.
* ``deliver_at``: a timezone-aware :class:`datetime.datetime` (epoch numbers and naive datetimes
  are refused: their meaning is a guess). One up to :data:`PAST_TOLERANCE_MS` in the past is due
  now (clock skew between the producer's hosts); one further in the past is refused.
* Not both; and not with an explicit ``id=`` (the id is decided when the entry moves).

Retry safety: with ``idempotency_key=`` the schedule and the key's marker are one atomic step, as
``publish_once.lua`` does it; the marker records ``delayed:<due_ms>`` and lives the idempotency
window counted from the due time, so a retry within it adds nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.errors import ConfigError, ConnectionLost
from streamworker.io.keys import delayed_key
from streamworker.io.redisio import LuaScript

__all__ = [
    "DEFAULT_DELAYED_BATCH",
    "DEFAULT_DELAYED_POLL_MS",
    "PAST_TOLERANCE_MS",
    "DelayedMover",
    "Envelope",
    "MoveResult",
    "decode_envelope",
    "delayed_key",
    "due_time",
    "encode_envelope",
    "marker_value",
    "move_due",
    "now_ms",
    "parse_marker",
    "schedule_call",
    "schedule_script",
]

DEFAULT_DELAYED_POLL_MS = 250
"""How often a worker looks for due delayed messages by default: a due message enters its
stream within this (plus the script's round trip) when the worker is idle."""

DEFAULT_DELAYED_BATCH = 100
"""Most envelopes one mover script moves: no script holds the server long. A full batch is
followed by the next one at once."""

PAST_TOLERANCE_MS = 1_000
"""A ``deliver_at`` this far in the past is due now; further back it is refused."""

_ENVELOPE_VERSION = b"1"
_MARKER_PREFIX = "delayed:"

_SCHEDULE = LuaScript("schedule_delayed")
_MOVE = LuaScript("move_delayed")


def now_ms() -> int:
    """The local clock in epoch milliseconds (what "due" is measured against)."""
    return time.time_ns() // 1_000_000


def due_time(
    delay_ms: object = None, deliver_at: object = None, *, now: int | None = None
) -> int | None:
    """The due time in epoch ms of a publish with ``delay_ms`` or ``deliver_at``, or None when
    neither is given (a plain publish). Pure but for the clock (``now`` replaces it); ConfigError
    with one line for what the module docstring refuses."""
    if delay_ms is None and deliver_at is None:
        return None
    if delay_ms is not None and deliver_at is not None:
        raise ConfigError("give delay_ms or deliver_at, not both")
    current = now_ms() if now is None else now
    if delay_ms is not None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
            raise ConfigError(f"delay_ms must be an integer number of ms >= 0, not {delay_ms!r}")
        if delay_ms < 0:
            raise ConfigError(f"delay_ms must be >= 0, not {delay_ms}")
        return current + delay_ms
    if not isinstance(deliver_at, datetime.datetime):
        raise ConfigError(
            f"deliver_at must be a timezone-aware datetime (use delay_ms= for a number of ms), "
            f"not {deliver_at!r}"
        )
    if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
        raise ConfigError(
            f"deliver_at must be timezone-aware (e.g. datetime.now(timezone.utc) + delta), not "
            f"the naive {deliver_at.isoformat()}"
        )
    due = int(deliver_at.timestamp() * 1000)
    if due < current - PAST_TOLERANCE_MS:
        raise ConfigError(
            f"deliver_at {deliver_at.isoformat()} is {(current - due) / 1000:.1f} s in the past "
            f"(more than {PAST_TOLERANCE_MS} ms); publish without a delay to deliver now"
        )
    return max(due, current)


_sequence = itertools.count()


def _nonce() -> bytes:
    # Time and this process's sequence first, so that envelopes due at the same ms sort (and
    # move) in publish order; random after, so that equal publishes from two processes are two
    # members of the set, not one.
    seq = next(_sequence) % 2**32
    return f"{time.time_ns():016x}{seq:08x}{os.urandom(6).hex()}".encode()


def _item(value: str | bytes) -> bytes:
    data = value.encode("utf-8") if isinstance(value, str) else value
    return str(len(data)).encode() + b":" + data


def encode_envelope(
    fields: Mapping[str, str | bytes],
    trim: str = "",
    approximate: bool = True,
    threshold: str = "",
    nonce: bytes | None = None,
) -> bytes:
    """The sorted-set member of one delayed entry: length-prefixed items (``<len>:<bytes>``,
    binary-safe, parsed by ``move_delayed.lua``): version, nonce, trim, ``~``/``=``, threshold,
    then field, value, field, value, …"""
    items: list[str | bytes] = [
        _ENVELOPE_VERSION,
        _nonce() if nonce is None else nonce,
        trim,
        "~" if approximate else "=",
        threshold,
    ]
    for name, value in fields.items():
        items += [name, value]
    return b"".join(_item(i) for i in items)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded envelope (:func:`decode_envelope`)."""

    nonce: bytes
    trim: str
    approximate: bool
    threshold: str
    fields: dict[bytes, bytes]


def decode_envelope(member: bytes) -> Envelope:
    """The inverse of :func:`encode_envelope`; ValueError for a member that is not one."""
    items: list[bytes] = []
    pos = 0
    while pos < len(member):
        colon = member.index(b":", pos)
        size = int(member[pos:colon])
        end = colon + 1 + size
        if end > len(member):
            raise ValueError("truncated delayed envelope")
        items.append(member[colon + 1 : end])
        pos = end
    if len(items) < 5 or items[0] != _ENVELOPE_VERSION or len(items) % 2 == 0:
        raise ValueError("not a version-1 delayed envelope")
    pairs = items[5:]
    return Envelope(
        nonce=items[1],
        trim=items[2].decode(),
        approximate=items[3] == b"~",
        threshold=items[4].decode(),
        fields=dict(zip(pairs[::2], pairs[1::2], strict=True)),
    )


def marker_value(due_ms: int) -> str:
    """What an idempotency marker of a delayed publish records (``schedule_delayed.lua`` writes
    the same text: keep the two in step)."""
    return f"{_MARKER_PREFIX}{due_ms}"


def parse_marker(value: str) -> tuple[str | None, int | None]:
    """``(entry_id, due_ms)`` of a recorded marker: an entry id (a publish without delay), or
    the due time of a delayed one (its id is decided when it moves)."""
    if value.startswith(_MARKER_PREFIX):
        return None, int(value[len(_MARKER_PREFIX) :])
    return value, None


def schedule_call(
    stream: str,
    marker: str | None,
    due_ms: int,
    window_ms: int,
    envelope: bytes,
    *,
    now: int | None = None,
) -> tuple[LuaScript, list[str], list[str | bytes | int]]:
    """The script, KEYS and ARGV that schedule ``envelope`` on ``stream`` (and record
    ``marker``). The marker lives ``window_ms`` counted from the due time."""
    current = now_ms() if now is None else now
    keys = [delayed_key(stream)] + ([marker] if marker is not None else [])
    ttl_ms = window_ms + max(0, due_ms - current)
    return _SCHEDULE, keys, [due_ms, envelope, ttl_ms]


def schedule_script() -> LuaScript:
    """The script that schedules (for producers that load scripts before pipelining)."""
    return _SCHEDULE


@dataclass(frozen=True, slots=True)
class MoveResult:
    """What one mover script did: entries moved into the stream, and those left delayed."""

    moved: int
    delayed: int


async def move_due(
    client: aioredis.Redis,
    stream: str,
    *,
    now: int | None = None,
    batch: int = DEFAULT_DELAYED_BATCH,
) -> MoveResult:
    """Move at most ``batch`` of ``stream``'s delayed entries due by ``now`` (default: the local
    clock) into the stream, atomically (``move_delayed.lua``). Safe to run from any number of
    processes at once. ConnectionLost when Redis is away; ResponseError as the server says."""
    reply = await _MOVE(
        client,
        [delayed_key(stream), stream],
        [now_ms() if now is None else now, batch],
    )
    moved, left = reply
    return MoveResult(int(moved), int(left))


Observer = Callable[[str, MoveResult], None]


class DelayedMover:
    """Moves due delayed entries of ``streams`` into them, every ``poll_ms``, until cancelled.

    Every worker runs one for the streams it consumes; several at once are safe (each move is
    one script). A full batch is followed by the next at once, so a burst of due entries drains
    at script speed while no single script runs long. Errors (Redis away, a failover) are
    logged and retried after a growing pause; they never end the task. ``observe`` is told the
    result of every move (the worker's metrics).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        streams: Sequence[str],
        *,
        poll_ms: int = DEFAULT_DELAYED_POLL_MS,
        batch: int = DEFAULT_DELAYED_BATCH,
        observe: Observer | None = None,
        max_pause_s: float = 5.0,
    ) -> None:
        if isinstance(poll_ms, bool) or not isinstance(poll_ms, int) or poll_ms < 1:
            raise ConfigError(f"delayed_poll_ms must be an integer >= 1, not {poll_ms!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"delayed_batch must be an integer >= 1, not {batch!r}")
        self.client = client
        self.streams = list(dict.fromkeys(streams))
        self.poll_s = poll_ms / 1000
        self.batch = batch
        self.observe = observe
        self.max_pause_s = max_pause_s
        self._log = structlog.get_logger("streamworker.producing.delayed")

    async def move_once(self) -> int:
        """One pass over every stream (draining full batches); returns entries moved."""
        total = 0
        for stream in self.streams:
            while True:
                result = await move_due(self.client, stream, batch=self.batch)
                total += result.moved
                if self.observe is not None:
                    self.observe(stream, result)
                if result.moved < self.batch:
                    break
        return total

    async def run(self) -> None:
        """Poll until cancelled."""
        pause = self.poll_s
        while True:
            try:
                await self.move_once()
                pause = self.poll_s
            except (ConnectionLost, rex.RedisError) as exc:
                # The consume loops see an outage too and say so; the envelopes wait in Redis.
                pause = min(max(pause * 2, self.poll_s), self.max_pause_s)
                self._log.warning(
                    "delayed_move_failed", error=f"{type(exc).__name__}: {exc}", retry_in_s=pause
                )
            await asyncio.sleep(pause)
