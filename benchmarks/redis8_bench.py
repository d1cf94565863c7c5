"""Redis 8 paths against their 7.0 fallbacks, side by side on one engine server
(``streamworker engine serve --redis-version 8.10``, a subprocess), in one run.

Run: ``python -m benchmarks.redis8_bench`` (or ``--redis-url`` of a server that has the 8.x
commands; it is FLUSHALLed). Prints, for ``--rounds`` rounds with the variants interleaved in
each round, the median, the spread (min..max) and the ratio of the medians:

* **reclaim**: a dead consumer left ``--entries`` entries pending, idle; a rescuer takes them
  all over (min-idle-time 2 s, both) and has their delivery counters in hand, as the worker
  does:

  * ``xautoclaim``: the reclaimer's path (``runtime.reclaimer.autoclaim_pages``): XAUTOCLAIM
    page by page (COUNT ``--count``) and XPENDING for each page's counters;
  * ``claim``: the consume loop's path on a server with CLAIM: ``XREADGROUP … COUNT --count
    CLAIM 2000 … >`` read after read (``io.redisio.read_group`` + ``parse_claim_reply``), the
    counters in the reply.

  Measured: the time to take all of them over (latency per entry) and the round trips per
  reclaimed entry (calls sent / entries).
* **publish**: ``--publishes`` keyed publishes, one by one:

  * ``marker``: ``Producer(…, use_idmp=False).publish(…, idempotency_key=…)``
    (``publish_once.lua`` by EVALSHA: GET and SET of a marker key, XADD);
  * ``idmp``: ``Producer.publish(…, idempotency_key=…)`` on the server with IDMP, the producer's
    own choice (``publish_idmp.lua``: XINFO STREAM, ``XADD … IDMP``);
  * ``bare-idmp``: ``XADD stream IDMP producer iid * …`` alone, what IDMP costs without the
    script that tells a duplicate (the floor; not a keyed publish: no duplicate flag).

``--only reclaim|publish`` runs one of the two.

The engine is Python: absolute figures are the engine's, not Redis's; the ratios say what each
path costs in calls and server work relative to the other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis
import redis.asyncio as aioredis

from streamworker.io.redisio import open_redis, parse_claim_reply, read_group
from streamworker.producing.producer import Producer
from streamworker.runtime.reclaimer import autoclaim_pages

ROOT = Path(__file__).resolve().parent.parent

# The min-idle-time of both variants: the stranded entries are older, and a run takes less, so
# an entry the rescuer has just claimed (idle 0) is not claimed again by its next read.
MIN_IDLE_MS = 2_000


def _engine_server(port: int) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "streamworker",
        "engine",
        "serve",
        "--port",
        str(port),
        "--redis-version",
        "8.10",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if redis.Redis(port=port, socket_timeout=1).ping():
                return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("engine serve did not start")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Counting:
    """Counts the calls a client sends (round trips: the bench's clients send one at a time)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.calls = 0
        original = client.execute_command

        async def counted(*args: object, **kwargs: object) -> object:
            self.calls += 1
            return await original(*args, **kwargs)

        client.execute_command = counted  # type: ignore[method-assign]


def _strand(sync: redis.Redis, stream: str, entries: int) -> None:
    """``entries`` entries read by a consumer that then died (pending, delivered once)."""
    sync.delete(stream)
    pipe = sync.pipeline(transaction=False)
    for i in range(entries):
        pipe.xadd(stream, {"n": str(i), "body": "x" * 64})
    pipe.execute()
    sync.xgroup_create(stream, "g", id="0")
    sync.xreadgroup("g", "dead", {stream: ">"}, count=entries)


async def _by_xautoclaim(client: aioredis.Redis, stream: str, count: int) -> int:
    taken = 0
    async for page in autoclaim_pages(client, stream, "g", "rescuer", MIN_IDLE_MS, count=count):
        assert all(page.counts[e.id] == 2 for e in page.entries)
        taken += len(page.entries)
    return taken


async def _by_claim(client: aioredis.Redis, stream: str, count: int) -> int:
    taken = 0
    while True:
        reply = await read_group(
            client, "g", "rescuer", stream, b">", count=count, block_ms=None, claim_ms=MIN_IDLE_MS
        )
        got = parse_claim_reply(reply, stream.encode())
        if not got.claimed:
            return taken
        assert all(got.counts[e.id] == 2 for e in got.entries[: got.claimed])
        taken += got.claimed


async def _reclaim_round(
    url: str, sync: redis.Redis, entries: int, count: int, round_no: int
) -> dict[str, tuple[float, float]]:
    """Per variant: (seconds per entry, round trips per entry); the order alternates by
    round."""
    out: dict[str, tuple[float, float]] = {}
    variants: dict[str, Callable[[aioredis.Redis, str, int], Awaitable[int]]] = {
        "xautoclaim": _by_xautoclaim,
        "claim": _by_claim,
    }
    for name in variants:
        _strand(sync, f"bench:{name}", entries)
    await asyncio.sleep(MIN_IDLE_MS / 1000 + 0.1)
    order = list(variants.items())
    for name, take in order if round_no % 2 == 0 else order[::-1]:
        stream = f"bench:{name}"
        client = open_redis(url)
        counter = Counting(client)
        try:
            await client.ping()
            counter.calls = 0
            start = time.perf_counter()
            taken = await take(client, stream, count)
            elapsed = time.perf_counter() - start
        finally:
            await client.aclose()
        assert taken == entries, (name, taken)
        out[name] = (elapsed / entries, counter.calls / entries)
    return out


async def _publish_round(url: str, sync: redis.Redis, n: int, round_no: int) -> dict[str, float]:
    """Per variant: publishes per second."""
    out: dict[str, float] = {}
    client = open_redis(url)
    try:
        by_marker = Producer(client, idempotency_window_ms=100_000, use_idmp=False)
        by_idmp = Producer(client, idempotency_window_ms=100_000, use_idmp=True)
        sync.delete("pub:marker", "pub:idmp", "pub:bare")

        async def marker(i: int) -> None:
            await by_marker.publish("pub:marker", {"n": i}, idempotency_key=f"r{round_no}-{i}")

        async def idmp(i: int) -> None:
            await by_idmp.publish("pub:idmp", {"n": i}, idempotency_key=f"r{round_no}-{i}")

        async def bare_idmp(i: int) -> None:
            await client.execute_command(  # type: ignore[no-untyped-call]
                "XADD", "pub:bare", "IDMP", "bench", f"r{round_no}-{i}", "*", "n", i
            )

        order: list[tuple[str, Callable[[int], Awaitable[None]]]] = [
            ("marker", marker),
            ("idmp", idmp),
            ("bare-idmp", bare_idmp),
        ]
        for name, publish in order if round_no % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            for i in range(n):
                await publish(i)
            out[name] = n / (time.perf_counter() - start)
        if by_idmp.keyed_path != "idmp":
            raise SystemExit(f"the server has no IDMP (keyed path: {by_idmp.keyed_path})")
    finally:
        await client.aclose()
    return out


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _spread(values: list[float], scale: float, unit: str) -> str:
    med = statistics.median(values)
    return f"{med * scale:10.1f} {unit}  ({min(values) * scale:.1f}..{max(values) * scale:.1f})"


async def _run(url: str, args: argparse.Namespace) -> None:
    sync = redis.Redis.from_url(url)
    sync.flushall()
    reclaim: dict[str, list[tuple[float, float]]] = {"xautoclaim": [], "claim": []}
    publish: dict[str, list[float]] = {"marker": [], "idmp": [], "bare-idmp": []}
    for round_no in range(args.rounds):
        if args.only != "publish":
            for name, figures in (
                await _reclaim_round(url, sync, args.entries, args.count, round_no)
            ).items():
                reclaim[name].append(figures)
        if args.only != "reclaim":
            for name, rate in (await _publish_round(url, sync, args.publishes, round_no)).items():
                publish[name].append(rate)
    print(f"load average at the end: {_loadavg()}")
    if args.only != "publish":
        _print_reclaim(reclaim, args)
    if args.only != "reclaim":
        _print_publish(publish, args)


def _print_reclaim(reclaim: dict[str, list[tuple[float, float]]], args: argparse.Namespace) -> None:
    print(f"reclaim: {args.entries} entries, COUNT {args.count}, {args.rounds} rounds")
    for name, rows in reclaim.items():
        per_entry = [r[0] for r in rows]
        trips = [r[1] for r in rows]
        print(
            f"  {name:11s} latency/entry {_spread(per_entry, 1e6, 'us')}"
            f"   round trips/entry {statistics.median(trips):.3f}"
        )
    lat_ratio = statistics.median(r[0] for r in reclaim["xautoclaim"]) / statistics.median(
        r[0] for r in reclaim["claim"]
    )
    trip_ratio = statistics.median(r[1] for r in reclaim["xautoclaim"]) / statistics.median(
        r[1] for r in reclaim["claim"]
    )
    print(f"  xautoclaim/claim: latency x{lat_ratio:.2f}, round trips x{trip_ratio:.2f}")


def _print_publish(publish: dict[str, list[float]], args: argparse.Namespace) -> None:
    print(f"publish: {args.publishes} keyed publishes one by one, {args.rounds} rounds")
    for name, rates in publish.items():
        print(f"  {name:11s} {_spread(rates, 1.0, '/s')}")
    ratio = statistics.median(publish["idmp"]) / statistics.median(publish["marker"])
    floor = statistics.median(publish["bare-idmp"]) / statistics.median(publish["marker"])
    print(f"  idmp/marker (rate): x{ratio:.2f}; bare-idmp/marker: x{floor:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--redis-url", help="a server with the 8.x commands (FLUSHALLed)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--only", choices=("reclaim", "publish"))
    args = parser.parse_args(argv)
    if args.redis_url:
        asyncio.run(_run(args.redis_url, args))
        return 0
    port = _free_port()
    server = _engine_server(port)
    try:
        asyncio.run(_run(f"redis://127.0.0.1:{port}/0", args))
    finally:
        server.terminate()
        server.wait(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
