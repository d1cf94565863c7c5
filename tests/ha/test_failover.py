"""A worker rides through a failover: ``streamworker run`` in a subprocess with a Lua, an SQL
(PostgreSQL) and an at-least-once handler, while the primary under it is SIGKILLed and Sentinel
promotes the replica (``redis+sentinel://``), or while a managed endpoint (the fault proxy, a plain
``redis://`` URL) is switched to the promoted replica and the old primary answers READONLY.

Afterwards every message published after the failover is handled, Lua and SQL effects applied
once, nothing is pending, nothing was dead-lettered and the worker counted the failover.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps import ha_mixed
from tests.support.faultproxy import FaultProxy
from tests.support.ha import (
    GROUPS,
    Run,
    assert_once_and_clean,
    handled_by_all,
    nothing_pending,
    publish,
    wait_started,
)
from tests.support.proc import wait_for
from tests.support.sentinel import SentinelSetup
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow


def test_a_worker_rides_through_a_sentinel_failover(
    own_sentinel_setup: SentinelSetup, ha_db: str, tmp_path: Path
) -> None:
    setup = own_sentinel_setup
    run = Run(setup.url, ha_db, tmp_path)
    try:
        old = setup.primary.client()
        wait_started(run, old)
        before = publish(old, 30, "before")
        wait_for(lambda: handled_by_all(run, old, before), 60, "the first messages handled")
        setup.wait_in_sync()
        setup.kill_primary()
        new_primary = setup.wait_for_failover()
        new = new_primary.client()
        after = publish(new, 30, "after")
        wait_for(lambda: handled_by_all(run, new, after), 90, "every message after the failover")
        wait_for(lambda: nothing_pending(new), 30, "nothing pending")
        assert run.metric("streamworker_failovers_total") >= 1
        assert run.proc.poll() is None, "the worker stopped"
        assert_once_and_clean(run, new, after)
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
            wait_started(run, old)
            before = publish(old, 20, "before")
            wait_for(lambda: handled_by_all(run, old, before), 60, "the first messages handled")
            wait_for(lambda: _in_sync(primary, replica), 20, "the replica in sync")
            # The managed failover: the replica is promoted, the endpoint's name moves to it, and
            # the old primary is demoted to a replica of it. Connections the worker holds still
            # reach the old primary, which now answers READONLY to every write.
            new = replica.client()
            new.replicaof("NO", "ONE")
            endpoint.upstream_port = replica.port
            old.replicaof("127.0.0.1", str(replica.port))
            after = publish(new, 20, "after")
            wait_for(
                lambda: handled_by_all(run, new, after), 60, "every message after the failover"
            )
            wait_for(lambda: nothing_pending(new), 30, "nothing pending")
            assert run.metric("streamworker_failovers_total") >= 1
            assert run.proc.poll() is None, "the worker stopped"
            assert_once_and_clean(run, new, after)
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
        wait_started(run, old)
        before = publish(old, 10, "before")
        wait_for(lambda: handled_by_all(run, old, before), 60, "the first messages handled")
        run.proc.send_signal(signal.SIGSTOP)
        try:
            middle = publish(old, 20, "middle")
            setup.wait_in_sync()  # the entries reach the replica; their handling will not
            setup.lag_replica()
            setup.clog_replication()
        finally:
            run.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: handled_by_all(run, old, middle), 60, "the middle messages handled")
        setup.kill_primary()
        setup.resume_replica()
        new = setup.wait_for_failover().client()
        after = publish(new, 10, "after")
        wait_for(lambda: handled_by_all(run, new, middle + after), 90, "middle and after handled")
        wait_for(lambda: nothing_pending(new), 30, "nothing pending")
        assert_once_and_clean(run, new, middle + after)
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
    publish(old, 5, "before")
    setup.wait_in_sync()
    setup.lag_replica()
    setup.clog_replication()
    run = Run(setup.url, ha_db, tmp_path)
    try:
        wait_started(run, old)
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
