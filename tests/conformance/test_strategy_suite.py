"""streamworker.testing.conformance, the suite a third-party strategy runs, run here for the
built-in strategies: ``none``, ``lua`` and ``sql`` (SQLite and PostgreSQL), on a real
redis-server and on the in-process engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from streamworker.idempotency.lua import LuaStrategy
from streamworker.idempotency.none import AtLeastOnce
from streamworker.idempotency.sql import SqlDatabase, SqlStrategy
from streamworker.testing.conformance import *  # noqa: F403  (the suite's tests and fixtures)
from streamworker.testing.conformance import StrategySubject, StrategyTarget
from tests.support.sql import migrated_db_url


@pytest.fixture(params=["redis", "engine"])
def conformance_redis_url(request: pytest.FixtureRequest) -> str:
    if request.param == "engine":
        return "engine://memory"
    url: str = request.getfixturevalue("redis_url")
    return url


@pytest_asyncio.fixture(params=["none", "lua", "sql-sqlite", "sql-postgresql"])
async def strategy_subject(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StrategySubject]:
    name: str = request.param
    if name == "none":
        yield StrategySubject(
            name, lambda t: AtLeastOnce(t.client, t.stream, t.group, 1), supports_batch=True
        )
        return
    if name == "lua":
        yield StrategySubject(
            name,
            lambda t: LuaStrategy(t.client, stream=t.stream, group=t.group, consumer=t.consumer),
            supports_batch=True,
        )
        return
    db = SqlDatabase(migrated_db_url(name.removeprefix("sql-"), tmp_path, request))

    def build(t: StrategyTarget) -> SqlStrategy:
        return SqlStrategy(
            db,
            t.client,
            stream=t.stream,
            group=t.group,
            consumer=t.consumer,
            max_deliveries=t.max_deliveries,
            is_async=False,
        )

    try:
        yield StrategySubject(name, build, supports_batch=True)
    finally:
        await db.dispose()
