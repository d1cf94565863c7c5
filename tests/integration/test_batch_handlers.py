"""Batch handlers (``batch=True``) in a worker in this process, with each strategy: ``"none"`` and
``"lua"`` on redis-server, ``"sql"`` on SQLite (file, WAL) and PostgreSQL 15.

What every strategy must show: the handler gets the decoded messages as one list; what was decided
before it (bodies that fail validation, over-delivered messages, and, with ``"sql"``/``"lua"``,
duplicates) is not in the list; a raise fails every message of the call; a result map fails only
the messages it names.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import redis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker import App, DeadLetter, Effects, Message, Retry
from streamworker.idempotency.sql import TABLE_NAME, sortable_id
from tests.support.sql import (
    Charge,
    charges_per_message,
    create_business_tables,
    pending_ids,
    processed_ids,
    running_sql_worker,
    sync_url,
)
from tests.support.worker import eventually, running_worker

DLQ = "{orders}:dlq"


class Order(pydantic.BaseModel):
    n: int


def _add(client: redis.Redis, n: int, stream: str = "orders", **extra: str) -> list[str]:
    return [client.xadd(stream, {"n": str(i), **extra}).decode() for i in range(n)]


def _dead(client: redis.Redis) -> dict[str, str]:
    """Dead letters: original id -> reason."""
    out: dict[str, str] = {}
    for _, fields in client.xrange(DLQ):
        f = {k.decode(): v.decode() for k, v in fields.items()}
        out[f["dlq_id"]] = f["dlq_error"]
    return out


def _over_deliver(client: redis.Redis, mid: str, times: int, consumer: str = "c1") -> None:
    """Put ``mid`` in ``consumer``'s PEL with a delivery count of ``times``."""
    client.xgroup_create("orders", "g", id="0", mkstream=True)
    client.xreadgroup("g", consumer, {"orders": ">"}, count=1000)
    client.execute_command("XCLAIM", "orders", "g", consumer, 0, mid, "RETRYCOUNT", times)


def _settled(client: redis.Redis) -> bool:
    """Every entry of ``orders`` was delivered to group ``g`` and none is pending."""
    try:
        groups = client.xinfo_groups("orders")
    except redis.ResponseError:
        return False
    last = client.xrevrange("orders", count=1)
    group = next((g for g in groups if g["name"] == b"g"), None)
    if group is None or not last:
        return False
    return group["last-delivered-id"] == last[0][0] and not pending_ids(client, "orders", "g")


def _seen(calls: list[list[Message[Any]]]) -> list[str]:
    return [m.id for call in calls for m in call]


# idempotency="none" ---------------------------------------------------------------------------


