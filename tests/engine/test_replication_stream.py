"""Replication as a standalone Redis 7.0 master exposes it, side by side with redis-server
7.0.15: the replication parameters (defaults, validation, the replica/slave aliases), and the
stream a SYNC / PSYNC client receives (the RDB of the data, then every write in its propagated
form, with SELECT, MULTI/EXEC and PEXPIREAT as Redis streams them)."""

from __future__ import annotations

import pytest

from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

_DEFAULTS = (
    "CONFIG SET repl-ping-replica-period 10 repl-timeout 60 min-replicas-to-write 0 "
    "min-replicas-max-lag 10 repl-diskless-sync yes repl-diskless-sync-delay 5 "
    "repl-diskless-sync-max-replicas 0 repl-diskless-load disabled repl-backlog-size 1mb "
    "repl-backlog-ttl 3600 repl-disable-tcp-nodelay no replica-read-only yes "
    "replica-serve-stale-data yes replica-priority 100 replica-lazy-flush no"
)

CONFIG_CASES = {
    "defaults": [
        "CONFIG GET repl-ping-replica-period",
        "CONFIG GET repl-ping-slave-period",
        "CONFIG GET repl-timeout",
        # Exact names: a glob's order is redis-server's hash table order.
        "CONFIG GET min-replicas-to-write",
        "CONFIG GET min-slaves-to-write",
        "CONFIG GET min-replicas-max-lag",
        "CONFIG GET min-slaves-max-lag",
        "CONFIG GET repl-diskless-sync",
        "CONFIG GET repl-diskless-sync-delay",
        "CONFIG GET repl-diskless-sync-max-replicas",
        "CONFIG GET repl-diskless-load",
        "CONFIG GET repl-backlog-size",
        "CONFIG GET repl-backlog-ttl",
        "CONFIG GET repl-disable-tcp-nodelay",
        "CONFIG GET replica-read-only",
        "CONFIG GET slave-read-only",
        "CONFIG GET replica-serve-stale-data",
        "CONFIG GET slave-serve-stale-data",
        "CONFIG GET replica-priority",
        "CONFIG GET slave-priority",
        "CONFIG GET replica-lazy-flush",
        "CONFIG GET slave-lazy-flush",
    ],
    "set": [
        "CONFIG SET repl-ping-replica-period 3600",
        "CONFIG GET repl-ping-slave-period",
        "CONFIG SET repl-ping-slave-period 7",
        "CONFIG GET repl-ping-replica-period",
        "CONFIG SET min-replicas-to-write 2",
        "CONFIG GET min-slaves-to-write",
        "CONFIG SET min-slaves-max-lag 0",
        "CONFIG GET min-replicas-max-lag",
        "CONFIG SET repl-diskless-sync NO",
        "CONFIG GET repl-diskless-sync",
        "CONFIG SET repl-diskless-load SwapDB",
        "CONFIG GET repl-diskless-load",
        "CONFIG SET repl-backlog-size 2mb",
        "CONFIG GET repl-backlog-size",
        "CONFIG SET replica-read-only no slave-priority 5",
        "CONFIG GET slave-read-only",
        "CONFIG GET replica-priority",
        _DEFAULTS,
    ],
    "invalid": [
        "CONFIG SET repl-ping-replica-period 0",
        "CONFIG SET repl-ping-replica-period 2147483648",
        "CONFIG SET repl-ping-replica-period x",
        "CONFIG SET repl-timeout 0",
        "CONFIG SET min-replicas-to-write -1",
        "CONFIG SET min-replicas-max-lag -1",
        "CONFIG SET repl-diskless-sync maybe",
        "CONFIG SET repl-diskless-sync-delay -1",
        "CONFIG SET repl-diskless-load foo",
        "CONFIG SET repl-backlog-size 0",
        "CONFIG SET repl-backlog-size 1x",
        "CONFIG SET repl-backlog-ttl -1",
        "CONFIG SET replica-priority -1",
        "CONFIG GET repl-ping-replica-period",
        _DEFAULTS,
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_replication_parameters_behave_as_redis(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """CONFIG GET/SET of the replication parameters reply as redis-server 7.0.15's."""
    failures = mismatches(*both, CONFIG_CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)
