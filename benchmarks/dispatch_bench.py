"""What one command costs through ``Engine.execute``, this checkout beside another one.

Run: ``python -m benchmarks.dispatch_bench [--against DIR] [--ops N] [--repeat N]``.

GET and SET of a small string and HSET of one field of a 1,000-field hash, on an engine with
the default configuration (no ``maxmemory``, no persistence), through ``Engine.execute`` (no
client library, no socket); and GET and SET run by a Lua script (``redis.call`` in a loop of
1,000 per EVAL, per call). Each round times every command once per side; the best round is
reported, in ns per command.

``--against DIR`` names another checkout (for instance ``git archive`` of the commit before a
change, unpacked): its ``streamworker`` package is timed in a child process of its own, the
rounds of the two sides interleaved so that the machine's load hits both alike, and the table
shows both columns and their ratio (this checkout / the other one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

_NAMES = ("GET", "SET", "HSET 1,000 fields", "redis.call GET", "redis.call SET")
_SCRIPT_CALLS = 1000  # redis.call per EVAL in the script rows


def _one_round(ops: int) -> dict[str, float]:
    """Time each command ``ops`` times on a fresh engine; ns per command."""
    from streamworker.engine import Engine

    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"SET", b"k", b"v"])
    engine.execute_many(client, [[b"HSET", b"h", b"f%d" % i, b"v" * 10] for i in range(1000)])
    out: dict[str, float] = {}
    commands = ([b"GET", b"k"], [b"SET", b"k", b"v"], [b"HSET", b"h", b"f1", b"w" * 10])
    for name, argv in zip(_NAMES, commands, strict=False):
        execute = engine.execute
        t = time.perf_counter()
        for _ in range(ops):
            execute(client, argv)
        out[name] = (time.perf_counter() - t) / ops * 1e9
    # Commands a Lua script runs (Engine.call_from_script): a loop of redis.call per EVAL.
    for name, call in (
        ("redis.call GET", b"redis.call('get', KEYS[1])"),
        ("redis.call SET", b"redis.call('set', KEYS[1], 'v')"),
    ):
        body = b"for i = 1, %d do %s end return 1" % (_SCRIPT_CALLS, call)
        argv = [b"EVAL", body, b"1", b"k"]
        engine.execute(client, argv)  # compiled and cached before timing
        evals = max(1, ops // _SCRIPT_CALLS)
        t = time.perf_counter()
        for _ in range(evals):
            engine.execute(client, argv)
        out[name] = (time.perf_counter() - t) / (evals * _SCRIPT_CALLS) * 1e9
    return out


def _child(path: str, ops: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=path)
    code = (
        "import json, sys; from benchmarks.dispatch_bench import _one_round; "
        f"print(json.dumps(_one_round({ops})))"
    )
    # The benchmarks package comes from this checkout, the engine from the other one.
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = f"{path}{os.pathsep}{here}"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dispatch_bench")
    p.add_argument("--ops", type=int, default=50_000, help="commands per timed pass")
    p.add_argument("--repeat", type=int, default=7, help="rounds; the best one is reported")
    p.add_argument("--against", help="another checkout to time beside this one")
    p.add_argument("--quick", action="store_true", help="a smoke run (figures meaningless)")
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.quick:
        args.ops, args.repeat = 2_000, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    here = str(Path(__file__).resolve().parent.parent)
    sides = {"this": here}
    if args.against:
        sides["other"] = str(Path(args.against).resolve())
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeat):
        for side, path in sides.items():
            for name, ns in _child(path, args.ops).items():
                best[side, name] = min(ns, best.get((side, name), ns))
    header = f"{'command':<20}{'this':>12}"
    if args.against:
        header += f"{'other':>12}{'ratio':>8}"
    print(header)
    for name in _NAMES:
        line = f"{name:<20}{best['this', name]:>9.0f} ns"
        if args.against:
            other = best["other", name]
            line += f"{other:>9.0f} ns{best['this', name] / other:>7.2f}x"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
