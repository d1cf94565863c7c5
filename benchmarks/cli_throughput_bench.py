"""``streamworker run`` against a raw XREADGROUP + XACK loop, as a user runs it (Throughput, item 1).

Run: ``python -m benchmarks.cli_throughput_bench [--messages N] [--rounds N] [--batch N]
[--poll-ms MS] [--redis-server PATH]``.

Starts its own redis-server 7.0 on a free loopback port in a temp dir, writes a tiny App module
to a temp dir, and in every round, for each variant in turn (the order rotates between rounds):

1. ``FLUSHALL``, the group created at ``0``, then ``--messages`` entries of three small fields
   added in pipelines;
2. the consumer started as a real subprocess:

   * ``raw``: an asyncio redis-py (hiredis) loop: ``XREADGROUP COUNT <batch>``, a no-op
     ``async def`` handler awaited per entry, one ``XACK`` for the batch;
   * ``none``: ``streamworker run app:app_none``, ``idempotency="none"`` (at-least-once),
     the same no-op handler;
   * ``lua``: ``streamworker run app:app_lua``, ``idempotency="lua"`` (exactly-once effects);

3. ``XINFO GROUPS`` polled every ``--poll-ms``: acked = ``entries-read`` - ``pending``. The rate is
   taken from the first poll that sees an ack to the drain (every entry acked), so start-up is
   out of it; start-up to first ack is reported separately. The consumer's CPU time
   (``/proc/<pid>/stat`` user + system) over the same window, divided by the messages acked in
   it, is its CPU per message.

Prints every round, then the medians with min-max, the ratios at-least-once / raw and
Lua / at-least-once (per round, and of the medians), against the targets (≥ 0.75x, ≥ 0.9x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from benchmarks.engine_bench import RedisServerProcess

STREAM = "bench"
GROUP = "g"
CONSUMER = "c1"
VARIANTS = ("raw", "none", "lua")
_TICK = os.sysconf("SC_CLK_TCK")

APP_MODULE = """
from streamworker import App, Message

BATCH = {batch}

app_none = App("bench-none")
app_lua = App("bench-lua")


@app_none.handler("{stream}", group="{group}", idempotency="none", batch_size=BATCH)
async def handle_none(msg: Message) -> None:
    return None


@app_lua.handler("{stream}", group="{group}", idempotency="lua", batch_size=BATCH)
async def handle_lua(msg: Message) -> None:
    return None
"""

RAW_MODULE = """
import asyncio
import signal
import sys

import redis.asyncio as aioredis


async def handle(fields):
    return None


async def main(url, batch):
    client = aioredis.Redis.from_url(url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    while not stop.is_set():
        reply = await client.xreadgroup("{group}", "{consumer}", {{"{stream}": ">"}}, count=batch,
                                        block=1000)
        entries = reply[0][1] if reply else []
        if not entries:
            continue
        for _, fields in entries:
            await handle(fields)
        await client.xack("{stream}", "{group}", *[entry_id for entry_id, _ in entries])
    await client.aclose()


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


@dataclass
class Result:
    variant: str
    rate: float  # messages/s from the first ack to the drain
    cpu_us: float  # consumer CPU µs per message over the same window
    startup_s: float  # process start to the first ack seen


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces: split after its closing parenthesis.
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / _TICK


def _acked(client: redis.Redis) -> int:
    for g in client.xinfo_groups(STREAM):
        if g["name"] in (GROUP, GROUP.encode()):
            return int(g["entries-read"] or 0) - int(g["pending"])
    return 0


def prefill(client: redis.Redis, n: int) -> None:
    client.flushall()
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, {"order_id": f"o{i}", "amount": str(i % 1000), "currency": "EUR"})
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def command(variant: str, workdir: Path, server: RedisServerProcess, batch: int) -> list[str]:
    if variant == "raw":
        return [sys.executable, str(workdir / "rawloop.py"), server.url, str(batch)]
    return [
        sys.executable,
        "-m",
        "streamworker",
        "run",
        f"benchapp:app_{variant}",
        "--redis-url",
        server.url,
        "--consumer",
        CONSUMER,
        "--log-format",
        "json",
    ]


