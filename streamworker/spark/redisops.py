"""The Redis side of the Spark connector (redis-py only; no Spark import, so it is unit-tested
without a JVM): ranged reads, stream bounds, the data-loss check, cursors, the sink's staging and
commit, and the safe trim.

Every function takes a sync redis-py client made by :func:`connect` inside the Spark task that
uses it: clients hold locks and sockets and cannot be pickled to executors.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.exceptions as rex

from streamworker.errors import StreamworkerError
from streamworker.io.keys import hash_tag, partition_stream, spark_cursors_key
from streamworker.io.redisio import LuaScript, as_text, is_cluster_client, open_sync_redis
from streamworker.io.replicawait import NO_WAIT, ReplicaWait, Stopwatch, WaitObserver
from streamworker.producing.partitions import MAX_PARTITIONS
from streamworker.spark.options import is_glob
from streamworker.spark.ranges import (
    MAX_PART,
    IdRange,
    Position,
    Probe,
    StreamId,
    StreamState,
    lost_entries,
    probe_times,
)


class DataLoss(StreamworkerError):
    """Entries a reader had not read yet were trimmed or deleted (``failOnDataLoss``)."""


def connect(url: str) -> redis.Redis:
    """A sync client for a Spark task (bytes replies): redis-py's cluster client for
    ``redis+cluster://`` URLs (every command here keeps to one slot)."""
    return open_sync_redis(url, socket_timeout_s=60.0)


def node_client(client: redis.Redis, stream: str) -> redis.Redis:
    """A plain client of the node that serves ``stream`` (``client`` itself when it is not a
    cluster client): the pipelined reader talks to one connection directly."""
    if not is_cluster_client(client):
        return client
    cluster: Any = client
    node = cluster.get_node_from_key(stream)
    found: redis.Redis = cluster.get_redis_connection(node)
    return found


# --------------------------------------------------------------------------------------------
# Which streams an entry of option ``streams`` names

_PARTITION_KEY = re.compile(r"^\{(.+):p(\d+)\}$")


def _logical(key: str) -> str:
    """The name a glob is matched against: a partition's stream name, else the key."""
    match = _PARTITION_KEY.match(key)
    return match.group(1) if match else key


def _partition_index(key: str) -> int:
    match = _PARTITION_KEY.match(key)
    return int(match.group(2)) if match else -1


def resolve_streams(client: redis.Redis, names: Sequence[str]) -> list[str]:
    """The stream keys that the entries of option ``streams`` name, each once, in order:

    * a glob (``*``, ``?``, ``[``) matches stream keys, and partitioned streams by their name
      (``ord*`` matches ``{orders:p0}`` … as well as a plain ``orders2``); found by SCAN over
      every node, sorted;
    * a plain name is that stream when the key exists or no partition of that name exists,
      otherwise the partitions ``{name:p0}``, ``{name:p1}`` … that exist (found with one
      pipelined EXISTS over the possible partition keys; no SCAN).
    """
    out: list[str] = []
    seen: set[str] = set()

    def add(key: str) -> None:
        if key not in seen:
            seen.add(key)
            out.append(key)

    plain = [n for n in names if not is_glob(n)]
    partitions: dict[str, list[str]] = {}
    if plain:
        pipe = client.pipeline(transaction=False)
        for name in plain:
            pipe.exists(name)
        # Only names that are no key of their own can name a partitioned stream.
        candidates = [
            n
            for n, own in zip(plain, pipe.execute(), strict=True)
            if not own and "{" not in n and "}" not in n
        ]
        if candidates:
            pipe = client.pipeline(transaction=False)
            for name in candidates:
                for i in range(MAX_PARTITIONS):
                    pipe.exists(partition_stream(name, i))
            replies = iter(pipe.execute())
            for name in candidates:
                found = [partition_stream(name, i) for i in range(MAX_PARTITIONS) if next(replies)]
                partitions[name] = found
    globbed: dict[str, list[str]] = {}
    patterns = [n for n in names if is_glob(n)]
    if patterns:
        keys = sorted(
            {as_text(k) for k in client.scan_iter(match="*", count=1_000, _type="stream")},
            key=lambda k: (_logical(k), _partition_index(k), k),
        )
        for pattern in patterns:
            globbed[pattern] = [
                k
                for k in keys
                if fnmatch.fnmatchcase(_logical(k), pattern) or fnmatch.fnmatchcase(k, pattern)
            ]
    for name in names:
        if name in globbed:
            for key in globbed[name]:
                add(key)
        elif partitions.get(name):
            for key in partitions[name]:
                add(key)
        else:
            add(name)
    return out


