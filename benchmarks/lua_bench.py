"""Lua idempotency: streamworker's batched check-and-apply script against the alternatives.

Run: ``python -m benchmarks.lua_bench`` (or ``make bench``). Starts its own redis-server (or uses
``--redis-url``) and prints two tables.

**Throughput**, the same N messages per variant, reads of ``--batch`` entries, a no-op handler,
variants interleaved over ``--rounds`` rounds (median reported), all in one run:

* ``raw-batched``: no framework: XREADGROUP COUNT n + one XACK per batch (the floor of what any
  consumer costs);
* ``article``: the exactly-once article's strategy 2 loop as it writes it: XREADGROUP COUNT 1,
  then one EVALSHA of its check-mark-ack script (SISMEMBER on the processed-ids set, SADD, XACK);
* ``article-batched-read``: the same script, one EVALSHA per message, but reading ``--batch``
  entries per XREADGROUP (kinder to it than the article);
* ``sw-none``: a streamworker Worker, ``idempotency="none"`` (at-least-once);
* ``sw-lua``: the same Worker, ``idempotency="lua"``: one ownership check before the handlers and
  one apply script (ownership, effects, XACK) per batch;
* ``sw-lua-dedup``: ``sw-lua`` with ``dedup_field`` (business key per message);
* ``sw-lua-effects``: ``sw-lua`` whose handler returns two effects (HINCRBY + INCRBY).

The Worker variants run the whole runtime in this process (consume loop, decoding, dependency
resolution, metrics, reclaimer) with an ``async def`` handler; the clock runs from the worker's
start to its last XACK.

**Memory** over ``--memory-messages`` (default 1,000,000) messages of steady load (a producer
keeps the backlog between 1,000 and 10,000 entries, the stream capped with ``MAXLEN ~``): Redis's
``used_memory``, and the business-key record's ``ZCARD`` and ``MEMORY USAGE``, sampled as the
count grows; once with ``dedup_field`` (window ``--dedup-window-ms``) and once without. For
contrast, the size of the article's processed-ids SET after the same number of messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from streamworker import App, Effects, Message
from streamworker.io.keys import dedup_record_key
from streamworker.observability.logging import configure_logging
from streamworker.runtime.worker import Worker, WorkerOptions

STREAM, GROUP, CONSUMER = "bench", "g", "c1"
PROCESSED_SET = "processed_ids:bench:g"

# The article's script, as it gives it: check, mark, ack; one call per message.
ARTICLE_SCRIPT = """
local stream_key = KEYS[1]
local processed_ids_set = KEYS[2]
local group_name = ARGV[1]
local msg_id = ARGV[2]
if redis.call('SISMEMBER', processed_ids_set, msg_id) == 1 then
  redis.call('XACK', stream_key, group_name, msg_id)
  return 'ALREADY_PROCESSED'
