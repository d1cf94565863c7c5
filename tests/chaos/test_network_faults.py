"""The contract through a faulty network: workers talk to redis-server and PostgreSQL through the
fault proxy (tests/support/faultproxy.py), which loses requests and replies, holds replies
0.3-3 s, loses COMMIT replies and stalls connections, on a schedule drawn from the chaos seed.

Per scenario, once the group has drained:

* **0 lost**: every message took effect (a Lua hash field, a SQL row, a counter for ``none``), the
  PEL is empty and the lag 0;
* **0 duplicated effects** for Lua and SQL (``none`` may apply a message twice: counted, printed);
* **0 handler runs on an entry another consumer owned at the time.** Every handler run records
  (consumer, id, start time) and, as its first statement, asks Redis directly (not through the
  proxy) who owns the entry in the group's PEL. A run whose entry is pending for another
  consumer, or no longer pending at all (acked: by the consumer that took it over), started on an
  entry that was not its consumer's. Why this is sound: a consumer gains an entry only through its
  own read or claim, which completes before its handler is called, so if the PEL names the
  running consumer when the handler starts, it owned the entry from its read or claim to that
  moment; and it cannot have acked the entry itself yet (the ack follows the handler). The
  reverse holds too: what the probe sees is the owner at that instant, so every run it flags
  really ran on an entry someone else owned or had finished;
* stall scenarios: the longest stretch without progress (no message acked, sampled every 50 ms)
  stays under the deadline that bounds the stall plus a few seconds.

The counts (faults by kind, handler runs, duplicates, foreign runs) are printed; the seed is in
the chaos log and the terminal summary (``STREAMWORKER_CHAOS_SEED=N`` replays the schedule).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session

from streamworker import App, Effects, Message
from streamworker.idempotency.sql import SqlOptions
from streamworker.runtime.worker import Worker, WorkerOptions, WorkerResult
from tests.support.chaos import ChaosLog
from tests.support.engine_server import EngineServerProcess
from tests.support.faultproxy import Fault, FaultProxy, FaultRates, FaultSchedule, Rule
from tests.support.postgres import PostgresServer
from tests.support.servers import RedisServer
from tests.support.sql import Charge, charges_per_message, create_business_tables, migrated_db_url

pytestmark = pytest.mark.slow

STREAM, GROUP = "{net}:orders", "workers"
APPLIED = "{net}:applied"
CLAIM_IDLE_MS = 2000
DRAIN_TIMEOUT_S = 150.0

# About one fault per 100 Redis and 250 PostgreSQL requests, and 3% of COMMIT replies (issue 25).
REDIS_RATES = FaultRates(request_loss=0.003, reply_loss=0.003, hold=0.004)
PG_RATES = FaultRates(request_loss=0.0015, reply_loss=0.0015, hold=0.001, commit_loss=0.03)
# Stall scenarios: silent connections (a reply held far longer than any deadline) now and then,
# and at least once: one reply at a seeded position among the first few hundred.
STALL_S = 120.0
REDIS_TIMEOUT_S = 3.0
DB_DEADLINE_S = 5.0
REDIS_STALLS = FaultRates(stall=0.001, stall_s=STALL_S)
PG_STALLS = FaultRates(stall=0.001, stall_s=STALL_S)
STALL_SLACK_S = 5.0


@dataclass(frozen=True)
class Scenario:
    idempotency: str
    workers: int
    messages: int
    redis_rates: FaultRates
    pg_rates: FaultRates | None = None
    longest_gap_s: float | None = None  # stall scenarios: the bound on a stretch without progress
    claim_idle_ms: int = CLAIM_IDLE_MS
    server: str = "redis"  # or "engine": `streamworker engine serve`


SCENARIOS = {
    "lua": Scenario("lua", 1, 4000, REDIS_RATES),
    "sql": Scenario("sql", 1, 4000, REDIS_RATES, PG_RATES),
    "none": Scenario("none", 1, 4000, REDIS_RATES),
    "lua-engine": Scenario("lua", 1, 4000, REDIS_RATES, server="engine"),
    # Two workers with claim_idle_ms below most holds: a held read reply often comes back after
    # the other worker could claim its entries (the late-reply race).
    "two-workers": Scenario("lua", 2, 4000, REDIS_RATES, claim_idle_ms=1000),
    "two-workers-none": Scenario("none", 2, 4000, REDIS_RATES, claim_idle_ms=1000),
    "redis-stall": Scenario("lua", 1, 2000, REDIS_STALLS, None, REDIS_TIMEOUT_S + STALL_SLACK_S),
    "sql-stall": Scenario("sql", 1, 2000, FaultRates(), PG_STALLS, DB_DEADLINE_S + STALL_SLACK_S),
}


@dataclass(frozen=True, slots=True)
class HandlerRun:
    consumer: str
    message_id: str
    started: float  # monotonic
    owner: str  # the PEL's consumer for the entry at the start; "" when it was not pending


@dataclass
class Recorder:
    """Every handler run, with the entry's owner at its start (read directly from Redis)."""

    probe: redis.Redis
    runs: list[HandlerRun] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, msg: Message[Any]) -> None:
        started = time.monotonic()
        rows = self.probe.xpending_range(STREAM, GROUP, min=msg.id, max=msg.id, count=1)
        owner = rows[0]["consumer"].decode() if rows else ""
        with self.lock:
            self.runs.append(HandlerRun(msg.consumer, msg.id, started, owner))

    def foreign(self) -> list[HandlerRun]:
        return [r for r in self.runs if r.owner != r.consumer]


