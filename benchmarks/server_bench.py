"""The engine's RESP server against a real redis-server, side by side in one run.

Run: ``python -m benchmarks.server_bench`` (or ``python -m benchmarks`` for every benchmark).
Starts ``streamworker engine serve`` and redis-server 7.0 on free loopback ports, each with the
same persistence (``--persistence memory``: none; ``everysec``/``always``: an append-only file
with that fsync policy, in a temp dir), and drives both with the same load generator:
``redis-benchmark`` (C, one client, ``-c 1``), so the client's own cost does not flatter the
slower server. Each measurement runs ``--rounds`` times, the two servers alternating, and the
median is reported.

* ``XADD s * f v``: unpipelined and ``-P 100``;
* ``XREADGROUP GROUP g c COUNT 1 STREAMS s >`` then ``XACK s g 1-<random>`` over a stream
  pre-filled with IDs ``1-0 .. 1-N``: redis-benchmark runs one command per test, so the two
  are timed separately and the pair's rate is ``1 / (1/read + 1/ack)``;
* with ``--scripts`` (default on), the check-mark-ack script over a batch of 100 IDs
  (``SISMEMBER`` the processed set, ``SADD``, ``XACK`` per ID, one EVALSHA per batch) through
  redis-py on the engine server, against fakeredis (in-process) and redis-server. Skipped, and
  said so, when the engine answers EVALSHA with "unknown command".

Targets (the issue's): engine >= 50% of redis-server unpipelined, >= 20% with ``-P 100``,
scripts >= 5x fakeredis.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]

CHECK_MARK_ACK = """
-- KEYS[1] stream, KEYS[2] processed-ids set; ARGV[1] group, ARGV[2..] entry IDs.
-- Acks every ID; returns how many were new (not processed before).
local fresh = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[2], id) == 0 then
    redis.call('SADD', KEYS[2], id)
    fresh = fresh + 1
  end
  redis.call('XACK', KEYS[1], ARGV[1], id)
