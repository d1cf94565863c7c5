"""Cost of ``redis.call`` inside a script on the embedded engine: per-call time of a loop of
``redis.call`` with 1, 3 and 10 arguments, and of one call with 5,000 arguments.

Run: ``python -m benchmarks.redis_call_bench [--calls N] [--rounds R]`` on two checkouts to
compare them (best of R rounds each, microseconds per call).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from streamworker.engine import Engine

_LOOP = "for i = 1, tonumber(ARGV[1]) do redis.call({args}) end return 1"
_CASES = {
    "1 arg (PING)": "'ping'",
    "3 args (SET k v)": "'set', 'k', 'v'",
    "10 args (HSET)": "'hset', 'h', 'a', '1', 'b', '2', 'c', '3', 'd', '4'",
}
_MANY = (
    "local a = {} for i = 1, 5000 do a[i] = i end "
    "for i = 1, tonumber(ARGV[1]) do redis.call('del', unpack(a)) end return 1"
)


def _best_us(engine: Engine, script: str, calls: int, rounds: int) -> float:
    client = engine.connect()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        engine.execute(client, [b"EVAL", script.encode(), b"0", str(calls).encode()])
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    """Print microseconds per redis.call for each case."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_call_bench")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    engine = Engine()
    for name, call_args in _CASES.items():
        us = _best_us(engine, _LOOP.format(args=call_args), args.calls, args.rounds)
        print(f"{name:<22} {us:8.2f} us/call")
    us = _best_us(engine, _MANY, max(1, args.calls // 1000), args.rounds)
    print(f"{'5000 args (DEL)':<22} {us:8.2f} us/call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