async def test_none_batch_handler_gets_the_decoded_batch_in_one_call_and_acks_it(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 7)
    bad = redis_client.xadd("orders", {"n": "not a number"}).decode()
    calls: list[list[Message[Order]]] = []
    app = App("t")

    @app.handler("orders", group="g", batch=True, batch_size=100, block_ms=50)
    async def handle(msgs: list[Message[Order]]) -> None:
        calls.append(list(msgs))

    async with running_worker(app, redis_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert len(calls) == 1
    assert [m.id for m in calls[0]] == ids
    assert [m.body.n for m in calls[0]] == list(range(7))
    assert bad in _dead(redis_client)  # dead-lettered before the call, not in its list


async def test_none_batch_handler_that_raises_retries_every_message_of_the_call(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 4)
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler(
        "orders", group="g", batch=True, block_ms=50, retry_backoff_ms=10, claim_idle_ms=500
    )
    def handle(msgs: list[Message]) -> None:
        calls.append(list(msgs))
        if len(calls) == 1:
            raise RuntimeError("the whole batch failed")

    async with running_worker(app, redis_url):
        await eventually(lambda: len(calls) >= 2, what="a retry")
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert [m.id for m in calls[0]] == ids
    assert sorted(_seen(calls[1:])) == sorted(ids)
    assert all(m.delivery_count == 2 for call in calls[1:] for m in call)


async def test_none_batch_handler_result_map_fails_only_the_messages_it_names(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 5)
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler(
        "orders", group="g", batch=True, block_ms=50, retry_backoff_ms=10, claim_idle_ms=500
    )
    def handle(msgs: list[Message]) -> dict[str, BaseException]:
        calls.append(list(msgs))
        if len(calls) > 1:
            return {}
        return {ids[1]: Retry(delay_ms=10, reason="later"), ids[3]: DeadLetter("never")}

    async with running_worker(app, redis_url):
        await eventually(lambda: len(calls) >= 2, what="the retry")
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert _seen(calls[1:]) == [ids[1]]
    assert list(_dead(redis_client)) == [ids[3]]


# idempotency="lua" ----------------------------------------------------------------------------


async def test_lua_batch_handler_effects_per_message_id_apply_once_and_failures_apply_none(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 6)
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler(
        "orders",
        group="g",
        idempotency="lua",
        batch=True,
        block_ms=50,
        retry_backoff_ms=10,
        claim_idle_ms=500,
    )
    def handle(msgs: list[Message[Order]]) -> dict[str, Effects | BaseException]:
        calls.append(list(msgs))
        out: dict[str, Effects | BaseException] = {
            m.id: Effects().hincrby("{orders}:count", str(m.body.n), 1) for m in msgs
        }
        if len(calls) == 1:
            out[ids[2]] = RuntimeError("not yet")
        return out

    async with running_worker(app, redis_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall("{orders}:count").items()}
    assert counts == {str(n): 1 for n in range(6)}
    assert _seen(calls) == [*ids, ids[2]]


async def test_lua_batch_handler_that_raises_applies_nothing_and_retries_the_batch(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 3)
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler(
        "orders",
        group="g",
        idempotency="lua",
        batch=True,
        block_ms=50,
        retry_backoff_ms=10,
        claim_idle_ms=500,
    )
    async def handle(msgs: list[Message]) -> dict[str, Effects]:
        calls.append(list(msgs))
        if len(calls) == 1:
            raise RuntimeError("boom")
        return {m.id: Effects().incr("{orders}:total") for m in msgs}

    async with running_worker(app, redis_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert int(redis_client.get("{orders}:total") or 0) == 3
    assert sorted(_seen(calls[1:])) == sorted(ids)


async def test_lua_batch_handler_is_not_given_business_duplicates(
    redis_url: str, redis_client: redis.Redis
) -> None:
    first = redis_client.xadd("orders", {"n": "1", "key": "a"}).decode()
    redis_client.xadd("orders", {"n": "2", "key": "a"}).decode()
    third = redis_client.xadd("orders", {"n": "3", "key": "b"}).decode()
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency="lua", batch=True, block_ms=50, dedup_field="key")
    def handle(msgs: list[Message]) -> dict[str, Effects]:
        calls.append(list(msgs))
        return {m.id: Effects().incr("{orders}:total") for m in msgs}

    async with running_worker(app, redis_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
        more = redis_client.xadd("orders", {"n": "4", "key": "b"}).decode()
        await eventually(
            lambda: (
                not pending_ids(redis_client, "orders", "g")
                and redis_client.xinfo_groups("orders")[0]["last-delivered-id"].decode() == more
            ),
            what="the producer duplicate acked",
        )
        await asyncio.sleep(0.1)  # an effect applied twice would show by now
    assert int(redis_client.get("{orders}:total") or 0) == 2
    seen = _seen(calls)
    assert first in seen
    assert third in seen
    assert more not in seen


# idempotency="sql" ----------------------------------------------------------------------------


def _sql_batch_app(
    outcomes: dict[str, BaseException] | None = None, raise_first: bool = False, **opts: Any
) -> tuple[App, list[list[Message[Any]]]]:
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler(
        "orders",
        group="g",
        idempotency="sql",
        batch=True,
        block_ms=50,
        retry_backoff_ms=10,
        claim_idle_ms=1000,
        **opts,
    )
    def charge(msgs: list[Message[Order]], session: Session) -> dict[str, BaseException] | None:
        calls.append(list(msgs))
        failing = (outcomes or {}) if len(calls) == 1 else {}
        rows = [
            {"message_id": m.id, "order_id": str(m.body.n), "amount_cents": 100}
            for m in msgs
            if m.id not in failing
        ]
        session.execute(sa.insert(Charge), rows)
        if raise_first and len(calls) == 1:
            raise RuntimeError("the batch failed after its insert")
        return failing or None

    return app, calls


def _insert_processed(db_url: str, mid: str) -> None:
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO {TABLE_NAME} (group_name, stream, message_id, consumer) "
                "VALUES ('g', 'orders', :m, 'old')"
            ),
            {"m": sortable_id(mid)},
        )
    engine.dispose()


async def test_sql_batch_handler_commits_one_executemany_and_the_rows_of_its_batch(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 30)
    app, calls = _sql_batch_app(batch_size=30)
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == ids
    assert len(calls) == 1
    assert [m.body.n for m in calls[0]] == list(range(30))


async def test_sql_batch_handler_is_not_given_messages_already_processed(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 4)
    _insert_processed(db_url, ids[2])  # committed by an earlier run that died before its XACK
    app, calls = _sql_batch_app()
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert _seen(calls) == [ids[0], ids[1], ids[3]]
    assert charges_per_message(db_url) == {ids[0]: 1, ids[1]: 1, ids[3]: 1}


async def test_sql_batch_handler_that_raises_commits_nothing_and_retries_every_message(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 5)
    app, calls = _sql_batch_app(raise_first=True)
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    # The first call's insert was rolled back with the claims; the retry committed each once.
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert [m.id for m in calls[0]] == ids
    assert sorted(_seen(calls[1:])) == sorted(ids)
    assert all(m.delivery_count == 2 for call in calls[1:] for m in call)


