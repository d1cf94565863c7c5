"""RDB files and DUMP: the engine against redis-server 7.0, side by side in one run.

Run: ``python -m benchmarks.rdb_bench [--keys N] [--entries N] [--rounds N]``. Starts
``streamworker engine serve`` (in memory) and redis-server on free loopback ports, writes the
same data to both (N small strings, N/10 lists of 50 items, N/10 small hashes, a stream of
``--entries`` entries with a consumer group that has read half of them), then times on each,
median of ``--rounds``:

* ``SAVE`` (the whole file, encoded and written; the engine's encoder is pure Python, LZF
  included);
* loading that file at start: the time from starting the server on it (``--load-rdb`` /
  redis-server's own dump.rdb) to its first PONG, minus the same server's empty start;
* ``DUMP`` of a 64 KB string of text (LZF) and of the stream.

The engine is expected to be much slower than C: the figures say by how much, so that a user
knows what a SAVE of their data set costs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_pong(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            if redis.Redis(port=port, socket_timeout=5).ping():
                return
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            time.sleep(0.01)
    raise RuntimeError(f"server on port {port} did not answer")


def _engine(port: int, workdir: Path, rdb: Path | None = None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "streamworker", "engine", "serve", "--port", str(port)]
    args += ["--dir", str(workdir)]
    if rdb is not None:
        args += ["--load-rdb", str(rdb)]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)]
    args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _populate(r: redis.Redis, keys: int, entries: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(keys):
        pipe.set(f"key:{i}", f"value-{i}")
        if i % 10 == 0:
            pipe.rpush(f"list:{i}", *[f"item-{j}" for j in range(50)])
            pipe.hset(f"hash:{i}", mapping={"name": f"n{i}", "count": i, "flag": "yes"})
        if i % 1000 == 999:
            pipe.execute()
    for i in range(entries):
        pipe.xadd(
            "stream", {"order": str(i), "amount": str(i % 97), "note": "paid"}, id=f"{i + 1}-0"
        )
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    r.xgroup_create("stream", "g", id="0")
    r.xreadgroup("g", "c", {"stream": ">"}, count=entries // 2)
    words = [b"stream", b"worker", b"redis", b"order", b"paid", b"pending"]
    text = b" ".join(words[(i * 7) % len(words)] + b"%d" % (i % 13) for i in range(9000))
    r.set("text", text[: 64 * 1024])


def _median(fn: Callable[[], float], rounds: int) -> float:
    return statistics.median(fn() for _ in range(rounds))


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=20000)
    p.add_argument("--entries", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("redis-server not found: skipped")
        return 0
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "engine").mkdir()
        (base / "redis").mkdir()
        ep, rp = _free_port(), _free_port()
        engine, server = _engine(ep, base / "engine"), _redis(rp, base / "redis")
        try:
            _wait_pong(ep, engine)
            _wait_pong(rp, server)
            e, r = redis.Redis(port=ep), redis.Redis(port=rp)
            for c in (e, r):
                _populate(c, args.keys, args.entries)
            rows.append(
                (
                    "SAVE",
                    _median(lambda: _timed(e.save), args.rounds),
                    _median(lambda: _timed(r.save), args.rounds),
                )
            )
            for key in ("text", "stream"):
                rows.append(
                    (
                        f"DUMP {key}",
                        _median(lambda k=key: _timed(lambda: e.dump(k)), args.rounds),
                        _median(lambda k=key: _timed(lambda: r.dump(k)), args.rounds),
                    )
                )
        finally:
            _stop(engine)
            _stop(server)
        rdb = base / "engine" / "dump.rdb"
        size = rdb.stat().st_size

        def engine_start(with_rdb: bool) -> float:
            port = _free_port()
            work = Path(tempfile.mkdtemp(dir=base))
            t = time.perf_counter()
            proc = _engine(port, work, rdb if with_rdb else None)
            _wait_pong(port, proc)
            dt = time.perf_counter() - t
            _stop(proc)
            return dt

        def redis_start(with_rdb: bool) -> float:
            port = _free_port()
            work = Path(tempfile.mkdtemp(dir=base))
            if with_rdb:
                shutil.copy(rdb, work / "dump.rdb")
            t = time.perf_counter()
            proc = _redis(port, work)
            _wait_pong(port, proc)
            dt = time.perf_counter() - t
            _stop(proc)
            return dt

        e_full = _median(lambda: engine_start(True), args.rounds)
        e_empty = _median(lambda: engine_start(False), args.rounds)
        r_full = _median(lambda: redis_start(True), args.rounds)
        r_empty = _median(lambda: redis_start(False), args.rounds)
        print(
            f"start with/without the file: engine {e_full:.2f}/{e_empty:.2f} s, "
            f"redis-server {r_full:.3f}/{r_empty:.3f} s"
        )
        rows.append(("load at start", e_full - e_empty, r_full - r_empty))
    print(
        f"data: {args.keys} strings, {args.keys // 10} lists, {args.keys // 10} hashes, "
        f"a {args.entries}-entry stream; RDB file {size / 1e6:.1f} MB (the engine's SAVE)"
    )
    print(f"{'operation':<16}{'engine (s)':>12}{'redis (s)':>12}{'engine/redis':>14}")
    for name, te, tr in rows:
        ratio = te / tr if tr > 0 else float("inf")
        print(f"{name:<16}{te:>12.4f}{tr:>12.4f}{ratio:>13.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
