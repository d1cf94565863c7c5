"""The three-stage pipeline (examples/pipeline/app.py) under faults: every order is reflected
exactly once in every stage's effects and in the final count.

``{shop}:orders`` -> ``bill`` (SQL: a charge row, a payment staged in the outbox) ->
``streamworker relay`` -> ``{shop}:payments`` -> ``account`` (Lua: a balance, a ledger entry by
``Effects.publish``) -> ``{shop}:ledger`` -> ``count`` (Lua: the final count).

Three ``streamworker run`` workers (each runs all three stages, so every kill hits every stage)
and two relays run while a producer adds the orders. A seeded plan SIGKILLs workers and relays,
SIGKILLs Redis (append-only file, ``appendfsync always``) and restarts PostgreSQL (immediate
shutdown, fsync on). When everything has drained, per order: one charge row, one payments entry,
one balance increment, one ledger entry, one count; the outbox is empty, no dead letters. The
test prints the per-stage counts (``-s``, or the chaos log of a failure).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import redis
import sqlalchemy as sa

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from streamworker.io.keys import dead_letter_stream
from tests.chaos.schedule import Action
from tests.support.chaos import ChaosLog, Producer, Workers, restartable_port, run_actions
from tests.support.postgres import PostgresServer
from tests.support.proc import ROOT
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow

ORDERS_N = 300
PRODUCE_S = 10.0
WORKERS = 3
RELAYS = 2
DRAIN_TIMEOUT_S = 90.0
APP = "examples/pipeline/app.py:app"


def _load_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pipeline_app", ROOT / "examples/pipeline/app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # SQLAlchemy resolves the models' annotations through sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


shop = _load_app()


class Relays:
    """``count`` ``streamworker relay`` processes (tests/apps/outbox_relay.py), restarted when they exit (as a supervisor
    would: a relay that starts while a server is down exits 1 at once)."""

    def __init__(self, count: int, workdir: Path, redis_url: str, db_url: str, log: ChaosLog):
        self.count = count
        self.dir = workdir
        self.args = ["--redis-url", redis_url, "--db-url", db_url, "--idle-ms", "50"]
        self.log = log
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self.killed: set[int] = set()
        self.restarts = 0
        self.unexpected: list[str] = []
        self._stderr_at = [0] * count  # where the current run's stderr begins

    def stderr_path(self, i: int) -> Path:
        return self.dir / f"relay-{i}.stderr"

    def start(self, i: int) -> None:
        self._stderr_at[i] = (
            self.stderr_path(i).stat().st_size if self.stderr_path(i).exists() else 0
        )
        # The relay of tests/apps/outbox_relay.py waits a little between its XADDs and its
        # commit, so that the plan's SIGKILLs land in that window (no kill point of its own).
        env = {
            "PYTHONPATH": str(ROOT),
            "STREAMWORKER_LOG_FORMAT": "json",
            "SW_TEST_PAUSE_S": "0.1",
            "SW_TEST_LOG": str(self.dir / f"relay-{i}.batches"),
        }
        with self.stderr_path(i).open("ab") as err:
            self.procs[i] = subprocess.Popen(
                [sys.executable, "-m", "tests.apps.outbox_relay", *self.args],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.killed.discard(i)

    def start_all(self) -> None:
        for i in range(self.count):
            self.start(i)

    def kill(self, i: int) -> None:
        self.check()
        proc = self.procs[i]
        assert proc is not None
        proc.kill()
        proc.wait(30)
        self.killed.add(i)

    def check(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc is None or i in self.killed or proc.poll() is None:
                continue
            if proc.returncode != 1:
                self.unexpected.append(f"relay {i} exited with {proc.returncode}")
            self.restarts += 1
            self.log(f"relay {i} exited with {proc.returncode}; restarting it")
            self.start(i)

    def wait_started(self, timeout_s: float = 60) -> None:
        """Wait until every relay's current run logged its start (its signal handlers are
        installed by then: a SIGTERM earlier would kill the interpreter mid-import)."""
        deadline = time.monotonic() + timeout_s
        for i in range(self.count):
            while True:
                self.check()
                with self.stderr_path(i).open("rb") as f:
                    f.seek(self._stderr_at[i])
                    if b'"outbox_relay_started"' in f.read():
                        break
                assert time.monotonic() < deadline, f"relay {i} did not start in {timeout_s}s"
                time.sleep(0.1)

    def stop_all(self) -> dict[int, int | None]:
        self.wait_started()
        codes: dict[int, int | None] = {}
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for i, proc in enumerate(self.procs):
            if proc is not None:
                try:
                    codes[i] = proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    codes[i] = None
        return codes

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def duplicates(self) -> int:
        """Rows the relays found added already (a relay died after its XADDs, before its commit)."""
        total = 0
        for i in range(self.count):
            path = self.stderr_path(i)
            for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
                with contextlib.suppress(ValueError, AttributeError):
                    event = json.loads(line)
                    if event.get("event") == "outbox_relayed":
                        total += int(event.get("duplicates", 0))
        return total


@dataclass(frozen=True, slots=True)
class Step:
    at_s: float
    verb: str  # kill_worker, start_worker, kill_relay, start_relay, restart_redis, restart_postgres
    index: int = 0
    hold_s: float = 0.0


def _plan(seed: int) -> list[Step]:
    """Worker and relay kills in three slots, a Redis SIGKILL and a PostgreSQL restart between
    them (so that nothing restarts while a server is down)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    for low in (1.0, 5.5, 10.0):
        at = rng.uniform(low, low + 0.5)
        for _ in range(2):
            w = rng.randrange(WORKERS)
            steps += [
                Step(at, "kill_worker", w),
                Step(at + rng.uniform(0.2, 0.6), "start_worker", w),
            ]
            at += rng.uniform(0.6, 0.9)
        r = rng.randrange(RELAYS)
        steps += [Step(at, "kill_relay", r), Step(at + rng.uniform(0.2, 0.5), "start_relay", r)]
    steps.append(Step(rng.uniform(4.0, 4.5), "restart_redis", hold_s=rng.uniform(0.3, 0.8)))
    steps.append(Step(rng.uniform(8.5, 9.0), "restart_postgres", hold_s=rng.uniform(0.3, 0.8)))
    return sorted(steps, key=lambda s: s.at_s)


