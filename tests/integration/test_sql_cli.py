"""``streamworker migrate`` and ``streamworker prune`` as a user runs them."""

from __future__ import annotations

import json

import pytest
import redis
import sqlalchemy as sa

from streamworker.idempotency.sql import TABLE_NAME, VERSION_TABLE, metadata
from tests.support.proc import run_cli
from tests.support.sql import sync_url


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migrate_creates_the_table_and_is_idempotent(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{backend.replace('postgresql', 'postgres')}_url")
    first = run_cli("migrate", "--db-url", url)
    assert first.returncode == 0, first.stderr
    assert "migrated from an empty schema to revision sw0002" in first.stdout
    again = run_cli("migrate", env={"STREAMWORKER_DB_URL": url})
    assert again.returncode == 0, again.stderr
    assert "already at revision sw0002" in again.stdout
    engine = sa.create_engine(sync_url(url))
    tables = set(sa.inspect(engine).get_table_names())
    engine.dispose()
    assert {TABLE_NAME, VERSION_TABLE} <= tables
    assert "alembic_version" not in tables  # an application's own history is left alone


def test_migrated_table_matches_the_packaged_metadata(postgres_url: str) -> None:
    """What `streamworker migrate` creates is what `metadata` (for your own Alembic) describes."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    assert run_cli("migrate", "--db-url", postgres_url).returncode == 0
    engine = sa.create_engine(sync_url(postgres_url))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert [d for d in diff if "alembic_version" not in str(d)] == []


def test_migrate_without_a_database_url_is_one_line_exit_2() -> None:
    result = run_cli("migrate", env={"STREAMWORKER_DB_URL": ""})
    assert result.returncode == 2
    assert result.stderr.strip().startswith("streamworker: error: no database URL")


def test_migrate_unreachable_database_is_one_line_exit_1() -> None:
    result = run_cli("migrate", "--db-url", "postgresql://nobody@127.0.0.1:1/x")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot migrate" in result.stderr


def test_prune_reports_what_it_deleted(
    sqlite_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    assert run_cli("migrate", "--db-url", sqlite_url).returncode == 0
    redis_client.xadd("orders", {"n": "1"})
    redis_client.xgroup_create("orders", "g", id="0")
    result = run_cli("prune", "orders", "g", "--redis-url", redis_url, "--db-url", sqlite_url)
    assert result.returncode == 0, result.stderr
    assert "nothing can be pruned" in result.stdout
    redis_client.xreadgroup("g", "c", {"orders": ">"})
    result = run_cli("prune", "orders", "g", "--redis-url", redis_url, "--db-url", sqlite_url)
    assert "deleted 0 processed row(s) with id <" in result.stdout


def test_prune_json_gives_the_rows_deleted_and_the_cut(
    sqlite_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    assert run_cli("migrate", "--db-url", sqlite_url).returncode == 0
    redis_client.xadd("orders", {"n": "1"})
    redis_client.xgroup_create("orders", "g", id="0")
    redis_client.xreadgroup("g", "c", {"orders": ">"})
    result = run_cli(
        "prune", "orders", "g", "--json", "--redis-url", redis_url, "--db-url", sqlite_url
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["stream"], data["group"], data["deleted"]) == ("orders", "g", 0)
    assert data["cut"].startswith("<")
    # Progress went to stderr, as a plain line (not a terminal).
    assert result.stderr.startswith("prune orders/g: deleting processed rows... (0s)")
