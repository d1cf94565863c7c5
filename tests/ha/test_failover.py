"""A worker rides through a failover: ``streamworker run`` in a subprocess with a Lua, an SQL
(PostgreSQL) and an at-least-once handler, while the primary under it is SIGKILLed and Sentinel
promotes the replica (``redis+sentinel://``), or while a managed endpoint (the fault proxy, a plain
``redis://`` URL) is switched to the promoted replica and the old primary answers READONLY.

Afterwards every message published after the failover is handled, Lua and SQL effects applied
once, nothing is pending, nothing was dead-lettered and the worker counted the failover.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql_migrate import upgrade
from tests.apps import ha_mixed
from tests.support.faultproxy import FaultProxy
from tests.support.proc import stop_process, streamworker, wait_for
from tests.support.sentinel import SentinelSetup
from tests.support.servers import RedisServer, free_port

pytestmark = pytest.mark.slow

APP = "tests/apps/ha_mixed.py:app"
GROUPS = ("lua", "sql", "plain")
DLQ = f"{ha_mixed.STREAM}:dlq"


@pytest.fixture
def ha_db(postgres_url: str) -> str:
    """A PostgreSQL database with streamworker's schema and the app's ``ha_effects`` table."""
    db = SqlDatabase(postgres_url)
    upgrade(db)
    db.sync_engine.dispose()
    engine = sa.create_engine(postgres_url)
    ha_mixed.Base.metadata.create_all(engine)
    engine.dispose()
    return postgres_url


class Run:
    """A ``streamworker run`` of the HA app with its metrics port and its at-least-once log."""

    def __init__(self, url: str, db_url: str, tmp_path: Path) -> None:
        self.log = tmp_path / "plain.log"
        self.db_url = db_url
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] = streamworker(
            "run", APP, "--redis-url", url, "--metrics-port", str(self.port),
            env={"STREAMWORKER_DB_URL": db_url, "SW_HA_LOG": str(self.log)},
        )  # fmt: skip
        self.stderr = ""

    def stop(self) -> str:
        self.stderr = stop_process(self.proc)
        return self.stderr

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def plain_calls(self) -> Counter[str]:
        if not self.log.exists():
            return Counter()
        return Counter(self.log.read_text().split())

    def sql_rows(self) -> Counter[str]:
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as c:
                rows = c.execute(sa.select(ha_mixed.Effect.message_id)).scalars().all()
        finally:
            engine.dispose()
        return Counter(rows)


def _publish(client: redis.Redis, n: int, tag: str) -> list[str]:
    return [client.xadd(ha_mixed.STREAM, {"n": str(i), "tag": tag}).decode() for i in range(n)]


def _handled_by_all(run: Run, client: redis.Redis, ids: list[str]) -> bool:
    applied = client.hgetall(ha_mixed.APPLIED)
    lua = all(applied.get(i.encode()) for i in ids)
    sql = run.sql_rows()
    plain = run.plain_calls()
    return lua and all(sql[i] for i in ids) and all(plain[i] for i in ids)


def _nothing_pending(client: redis.Redis) -> bool:
    return all(client.xpending(ha_mixed.STREAM, g)["pending"] == 0 for g in GROUPS)


def _assert_once_and_clean(run: Run, client: redis.Redis, after: list[str]) -> None:
    applied = {k.decode(): int(v) for k, v in client.hgetall(ha_mixed.APPLIED).items()}
    assert [k for k, v in applied.items() if v > 1] == [], "a Lua effect applied twice"
    assert [k for k, v in run.sql_rows().items() if v > 1] == [], "an SQL effect applied twice"
    for i in after:
        assert applied.get(i) == 1
    assert client.xlen(DLQ) == 0, client.xrange(DLQ)
    assert _nothing_pending(client)


def _started(run: Run, client: redis.Redis) -> None:
    def groups_exist() -> bool:
        try:
            return len(client.xinfo_groups(ha_mixed.STREAM)) == len(GROUPS)
        except redis.ResponseError:
            return False

    wait_for(groups_exist, 60, "the worker to create its groups")


def test_a_worker_rides_through_a_sentinel_failover(
    own_sentinel_setup: SentinelSetup, ha_db: str, tmp_path: Path
) -> None:
    setup = own_sentinel_setup
    run = Run(setup.url, ha_db, tmp_path)
    try:
        old = setup.primary.client()
        _started(run, old)
        before = _publish(old, 30, "before")
        wait_for(lambda: _handled_by_all(run, old, before), 60, "the first messages handled")
        setup.wait_in_sync()
        setup.kill_primary()
        new_primary = setup.wait_for_failover()
        new = new_primary.client()
        after = _publish(new, 30, "after")
        wait_for(lambda: _handled_by_all(run, new, after), 90, "every message after the failover")
        wait_for(lambda: _nothing_pending(new), 30, "nothing pending")
        assert run.metric("streamworker_failovers_total") >= 1
        assert run.proc.poll() is None, "the worker stopped"
        _assert_once_and_clean(run, new, after)
    finally:
        err = run.stop()
    events = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    changed = [e for e in events if e.get("event") == "primary_changed"]
    assert changed, err[-3000:]
    assert changed[0]["new_primary"] == f"127.0.0.1:{setup.primary.port}"
    assert not [e for e in events if e.get("event") == "message_dead_lettered"]


@pytest.fixture
def managed_pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica without Sentinels: the test plays the managed service."""
    primary = RedisServer(tmp_path / "a").start()
    replica = RedisServer(
        tmp_path / "b", extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    ).start()
    yield primary, replica
    replica.stop()
    primary.stop()


