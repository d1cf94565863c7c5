"""The crash test's Spark driver, run as ``python -m tests.spark.crash_driver URL DIR MODE``.

Two streaming queries read stream ``src`` in capped micro-batches: one into Parquet
(``DIR/out``), one into stream ``copy`` through the exactly-once sink. MODE ``forever`` runs them
(500 entries per batch) until the process group is killed; ``available-now`` finishes what is
left (5000 per batch) and exits 0. ``DIR/started-forever`` appears once both queries started (``available-now`` runs them in turn).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.spark.conftest import build_session


def main(url: str, workdir: str, mode: str) -> int:
    spark = build_session("streamworker-crash-test")
    frame = (
        spark.readStream.format("streamworker_redis")
        .option("url", url)
        .option("streams", "src")
        .option("maxRecordsPerBatch", 5_000 if mode == "available-now" else 500)
        .option("numPartitions", 2)
        .load()
    )
    available_now = mode == "available-now"
    parquet = frame.writeStream.format("parquet").option("path", f"{workdir}/out")
    parquet = parquet.option("checkpointLocation", f"{workdir}/ck-parquet")
    sink = (
        frame.select("id", "fields")
        .writeStream.format("streamworker_redis")
        .option("url", url)
        .option("stream", "copy")
        .option("queryName", "crash-test")
        .option("checkpointLocation", f"{workdir}/ck-redis")
    )
    if available_now:
        # One query after the other: two queries starting together in a fresh driver once failed
        # its first tasks with java.io.OptionalDataException (a task's configuration map read
        # while the other query's start was changing it), a Spark race, not the recovery's.
        for writer in (parquet.trigger(availableNow=True), sink.trigger(availableNow=True)):
            query = writer.start()
            query.awaitTermination()
            if query.exception() is not None:
                return 1
        spark.stop()
        return 0
    queries = [parquet.start(), sink.start()]
    (Path(workdir) / "started-forever").touch()
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            return 1
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