def _app(scenario: Scenario, recorder: Recorder, effects: redis.Redis) -> App:
    app = App("net-faults")
    options: dict[str, Any] = {
        "group": GROUP,
        "idempotency": scenario.idempotency,
        "batch_size": 5,
        "block_ms": 100,
        "claim_idle_ms": scenario.claim_idle_ms,
        "max_deliveries": 1000,  # faults redeliver; nothing here is poison
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 200,
    }
    if scenario.idempotency == "lua":

        @app.handler(STREAM, **options)
        def apply(msg: Message) -> Effects:
            recorder.record(msg)
            return Effects().hincrby(APPLIED, msg.id, 1)

    elif scenario.idempotency == "sql":

        @app.handler(STREAM, **options)
        def charge(msg: Message, session: Session) -> None:
            recorder.record(msg)
            session.add(Charge(message_id=msg.id, order_id=msg.id, amount_cents=1))

    else:

        @app.handler(STREAM, **options)
        def count(msg: Message) -> None:
            recorder.record(msg)
            effects.hincrby(APPLIED, msg.id, 1)  # at-least-once: may happen twice

    return app


def _progress(client: redis.Redis, total: int) -> int:
    """Messages acked so far (delivered and no longer pending)."""
    for info in client.xinfo_groups(STREAM):
        if info["name"] == GROUP.encode():
            return total - int(info["pending"]) - int(info["lag"] or 0)
    return 0


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_network_faults_lose_nothing_and_run_no_handler_on_a_foreign_entry(
    name: str,
    chaos_seed: int,
    chaos_log: ChaosLog,
    chaos_result: Callable[[str], None],
    redis_server: RedisServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    scenario = SCENARIOS[name]
    engine: EngineServerProcess | None = None
    if scenario.server == "engine":
        engine = EngineServerProcess(tmp_path / "engine").start()
        request.addfinalizer(engine.stop)
    server_port = engine.port if engine is not None else redis_server.port
    client = engine.client() if engine is not None else redis_server.client()
    client.flushall()
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for i in range(scenario.messages):
        pipe.xadd(STREAM, {"n": str(i)})
    ids = [i.decode() for i in pipe.execute()]
    chaos_log(f"scenario {name}: seed {chaos_seed}, {scenario}")

    db_url: str | None = None
    pg_proxy: FaultProxy | None = None
    if scenario.idempotency == "sql":
        db_url = migrated_db_url("postgresql", tmp_path, request)
        create_business_tables(db_url)
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        pg_proxy = FaultProxy(
            postgres.port,
            protocol="postgres",
            schedule=FaultSchedule(
                chaos_seed, scenario.pg_rates or FaultRates(), protocol="postgres"
            ),
            log=chaos_log,
        ).start()
    redis_proxy = FaultProxy(
        server_port,
        protocol="redis",
        schedule=FaultSchedule(chaos_seed, scenario.redis_rates, protocol="redis"),
        log=chaos_log,
    ).start()
    if scenario.longest_gap_s is not None:
        stalled = pg_proxy if pg_proxy is not None else redis_proxy
        position = random.Random(f"{chaos_seed}/stall").randrange(100, 300)
        stalled.add_rule(Rule(Fault("stall", STALL_S), lambda _: True, skip=position))
    direct = redis.Redis(host="127.0.0.1", port=server_port)  # the probe, never proxied
    recorder = Recorder(direct)
    app = _app(scenario, recorder, direct)
    proxied_db = (
        db_url.replace(f":{pg_proxy.upstream_port}/", f":{pg_proxy.port}/")
        if db_url is not None and pg_proxy is not None
        else None
    )
    workers = [
        Worker(
            app,
            WorkerOptions(
                redis_url=redis_proxy.url,
                consumer=f"net-{i}",
                shutdown_timeout_s=5.0,
                reconnect_backoff_initial_s=0.05,
                reconnect_backoff_max_s=0.5,
                strategy_options={"sql": SqlOptions(db_url=proxied_db, deadline_s=DB_DEADLINE_S)},
                redis_timeout_s=REDIS_TIMEOUT_S,
            ),
        )
        for i in range(scenario.workers)
    ]
    tasks: list[asyncio.Task[WorkerResult]] = [
        asyncio.ensure_future(w.run(install_signal_handlers=False)) for w in workers
    ]
    started = time.monotonic()
    longest, done = 0.0, 0
    try:
        last, last_change = -1, started
        while time.monotonic() - started < DRAIN_TIMEOUT_S:
            done = _progress(client, scenario.messages)
            now = time.monotonic()
            if done != last:
                last, last_change = done, now
            longest = max(longest, now - last_change)
            if done == scenario.messages:
                break
            for t in tasks:
                if t.done():
                    t.result()  # a worker that died raises here
            await asyncio.sleep(0.05)
    finally:
        # Faults off for the shutdown: a stalled reply must not hold the test's exit.
        redis_proxy.pause_faults()
        if pg_proxy is not None:
            pg_proxy.pause_faults()
        for w in workers:
            w.stop()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        redis_proxy.close()
        if pg_proxy is not None:
            pg_proxy.close()
    elapsed = time.monotonic() - started
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors

    if scenario.idempotency == "sql":
        assert db_url is not None
        effects = charges_per_message(db_url)
    else:
        effects = {k.decode(): int(v) for k, v in client.hgetall(APPLIED).items()}
    lost = [i for i in ids if effects.get(i, 0) == 0]
    duplicated = {i: n for i, n in effects.items() if n > 1}
    foreign = recorder.foreign()
    runs_per_consumer = Counter(r.consumer for r in recorder.runs)
    faults = redis_proxy.counts() + (pg_proxy.counts() if pg_proxy else Counter())
    summary = (
        f"{name}: {scenario.messages} messages drained {done} in {elapsed:.1f} s; faults "
        f"{dict(faults)} (redis requests {redis_proxy.requests}"
        + (
            f", postgres requests {pg_proxy.requests}, commits {pg_proxy.commits}"
            if pg_proxy
            else ""
        )
        + f"); handler runs {len(recorder.runs)} {dict(runs_per_consumer)}; lost {len(lost)}; "
        f"duplicated effects {len(duplicated)}; runs on a foreign entry {len(foreign)}; "
        f"longest stretch without progress {longest:.2f} s"
    )
    chaos_log(summary)
    chaos_result(summary)
    for run in foreign[:10]:
        chaos_log(f"foreign run: {run}")

    assert done == scenario.messages
    pending = client.xpending(STREAM, GROUP)
    assert pending["pending"] == 0
    assert lost == []
    if scenario.idempotency != "none":
        assert duplicated == {}
    assert foreign == []
    if scenario.longest_gap_s is not None:
        assert faults["stall"] > 0
        assert longest < scenario.longest_gap_s
    else:
        assert sum(faults.values()) > 0
