"""Redis Cluster: one stream against 4 and 8 partitions, in one run.

Run: ``python -m benchmarks.cluster_bench`` (or ``make bench``). Starts its own 3-master Redis
Cluster on loopback (``redis-cli --cluster create``; or uses ``--redis-url
redis+cluster://…``, which it FLUSHALLs) and prints one table.

For each layout (``1`` stream ``bench``, or the partitioned stream ``bench`` with 4 or 8
partitions) and each mode, the same ``--messages`` messages (keys ``k0`` … ``k999``, routed by
:class:`~streamworker.producing.partitions.PartitionedStream`) are added first; then ``--processes`` worker
processes (``Worker`` in a spawned process each, consumer ``w0``, ``w1``, …) consume them with an
``async def`` handler:

* ``none``: ``idempotency="none"``, a no-op handler;
* ``lua``: ``idempotency="lua"``, the handler returns one effect (HINCRBY in the stream's slot);
* ``lua-ordered``: ``lua`` with ``ordered=True`` (one consumer per stream, one message per
  round; on the single stream only one process works).

Progress is sampled every 50 ms (XINFO GROUPS: entries-read minus pending, per stream) and the
rate is taken between 10% and 90% of the messages, leaving out start-up and the tail. Variants
are run in rounds, interleaved, and the median of ``--rounds`` is printed. The figures depend on
the machine's cores: on a small shared machine the workers, the three masters and this process
compete for the same CPUs, so the numbers are noisy; re-run on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GROUP = "bench"
LAYOUTS = (1, 4, 8)
MODES = ("none", "lua", "lua-ordered")


def _streams(partitions: int) -> list[str]:
    from streamworker.producing.partitions import PartitionedStream

    if partitions == 1:
        return ["bench"]
    return PartitionedStream("bench", partitions).streams()


def _worker(url: str, partitions: int, mode: str, consumer: str, batch: int) -> None:
    """A worker process: the bench App on ``url`` until SIGTERM."""
    from streamworker import App, Effects, Message
    from streamworker.io.keys import in_stream_slot
    from streamworker.observability.logging import configure_logging
    from streamworker.runtime.worker import Worker, WorkerOptions

    configure_logging("console", "warning")
    app = App("cluster-bench")
    options: dict[str, Any] = {"group": GROUP, "batch_size": batch, "block_ms": 200}
    if partitions > 1:
        options["partitions"] = partitions
    if mode != "none":
        options["idempotency"] = "lua"
    if mode == "lua-ordered":
        options["ordered"] = True
        options["claim_idle_ms"] = 10_000

    if mode == "none":

        @app.handler("bench", **options)
        async def noop(msg: Message) -> None:
            return None

    else:

        @app.handler("bench", **options)
        async def count(msg: Message) -> Effects:
            return Effects().hincrby(in_stream_slot(msg.stream, "count"), msg.fields["k"], 1)

    worker = Worker(app, WorkerOptions(redis_url=url, consumer=consumer, shutdown_timeout_s=5.0))
    asyncio.run(worker.run())


def _fill(client: Any, partitions: int, messages: int) -> None:
    from streamworker.producing.partitions import PartitionedStream

    streams = _streams(partitions)
    route = PartitionedStream("bench", partitions) if partitions > 1 else None
    for stream in streams:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True, entries_read=0)
    pipe = client.pipeline(transaction=False)
    for i in range(messages):
        key = f"k{i % 1000}"
        stream = route.stream_for(key) if route is not None else streams[0]
        pipe.xadd(stream, {"k": key, "i": str(i)})
        if i % 1000 == 999:
            pipe.execute()
            pipe = client.pipeline(transaction=False)
    pipe.execute()


def _acked(client: Any, streams: list[str]) -> int:
    done = 0
    for stream in streams:
        for group in client.xinfo_groups(stream):
            if group["name"] in (GROUP, GROUP.encode()):
                done += int(group["entries-read"] or 0) - int(group["pending"])
    return done


def run_variant(
    url: str, partitions: int, mode: str, messages: int, processes: int, batch: int
) -> float:
    """Messages per second of one variant (between 10% and 90% acked)."""
    from streamworker.io.redisio import open_sync_redis

    client = open_sync_redis(url)
    try:
        client.flushall()
        _fill(client, partitions, messages)
        streams = _streams(partitions)
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(target=_worker, args=(url, partitions, mode, f"w{i}", batch))
            for i in range(processes)
        ]
        for p in procs:
            p.start()
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + 300
        try:
            while True:
                done = _acked(client, streams)
                samples.append((time.monotonic(), done))
                if done >= messages:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{mode}/{partitions}: only {done}/{messages} in 300 s")
                time.sleep(0.05)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.join(30)
    finally:
        client.close()
    low = next(t for t, n in samples if n >= messages * 0.1)
    high = next(t for t, n in samples if n >= messages * 0.9)
    return messages * 0.8 / max(high - low, 1e-6)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every layout and mode, interleaved; print the median msgs/s per variant."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument(
        "--redis-url", help="a redis+cluster:// URL to use (FLUSHALLed) instead of starting one"
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.support.cluster import LocalCluster

    cluster = None
    try:
        url = args.redis_url
        if url is None:
            cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="sw-cluster-bench-"))).start()
            url = cluster.url
        from streamworker.io.redisio import open_sync_redis

        probe = open_sync_redis(url)
        version = probe.info("server")["redis_version"]  # the default node's
        probe.close()
        print(
            f"redis {version} cluster, 3 masters; {args.messages} messages per variant, "
            f"{args.processes} worker processes, batch {args.batch}, {args.rounds} rounds (median)"
        )
        results: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.rounds):
            for mode in modes:
                for partitions in LAYOUTS:
                    rate = run_variant(
                        url, partitions, mode, args.messages, args.processes, args.batch
                    )
                    results.setdefault((mode, partitions), []).append(rate)
        print()
        print("| mode | 1 stream msgs/s | 4 partitions msgs/s | 8 partitions msgs/s | 8 / 1 |")
        print("|---|---:|---:|---:|---:|")
        for mode in modes:
            rates = [statistics.median(results[(mode, p)]) for p in LAYOUTS]
            print(
                f"| {mode} | {rates[0]:.0f} | {rates[1]:.0f} | {rates[2]:.0f} | "
                f"{rates[2] / rates[0]:.2f}x |"
            )
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
