"""The differential programs of ``test_differential.py`` against the engine's RESP server over
TCP: every reply byte for byte as redis-server 7.0.15's (RESP2 and RESP3 connections), with the
server's own parser, pipeline and encoder in the path instead of ``Engine.execute``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.engine.differential.backends import RedisBackend
from tests.engine.test_differential import (
    test_argument_errors_match_redis,
    test_consumer_group_commands_match_redis,
    test_keyspace_and_other_types_match_redis,
    test_stream_commands_match_redis,
    test_transactions_match_redis,
)
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

__all__ = [
    "test_argument_errors_match_redis",
    "test_consumer_group_commands_match_redis",
    "test_keyspace_and_other_types_match_redis",
    "test_stream_commands_match_redis",
    "test_transactions_match_redis",
]


class ServerBackend(RedisBackend):
    """The engine's server, driven exactly like redis-server (two raw sockets)."""

    name = "engine-server"


class _NoTally:
    """fakeredis's column is left out here: nothing to report."""

    tallies: dict[str, Any] = {}


@pytest.fixture(scope="module")
def tally_report() -> _NoTally:
    return _NoTally()


@pytest.fixture(scope="module")
def columns(redis_server: RedisServer) -> Iterator[tuple[RedisBackend, RedisBackend, None]]:
    """redis-server (the reference) and the engine's server, both over loopback TCP."""
    server = ThreadedServer()
    real = RedisBackend(redis_server.port)
    subject = ServerBackend(server.port)
    yield real, subject, None
    real.reset()
    real.close()
    subject.close()
    server.close()
