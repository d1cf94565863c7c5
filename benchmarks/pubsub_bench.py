"""Pub/Sub fan-out: the engine's RESP server against redis-server, side by side in one run.

Run: ``python -m benchmarks.pubsub_bench [--messages N] [--subscribers S] [--rounds R]``.
Starts ``streamworker engine serve`` and redis-server 7.0 (no persistence) on free loopback
ports. On each, S raw-socket subscribers (one thread each, reading as fast as they can) listen
to one channel while ``redis-benchmark -c 1 -P 100`` sends N ``PUBLISH`` of a 64-byte payload.
Timed: from the first PUBLISH until every subscriber has received every message. Each
measurement runs ``--rounds`` times, the two servers alternating; the median is reported, as
delivered messages per second (N x S over the time) and the engine's ratio to redis-server.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.server_bench import Server, start_engine, start_redis

CHANNEL = b"bench"
PAYLOAD = b"p" * 64
# One message frame as a RESP2 subscriber receives it.
FRAME = b"*3\r\n$7\r\nmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
    len(CHANNEL),
    CHANNEL,
    len(PAYLOAD),
    PAYLOAD,
)


def _subscriber(port: int, expect_bytes: int, ready: threading.Barrier, done: list[float]) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%b\r\n" % (len(CHANNEL), CHANNEL))
    confirm = b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%b\r\n:1\r\n" % (len(CHANNEL), CHANNEL)
    got = b""
    while len(got) < len(confirm):
        got += sock.recv(65536)
    ready.wait()
    received = len(got) - len(confirm)
    while received < expect_bytes:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed a subscriber")
        received += len(chunk)
    done.append(time.monotonic())
    sock.close()


def fan_out_rate(server: Server, messages: int, subscribers: int, binary: str) -> float:
    """Delivered messages per second for one run on ``server``."""
    ready = threading.Barrier(subscribers + 1)
    done: list[float] = []
    threads = [
        threading.Thread(
            target=_subscriber,
            args=(server.port, messages * len(FRAME), ready, done),
            daemon=True,
        )
        for _ in range(subscribers)
    ]
    for t in threads:
        t.start()
    ready.wait()
    started = time.monotonic()
    subprocess.run(
        [
            binary,
            "-p",
            str(server.port),
            "-c",
            "1",
            "-P",
            "100",
            "-n",
            str(messages),
            "-q",
            "PUBLISH",
            CHANNEL.decode(),
            PAYLOAD.decode(),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for t in threads:
        t.join(300)
    if len(done) != subscribers:
        raise RuntimeError(f"{server.name}: a subscriber did not get every message")
    return messages * subscribers / (max(done) - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    redis_binary = shutil.which("redis-server")
    bench_binary = shutil.which("redis-benchmark")
    if redis_binary is None or bench_binary is None:
        raise SystemExit("needs redis-server and redis-benchmark on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        servers = [start_redis(redis_binary, "memory", work), start_engine("memory", work)]
        try:
            rates: dict[str, list[float]] = {s.name: [] for s in servers}
            for _ in range(args.rounds):
                for server in servers:
                    rates[server.name].append(
                        fan_out_rate(server, args.messages, args.subscribers, bench_binary)
                    )
        finally:
            for server in servers:
                server.stop()
    real = statistics.median(rates["redis-server"])
    fake = statistics.median(rates["engine"])
    print(
        f"PUBLISH fan-out, {args.messages} messages x {args.subscribers} subscribers, "
        f"median of {args.rounds}:"
    )
    print(f"  redis-server: {real:12,.0f} deliveries/s")
    print(f"  engine:       {fake:12,.0f} deliveries/s  ({fake / real:.2f}x redis-server)")


if __name__ == "__main__":
    main()
