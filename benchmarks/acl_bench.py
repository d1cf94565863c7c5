"""What ACL users cost per command in the embedded engine (``Engine.execute``, no network).

Run: ``python -m benchmarks.acl_bench [--baseline DIR] [--n N] [--repeat R] [--rounds K]``.

Columns, GET and SET of a small string, nanoseconds per call (best of ``--repeat`` runs of
``--n`` calls each):

* ``default``: the default user (every command, key and channel: the dispatcher's fast
  path, one attribute test);
* ``restricted``: a user allowed ``+@all -flushall`` on ``~k*`` (every command goes
  through the command, key and channel checks);
* ``selectors``: a user whose root selector allows nothing and whose second selector
  allows ``+get +set ~k*`` (the first selector's refusal is computed, then the second's
  acceptance);
* ``baseline``: with ``--baseline DIR`` (a checkout of the code before ACL users, e.g.
  ``git worktree add /tmp/base <commit>``), the default user's cost there, run in a
  subprocess with ``PYTHONPATH=DIR``, and the ratio default / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_MEASURE = r"""
import json, sys, time
from streamworker.engine import Engine

def measure(n, repeat, setup):
    e = Engine()
    admin = e.connect()
    c = e.connect()
    for argv in setup:
        e.execute(admin, argv)
        if argv[0] == b"AUTH":
            e.execute(c, argv)
    e.execute(c, [b"SET", b"k1", b"v"])
    out = {}
    for name, argv in (("GET", [b"GET", b"k1"]), ("SET", [b"SET", b"k1", b"v"])):
        best = None
        execute = e.execute
        for _ in range(repeat):
            t = time.perf_counter_ns()
            for _ in range(n):
                execute(c, argv)
            took = (time.perf_counter_ns() - t) / n
            best = took if best is None else min(best, took)
        reply = execute(c, argv)
        assert not str(reply).startswith("NOPERM"), reply
        out[name] = best
    return out

n, repeat, setup = json.loads(sys.argv[1])
print(json.dumps(measure(n, repeat, [[a.encode() for a in argv] for argv in setup])))
"""

_USERS = {
    "default": [],
    "restricted": [
        ["ACL", "SETUSER", "u", "on", ">p", "+@all", "-flushall", "~k*", "&*"],
        ["AUTH", "u", "p"],
    ],
    "selectors": [
        ["ACL", "SETUSER", "u", "on", ">p", "(+get +set ~k*)"],
        ["AUTH", "u", "p"],
    ],
}


def _run(pythonpath: str, n: int, repeat: int, setup: list[list[str]]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps([n, repeat, setup])],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a checkout of the code before ACL users")
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    started = time.monotonic()
    runs: list[tuple[str, str, list[list[str]]]] = [
        (name, here, setup) for name, setup in _USERS.items()
    ]
    if args.baseline:
        runs.append(("baseline", args.baseline, []))
    # The columns are measured in turn, --rounds times, each keeping its best: a busy
    # machine then slows every column alike rather than the one that ran during a burst.
    columns: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for name, path, setup in runs:
            got = _run(path, args.n, args.repeat, setup)
            best = columns.setdefault(name, got)
            for cmd, ns in got.items():
                best[cmd] = min(best[cmd], ns)
    names = list(columns)
    print(
        f"Engine.execute, ns per call (best of {args.rounds} rounds x {args.repeat} runs x "
        f"{args.n} calls)"
    )
    header = f"{'command':<8}" + "".join(f"{n:>12}" for n in names)
    if args.baseline:
        header += f"{'default/baseline':>18}"
    print(header)
    for cmd in ("GET", "SET"):
        line = f"{cmd:<8}" + "".join(f"{columns[n][cmd]:>12.0f}" for n in names)
        if args.baseline:
            line += f"{columns['default'][cmd] / columns['baseline'][cmd]:>18.3f}"
        print(line)
    print(f"({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