async def test_sql_batch_handler_that_raises_leaves_no_rows_while_pending(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 3)
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", batch=True, block_ms=50)
    def charge(msgs: list[Message], session: Session) -> None:
        session.execute(
            sa.insert(Charge),
            [{"message_id": m.id, "order_id": "x", "amount_cents": 1} for m in msgs],
        )
        raise RuntimeError("always")

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(
            lambda: pending_ids(redis_client, "orders", "g") == [i.encode() for i in ids],
            what="read and pending",
        )
        await asyncio.sleep(0.3)  # the failing batches run meanwhile: none may commit
    assert charges_per_message(db_url) == {}
    assert processed_ids(db_url) == []


async def test_sql_batch_result_map_rolls_forward_the_rest_and_retries_or_dead_letters_those(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 6)
    failing: dict[str, BaseException] = {ids[1]: Retry(delay_ms=10, reason="later")}
    failing[ids[4]] = DeadLetter("refused")
    app, calls = _sql_batch_app(failing)
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all settled")
    assert charges_per_message(db_url) == {i: 1 for i in ids if i != ids[4]}
    # The dead-lettered message's processed row was never kept; the retried one's is the retry's.
    assert ids[4] not in processed_ids(db_url)
    assert list(_dead(redis_client)) == [ids[4]]
    assert _seen(calls[1:]) == [ids[1]]


async def test_sql_batch_result_map_leaves_the_failed_rows_absent_while_they_wait(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 4)
    app, _calls = _sql_batch_app({ids[2]: Retry(delay_ms=60_000, reason="much later")})
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: len(charges_per_message(db_url)) == 3, what="3 committed")
        await eventually(
            lambda: pending_ids(redis_client, "orders", "g") == [ids[2].encode()],
            what="the failed one pending",
        )
    assert processed_ids(db_url) == [ids[0], ids[1], ids[3]]
    assert ids[2] not in charges_per_message(db_url)


async def test_sql_over_delivered_message_is_dead_lettered_without_reaching_the_batch_handler(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 3)
    _over_deliver(redis_client, ids[1], 9)
    app, calls = _sql_batch_app(max_deliveries=5)
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all settled")
    assert ids[1] not in _seen(calls)
    assert list(_dead(redis_client)) == [ids[1]]
    assert charges_per_message(db_url) == {ids[0]: 1, ids[2]: 1}
    assert ids[1] not in processed_ids(db_url)


async def test_sql_over_delivered_message_already_processed_is_acked_as_a_duplicate(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 3)
    _over_deliver(redis_client, ids[1], 9)
    _insert_processed(db_url, ids[1])  # committed, then a crash before the XACK
    app, calls = _sql_batch_app(max_deliveries=5)
    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all settled")
    assert ids[1] not in _seen(calls)
    assert redis_client.xlen(DLQ) == 0


async def test_sql_async_batch_handler_gets_one_async_session_for_the_batch(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 8)
    sessions: list[int] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", batch=True, block_ms=50)
    async def charge(msgs: list[Message[Order]], session: AsyncSession) -> None:
        sessions.append(id(session))
        await session.execute(
            sa.insert(Charge),
            [{"message_id": m.id, "order_id": str(m.body.n), "amount_cents": 7} for m in msgs],
        )

    async with running_sql_worker(app, redis_url, db_url):
        await eventually(lambda: _settled(redis_client), what="all acked")
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert len(sessions) == 1


async def test_none_over_delivered_message_is_dead_lettered_without_reaching_the_batch_handler(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 3)
    _over_deliver(redis_client, ids[0], 9)
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler("orders", group="g", batch=True, block_ms=50, max_deliveries=5)
    def handle(msgs: list[Message]) -> None:
        calls.append(list(msgs))

    async with running_worker(app, redis_url):
        await eventually(lambda: _settled(redis_client), what="all settled")
    assert _seen(calls) == ids[1:]
    assert list(_dead(redis_client)) == [ids[0]]


async def test_lua_over_delivered_message_is_dead_lettered_without_reaching_the_batch_handler(
    redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 3)
    _over_deliver(redis_client, ids[2], 9)
    calls: list[list[Message[Any]]] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency="lua", batch=True, block_ms=50, max_deliveries=5)
    def handle(msgs: list[Message]) -> dict[str, Effects]:
        calls.append(list(msgs))
        return {m.id: Effects().incr("{orders}:total") for m in msgs}

    async with running_worker(app, redis_url):
        await eventually(lambda: _settled(redis_client), what="all settled")
    assert _seen(calls) == ids[:2]
    assert int(redis_client.get("{orders}:total") or 0) == 2
    assert list(_dead(redis_client)) == [ids[2]]
