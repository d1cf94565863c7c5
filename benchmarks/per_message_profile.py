"""The consume loop's CPU per message, measured so that the machine's load does not move it.

Run: ``python -m benchmarks.per_message_profile [--variants raw,rawsync,none,lua,ahead] [--messages N]
[--profile FILE] [--callgrind]``.

Starts its own redis-server on a free loopback port, and for each variant fills a stream with
``--messages`` entries of three small fields (as ``cli_throughput_bench`` does) and drains it
*in this process* with a no-op handler:

* ``raw``: an asyncio redis-py (hiredis) loop, ``XREADGROUP COUNT 100``, the handler awaited per
  entry, one ``XACK`` per batch (the raw loop of ``cli_throughput_bench``);
* ``rawsync``: the same with the synchronous redis-py client and a plain ``def`` handler;
* ``none`` / ``lua``: a :class:`~streamworker.runtime.worker.Worker` built as ``streamworker run``
  builds it (JSON logs at info, the default metrics), ``idempotency="none"`` / ``"lua"``, stopped
  once every entry is processed; without the reclaimer and the delayed-entry mover, whose work
  comes per second, not per message;
* ``ahead``: ``none`` with ``read_ahead=True`` (each full batch's successor read while the batch
  is handled).

Per variant it prints the process CPU time (user + system of this process, not wall time) from
the first batch to the drain, per message. ``--profile FILE`` runs the drains under cProfile and
writes the statistics (``python -m pstats FILE``) plus a summary by component.

``--callgrind`` reports instructions instead of seconds, independent of the machine's load: it
re-runs this module under ``valgrind --tool=callgrind`` twice per variant (``--messages`` and
twice that) and divides the difference of the two totals by ``--messages``, so start-up, imports
and shutdown cancel out. About a minute per variant on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from benchmarks.cli_throughput_bench import GROUP, STREAM, checked_variants, prefill
from benchmarks.engine_bench import RedisServerProcess

VARIANTS = ("raw", "rawsync", "none", "lua", "ahead")
BATCH = 100

# The profiler of a --profile run: on from the first batch to the drain only (start-up and
# shutdown left out). It times by the wall clock (a CPU clock would cost a system call per
# event and swamp what it measures); the event loop's waits for Redis are left out of the summary.
_profiler: cProfile.Profile | None = None


def _window_start() -> float:
    if _profiler is not None:
        _profiler.enable()
    return time.process_time()


def _window_end(cpu0: float) -> float:
    cpu = time.process_time() - cpu0
    if _profiler is not None:
        _profiler.disable()
    return cpu


async def _noop(fields: Any) -> None:
    return None


def _noop_sync(fields: Any) -> None:
    return None


async def drain_raw(url: str, n: int) -> float:
    """The asyncio raw loop; returns the CPU seconds from its first ack to the drain."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    done = 0
    cpu0 = 0.0
    while done < n:
        reply = await client.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=BATCH, block=1000)
        entries = reply[0][1] if reply else []
        for _, fields in entries:
            await _noop(fields)
        await client.xack(STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        if not done:
            cpu0 = _window_start()
        done += len(entries)
    cpu = _window_end(cpu0)
    await client.aclose()
    return cpu


def drain_rawsync(url: str, n: int) -> float:
    """The synchronous raw loop; returns the CPU seconds from its first ack to the drain."""
    client = redis.Redis.from_url(url)
    done = 0
    cpu0 = 0.0
    while done < n:
        reply = client.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=BATCH, block=1000)
        entries = reply[0][1] if reply else []
        for _, fields in entries:
            _noop_sync(fields)
        client.xack(STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        if not done:
            cpu0 = _window_start()
        done += len(entries)
    cpu = _window_end(cpu0)
    client.close()
    return cpu


async def drain_worker(url: str, n: int, idempotency: str, *, read_ahead: bool = False) -> float:
    """A Worker as ``streamworker run`` builds it; returns the CPU seconds from the first
    processed batch to the drain."""
    from streamworker import App, Message
    from streamworker.observability.logging import configure_logging
    from streamworker.observability.metrics import Metrics
    from streamworker.runtime.worker import Worker, WorkerOptions

    configure_logging("json", "info")
    app = App(f"profile-{idempotency}")

    @app.handler(
        STREAM, group=GROUP, idempotency=idempotency, batch_size=BATCH, read_ahead=read_ahead
    )
    async def handle(msg: Message) -> None:  # type: ignore[type-arg]
        return None

    # Without the work a worker does per unit of time (the reclaimer's lease renewals, the
    # delayed-entry mover's polls): under callgrind a drain lasts fifty times longer, and that
    # work would be counted against the messages.
    options = WorkerOptions(redis_url=url, consumer="c1", reclaim=False, delayed_poll_ms=0)
    worker = Worker(app, options, Metrics())
    marks: list[float] = []

    async def watch() -> None:
        try:
            # (A poll: the worker has no event for "its consumers are built".)
            while not getattr(worker, "consumers", None):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            batches = worker.consumers[0].batches
            while batches.processed < n:
                if batches.processed and not marks:
                    marks.append(_window_start())
                await asyncio.sleep(0.02)
            if not marks:  # drained before the first look: the window is empty
                marks.append(_window_start())
            marks.append(_window_end(marks[0]))
        finally:
            worker.stop()

    watcher = asyncio.ensure_future(watch())
    await worker.run(install_signal_handlers=False)
    await watcher
    return marks[-1]


def drain(variant: str, url: str, n: int) -> float:
    if variant == "raw":
        return asyncio.run(drain_raw(url, n))
    if variant == "rawsync":
        return drain_rawsync(url, n)
    if variant == "ahead":
        return asyncio.run(drain_worker(url, n, "none", read_ahead=True))
    return asyncio.run(drain_worker(url, n, variant))


# Where a profiled function belongs, by its file (first match wins).
_COMPONENTS: list[tuple[str, str]] = [
    ("core/codec.py", "decode (fields, Message)"),
    ("io/redisio.py", "read reply parsing, XACK, next read"),
    ("runtime/invoker.py", "handler call, timing"),
    ("idempotency/", "strategy (outcomes, ack list)"),
    ("runtime/batch_processor.py", "batch processor (bookkeeping, tally)"),
    ("runtime/holdings.py", "holdings (in-flight ids)"),
    ("runtime/consumer.py", "consume loop"),
    ("observability/", "metrics"),
    ("prometheus_client", "metrics"),
    ("structlog", "logging"),
    ("hiredis", "redis-py / hiredis"),
    ("redis/", "redis-py / hiredis"),
    ("asyncio", "asyncio (event loop, sockets)"),
    ("benchmarks/", "handler"),
    ("method 'poll' of 'select.epoll'", "waiting"),
    ("method 'select' of 'select.epoll'", "waiting"),
]


def _component(key: tuple[str, int, str]) -> str:
    where = f"{key[0]}:{key[2]}"
    for pattern, name in _COMPONENTS:
        if pattern in where:
            return name
    return "other"


def summarise(stats: pstats.Stats, n: int) -> list[tuple[str, float]]:
    """Own time (cProfile's tottime) by component, µs per message, largest first. A built-in
    function's time goes to its callers' components, in proportion to the time each call took."""
    totals: dict[str, float] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for key, (_cc, _nc, tottime, _ct, callers) in raw.items():
        if key[0] == "~" and callers and _component(key) != "waiting":
            spent = sum(c[2] for c in callers.values()) or 1.0
            for caller, c in callers.items():
                name = _component(caller)
                totals[name] = totals.get(name, 0.0) + tottime * c[2] / spent
            continue
        name = _component(key)
        totals[name] = totals.get(name, 0.0) + tottime
    totals.pop("waiting", None)
    return sorted(((k, v / n * 1e6) for k, v in totals.items()), key=lambda kv: -kv[1])


def run_variants(
    variants: list[str], n: int, server_binary: str, profile: str | None
) -> dict[str, float]:
    server = RedisServerProcess(server_binary)
    out: dict[str, float] = {}
    try:
        for v in variants:
            client = server.client()
            prefill(client, n)
            client.close()
            if profile:
                global _profiler
                prof = _profiler = cProfile.Profile()
                cpu = drain(v, server.url, n)
                _profiler = None
                path = f"{profile}.{v}"
                prof.dump_stats(path)
                stats = pstats.Stats(path)
                parts = summarise(stats, n)
                total = sum(us for _, us in parts)
                print(
                    f"{v}: {cpu / n * 1e6:.2f} CPU µs/message under cProfile, {total:.2f} µs "
                    f"profiled ({path})"
                )
                for name, us in parts:
                    print(f"    {name:<40} {us:7.2f} µs/msg {us / total:6.1%}")
            else:
                out[v] = drain(v, server.url, n) / n * 1e6
                print(f"{v}: {out[v]:.2f} CPU µs/message", flush=True)
    finally:
        server.stop()
    return out


def _callgrind_total(
    variant: str, n: int, server: RedisServerProcess, binary: str, workdir: Path
) -> int:
    client = server.client()
    prefill(client, n)  # here, not in the measured process
    client.close()
    out = workdir / f"callgrind.{variant}.{n}"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "benchmarks.per_message_profile",
        "--variants",
        variant,
        "--messages",
        str(n),
        "--redis-url",
        server.url,
    ]
    # A fixed hash seed: the same dict and set layouts in every run.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run failed ({variant}, {n}): {proc.stderr[-2000:]}")
    return int(found.group(1))


