"""The embedded engine against fakeredis and a real redis-server, through redis-py.

Run: ``python -m benchmarks.engine_bench`` (or ``python -m benchmarks`` for every benchmark).
Starts its own redis-server on a free loopback port in a temp dir (``--redis-server PATH``;
without one that column is left out) and prints one table.

Three columns, the same redis-py calls on each (redis-py's default protocol, RESP3):

* ``engine``: ``streamworker.engine.inproc.sync_client("engine://memory/...")``, in-process;
* ``fakeredis``: ``fakeredis.FakeRedis`` (version 7.0), in-process;
* ``redis-server``: ``redis.Redis`` over loopback TCP to redis-server 7.0.

Measured:

* pipelined XADD, pipelines of 100, non-transactional and MULTI/EXEC (entries/s);
* XREADGROUP COUNT 100 + XACK of the batch, in a loop over a backlog (messages/s);
* XPENDING extended form, pages of COUNT 100 over a 100,000-entry PEL (pages/s);
* XAUTOCLAIM cursor loop, COUNT 100, min-idle 0, over the same PEL (calls/s);
* the engine alone: per-operation cost of XADD and XRANGE (COUNT 10 from a random id) at
  10,000 and at 1,000,000 entries, through the client and through ``Engine.execute``; memory
  per small entry (3 fields of ~10 bytes) at 1,000,000 entries (tracemalloc delta / entries),
  with redis-server's ``MEMORY USAGE`` of the same stream for reference.

Every loop also stops at a time budget (``--budget-s``), so a slow column is measured on
fewer operations instead of stalling the run; rates are operations done / time taken.
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

STREAM = "bench"
GROUP = "g"
BATCH = 100


_Str = bytes | bytearray | memoryview | str | int | float
Fields = dict[_Str, _Str]  # what redis-py's xadd() accepts


def _raw_fields(i: int) -> list[tuple[bytes, bytes]]:
    # 3 fields of ~10 bytes: a realistic small event.
    return [
        (b"order_id", b"%010d" % i),
        (b"customer", b"cust-%05d" % (i % 100_000)),
        (b"amount_ct", b"%010d" % (i * 7 % 10_000_000_000)),
    ]


def _fields(i: int) -> Fields:
    return dict(_raw_fields(i))


_FIELD_POOL = [_fields(i) for i in range(1000)]


# --- the three columns ----------------------------------------------------------------------


@dataclass
class Column:
    """One backend: ``open()`` gives a fresh, empty client; ``close(client)`` releases it."""

    name: str
    open: Callable[[], redis.Redis]
    close: Callable[[redis.Redis], None]


def _engine_column() -> Column:
    from streamworker.engine.inproc import forget_engine, sync_client

    urls: dict[int, str] = {}

    def open_() -> redis.Redis:
        url = f"engine://memory/bench-{uuid.uuid4().hex[:8]}"
        client = sync_client(url)
        urls[id(client)] = url
        return client

    def close(client: redis.Redis) -> None:
        client.close()
        forget_engine(urls.pop(id(client)))

    return Column("engine", open_, close)


def _fakeredis_column() -> Column:
    import fakeredis

    def open_() -> redis.Redis:
        return fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)))

    return Column("fakeredis", open_, lambda c: c.close())


class RedisServerProcess:
    """A redis-server child on a free loopback port, no persistence, in a temp dir."""

    def __init__(self, binary: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="engine-bench-redis-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                str(self.dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port).ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def version(self) -> str:
        return str(self.client().info("server")["redis_version"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _redis_column(server: RedisServerProcess) -> Column:
    def open_() -> redis.Redis:
        client = redis.Redis(port=server.port)
        client.flushall()
        return client

    def close(client: redis.Redis) -> None:
        client.flushall()
        client.close()

    return Column("redis-server", open_, close)


@contextmanager
def _opened(column: Column) -> Iterator[redis.Redis]:
    client = column.open()
    try:
        yield client
    finally:
        column.close(client)
        gc.collect()


# --- scenarios ------------------------------------------------------------------------------


@dataclass
class Rate:
    """``ops`` operations in ``seconds``; ``capped`` when the time budget stopped the loop."""

    ops: int
    seconds: float
    capped: bool = False

    @property
    def per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else float("nan")


def _populate(client: redis.Redis, n: int) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, _FIELD_POOL[i % 1000], id=f"{i + 1}-0")
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def _entries_of(reply: Any) -> list[Any]:
    """The entries of a one-stream XREADGROUP reply, RESP2 (list) or RESP3 (dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        value = next(iter(reply.values()))
        return list(value[0] if value and isinstance(value[0], list) else value)
    return list(reply[0][1])


def bench_xadd_pipelined(client: redis.Redis, n: int, budget_s: float, transaction: bool) -> Rate:
    pool = _FIELD_POOL
    done = 0
    start = time.perf_counter()
    deadline = start + budget_s
    while done < n:
        pipe = client.pipeline(transaction=transaction)
        for j in range(BATCH):
            pipe.xadd(STREAM, pool[(done + j) % 1000])
        pipe.execute()
        done += BATCH
        if time.perf_counter() > deadline:
            return Rate(done, time.perf_counter() - start, capped=done < n)
    return Rate(done, time.perf_counter() - start)


def bench_readgroup_ack(client: redis.Redis, n: int, budget_s: float) -> Rate:
    _populate(client, n)
    client.xgroup_create(STREAM, GROUP, id="0")
    done = 0
    start = time.perf_counter()
    deadline = start + budget_s
    while True:
        entries = _entries_of(client.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=BATCH))
        if not entries:
            break
        client.xack(STREAM, GROUP, *[e[0] for e in entries])
        done += len(entries)
        if time.perf_counter() > deadline:
            return Rate(done, time.perf_counter() - start, capped=True)
    return Rate(done, time.perf_counter() - start)


