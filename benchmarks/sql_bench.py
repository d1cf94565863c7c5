"""SQL idempotency: the article's per-message transaction vs streamworker's batched transaction.

Run: ``python -m benchmarks.sql_bench`` (or ``make bench``). Starts its own redis-server and a
PostgreSQL 15 with ``fsync=on`` and ``synchronous_commit=on`` (or uses ``--redis-url`` /
``--pg-url``), plus a SQLite file in WAL mode with ``synchronous=FULL``, and prints one table.

Every variant consumes the same N messages from a Redis stream in reads of ``--batch`` entries
and writes one small row per message (``INSERT`` into ``bench_charges``), through the same
driver loop, so what differs is the transaction pattern only:

* ``per-message``: the exactly-once article's strategy 1 in a handler: per message BEGIN,
  ``SELECT … FOR UPDATE`` on the processed row, the business INSERT, the processed INSERT,
  COMMIT (one fsync each); XACK per batch (kinder to it than the article's XACK per message).
* ``batched``: ``idempotency="sql"`` (:class:`streamworker.idempotency.sql.SqlStrategy`): one
  claim INSERT for the batch, the handlers' ``session.add``, one flush, one COMMIT, one XACK.
* ``no-idempotency``: the same batched transaction without the processed rows (not
  effectively-once: the baseline the batched strategy's overhead is measured against).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis
import redis.asyncio as aioredis
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import Outcome
from streamworker.idempotency.base import Batch, RunBlocking, Strategy
from streamworker.idempotency.none import AtLeastOnce
from streamworker.idempotency.sql import SqlDatabase, SqlStrategy, processed_messages, sortable_id
from streamworker.idempotency.sql.migrate import upgrade
from streamworker.observability.logging import configure_logging
from streamworker.observability.metrics import Metrics
from streamworker.runtime.invoker import HandlerInvoker, make_invoker
from streamworker.runtime.threads import HandlerThreads

STREAM, GROUP, CONSUMER = "bench", "g", "c1"


class _Base(DeclarativeBase):
    pass


class BenchCharge(_Base):
    __tablename__ = "bench_charges"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(sa.String(41))
    amount_cents: Mapped[int]


def article_handler(engine: sa.Engine) -> Callable[[Message[Any]], None]:
    """Strategy 1 as the article writes it: check with FOR UPDATE, write, record, commit."""
    table = processed_messages
    c = table.c

    def handle(msg: Message[Any]) -> None:
        sid = sortable_id(msg.id)
        with Session(engine) as session, session.begin():
            row = session.execute(
                sa.select(c.message_id)
                .where(c.group_name == GROUP, c.stream == STREAM, c.message_id == sid)
                .with_for_update()
            ).first()
            if row is not None:
                return
            session.add(BenchCharge(message_id=msg.id, amount_cents=100))
            session.execute(
                sa.insert(table).values(
                    group_name=GROUP, stream=STREAM, message_id=sid, consumer=CONSUMER
                )
            )

    return handle


def session_handler(msg: Message[Any], session: Session) -> None:
    """What a user writes with idempotency="sql": add the row to the batch's session."""
    session.add(BenchCharge(message_id=msg.id, amount_cents=100))


async def runtime_invoker(
    handler: Callable[..., None], idempotency: Literal["none", "sql"], threads: HandlerThreads
) -> HandlerInvoker:
    """The worker's own handler calls for ``handler`` (one thread hop per message, or the whole
    batch in one where the strategy can, as in the worker)."""
    app = App("bench")
    app.handler(STREAM, group=GROUP, idempotency=idempotency)(handler)
    spec = app.handlers[0]
    resolver = Resolver()
    await resolver.start([spec.plan])
    return make_invoker(
        spec, resolver=resolver, threads=threads, metrics=Metrics(), stopping=lambda: False
    )


class PlainBatch:
    """The baseline: one transaction per batch, the same session-providing, no processed rows."""

    name = "plain"

    def __init__(self, engine: sa.Engine, client: aioredis.Redis, threads: HandlerThreads) -> None:
        self._engine = engine
        self._client = client
        self._threads = threads

    async def process(self, work: Batch) -> list[Outcome]:
        batch = work.messages

        def _open() -> tuple[sa.Connection, Session]:
            conn = self._engine.connect()
            conn.begin()
            return conn, Session(bind=conn, join_transaction_mode="rollback_only")

        def _commit(conn: sa.Connection, session: Session) -> None:
            session.flush()
            session.close()
            conn.commit()
            conn.close()

        inline = work.handle_inline
        if inline is not None:
            # As the batched strategy does for def handlers: the batch's calls in one hop.
            def _all() -> list[Outcome]:
                conn, session = _open()
                outcomes = [inline(m, {Session: session}) for m in batch]
                _commit(conn, session)
                return outcomes

            outcomes: list[Outcome] = await self._threads.run(_all)
        else:
            conn, session = await self._threads.run(_open)
            outcomes = [await work.handle(m, {Session: session}) for m in batch]
            await self._threads.run(_commit, conn=conn, session=session)
        await self._client.xack(STREAM, GROUP, *[m.id for m in batch])
        return outcomes


@dataclass
class Result:
    database: str
    variant: str
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


