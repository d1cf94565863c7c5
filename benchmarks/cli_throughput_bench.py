"""``streamworker run`` against raw XREADGROUP + XACK loops, as a user runs it (Throughput, parts 1-2).

Run: ``python -m benchmarks.cli_throughput_bench [--rounds N] [--max-load L] [--max-rejects N]
[--messages N] [--batch N] [--poll-ms MS] [--variants raw,rawsync,none,lua,ahead,luaahead]
[--redis-server PATH]``.

Starts its own redis-server 7.0 on a free loopback port in a temp dir, writes a tiny App module
to a temp dir, and in every round, for each variant in turn (the order rotates between rounds):

1. ``FLUSHALL``, the group created at ``0``, then ``--messages`` entries of three small fields
   added in pipelines;
2. the consumer started as a real subprocess:

   * ``raw``: an asyncio redis-py (hiredis) loop: ``XREADGROUP COUNT <batch>``, a no-op
     ``async def`` handler awaited per entry, one ``XACK`` for the batch;
   * ``rawsync``: the same loop with redis-py's synchronous client and a no-op ``def`` handler;
   * ``none``: ``streamworker run app:app_none``, ``idempotency="none"`` (at-least-once),
     the same no-op ``async def`` handler;
   * ``lua``: ``streamworker run app:app_lua``, ``idempotency="lua"`` (exactly-once effects);
   * ``ahead``, ``luaahead``: ``none`` and ``lua`` with ``read_ahead=True`` (a full batch's
     successor read while the batch is handled);

3. ``XINFO GROUPS`` polled every ``--poll-ms``: acked = ``entries-read`` - ``pending``. The rate is
   taken from the first poll that sees an ack to the drain (every entry acked), so start-up is
   out of it; start-up to first ack is reported separately. The consumer's CPU time
   (``/proc/<pid>/stat`` user + system) over the same window, divided by the messages acked in
   it, is its CPU per message.

The quiet-machine check: every round prints the 1-minute load average before and after it, and
the CPU that *other* processes used while it ran (``/proc/stat``'s busy time less this
benchmark's own processes: itself, redis-server and the consumer), in cores. The load average
counts the benchmark's own processes (two busy ones while a variant drains), so the check is made
on the others' CPU: a round in which it exceeds ``--max-load`` cores is rejected and run again,
up to ``--max-rejects`` times over the whole run; after that the rounds are kept and marked.

Prints every round, then the medians with min-max per variant, and the ratios at-least-once / raw
(asyncio and sync), Lua / at-least-once, each as the median of the per-round ratios with their
min-max and the ratio of the medians, against the targets (>= 0.9x, >= 0.95x).
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
from typing import Any

import redis

from benchmarks.engine_bench import RedisServerProcess

STREAM = "bench"
GROUP = "g"
CONSUMER = "c1"
VARIANTS = ("raw", "rawsync", "none", "lua", "ahead", "luaahead")
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


app_ahead = App("bench-ahead")
app_luaahead = App("bench-luaahead")


@app_ahead.handler(
    "{stream}", group="{group}", idempotency="none", batch_size=BATCH, read_ahead=True
)
async def handle_ahead(msg: Message) -> None:
    return None


@app_luaahead.handler(
    "{stream}", group="{group}", idempotency="lua", batch_size=BATCH, read_ahead=True
)
async def handle_luaahead(msg: Message) -> None:
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


RAWSYNC_MODULE = """
import signal
import sys

import redis


def handle(fields):
    return None


def main(url, batch):
    client = redis.Redis.from_url(url)
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    while not stopped:
        reply = client.xreadgroup("{group}", "{consumer}", {{"{stream}": ">"}}, count=batch,
                                  block=1000)
        entries = reply[0][1] if reply else []
        if not entries:
            continue
        for _, fields in entries:
            handle(fields)
        client.xack("{stream}", "{group}", *[entry_id for entry_id, _ in entries])
    client.close()


main(sys.argv[1], int(sys.argv[2]))
"""


@dataclass
class Result:
    variant: str
    rate: float  # messages/s from the first ack to the drain
    cpu_us: float  # consumer CPU µs per message over the same window
    startup_s: float  # process start to the first ack seen
    others: float = 0.0  # CPU of other processes meanwhile, in cores
    server_us: float = 0.0  # redis-server CPU µs per message over the same window


def _busy_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far (``/proc/stat``'s first line)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def _own_ticks(pids: list[int]) -> int:
    """User + system ticks of ``pids`` so far (those gone count nothing)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(parts[11]) + int(parts[12])
    return total