def _build_pel(client: redis.Redis, n: int) -> None:
    _populate(client, n)
    client.xgroup_create(STREAM, GROUP, id="0")
    while _entries_of(client.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=10_000)):
        pass


def bench_xpending_pages(client: redis.Redis, budget_s: float) -> Rate:
    pages = 0
    low = "-"
    start = time.perf_counter()
    deadline = start + budget_s
    while True:
        page = client.xpending_range(STREAM, GROUP, min=low, max="+", count=BATCH)
        if not page:
            break
        pages += 1
        last = page[-1]["message_id"]
        low = "(" + (last.decode() if isinstance(last, bytes) else str(last))
        if time.perf_counter() > deadline:
            return Rate(pages, time.perf_counter() - start, capped=True)
    return Rate(pages, time.perf_counter() - start)


def bench_xautoclaim(client: redis.Redis, budget_s: float) -> Rate:
    calls = 0
    cursor: Any = "0-0"
    start = time.perf_counter()
    deadline = start + budget_s
    while True:
        reply = client.xautoclaim(
            STREAM, GROUP, "c2", min_idle_time=0, start_id=cursor, count=BATCH
        )
        calls += 1
        cursor = reply[0]
        if cursor in (b"0-0", "0-0"):
            break
        if time.perf_counter() > deadline:
            return Rate(calls, time.perf_counter() - start, capped=True)
    return Rate(calls, time.perf_counter() - start)


# --- engine-only: flat per-op cost and memory ------------------------------------------------


@dataclass
class PerOp:
    size: int
    xadd_client_us: float
    xrange_client_us: float
    xadd_exec_us: float
    xrange_exec_us: float


def _grow(engine: Any, client_state: Any, start: int, stop: int, name: str = STREAM) -> None:
    """XADD ids start+1 .. stop through execute_many (fast, outside the timings).

    Every argument is a new bytes object, as when parsed off the wire, so that the memory
    figure includes the field names and values of each entry (no sharing with a pool)."""
    key = name.encode()
    i = start
    while i < stop:
        j = min(stop, i + 1000)
        batch = []
        for k in range(i, j):
            argv = [b"XADD", key, b"%d-0" % (k + 1)]
            for fk, fv in _raw_fields(k):
                argv += [bytes(bytearray(fk)), fv]
            batch.append(argv)
        engine.execute_many(client_state, batch)
        i = j