def callgrind(variants: list[str], n: int, binary: str) -> dict[str, float]:
    """Instructions per message: the difference of a drain of 2n and one of n, over n."""
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind not found (apt-get install valgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="per-message-callgrind-"))
    server = RedisServerProcess(binary)
    out: dict[str, float] = {}
    try:
        for v in variants:
            small = _callgrind_total(v, n, server, binary, workdir)
            large = _callgrind_total(v, 2 * n, server, binary, workdir)
            out[v] = (large - small) / n
            print(f"{v}: {out[v]:,.0f} instructions/message", flush=True)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the drains, stats to FILE.*")
    parser.add_argument("--callgrind", action="store_true", help="instructions, not seconds")
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    parser.add_argument(
        "--redis-url", help="drain the stream already filled there (what --callgrind runs)"
    )
    args = parser.parse_args(argv)
    variants = checked_variants(args.variants, args.redis_server, VARIANTS)
    if args.redis_url:
        for v in variants:
            drain(v, args.redis_url, args.messages)
        return 0
    if args.callgrind:
        result = callgrind(variants, args.messages, args.redis_server)
        base = result.get("raw")
        if base:
            for v, ins in result.items():
                print(f"{v}: {ins / base:.2f}x the asyncio raw loop's instructions")
        return 0
    run_variants(variants, args.messages, args.redis_server, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
