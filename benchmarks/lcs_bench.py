"""LCS on the embedded engine against redis-server 7.0, side by side.

Run: ``python -m benchmarks.lcs_bench`` (or ``make bench``). Starts its own redis-server in a
temp dir and a fresh in-process engine, stores the same pair of random DNA-like strings on both
(``--sizes``, each the length of both strings) and times ``LCS a b LEN``, ``LCS a b`` and
``LCS a b IDX MINMATCHLEN 4`` on each (best of ``--repeat``), checking that both give the same
reply. Also a one-byte string against a long run (``a`` + ``c`` * ``--run``), which Redis walks
back one cell at a time.

Redis fills a ``(n+1) x (m+1)`` table of uint32 (4 bytes a cell); the engine keeps one bit a cell
(:mod:`streamworker.engine.model.lcs`), so the transient table is printed for both. redis-server
is timed over loopback TCP (one round trip included), the engine in-process.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from streamworker.engine import Engine
from streamworker.engine.protocol import encode


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best = float("inf")
    out: object = None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,4000", help="string lengths, comma-separated")
    parser.add_argument("--run", type=int, default=2_000_000, help="length of the long run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from tests.engine.conftest import RawRedis
    from tests.support.servers import RedisServer

    rng = random.Random(42)
    with tempfile.TemporaryDirectory(prefix="lcs-bench-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            real = RawRedis(server.port)
            engine = Engine()
            client = engine.connect()

            def on_engine(*words: bytes) -> bytes:
                return encode(engine.execute(client, list(words)), 2)

            cases: list[tuple[str, bytes, bytes]] = []
            for size in (int(s) for s in args.sizes.split(",")):
                a = bytes(rng.choice(b"acgt") for _ in range(size))
                b = bytes(rng.choice(b"acgt") for _ in range(size))
                cases.append((f"{size} x {size}", a, b))
            cases.append((f"1 x {args.run} (run)", b"a", b"a" + b"c" * args.run))
            header = (
                f"{'strings':<22} {'command':<24} {'redis ms':>9} {'engine ms':>10} "
                f"{'engine/redis':>12} {'redis table':>12} {'engine table':>12}"
            )
            print(header)
            for label, a, b in cases:
                real.call("SET", "a", a)
                real.call("SET", "b", b)
                on_engine(b"SET", b"a", a)
                on_engine(b"SET", b"b", b)
                cells = (len(a) + 1) * (len(b) + 1)
                for options in ((b"LEN",), (), (b"IDX", b"MINMATCHLEN", b"4")):
                    words = (b"LCS", b"a", b"b", *options)
                    t_real, r_real = _best(lambda w=words: real.call(*w), args.repeat)
                    t_eng, r_eng = _best(lambda w=words: on_engine(*w), args.repeat)
                    if r_real != r_eng:
                        print(f"MISMATCH on {label} {words!r}", file=sys.stderr)
                        return 1
                    name = " ".join(w.decode() for w in words[3:]) or "(string)"
                    print(
                        f"{label:<22} {name:<24} {t_real * 1000:>9.1f} {t_eng * 1000:>10.1f} "
                        f"{t_eng / t_real:>11.2f}x {cells * 4 / 2**20:>10.1f}MB "
                        f"{cells / 8 / 2**20:>10.2f}MB"
                    )
            real.close()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
