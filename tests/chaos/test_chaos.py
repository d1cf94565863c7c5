"""The exactly-once contract while everything fails at once.

Per scenario (strategy x server): three ``streamworker run`` workers consume a stream that a
producer fills during the run, with a share of poison messages, while a seeded plan SIGKILLs and
restarts workers, pauses one past ``claim_idle_ms`` (a zombie holding claimed entries), and
restarts the Redis server (append-only file, ``appendfsync always``; or the embedded engine
server from its append-only file) and PostgreSQL. When the group has drained:

* every healthy message took effect exactly once (a SQL row, a Lua hash field of 1);
* every poison message is in the dead-letter stream exactly once, with its reason and its fields;
  nothing else is there, and no poison message left an effect;
* the PEL is empty and the group's lag is 0;
* no worker died of anything but the plan's SIGKILLs (or the documented fail-fast of a start-up
  that found the server down, restarted as a supervisor would), and each exits 0 on SIGTERM.

The seed is printed (terminal summary, the test's chaos log); ``STREAMWORKER_CHAOS_SEED=N``
replays a run.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis
import sqlalchemy as sa

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from tests.apps import chaos_lua, chaos_sql
from tests.apps.chaos_common import GROUP, MAX_DELIVERIES, STREAM
from tests.chaos.schedule import HEALTHY, Action, Plan, make_plan
from tests.support.chaos import (
    ChaosLog,
    Producer,
    Workers,
    restartable_port,
    retrying,
    run_actions,
)
from tests.support.engine_server import EngineServerProcess
from tests.support.postgres import PostgresServer
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow

DLQ = f"{STREAM}:dlq"
MESSAGES = 300
PRODUCE_S = 12.0
WINDOW_S = 15.0
CLAIM_IDLE_MS = 1500
WORKERS = 3
DRAIN_TIMEOUT_S = 150.0


@dataclass(frozen=True, slots=True)
class Edges:
    """What a scenario pushes to the contract's edges."""

    max_deliveries: int = MAX_DELIVERIES
    """Low values make healthy messages reach the limit after crashes: one committed on its last
    allowed delivery and redelivered must be acked as a duplicate, never dead-lettered."""
    slow_fraction: float = 0.0
    """Healthy messages whose handler outlives claim_idle_ms, beside failing ones whose retries
    fall due meanwhile: their leases must hold (they are never run twice at once)."""


SCENARIOS: dict[str, tuple[str, str, Edges]] = {
    "sql-redis": ("sql", "redis", Edges()),
    "lua-redis": ("lua", "redis", Edges()),
    "lua-engine": ("lua", "engine", Edges()),
    "sql-engine": ("sql", "engine", Edges()),
    "sql-redis-last-delivery": ("sql", "redis", Edges(max_deliveries=1)),
    "lua-redis-last-delivery": ("lua", "redis", Edges(max_deliveries=2)),
    "sql-redis-long-handlers": ("sql", "redis", Edges(slow_fraction=0.03)),
}


class StreamServer(Protocol):
    @property
    def url(self) -> str: ...
    def client(self) -> redis.Redis: ...
    def start(self) -> Any: ...
    def stop(self, sig: int = ...) -> Any: ...


def _signal(name: str) -> int:
    return int(getattr(signal, name))


def _messages(plan: Plan, base_ms: int) -> list[tuple[str, dict[str, str]]]:
    """Entry id and fields of message i; ids are explicit so the producer can retry safely."""
    out = []
    for i, kind in enumerate(plan.kinds):
        amount = "lots" if kind == "invalid" else str(100 + i)
        out.append((f"{base_ms}-{i}", {"n": str(i), "kind": kind, "amount": amount}))
    return out


def _expected_reasons(
    kind: str, n: int, strategy: str, max_deliveries: int
) -> list[tuple[str, ...]]:
    """What the dead letter of a message may give as its reason: alternatives, each a set of
    texts the reason must all contain."""
    over = (f"(max_deliveries={max_deliveries})",)
    if kind in HEALTHY:
        # Only by being delivered past the limit (crashes), and then its effect never landed.
        return [over]
    if kind == "invalid":
        return [("PermanentFailure: body failed validation", "amount: Input should be a valid")]
    # A crash can take the last allowed delivery's decision with it (the handler's DeadLetter or
    # failure was never written down): the next delivery is then dead-lettered without running,
    # for having been delivered too often. Only a low max_deliveries makes the first or second
    # delivery the last allowed one.
    if kind == "reject":
        return [(f"DeadLetter: order {n} rejected",), over]
    if strategy == "sql":
        return [(f"RuntimeError: order {n} always fails",), over]
    return [("EffectError: effect 2 (incrby '{chaos}:label')", "not an integer"), over]


def _group_state(client: redis.Redis) -> dict[str, Any]:
    try:
        groups = {g["name"].decode(): g for g in client.xinfo_groups(STREAM)}
    except redis.ResponseError as exc:
        if "no such key" not in str(exc):
            raise
        groups = {}
    group = groups.get(GROUP)
    if group is None:
        return {"pending": None, "lag": None, "length": client.xlen(STREAM)}
    return {
        "pending": int(group["pending"]),
        "lag": group.get("lag"),
        "last_delivered": group["last-delivered-id"].decode(),
        "length": client.xlen(STREAM),
    }


