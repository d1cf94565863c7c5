"""Fresh batches of ``def`` batch handlers over ``idempotency="sql"``: one pool-thread hop for
BEGIN, the plain claim, the handler, flush and COMMIT; no ownership check while the claim
completes inside the fresh window; and every way out of that path (a processed row met by the
claim, a claim that completes late, a raise, a failed commit, a dropped connection) ending with the
exactly-once counts. SqlStrategy is driven directly, with the runtime's own invoker, on SQLite
(file, WAL) and PostgreSQL 15 with one redis-server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker import App, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import Action, Outcome
from streamworker.errors import DatabaseUnavailable
from streamworker.idempotency.base import Batch
from streamworker.idempotency.sql import SqlDatabase, SqlStrategy
from streamworker.io.redisio import open_redis
from streamworker.observability.metrics import Metrics
from streamworker.runtime.invoker import HandlerInvoker, make_invoker
from streamworker.runtime.threads import HandlerThreads
from tests.support.sql import (
    Charge,
    charges_per_message,
    create_business_tables,
    pending_ids,
    processed_ids,
    running_sql_worker,
)
from tests.support.worker import eventually

Handler = Callable[[list[Message[Any]], Session], Any]


class Harness:
    """One consumer ``c1`` of group ``g`` on stream ``orders``: reads like the consume loop and
    hands each batch to a real SqlStrategy with the runtime's batch invoker. Counts the strategy's
    thread hops and the ownership checks Redis ran (``check_ownership.lua``)."""

    def __init__(
        self,
        db_url: str,
        redis_url: str,
        redis_client: redis.Redis,
        handler: Handler,
        *,
        claim_idle_ms: int = 60_000,
        hop_delay_s: float = 0.0,
    ) -> None:
        self.redis = redis_client
        self.db = SqlDatabase(db_url)
        self.client = open_redis(redis_url)
        self.threads = HandlerThreads(1)
        self.hops = 0
        self.calls: list[list[str]] = []
        self._hop_delay_s = hop_delay_s

        def recorded(msgs: list[Message[Any]], session: Session) -> Any:
            self.calls.append([m.id for m in msgs])
            return handler(msgs, session)

        recorded.__annotations__ = {"msgs": list[Message[Any]], "session": Session}
        app = App("t")
        app.handler("orders", group="g", idempotency="sql", batch=True)(recorded)
        self.spec = app.handlers[0]
        self.strategy = SqlStrategy(
            self.db,
            self.client,
            stream="orders",
            group="g",
            consumer="c1",
            max_deliveries=5,
            claim_idle_ms=claim_idle_ms,
            is_async=False,
        )
        self.invoker: HandlerInvoker | None = None

    async def _run_sync(self, func: Callable[[], Any]) -> Any:
        self.hops += 1

        def slowed() -> Any:
            if self._hop_delay_s:
                time.sleep(self._hop_delay_s)  # a slow pool / database: the hop starts late
            return func()

        return await self.threads.run(slowed)

    async def start(self) -> None:
        resolver = Resolver()
        await resolver.start([self.spec.plan])
        self.invoker = make_invoker(
            self.spec,
            resolver=resolver,
            threads=self.threads,
            metrics=Metrics(),
            stopping=lambda: False,
        )
        assert self.invoker.run_batch_handler is not None
        assert self.invoker.run_batch_handler.inline is not None

    def checks(self) -> int:
        # EVALSHA calls that ran a script (a first call per server answers NOSCRIPT: failed).
        stat = self.redis.info("commandstats").get("cmdstat_evalsha", {})
        return int(stat.get("calls", 0)) - int(stat.get("failed_calls", 0))

    async def read_and_process(self, *, fresh: bool, count: int = 100) -> list[Outcome]:
        reply = self.redis.xreadgroup("g", "c1", {"orders": ">"}, count=count)
        entries = reply[0][1] if reply else []
        batch = [
            Message(
                id=eid.decode(),
                stream="orders",
                group="g",
                consumer="c1",
                fields={k.decode(): v.decode() for k, v in fields.items()},
                body=None,
            )
            for eid, fields in entries
        ]
        assert self.invoker is not None
        return await self.strategy.process(
            Batch(
                batch,
                self.invoker.run_handler,
                run_batch_handler=self.invoker.run_batch_handler,
                run_blocking=self._run_sync,
                fresh=fresh,
            )
        )

    async def close(self) -> None:
        await self.client.aclose()
        self.threads.shutdown()
        await self.db.dispose()


def _add(client: redis.Redis, n: int) -> list[str]:
    ids = [client.xadd("orders", {"n": str(i)}).decode() for i in range(n)]
    client.xgroup_create("orders", "g", id="0")
    return ids


def _charge(msgs: list[Message[Any]], session: Session) -> None:
    session.execute(
        sa.insert(Charge),
        [{"message_id": m.id, "order_id": m.fields["n"], "amount_cents": 100} for m in msgs],
    )


async def _harness(
    db_url: str, redis_url: str, redis_client: redis.Redis, handler: Handler = _charge, **kw: Any
) -> Harness:
    create_business_tables(db_url)
    harness = Harness(db_url, redis_url, redis_client, handler, **kw)
    await harness.start()
    return harness


async def _one_batch(h: Harness, *, fresh: bool) -> tuple[list[Outcome], int]:
    """One read and its batch through the strategy; the outcomes and the ownership checks Redis
    ran for it. Closes the harness."""
    try:
        checks = h.checks()
        outcomes = await h.read_and_process(fresh=fresh)
        return outcomes, h.checks() - checks
    finally:
        await h.close()


async def test_fresh_batch_goes_in_one_hop_without_an_ownership_check(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 20)
    h = await _harness(db_url, redis_url, redis_client)
    try:
        checks = h.checks()
        outcomes = await h.read_and_process(fresh=True)
        assert h.hops == 2  # the schema check (the first batch only) and the batch's one hop
        ids.append(redis_client.xadd("orders", {"n": "20"}).decode())
        outcomes += await h.read_and_process(fresh=True)
        assert h.hops == 3
        assert h.checks() == checks
    finally:
        await h.close()
    assert all(o.action is Action.ACK and not o.duplicate for o in outcomes)
    assert len(outcomes) == 21
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == ids
    assert not pending_ids(redis_client, "orders", "g")


async def test_batch_that_is_not_fresh_checks_ownership_after_its_claim(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 10)
    h = await _harness(db_url, redis_url, redis_client)
    outcomes, checks = await _one_batch(h, fresh=False)
    assert checks == 1
    assert all(o.acked for o in outcomes)
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert h.calls == [ids]


async def test_fresh_claim_completing_late_is_undone_and_checked_before_the_handler(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    """claim_idle_ms=20: the fresh window closes 9 ms after the batch starts, and every thread
    hop starts 30 ms late, so the fresh claim completes outside it."""
    ids = _add(redis_client, 10)
    h = await _harness(db_url, redis_url, redis_client, claim_idle_ms=20, hop_delay_s=0.03)
    outcomes, checks = await _one_batch(h, fresh=True)
    assert checks == 1
    assert all(o.acked and not o.duplicate for o in outcomes)
    assert h.calls == [ids]  # the handler ran once: the late claim was undone before it
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == ids
    assert not pending_ids(redis_client, "orders", "g")


async def test_fresh_batch_delivered_again_by_setid_acks_the_processed_as_duplicates(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 6)
    h = await _harness(db_url, redis_url, redis_client)
    try:
        first = await h.read_and_process(fresh=True, count=3)
        # An operator moves the group back: the first three come again as new deliveries.
        redis_client.xgroup_setid("orders", "g", id="0")
        again = await h.read_and_process(fresh=True)
    finally:
        await h.close()
    assert all(o.acked and not o.duplicate for o in first)
    assert [o.duplicate for o in again] == [True] * 3 + [False] * 3
    assert all(o.acked for o in again)
    assert h.calls == [ids[:3], ids[3:]]
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == ids
    assert not pending_ids(redis_client, "orders", "g")


async def test_fresh_batch_handler_that_raises_keeps_no_claim_and_no_write(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 5)

    def fail(msgs: list[Message[Any]], session: Session) -> None:
        _charge(msgs, session)
        raise RuntimeError("the batch failed after its insert")

    h = await _harness(db_url, redis_url, redis_client, fail)
    outcomes, _ = await _one_batch(h, fresh=True)
    assert [o.action for o in outcomes] == [Action.LEAVE_PENDING] * 5
    assert charges_per_message(db_url) == {}
    assert processed_ids(db_url) == []
    assert pending_ids(redis_client, "orders", "g") == [i.encode() for i in ids]


async def test_fresh_batch_result_map_deletes_the_failed_rows_and_commits_the_rest(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 4)

    def partly(msgs: list[Message[Any]], session: Session) -> dict[str, BaseException]:
        _charge([m for m in msgs if m.id != ids[1]], session)
        return {ids[1]: RuntimeError("card declined")}

    h = await _harness(db_url, redis_url, redis_client, partly)
    outcomes, _ = await _one_batch(h, fresh=True)
    assert [o.acked for o in outcomes] == [True, False, True, True]
    assert charges_per_message(db_url) == {i: 1 for i in ids if i != ids[1]}
    assert processed_ids(db_url) == [ids[0], ids[2], ids[3]]
    assert pending_ids(redis_client, "orders", "g") == [ids[1].encode()]


async def test_fresh_batch_whose_commit_fails_fails_every_message_and_keeps_nothing(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 3)

    def clash(msgs: list[Message[Any]], session: Session) -> None:
        # Flushed at the commit: two business rows with one primary key.
        session.add(Charge(id=7, message_id=msgs[0].id, order_id="a", amount_cents=1))
        session.add(Charge(id=7, message_id=msgs[-1].id, order_id="b", amount_cents=1))

    h = await _harness(db_url, redis_url, redis_client, clash)
    outcomes, _ = await _one_batch(h, fresh=True)
    assert [o.action for o in outcomes] == [Action.LEAVE_PENDING] * 3
    assert all("IntegrityError" in o.error or "UNIQUE" in o.error for o in outcomes)
    assert charges_per_message(db_url) == {}
    assert processed_ids(db_url) == []
    assert pending_ids(redis_client, "orders", "g") == [i.encode() for i in ids]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
async def test_connection_dropped_in_a_fresh_batch_acks_nothing_and_writes_nothing(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = _add(redis_client, 4)

    def dropped(msgs: list[Message[Any]], session: Session) -> None:
        _charge(msgs, session)
        session.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))

    h = await _harness(db_url, redis_url, redis_client, dropped)
    try:
        with pytest.raises(DatabaseUnavailable):
            await h.read_and_process(fresh=True)
    finally:
        await h.close()
    assert charges_per_message(db_url) == {}
    assert processed_ids(db_url) == []
    assert pending_ids(redis_client, "orders", "g") == [i.encode() for i in ids]


async def test_batch_inline_gives_the_same_outcomes_as_the_awaited_batch_call(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    """The blocking form of the batch call (what the fresh hop runs) against the awaited one: the
    same outcomes for a result map, and for a raise."""
    ids = _add(redis_client, 3)

    def partly(msgs: list[Message[Any]], session: Session) -> dict[str, BaseException]:
        if len(msgs) == 2:
            raise ValueError("two is a bad number")
        return {msgs[0].id: RuntimeError("no")}

    h = await _harness(db_url, redis_url, redis_client, partly)
    try:
        assert h.invoker is not None
        run = h.invoker.run_batch_handler
        assert run is not None
        call = run.inline
        assert call is not None
        msgs = [
            Message(id=i, stream="orders", group="g", consumer="c1", fields={}, body=None)
            for i in ids
        ]
        for given in (msgs, msgs[:2]):
            awaited = await run(given, {})
            blocking = await asyncio.to_thread(call, given, {})
            assert blocking == awaited
        assert (await run(msgs[:2], {})).raised
    finally:
        await h.close()


@pytest.mark.parametrize("fresh", [True, False])
async def test_per_message_handlers_skip_the_ownership_check_only_for_a_fresh_batch(
    db_url: str, redis_url: str, redis_client: redis.Redis, fresh: bool
) -> None:
    create_business_tables(db_url)
    ids = _add(redis_client, 5)
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql")
    def charge(msg: Message[Any], session: Session) -> None:
        session.add(Charge(message_id=msg.id, order_id=msg.fields["n"], amount_cents=1))

    h = Harness(db_url, redis_url, redis_client, _charge)
    try:
        resolver = Resolver()
        await resolver.start([app.handlers[0].plan])
        invoke = make_invoker(
            app.handlers[0],
            resolver=resolver,
            threads=h.threads,
            metrics=Metrics(),
            stopping=lambda: False,
        )
        h.invoker = invoke
    except BaseException:
        await h.close()
        raise
    outcomes, checks = await _one_batch(h, fresh=fresh)
    assert checks == (0 if fresh else 1)
    assert all(o.acked for o in outcomes)
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == ids


async def test_fresh_batch_whose_handler_outlives_claim_idle_ms_is_neither_taken_nor_run_twice(
    db_url: str, redis_url: str, redis_client: redis.Redis
) -> None:
    """c1's batch handler sleeps four times claim_idle_ms while c2's reclaimer looks for idle
    entries: c1's leases keep the batch (renewed by time alone), so c2 takes nothing and every
    message is handled and committed once."""
    create_business_tables(db_url)
    ids = _add(redis_client, 5)
    calls: list[tuple[str, list[str]]] = []
    app = App("t")

    @app.handler("orders", group="g", idempotency="sql", batch=True, block_ms=50, claim_idle_ms=300)
    def charge(msgs: list[Message[Any]], session: Session) -> None:
        calls.append((msgs[0].consumer, [m.id for m in msgs]))
        _charge(msgs, session)
        time.sleep(1.2)

    async with running_sql_worker(app, redis_url, db_url, consumer="c1"):
        await eventually(lambda: bool(calls), what="c1 in its handler")
        async with running_sql_worker(app, redis_url, db_url, consumer="c2"):
            await eventually(lambda: not pending_ids(redis_client, "orders", "g"), what="all acked")
            await asyncio.sleep(0.5)  # c2's reclaimer has had several looks meanwhile
    assert calls == [("c1", ids)]
    assert charges_per_message(db_url) == dict.fromkeys(ids, 1)
    assert processed_ids(db_url) == ids
