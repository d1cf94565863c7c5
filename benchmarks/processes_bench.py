"""``streamworker run --processes N``: how fast N worker processes drain one backlog.

Run: ``python -m benchmarks.processes_bench`` (or ``make bench``). Starts its own redis-server on
a free loopback port in a temp dir, and for each ``idempotency`` (``none``, ``lua``) and each N in
``--processes`` (default 1, 2, 4): fills stream ``bench`` with ``--messages`` entries (default
300,000) before any worker runs, then starts ``streamworker run benchmarks.processes_app:app_…``
as a subprocess (N = 1: the plain single process, no supervisor; N > 1: ``--processes N``) with a
no-op ``async`` handler, batches of 100.

The clock starts when every process has read from the group (each consumer shows in XINFO
CONSUMERS from its first read: the start-up, imports and name records, is left out) and stops
when the group has neither lag nor pending entries; the messages counted are those acknowledged
in that window (the first process to start has drained some before the last one read). Reported
per run: msgs/s, and CPU seconds per message of all streamworker processes together
(the supervisor and its children, from ``/proc``) and of redis-server (``INFO cpu``), both over
the same window. The workers and redis-server share the machine's cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from benchmarks.engine_bench import RedisServerProcess
from benchmarks.processes_app import GROUP, STREAM

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Result:
    idempotency: str
    processes: int
    seconds: float
    messages: int
    worker_cpu_s: float
    redis_cpu_s: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def _tree_cpu_s(root: int) -> float:
    """user + system CPU seconds of ``root`` and its direct children (live ones)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(entry.name) == root or int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _fill(client: redis.Redis, n: int) -> None:
    client.flushall()
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    body = {"n": "0", "payload": "x" * 64}
    for start in range(0, n, 10_000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(10_000, n - start)):
            pipe.xadd(STREAM, body)
        pipe.execute()


def _group(client: redis.Redis) -> tuple[int, int, int]:
    """(lag, pending, done) of the group; done = entries read and acknowledged."""
    info = client.xinfo_groups(STREAM)[0]
    pending = int(info["pending"])
    return int(info["lag"] or 0), pending, int(info["entries-read"] or 0) - pending


def _consumers(client: redis.Redis) -> int:
    return len(client.xinfo_consumers(STREAM, GROUP))


def run_one(url: str, client: redis.Redis, idempotency: str, processes: int, n: int) -> Result:
    _fill(client, n)
    args = [
        sys.executable,
        "-m",
        "streamworker",
        "run",
        f"benchmarks.processes_app:app_{idempotency}",
        "--redis-url",
        url,
        "--consumer",
        "bench",
        "--log-level",
        "warning",
    ]
    if processes > 1:
        args += ["--processes", str(processes)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STREAMWORKER_LOG_FORMAT": "json"}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    try:
        # The window opens when every process has read (a consumer appears in the group at its
        # first read): their start-up (imports, name records) stays out of the figures.
        while _consumers(client) < processes:
            if proc.poll() is not None:
                raise RuntimeError(f"streamworker exited {proc.returncode} before reading")
            time.sleep(0.005)
        started, cpu0, rcpu0 = time.monotonic(), _tree_cpu_s(proc.pid), _redis_cpu_s(client)
        done0 = _group(client)[2]
        while _group(client)[:2] != (0, 0):
            if proc.poll() is not None:
                raise RuntimeError(f"streamworker exited {proc.returncode} mid-drain")
            time.sleep(0.01)
        seconds = time.monotonic() - started
        cpu1, rcpu1 = _tree_cpu_s(proc.pid), _redis_cpu_s(client)
        measured = _group(client)[2] - done0
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return Result(idempotency, processes, seconds, measured, cpu1 - cpu0, rcpu1 - rcpu0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--idempotency", nargs="+", default=["none", "lua"])
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    if not args.redis_server:
        print("redis-server not found; skipping", file=sys.stderr)
        return 0
    server = RedisServerProcess(args.redis_server)
    client = redis.Redis(port=server.port)
    url = f"redis://127.0.0.1:{server.port}/0"
    print(f"{os.cpu_count()} CPUs, redis-server {server.version()}, {args.messages} messages")
    print(
        "| idempotency | processes | measured msgs | seconds | msgs/s | worker CPU µs/msg "
        "| redis CPU µs/msg |\n|---|---:|---:|---:|---:|---:|---:|",
        flush=True,
    )
    try:
        for idempotency in args.idempotency:
            for processes in args.processes:
                r = run_one(url, client, idempotency, processes, args.messages)
                print(
                    f"| {r.idempotency} | {r.processes} | {r.messages:,} | {r.seconds:.2f} | "
                    f"{r.rate:,.0f} | "
                    f"{r.worker_cpu_s / r.messages * 1e6:.1f} | "
                    f"{r.redis_cpu_s / r.messages * 1e6:.1f} |",
                    flush=True,
                )
    finally:
        client.close()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
