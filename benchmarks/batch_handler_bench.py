"""Batch handlers over SQL: exactly-once at the cost of a plain set-based INSERT?

Run: ``python -m benchmarks.batch_handler_bench`` (or ``make bench``). Starts its own
redis-server and a PostgreSQL 15 with ``fsync=on`` and ``synchronous_commit=on`` (or uses
``--redis-url`` / ``--pg-url``) and prints one table per round, then the medians.

Every variant consumes the same messages from a Redis stream in reads of ``--batch`` (100)
entries through the same driver loop as :mod:`benchmarks.sql_bench` and writes one small row per
message into ``bench_charges``:

* ``a: plain set-based``: the reference without idempotency: per batch BEGIN, one
  ``INSERT … VALUES`` of the batch's rows (``session.execute(insert(table), rows)``: one
  executemany), COMMIT, XACK. At-least-once, the ceiling for what follows.
* ``b: sql batch handler``: ``idempotency="sql"`` with ``batch=True``: the same handler, the same
  INSERT, plus the claim of the batch's processed rows (one ``INSERT … ON CONFLICT DO NOTHING
  RETURNING``) and the ownership XPENDING, in the same transaction; COMMIT, XACK.
* ``c: sql per-message``: ``idempotency="sql"`` with an ordinary handler (``session.add`` of its
  row, the batch's rows flushed together), as :mod:`benchmarks.sql_bench` measures it.

The three run interleaved in each round (order rotated per round), ``--rounds`` rounds; the
medians, b/a (the median of the per-round ratios and the ratio of the medians) and b/c are
printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
import sqlalchemy as sa
from sqlalchemy.orm import Session

from benchmarks.sql_bench import (
    CONSUMER,
    GROUP,
    STREAM,
    BenchCharge,
    Result,
    _drive,
    _prepare,
    _reset,
    bench_servers,
    session_handler,
)
from streamworker import App, Message
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import Outcome
from streamworker.idempotency.base import Batch, Strategy
from streamworker.idempotency.sql import SqlDatabase, SqlStrategy
from streamworker.observability.logging import configure_logging
from streamworker.observability.metrics import Metrics
from streamworker.runtime.invoker import HandlerInvoker, make_invoker
from streamworker.runtime.threads import HandlerThreads

_TABLE = BenchCharge.__table__


def batch_handler(msgs: list[Message[Any]], session: Session) -> None:
    """What a user writes with ``batch=True``: the batch's rows in one INSERT."""
    session.execute(sa.insert(_TABLE), [{"message_id": m.id, "amount_cents": 100} for m in msgs])


async def _invoker(
    handler: Callable[..., None], threads: HandlerThreads, *, batch: bool
) -> HandlerInvoker:
    app = App("bench")
    app.handler(STREAM, group=GROUP, idempotency="sql", batch=batch)(handler)
    spec = app.handlers[0]
    resolver = Resolver()
    await resolver.start([spec.plan])
    return make_invoker(
        spec, resolver=resolver, threads=threads, metrics=Metrics(), stopping=lambda: False
    )


class PlainSetBased:
    """The reference: one transaction per batch with the batch handler's INSERT, no processed
    rows, no ownership check; the same handler call through the runtime's batch invoke."""

    name = "plain"

    def __init__(self, engine: sa.Engine, client: aioredis.Redis, threads: HandlerThreads) -> None:
        self._engine = engine
        self._client = client
        self._threads = threads

    async def process(self, work: Batch) -> list[Outcome]:
        batch = work.messages
        call = work.handle_batch_inline
        assert call is not None

        def _through() -> list[Outcome]:
            # As a hand-written worker would: the whole transaction in one thread hop.
            with self._engine.connect() as conn:
                conn.begin()
                session = Session(bind=conn, join_transaction_mode="rollback_only")
                outcomes = call(batch, {Session: session}).outcomes
                session.flush()
                session.close()
                conn.commit()
            return outcomes

        outcomes = await self._threads.run(_through)
        await self._client.xack(STREAM, GROUP, *[m.id for m in batch])
        return outcomes


