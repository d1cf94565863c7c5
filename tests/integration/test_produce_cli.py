"""``streamworker publish`` and ``streamworker relay`` as a user runs them (subprocesses)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.outbox import publish
from streamworker.io.keys import partition_stream
from streamworker.producing.partitions import partition_of
from tests.support.engine_server import EngineServerProcess
from tests.support.proc import run_cli


def test_publish_adds_the_fields_and_prints_the_id(
    redis_url: str, redis_client: redis.Redis
) -> None:
    done = run_cli("publish", "orders", "order_id=7", "note=a=b", "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    stream, entry_id = done.stdout.split()
    [(got_id, fields)] = redis_client.xrange("orders")
    assert (stream, entry_id) == ("orders", got_id.decode())
    assert fields == {b"order_id": b"7", b"note": b"a=b"}


@pytest.fixture(params=["redis-7.0", "engine-8.10"])
def keyed_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[redis.Redis]:
    """redis-server 7.0 (keyed publishes by the marker script) and ``streamworker engine serve
    --redis-version 8.10`` (by XADD … IDMP)."""
    if request.param == "redis-7.0":
        client = request.getfixturevalue("redis_client")
        yield client
        return
    engine = EngineServerProcess(tmp_path / "engine", extra=("--redis-version", "8.10")).start()
    client = engine.client()
    try:
        yield client
    finally:
        client.close()
        engine.stop()


def test_publish_with_an_idempotency_key_twice_adds_once(keyed_server: redis.Redis) -> None:
    """Two processes, one key: the second is a duplicate with the first one's id, by the marker
    script on 7.0 and by XADD … IDMP on 8.10 (no marker key there)."""
    kwargs = keyed_server.connection_pool.connection_kwargs
    url = f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
    args = ("publish", "orders", "n=1", "--idempotency-key", "k1", "--idmp", "--redis-url", url)
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert "duplicate" in again.stdout
    assert again.stdout.split()[:2] == first.stdout.split()[:2]
    assert keyed_server.xlen("orders") == 1
    marker = keyed_server.exists("{orders}:published:k1")
    assert marker == (1 if keyed_server.info("server")["redis_version"].startswith("7.") else 0)


def test_publish_routes_a_partitioned_stream_by_key(
    redis_url: str, redis_client: redis.Redis
) -> None:
    done = run_cli(
        "publish", "orders", "n=1", "--partitions", "4", "--key", "c-1", "--redis-url", redis_url
    )
    assert done.returncode == 0, done.stderr
    assert redis_client.xlen(partition_stream("orders", partition_of("c-1", 4))) == 1


def test_publish_json_into_a_body_field(redis_url: str, redis_client: redis.Redis) -> None:
    done = run_cli(
        "publish", "o", "--json", '{"a": [1, 2]}', "--body-field", "b", "--redis-url", redis_url
    )
    assert done.returncode == 0, done.stderr
    assert redis_client.xrange("o")[0][1] == {b"b": b'{"a":[1,2]}'}


def test_publish_without_equals_is_a_usage_error(redis_url: str) -> None:
    done = run_cli("publish", "orders", "oops", "--redis-url", redis_url)
    assert done.returncode == 2
    assert "expected FIELD=VALUE, got 'oops'" in done.stderr


def test_relay_once_moves_every_staged_row(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    with Session(SqlDatabase(db_url).sync_engine) as session, session.begin():
        for n in range(250):
            publish(session, "payments", {"n": n})
    done = run_cli("relay", "--once", "--db-url", db_url, "--redis-url", redis_url)
    assert done.returncode == 0, done.stderr
    assert "relayed 250 row(s)" in done.stdout
    assert [int(f[b"n"]) for _, f in redis_client.xrange("payments")] == list(range(250))


def test_relay_without_the_outbox_table_names_migrate(sqlite_url: str, redis_url: str) -> None:
    sa.create_engine(sqlite_url).connect().close()  # an empty database file
    done = run_cli("relay", "--once", "--db-url", sqlite_url, "--redis-url", redis_url)
    assert done.returncode == 2
    assert "streamworker migrate" in done.stderr


def test_relay_on_a_database_migrated_before_the_outbox_names_migrate(
    sqlite_url: str, redis_url: str
) -> None:
    from streamworker.idempotency.sql.migrate import upgrade

    db = SqlDatabase(sqlite_url)
    upgrade(db, "sw0001")
    db.sync_engine.dispose()
    done = run_cli("relay", "--once", "--db-url", sqlite_url, "--redis-url", redis_url)
    assert done.returncode == 2
    assert "'streamworker_outbox' is missing" in done.stderr
