"""``streamworker archive STREAM --to PATH``: archive a stream to Parquet on Spark, then
optionally trim what every group and Spark cursor is done with (argparse glue; the work is in
:mod:`streamworker.spark.archiving` and :mod:`streamworker.spark.redisops`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from streamworker.cli.common import refuse_in_memory_engine
from streamworker.cli.parsing import redis_url_flag, runs
from streamworker.cli.produce import add_wait_flags
from streamworker.cli.spark_jobs import check_redis, start_spark
from streamworker.errors import ConfigError
from streamworker.io.replicawait import ReplicaWait
from streamworker.ops.progress import Progress
from streamworker.settings import DEFAULT_REDIS_URL, load_settings


def _cmd_archive(args: argparse.Namespace) -> int:
    """Append the entries of STREAM not archived yet to Parquet under PATH, partitioned by date
    (a Spark availableNow query with its checkpoint in PATH/_checkpoint; safe to interrupt and
    re-run). With --trim, then remove the entries below the oldest one any consumer group or
    Spark cursor (the archive's included) still needs, in one atomic step. Needs the spark
    extra and Java."""
    from streamworker.spark import require_spark

    require_spark("streamworker archive")
    if args.max_records_per_batch is not None and args.max_records_per_batch < 1:
        raise ConfigError("--max-records-per-batch must be >= 1")
    settings = load_settings(
        redis_url=args.redis_url,
        wait_replicas=args.wait_replicas,
        wait_timeout_ms=args.wait_timeout_ms,
    )
    wait = ReplicaWait(settings.wait_replicas, settings.wait_timeout_ms)
    url = settings.redis_url_or(DEFAULT_REDIS_URL)
    refuse_in_memory_engine(url, "streamworker archive")
    check_redis(url)

    from streamworker.spark import redisops
    from streamworker.spark.archiving import archive

    progress = Progress(f"archive {args.stream}", sys.stderr)
    spark = start_spark(f"streamworker-archive-{args.stream}", args.master, progress)
    try:
        result = archive(
            spark,
            args.stream,
            args.to,
            url=url,
            checkpoint=args.checkpoint,
            cursor_name=args.cursor,
            max_records_per_batch=args.max_records_per_batch,
            progress=archive_progress(progress),
            wait_replicas=wait.replicas,
            wait_timeout_ms=wait.timeout_ms,
        )
    finally:
        spark.stop()
    progress.finish()
    data: dict[str, Any] = {
        "stream": args.stream,
        "path": args.to,
        "rows": result.rows,
        "batches": result.batches,
        "position": result.position,
    }
    if not args.json:
        print(
            f"{args.stream}: archived {result.rows} entries in {result.batches} batch(es) to "
            f"{args.to}; archived up to {result.position or 'nothing yet'}"
        )
    if args.trim:
        client = redisops.connect(url)
        try:
            trim = redisops.safe_trim(client, args.stream, require=(args.cursor,), wait=wait)
        finally:
            client.close()
        floor = {"": "nothing bounds the stream", "+": "everything consumed"}.get(
            trim.floor, f"below {trim.floor}"
        )
        data["trimmed"] = trim.trimmed
        if not args.json:
            print(
                f"{args.stream}: trimmed {trim.trimmed} entries ({floor}; {trim.groups} "
                f"group(s), {trim.cursors} cursor(s))"
            )
    if args.json:
        print(json.dumps(data, indent=2))
    return 0


def archive_progress(progress: Progress) -> Callable[[int, int], None]:
    """The ``progress(batches, rows)`` callback of :func:`~streamworker.spark.archiving.archive`
    as shown to an operator: until the first batch has rows, what Spark is doing; then the
    entries archived so far."""

    def report(batches: int, rows: int) -> None:
        if rows == 0:
            progress.status("waiting for the first batch" if batches == 0 else "reading")
        else:
            progress.update(rows)

    return report


def archive_arguments(cmd: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker archive``."""
    runs(cmd, _cmd_archive, example="streamworker archive orders --to /data/archive/orders --trim")
    cmd.add_argument("stream", metavar="STREAM")
    cmd.add_argument("--to", required=True, metavar="PATH", help="the Parquet directory")
    redis_url_flag(cmd)
    cmd.add_argument("--checkpoint", metavar="DIR", help="default: PATH/_checkpoint")
    cmd.add_argument(
        "--cursor", default="archive", metavar="NAME", help="cursor name (default: archive)"
    )
    cmd.add_argument(
        "--max-records-per-batch", type=int, default=100_000, metavar="N", help="default: 100000"
    )
    cmd.add_argument("--master", metavar="URL", help="Spark master (default: Spark's own)")
    cmd.add_argument("--trim", action="store_true", help="safe-trim the stream afterwards")
    cmd.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    add_wait_flags(cmd, "trim")