async def _drive(
    redis_url: str,
    strategy: Strategy,
    invoke: HandlerInvoker,
    batch: int,
    run_blocking: RunBlocking,
) -> int:
    """Read the whole stream through ``strategy``; returns the messages processed."""
    client = aioredis.Redis.from_url(redis_url)
    done = 0
    try:
        while True:
            reply = await client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=batch)
            if not reply:
                return done
            entries = reply[0][1]
            messages = [
                Message(
                    id=eid.decode(),
                    stream=STREAM,
                    group=GROUP,
                    consumer=CONSUMER,
                    fields={k.decode(): v.decode() for k, v in fields.items()},
                    body=None,
                )
                for eid, fields in entries
            ]
            # Read with '>' just now: fresh, as the consume loop says of such a batch.
            work = Batch(
                messages,
                invoke.run_handler,
                run_batch_handler=invoke.run_batch_handler,
                run_blocking=run_blocking,
                fresh=True,
            )
            outcomes = await strategy.process(work)
            done += sum(1 for o in outcomes if o.acked)
    finally:
        await client.aclose()


def _reset(redis_url: str, db: SqlDatabase, n: int) -> None:
    with db.sync_engine.begin() as conn:
        conn.execute(sa.delete(BenchCharge.__table__))
        conn.execute(sa.delete(processed_messages))
    client = redis.Redis.from_url(redis_url)
    client.delete(STREAM)
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, {"order": str(i), "amount_cents": "100"})
    pipe.execute()
    client.xgroup_create(STREAM, GROUP, id="0")
    client.close()


async def run_variant(redis_url: str, db: SqlDatabase, variant: str, n: int, batch: int) -> Result:
    _reset(redis_url, db, n)
    threads = HandlerThreads(1)
    client = aioredis.Redis.from_url(redis_url)

    async def run_sync(func: Callable[[], Any]) -> Any:
        return await threads.run(func)

    strategy: Strategy
    if variant == "per-message":
        strategy = AtLeastOnce(client, STREAM, GROUP, 1)
        invoke = await runtime_invoker(article_handler(db.sync_engine), "none", threads)
    elif variant == "batched":
        strategy = SqlStrategy(
            db,
            client,
            stream=STREAM,
            group=GROUP,
            consumer=CONSUMER,
            max_deliveries=5,
            claim_idle_ms=60_000,  # the App default, as the worker passes it
            is_async=False,
        )
        invoke = await runtime_invoker(session_handler, "sql", threads)
    else:
        strategy = PlainBatch(db.sync_engine, client, threads)
        invoke = await runtime_invoker(session_handler, "sql", threads)
    started = time.perf_counter()
    try:
        done = await _drive(redis_url, strategy, invoke, batch, run_sync)
    finally:
        elapsed = time.perf_counter() - started
        await client.aclose()
        threads.shutdown()
    with db.sync_engine.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(BenchCharge)).scalar_one()
    if done != n or rows != n:
        raise RuntimeError(f"{variant}: processed {done}, wrote {rows}, expected {n}")
    return Result(db.dialect, variant, n, elapsed)


VARIANTS = ("per-message", "batched", "no-idempotency")


def _prepare(url: str) -> SqlDatabase:
    db = SqlDatabase(url)
    upgrade(db)
    _Base.metadata.create_all(db.sync_engine)
    return db


def _report(results: list[Result], out: Any = sys.stdout) -> None:
    print(f"{'database':<11}{'variant':<16}{'messages':>9}{'seconds':>9}{'msgs/s':>10}", file=out)
    for r in results:
        print(
            f"{r.database:<11}{r.variant:<16}{r.messages:>9}{r.seconds:>9.2f}{r.rate:>10.0f}",
            file=out,
        )
    print(file=out)
    for database in dict.fromkeys(r.database for r in results):
        rate = {r.variant: r.rate for r in results if r.database == database}
        print(
            f"{database}: batched = {rate['batched'] / rate['per-message']:.1f}x per-message, "
            f"{100 * rate['batched'] / rate['no-idempotency']:.0f}% of no-idempotency",
            file=out,
        )


@contextlib.contextmanager
def bench_servers(
    prefix: str, redis_url: str | None, pg_url: str | None
) -> Iterator[tuple[str, str, Path]]:
    """``(redis_url, pg_url, tmp)``: the given servers, or a redis-server and a durable
    PostgreSQL 15 started in a temp dir (the test suite's own helpers) and stopped afterwards."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.postgres import PostgresServer
    from tests.support.servers import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    redis_server = pg_server = None
    try:
        if redis_url is None:
            redis_server = RedisServer(tmp / "redis").start()
            redis_url = redis_server.url
        if pg_url is None:
            pg_server = PostgresServer(durable=True).start()
            pg_url = pg_server.url()
        with redis.Redis.from_url(redis_url) as probe:
            probe.ping()
        yield redis_url, pg_url, tmp
    finally:
        if pg_server is not None:
            pg_server.destroy()
        if redis_server is not None:
            redis_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and print the table (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sql_bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument(
        "--per-message-messages",
        type=int,
        default=1000,
        help="fewer for the slow per-message variant (rates are per second)",
    )
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--pg-url", help="use this PostgreSQL instead of starting one")
    args = parser.parse_args(argv)
    configure_logging("console", level="warning")  # as a worker logs; no per-message debug lines

    with bench_servers("sw-sql-bench-", args.redis_url, args.pg_url) as (redis_url, pg_url, tmp):
        results: list[Result] = []
        for url in (pg_url, f"sqlite:///{tmp / 'bench.db'}"):
            db = _prepare(url)
            try:
                if db.dialect == "postgresql":
                    with db.sync_engine.connect() as conn:
                        sync = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
                        fsync = conn.exec_driver_sql("SHOW fsync").scalar()
                    print(f"postgresql: synchronous_commit={sync} fsync={fsync}")
                for variant in VARIANTS:
                    n = args.per_message_messages if variant == "per-message" else args.messages
                    results.append(asyncio.run(run_variant(redis_url, db, variant, n, args.batch)))
            finally:
                asyncio.run(db.dispose())
        print()
        _report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
