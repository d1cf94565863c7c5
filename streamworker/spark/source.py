"""The ``streamworker_redis`` data source: batch and streaming reads of Redis Streams and an
exactly-once stream sink, on PySpark's Python Data Source API (Spark >= 4.2).

Imported only by :func:`streamworker.spark.register` and by Spark's Python workers (which find
these classes by reference: the package must be installed where the executors run).

Who runs what: the DataSource, ``partitions()``, the streaming offsets and the writers' ``commit``
run in Python processes on the driver host; ``read()`` and ``write()`` run on executors, on
pickled copies. So nothing here holds a connection between calls: each call opens its own client
from the (string) options.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import MapType, StructType

from streamworker.errors import ConfigError
from streamworker.io.redisio import as_bytes
from streamworker.io.replicawait import ReplicaWait
from streamworker.producing.partitions import PartitionedStream
from streamworker.spark import redisops
from streamworker.spark.fastread import BatchBuilder, RawPage, raw_pages
from streamworker.spark.model import ModelColumns, base_columns, model_columns
from streamworker.spark.options import (
    FORMAT,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from streamworker.spark.ranges import (
    MAX_PART,
    IdRange,
    Position,
    Probe,
    StreamId,
    count_cuts,
    estimate_counts,
    ranges_at_cuts,
)

_log = logging.getLogger("streamworker.spark")

MIN_ROWS_PER_TASK = 20_000
"""With the default ``numPartitions``, a stream gets no more tasks than it has this many
entries: below that a task costs more to start than it saves."""

PROBES_PER_TASK = 32
"""Sample windows per planned task when cutting a range by entry counts."""

PROBE_WINDOW = 32
"""Entries per sample window."""

REFINE_PROBES = 16
"""Extra sample windows inside each slice that seems to hold half a task's share or more."""

DEFAULT_PARALLELISM = 2
"""The task budget of one read when neither ``numPartitions`` nor the session's parallelism
(captured by :func:`streamworker.spark.register`) is known."""


class StreamRange(InputPartition):
    """One partition: entries ``(lo, hi]`` of ``stream`` (ids as text; picklable)."""

    def __init__(self, stream: str, lo: str | None, hi: str, check_from: str | None = None) -> None:
        super().__init__(None)
        self.stream = stream
        self.lo = lo
        self.hi = hi
        # A streaming batch's first range: its start position, to check for trimmed entries.
        self.check_from = check_from

    @property
    def id_range(self) -> IdRange:
        """The range as ids."""
        return IdRange(
            None if self.lo is None else StreamId.parse(self.lo), StreamId.parse(self.hi)
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamRange) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((self.stream, self.lo, self.hi))

    def __repr__(self) -> str:
        return f"StreamRange({self.stream!r}, ({self.lo}, {self.hi}])"


def _columns(opts: ReadOptions) -> ModelColumns | None:
    return None if opts.model is None else model_columns(opts.model, opts.body_field)