end
redis.call('SADD', processed_ids_set, msg_id)
redis.call('XACK', stream_key, group_name, msg_id)
return 'PROCESSED'
"""


@dataclass
class Result:
    variant: str
    messages: int
    seconds: float
    client_cpu_s: float  # this process (all threads)
    redis_cpu_s: float  # redis-server, from INFO cpu

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_us(self) -> tuple[float, float]:
        """CPU per message, client and Redis, in microseconds: unlike msgs/s, it does not
        depend on what else the machine is running."""
        return (1e6 * self.client_cpu_s / self.messages, 1e6 * self.redis_cpu_s / self.messages)


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _fill(client: redis.Redis, n: int) -> None:
    client.delete(STREAM, PROCESSED_SET, dedup_record_key(STREAM, GROUP), "{bench}:views")
    client.delete("{bench}:total")
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, {"order_id": f"o{i:09d}", "page": f"p{i % 10}"})
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    client.xgroup_create(STREAM, GROUP, id="0")


async def _raw_batched(url: str, batch: int) -> int:
    client = aioredis.Redis.from_url(url)
    done = 0
    try:
        while True:
            reply = await client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=batch)
            if not reply:
                return done
            ids = [entry_id for entry_id, _ in reply[0][1]]
            await client.xack(STREAM, GROUP, *ids)
            done += len(ids)
    finally:
        await client.aclose()


async def _article(url: str, read_count: int) -> int:
    client = aioredis.Redis.from_url(url)
    sha = await client.script_load(ARTICLE_SCRIPT)
    done = 0
    try:
        while True:
            reply = await client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=read_count)
            if not reply:
                return done
            for entry_id, _ in reply[0][1]:
                await client.evalsha(sha, 2, STREAM, PROCESSED_SET, GROUP, entry_id)
                done += 1
    finally:
        await client.aclose()


def _app(variant: str, batch: int, seen: list[int]) -> App:
    app = App(f"bench-{variant}")
    options: dict[str, Any] = {"group": GROUP, "batch_size": batch, "block_ms": 100}
    if variant == "sw-none":
        options["idempotency"] = "none"
    else:
        options["idempotency"] = "lua"
    if variant == "sw-lua-dedup":
        options["dedup_field"] = "order_id"

    if variant == "sw-lua-effects":

        @app.handler(STREAM, **options)
        async def with_effects(msg: Message) -> Effects:
            seen[0] += 1
            return Effects().hincrby("{bench}:views", msg.fields["page"], 1).incrby("{bench}:total")

    else:

        @app.handler(STREAM, **options)
        async def noop(msg: Message) -> None:
            seen[0] += 1

    return app


async def _worker(url: str, variant: str, batch: int, n: int) -> int:
    seen = [0]
    worker = Worker(
        _app(variant, batch, seen),
        WorkerOptions(redis_url=url, consumer=CONSUMER, shutdown_timeout_s=5),
    )
    probe = aioredis.Redis.from_url(url)
    task = asyncio.ensure_future(worker.run(install_signal_handlers=False))
    try:
        while True:
            if task.done():
                task.result()
                raise RuntimeError(f"{variant}: the worker stopped early")
            if seen[0] >= n and (await probe.xpending(STREAM, GROUP))["pending"] == 0:
                return seen[0]
            await asyncio.sleep(0.005 if seen[0] >= n else 0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
        await probe.aclose()


def _variants(url: str, batch: int) -> dict[str, Callable[[int], Awaitable[int]]]:
    def worker(variant: str) -> Callable[[int], Awaitable[int]]:
        return lambda n: _worker(url, variant, batch, n)

    return {
        "raw-batched": lambda n: _raw_batched(url, batch),
        "article": lambda n: _article(url, 1),
        "article-batched-read": lambda n: _article(url, batch),
        "sw-none": worker("sw-none"),
        "sw-lua": worker("sw-lua"),
        "sw-lua-dedup": worker("sw-lua-dedup"),
        "sw-lua-effects": worker("sw-lua-effects"),
    }


def throughput(url: str, n: int, batch: int, rounds: int) -> dict[str, list[Result]]:
    """Every variant ``rounds`` times, interleaved; results by variant."""
    client = redis.Redis.from_url(url)
    results: dict[str, list[Result]] = {}
    try:
        for r in range(rounds):
            for name, run in _variants(url, batch).items():
                _fill(client, n)
                redis_cpu = _redis_cpu(client)
                cpu = time.process_time()
                started = time.perf_counter()
                done = asyncio.run(run(n))
                elapsed = time.perf_counter() - started
                result = Result(
                    name, n, elapsed, time.process_time() - cpu, _redis_cpu(client) - redis_cpu
                )
                if done != n or client.xpending(STREAM, GROUP)["pending"]:
                    raise RuntimeError(f"{name}: processed {done} of {n}")
                results.setdefault(name, []).append(result)
                client_us, redis_us = result.cpu_us
                print(
                    f"  round {r + 1} {name:<21}{result.rate:>10.0f} msgs/s"
                    f"{client_us:>8.1f} + {redis_us:.1f} CPU us/msg",
                    flush=True,
                )
    finally:
        client.close()
    return results


# --------------------------------------------------------------------------------------------
# Memory


@dataclass
class Sample:
    processed: int
    used_memory: int
    record_members: int
    record_bytes: int
    pending: int
    stream_length: int


def _producer(
    url: str, total: int, seen: list[int], stop: threading.Event, errors: list[BaseException]
) -> None:
    """Keep the backlog between 1,000 and 10,000 entries until ``total`` are produced."""
    client = redis.Redis.from_url(url)
    produced = 0
    try:
        while produced < total and not stop.is_set():
            if produced - seen[0] > 10_000:
                time.sleep(0.002)
                continue
            pipe = client.pipeline(transaction=False)
            for i in range(produced, min(total, produced + 1_000)):
                pipe.xadd(STREAM, {"order_id": f"o{i:09d}", "page": f"p{i % 10}"}, maxlen=20_000)
            pipe.execute()
            produced = min(total, produced + 1_000)
    except BaseException as exc:
        errors.append(exc)
    finally:
        client.close()


async def _memory_run(
    url: str, total: int, batch: int, dedup_window_ms: int | None
) -> list[Sample]:
    client = redis.Redis.from_url(url)
    client.flushall()
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    seen = [0]
    app = App("bench-memory")
    options: dict[str, Any] = {}
    if dedup_window_ms is not None:
        options = {"dedup_field": "order_id", "dedup_window_ms": dedup_window_ms}

    @app.handler(STREAM, group=GROUP, idempotency="lua", batch_size=batch, block_ms=100, **options)
    async def noop(msg: Message) -> None:
        seen[0] += 1

    record = dedup_record_key(STREAM, GROUP)
    worker = Worker(app, WorkerOptions(redis_url=url, consumer=CONSUMER, shutdown_timeout_s=5))
    stop = threading.Event()
    errors: list[BaseException] = []
    producer = threading.Thread(target=_producer, args=(url, total, seen, stop, errors))
    task = asyncio.ensure_future(worker.run(install_signal_handlers=False))
    producer.start()
    samples: list[Sample] = []
    step = max(1, total // 10)
    next_at = step
    try:
        while True:
            if task.done():
                task.result()
                raise RuntimeError("the worker stopped early")
            if errors:
                raise errors[0]
            if seen[0] >= next_at or seen[0] >= total:
                samples.append(
                    Sample(
                        processed=seen[0],
                        used_memory=int(client.info("memory")["used_memory"]),
                        record_members=int(client.zcard(record)),
                        record_bytes=int(client.memory_usage(record) or 0),
                        pending=int(client.xpending(STREAM, GROUP)["pending"]),
                        stream_length=int(client.xlen(STREAM)),
                    )
                )
                next_at += step
                if seen[0] >= total:
                    return samples
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        producer.join(30)
        worker.stop()
        await asyncio.wait_for(task, 30)
        client.close()


def _article_set_bytes(url: str, n: int) -> int:
    """What the article's processed-ids SET holds after ``n`` messages (ids as XADD makes them)."""
    client = redis.Redis.from_url(url)
    client.delete(PROCESSED_SET)
    pipe = client.pipeline(transaction=False)
    base = int(time.time() * 1000)
    for i in range(n):
        pipe.sadd(PROCESSED_SET, f"{base + i // 10}-{i % 10}")
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    size = int(client.memory_usage(PROCESSED_SET) or 0)
    client.delete(PROCESSED_SET)
    client.close()
    return size


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def _report_memory(title: str, samples: list[Sample]) -> None:
    print(title)
    print(
        f"{'processed':>10}{'used_memory MB':>16}{'record members':>16}{'record MB':>11}"
        f"{'pending':>9}{'stream len':>11}"
    )
    for s in samples:
        print(
            f"{s.processed:>10}{_mb(s.used_memory):>16}{s.record_members:>16}"
            f"{_mb(s.record_bytes):>11}{s.pending:>9}{s.stream_length:>11}"
        )
    first = next((s for s in samples if s.processed >= samples[-1].processed // 10), samples[0])
    print(
        f"used_memory from {first.processed} to {samples[-1].processed} processed: "
        f"{(samples[-1].used_memory - first.used_memory) / 1e6:+.2f} MB; max record "
        f"{_mb(max(s.record_bytes for s in samples))} MB"
    )
    print()


def _pin(server: Any) -> None:
    """Give redis-server the last CPU and this process the others, as in production, where Redis
    does not compete with its clients for a core (on a 2-CPU machine their CPU time otherwise adds
    up, which penalises whichever variant asks Redis to do more)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or server.proc is None:
        print("not pinned: fewer than 2 CPUs")
        return
    os.sched_setaffinity(server.proc.pid, {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))
    print(f"redis-server pinned to CPU {cpus[-1]}, the benchmark to {cpus[:-1]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and the memory measurement; print both (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lua_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--memory-messages", type=int, default=1_000_000)
    parser.add_argument("--dedup-window-ms", type=int, default=5_000)
    parser.add_argument(
        "--redis-url", help="use this Redis (it is FLUSHALLed) instead of starting one"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="give the started redis-server a CPU of its own, and this process the others",
    )
    args = parser.parse_args(argv)
    configure_logging("console", "warning")

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.support.servers import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix="sw-lua-bench-"))
    server = None
    try:
        url = args.redis_url
        if url is None:
            server = RedisServer(tmp / "redis").start()
            url = server.url
            if args.pin:
                _pin(server)
        with redis.Redis.from_url(url) as probe:
            probe.flushall()
            version = probe.info("server")["redis_version"]
        print(
            f"redis {version}; {args.messages} messages per variant, batch {args.batch}, "
            f"{args.rounds} rounds (median)"
        )
        results = throughput(url, args.messages, args.batch, args.rounds)
        print()
        print(
            f"{'variant':<22}{'msgs/s (median)':>16}{'min':>9}{'max':>9}"
            f"{'client CPU us/msg':>19}{'Redis CPU us/msg':>18}"
        )
        rate = {}
        cpu = {}
        for name, runs in results.items():
            rates = [r.rate for r in runs]
            rate[name] = statistics.median(rates)
            cpu[name] = (
                statistics.median(r.cpu_us[0] for r in runs),
                statistics.median(r.cpu_us[1] for r in runs),
            )
            print(
                f"{name:<22}{rate[name]:>16.0f}{min(rates):>9.0f}{max(rates):>9.0f}"
                f"{cpu[name][0]:>19.1f}{cpu[name][1]:>18.1f}"
            )
        print()
        lua = rate["sw-lua"]
        # Rounds run the variants back to back, so a round's ratio is less exposed to load
        # from elsewhere on the machine than the ratio of medians.
        paired = statistics.median(
            a.rate / b.rate for a, b in zip(results["sw-lua"], results["sw-none"], strict=True)
        )
        print(
            f"sw-lua = {100 * lua / rate['sw-none']:.0f}% of sw-none (at-least-once); "
            f"median of the rounds' ratios {100 * paired:.0f}%"
        )
        print(f"sw-lua = {lua / rate['article']:.1f}x article (COUNT 1 + one EVALSHA per message)")
        print(
            f"sw-lua = {lua / rate['article-batched-read']:.1f}x article-batched-read "
            f"(COUNT {args.batch} + one EVALSHA per message)"
        )
        print(f"sw-lua = {100 * lua / rate['raw-batched']:.0f}% of raw-batched (no framework)")
        print(f"sw-none = {100 * rate['sw-none'] / rate['raw-batched']:.0f}% of raw-batched")
        lua_cpu, none_cpu = sum(cpu["sw-lua"]), sum(cpu["sw-none"])
        print(
            f"CPU per message, client + Redis: sw-lua {lua_cpu:.1f} us, sw-none {none_cpu:.1f} us "
            f"({100 * none_cpu / lua_cpu:.0f}%: the throughput ratio on a machine with nothing "
            f"else to run, if CPU bound)"
        )
        print()

        if args.memory_messages:
            n = args.memory_messages
            with_dedup = asyncio.run(_memory_run(url, n, args.batch, args.dedup_window_ms))
            _report_memory(
                f"memory, sw-lua with dedup_field (window {args.dedup_window_ms} ms), {n} messages",
                with_dedup,
            )
            without = asyncio.run(_memory_run(url, n, args.batch, None))
            _report_memory(f"memory, sw-lua without dedup_field, {n} messages", without)
            print(
                f"the article's processed-ids SET after {n} messages: "
                f"{_mb(_article_set_bytes(url, n))} MB (it only grows, unless given a TTL)"
            )
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