def _per_op_passes(
    engine: Any, state: Any, client: redis.Redis, name: str, size: int, ops: int
) -> dict[str, Callable[[], None]]:
    """One timed pass per operation kind on stream ``name`` (``size`` entries, ids 1..size)."""
    rng = random.Random(size)
    key = name.encode()
    fields = _FIELD_POOL[7]
    flat = [x for kv in _raw_fields(7) for x in kv]
    starts = [f"{rng.randrange(1, size + 1)}-0" for _ in range(ops)]
    argvs = [[b"XRANGE", key, s.encode(), b"+", b"COUNT", b"10"] for s in starts]
    add = [b"XADD", key, b"*", *flat]

    def xrange_client() -> None:
        for s in starts:
            client.xrange(name, min=s, max="+", count=10)

    def xrange_exec() -> None:
        for argv in argvs:
            engine.execute(state, argv)

    def xadd_client() -> None:
        for _ in range(ops):
            client.xadd(name, fields)

    def xadd_exec() -> None:
        for _ in range(ops):
            engine.execute(state, add)

    return {
        "xrange_client": xrange_client,
        "xrange_exec": xrange_exec,
        "xadd_client": xadd_client,
        "xadd_exec": xadd_exec,
    }


def bench_flat_cost(small: int, large: int, ops: int, repeat: int) -> tuple[PerOp, PerOp]:
    """Per-op cost on a ``small`` and a ``large`` stream of one engine, best of ``repeat``
    passes; the passes alternate between the two streams so that load from other jobs hits
    both alike. (The XADD passes grow each stream by ``repeat * ops`` at most.)"""
    from streamworker.engine.inproc import engine_from_url, forget_engine, sync_client

    url = f"engine://memory/bench-flat-{uuid.uuid4().hex[:8]}"
    engine = engine_from_url(url)
    state = engine.connect()
    client = sync_client(url)
    try:
        _grow(engine, state, 0, small, "small")
        _grow(engine, state, 0, large, "large")
        passes = {
            "small": _per_op_passes(engine, state, client, "small", small, ops),
            "large": _per_op_passes(engine, state, client, "large", large, ops),
        }
        best: dict[tuple[str, str], float] = {}
        # XRANGE kinds first, so that they read streams of exactly `small` / `large` entries.
        for kind in ("xrange_client", "xrange_exec", "xadd_client", "xadd_exec"):
            for _ in range(repeat):
                for which in ("small", "large"):
                    t = time.perf_counter()
                    passes[which][kind]()
                    us = (time.perf_counter() - t) / ops * 1e6
                    best[which, kind] = min(us, best.get((which, kind), us))
    finally:
        client.close()
        engine.disconnect(state)
        forget_engine(url)
        gc.collect()

    def per_op(which: str, size: int) -> PerOp:
        return PerOp(
            size,
            best[which, "xadd_client"],
            best[which, "xrange_client"],
            best[which, "xadd_exec"],
            best[which, "xrange_exec"],
        )

    return per_op("small", small), per_op("large", large)


def bench_engine_memory(entries: int) -> float:
    """Bytes per entry: tracemalloc's traced-memory delta over ``entries`` XADDs / entries."""
    from streamworker.engine import Engine

    engine = Engine()
    state = engine.connect()
    engine.execute(state, [b"XADD", b"warmup", b"*", b"f", b"v"])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _grow(engine, state, 0, entries)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    length = engine.execute(state, [b"XLEN", STREAM.encode()])
    assert length == entries, length
    engine.disconnect(state)
    return (after - before) / entries


def redis_memory_per_entry(server: RedisServerProcess, entries: int) -> float:
    client = redis.Redis(port=server.port)
    client.flushall()
    try:
        _populate(client, entries)
        usage = client.memory_usage(STREAM, samples=0)
        return float(usage or 0) / entries
    finally:
        client.flushall()
        client.close()


