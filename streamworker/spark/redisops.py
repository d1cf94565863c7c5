"""The Redis side of the Spark connector (redis-py only; no Spark import, so it is unit-tested
without a JVM): ranged reads, stream bounds, the data-loss check, cursors, the sink's staging and
commit, and the safe trim.

Every function takes a sync redis-py client made by :func:`connect` inside the Spark task that
uses it: clients hold locks and sockets and cannot be pickled to executors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.exceptions as rex

from streamworker.errors import ConfigError, StreamworkerError
from streamworker.keys import hash_tag
from streamworker.redisio import LuaScript, open_sync_redis
from streamworker.settings import is_cluster_url
from streamworker.spark.ranges import IdRange, Position, StreamId, StreamState, lost_entries


class DataLoss(StreamworkerError):
    """Entries a reader had not read yet were trimmed or deleted (``failOnDataLoss``)."""


def connect(url: str) -> redis.Redis:
    """A sync client for a Spark task (bytes replies)."""
    if is_cluster_url(url):
        raise ConfigError("the Spark connector does not support Redis Cluster URLs yet")
    return open_sync_redis(url, socket_timeout_s=60.0)


def _tagged(stream: str) -> str:
    return stream if hash_tag(stream) is not None else f"{{{stream}}}"


def cursor_key(stream: str) -> str:
    """The hash of published Spark cursors of ``stream`` (field: cursor name, value: last id)."""
    return f"{_tagged(stream)}:spark:cursors"


def sink_marker_key(target: str) -> str:
    """The hash of the sink's last committed batch id per query name, for ``target``."""
    return f"{_tagged(target)}:spark:sink"


def staging_key(target: str, query: str, token: str, partition: int) -> str:
    """One Spark task's staging list of rows for ``target`` (a retry overwrites it)."""
    return f"{_tagged(target)}:spark:stg:{query}:{token}:{partition}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


Page = list[tuple[bytes, dict[bytes, bytes]]]


def _xrange(client: redis.Redis, stream: str, low: str, high: str, count: int) -> Page:
    page: Any = client.xrange(stream, min=low, max=high, count=count)
    return list(page or [])


def _xrevrange(client: redis.Redis, stream: str, high: str, low: str, count: int) -> Page:
    page: Any = client.xrevrange(stream, max=high, min=low, count=count)
    return list(page or [])


# --------------------------------------------------------------------------------------------
# Reading


Row = tuple[str, str, int, int, dict[str, bytes]]


def read_range(client: redis.Redis, stream: str, rng: IdRange, page_size: int) -> Iterator[Row]:
    """Every entry of ``rng``, in id order, as ``(stream, id, ms, seq, fields)`` rows, paging
    with XRANGE's exclusive start. Field names are decoded as UTF-8 (replacing bad bytes);
    values stay bytes."""
    start = rng.xrange_min
    while True:
        page = _xrange(client, stream, start, rng.xrange_max, page_size)
        if not page:
            return
        for raw_id, raw_fields in page:
            sid = StreamId.parse(raw_id)
            fields = {k.decode("utf-8", "replace"): v for k, v in raw_fields.items()}
            yield (stream, str(sid), sid.ms, sid.seq, fields)
        if len(page) < page_size:
            return
        start = f"({_text(page[-1][0])}"


def last_entry(
    client: redis.Redis, stream: str, at_most: StreamId | None = None
) -> StreamId | None:
    """The stream's last entry id (at or below ``at_most``), None when there is none."""
    top = "+" if at_most is None else str(at_most)
    rows = _xrevrange(client, stream, top, "-", 1)
    return StreamId.parse(rows[0][0]) if rows else None


def first_entry_after(
    client: redis.Redis, stream: str, after: StreamId | None, at_most: StreamId | None = None
) -> StreamId | None:
    """The first entry id above ``after`` (and at or below ``at_most``), None when there is none."""
    low = "-" if after is None else f"({after}"
    rows = _xrange(client, stream, low, "+" if at_most is None else str(at_most), 1)
    return StreamId.parse(rows[0][0]) if rows else None


def nth_entry_after(
    client: redis.Redis, stream: str, after: StreamId | None, upto: StreamId, n: int
) -> tuple[StreamId | None, int]:
    """The id of the ``n``-th entry above ``after`` (at most ``upto``), or the last one there is
    when fewer (None when there is none), and how many entries that is. Reads at most ``n`` entries, in pages (on the driver:
    the price of a row cap, one extra read of each capped batch)."""
    last: StreamId | None = None
    low = "-" if after is None else f"({after}"
    left = n
    while left > 0:
        page = _xrange(client, stream, low, str(upto), min(left, 10_000))
        if not page:
            break
        last = StreamId.parse(page[-1][0])
        left -= len(page)
        low = f"({last}"
    return last, n - left


def stream_state(client: redis.Redis, stream: str) -> StreamState | None:
    """The stream's counters from one XINFO STREAM (None when the key does not exist)."""
    try:
        info: Any = client.xinfo_stream(stream)
    except rex.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return None
        raise
    fields = {_text(k): v for k, v in info.items()}
    first = fields.get("first-entry")
    return StreamState(
        length=int(fields["length"]),
        entries_added=int(fields["entries-added"]),
        last_generated=StreamId.parse(fields["last-generated-id"]),
        first=StreamId.parse(first[0]) if first else None,
    )


