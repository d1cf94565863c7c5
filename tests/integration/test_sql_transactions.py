"""The batch transaction of ``idempotency="sql"`` is written once and run two ways: in worker
threads for ``def`` handlers (``_SyncTx``) and on the event loop for ``async def`` handlers
(``_AsyncTx``). The same steps give the same results both ways, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from streamworker.idempotency.sql import SqlDatabase, sortable_id
from streamworker.idempotency.sql.transactions import _AsyncTx, _SyncTx, _Tx
from tests.support.sql import processed_ids

IDS = [sortable_id(f"{n}-0") for n in range(1, 5)]


def _fail_a_statement(tx: _Tx) -> None:
    """A handler that catches its failed statement (PostgreSQL: the transaction is in error)."""
    try:
        tx.session.execute(sa.text("SELECT * FROM no_such_table"))
    except sa.exc.DBAPIError:
        pass


async def _scenario(make: Callable[[], _Tx]) -> list[Any]:
    seen: list[Any] = []
    tx = make()
    seen.append(sorted(await tx.open(IDS[:3], "c1")))
    await tx.unclaim([IDS[2]])
    await tx.savepoint()
    seen.append(await tx.release())
    seen.append(await tx.commit())
    seen.append(tx.broken())
    await tx.close()

    tx = make()  # rolled back by close: its claims are free again
    seen.append(sorted(await tx.open(IDS, "c2")))
    seen.append(await tx.aborted())
    await tx.close()

    tx = make()
    seen.append(sorted(await tx.open(IDS, "c3")))
    await tx.savepoint()
    await tx._step(lambda: _fail_a_statement(tx))
    released = await tx.release()
    seen.append(type(released).__name__ if released is not None else None)
    seen.append(await tx.commit())
    await tx.close()
    return seen


@pytest.mark.parametrize("kind", ["def", "async def"])
async def test_the_batch_transaction_claims_releases_and_commits(db_url: str, kind: str) -> None:
    db = SqlDatabase(db_url)
    try:

        def make() -> _Tx:
            if kind == "def":
                return _SyncTx(db.sync_engine, asyncio.to_thread, "g", "orders")
            return _AsyncTx(db.async_engine, "g", "orders")

        seen = await _scenario(make)
    finally:
        await db.dispose()
    swallowed = "_SwallowedError" if db_url.startswith("postgresql") else None
    assert (
        seen
        == [
            IDS[:3],  # all claimed
            None,  # the savepoint released
            None,  # committed
            False,  # not broken after the commit
            IDS[2:],  # 1 and 2 committed, 3 unclaimed before the commit
            False,  # nothing failed in it
            IDS[2:],  # the closed transaction left them free
            swallowed,  # a caught failed statement poisons PostgreSQL's transaction only
            None,
        ]
    )
    assert processed_ids(db_url) == ["1-0", "2-0", "3-0", "4-0"]