class OthersMeter:
    """The CPU that processes other than ``pids`` used between :meth:`start` and :meth:`cores`,
    in cores (1.0: one core busy all the time)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._busy0, self._total0 = _busy_ticks()
        self._own0 = _own_ticks(pids)
        self._t0 = time.monotonic()

    def cores(self) -> float:
        busy, _ = _busy_ticks()
        own = _own_ticks(self.pids) - self._own0
        elapsed = time.monotonic() - self._t0
        if elapsed <= 0:
            return 0.0
        return max(0.0, (busy - self._busy0 - own) / _TICK / elapsed)


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
    if variant in ("raw", "rawsync"):
        return [sys.executable, str(workdir / f"{variant}loop.py"), server.url, str(batch)]
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
    others: OthersMeter | None = None
    try:
        deadline = spawned + 120
        t0 = cpu0 = server0 = 0.0
        acked0 = 0
        while True:
            now = time.monotonic()
            acked = _acked(client)
            if acked and not t0:
                t0, acked0, cpu0 = now, acked, _cpu_s(proc.pid)
                server0 = _cpu_s(server.proc.pid)
                others = OthersMeter([os.getpid(), proc.pid, server.proc.pid])
            if acked >= n:
                t1, cpu1, server1 = now, _cpu_s(proc.pid), _cpu_s(server.proc.pid)
                break
            if proc.poll() is not None:
                log.flush()
                tail = (workdir / f"{variant}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{variant} exited: {tail}")
            if now > deadline:
                raise TimeoutError(f"{variant}: not drained within 120 s ({acked} of {n})")
            time.sleep(poll_s)
        done = n - acked0
        return Result(
            variant,
            done / (t1 - t0),
            (cpu1 - cpu0) / done * 1e6,
            t0 - spawned,
            others.cores() if others is not None else 0.0,
            (server1 - server0) / done * 1e6,
        )
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


# The targets: (ratio name, target); the read_ahead=True variants against the same
# targets, and what read_ahead gains (no target).
RATIOS: tuple[tuple[str, float | None], ...] = (
    ("none/raw", 0.9),
    ("none/rawsync", 0.9),
    ("lua/none", 0.95),
    ("ahead/raw", 0.9),
    ("ahead/rawsync", 0.9),
    ("luaahead/ahead", 0.95),
    ("ahead/none", None),
    ("luaahead/lua", None),
)


def checked_variants(given: str, redis_server: str | None, known: tuple[str, ...]) -> list[str]:
    """The comma-separated ``given`` variants, each one of ``known``; exits with a one-line error
    for an unknown one or a missing redis-server."""
    if not redis_server:
        raise SystemExit("redis-server not found (--redis-server PATH)")
    variants = [v for v in given.split(",") if v]
    for v in variants:
        if v not in known:
            raise SystemExit(f"unknown variant {v!r} (one of {', '.join(known)})")
    return variants


def _load1() -> float:
    return os.getloadavg()[0]


def run_round(
    r: int, variants: list[str], server: RedisServerProcess, workdir: Path, args: Any
) -> tuple[dict[str, Result], float, float]:
    """One round of every variant (the order rotated by ``r``); returns the results, the load
    average before it and the others' CPU (cores, the highest of its variants)."""
    order = variants[r % len(variants) :] + variants[: r % len(variants)]
    load = _load1()
    got: dict[str, Result] = {}
    for v in order:
        got[v] = run_one(v, server, workdir, args.messages, args.batch, args.poll_ms / 1000)
    return got, load, max(x.others for x in got.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--poll-ms", type=float, default=5.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--max-load",
        type=float,
        default=0.25,
        help="reject a round in which other processes used more CPU than this, in cores",
    )
    parser.add_argument(
        "--max-rejects",
        type=int,
        default=10,
        help="re-run at most this many rejected rounds over the whole run; then keep them",
    )
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    variants = checked_variants(args.variants, args.redis_server, VARIANTS)
    workdir = Path(tempfile.mkdtemp(prefix="cli-throughput-bench-"))
    (workdir / "benchapp.py").write_text(
        textwrap.dedent(APP_MODULE.format(batch=args.batch, stream=STREAM, group=GROUP))
    )
    for name, module in (("raw", RAW_MODULE), ("rawsync", RAWSYNC_MODULE)):
        (workdir / f"{name}loop.py").write_text(
            module.format(stream=STREAM, group=GROUP, consumer=CONSUMER)
        )
    server = RedisServerProcess(args.redis_server)
    rounds: list[dict[str, Result]] = []
    loads: list[float] = []
    marked: list[bool] = []
    rejected = 0
    try:
        print(
            f"redis-server {server.version()}, {args.messages:,} messages x {args.rounds} rounds, "
            f"batch {args.batch}, load average {_load1():.2f} (1 min), {os.cpu_count()} CPUs; "
            f"a round is rejected when other processes use more than {args.max_load} cores "
            f"(at most {args.max_rejects} re-runs)",
            flush=True,
        )
        r = 0
        while len(rounds) < args.rounds:
            got, load, others = run_round(r, variants, server, workdir, args)
            r += 1
            line = ", ".join(
                f"{v} {res.rate:,.0f} msg/s {res.cpu_us:.2f} CPU µs/msg (server {res.server_us:.2f})"
                for v, res in got.items()
            )
            noisy = others > args.max_load
            if noisy and rejected < args.max_rejects:
                rejected += 1
                print(
                    f"round {r}: REJECTED (others used {others:.2f} cores, load average "
                    f"{load:.2f} -> {_load1():.2f}): {line}",
                    flush=True,
                )
                continue
            rounds.append(got)
            loads.append(load)
            marked.append(noisy)
            print(
                f"round {len(rounds)} (run {r}): load average {load:.2f} -> {_load1():.2f}, "
                f"others used {others:.2f} cores{' (KEPT LOADED: rejects used up)' if noisy else ''}"
                f": {line}",
                flush=True,
            )
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(rounds, variants, loads, marked, rejected)
    return 0


