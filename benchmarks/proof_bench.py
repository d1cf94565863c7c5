"""Proof: streamworker side by side with the raw loops and the peer frameworks (issue 10).

Run: ``python -m benchmarks.proof_bench`` (full, ~10-15 min) or ``--quick`` (~5 min);
``make bench`` runs it with the others after installing the ``bench`` extra (the peers, pinned).
Starts its own redis-server 7 and PostgreSQL 15 (fsync on) on loopback ports, runs every
consumer as a subprocess (streamworker as ``streamworker run benchmarks.proof.swapp:app``), and
writes to ``--out`` (default ``benchmarks/results/``): ``proof.json`` (every figure),
``proof.md`` (the report with the targets) and ``proof.png`` (the chart).

* **throughput**: pre-fill N, then drain, no-op handler and a small DB insert; timed from the
  group's first delivery to the moment everything is delivered and acked;
* **crash**: kill -9 the consumer's process group at 50% of the drain, restart it, count the
  messages handled twice and never handled;
* **latency**: a producer at fixed rates for ``--latency-s`` seconds, two consumers blocked in
  XREADGROUP, produce-to-handle p50/p99/p99.9, streamworker Lua and at-least-once and the raw
  loop (XREADGROUP BLOCK + XACK) as the floor.

See benchmarks/README.md ("Proof") for what each variant guarantees and how the peers are
configured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PEER_MODULES = {
    "taskiq": "taskiq_redis",
    "streaq": "streaq",
    "faststream": "faststream",
    "rsq": "redis_stream_queue",
}
# The three variants behind the throughput ratios: measured in interleaved rounds.
CORE = ("raw-batched", "sw-none", "sw-lua")
PEER_DISTS = ("taskiq", "taskiq-redis", "streaq", "faststream", "redis-stream-queue")


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("redis", "hiredis", *PEER_DISTS, "matplotlib"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    redis_server = shutil.which("redis-server")
    if redis_server:
        out["redis-server"] = subprocess.run(
            [redis_server, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.proof_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="small counts, 5 s latency runs")
    p.add_argument("--messages", type=int, help="throughput, no-op handler (default 100000)")
    p.add_argument("--db-messages", type=int, help="throughput, DB insert (default 3000)")
    p.add_argument("--crash-messages", type=int, help="crash table (default 10000)")
    p.add_argument("--latency-s", type=float, help="seconds per latency run (default 30)")
    p.add_argument("--rates", default="5000,10000", help="latency producer rates, msg/s")
    p.add_argument(
        "--rounds",
        type=int,
        help="no-op throughput rounds of raw-batched, sw-none, sw-lua, interleaved; the median "
        "is reported (default 3; 1 with --quick)",
    )
    p.add_argument("--batch", type=int, default=100, help="read/prefetch size for everyone")
    p.add_argument("--claim-idle-ms", type=int, default=5000, help="reclaim idle time, all")
    p.add_argument(
        "--only", default="throughput,crash,latency", help="scenarios to run (comma list)"
    )
    p.add_argument("--variants", help="comma list (default: all whose packages are installed)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rebuild proof.md and proof.png from --out's proof.json",
    )
    return p


def _write(results: dict[str, Any], out: Path) -> int:
    """Validate, then write proof.json, proof.md and proof.png into ``out``."""
    from benchmarks.proof import report

    results["targets"] = report.targets(results)
    problems = report.validate(results)
    if problems:
        print("schema problems:", *problems, sep="\n  ", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    (out / "proof.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "proof.md").write_text(report.markdown(results))
    written = [out / "proof.json", out / "proof.md"]
    try:
        report.chart(results, out / "proof.png")
        written.append(out / "proof.png")
    except ImportError:
        print("matplotlib is not installed: no chart (`pip install -e '.[bench]'`)")
    print()
    print(report.markdown(results))
    print("wrote", ", ".join(map(str, written)))
    return 1 if problems else 0


def _guarded(run: Callable[[], dict[str, Any]], row: dict[str, Any]) -> dict[str, Any]:
    """One scenario run; an unexpected failure becomes an ``error`` row, not the end of the run
    (the scenarios already turn a consumer that dies or stalls into one)."""
    try:
        return run()
    except Exception as exc:
        return {**row, "seconds": None, "rate": None, "error": f"{type(exc).__name__}: {exc}"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proof benchmarks and write JSON, Markdown and PNG (see the module docstring)."""
    args = _parser().parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.report_only:
        return _write(json.loads((args.out / "proof.json").read_text()), args.out)
    quick = args.quick
    n = args.messages or (3000 if quick else 100_000)
    n_db = args.db_messages or (500 if quick else 3000)
    n_crash = args.crash_messages or (2000 if quick else 10000)
    latency_s = args.latency_s or (5.0 if quick else 30.0)
    rates = [int(r) for r in args.rates.split(",") if r]
    rounds = args.rounds or (1 if quick else 3)
    only = set(args.only.split(","))

    from benchmarks.proof import db, report, scenarios
    from benchmarks.proof.variants import VARIANTS, Env, iter_variants
    from tests.support.postgres import PostgresServer
    from tests.support.servers import RedisServer

    names = args.variants.split(",") if args.variants else list(VARIANTS)
    notes: list[str] = []
    chosen = []
    for v in iter_variants(names):
        module = PEER_MODULES.get(v.name)
        if module and importlib.util.find_spec(module) is None:
            notes.append(
                f"{v.name}: not run, {module} is not installed (`pip install -e '.[bench]'`)."
            )
            continue
        chosen.append(v)

    tmp = Path(tempfile.mkdtemp(prefix="sw-proof-"))
    redis_server = RedisServer(tmp / "redis").start()
    pg_server = PostgresServer(durable=True).start()
    env = Env(
        redis_url=redis_server.url,
        pg_url=pg_server.url(),
        sqlite_url=f"sqlite:///{tmp / 'proof.db'}",
        workdir=tmp,
        batch=args.batch,
        claim_idle_ms=args.claim_idle_ms,
    )
    results: dict[str, Any] = {
        "schema": report.SCHEMA,
        "meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "command": " ".join(
                ["python -m benchmarks.proof_bench", *(sys.argv[1:] if argv is None else argv)]
            ),
            "versions": _versions(),
            "options": {
                "messages": n,
                "db_messages": n_db,
                "crash_messages": n_crash,
                "latency_s": latency_s,
                "rates": rates,
                "rounds": rounds,
                "batch": args.batch,
                "claim_idle_ms": args.claim_idle_ms,
            },
            "consumers": "every consumer is a subprocess; streamworker runs as "
            "`streamworker run benchmarks.proof.swapp:app`",
        },
        "guarantees": {v.name: v.guarantee for v in chosen},
        "throughput": [],
        "crash": [],
        "latency": [],
        "notes": notes,
    }
    try:
        db.prepare(env.pg_url)
        db.prepare(env.sqlite_url)

        def log(row: dict[str, Any]) -> None:
            shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
            print("  ", json.dumps(shown), flush=True)

        if "throughput" in only:
            print(f"throughput: {n} messages (no-op), {n_db} (DB insert)", flush=True)
            core = [v for v in chosen if v.name in CORE]
            for handler, count in (("noop", n), ("db", n_db)):
                for round_ in range(rounds if handler == "noop" else 1):
                    for v in chosen if round_ == 0 else core:
                        timeout = 120 + count / 100
                        row = _guarded(
                            partial(scenarios.throughput, env, v, handler, count, timeout),
                            {"variant": v.name, "handler": handler, "messages": count},
                        )
                        row["round"] = round_ + 1
                        results["throughput"].append(row)
                        log(row)
        if "crash" in only:
            print(f"crash: {n_crash} messages, kill -9 at 50%", flush=True)
            for v in chosen:
                row = _guarded(
                    partial(
                        scenarios.crash,
                        env,
                        v,
                        n_crash,
                        settle_s=15 if quick else 25,
                        timeout_s=180,
                    ),
                    {"variant": v.name, "messages": n_crash},
                )
                results["crash"].append(row)
                log(row)
        if "latency" in only:
            print(f"latency: {rates} msg/s for {latency_s:.0f} s each", flush=True)
            for rate in rates:
                for name in ("raw-block", "sw-none", "sw-lua"):
                    v = VARIANTS["raw-batched" if name == "raw-block" else name]
                    if name == "raw-block":
                        v = replace(v, name="raw-block", consumer_kind="raw-block")
                    row = _guarded(
                        partial(scenarios.latency, env, v, rate, latency_s),
                        {"variant": v.name, "rate": rate, "duration_s": latency_s},
                    )
                    results["latency"].append(row)
                    log(row)
        results["meta"]["loadavg_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    finally:
        db.dispose()
        pg_server.destroy()
        redis_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(results, args.out)


if __name__ == "__main__":
    sys.exit(main())