def _effects(strategy: str, client: redis.Redis, db_url: str | None) -> dict[str, int]:
    """Message id -> how often its effect landed."""
    if strategy == "lua":
        return {k.decode(): int(v) for k, v in client.hgetall(chaos_lua.APPLIED).items()}
    assert db_url is not None
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(chaos_sql.Effect.message_id, sa.func.count()).group_by(
                    chaos_sql.Effect.message_id
                )
            ).all()
    finally:
        engine.dispose()
    return {str(m): int(c) for m, c in rows}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_effect_once_and_every_poison_message_dead_lettered_once_under_faults(
    scenario: str, chaos_seed: int, chaos_log: ChaosLog, tmp_path: Path
) -> None:
    strategy, backend, edges = SCENARIOS[scenario]
    servers = (backend, "postgres") if strategy == "sql" else (backend,)
    plan = make_plan(
        chaos_seed,
        scenario,
        messages=MESSAGES,
        workers=WORKERS,
        window_s=WINDOW_S,
        claim_idle_ms=CLAIM_IDLE_MS,
        servers=servers,
        slow_fraction=edges.slow_fraction,
    )
    log = chaos_log
    log(plan.describe())

    with contextlib.ExitStack() as stack:
        server: StreamServer
        port = restartable_port()
        if backend == "redis":
            server = RedisServer(tmp_path / "redis", port=port, appendonly=True)
        else:
            server = EngineServerProcess(tmp_path / "engine", appendfsync="always", port=port)
        stack.callback(server.stop)
        server.start()

        pg: PostgresServer | None = None
        db_url: str | None = None
        if strategy == "sql":
            # durable: fsync and synchronous_commit on, so an immediate shutdown (SIGQUIT) is a
            # crash that loses no committed transaction.
            pg = PostgresServer(durable=True, port=restartable_port())
            stack.callback(pg.destroy)
            pg.start()
            db_url = pg.create_database("chaos")
            db = SqlDatabase(db_url)
            upgrade(db)
            db.sync_engine.dispose()
            engine = sa.create_engine(db_url)
            chaos_sql.Base.metadata.create_all(engine)
            engine.dispose()
        else:
            with server.client() as c:
                c.set(chaos_lua.LABEL, "not a number")

        workers = Workers(
            f"tests/apps/chaos_{strategy}.py:app",
            WORKERS,
            tmp_path,
            redis_url=server.url,
            db_url=db_url,
            env={
                "SW_CHAOS_CLAIM_IDLE_MS": str(CLAIM_IDLE_MS),
                "SW_CHAOS_MAX_DELIVERIES": str(edges.max_deliveries),
                "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5",
                "STREAMWORKER_PRUNE_INTERVAL_S": "2",
                "STREAMWORKER_SHUTDOWN_TIMEOUT_S": "20",
            },
            log=log,
        )
        stack.callback(workers.kill_all)
        workers.start_all()

        def group_exists() -> bool:
            with server.client() as c:
                return _group_state(c)["pending"] is not None

        _wait(group_exists, 120, "the workers to create the group", workers.check)
        log("workers up")

        base_ms = int(time.time() * 1000)
        messages = _messages(plan, base_ms)
        producer = Producer(server.client, STREAM, messages, PRODUCE_S, log)
        producer.start()
        stack.callback(producer.join, 5)

        def perform(action: Action) -> str:
            return _perform(action, workers, server, pg)

        run_actions(plan.actions(), perform, log, workers.check)
        workers.resume_all()
        producer.join(120)
        assert not producer.is_alive(), f"the producer did not finish in 120 s\n{plan.describe()}"
        assert producer.error is None, f"producer failed: {producer.error!r}\n{plan.describe()}"

        last: dict[str, Any] = {}

        def drained() -> bool:
            with server.client() as c:
                last.update(retrying(lambda: _group_state(c)))
            return last["length"] == MESSAGES and last["pending"] == 0 and last["lag"] == 0

        try:
            _wait(drained, DRAIN_TIMEOUT_S, "the group to drain (PEL empty, lag 0)", workers.check)
        except AssertionError as exc:
            _report(log, workers)
            raise AssertionError(f"{exc}; group state {last}\n{plan.describe()}") from None
        log("drained")
        workers.wait_started()
        codes = workers.stop_all()

        with server.client() as c:
            state = _group_state(c)
            effects = _effects(strategy, c, db_url)
            dead = [(f, eid.decode()) for eid, f in c.xrange(DLQ)]
            total = c.get(chaos_lua.TOTAL)

    _report(log, workers)
    # The whole chaos log is in the report's "chaos log" section; the message names the replay.
    context = f"\n{plan.describe()}"
    healthy = {mid: fields for (mid, fields) in messages if fields["kind"] in HEALTHY}
    poison = {mid: fields for (mid, fields) in messages if fields["kind"] not in HEALTHY}
    letters = Counter(f[b"dlq_id"].decode() for f, _ in dead)
    # Healthy messages delivered past a low max_deliveries (crashes): dead-lettered unrun, which
    # is allowed only when their effect never landed (checked below: processed beats
    # over-delivered).
    healthy_dead = sorted(set(letters) & set(healthy))
    ok_ids = sorted(set(healthy) - set(healthy_dead))
    log(
        f"healthy messages: {len(healthy)}; applied once: "
        f"{sum(1 for m in ok_ids if effects.get(m) == 1)}; dead-lettered past "
        f"max_deliveries={edges.max_deliveries} without an effect: {len(healthy_dead)}"
    )

    assert state["pending"] == 0, f"group state {state}{context}"
    assert state["lag"] == 0, f"group state {state}{context}"

    twice = {m: n for m, n in effects.items() if n != 1}
    assert not twice, f"effects applied more than once: {twice}{context}"
    both = sorted(set(healthy_dead) & set(effects))
    assert not both, f"applied and dead-lettered (a replay would apply them twice): {both}{context}"
    missing = sorted(set(ok_ids) - set(effects))
    assert not missing, f"{len(missing)} messages lost (no effect): {missing[:20]}{context}"
    leaked = sorted(set(effects) & set(poison))
    assert not leaked, f"poison messages left effects: {leaked}{context}"
    assert sorted(effects) == sorted(ok_ids), context
    if strategy == "lua":
        assert total == str(len(ok_ids)).encode(), f"{{chaos}}:total = {total!r}{context}"

    expected_letters = dict.fromkeys([*poison, *healthy_dead], 1)
    assert letters == expected_letters, (
        f"dead letters per message {dict(letters)}, expected each poison message once{context}"
    )
    for fields, dlq_entry in dead:
        mid = fields[b"dlq_id"].decode()
        original = poison.get(mid) or healthy[mid]
        reason = fields[b"dlq_error"].decode()
        expected = _expected_reasons(
            original["kind"], int(original["n"]), strategy, edges.max_deliveries
        )
        assert any(all(t in reason for t in texts) for texts in expected), (
            f"dead letter {dlq_entry} of {mid} ({original['kind']}): reason {reason!r}, "
            f"expected one of {expected}{context}"
        )
        kept = {k.decode(): v.decode() for k, v in fields.items() if not k.startswith(b"dlq_")}
        assert kept == original, f"dead letter {dlq_entry} lost fields: {kept}{context}"
        assert fields[b"dlq_group"] == GROUP.encode()

    assert not workers.unexpected, f"workers died unplanned: {workers.unexpected}{context}"
    assert codes == dict.fromkeys(range(WORKERS), 0), f"exit codes on SIGTERM: {codes}{context}"


