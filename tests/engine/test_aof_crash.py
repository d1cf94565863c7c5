"""Crash tests: SIGKILL ``streamworker engine serve`` at random moments under a producer and a
group consumer (redis-py), restart it, and check that what clients were told survived.

With ``appendfsync always`` every acknowledged XADD and XACK is there after the restart, and
the PEL matches what the consumer was told: entries it read and did not (knowingly) ack are
pending for it, with a delivery count at least the number of times it saw them. With
``everysec`` a killed process loses nothing either (the file is written before any reply; only
the fsync waits), so the same checks hold, and the file loads. Automatic rewrites run all the
time (a tiny threshold), so kills also land in the middle of rewrites.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.engine_server import EngineServerProcess

pytestmark = pytest.mark.slow

STREAM = "jobs"
GROUP = "workers"
CONSUMER = "worker-1"


class Ledger:
    """What the clients were told, across crashes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.added: list[bytes] = []  # XADD replies received
        self.seen: Counter[bytes] = Counter()  # deliveries received by the consumer
        self.acked: set[bytes] = set()  # XACKs whose reply was received
        self.ack_unknown: set[bytes] = set()  # XACKs sent without a reply (may or may not hold)


def _client(server: EngineServerProcess) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1",
        port=server.port,
        socket_timeout=5,
        retry=Retry(NoBackoff(), 0),
        protocol=2,
    )


def _produce(server: EngineServerProcess, ledger: Ledger, stop: threading.Event) -> None:
    r = _client(server)
    i = 0
    try:
        while not stop.is_set():
            sid = r.xadd(STREAM, {"n": str(i), "pad": "x" * 64})
            with ledger.lock:
                ledger.added.append(sid)
            i += 1
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        pass
    finally:
        r.close()


def _consume(
    server: EngineServerProcess, ledger: Ledger, stop: threading.Event, rnd: random.Random
) -> None:
    r = _client(server)
    try:
        while not stop.is_set():
            # Mostly new entries; sometimes the consumer's own backlog, as after a restart.
            start = ">" if rnd.random() < 0.8 else "0"
            reply = r.xreadgroup(GROUP, CONSUMER, {STREAM: start}, count=20, block=100)
            entries = reply[0][1] if reply else []
            got = [sid for sid, fields in entries if fields]
            with ledger.lock:
                ledger.seen.update(got)
            to_ack = [sid for sid in got if rnd.random() < 0.7]
            if to_ack:
                with ledger.lock:
                    ledger.ack_unknown.update(to_ack)
                r.xack(STREAM, GROUP, *to_ack)
                with ledger.lock:
                    ledger.acked.update(to_ack)
                    ledger.ack_unknown.difference_update(to_ack)
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        pass
    finally:
        r.close()


def _check(server: EngineServerProcess, ledger: Ledger) -> None:
    with server.client() as r:
        present = {sid for sid, _ in r.xrange(STREAM, "-", "+")}
        missing = [sid for sid in ledger.added if sid not in present]
        assert not missing, f"{len(missing)} acknowledged XADDs lost, first {missing[:3]}"
        pending = {
            row["message_id"]: row for row in r.xpending_range(STREAM, GROUP, "-", "+", 1_000_000)
        }
        wrongly_pending = (ledger.acked - ledger.ack_unknown) & set(pending)
        assert not wrongly_pending, f"acknowledged XACKs lost: {sorted(wrongly_pending)[:3]}"
        for sid, times in ledger.seen.items():
            if sid in ledger.acked or sid in ledger.ack_unknown:
                continue
            row = pending.get(sid)
            assert row is not None, f"{sid!r} was delivered, not acked, and is not pending"
            assert row["consumer"] == CONSUMER.encode()
            assert row["times_delivered"] >= times, (sid, row, times)
        group = next(g for g in r.xinfo_groups(STREAM) if g["name"] == GROUP.encode())
        if ledger.seen:
            last = max(ledger.seen, key=lambda s: tuple(map(int, s.split(b"-"))))
            assert tuple(map(int, group["last-delivered-id"].split(b"-"))) >= tuple(
                map(int, last.split(b"-"))
            )


def _run_cycles(server: EngineServerProcess, cycles: int, seed: int) -> Ledger:
    rnd = random.Random(seed)
    ledger = Ledger()
    with server.client() as r:
        r.xgroup_create(STREAM, GROUP, "$", mkstream=True)
    for _ in range(cycles):
        with server.client() as r:
            # Rewrites all the time, so that some kills land in the middle of one.
            r.config_set("auto-aof-rewrite-min-size", "65536")
            r.config_set("auto-aof-rewrite-percentage", "50")
        stop = threading.Event()
        threads = [
            threading.Thread(target=_produce, args=(server, ledger, stop)),
            threading.Thread(target=_consume, args=(server, ledger, stop, rnd)),
        ]
        for t in threads:
            t.start()
        time.sleep(rnd.uniform(0.3, 1.5))
        server.kill()
        stop.set()
        for t in threads:
            t.join(30)
        server.start()
        _check(server, ledger)
    return ledger


@pytest.mark.parametrize("seed", [1, 2])
def test_appendfsync_always_keeps_every_acknowledged_write_across_kills(
    tmp_path: Path, seed: int
) -> None:
    server = EngineServerProcess(tmp_path / "data", appendfsync="always").start()
    try:
        ledger = _run_cycles(server, cycles=4, seed=seed)
        assert len(ledger.added) > 50
        assert ledger.seen
        assert "incomplete" in server.log() or "loaded" in server.log()
    finally:
        server.stop()


def test_appendfsync_everysec_survives_kills_and_the_file_loads(tmp_path: Path) -> None:
    server = EngineServerProcess(tmp_path / "data", appendfsync="everysec").start()
    try:
        ledger = _run_cycles(server, cycles=3, seed=7)
        assert len(ledger.added) > 50
    finally:
        server.stop()


def test_a_kill_in_the_middle_of_a_rewrite_loses_nothing_and_restarts(tmp_path: Path) -> None:
    server = EngineServerProcess(tmp_path / "data", appendfsync="always").start()
    try:
        with server.client() as r:
            pipe = r.pipeline(transaction=False)
            for i in range(50_000):
                pipe.xadd(STREAM, {"n": str(i)})
            ids = pipe.execute()
            r.xgroup_create(STREAM, GROUP, "0")
            r.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=1000)
            assert r.bgrewriteaof()
            assert r.info("persistence")["aof_rewrite_in_progress"] == 1
            last = r.xadd(STREAM, {"during": "rewrite"})
        server.kill()
        server.start()  # the directory and the port are free at once
        with server.client() as r:
            assert r.xlen(STREAM) == len(ids) + 1
            assert r.xrevrange(STREAM, count=1)[0][0] == last
            assert r.xpending(STREAM, GROUP)["pending"] == 1000
    finally:
        server.stop()
