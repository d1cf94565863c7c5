"""Archive a stream to Parquet with an ``availableNow`` streaming query, then (optionally) trim
what every consumer has finished with.

The archive is a ``readStream`` of ``streamworker_redis`` into Spark's Parquet sink, partitioned
by the entry's UTC date (``date=YYYY-MM-DD``), with its own checkpoint. Both halves are
exactly-once across crashes: the source re-reads a logged id range, and the Parquet sink's
``_spark_metadata`` log skips a batch it has committed already.

The archive's position is published as the cursor ``cursor_name`` of the stream, so that
:func:`~streamworker.spark.redisops.safe_trim` never trims past what is archived. The source's
own ``commit()`` publishes a batch late and never for an ``availableNow`` run's last batch, so
after the query ends the position is read from the checkpoint (the last batch with a
``commits/N`` file, whose end offset is in ``offsets/N``) and published again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamworker.errors import StreamworkerError
from streamworker.io.replicawait import DEFAULT_WAIT_TIMEOUT_MS, ReplicaWait
from streamworker.spark import redisops
from streamworker.spark.options import FORMAT
from streamworker.spark.ranges import Position

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    """What one :func:`archive` run wrote."""

    stream: str
    rows: int
    batches: int
    position: str | None  # the last archived id (None: nothing archived yet)
    positions: dict[str, str] | None = None  # per stream key (a partitioned stream's partitions)


def committed_offset(checkpoint: str | Path) -> dict[str, str] | None:
    """The source offset of the last committed batch of a streaming checkpoint (None when no
    batch has committed). Only local (or mounted) checkpoint directories are read."""
    root = Path(checkpoint)
    commits = root / "commits"
    if not commits.is_dir():
        return None
    done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    if not done:
        return None
    lines = (root / "offsets" / str(done[0])).read_text("utf-8").splitlines()
    # "v1", the batch metadata, then one line per source (ours is the only one).
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise StreamworkerError(f"unexpected offsets file in {root}: {lines[:1]}")
    offset = json.loads(lines[2])
    if not isinstance(offset, dict):
        raise StreamworkerError(f"unexpected source offset in {root}: {lines[2]!r}")
    # Our offsets are "<id>/<count>" per stream: the id is the position.
    return {str(k): str(Position.parse(str(v)).id) for k, v in offset.items()}


Progress = Callable[[int, int], None]
"""Called with (batches done, rows archived so far) while the query runs."""


def archive(
    spark: SparkSession,
    stream: str,
    path: str,
    *,
    url: str,
    checkpoint: str | None = None,
    cursor_name: str = "archive",
    max_records_per_batch: int | None = 100_000,
    num_partitions: int = 2,
    progress: Progress | None = None,
    poll_s: int = 1,
    wait_replicas: int = 0,
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
) -> ArchiveResult:
    """Append every entry of ``stream`` (a stream key, or a partitioned stream's name: all its
    partitions) not archived yet to Parquet under ``path`` and publish the archived position of
    each stream key as cursor ``cursor_name``. Blocks until the run is done; raises
    StreamworkerError when the query fails (e.g. entries were trimmed before they were
    archived: the source's data-loss check). Safe to re-run, and to kill and re-run.

    ``wait_replicas``: the archived position (the cursor a trim is bounded by) is published only
    once that many replicas have it, so that a trim that follows is decided on a position a
    failover cannot take back (ReplicaWaitTimeout after ``wait_timeout_ms``: run it again)."""
    wait = ReplicaWait(wait_replicas, wait_timeout_ms)
    from pyspark.sql import functions as F

    from streamworker.spark.registration import register

    register(spark)
    ckpt = checkpoint or str(Path(path) / "_checkpoint")
    reader = (
        spark.readStream.format(FORMAT)
        .option("url", url)
        .option("streams", stream)
        .option("cursorName", cursor_name)
        .option("numPartitions", num_partitions)
    )
    if max_records_per_batch is not None:
        reader = reader.option("maxRecordsPerBatch", max_records_per_batch)
    # The UTC day of the entry's id (not the session time zone).
    frame = reader.load().withColumn(
        "date", F.date_from_unix_date((F.col("ms") / 86_400_000).cast("int"))
    )
    query = (
        frame.writeStream.format("parquet")
        .option("path", path)
        .option("checkpointLocation", ckpt)
        .partitionBy("date")
        .trigger(availableNow=True)
        .start()
    )
    rows = batches = 0
    while query.isActive:
        seen = query.recentProgress
        batches = max(batches, max((p["batchId"] + 1 for p in seen), default=0))
        rows = max(rows, sum(int(p["numInputRows"]) for p in seen))
        if progress is not None:
            progress(batches, rows)
        query.awaitTermination(poll_s)
    error = query.exception()
    if error is not None:
        raise StreamworkerError(f"archiving {stream!r} failed: {error}")
    seen = query.recentProgress
    rows = sum(int(p["numInputRows"]) for p in seen)
    batches = sum(1 for p in seen if int(p["numInputRows"]) > 0)
    if progress is not None:
        progress(batches, rows)
    offset = committed_offset(ckpt)
    position = None if offset is None else offset.get(stream)
    if offset:
        # Every stream the query read: a partitioned stream's name stands for its partitions,
        # each trimmed by its own cursor.
        client = redisops.connect(url)
        try:
            redisops.publish_cursor(client, cursor_name, offset, wait=wait)
        finally:
            client.close()
    return ArchiveResult(stream, rows, batches, position, offset)
