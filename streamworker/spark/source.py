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
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
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
from streamworker.idempotency.sql import sortable_id
from streamworker.spark import redisops
from streamworker.spark.model import BASE_COLUMNS, ModelColumns, model_columns
from streamworker.spark.options import (
    FORMAT,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from streamworker.spark.ranges import IdRange, Position, StreamId, split_range

_log = logging.getLogger("streamworker.spark")


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


def _columns(opts: ReadOptions) -> ModelColumns | None:
    return None if opts.model is None else model_columns(opts.model, opts.body_field)


def _read_partition(opts: ReadOptions, part: StreamRange) -> Iterator[Any]:
    columns = _columns(opts)
    client = redisops.connect(opts.url)
    try:
        rng = part.id_range
        if part.check_from is not None:
            _check_loss(client, opts, part.stream, Position.parse(part.check_from))
        if columns is None:
            # Arrow batches, one per page: Spark takes them without converting row by row.
            yield from _arrow_pages(client, part.stream, rng, opts.page_size)
            return
        for row in redisops.read_range(client, part.stream, rng, opts.page_size):
            yield (*row, *columns.values(row[4]))
    finally:
        client.close()


def _arrow_pages(client: Any, stream: str, rng: IdRange, page_size: int) -> Iterator[Any]:
    import pyarrow as pa

    fields_type = pa.map_(pa.string(), pa.binary())
    rows: list[redisops.Row] = []
    for row in redisops.read_range(client, stream, rng, page_size):
        rows.append(row)
        if len(rows) >= page_size:
            yield _arrow_batch(pa, fields_type, rows)
            rows = []
    if rows:
        yield _arrow_batch(pa, fields_type, rows)


def _arrow_batch(pa: Any, fields_type: Any, rows: list[redisops.Row]) -> Any:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.string()),
            pa.array([r[1] for r in rows], pa.string()),
            pa.array([r[2] for r in rows], pa.int64()),
            pa.array([r[3] for r in rows], pa.int64()),
            pa.array([list(r[4].items()) for r in rows], fields_type),
        ],
        names=["stream", "id", "ms", "seq", "fields"],
    )


def _check_loss(client: Any, opts: ReadOptions, stream: str, after: Position) -> None:
    reason = redisops.check_loss(client, stream, after)
    if reason is None:
        return
    if opts.fail_on_data_loss:
        raise redisops.DataLoss(reason)
    _log.warning("data_loss_skipped: %s", reason)


class RedisStreamsDataSource(DataSource):
    """``spark.read/readStream/df.write/writeStream.format("streamworker_redis")``; options in
    docs/spark.md (``url`` and ``streams`` at least)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        opts = parse_read_options(self.options)
        columns = _columns(opts)
        return BASE_COLUMNS if columns is None else f"{BASE_COLUMNS}, {columns.schema}"

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(parse_write_options(self.options, streaming=False), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(parse_write_options(self.options, streaming=True), schema, overwrite)


# --------------------------------------------------------------------------------------------
# Batch read


class BatchReader(DataSourceReader):
    """Reads each stream between ``startId`` and ``endId`` in ``numPartitions`` id ranges. The end
    is pinned to the last entry when the query is planned: entries added later never leak in."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        parts: list[InputPartition] = []
        client = redisops.connect(opts.url)
        try:
            for stream in opts.streams:
                hi = redisops.last_entry(client, stream, opts.end_id)
                lo = None if opts.start_id is None else opts.start_id.prev()
                if hi is None or (lo is not None and hi <= lo):
                    continue
                first = redisops.first_entry_after(client, stream, lo, hi)
                if first is None:
                    continue
                for rng in split_range(lo, first, hi, opts.num_partitions):
                    lo_text = None if rng.lo is None else str(rng.lo)
                    parts.append(StreamRange(stream, lo_text, str(rng.hi)))
        finally:
            client.close()
        # Spark needs at least one partition; an empty range reads nothing.
        return parts or [StreamRange(opts.streams[0], "0-1", "0-1")]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, StreamRange)
        if partition.lo is not None and partition.lo == partition.hi:
            return iter(())
        return _read_partition(self.opts, partition)