def _perform(
    action: Action, workers: Workers, server: StreamServer, pg: PostgresServer | None
) -> str:
    w = action.worker
    if action.verb == "kill":
        assert w is not None
        where = "at once"
        if action.in_batch_s is not None:
            if workers.wait_busy(w):
                time.sleep(action.in_batch_s)
                where = f"{action.in_batch_s:.3f}s after a handler started"
            else:
                where = "idle (no handler started within 5 s)"
        workers.kill(w)
        return f"worker {w} SIGKILLed {where}"
    if action.verb == "start":
        assert w is not None
        workers.start(w)
        return f"worker {w} started"
    if action.verb == "stop":
        assert w is not None
        caught = workers.pause(w)
        return f"worker {w} SIGSTOPped {'mid-batch' if caught else '(no batch seen in 5 s)'}"
    if action.verb == "cont":
        assert w is not None
        workers.resume(w)
        return f"worker {w} SIGCONTinued"
    target: StreamServer | PostgresServer | None = (
        pg if action.verb == "restart_postgres" else server
    )
    assert target is not None
    began = time.monotonic()
    target.stop(_signal(action.signal))
    time.sleep(action.hold_s)
    target.start()
    return f"{action.signal}, down {time.monotonic() - began:.2f}s, serving again"


def _wait(check: Callable[[], bool], timeout_s: float, what: str, tick: Callable[[], None]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        tick()
        try:
            if check():
                return
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def _report(log: ChaosLog, workers: Workers) -> None:
    """What the faults did: redeliveries seen by handlers, and the workers' notable events."""
    calls = workers.handled()
    deliveries = Counter(row[0] for row in calls)
    ok_calls = [r for r in calls if r[2] == "ok"]
    rerun = sum(1 for r in ok_calls if int(r[3]) > 1)
    max_count = max((int(r[3]) for r in ok_calls), default=0)
    log(
        f"handler calls: {len(calls)} for {len(deliveries)} messages; healthy messages run with "
        f"delivery_count > 1: {rerun}; highest delivery_count of a healthy message: {max_count}"
    )
    interesting = (
        "connection_lost",
        "database_unavailable",
        "entries_reclaimed",
        "duplicate_acked",
        "message_claimed_away",
        "message_dead_lettered",
        "dead_letter_skipped_claimed",
        "dead_letter_skipped_not_pending",
        "handler_failed",
    )
    events = workers.events()
    log("worker events: " + ", ".join(f"{e}={events[e]}" for e in interesting if events[e]))
    log(f"all events: {dict(events)}")
