"""Bounded memory (issue #36 item 5): a worker's RSS over time with a slow handler on 100 KB
entries and a large backlog, without and with ``max_in_flight_bytes``.

Run: ``python -m benchmarks.memory_inflight_bench [--duration-s 60] [--entries 3000]``
(``--quick`` for a smoke run). For each variant the benchmark starts its own redis-server, fills
the stream ``bench`` with ``--entries`` entries of one 100 KB field, starts ``streamworker run
benchmarks/memory_inflight_app.py:app`` (batch size 500, ``--handler-ms`` per message) and samples
the worker's resident set (``/proc/PID/status`` VmRSS) every ``--sample-s`` for ``--duration-s``,
while the backlog lasts. It prints, per variant, the RSS at 10 s, its median and maximum after
the first 10 s (the interpreter's start-up), the slope of a least-squares line through those
samples (MB per minute: flat is ~0), and how many entries were handled.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from benchmarks.engine_bench import RedisServerProcess

ROOT = Path(__file__).resolve().parents[1]
APP = "benchmarks/memory_inflight_app.py:app"
ENTRY_BYTES = 100 * 1024
WARMUP_S = 10.0


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str]


@dataclass(frozen=True)
class Result:
    name: str
    at_warmup_mb: float
    median_mb: float
    max_mb: float
    slope_mb_per_min: float
    handled: int
    every_10s: list[float]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _slope_per_min(points: Sequence[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    xs = [t for t, _ in points]
    ys = [m for _, m in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mean_x) ** 2 for x in xs)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return 60 * num / den if den else 0.0


def _fill(client: redis.Redis, entries: int) -> None:
    payload = b"x" * ENTRY_BYTES
    client.xgroup_create("bench", "g", id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for i in range(entries):
        pipe.xadd("bench", {"payload": payload})
        if i % 100 == 99:
            pipe.execute()
    pipe.execute()


def run_variant(variant: Variant, args: argparse.Namespace, binary: str) -> Result:
    server = RedisServerProcess(binary)
    try:
        client = redis.Redis(port=server.port)
        _fill(client, args.entries)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "STREAMWORKER_LOG_LEVEL": "warning",
            "BENCH_HANDLER_MS": str(args.handler_ms),
            **variant.env,
        }
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamworker",
                "run",
                APP,
                "--redis-url",
                f"redis://127.0.0.1:{server.port}/0",
                "--consumer",
                "bench-0",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        samples: list[tuple[float, float]] = []
        started = time.monotonic()
        try:
            while (elapsed := time.monotonic() - started) < args.duration_s:
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited with {worker.returncode}")
                samples.append((elapsed, _rss_mb(worker.pid)))
                time.sleep(args.sample_s)  # the sampling period itself, not a wait on a condition
            info = client.xinfo_groups("bench")[0]
            handled = args.entries - int(info.get("lag") or 0) - int(info["pending"])
        finally:
            worker.terminate()
            worker.wait(30)
    finally:
        server.stop()
    after = [(t, m) for t, m in samples if t >= WARMUP_S] or samples
    return Result(
        name=variant.name,
        at_warmup_mb=after[0][1],
        median_mb=statistics.median(m for _, m in after),
        max_mb=max(m for _, m in after),
        slope_mb_per_min=_slope_per_min(after),
        handled=handled,
        every_10s=[m for t, m in samples if int(t) % 10 == 0 and t - int(t) < args.sample_s],
    )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory_inflight_bench")
    p.add_argument("--duration-s", type=float, default=60.0, help="seconds sampled per variant")
    p.add_argument("--entries", type=int, default=3000, help="backlog, 100 KB each")
    p.add_argument("--handler-ms", type=int, default=20, help="each message's handler time")
    p.add_argument("--sample-s", type=float, default=1.0, help="RSS sampling period")
    p.add_argument(
        "--bound-bytes", type=int, default=5_000_000, help="max_in_flight_bytes of the bounded run"
    )
    p.add_argument("--only", choices=["unbounded", "bounded"], help="run one variant")
    p.add_argument("--quick", action="store_true", help="a smoke run (figures meaningless)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.quick:
        args.duration_s, args.entries, args.sample_s = 12.0, 300, 0.5
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    binary = shutil.which("redis-server")
    if binary is None:
        print("redis-server not found on PATH", file=sys.stderr)
        return 2
    variants = [
        Variant("unbounded", {}),
        Variant(
            f"max_in_flight_bytes={args.bound_bytes}",
            {"STREAMWORKER_MAX_IN_FLIGHT_BYTES": str(args.bound_bytes)},
        ),
    ]
    print(
        f"{args.entries} entries of 100 KB, handler {args.handler_ms} ms, batch 500, "
        f"{args.duration_s:g} s per variant, RSS every {args.sample_s:g} s"
    )
    print(
        f"{'variant':<32} {'RSS@10s MB':>10} {'median MB':>10} {'max MB':>8} "
        f"{'MB/min':>8} {'handled':>8}"
    )
    if args.only:
        variants = [variants[0] if args.only == "unbounded" else variants[1]]
    for variant in variants:
        r = run_variant(variant, args, binary)
        print(
            f"{r.name:<32} {r.at_warmup_mb:>10.1f} {r.median_mb:>10.1f} {r.max_mb:>8.1f} "
            f"{r.slope_mb_per_min:>8.2f} {r.handled:>8}"
        )
        print(f"{'':<32} RSS every 10 s (MB): " + " ".join(f"{m:.0f}" for m in r.every_10s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
