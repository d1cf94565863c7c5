"""The fault proxy (tests/support/faultproxy.py) against real servers: each fault does what the
chaos scenarios rely on."""

from __future__ import annotations

import time

import psycopg
import pytest
import redis

from tests.support.faultproxy import (
    Fault,
    FaultProxy,
    FaultRates,
    FaultSchedule,
    Rule,
    is_commit_reply_bytes,
)
from tests.support.postgres import PostgresServer
from tests.support.servers import RedisServer


def _is_set(args: list[bytes]) -> bool:
    return args[0].upper() == b"SET"


def test_a_lost_redis_reply_closes_the_connection_after_the_command_ran(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    with FaultProxy(redis_server.port, protocol="redis") as proxy:
        proxy.add_rule(Rule(Fault("reply_loss"), _is_set))
        client = redis.Redis(port=proxy.port, retry=None)
        with pytest.raises(redis.ConnectionError):
            client.set("k", "v")
        assert proxy.counts() == {"reply_loss": 1}
    assert redis_client.get("k") == b"v"


def test_a_lost_redis_request_never_reaches_the_server(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    redis_client.delete("k")
    with FaultProxy(redis_server.port, protocol="redis") as proxy:
        # A request fault is drawn when the request arrives: a schedule that loses every one.
        proxy.set_schedule(FaultSchedule(1, FaultRates(request_loss=1.0), protocol="redis"))
        client = redis.Redis(port=proxy.port, retry=None)
        with pytest.raises(redis.ConnectionError):
            client.set("k", "v")
    assert redis_client.get("k") is None


def test_a_held_reply_delays_the_pipeline_behind_it_in_order(redis_server: RedisServer) -> None:
    with FaultProxy(redis_server.port, protocol="redis") as proxy:
        proxy.add_rule(Rule(Fault("hold", 0.5), lambda a: a[0].upper() == b"ECHO"))
        client = redis.Redis(port=proxy.port)
        pipe = client.pipeline(transaction=False)
        pipe.echo("a")
        pipe.echo("b")
        pipe.ping()
        started = time.monotonic()
        assert pipe.execute() == [b"a", b"b", True]
        assert time.monotonic() - started >= 0.5
        client.close()


def test_a_lost_commit_reply_leaves_the_transaction_committed(
    postgres_server: PostgresServer,
) -> None:
    name = "proxy_commit"
    with postgres_server.connect() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    with postgres_server.connect(name) as direct:
        direct.execute("CREATE TABLE t (x int)")
    with FaultProxy(postgres_server.port, protocol="postgres") as proxy:
        proxy.add_rule(Rule(Fault("commit_loss"), lambda m: True, is_commit_reply_bytes))
        conn = psycopg.connect(
            host="127.0.0.1", port=proxy.port, user="postgres", dbname=name, sslmode="prefer"
        )
        conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
        assert proxy.counts() == {"commit_loss": 1}
    with postgres_server.connect(name) as direct:
        assert direct.execute("SELECT count(*) FROM t").fetchone() == (1,)