def run_one(
    variant: str, server: RedisServerProcess, workdir: Path, n: int, batch: int, poll_s: float
) -> Result:
    client = server.client()
    prefill(client, n)
    env = {**os.environ, "PYTHONPATH": f"{workdir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = open(workdir / f"{variant}.log", "ab")  # noqa: SIM115 - closed in finally
    spawned = time.monotonic()
    proc = subprocess.Popen(
        command(variant, workdir, server, batch),
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = spawned + 120
        t0 = cpu0 = 0.0
        acked0 = 0
        while True:
            now = time.monotonic()
            acked = _acked(client)
            if acked and not t0:
                t0, acked0, cpu0 = now, acked, _cpu_s(proc.pid)
            if acked >= n:
                t1, cpu1 = now, _cpu_s(proc.pid)
                break
            if proc.poll() is not None:
                log.flush()
                tail = (workdir / f"{variant}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{variant} exited: {tail}")
            if now > deadline:
                raise TimeoutError(f"{variant}: not drained within 120 s ({acked} of {n})")
            time.sleep(poll_s)
        done = n - acked0
        return Result(variant, done / (t1 - t0), (cpu1 - cpu0) / done * 1e6, t0 - spawned)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        client.close()


def _spread(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--poll-ms", type=float, default=5.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    if not args.redis_server:
        raise SystemExit("redis-server not found (--redis-server PATH)")
    variants = [v for v in args.variants.split(",") if v]
    workdir = Path(tempfile.mkdtemp(prefix="cli-throughput-bench-"))
    (workdir / "benchapp.py").write_text(
        textwrap.dedent(APP_MODULE.format(batch=args.batch, stream=STREAM, group=GROUP))
    )
    (workdir / "rawloop.py").write_text(
        RAW_MODULE.format(stream=STREAM, group=GROUP, consumer=CONSUMER)
    )
    server = RedisServerProcess(args.redis_server)
    results: dict[str, list[Result]] = {v: [] for v in variants}
    ratios: dict[str, list[float]] = {"none/raw": [], "lua/none": []}
    try:
        print(
            f"redis-server {server.version()}, {args.messages:,} messages x {args.rounds} rounds, "
            f"batch {args.batch}, load average {os.getloadavg()[0]:.1f}"
        )
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            got: dict[str, Result] = {}
            for v in order:
                res = run_one(v, server, workdir, args.messages, args.batch, args.poll_ms / 1000)
                got[v] = res
                results[v].append(res)
                print(
                    f"round {r + 1} {v:>4}: {res.rate:>9,.0f} msg/s  {res.cpu_us:5.2f} CPU µs/msg  "
                    f"start-up to first ack {res.startup_s:.2f} s",
                    flush=True,
                )
            if "raw" in got and "none" in got:
                ratios["none/raw"].append(got["none"].rate / got["raw"].rate)
            if "none" in got and "lua" in got:
                ratios["lua/none"].append(got["lua"].rate / got["none"].rate)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\nmedian (min-max) over {args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print("| variant | msg/s | CPU µs/msg | start-up to first ack (s) |")
    print("|---|---:|---:|---:|")
    for v, rs in results.items():
        print(
            f"| {v} | {_spread([x.rate for x in rs], ',.0f')} | "
            f"{_spread([x.cpu_us for x in rs], '.2f')} | {_spread([x.startup_s for x in rs], '.2f')} |"
        )
    med = {v: statistics.median(x.rate for x in rs) for v, rs in results.items() if rs}
    for name, target in (("none/raw", 0.75), ("lua/none", 0.9)):
        a, b = name.split("/")
        if ratios[name]:
            per_round = ", ".join(f"{x:.2f}" for x in ratios[name])
            of_medians = med[a] / med[b]
            print(
                f"{name}: median {statistics.median(ratios[name]):.2f}x (rounds {per_round}; "
                f"ratio of medians {of_medians:.2f}x), target >= {target}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
