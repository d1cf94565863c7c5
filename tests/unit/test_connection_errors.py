"""redis-py's failures mean the same to sync and asyncio callers: ``connection_errors`` and
``sync_connection_errors`` (the SyncProducer's) turn each into the same streamworker error."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions as rex

from streamworker.errors import ConfigError, ConnectionLost
from streamworker.io.redisio import connection_errors, sync_connection_errors

FAILURES = [
    rex.ConnectionError("Connection reset by peer"),
    rex.TimeoutError("Timeout reading from socket"),
    ConnectionRefusedError(111, "Connection refused"),
    rex.TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    rex.ClusterDownError("CLUSTERDOWN The cluster is down"),
    rex.ReadOnlyError("READONLY You can't write against a read only replica."),
    rex.RedisClusterException("Cluster mode is not enabled on this node"),
    rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
    rex.NoScriptError("NOSCRIPT No matching script."),
    ValueError("a bug, not an outage"),
]


def _sync(exc: Exception) -> BaseException:
    try:
        with sync_connection_errors():
            raise exc
    except Exception as raised:  # whatever came out of the block
        return raised
    raise AssertionError("the block's error vanished")


def _async(exc: Exception) -> BaseException:
    async def main() -> None:
        async with connection_errors():
            raise exc

    try:
        asyncio.run(main())
    except Exception as raised:  # whatever came out of the block
        return raised
    raise AssertionError("the block's error vanished")


@pytest.mark.parametrize("failure", FAILURES, ids=lambda e: type(e).__name__)
def test_sync_and_async_callers_get_the_same_error_for_a_redis_failure(
    failure: Exception,
) -> None:
    sync, asynchronous = _sync(failure), _async(failure)
    assert type(sync) is type(asynchronous)
    assert str(sync) == str(asynchronous)


def test_outages_become_connection_lost_and_refusals_stay_as_they_are() -> None:
    assert isinstance(_sync(rex.ConnectionError("gone")), ConnectionLost)
    assert isinstance(_sync(rex.TryAgainError("TRYAGAIN")), ConnectionLost)
    assert isinstance(_sync(rex.RedisClusterException("cluster mode is not enabled")), ConfigError)
    refusal = rex.ResponseError("WRONGTYPE")
    assert _sync(refusal) is refusal


def test_only_the_asyncio_side_reads_a_connection_closed_under_a_command_as_lost() -> None:
    # redis-py's asyncio connection closed by another task fails on its None reader; a sync
    # client has no other task, so there the same AttributeError is a bug and stays one.
    closed = AttributeError("'NoneType' object has no attribute 'read'")
    assert isinstance(_async(closed), ConnectionLost)
    assert _sync(closed) is closed
