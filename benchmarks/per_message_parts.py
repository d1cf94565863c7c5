"""The per-message steps of the consume loop, each timed on its own (``per_message_profile`` times
them together).

Run: ``python -m benchmarks.per_message_parts [--repeat N]``.

Each step runs over one batch of 100 entries of three small fields (as ``cli_throughput_bench``
sends them), a thousand times; the figure is the process CPU time (not wall time) per message,
the minimum of ``--repeat`` runs (the run least disturbed by other processes). Where this branch
changed a step, the way it was done before is timed beside it, rebuilt here from the same parts:

* the delivery counters of a ``>`` read: a map of ids to 1 looked up per message, then none;
* the handler calls: the invoker awaited per message, then one loop for the batch
  (``HandlerInvoker.run_each``);
* the handler durations into the histogram: a bisection per value, then one per bucket over the
  sorted values;
* the XACK's packing: redis-py's hiredis serializer (a check per argument), then hiredis
  called directly for a command named in one word.

No Redis is involved: the read reply is one the parser could have given, the XACK is packed,
not sent.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import collections
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from streamworker import App, Message
from streamworker.core.codec import MessageDecoder
from streamworker.core.deps import Resolver
from streamworker.core.outcomes import ACKED, Outcome
from streamworker.io.redisio import parse_read_reply
from streamworker.observability.logging import configure_logging
from streamworker.observability.metrics import Metrics, observe_many
from streamworker.runtime.holdings import Holdings
from streamworker.runtime.invoker import HandlerInvoker, make_invoker
from streamworker.runtime.threads import HandlerThreads

BATCH = 100
LOOPS = 1000


def _reply() -> list[Any]:
    entries = [
        [
            f"1700000000000-{i}".encode(),
            [b"order_id", b"o%d" % i, b"amount", b"12", b"currency", b"EUR"],
        ]
        for i in range(BATCH)
    ]
    return [[b"bench", entries]]


def _cpu_ns_per_message(step: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(LOOPS):
            step()
        best = min(best, time.process_time() - started)
    return best / LOOPS / BATCH * 1e9


async def _invoker() -> HandlerInvoker:
    configure_logging("json", "info")
    app = App("parts")

    @app.handler("bench", group="g")
    async def handle(msg: Message) -> None:  # type: ignore[type-arg]
        return None

    spec = app.handlers[0]
    resolver = Resolver()
    await resolver.start([spec.plan])
    # As the consume loop makes it (its logger at info: the invoker's short paths).
    return make_invoker(
        spec,
        resolver=resolver,
        threads=HandlerThreads(1),
        metrics=Metrics(),
        stopping=threading.Event().is_set,
    )


def _async_ns_per_message(
    make: Callable[[HandlerInvoker, list[Message[Any]]], Any], msgs: list[Message[Any]], repeat: int
) -> float:
    async def run() -> float:
        invoker = await _invoker()
        best = float("inf")
        for _ in range(repeat):
            started = time.process_time()
            for _ in range(LOOPS):
                await make(invoker, msgs)
            invoker.flush_timings()
            best = min(best, time.process_time() - started)
        return best / LOOPS / BATCH * 1e9

    return asyncio.run(run())


async def _one_by_one(invoker: HandlerInvoker, msgs: list[Message[Any]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    append = outcomes.append
    for msg in msgs:
        append(await invoker(msg, {}))
    return outcomes


async def _each(invoker: HandlerInvoker, msgs: list[Message[Any]]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    await invoker.run_each(msgs, {}, outcomes)
    return outcomes


def measure(repeat: int) -> list[tuple[str, float, float | None]]:
    """(step, ns per message now, ns per message as before where it changed)."""
    reply = _reply()
    entries = parse_read_reply(reply, b"bench")
    decode = MessageDecoder(
        stream="bench", group="g", consumer="c1", model=None, body_field=None
    ).decode
    msgs = [decode(e.id, e.fields, 1) for e in entries]
    ids = [e.id for e in entries]
    holdings = Holdings()
    outcomes = [ACKED] * BATCH
    timings = [0.000001] * BATCH
    histogram = Metrics().handler_duration.labels(stream="bench", group="g", handler="h")
    from redis.connection import HiredisRespSerializer

    from streamworker.io.redisio import open_redis

    pack = open_redis("redis://127.0.0.1:1/0").connection_pool.make_connection().pack_command
    serializer_pack = HiredisRespSerializer().pack  # what the worker's connections used before

    def counts_map() -> None:
        counts = dict.fromkeys((e.id for e in entries), 1)
        get = counts.get
        for entry_id, _ in entries:
            get(entry_id)

    def decode_all() -> None:
        out: list[Message[Any]] = []
        append = out.append
        for entry_id, raw in entries:
            append(decode(entry_id, raw, 1))

    def fields_only() -> None:
        for _, raw in entries:
            parts = map(bytes.decode, raw)
            dict(zip(parts, parts))  # noqa: B905

    def holdings_step() -> None:
        batch_ids = [e.id for e in entries]
        holdings.start(batch_ids)
        holdings.finish(batch_ids)

    def ids_one_by_one() -> None:
        [m.id.encode() for m in msgs]

    def histogram_per_value() -> None:
        # observe_many before: each value's bucket found by its own bisection, then counted.
        counts = collections.Counter(
            map(functools.partial(bisect.bisect_left, histogram._upper_bounds), timings)
        )
        for i, n in counts.items():
            histogram._buckets[i].inc(n)
        histogram._sum.inc(sum(timings))

    def tally() -> None:
        outcomes.count(ACKED)
        outcomes.count(ACKED)

    rows: list[tuple[str, float, float | None]] = [
        (
            "read reply parsing (Entry per entry)",
            _cpu_ns_per_message(lambda: parse_read_reply(reply, b"bench"), repeat),
            None,
        ),
        ("delivery counters of a '>' read", 0.0, _cpu_ns_per_message(counts_map, repeat)),
        (
            "decode: Message per entry (fields + construction)",
            _cpu_ns_per_message(decode_all, repeat),
            None,
        ),
        (
            "  of which the fields' decoding and dict",
            _cpu_ns_per_message(fields_only, repeat),
            None,
        ),
        (
            "holdings: ids in flight, added and removed",
            _cpu_ns_per_message(holdings_step, repeat),
            None,
        ),
        (
            "handler calls (no-op async def) and their timing",
            _async_ns_per_message(_each, msgs, repeat),
            _async_ns_per_message(_one_by_one, msgs, repeat),
        ),
        (
            "handler durations into the histogram",
            _cpu_ns_per_message(lambda: observe_many(histogram, timings), repeat),
            _cpu_ns_per_message(histogram_per_value, repeat),
        ),
        ("outcome tallies (all acked)", _cpu_ns_per_message(tally, repeat), None),
        ("XACK ids as bytes", _cpu_ns_per_message(ids_one_by_one, repeat), None),
        (
            "XACK packed by hiredis",
            _cpu_ns_per_message(lambda: pack("XACK", "bench", "g", *ids), repeat),
            _cpu_ns_per_message(lambda: serializer_pack("XACK", "bench", "g", *ids), repeat),
        ),
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    rows = measure(args.repeat)
    print("| step | CPU ns/message | before this branch |")
    print("|---|---:|---:|")
    for name, now, before in rows:
        print(f"| {name} | {now:,.0f} | {'' if before is None else f'{before:,.0f}'} |")
    total = sum(now for name, now, _ in rows if not name.startswith("  "))
    old = sum(
        before if before is not None else now
        for name, now, before in rows
        if not name.startswith("  ")
    )
    print(f"| total of the steps | {total:,.0f} | {old:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
