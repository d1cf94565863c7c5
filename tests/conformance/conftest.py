"""The backends every conformance test runs on: a real redis-server, a real 3-master Redis Cluster
(``redis+cluster://``), the embedded engine in process, and the engine's RESP server
(``streamworker engine serve``) over TCP.

A module that sets ``REDIS8_PATHS = True`` also runs on ``engine-8.10``: the engine in process
answering as Redis 8.10, where the worker takes the post-7.0 paths (``XREADGROUP … CLAIM``,
``XNACK``; see streamworker/io/capabilities.py) with the same expectations as on redis-server
7.0, which takes the fallbacks."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from streamworker.io.redisio import open_sync_redis
from tests.support.cluster import LocalCluster
from tests.support.engine_server import EngineServerProcess
from tests.support.servers import RedisServer

_engine_ids = itertools.count()


def _backends() -> list[Any]:
    # Marked by what each backend needs beyond this process, so that `make test-fast`
    # (-m 'not redis and not engine_server') keeps the in-process engine alone.
    backends = [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
    if importlib.util.find_spec("streamworker.engine.inproc") is not None:
        backends.append("engine")
        backends.append(pytest.param("engine-8.10", marks=pytest.mark.redis8_paths))
    if importlib.util.find_spec("streamworker.engine.server") is not None:
        backends.append(pytest.param("engine-server", marks=pytest.mark.engine_server))
    return backends


@pytest.fixture(scope="session")
def engine_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServerProcess]:
    """One ``streamworker engine serve`` (with a data directory) for the whole session."""
    server = EngineServerProcess(tmp_path_factory.mktemp("engine-server")).start()
    yield server
    server.stop()


@pytest.fixture(params=_backends())
def backend_url(request: pytest.FixtureRequest, redis_server: RedisServer) -> str:
    """A fresh, empty backend: the flushed session redis-server, or a new in-process engine."""
    if request.param == "redis":
        redis_server.client().flushall()
        return redis_server.url
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        return cluster.url
    if request.param == "engine-server":
        server: EngineServerProcess = request.getfixturevalue("engine_server")
        with server.client() as client:
            client.flushall()
        return server.url
    if request.param == "engine-8.10":
        return f"engine://memory/conformance-{next(_engine_ids)}?redis_version=8.10"
    return f"engine://memory/conformance-{next(_engine_ids)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # engine-8.10 only for the modules that opt in (REDIS8_PATHS = True).
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend_url") if callspec is not None else None
        module = getattr(item, "module", None)
        if backend == "engine-8.10" and not getattr(module, "REDIS8_PATHS", False):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def sync_client(backend_url: str) -> Iterator[redis.Redis]:
    """A sync redis-py client on the same backend as ``backend_url``."""
    if backend_url.startswith("engine:"):
        from streamworker.engine.inproc import sync_client as engine_client

        client: redis.Redis = engine_client(backend_url)
    elif backend_url.startswith("redis+cluster:"):
        client = open_sync_redis(backend_url)
    else:
        client = redis.Redis.from_url(backend_url)
    yield client
    client.close()
