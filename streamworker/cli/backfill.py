"""``streamworker backfill TARGET --stream S``: run an App's ``idempotency="sql"`` handler over a
stream's entries on Spark, exactly once together with the live workers (argparse glue and
progress; the work is in :mod:`streamworker.spark.backfill`)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

import redis

from streamworker.cli.common import refuse_in_memory_engine
from streamworker.cli.parsing import db_url_flag, redis_url_flag, runs
from streamworker.cli.spark_jobs import check_redis, start_spark
from streamworker.errors import ConfigError
from streamworker.ops.progress import Progress
from streamworker.settings import DEFAULT_REDIS_URL, load_settings

_POLL_S = 0.5
_FAILURES_SHOWN = 20


_JOB_GROUP = "streamworker-backfill"


def _tasks(spark: Any) -> tuple[int, int]:
    """(done, total) tasks of every stage of the backfill's jobs so far, finished ones included
    (from the driver's status tracker; no extra job)."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(_JOB_GROUP):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done, total


def _watch_tasks(spark: Any, progress: Progress, stop: threading.Event) -> None:
    """Until ``stop``: the backfill's tasks as progress, or "planning" before the first."""
    while not stop.wait(_POLL_S):
        done, total = _tasks(spark)
        if total:
            progress.update(done, total)
        else:
            progress.status("planning")


def _cmd_backfill(args: argparse.Namespace) -> int:
    """Read the entries of STREAM with Spark and run TARGET's idempotency='sql' handler over
    them on the executors, with the live workers' processed-messages table: a message handled
    by either is never handled twice. Entries the group has already delivered and acked are
    skipped. Needs the spark extra and Java."""
    from streamworker.spark import require_spark

    require_spark("streamworker backfill")
    settings = load_settings(redis_url=args.redis_url, db_url=args.db_url)
    if not settings.db_url:
        raise ConfigError("no database URL: pass --db-url or set STREAMWORKER_DB_URL")
    if args.partitions < 1:
        raise ConfigError("--partitions must be >= 1")
    url = settings.redis_url_or(DEFAULT_REDIS_URL)
    refuse_in_memory_engine(url, "streamworker backfill")

    def stream_exists(client: redis.Redis) -> None:
        if not client.exists(args.stream):
            raise ConfigError(f"stream {args.stream!r} does not exist")

    check_redis(url, stream_exists)

    from streamworker.spark import FORMAT, register, run_handler

    progress = Progress(f"backfill {args.stream}", sys.stderr, unit="tasks")
    spark = start_spark(f"streamworker-backfill-{args.stream}", args.master, progress)
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch_tasks, args=(spark, progress, stop), name="backfill-progress", daemon=True
    )
    try:
        register(spark)
        frame = (
            spark.read.format(FORMAT)
            .option("url", url)
            .option("streams", args.stream)
            .option("numPartitions", args.partitions)
            .load()
        )
        # The handler's jobs carry a group, so the watcher can follow exactly them.
        spark.sparkContext.setJobGroup(_JOB_GROUP, f"backfill {args.stream}")
        watcher.start()
        result = run_handler(
            frame,
            args.target,
            db_url=settings.db_url,
            redis_url=url,
            handler=args.handler,
            dead_letter=args.dead_letter,
            skip_delivered=not args.include_delivered,
        )
        stop.set()
        watcher.join()
        done, total = _tasks(spark)
        if total:
            progress.update(done, total)
        spark.sparkContext.setJobGroup("streamworker-report", f"backfill {args.stream} report")
        counts = {
            row["outcome"]: int(row["count"]) for row in result.groupBy("outcome").count().collect()
        }
        failures = [
            {"id": row["id"], "error": row["error"], "dead_letter_id": row["dead_letter_id"]}
            for row in result.where("outcome = 'failed'")
            .orderBy("id")
            .limit(_FAILURES_SHOWN)
            .collect()
        ]
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        spark.stop()
    progress.finish()
    summary = {k: counts.get(k, 0) for k in ("ok", "duplicate", "failed")}
    if args.json:
        data = {"target": args.target, "stream": args.stream, **summary, "failures": failures}
        print(json.dumps(data, indent=2))
        return 0
    total = sum(counts.values())
    print(
        f"{args.stream}: {total} entries: {summary['ok']} handled, {summary['duplicate']} "
        f"already processed, {summary['failed']} failed"
    )
    for failure in failures:
        print(f"failed {failure['id']}: {failure['error']}")
    return 0


def backfill_arguments(cmd: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker backfill``."""
    runs(
        cmd,
        _cmd_backfill,
        example="streamworker backfill billing.app:app --stream orders "
        "--db-url postgresql://billing@db/billing",
    )
    cmd.add_argument("target", metavar="TARGET", help="module:attr of the App (importable)")
    cmd.add_argument("--stream", required=True, metavar="STREAM")
    cmd.add_argument("--handler", metavar="NAME", help="when the App has several SQL handlers")
    redis_url_flag(cmd)
    db_url_flag(cmd)
    cmd.add_argument("--partitions", type=int, default=4, metavar="N", help="default: 4")
    cmd.add_argument("--dead-letter", action="store_true", help="dead-letter the entries that fail")
    cmd.add_argument(
        "--include-delivered",
        action="store_true",
        help="also handle entries the group delivered (only for history no worker handled)",
    )
    cmd.add_argument("--master", metavar="URL", help="Spark master (default: Spark's own)")
    cmd.add_argument("--json", action="store_true", help="machine-readable result on stdout")
