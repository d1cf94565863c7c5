"""What the engine's memory upkeep costs per command, side by side.

Run: ``python -m benchmarks.memory_bench`` (``--quick`` for a smoke run).

Three engines, the same commands through ``Engine.execute`` (in-process, no client library):

* ``default``: ``maxmemory 0``, ``noeviction`` (nothing tracked; the dispatch still counts
  INFO commandstats and the latency histogram of every call);
* ``maxmemory``: ``maxmemory 1gb``, ``allkeys-lru`` (each call stamps its keys' LRU field and
  every write re-estimates the keys it named; never over the limit);
* ``evicting``: ``allkeys-lru`` with ``maxmemory`` just above the data, so that every SET of a
  new key evicts one (SET only).

Measured: GET and SET of a small string, and HSET on a 1,000-field hash (the estimate samples 5
fields, so it does not grow with the hash). Best of ``--repeat`` rounds, the engines
interleaved within a round. ns per command, and each column's ratio to ``default``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

from streamworker.engine import Engine
from streamworker.engine.context import ClientState


def _engine(kind: str) -> tuple[Engine, ClientState]:
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"SET", b"k", b"v"])
    engine.execute_many(client, [[b"HSET", b"h", b"f%d" % i, b"v" * 10] for i in range(1000)])
    if kind == "maxmemory":
        engine.execute(client, [b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-lru"])
        engine.execute(client, [b"CONFIG", b"SET", b"maxmemory", b"1gb"])
    elif kind == "evicting":
        engine.execute(client, [b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-lru"])
        engine.execute_many(client, [[b"SET", b"fill:%d" % i, b"x" * 20] for i in range(5000)])
        used = engine.memory.used_memory()
        engine.execute(client, [b"CONFIG", b"SET", b"maxmemory", str(used + 100).encode()])
    return engine, client


def _ops(kind: str, n: int) -> dict[str, Callable[[Engine, ClientState], None]]:
    def get(engine: Engine, client: ClientState) -> None:
        argv = [b"GET", b"k"]
        for _ in range(n):
            engine.execute(client, argv)

    def set_(engine: Engine, client: ClientState) -> None:
        if kind == "evicting":
            # New keys: each one pushes the oldest out.
            for i in range(n):
                engine.execute(client, [b"SET", b"new:%d" % i, b"x" * 20])
            return
        argv = [b"SET", b"k", b"v"]
        for _ in range(n):
            engine.execute(client, argv)

    def hset(engine: Engine, client: ClientState) -> None:
        argv = [b"HSET", b"h", b"f1", b"w" * 10]
        for _ in range(n):
            engine.execute(client, argv)

    if kind == "evicting":
        return {"SET": set_}
    return {"GET": get, "SET": set_, "HSET 1,000 fields": hset}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory_bench")
    p.add_argument("--ops", type=int, default=50_000, help="commands per timed pass")
    p.add_argument("--repeat", type=int, default=5, help="rounds; the best one is reported")
    p.add_argument("--quick", action="store_true", help="a smoke run (figures meaningless)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.quick:
        args.ops, args.repeat = 2_000, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    kinds = ("default", "maxmemory", "evicting")
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeat):
        for kind in kinds:
            # A fresh engine per pass: the evicting one must start at its limit again.
            for name, op in _ops(kind, args.ops).items():
                engine, client = _engine(kind)
                t = time.perf_counter()
                op(engine, client)
                ns = (time.perf_counter() - t) / args.ops * 1e9
                best[kind, name] = min(ns, best.get((kind, name), ns))
    print(f"{'command':<20}" + "".join(f"{k:>22}" for k in kinds))
    for name in ("GET", "SET", "HSET 1,000 fields"):
        base = best["default", name]
        cells = []
        for kind in kinds:
            ns = best.get((kind, name))
            cells.append(f"{'-':>22}" if ns is None else f"{ns:>10.0f} ns ({ns / base:4.2f}x)")
        print(f"{name:<20}" + "".join(f"{c:>22}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
