"""The SQL strategy's backend-neutral tests on every conformance backend, with a SQLite database.

The tests themselves live in tests/integration/test_sql_strategy.py, where they run against
redis-server with SQLite and with PostgreSQL 15; here the same functions run against Redis
Cluster, the in-process engine and the engine server too (the strategy's Redis side: XPENDING
ownership checks, XACK, the prune's XINFO/XPENDING reads). The tests that need a PostgreSQL of
their own (a database outage, a connection killed mid-transaction) stay there.
"""

from __future__ import annotations

import pytest
import redis

from tests.integration.test_sql_strategy import (
    test_async_handler_gets_an_async_session_in_the_batch_transaction,
    test_concurrent_holders_of_one_message_serialise_on_its_row,
    test_dead_lettered_message_keeps_no_writes_and_no_row,
    test_each_message_commits_its_writes_and_its_row_once_then_is_acked,
    test_failing_handler_is_undone_and_stays_pending_while_the_rest_commit,
    test_handler_calling_commit_fails_its_message_and_commits_nothing_of_it,
    test_handler_swallowing_a_failed_statement_never_gets_its_batch_acked_unwritten,
    test_handler_with_a_per_message_dependency_gets_the_same_guarantees,
    test_message_whose_row_exists_is_acked_without_running_the_handler,
    test_prune_keeps_rows_from_the_oldest_pending_message_on,
    test_stale_holder_of_an_acked_and_pruned_message_does_not_apply_it_again,
    test_stop_mid_batch_commits_and_acks_only_the_finished_messages,
    test_worker_prunes_acked_rows_periodically,
    test_write_failing_at_the_batch_flush_is_pinned_on_its_own_message,
)
from tests.support.sql import migrated_db_url

__all__ = [
    "test_async_handler_gets_an_async_session_in_the_batch_transaction",
    "test_concurrent_holders_of_one_message_serialise_on_its_row",
    "test_dead_lettered_message_keeps_no_writes_and_no_row",
    "test_each_message_commits_its_writes_and_its_row_once_then_is_acked",
    "test_failing_handler_is_undone_and_stays_pending_while_the_rest_commit",
    "test_handler_calling_commit_fails_its_message_and_commits_nothing_of_it",
    "test_handler_swallowing_a_failed_statement_never_gets_its_batch_acked_unwritten",
    "test_handler_with_a_per_message_dependency_gets_the_same_guarantees",
    "test_message_whose_row_exists_is_acked_without_running_the_handler",
    "test_prune_keeps_rows_from_the_oldest_pending_message_on",
    "test_stale_holder_of_an_acked_and_pruned_message_does_not_apply_it_again",
    "test_stop_mid_batch_commits_and_acks_only_the_finished_messages",
    "test_worker_prunes_acked_rows_periodically",
    "test_write_failing_at_the_batch_flush_is_pinned_on_its_own_message",
]


@pytest.fixture
def redis_url(backend_url: str) -> str:
    """The tests' Redis: this conformance backend."""
    return backend_url


@pytest.fixture
def redis_client(sync_client: redis.Redis) -> redis.Redis:
    return sync_client


@pytest.fixture
def db_url(tmp_path, request: pytest.FixtureRequest) -> str:  # type: ignore[no-untyped-def]
    """A new SQLite database with streamworker's schema."""
    return migrated_db_url("sqlite", tmp_path, request)