def _tagged(stream: str) -> str:
    return stream if hash_tag(stream) is not None else f"{{{stream}}}"


def cursor_key(stream: str) -> str:
    """The hash of published Spark cursors of ``stream`` (field: cursor name, value: last id)."""
    return spark_cursors_key(stream)


def sink_marker_key(target: str) -> str:
    """The hash of the sink's last committed batch id per query name, for ``target``."""
    return f"{_tagged(target)}:spark:sink"


def staging_key(target: str, query: str, token: str, partition: int) -> str:
    """One Spark task's staging list of rows for ``target`` (a retry overwrites it)."""
    return f"{_tagged(target)}:spark:stg:{query}:{token}:{partition}"


Page = list[tuple[bytes, dict[bytes, bytes]]]


def _xrange(client: redis.Redis, stream: str, low: str, high: str, count: int) -> Page:
    page: Any = client.xrange(stream, min=low, max=high, count=count)
    return list(page or [])


def _xrevrange(client: redis.Redis, stream: str, high: str, low: str, count: int) -> Page:
    page: Any = client.xrevrange(stream, max=high, min=low, count=count)
    return list(page or [])


# --------------------------------------------------------------------------------------------
# Reading


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


def probe(
    client: redis.Redis, stream: str, rng: IdRange, first: StreamId, samples: int, window: int
) -> list[Probe]:
    """Samples of ``rng`` (whose first entry is ``first``) for cutting it by entry counts
    (:func:`~streamworker.spark.ranges.count_cuts`): ``samples`` windows of ``window`` entries
    spread evenly over its time, each with the full count of its last millisecond. Two
    pipelined round trips, whatever the stream's size."""
    times = probe_times(first.ms, rng.hi.ms, samples)
    high = rng.xrange_max
    pipe = client.pipeline(transaction=False)
    for t in times:
        low = rng.xrange_min if rng.lo is not None and t <= rng.lo.ms else f"{t}-0"
        pipe.xrange(stream, min=low, max=high, count=window)
    windows = [[StreamId.parse(e[0]) for e in page or []] for page in pipe.execute()]
    pipe = client.pipeline(transaction=False)
    for ids in windows:
        if ids:
            last = ids[-1].ms
            pipe.xrevrange(
                stream, max=str(min(StreamId(last, MAX_PART), rng.hi)), min=f"{last}-0", count=1
            )
    tops = iter(pipe.execute())
    probes: list[Probe] = []
    for t, ids in zip(times, windows, strict=True):
        last_count = 0
        if ids:
            top = next(tops)
            # Auto-generated ids number the entries of one millisecond from 0.
            last_count = StreamId.parse(top[0][0]).seq + 1 if top else 0
        probes.append(Probe(t, tuple(i.ms for i in ids), last_count))
    return probes


def length(client: redis.Redis, stream: str) -> int:
    """XLEN of ``stream`` (0 when it does not exist)."""
    return int(client.xlen(stream))


def stream_state(client: redis.Redis, stream: str) -> StreamState | None:
    """The stream's counters from one XINFO STREAM (None when the key does not exist)."""
    try:
        info: Any = client.xinfo_stream(stream)
    except rex.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return None
        raise
    fields = {as_text(k): v for k, v in info.items()}
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


def publish_cursor(
    client: redis.Redis,
    name: str,
    offsets: Mapping[str, str],
    *,
    wait: ReplicaWait = NO_WAIT,
    observer: WaitObserver | None = None,
) -> None:
    """Record ``name``'s committed position (stream -> last id) for :func:`safe_trim`; with a
    ``wait``, return only once its replicas have it (ReplicaWaitTimeout: publish it again)."""
    stopwatch = Stopwatch(observer, "archive_trim")
    pipe = client.pipeline(transaction=False)
    for stream, last in offsets.items():
        pipe.hset(cursor_key(stream), name, last)
    if wait.active:
        pipe.execute_command(*wait.command())  # type: ignore[no-untyped-call]
    replies = pipe.execute()
    if wait.active:
        wait.check(
            replies[-1],
            f"cursor {name!r}",
            retry_safe=True,
            retry="publishing it again is safe",
            stopwatch=stopwatch,
        )