def _wait(check: Callable[[], bool], timeout_s: float, what: str, tick: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        tick()
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            if check():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def _drained(client: redis.Redis, db_url: str) -> bool:
    if int(client.get(shop.TOTAL) or 0) < ORDERS_N:
        return False
    for stream, group in (
        (shop.ORDERS, "billing"),
        (shop.PAYMENTS, "accounting"),
        (shop.LEDGER, "reporting"),
    ):
        info = {g["name"].decode(): g for g in client.xinfo_groups(stream)}[group]
        if int(info["pending"]) or info.get("lag"):
            return False
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return (
                conn.execute(sa.text("SELECT count(*) FROM streamworker_outbox")).scalar_one() == 0
            )
    finally:
        engine.dispose()


def test_every_order_is_reflected_once_in_every_stage_under_faults(
    chaos_seed: int, chaos_log: ChaosLog, tmp_path: Path
) -> None:
    log = chaos_log
    steps = _plan(chaos_seed)
    log(
        f"seed {chaos_seed}; plan: " + "; ".join(f"{s.at_s:.2f}s {s.verb} {s.index}" for s in steps)
    )
    with contextlib.ExitStack() as stack:
        server = RedisServer(tmp_path / "redis", port=restartable_port(), appendonly=True)
        stack.callback(server.stop)
        server.start()
        pg = PostgresServer(durable=True, port=restartable_port())
        stack.callback(pg.destroy)
        pg.start()
        db_url = pg.create_database("pipeline")
        db = SqlDatabase(db_url)
        upgrade(db)
        db.sync_engine.dispose()
        shop.create_tables(db_url)

        workers = Workers(
            APP,
            WORKERS,
            tmp_path,
            redis_url=server.url,
            db_url=db_url,
            env={
                "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5",
                "STREAMWORKER_PRUNE_INTERVAL_S": "2",
                "STREAMWORKER_SHUTDOWN_TIMEOUT_S": "20",
            },
            log=log,
        )
        stack.callback(workers.kill_all)
        relays = Relays(RELAYS, tmp_path, server.url, db_url, log)
        stack.callback(relays.kill_all)
        workers.start_all()
        relays.start_all()
        workers.wait_started()
        log("workers and relays up")

        def tick() -> None:
            workers.check()
            relays.check()

        base_ms = int(time.time() * 1000)
        orders = [
            (
                f"{base_ms}-{i}",
                {"order_id": str(i), "customer": f"c{i % 11}", "cents": str(100 + i)},
            )
            for i in range(ORDERS_N)
        ]
        producer = Producer(server.client, shop.ORDERS, orders, PRODUCE_S, log)
        producer.start()
        stack.callback(producer.join, 5)

        def perform(step: Step) -> str:
            if step.verb == "kill_worker":
                workers.kill(step.index)
                return f"worker {step.index} SIGKILLed"
            if step.verb == "start_worker":
                workers.start(step.index)
                return f"worker {step.index} started"
            if step.verb == "kill_relay":
                relays.kill(step.index)
                return f"relay {step.index} SIGKILLed"
            if step.verb == "start_relay":
                relays.start(step.index)
                return f"relay {step.index} started"
            # Restarted workers and relays must be past their start-up checks before a server goes
            # down (one that finds it down exits at once, by design).
            workers.wait_started()
            relays.wait_started()
            target: RedisServer | PostgresServer = server if step.verb == "restart_redis" else pg
            began = time.monotonic()
            target.stop(signal.SIGKILL if step.verb == "restart_redis" else signal.SIGQUIT)
            time.sleep(step.hold_s)
            target.start()
            return f"{step.verb}: down {time.monotonic() - began:.2f}s, serving again"

        actions = [Action(s.at_s, s.verb) for s in steps]
        by_action = dict(zip(map(id, actions), steps, strict=True))
        run_actions(actions, lambda a: perform(by_action[id(a)]), log, tick)
        producer.join(120)
        assert producer.error is None, f"producer failed: {producer.error!r}"

        client = server.client()
        try:
            _wait(lambda: _drained(client, db_url), DRAIN_TIMEOUT_S, "every stage to drain", tick)
        except AssertionError:
            log(f"total so far: {client.get(shop.TOTAL)!r}")
            raise
        log("drained")
        workers.wait_started()
        codes = workers.stop_all()
        relay_codes = relays.stop_all()

        engine = sa.create_engine(db_url)
        with engine.connect() as conn:
            charges = Counter(
                int(r) for r in conn.execute(sa.text("SELECT order_id FROM shop_charges")).scalars()
            )
        engine.dispose()
        payments = Counter(int(f[b"order_id"]) for _, f in client.xrange(shop.PAYMENTS))
        ledger = Counter(int(f[b"order_id"]) for _, f in client.xrange(shop.LEDGER))
        paid = {int(k): int(v) for k, v in client.hgetall(shop.PAID).items()}
        counted = {int(k): int(v) for k, v in client.hgetall(shop.COUNTED).items()}
        total = int(client.get(shop.TOTAL) or 0)
        balance = sum(int(v) for v in client.hgetall(shop.BALANCES).values())
        dead = {
            s: client.xlen(dead_letter_stream(s)) for s in (shop.ORDERS, shop.PAYMENTS, shop.LEDGER)
        }
        client.close()

    every = dict.fromkeys(range(ORDERS_N), 1)
    log(
        f"per stage: orders {ORDERS_N}; charges {sum(charges.values())} ({len(charges)} orders); "
        f"payments entries {sum(payments.values())}; balances applied {sum(paid.values())}; "
        f"ledger entries {sum(ledger.values())}; counted {sum(counted.values())}; total {total}; "
        f"relay duplicates recognised {relays.duplicates()}; relay restarts {relays.restarts}; "
        f"dead letters {dead}"
    )
    assert dict(charges) == every, "stage 1: charges per order"
    assert dict(payments) == every, "outbox -> payments: entries per order"
    assert paid == every, "stage 2: balance increments per order"
    assert dict(ledger) == every, "stage 2 -> ledger: entries per order"
    assert counted == every, "stage 3: counts per order"
    assert total == ORDERS_N
    assert balance == sum(100 + i for i in range(ORDERS_N))
    assert dead == dict.fromkeys(dead, 0)
    assert not workers.unexpected, workers.unexpected
    assert not relays.unexpected, relays.unexpected
    assert codes == dict.fromkeys(range(WORKERS), 0), codes
    assert relay_codes == dict.fromkeys(range(RELAYS), 0), relay_codes
