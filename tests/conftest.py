"""Session-wide fixtures: a real redis-server on a free loopback port, flushed for every test, and
for ``idempotency="sql"`` a real PostgreSQL 15 (a fresh database per test) and SQLite files."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.cluster import LocalCluster
from tests.support.ha import prepare_db
from tests.support.hypothesis_profiles import load_profile
from tests.support.postgres import PostgresServer
from tests.support.sentinel import SentinelSetup
from tests.support.servers import RedisServer
from tests.support.sql import migrated_db_url

# Per-phase test timings when STREAMWORKER_TEST_TIMINGS names a file (scripts/test_timings.py).
# How `pytest -n N --dist loadgroup` shares the tests out (tests/support/xdist_scopes.py).
pytest_plugins = ["tests.support.timings", "tests.support.xdist_scopes"]

_databases = itertools.count()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before any test module is imported (their budgets are read at import) and before
    # hypothesis's own plugin, so that ``--hypothesis-profile NAME`` still has the last word.
    load_profile(os.environ)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server 7.0 for the whole session (no persistence)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One real Redis Cluster (3 masters, no replicas, loopback) for the whole session."""
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def sentinel_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A primary, one replica and three Sentinels (quorum 2) for one test module. A test that
    fails over leaves the roles swapped (:attr:`SentinelSetup.primary` follows); keep failovers
    few, each costs seconds."""
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel")).start()
    yield setup
    setup.stop()


@pytest.fixture
def own_sentinel_setup(tmp_path: Path) -> Iterator[SentinelSetup]:
    """A Sentinel-managed primary and replica of the test's own, to fail over."""
    setup = SentinelSetup(tmp_path / "sentinel").start()
    yield setup
    setup.stop()


@pytest.fixture
def ha_db(postgres_url: str) -> str:
    """A PostgreSQL database for tests/apps/ha_mixed.py: streamworker's schema and the app's
    ``ha_effects`` table."""
    return prepare_db(postgres_url)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL, with every database flushed before the test."""
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A sync redis-py client on the flushed session server."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def wait_for_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every ``asyncio.wait_for`` call from now on, recorded (the calls still go through): the
    sends of streamworker's connections must not use it (``io.redisio._TimedSends``)."""
    calls: list[tuple[Any, ...]] = []
    real = asyncio.wait_for

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(asyncio, "wait_for", counted)
    return calls


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own, with AOF (appendfsync always), to restart or kill."""
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL 15 for the whole session (fsync off); fails under CI=true when missing."""
    server = PostgresServer().start()
    yield server
    server.destroy()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A new, empty database on the session server (not migrated)."""
    return postgres_server.create_database(f"sw_test_{next(_databases)}")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A new SQLite file (not migrated; streamworker opens it in WAL mode)."""
    return f"sqlite:///{tmp_path / 'streamworker.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new database with streamworker's schema, on SQLite (file, WAL) and on PostgreSQL 15."""
    return migrated_db_url(request.param, tmp_path, request)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL of the test's own, to stop and restart under a running worker."""
    server = PostgresServer().start()
    yield server
    server.destroy()