VARIANTS = ("a: plain set-based", "b: sql batch handler", "c: sql per-message")


async def run_variant(redis_url: str, db: SqlDatabase, variant: str, n: int, batch: int) -> Result:
    _reset(redis_url, db, n)
    threads = HandlerThreads(1)
    client = aioredis.Redis.from_url(redis_url)

    async def run_sync(func: Callable[[], Any]) -> Any:
        return await threads.run(func)

    strategy: Strategy
    if variant.startswith("a"):
        strategy = PlainSetBased(db.sync_engine, client, threads)
        invoke = await _invoker(batch_handler, threads, batch=True)
    else:
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
        if variant.startswith("b"):
            invoke = await _invoker(batch_handler, threads, batch=True)
        else:
            invoke = await _invoker(session_handler, threads, batch=False)
    started = time.perf_counter()
    try:
        done = await _drive(redis_url, strategy, invoke, batch, run_sync)
    finally:
        elapsed = time.perf_counter() - started
        await client.aclose()
        threads.shutdown()
    with db.sync_engine.connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(_TABLE)).scalar_one()
    if done != n or rows != n:
        raise RuntimeError(f"{variant}: processed {done}, wrote {rows}, expected {n}")
    return Result(db.dialect, variant, n, elapsed)


def _report(rounds: list[dict[str, float]], out: Any = sys.stdout) -> None:
    print(
        f"{'variant':<24}"
        + "".join(f"{'round ' + str(i + 1):>10}" for i in range(len(rounds)))
        + f"{'median':>10}",
        file=out,
    )
    medians: dict[str, float] = {}
    for variant in VARIANTS:
        rates = [r[variant] for r in rounds]
        medians[variant] = statistics.median(rates)
        print(
            f"{variant:<24}" + "".join(f"{x:>10.0f}" for x in rates) + f"{medians[variant]:>10.0f}",
            file=out,
        )
    a, b, c = (medians[v] for v in VARIANTS)
    print(file=out)
    print(f"msgs/s (median of {len(rounds)} rounds): a={a:.0f} b={b:.0f} c={c:.0f}", file=out)
    # Per round, a and b ran minutes apart at most: the median of their ratios is steadier than
    # the ratio of the medians on a shared machine (both are printed).
    ratios = [r[VARIANTS[1]] / r[VARIANTS[0]] for r in rounds]
    print(
        f"b/a: median of the rounds {statistics.median(ratios):.2f}, ratio of the medians "
        f"{b / a:.2f} (target >= 0.8)   b/c = {b / c:.2f}",
        file=out,
    )
    print(f"b/a per round: {', '.join(f'{x:.2f}' for x in ratios)}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and print the tables (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.batch_handler_bench", description=__doc__
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--per-message-messages",
        type=int,
        default=5_000,
        help="fewer for the slower per-message variant c (rates are per second)",
    )
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--pg-url", help="use this PostgreSQL instead of starting one")
    args = parser.parse_args(argv)
    configure_logging("console", level="warning")  # as a worker logs; no per-message debug lines

    with bench_servers("sw-batch-bench-", args.redis_url, args.pg_url) as (redis_url, pg_url, _):
        db = _prepare(pg_url)
        try:
            with db.sync_engine.connect() as conn:
                sync = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
                fsync = conn.exec_driver_sql("SHOW fsync").scalar()
            print(f"postgresql: synchronous_commit={sync} fsync={fsync}; batch={args.batch}")
            rounds: list[dict[str, float]] = []
            for i in range(args.rounds):
                order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]
                rates: dict[str, float] = {}
                for variant in order:
                    n = args.per_message_messages if variant.startswith("c") else args.messages
                    result = asyncio.run(run_variant(redis_url, db, variant, n, args.batch))
                    rates[variant] = result.rate
                rounds.append(rates)
                print(
                    f"round {i + 1}: "
                    + ", ".join(f"{v.split(':')[0]}={rates[v]:.0f}" for v in VARIANTS),
                    flush=True,
                )
        finally:
            asyncio.run(db.dispose())
        print()
        _report(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