def report(
    rounds: list[dict[str, Result]],
    variants: list[str],
    loads: list[float],
    marked: list[bool],
    rejected: int,
) -> None:
    """The medians (min-max) per variant and the ratios, as markdown tables."""
    print(
        f"\nmedian (min-max) over {len(rounds)} rounds; load average at their start "
        f"{_spread(loads, '.2f')}; {rejected} rounds rejected and re-run; "
        f"{sum(marked)} kept over the threshold"
    )
    print("| variant | msg/s | CPU µs/msg | redis-server CPU µs/msg | start-up to first ack (s) |")
    print("|---|---:|---:|---:|---:|")
    for v in variants:
        rs = [g[v] for g in rounds]
        print(
            f"| {v} | {_spread([x.rate for x in rs], ',.0f')} | "
            f"{_spread([x.cpu_us for x in rs], '.2f')} | "
            f"{_spread([x.server_us for x in rs], '.2f')} | "
            f"{_spread([x.startup_s for x in rs], '.2f')} |"
        )
    med = {v: statistics.median(g[v].rate for g in rounds) for v in variants}
    print("\n| ratio | median of rounds (min-max) | per round | ratio of medians | target |")
    print("|---|---:|---|---:|---:|")
    for name, target in RATIOS:
        a, b = name.split("/")
        if a not in med or b not in med:
            continue
        per_round = [g[a].rate / g[b].rate for g in rounds]
        print(
            f"| {name} | {statistics.median(per_round):.2f}x "
            f"({min(per_round):.2f}-{max(per_round):.2f}) | "
            f"{', '.join(f'{x:.2f}' for x in per_round)} | {med[a] / med[b]:.2f}x | "
            f"{'-' if target is None else f'>= {target}x'} |"
        )
    cpu = {v: statistics.median(g[v].cpu_us for g in rounds) for v in variants}
    for framework in ("none", "ahead"):
        for raw in ("raw", "rawsync"):
            if framework in cpu and raw in cpu:
                print(
                    f"CPU per message, {framework} - {raw}: {cpu[framework] - cpu[raw]:+.2f} µs "
                    f"(medians; target within 1.5 µs)"
                )


if __name__ == "__main__":
    sys.exit(main())