# --- the run --------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    unit: str
    rates: dict[str, Rate] = field(default_factory=dict)
    target: str = ""
    met: bool | None = None

    def keep_best(self, column: str, rate: Rate) -> None:
        old = self.rates.get(column)
        if old is None or rate.per_s > old.per_s:
            self.rates[column] = rate


def _fmt_rate(rate: Rate | None) -> str:
    if rate is None:
        return "-"
    text = f"{rate.per_s:,.0f}"
    return text + ("*" if rate.capped else "")


def _ratio(a: Rate | None, b: Rate | None) -> float | None:
    if a is None or b is None or not b.per_s:
        return None
    return a.per_s / b.per_s


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.1f}x"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.engine_bench", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--xadd-entries", type=int, default=50_000, help="entries per pipelined XADD run"
    )
    p.add_argument(
        "--read-entries", type=int, default=50_000, help="backlog of the XREADGROUP+XACK loop"
    )
    p.add_argument("--pel", type=int, default=100_000, help="PEL size for XPENDING / XAUTOCLAIM")
    p.add_argument("--small", type=int, default=10_000, help="small stream for the per-op cost")
    p.add_argument(
        "--large", type=int, default=1_000_000, help="large stream for per-op cost and memory"
    )
    p.add_argument("--ops", type=int, default=10_000, help="operations per per-op measurement")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the best one is reported")
    p.add_argument("--budget-s", type=float, default=15.0, help="time cap of every timed loop")
    p.add_argument(
        "--redis-server", default=shutil.which("redis-server"), help="redis-server binary"
    )
    p.add_argument(
        "--quick", action="store_true", help="small sizes: a smoke run (figures meaningless)"
    )
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.quick:
        args.xadd_entries, args.read_entries, args.pel = 2_000, 2_000, 2_000
        args.small, args.large, args.ops, args.budget_s = 1_000, 20_000, 500, 5.0
        args.repeat = 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    server: RedisServerProcess | None = None
    columns = [_engine_column(), _fakeredis_column()]
    if args.redis_server:
        server = RedisServerProcess(args.redis_server)
        columns.append(_redis_column(server))
    try:
        return _run(args, columns, server)
    finally:
        if server is not None:
            server.stop()