def arrow_schema(opts: ReadOptions, columns: ModelColumns | None = None) -> Any:
    """The Arrow schema of the batches ``read()`` yields: what Spark expects for the source's
    schema (``to_arrow_schema(schema, timezone="UTC")``; a test compares the two)."""
    import pyarrow as pa

    values = pa.string() if opts.fields_type == "string" else pa.binary()
    fields = [
        pa.field("stream", pa.string()),
        pa.field("id", pa.string()),
        pa.field("ms", pa.int64()),
        pa.field("seq", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("fields", pa.map_(pa.string(), values)),
    ]
    if columns is not None:
        fields.extend(columns.arrow_fields())
    return pa.schema(fields)


def _with_model(batch: Any, page: RawPage, columns: ModelColumns, schema: Any) -> Any:
    import pyarrow as pa

    values = [
        columns.values(
            {k.decode("utf-8", "replace"): v for k, v in zip(f[0::2], f[1::2], strict=True)}
        )
        for _, f in page
    ]
    extra = [
        pa.array([row[i] for row in values], schema.field(len(batch.schema) + i).type)
        for i in range(len(columns.names) + 1)
    ]
    return pa.RecordBatch.from_arrays([*batch.columns, *extra], schema=schema)


def _read_partition(opts: ReadOptions, part: StreamRange) -> Iterator[Any]:
    columns = _columns(opts)
    schema = arrow_schema(opts, columns)
    base = arrow_schema(opts) if columns is not None else schema
    builder = BatchBuilder(part.stream, base)
    client = redisops.connect(opts.url)
    try:
        if part.check_from is not None:
            _check_loss(client, opts, part.stream, Position.parse(part.check_from))
        node = redisops.node_client(client, part.stream)
        # Arrow batches, one per page: Spark takes them without converting row by row.
        for page in raw_pages(node, part.stream, part.id_range, opts.page_size):
            batch = builder.batch(page)
            yield batch if columns is None else _with_model(batch, page, columns, schema)
    finally:
        client.close()


def _check_loss(client: Any, opts: ReadOptions, stream: str, after: Position) -> None:
    reason = redisops.check_loss(client, stream, after)
    if reason is None:
        return
    if opts.fail_on_data_loss:
        raise redisops.DataLoss(reason)
    _log.warning("data_loss_skipped: %s", reason)


def plan_ranges(
    client: Any, stream: str, rng: IdRange, first: StreamId, k: int, total: int | None
) -> list[IdRange]:
    """``rng`` (whose first entry is ``first``) cut into at most ``k`` ranges of about equal
    entry counts, from a few pipelined sample reads (see
    :func:`~streamworker.spark.ranges.count_cuts`). ``total``: the exact count when known."""
    if k <= 1:
        return [rng]
    probes = redisops.probe(client, stream, rng, first, PROBES_PER_TASK * k, PROBE_WINDOW)
    # A second look inside the slices that seem to hold much of a task's share: a burst is
    # then seen at a finer grain instead of being spread over its whole slice.
    counts = estimate_counts(probes, rng.hi.ms, PROBE_WINDOW)
    crowded = sum(counts) / (2 * k)
    finer: list[Probe] = []
    for i, probe in enumerate(probes):
        upto = probes[i + 1].at_ms if i + 1 < len(probes) else rng.hi.ms + 1
        if counts[i] > crowded and upto - probe.at_ms > 1:
            start = StreamId(probe.at_ms + 1, 0)
            inner = IdRange(
                rng.lo if rng.lo is not None and rng.lo >= start else start.prev(),
                min(rng.hi, StreamId(upto - 1, MAX_PART)),
            )
            finer.extend(redisops.probe(client, stream, inner, start, REFINE_PROBES, PROBE_WINDOW))
    if finer:
        merged = {p.at_ms: p for p in [*probes, *finer]}
        probes = [merged[t] for t in sorted(merged)]
    cuts = count_cuts(probes, rng.hi.ms, PROBE_WINDOW, k, total)
    return ranges_at_cuts(rng.lo, rng.hi, [c for c in cuts if rng.lo is None or c >= rng.lo.ms])


def task_budget(
    opts: ReadOptions, parallelism: int | None, sizes: dict[str, int]
) -> dict[str, int]:
    """Tasks per stream: ``numPartitions`` each when set; otherwise the session's parallelism
    shared by the streams in proportion to their (estimated) sizes, at least one per stream with
    entries, and no more than one per :data:`MIN_ROWS_PER_TASK` entries."""
    if opts.num_partitions is not None:
        return dict.fromkeys(sizes, opts.num_partitions)
    budget = parallelism or DEFAULT_PARALLELISM
    total = sum(sizes.values())
    out = {}
    for stream, size in sizes.items():
        share = round(budget * size / total) if total else 1
        out[stream] = max(1, min(share, math.ceil(size / MIN_ROWS_PER_TASK)))
    return out


# --------------------------------------------------------------------------------------------
# Filter pushdown (prune only: Spark evaluates every filter again on what is read)


def _epoch_ms(value: Any) -> tuple[int, int] | None:
    """(floor, ceil) epoch ms of a TIMESTAMP literal; None when its zone is unknown."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    us = round(value.timestamp() * 1_000_000)
    return us // 1000, -(-us // 1000)


@dataclass(frozen=True, slots=True)
class Pruning:
    """Bounds pushed filters put on what a batch read must read: milliseconds (``timestamp``
    and ``ms`` filters, exact) and ids (``id`` filters; only applied to a stream whose ids all
    have as many ms digits as the literal, where text order is id order)."""

    min_ms: int | None = None
    max_ms: int | None = None
    min_id: StreamId | None = None
    max_id: StreamId | None = None

    def narrow(self, other: Pruning) -> Pruning:
        """Both bounds at once."""

        def pick(a: Any, b: Any, f: Any) -> Any:
            return b if a is None else a if b is None else f(a, b)

        return Pruning(
            pick(self.min_ms, other.min_ms, max),
            pick(self.max_ms, other.max_ms, min),
            pick(self.min_id, other.min_id, max),
            pick(self.max_id, other.max_id, min),
        )

    def bounds(self, first: StreamId, last: StreamId) -> tuple[StreamId | None, StreamId | None]:
        """(lowest id to read, highest id to read) for a stream whose entries run from
        ``first`` to ``last``."""
        low = None if self.min_ms is None else StreamId(self.min_ms, 0)
        high = None if self.max_ms is None else StreamId(self.max_ms, MAX_PART)
        digits = len(str(first.ms))
        if len(str(last.ms)) == digits:
            if self.min_id is not None and len(str(self.min_id.ms)) == digits:
                # Text order: every id >= the literal has ms >= its ms (any seq).
                bound = StreamId(self.min_id.ms, 0)
                low = bound if low is None else max(low, bound)
            if self.max_id is not None and len(str(self.max_id.ms)) == digits:
                bound = StreamId(self.max_id.ms, MAX_PART)
                high = bound if high is None else min(high, bound)
        return low, high


def _prune_one(flt: Filter) -> Pruning | None:
    attribute: tuple[str, ...] = getattr(flt, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else None
    values: list[Any] = list(flt.value) if isinstance(flt, In) else [getattr(flt, "value", None)]
    lower = isinstance(flt, GreaterThan | GreaterThanOrEqual | EqualTo | In)
    upper = isinstance(flt, LessThan | LessThanOrEqual | EqualTo | In)
    if not (lower or upper) or not values:
        return None
    if column == "timestamp":
        spans = [_epoch_ms(v) for v in values]
        if any(s is None for s in spans):
            return None
        lo = min(s[0] for s in spans if s is not None)
        hi = max(s[1] for s in spans if s is not None)
        return Pruning(min_ms=lo if lower else None, max_ms=hi if upper else None)
    if column == "ms":
        ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) != len(values):
            return None
        return Pruning(
            min_ms=max(0, min(ints)) if lower else None, max_ms=max(ints) if upper else None
        )
    if column == "id":
        try:
            ids = [StreamId.parse(str(v)) for v in values]
        except ValueError:
            return None
        return Pruning(min_id=min(ids) if lower else None, max_id=max(ids) if upper else None)
    return None


def prune(filters: Iterable[Filter]) -> Pruning:
    """What the pushed ``filters`` (ANDed) allow to skip."""
    out = Pruning()
    for flt in filters:
        one = _prune_one(flt)
        if one is not None:
            out = out.narrow(one)
    return out


class RedisStreamsDataSource(DataSource):
    """``spark.read/readStream/df.write/writeStream.format("streamworker_redis")``; options in
    docs/spark.md (``url`` and ``streams`` at least).

    :func:`streamworker.spark.register` registers a subclass carrying the session's settings
    (default parallelism, filter pushdown): the class attributes below are its defaults.
    """

    parallelism: int | None = None
    pushdown: bool = False

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        opts = parse_read_options(self.options)
        columns = _columns(opts)
        base = base_columns(opts.fields_type)
        return base if columns is None else f"{base}, {columns.schema}"

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options)
        if self.pushdown:
            return PushdownBatchReader(opts, self.parallelism)
        return BatchReader(opts, self.parallelism)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options), self.parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(parse_write_options(self.options, streaming=False), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(parse_write_options(self.options, streaming=True), schema, overwrite)


def session_source(parallelism: int | None, pushdown: bool) -> type[RedisStreamsDataSource]:
    """A :class:`RedisStreamsDataSource` subclass carrying one session's settings. Made at run
    time, it is pickled by value (cloudpickle finds no module attribute of that name), so the
    settings travel with it to the Python workers that plan the reads."""
    return type(
        "RedisStreamsDataSource",
        (RedisStreamsDataSource,),
        {
            "parallelism": parallelism,
            "pushdown": pushdown,
            "__module__": __name__,
            "__qualname__": "RedisStreamsDataSource.<registered>",
        },
    )


# --------------------------------------------------------------------------------------------
# Batch read


class BatchReader(DataSourceReader):
    """Reads each stream between ``startId`` and ``endId`` in id ranges of about equal entry
    counts. The end is pinned to the last entry when the query is planned: entries added later
    never leak in."""

    def __init__(self, opts: ReadOptions, parallelism: int | None = None) -> None:
        self.opts = opts
        self.parallelism = parallelism
        self.pruning = Pruning()

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        parts: list[InputPartition] = []
        client = redisops.connect(opts.url)
        try:
            planned: dict[str, tuple[IdRange, StreamId, int, int | None]] = {}
            for stream in redisops.resolve_streams(client, opts.streams):
                found = self._bounds(client, stream)
                if found is not None:
                    planned[stream] = found
            tasks = task_budget(
                opts, self.parallelism, {s: size for s, (_, _, size, _) in planned.items()}
            )
            for stream, (rng, first, _, exact) in planned.items():
                for part in plan_ranges(client, stream, rng, first, tasks[stream], exact):
                    lo_text = None if part.lo is None else str(part.lo)
                    parts.append(StreamRange(stream, lo_text, str(part.hi)))
        finally:
            client.close()
        # Spark needs at least one partition; an empty range reads nothing.
        return parts or [StreamRange(opts.streams[0], "0-1", "0-1")]

    def _bounds(self, client: Any, stream: str) -> tuple[IdRange, StreamId, int, int | None] | None:
        """(range, its first entry, estimated entries, exact entries or None) of ``stream``,
        or None when there is nothing to read."""
        opts = self.opts
        top = redisops.last_entry(client, stream)
        bottom = redisops.first_entry_after(client, stream, None)
        if top is None or bottom is None:
            return None
        low, high = self.pruning.bounds(bottom, top)
        start = max(filter(None, [opts.start_id, low]), default=None)
        end = min(filter(None, [opts.end_id, high]), default=None)
        hi = top if end is None or end >= top else redisops.last_entry(client, stream, end)
        lo = None if start is None else start.prev()
        if hi is None or (lo is not None and hi <= lo):
            return None
        first = bottom if lo is None else redisops.first_entry_after(client, stream, lo, hi)
        if first is None:
            return None
        rng = IdRange(lo, hi)
        if lo is None and hi == top:
            exact = redisops.length(client, stream)
            return rng, first, exact, exact
        # Part of the stream: its share of the length, by time (only sizes the task budget).
        whole = max(1, top.ms - bottom.ms + 1)
        share = (hi.ms - first.ms + 1) / whole
        return rng, first, max(1, int(redisops.length(client, stream) * share)), None

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, StreamRange)
        if partition.lo is not None and partition.lo == partition.hi:
            return iter(())
        return _read_partition(self.opts, partition)


class PushdownBatchReader(BatchReader):
    """:class:`BatchReader` with filter pushdown (Spark >= 4.1, with
    ``spark.sql.python.filterPushdown.enabled``, which :func:`~streamworker.spark.register`
    turns on): comparisons of ``timestamp``, ``ms`` and ``id`` with literals narrow the id
    ranges read. Every filter is handed back to Spark, which evaluates it again on the rows:
    pruning never changes a result, even where text order (Spark's, for ``id``) differs from
    id order."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pruning = self.pruning.narrow(prune(filters))
        return filters


# --------------------------------------------------------------------------------------------
# Streaming read


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{stream: "<last id read>/<entries up to it>"}``, kept in Spark's checkpoint
    (never in a consumer group: this reader creates, reads and moves no group). A micro-batch
    reads ``(start, end]`` of each stream, a pure function of the logged offsets, so a re-run
    batch reads the same entries. The streams are resolved again for every batch, so a
    partition (or a stream a glob matches) that appears later joins, read from its start.
    ``maxRecordsPerBatch`` caps a batch; ``Trigger.AvailableNow`` stops at the ends seen when
    the query started. Entries trimmed before they were read fail the query
    (``failOnDataLoss``). With ``cursorName`` the committed position is published for
    :func:`~streamworker.spark.redisops.safe_trim` (it lags a batch: see docs/spark.md).
    """

    def __init__(self, opts: ReadOptions, parallelism: int | None = None) -> None:
        self.opts = opts
        self.parallelism = parallelism
        self._target: dict[str, str] | None = None

    def _streams(self, client: Any) -> list[str]:
        return redisops.resolve_streams(client, self.opts.streams)

    def _heads(self, client: Any, streams: Iterable[str]) -> dict[str, str]:
        heads = {}
        for stream in streams:
            state = redisops.stream_state(client, stream)
            if state is None:
                heads[stream] = str(Position(StreamId(0, 0), 0))
            else:
                heads[stream] = str(Position(state.last_generated, state.entries_added))
        return heads

    def _earliest(self, client: Any, stream: str) -> str:
        state = redisops.stream_state(client, stream)
        # Entries removed before the query began (or saw the stream) are not a loss for it.
        gone = 0 if state is None else state.entries_added - state.length
        return str(Position(StreamId(0, 0), gone))

    def initialOffset(self) -> dict[str, str]:
        client = redisops.connect(self.opts.url)
        try:
            streams = self._streams(client)
            starting = self.opts.starting_id
            if starting == "latest":
                return self._heads(client, streams)
            if starting == "earliest":
                return {s: self._earliest(client, s) for s in streams}
            return {s: str(Position(StreamId.parse(starting), -1)) for s in streams}
        finally:
            client.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_batch is not None:
            return ReadMaxRows(self.opts.max_records_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        client = redisops.connect(self.opts.url)
        try:
            self._target = self._heads(client, self._streams(client))
        finally:
            client.close()

    def _start(self, start: dict[str, str], stream: str) -> Position:
        return Position.parse(start.get(stream, "0-0/-1"))

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        client = redisops.connect(self.opts.url)
        try:
            if self._target is not None:
                heads = self._target
            else:
                streams = self._streams(client)
                heads = self._heads(client, [*start, *(s for s in streams if s not in start)])
            pos: dict[str, Position] = {}
            active: list[str] = []
            for stream, head_text in heads.items():
                if stream in start:
                    begin = self._start(start, stream)
                else:
                    # A stream that joined after the query started: read from its beginning.
                    begin = Position.parse(self._earliest(client, stream))
                pos[stream] = begin
                if Position.parse(head_text).id > begin.id:
                    _check_loss(client, self.opts, stream, begin)
                    active.append(stream)
            for stream, text in start.items():
                pos.setdefault(stream, Position.parse(text))
            if not isinstance(limit, ReadMaxRows):
                return {s: heads[s] if s in active else str(pos[s]) for s in pos}
            # Share the cap among the streams with entries left; what one stream cannot use
            # goes to the others in the next pass.
            budget = limit.max_rows
            while budget > 0 and active:
                still: list[str] = []
                for i, stream in enumerate(active):
                    share = max(1, budget // (len(active) - i)) if budget > 0 else 0
                    if share == 0:
                        break
                    head = Position.parse(heads[stream])
                    here = pos[stream]
                    upto, taken = redisops.nth_entry_after(client, stream, here.id, head.id, share)
                    budget -= taken
                    if upto is None or taken < share:
                        pos[stream] = head  # everything up to the head is in this batch
                    elif upto >= head.id:
                        pos[stream] = head
                    else:
                        pos[stream] = Position(upto, here.n + taken if here.n >= 0 else -1)
                        still.append(stream)
                active = still
            return {s: str(p) for s, p in pos.items()}
        finally:
            client.close()

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        parts: list[InputPartition] = []
        client = redisops.connect(self.opts.url)
        try:
            planned: dict[str, tuple[Position, IdRange, StreamId, int | None]] = {}
            for stream, end_text in end.items():
                lo = self._start(start, stream)
                hi = Position.parse(end_text)
                if hi.id <= lo.id:
                    continue
                _check_loss(client, self.opts, stream, lo)
                first = redisops.first_entry_after(client, stream, lo.id, hi.id)
                if first is None:
                    continue
                # The offsets carry entry counts: the batch's size, without reading it.
                exact = hi.n - lo.n if hi.n >= 0 and lo.n >= 0 else None
                lo_id = None if lo.id == StreamId(0, 0) else lo.id
                planned[stream] = (lo, IdRange(lo_id, hi.id), first, exact)
            # Without counts (a query started at an id), the stream's length bounds the batch.
            sizes = {
                s: exact if exact is not None else redisops.length(client, s)
                for s, (_, _, _, exact) in planned.items()
            }
            tasks = task_budget(self.opts, self.parallelism, sizes)
            for stream, (lo, rng, first, exact) in planned.items():
                ranges = plan_ranges(client, stream, rng, first, tasks[stream], exact)
                for k, part in enumerate(ranges):
                    # The first range starts at the batch's start, whose count is known.
                    start_pos = str(lo) if k == 0 else None
                    lo_text = None if part.lo is None else str(part.lo)
                    parts.append(StreamRange(stream, lo_text, str(part.hi), check_from=start_pos))
        finally:
            client.close()
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, StreamRange)
        return _read_partition(self.opts, partition)

    def commit(self, end: dict[str, str]) -> None:
        # Spark calls this a batch late, and never for the last batch of an availableNow run:
        # the published cursor trails the real position, which keeps trimming on the safe side.
        if self.opts.cursor_name is None:
            return
        client = redisops.connect(self.opts.url)
        try:
            ids = {s: str(Position.parse(p).id) for s, p in end.items()}
            redisops.publish_cursor(client, self.opts.cursor_name, ids)
        finally:
            client.close()

    def stop(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The sink


@dataclass
class Staged(WriterCommitMessage):
    """One task's staged rows: ``(target stream, staging list key, row count)``."""

    staged: list[tuple[str, str, int]]


def _cell_bytes(value: Any) -> bytes | None:
    """A DataFrame cell as a field value: None for a null (the field is left out), ``1``/``0`` for
    a boolean, else :func:`~streamworker.io.redisio.as_bytes`."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"1" if value else b"0"
    return as_bytes(value)


class _RowLayout:
    """Where a row's target, id and fields are, from the DataFrame's schema."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        names = schema.fieldNames()
        self.target_col = names.index("stream") if "stream" in names else None
        self.id_col = names.index("id") if "id" in names else None
        self.fields_col: int | None = None
        self.field_cols: list[tuple[int, bytes]] = []
        if "fields" in names:
            self.fields_col = names.index("fields")
            kind = schema["fields"].dataType
            if not isinstance(kind, MapType):
                raise ConfigError("column fields must be a MAP<STRING, STRING|BINARY>")
        else:
            skip = {"stream", "id", "ms", "seq", "timestamp"}
            self.field_cols = [(i, n.encode()) for i, n in enumerate(names) if n not in skip]
        self.router: PartitionedStream | None = None
        self.key_col: int | None = None
        if opts.partitions is not None:
            assert opts.stream is not None  # checked with the options
            if opts.key_column not in names:
                raise ConfigError(
                    f"option partitions: rows need a {opts.key_column!r} column to route by "
                    f"(option keyColumn names another)"
                )
            self.router = PartitionedStream(opts.stream, opts.partitions)
            self.key_col = names.index(opts.key_column)
        if opts.stream is None and self.target_col is None:
            raise ConfigError("no target stream: set option stream, or give rows a stream column")
        if opts.id_mode == "explicit" and self.id_col is None:
            raise ConfigError("idMode=explicit needs an id column")
        if self.fields_col is None and not self.field_cols:
            raise ConfigError("nothing to write: give rows a fields map or other columns")

    def encode(self, row: Any, opts: WriteOptions) -> tuple[str, bytes]:
        if self.router is not None:
            key = row[self.key_col]
            if key is None:
                raise ValueError(f"a row has a null {opts.key_column!r}: it routes to no partition")
            raw_key = bytes(key) if isinstance(key, bytes | bytearray) else str(key)
            target = self.router.stream_for(raw_key)
        else:
            target = opts.stream or row[self.target_col]
        if not target:
            raise ValueError("a row has no target stream (its stream column is null)")
        # Imported here: SQLAlchemy comes with it, and the read path's workers never need it.
        from streamworker.idempotency.sql import sortable_id

        entry_id = "" if self.id_col is None else row[self.id_col]
        sort_key = sortable_id(entry_id) if entry_id else ""
        pairs: list[tuple[bytes, bytes]] = []
        if self.fields_col is not None:
            mapping = row[self.fields_col] or {}
            for name, value in mapping.items():
                raw = _cell_bytes(value)
                if raw is not None:
                    pairs.append((str(name).encode("utf-8"), raw))
        else:
            for index, name in self.field_cols:
                raw = _cell_bytes(row[index])
                if raw is not None:
                    pairs.append((name, raw))
        explicit = entry_id if opts.id_mode == "explicit" else ""
        return str(target), redisops.encode_row(sort_key, explicit, pairs)


def _stage_rows(
    opts: WriteOptions, layout: _RowLayout, rows: Iterator[Any], query: str, token: str, part: int
) -> Staged:
    by_target: dict[str, list[bytes]] = {}
    for row in rows:
        target, encoded = layout.encode(row, opts)
        by_target.setdefault(target, []).append(encoded)
    staged: list[tuple[str, str, int]] = []
    client = redisops.connect(opts.url)
    try:
        for target, encoded_rows in by_target.items():
            key = redisops.staging_key(target, query, token, part)
            redisops.stage(client, key, encoded_rows, opts.staging_ttl_s)
            staged.append((target, key, len(encoded_rows)))
    finally:
        client.close()
    return Staged(staged)


def _commit_all(
    opts: WriteOptions,
    messages: Sequence[WriterCommitMessage | None],
    query: str | None,
    batch_id: int | None,
) -> list[redisops.CommitResult]:
    keys: dict[str, list[str]] = {}
    for message in messages:
        if isinstance(message, Staged):
            for target, key, _ in message.staged:
                keys.setdefault(target, []).append(key)
    wait = ReplicaWait(opts.wait_replicas, opts.wait_timeout_ms)
    client = redisops.connect(opts.url)
    try:
        return [
            redisops.commit_staged(
                client,
                target,
                staged,
                query=query,
                batch_id=batch_id,
                id_mode=opts.id_mode,
                wait=wait,
            )
            for target, staged in sorted(keys.items())
        ]
    finally:
        client.close()


def _drop(opts: WriteOptions, messages: Sequence[WriterCommitMessage | None]) -> None:
    keys = [k for m in messages if isinstance(m, Staged) for _, k, _ in m.staged]
    client = redisops.connect(opts.url)
    try:
        redisops.drop_staging(client, keys)
    finally:
        client.close()


def _task() -> tuple[int, str | None]:
    ctx = TaskContext.get()
    if ctx is None:
        return 0, None
    return ctx.partitionId(), ctx.getLocalProperty("streaming.sql.batchId")


class BatchWriter(DataSourceWriter):
    """``df.write``: each task stages its rows; the driver's commit appends every target's rows
    in one script, in id order when rows have an ``id`` column. With ``queryName`` and
    ``batchId``, re-running the same write adds nothing."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigError(f"{FORMAT}: streams are append-only; use mode('append')")
        self.opts = opts
        self.layout = _RowLayout(opts, schema)
        # The driver makes one writer and pickles it to every task: they share the token.
        self.token = f"b{opts.batch_id}" if opts.batch_id is not None else uuid.uuid4().hex
        self.results: list[redisops.CommitResult] = []

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        part, _ = _task()
        query = self.opts.query_name or "batch"
        return _stage_rows(self.opts, self.layout, iterator, query, self.token, part)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.results = _commit_all(self.opts, messages, self.opts.query_name, self.opts.batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _drop(self.opts, messages)


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream``: exactly once per micro-batch. Tasks stage their rows under the batch
    id; ``commit(messages, batchId)`` appends them in one script per target that first checks the
    ``(target, queryName)`` marker: a re-run batch (same batchId) adds nothing."""

    def __init__(self, opts: WriteOptions, schema: StructType, overwrite: bool) -> None:
        self.opts = opts
        self.layout = _RowLayout(opts, schema)
        self.results: list[redisops.CommitResult] = []

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        part, batch = _task()
        if batch is None:
            raise RuntimeError("no streaming batch id in this task (not run by writeStream?)")
        assert self.opts.query_name is not None
        return _stage_rows(self.opts, self.layout, iterator, self.opts.query_name, batch, part)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.results = _commit_all(self.opts, messages, self.opts.query_name, batchId)
        for result in self.results:
            if result.replayed:
                _log.info("sink_batch_replayed target=%s batch=%s", result.target, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _drop(self.opts, messages)