def read_cursors(client: redis.Redis, stream: str) -> dict[str, str]:
    """The published cursors of ``stream``: name -> last committed id."""
    raw = client.hgetall(cursor_key(stream))
    return {as_text(k): as_text(v) for k, v in raw.items()}


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

    def call_waiting(
        self,
        client: redis.Redis,
        keys: Sequence[str],
        args: Sequence[str | bytes | int],
        wait: ReplicaWait,
        *,
        observer: WaitObserver | None,
        operation: str,
        subject: str,
        retry_safe: bool,
        retry: str,
    ) -> Any:
        """Run the script; with an active ``wait``, with a WAIT (WAITAOF) behind it in one
        pipeline (the WAIT must follow the write on its connection), and ReplicaWaitTimeout
        (naming ``subject``, saying ``retry_safe`` and ``retry``) unless enough replicas
        acknowledged. ``observer`` is told how long the wait took, as ``operation``. Returns the
        script's reply; raises its error."""
        if not wait.active:
            return self(client, keys, args)
        stopwatch = Stopwatch(observer, operation)
        client.script_load(self.source)
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(self.sha, len(keys), *keys, *args)
        pipe.execute_command(*wait.command())  # type: ignore[no-untyped-call]
        reply, waited = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        wait.check(waited, subject, retry_safe=retry_safe, retry=retry, stopwatch=stopwatch)
        return reply


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
    wait: ReplicaWait = NO_WAIT,
    observer: WaitObserver | None = None,
) -> CommitResult:
    """Append the staged rows to ``target`` once (commit_sink_batch.lua). With a ``wait``, the
    script and a WAIT go in one pipeline and ReplicaWaitTimeout is raised unless enough
    replicas acknowledged: Spark then fails the batch instead of checkpointing one that a
    failover could take back (its re-run finds the marker and adds nothing twice)."""
    keys = [target, sink_marker_key(target), *staging]
    # Without a batch id there is nothing to deduplicate on: no marker is read or written.
    marked = query is not None and batch_id is not None
    args = [query or "" if marked else "", str(batch_id) if marked else "", id_mode]
    try:
        added, staged, replayed = _COMMIT.call_waiting(
            client,
            keys,
            args,
            wait,
            observer=observer,
            operation="spark_commit",
            subject=f"sink commit of batch {batch_id} to {target!r}",
            retry_safe=marked,
            retry="re-running the batch adds nothing twice (its marker)"
            if marked
            else "without queryName and batchId, writing it again adds it twice",
        )
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


def safe_trim(
    client: redis.Redis,
    stream: str,
    *,
    require: Sequence[str] = (),
    wait: ReplicaWait = NO_WAIT,
    observer: WaitObserver | None = None,
) -> TrimResult:
    """Trim ``stream`` below the oldest entry any consumer group or Spark cursor still needs,
    in one Lua call (safe_trim.lua). ``require``: cursor names that must be published (else
    StreamworkerError, nothing trimmed), e.g. the archive's, so nothing un-archived is trimmed.

    With a ``wait``, a WAIT follows the trim on its connection: the result is returned only once
    the replicas have the trim and (replication is in order) every write it was decided on
    (cursors, acknowledgements); ReplicaWaitTimeout otherwise (trimming again is safe)."""
    keys, args = [stream, cursor_key(stream)], list(require)
    try:
        trimmed, floor, groups, cursors = _TRIM.call_waiting(
            client,
            keys,
            args,
            wait,
            observer=observer,
            operation="archive_trim",
            subject=f"trim of {stream!r}",
            retry_safe=True,
            retry="trimming again is safe (a failover can only bring entries back)",
        )
    except rex.ResponseError as exc:
        raise StreamworkerError(str(exc).removeprefix("ERR ")) from exc
    return TrimResult(stream, int(trimmed), as_text(floor), int(groups), int(cursors))