def _run(args: argparse.Namespace, columns: list[Column], server: RedisServerProcess | None) -> int:
    import fakeredis

    import streamworker

    print(
        f"python {sys.version.split()[0]}, redis-py {redis.__version__}, fakeredis "
        f"{fakeredis.__version__}, streamworker {getattr(streamworker, '__version__', '?')}"
        + (f", redis-server {server.version()}" if server else ", no redis-server"),
        flush=True,
    )
    rows = [
        Row("XADD, pipelines of 100", "entries/s"),
        Row("XADD, MULTI/EXEC pipelines of 100", "entries/s"),
        Row("XREADGROUP COUNT 100 + XACK", "messages/s"),
        Row(f"XPENDING - + 100 pages, PEL {args.pel:,}", "pages/s"),
        Row(f"XAUTOCLAIM COUNT 100 loop, PEL {args.pel:,}", "calls/s"),
    ]
    # Best of --repeat rounds, the columns interleaved within a round: other jobs on a shared
    # machine then slow one round of every column rather than all rounds of one.
    for round_no in range(1, args.repeat + 1):
        for col in columns:
            print(f"  round {round_no}: {col.name}: pipelined XADD, XREADGROUP + XACK", flush=True)
            for row, transaction in ((rows[0], False), (rows[1], True)):
                with _opened(col) as c:
                    rate = bench_xadd_pipelined(c, args.xadd_entries, args.budget_s, transaction)
                row.keep_best(col.name, rate)
            with _opened(col) as c:
                rows[2].keep_best(
                    col.name, bench_readgroup_ack(c, args.read_entries, args.budget_s)
                )
    for col in columns:
        print(
            f"  {col.name}: a {args.pel:,}-entry PEL: XPENDING pages, XAUTOCLAIM loop", flush=True
        )
        with _opened(col) as c:
            _build_pel(c, args.pel)
            rows[3].rates[col.name] = bench_xpending_pages(c, args.budget_s)
            rows[4].rates[col.name] = bench_xautoclaim(c, args.budget_s)

    def check(row: Row, vs: str, factor: float) -> bool | None:
        r = _ratio(row.rates.get("engine"), row.rates.get(vs))
        return None if r is None else r >= factor

    rows[0].target = ">= 5x fakeredis, >= redis-server"
    a, b = check(rows[0], "fakeredis", 5), check(rows[0], "redis-server", 1)
    rows[0].met = None if a is None else (a and b is not False)
    rows[1].target = "(same as above)"
    a, b = check(rows[1], "fakeredis", 5), check(rows[1], "redis-server", 1)
    rows[1].met = None if a is None else (a and b is not False)
    rows[2].target = ">= 3x fakeredis"
    rows[2].met = check(rows[2], "fakeredis", 3)

    print(f"  engine: per-op cost at {args.small:,} and {args.large:,} entries ...", flush=True)
    small, large = bench_flat_cost(args.small, args.large, args.ops, args.repeat)
    print(f"  engine: memory at {args.large:,} entries (tracemalloc) ...", flush=True)
    per_entry = bench_engine_memory(args.large)
    redis_per_entry = redis_memory_per_entry(server, args.large) if server else None

    names = [c.name for c in columns]
    print()
    header = [
        "operation",
        "unit",
        *names,
        "engine/fakeredis",
        "engine/redis-server",
        "target",
        "met",
    ]
    table = [header]
    for row in rows:
        table.append(
            [
                row.name,
                row.unit,
                *[_fmt_rate(row.rates.get(n)) for n in names],
                _fmt_ratio(_ratio(row.rates.get("engine"), row.rates.get("fakeredis"))),
                _fmt_ratio(_ratio(row.rates.get("engine"), row.rates.get("redis-server"))),
                row.target,
                {True: "yes", False: "NO", None: "-"}[row.met],
            ]
        )
    _print_table(table)
    print("  * = stopped by the time budget; the rate is over the operations done.")
    print()
    flat = [
        [
            "engine per-op cost (us)",
            f"{small.size:,} entries",
            f"{large.size:,} entries",
            "large/small",
            "target",
            "met",
        ]
    ]
    worst = 0.0
    for label, s, lg in (
        ("XADD * (client)", small.xadd_client_us, large.xadd_client_us),
        ("XRANGE id + COUNT 10 (client)", small.xrange_client_us, large.xrange_client_us),
        ("XADD * (Engine.execute)", small.xadd_exec_us, large.xadd_exec_us),
        ("XRANGE id + COUNT 10 (Engine.execute)", small.xrange_exec_us, large.xrange_exec_us),
    ):
        ratio = lg / s if s else float("nan")
        worst = max(worst, ratio)
        flat.append(
            [
                label,
                f"{s:.2f}",
                f"{lg:.2f}",
                f"{ratio:.2f}x",
                "<= 2x",
                "yes" if ratio <= 2 else "NO",
            ]
        )
    _print_table(flat)
    print()
    mem = [["memory per entry (3 fields of ~10 bytes)", "bytes/entry", "target", "met"]]
    mem.append(
        [
            f"engine, tracemalloc delta / {args.large:,}",
            f"{per_entry:.0f}",
            "<= 250",
            "yes" if per_entry <= 250 else "NO",
        ]
    )
    if redis_per_entry is not None:
        mem.append(
            [
                f"redis-server MEMORY USAGE / {args.large:,}",
                f"{redis_per_entry:.0f}",
                "(reference)",
                "-",
            ]
        )
    _print_table(mem)
    return 0


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        print(
            "  "
            + " | ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if n == 0:
            print("  " + "-+-".join("-" * w for w in widths))


if __name__ == "__main__":
    sys.exit(main())