# --------------------------------------------------------------------------------------------
# Streaming read


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{stream: "<last id read>/<entries up to it>"}``, kept in Spark's checkpoint
    (never in a consumer group: this reader creates, reads and moves no group). A micro-batch
    reads ``(start, end]`` of each stream, a pure function of the logged offsets, so a re-run
    batch reads the same entries. ``maxRecordsPerBatch`` caps a batch; ``Trigger.AvailableNow``
    stops at the ends seen when the query started. Entries trimmed before they were read fail
    the query (``failOnDataLoss``). With ``cursorName`` the committed position is published for
    :func:`~streamworker.spark.redisops.safe_trim` (it lags a batch: see docs/spark.md).
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[str, str] | None = None

    def _heads(self, client: Any) -> dict[str, str]:
        heads = {}
        for stream in self.opts.streams:
            state = redisops.stream_state(client, stream)
            if state is None:
                heads[stream] = str(Position(StreamId(0, 0), 0))
            else:
                heads[stream] = str(Position(state.last_generated, state.entries_added))
        return heads

    def initialOffset(self) -> dict[str, str]:
        client = redisops.connect(self.opts.url)
        try:
            starting = self.opts.starting_id
            if starting == "latest":
                return self._heads(client)
            offsets = {}
            for stream in self.opts.streams:
                state = redisops.stream_state(client, stream)
                if starting == "earliest":
                    # Entries removed before the query began are not a loss for it.
                    gone = 0 if state is None else state.entries_added - state.length
                    offsets[stream] = str(Position(StreamId(0, 0), gone))
                else:
                    offsets[stream] = str(Position(StreamId.parse(starting), -1))
            return offsets
        finally:
            client.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_batch is not None:
            return ReadMaxRows(self.opts.max_records_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        client = redisops.connect(self.opts.url)
        try:
            self._target = self._heads(client)
        finally:
            client.close()

    def _start(self, start: dict[str, str], stream: str) -> Position:
        return Position.parse(start.get(stream, "0-0/-1"))

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        client = redisops.connect(self.opts.url)
        try:
            heads = self._target if self._target is not None else self._heads(client)
            pos: dict[str, Position] = {}
            active: list[str] = []
            for stream in self.opts.streams:
                pos[stream] = begin = self._start(start, stream)
                if Position.parse(heads[stream]).id > begin.id:
                    _check_loss(client, self.opts, stream, begin)
                    active.append(stream)
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
            for stream in self.opts.streams:
                lo = self._start(start, stream)
                hi = Position.parse(end.get(stream, str(lo))).id
                if hi <= lo.id:
                    continue
                _check_loss(client, self.opts, stream, lo)
                first = redisops.first_entry_after(client, stream, lo.id, hi)
                if first is None:
                    continue
                for k, rng in enumerate(split_range(lo.id, first, hi, self.opts.num_partitions)):
                    # The first range starts at the batch's start, whose count is known.
                    start_pos = str(lo) if k == 0 else None
                    lo_text = None if rng.lo is None else str(rng.lo)
                    parts.append(StreamRange(stream, lo_text, str(rng.hi), check_from=start_pos))
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


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, bool):
        return b"1" if value else b"0"
    return str(value).encode("utf-8")


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
            skip = {"stream", "id", "ms", "seq"}
            self.field_cols = [(i, n.encode()) for i, n in enumerate(names) if n not in skip]
        if opts.stream is None and self.target_col is None:
            raise ConfigError("no target stream: set option stream, or give rows a stream column")
        if opts.id_mode == "explicit" and self.id_col is None:
            raise ConfigError("idMode=explicit needs an id column")
        if self.fields_col is None and not self.field_cols:
            raise ConfigError("nothing to write: give rows a fields map or other columns")

    def encode(self, row: Any, opts: WriteOptions) -> tuple[str, bytes]:
        target = opts.stream or row[self.target_col]
        if not target:
            raise ValueError("a row has no target stream (its stream column is null)")
        entry_id = "" if self.id_col is None else row[self.id_col]
        sort_key = sortable_id(entry_id) if entry_id else ""
        pairs: list[tuple[bytes, bytes]] = []
        if self.fields_col is not None:
            mapping = row[self.fields_col] or {}
            for name, value in mapping.items():
                raw = _as_bytes(value)
                if raw is not None:
                    pairs.append((str(name).encode("utf-8"), raw))
        else:
            for index, name in self.field_cols:
                raw = _as_bytes(row[index])
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
    client = redisops.connect(opts.url)
    try:
        return [
            redisops.commit_staged(
                client, target, staged, query=query, batch_id=batch_id, id_mode=opts.id_mode
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