def check_loss(client: redis.Redis, stream: str, after: Position) -> str | None:
    """Why entries above ``after`` (not read yet) are gone, or None (see
    :func:`~streamworker.spark.ranges.lost_entries`)."""
    state = stream_state(client, stream)
    lost = lost_entries(state, after)
    if not lost:
        return None
    first = state.first if state is not None else None
    return (
        f"stream {stream!r}: {lost} entries after {after.id} were trimmed before they were read "
        f"(first entry now {first or 'none'}); set failOnDataLoss=false to skip them"
    )


def publish_cursor(client: redis.Redis, name: str, offsets: Mapping[str, str]) -> None:
    """Record ``name``'s committed position (stream -> last id) for :func:`safe_trim`."""
    pipe = client.pipeline(transaction=False)
    for stream, last in offsets.items():
        pipe.hset(cursor_key(stream), name, last)
    pipe.execute()


def read_cursors(client: redis.Redis, stream: str) -> dict[str, str]:
    """The published cursors of ``stream``: name -> last committed id."""
    raw = client.hgetall(cursor_key(stream))
    return {_text(k): _text(v) for k, v in raw.items()}


# --------------------------------------------------------------------------------------------
# Scripts


class SyncScript:
    """A script of ``streamworker/lua/`` called by EVALSHA on a sync client (reloaded on
    NOSCRIPT). Picklable: it holds the source, not a client."""

    def __init__(self, name: str) -> None:
        script = LuaScript(name)
        self.name, self.source, self.sha = name, script.source, script.sha

    def __call__(
        self, client: redis.Redis, keys: Sequence[str], args: Sequence[str | bytes | int]
    ) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)


_COMMIT = SyncScript("commit_sink_batch")
_TRIM = SyncScript("safe_trim")


# --------------------------------------------------------------------------------------------
# The sink


def _netstring(value: bytes) -> bytes:
    return str(len(value)).encode() + b":" + value


def encode_row(sort_key: str, explicit_id: str, fields: Sequence[tuple[bytes, bytes]]) -> bytes:
    """One staged row (see commit_sink_batch.lua): sort key, explicit id, field/value pairs."""
    if not fields:
        raise ValueError("a row to write has no fields (XADD needs at least one)")
    parts = [_netstring(sort_key.encode()), _netstring(explicit_id.encode())]
    for name, value in fields:
        parts.append(_netstring(name))
        parts.append(_netstring(value))
    return b"".join(parts)


def stage(client: redis.Redis, key: str, rows: Sequence[bytes], ttl_s: int) -> None:
    """Replace ``key`` with ``rows`` in one MULTI (a task retry overwrites its own attempt)."""
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    for i in range(0, len(rows), 1_000):
        pipe.rpush(key, *rows[i : i + 1_000])
    pipe.expire(key, ttl_s)
    pipe.execute()


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one target's commit did."""

    target: str
    added: int
    staged: int
    replayed: bool


def commit_staged(
    client: redis.Redis,
    target: str,
    staging: Sequence[str],
    *,
    query: str | None,
    batch_id: int | None,
    id_mode: str,
) -> CommitResult:
    """Append the staged rows to ``target`` once (commit_sink_batch.lua)."""
    keys = [target, sink_marker_key(target), *staging]
    # Without a batch id there is nothing to deduplicate on: no marker is read or written.
    marked = query is not None and batch_id is not None
    args = [query or "" if marked else "", str(batch_id) if marked else "", id_mode]
    try:
        added, staged, replayed = _COMMIT(client, keys, args)
    except rex.ResponseError as exc:
        raise StreamworkerError(f"writing to stream {target!r} failed: {exc}") from exc
    return CommitResult(target, int(added), int(staged), bool(int(replayed)))


def last_committed_batch(client: redis.Redis, target: str, query: str) -> int | None:
    """The sink's last committed batch id of ``query`` into ``target`` (None: none yet)."""
    raw = client.hget(sink_marker_key(target), query)
    return None if raw is None else int(raw)


def drop_staging(client: redis.Redis, keys: Sequence[str]) -> None:
    """Delete staging lists (an aborted batch)."""
    if keys:
        client.delete(*keys)


# --------------------------------------------------------------------------------------------
# Trimming


@dataclass(frozen=True, slots=True)
class TrimResult:
    """What :func:`safe_trim` did: entries removed and the MINID floor used."""

    stream: str
    trimmed: int
    floor: str  # "" nothing bounds the stream (nothing trimmed); "+" everything consumed
    groups: int
    cursors: int


def safe_trim(client: redis.Redis, stream: str, *, require: Sequence[str] = ()) -> TrimResult:
    """Trim ``stream`` below the oldest entry any consumer group or Spark cursor still needs,
    in one Lua call (safe_trim.lua). ``require``: cursor names that must be published (else
    StreamworkerError, nothing trimmed), e.g. the archive's, so nothing un-archived is trimmed."""
    try:
        trimmed, floor, groups, cursors = _TRIM(client, [stream, cursor_key(stream)], list(require))
    except rex.ResponseError as exc:
        raise StreamworkerError(str(exc).removeprefix("ERR ")) from exc
    return TrimResult(stream, int(trimmed), _text(floor), int(groups), int(cursors))