end
return fresh
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server child process on a free loopback port (redis-server or engine serve)."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: Path) -> None:
        self.name = name
        self.port = port
        self.dir = workdir
        log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, cwd=workdir)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                with redis.Redis(port=port, socket_timeout=2) as r:
                    r.ping()
                return
            except (redis.ConnectionError, redis.TimeoutError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start; see {workdir}/{name}.log") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_redis(binary: str, persistence: str, workdir: Path) -> Server:
    port = _free_port()
    d = workdir / "redis"
    d.mkdir()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", ""]
    if persistence == "memory":
        argv += ["--appendonly", "no"]
    else:
        argv += ["--appendonly", "yes", "--appendfsync", persistence]
    return Server("redis-server", argv, port, d)


def start_engine(persistence: str, workdir: Path) -> Server:
    port = _free_port()
    d = workdir / "engine"
    d.mkdir()
    argv = [sys.executable, "-m", "streamworker", "engine", "serve", "--port", str(port)]
    if persistence != "memory":
        argv += ["--dir", str(d / "data"), "--appendfsync", persistence]
    return Server("engine", argv, port, d)


# --- measurements --------------------------------------------------------------------------------


def redis_benchmark(
    port: int, n: int, pipeline: int, command: Sequence[str], rnd: int = 0
) -> float:
    """requests/s of one redis-benchmark client running ``command`` ``n`` times."""
    binary = shutil.which("redis-benchmark")
    assert binary is not None
    argv = [binary, "-p", str(port), "-c", "1", "-n", str(n), "-P", str(pipeline), "--csv"]
    if rnd:
        argv += ["-r", str(rnd)]
    out = subprocess.run(
        argv + list(command), capture_output=True, text=True, check=True, timeout=600
    ).stdout
    last = [line for line in out.splitlines() if line.startswith('"')][-1]
    return float(last.split(",")[1].strip('"'))


def prefill(server: Server, entries: int) -> None:
    """Stream ``s`` with IDs 1-0 .. 1-(entries-1) and group ``g`` at 0."""
    with server.client() as r:
        r.delete("s", "processed")
        pipe = r.pipeline(transaction=False)
        for i in range(entries):
            pipe.execute_command("XADD", "s", f"1-{i}", "f", "v")
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()
        r.xgroup_create("s", "g", "0")


def read_ack_rate(server: Server, n: int, pipeline: int) -> float:
    prefill(server, n)
    read = redis_benchmark(
        server.port,
        n,
        pipeline,
        ["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"],
    )
    ack = redis_benchmark(server.port, n, pipeline, ["XACK", "s", "g", "1-__rand_int__"], rnd=n)
    return 1 / (1 / read + 1 / ack)


def script_rate(client: redis.Redis, batches: int, budget_s: float) -> float:
    """Batches/s of the check-mark-ack script over 100 fresh IDs per batch."""
    client.delete("s", "processed")
    pipe = client.pipeline(transaction=False)
    for i in range(batches * 100):
        pipe.execute_command("XADD", "s", f"1-{i}", "f", "v")
    pipe.execute()
    client.xgroup_create("s", "g", "0")
    client.xreadgroup("g", "c", {"s": ">"}, count=batches * 100)
    sha = client.script_load(CHECK_MARK_ACK)
    done = 0
    started = time.perf_counter()
    for b in range(batches):
        ids = [f"1-{i}" for i in range(b * 100, b * 100 + 100)]
        assert client.evalsha(sha, 2, "s", "processed", "g", *ids) == 100
        done += 1
        if time.perf_counter() - started > budget_s:
            break
    return done / (time.perf_counter() - started)


def scripting_available(server: Server) -> bool:
    with server.client() as r:
        try:
            r.eval("return 1", 0)
        except redis.ResponseError as exc:
            if "unknown command" in str(exc):
                return False
            raise
    return True


@dataclass
class Row:
    what: str
    redis: float
    engine: float
    target: float  # engine / redis at least

    @property
    def ratio(self) -> float:
        return self.engine / self.redis if self.redis else 0.0


def _median(run: Callable[[], float], rounds: int) -> float:
    return statistics.median(run() for _ in range(rounds))


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_bench", description=__doc__)
    p.add_argument("--persistence", choices=("memory", "everysec", "always"), default="everysec")
    p.add_argument("--rounds", type=int, default=3, help="runs per measurement (median)")
    p.add_argument("--n", type=int, default=20_000, help="requests per unpipelined run")
    p.add_argument("--n-pipelined", type=int, default=500_000, help="requests per -P 100 run")
    p.add_argument("--script-batches", type=int, default=300, help="EVALSHA calls per run")
    p.add_argument("--no-scripts", dest="scripts", action="store_false")
    p.add_argument("--redis-server", default=shutil.which("redis-server"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if not args.redis_server or not shutil.which("redis-benchmark"):
        print("server_bench: needs redis-server and redis-benchmark on PATH; skipped")
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="server-bench-"))
    redis_srv = start_redis(args.redis_server, args.persistence, workdir)
    engine_srv = start_engine(args.persistence, workdir)
    try:
        with redis_srv.client() as r:
            version = r.info("server")["redis_version"]
        print(
            f"python {sys.version.split()[0]}, redis-server {version}, redis-benchmark -c 1, "
            f"persistence: {args.persistence}, median of {args.rounds} runs",
            flush=True,
        )
        rows: list[Row] = []

        def pair(what: str, target: float, measure: Callable[[Server], float]) -> None:
            values: dict[str, list[float]] = {"redis": [], "engine": []}
            for _ in range(args.rounds):
                values["redis"].append(measure(redis_srv))
                values["engine"].append(measure(engine_srv))
            row = Row(
                what,
                statistics.median(values["redis"]),
                statistics.median(values["engine"]),
                target,
            )
            rows.append(row)
            print(
                f"  {what}: redis-server {row.redis:,.0f}/s, engine {row.engine:,.0f}/s "
                f"({row.ratio:.0%})",
                flush=True,
            )

        xadd = ["XADD", "s", "*", "f", "v"]
        pair("XADD", 0.5, lambda s: redis_benchmark(s.port, args.n, 1, xadd))
        pair("XADD -P 100", 0.2, lambda s: redis_benchmark(s.port, args.n_pipelined, 100, xadd))
        pair("XREADGROUP + XACK", 0.5, lambda s: read_ack_rate(s, args.n, 1))
        pair("XREADGROUP + XACK -P 100", 0.2, lambda s: read_ack_rate(s, args.n_pipelined, 100))

        script_line = ""
        if args.scripts:
            if scripting_available(engine_srv):
                import fakeredis

                def fake() -> float:
                    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)))
                    return script_rate(client, args.script_batches // 4, 10)

                fake_rate = _median(fake, args.rounds)
                with engine_srv.client() as ec, redis_srv.client() as rc:
                    engine_rate = _median(
                        lambda: script_rate(ec, args.script_batches, 10), args.rounds
                    )
                    redis_rate = _median(
                        lambda: script_rate(rc, args.script_batches, 10), args.rounds
                    )
                script_line = (
                    f"| check-mark-ack EVALSHA, 100 IDs (batches/s) | {redis_rate:,.0f} | "
                    f"{engine_rate:,.0f} | fakeredis {fake_rate:,.0f}: {engine_rate / fake_rate:.1f}x "
                    f"| >= 5x fakeredis | {'yes' if engine_rate >= 5 * fake_rate else 'NO'} |"
                )
            else:
                script_line = (
                    "| check-mark-ack EVALSHA, 100 IDs | - | - | not measured: the engine has "
                    "no EVAL/EVALSHA yet | >= 5x fakeredis | - |"
                )
        print()
        print("| load (one client) | redis-server /s | engine /s | engine / redis | target | met |")
        print("|---|---:|---:|---:|---|---|")
        for row in rows:
            print(
                f"| {row.what} | {row.redis:,.0f} | {row.engine:,.0f} | {row.ratio:.0%} | "
                f">= {row.target:.0%} | {'yes' if row.ratio >= row.target else 'NO'} |"
            )
        if script_line:
            print(script_line)
    finally:
        engine_srv.stop()
        redis_srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