def _in_sync(primary: RedisServer, replica: RedisServer) -> bool:
    rep = replica.client().info("replication")
    pri = primary.client().info("replication")
    return bool(
        rep.get("master_link_status") == "up"
        and rep.get("slave_repl_offset") == pri.get("master_repl_offset")
    )


def test_a_worker_follows_a_managed_endpoint_to_the_promoted_replica(
    managed_pair: tuple[RedisServer, RedisServer], ha_db: str, tmp_path: Path
) -> None:
    primary, replica = managed_pair
    with FaultProxy(primary.port, protocol="redis") as endpoint:
        run = Run(endpoint.url, ha_db, tmp_path)
        try:
            old = primary.client()
            _started(run, old)
            before = _publish(old, 20, "before")
            wait_for(lambda: _handled_by_all(run, old, before), 60, "the first messages handled")
            wait_for(lambda: _in_sync(primary, replica), 20, "the replica in sync")
            # The managed failover: the replica is promoted, the endpoint's name moves to it, and
            # the old primary is demoted to a replica of it. Connections the worker holds still
            # reach the old primary, which now answers READONLY to every write.
            new = replica.client()
            new.replicaof("NO", "ONE")
            endpoint.upstream_port = replica.port
            old.replicaof("127.0.0.1", str(replica.port))
            after = _publish(new, 20, "after")
            wait_for(
                lambda: _handled_by_all(run, new, after), 60, "every message after the failover"
            )
            wait_for(lambda: _nothing_pending(new), 30, "nothing pending")
            assert run.metric("streamworker_failovers_total") >= 1
            assert run.proc.poll() is None, "the worker stopped"
            _assert_once_and_clean(run, new, after)
        finally:
            run.stop()


def test_deliveries_lost_with_the_old_primary_are_delivered_again_and_lua_and_sql_apply_once(
    own_sentinel_setup: SentinelSetup, ha_db: str, tmp_path: Path
) -> None:
    """Group state written after the last replication: the worker read, applied and acked
    entries on a primary whose replica lagged; the new primary has the entries but not those
    reads and acks. They are delivered again: Lua effects (lost with their acks, as one unit)
    apply once on the new primary, SQL effects (in the database) are recognised as done, and the
    at-least-once handler runs them a second time."""
    setup = own_sentinel_setup
    run = Run(setup.url, ha_db, tmp_path)
    try:
        old = setup.primary.client()
        _started(run, old)
        before = _publish(old, 10, "before")
        wait_for(lambda: _handled_by_all(run, old, before), 60, "the first messages handled")
        run.proc.send_signal(signal.SIGSTOP)
        try:
            middle = _publish(old, 20, "middle")
            setup.wait_in_sync()  # the entries reach the replica; their handling will not
            setup.lag_replica()
            setup.clog_replication()
        finally:
            run.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: _handled_by_all(run, old, middle), 60, "the middle messages handled")
        setup.kill_primary()
        setup.resume_replica()
        new = setup.wait_for_failover().client()
        after = _publish(new, 10, "after")
        wait_for(lambda: _handled_by_all(run, new, middle + after), 90, "middle and after handled")
        wait_for(lambda: _nothing_pending(new), 30, "nothing pending")
        _assert_once_and_clean(run, new, middle + after)
        plain = run.plain_calls()
        twice = [i for i in middle if plain[i] > 1]
        print(f"\nat-least-once handler: {len(twice)} of {len(middle)} handled twice")
        assert twice, "the lost deliveries were not delivered again"
        assert all(run.sql_rows()[i] == 1 for i in middle)
    finally:
        run.stop()


def test_a_group_created_after_the_last_replication_stops_its_handler_loudly(
    own_sentinel_setup: SentinelSetup, ha_db: str, tmp_path: Path
) -> None:
    """The new primary has the stream but not the group the worker created on the old one: the
    handlers stop and /readyz says so; the group is not re-created from start_id (that would run
    every entry's effects again)."""
    setup = own_sentinel_setup
    old = setup.primary.client()
    _publish(old, 5, "before")
    setup.wait_in_sync()
    setup.lag_replica()
    setup.clog_replication()
    run = Run(setup.url, ha_db, tmp_path)
    try:
        _started(run, old)
        setup.kill_primary()
        setup.resume_replica()
        new = setup.wait_for_failover().client()

        last: list[object] = []

        def not_ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{run.port}/readyz", timeout=5) as r:
                    last[:] = [json.loads(r.read())]
                    return False
            except urllib.error.HTTPError as exc:
                body = json.loads(exc.read())
                last[:] = [body]
                return len(body.get("stopped_handlers", [])) == len(GROUPS)

        try:
            wait_for(not_ready, 60, "/readyz to report the three stopped handlers")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; /readyz said {last}") from None
        assert new.xinfo_groups(ha_mixed.STREAM) == []
        assert run.proc.poll() is None
    finally:
        err = run.stop()
    lost = [json.loads(x) for x in err.splitlines() if '"group_lost"' in x]
    assert {e["group"] for e in lost} == set(GROUPS)
