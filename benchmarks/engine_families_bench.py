"""Every command family of the embedded engine against fakeredis and redis-server, side by side.

Run: ``python -m benchmarks.engine_families_bench [--quick]`` (or ``python -m benchmarks``).
Starts ``streamworker engine serve`` and a redis-server 7.0 on free loopback ports (temp dirs,
no persistence) and prints one table, one row per command family and pipelining mode.

Four columns, the same redis-py calls on each (``execute_command``, redis-py's default
protocol, RESP3; response callbacks run as usual):

* ``engine-tcp``: ``redis.Redis`` over loopback TCP to ``streamworker engine serve``;
* ``engine``: ``streamworker.engine.inproc.sync_client("engine://memory/...")``, in-process;
* ``fakeredis``: ``fakeredis.FakeRedis`` (version 7.0), in-process;
* ``redis-server``: ``redis.Redis`` over loopback TCP to redis-server 7.0.

Each family is a small mix of its commands on small keys (see :data:`FAMILIES`); the rate is
commands per second over the whole mix (transactions per second for MULTI/EXEC), measured
unpipelined (one round trip per command) and in non-transactional pipelines of 100 commands.
Ratios are by wall clock, and by CPU time ("CPU" columns), which load from other jobs on a
shared machine moves much less: for the in-process columns this process's CPU time; for the
two servers this process's plus the server's (``INFO cpu`` ``used_cpu_user + used_cpu_sys``).
Families whose commands are not in the engine's command table when the script runs (Pub/Sub,
HyperLogLog, geo, FUNCTION are being added) are left out and listed as such, so their rows
appear once they land. A column whose backend refuses a family's commands shows ``error``.

Memory: bytes per member of small hashes, sets (integer and string members) and sorted sets
of N = 10, 100, 1000 members (below and above Redis's listpack/intset thresholds of 128/512):
for the engine, tracemalloc's traced-memory delta over loading K keys of N members into a
fresh ``Engine`` in this process (every argument a fresh ``bytes``, as when parsed off the
wire), divided by K*N; and (unless ``--no-engine-tcp`` or ``--quick``) the RSS delta of a fresh
``streamworker engine serve`` process over the same load sent through redis-py, divided by
K*N (allocator overhead included; coarse). For redis-server, the ``INFO memory``
``used_memory`` delta over the same load divided by K*N, and ``MEMORY USAGE key SAMPLES 0``
averaged over the keys, divided by N. All include each key's own overhead spread over its
members.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from benchmarks.engine_bench import (
    Column,
    RedisServerProcess,
    _engine_column,
    _fakeredis_column,
    _opened,
    _print_table,
    _redis_column,
)
from benchmarks.server_bench import Server, start_engine

PIPELINE = 100
# Columns whose CPU time includes a server process's (INFO cpu).
SERVER_COLUMNS = frozenset({"engine-tcp", "redis-server"})
WARMUP = 20

Argv = tuple[Any, ...]


# --- the families --------------------------------------------------------------------------


@dataclass
class Op:
    """One command of a family's mix: ``argv(i)`` is its i-th call.

    ``sequential`` ops (a SCAN cursor loop) depend on the previous reply, so they run one
    round trip per call in both modes; ``weight`` is the op's share of calls in the family's
    mix relative to the others (1: as many calls as every other op).
    """

    name: str
    argv: Callable[[int], Argv]
    sequential: bool = False
    weight: float = 1.0


@dataclass
class Family:
    """A command family: the commands it needs in the table, a setup, and its mix of ops."""

    name: str
    commands: tuple[str, ...]
    setup: Callable[[redis.Redis], None]
    ops: list[Op]
    unit: str = "commands/s"
    # For MULTI/EXEC: the calls are whole transactions; see _run_transactions.
    transaction_size: int = 0


def _fill(client: redis.Redis, cmds: Sequence[Argv]) -> None:
    pipe = client.pipeline(transaction=False)
    for argv in cmds:
        pipe.execute_command(*argv)
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def _setup_strings(c: redis.Redis) -> None:
    _fill(c, [("SET", f"s:{i}", f"value-{i:010d}") for i in range(1000)])


def _setup_hashes(c: redis.Redis) -> None:
    _fill(c, [("HSET", f"h:{j}", *_hash_pairs(10, j)) for j in range(100)])


def _hash_pairs(n: int, seed: int) -> list[str]:
    out: list[str] = []
    for f in range(n):
        out += [f"field:{f:04d}", f"v{seed:04d}-{f:04d}"]
    return out


def _setup_lists(c: redis.Redis) -> None:
    _fill(c, [("RPUSH", "l", *[f"item-{i:06d}" for i in range(j, j + 100)]) for j in range(10)])


def _setup_sets(c: redis.Redis) -> None:
    cmds: list[Argv] = [("SADD", f"st:{j}", *[f"m{k:03d}" for k in range(20)]) for j in range(100)]
    cmds.append(("SADD", "ia", *range(0, 200, 2)))
    cmds.append(("SADD", "ib", *range(0, 300, 3)))
    _fill(c, cmds)


def _setup_zsets(c: redis.Redis) -> None:
    cmds: list[Argv] = []
    for j in range(100):
        pairs: list[Any] = []
        for k in range(20):
            pairs += [k * 1.5, f"m{k:03d}"]
        cmds.append(("ZADD", f"z:{j}", *pairs))
    big: list[Any] = []
    for k in range(1000):
        big += [k, f"member-{k:05d}"]
    cmds.append(("ZADD", "zbig", *big))
    _fill(c, cmds)


def _setup_nothing(c: redis.Redis) -> None:
    pass


def _setup_keys(c: redis.Redis) -> None:
    _fill(c, [("SET", f"k:{i}", "v") for i in range(1000)])


def _setup_geo(c: redis.Redis) -> None:
    args: list[Any] = []
    for i in range(1000):
        args += [-10 + (i % 40) * 0.5, 35 + (i // 40) * 0.5, f"p{i}"]
    _fill(c, [("GEOADD", "geo", *args)])


_FUNCTION_LIB = (
    "#!lua name=benchlib\n"
    "redis.register_function('bench_incr', function(keys, args) "
    "return redis.call('INCR', keys[1]) end)"
)


def _setup_function(c: redis.Redis) -> None:
    c.execute_command("FUNCTION", "LOAD", "REPLACE", _FUNCTION_LIB)


_SCRIPT = "return redis.call('INCR', KEYS[1])"


FAMILIES: list[Family] = [
    Family(
        "strings",
        ("set", "get", "incr", "mget"),
        _setup_strings,
        [
            Op("SET", lambda i: ("SET", f"s:{i % 1000}", f"value-{i:010d}")),
            Op("GET", lambda i: ("GET", f"s:{i * 7 % 1000}")),
            Op("INCR", lambda i: ("INCR", f"ctr:{i % 100}")),
            Op("MGET 10", lambda i: ("MGET", *[f"s:{(i + k) % 1000}" for k in range(10)])),
        ],
    ),
    Family(
        "hashes",
        ("hset", "hget", "hgetall"),
        _setup_hashes,
        [
            Op("HSET", lambda i: ("HSET", f"h:{i % 100}", f"field:{i % 12:04d}", f"x{i}")),
            Op("HGET", lambda i: ("HGET", f"h:{i * 7 % 100}", f"field:{i % 10:04d}")),
            Op("HGETALL (10-12 fields)", lambda i: ("HGETALL", f"h:{i % 100}")),
        ],
    ),
    Family(
        "lists",
        ("lpush", "rpop", "lrange"),
        _setup_lists,
        [
            Op("LPUSH", lambda i: ("LPUSH", "l", f"new-{i:06d}")),
            Op("RPOP", lambda i: ("RPOP", "l")),
            Op("LRANGE 0 9", lambda i: ("LRANGE", "l", i % 500, i % 500 + 9)),
        ],
    ),
    Family(
        "sets",
        ("sadd", "sismember", "smembers", "sinter"),
        _setup_sets,
        [
            Op("SADD", lambda i: ("SADD", f"st:{i % 100}", f"m{i % 30:03d}")),
            Op("SISMEMBER", lambda i: ("SISMEMBER", f"st:{i * 7 % 100}", f"m{i % 40:03d}")),
            Op("SMEMBERS (20-30)", lambda i: ("SMEMBERS", f"st:{i % 100}")),
            Op("SINTER 100 x 100 ints", lambda i: ("SINTER", "ia", "ib")),
        ],
    ),
    Family(
        "sorted sets",
        ("zadd", "zrange", "zrangebyscore", "zincrby"),
        _setup_zsets,
        [
            Op("ZADD", lambda i: ("ZADD", f"z:{i % 100}", i % 50, f"m{i % 25:03d}")),
            Op("ZRANGE 0 9", lambda i: ("ZRANGE", f"z:{i * 7 % 100}", 0, 9)),
            Op(
                "ZRANGEBYSCORE LIMIT 10 (1000)",
                lambda i: ("ZRANGEBYSCORE", "zbig", i % 900, "+inf", "LIMIT", 0, 10),
            ),
            Op("ZINCRBY", lambda i: ("ZINCRBY", f"z:{i % 100}", 1, f"m{i % 20:03d}")),
        ],
    ),
    Family(
        "bit ops",
        ("setbit", "bitcount"),
        _setup_nothing,
        [
            Op("SETBIT", lambda i: ("SETBIT", f"b:{i % 10}", i * 37 % 100_000, 1)),
            Op("BITCOUNT (12.5 kB)", lambda i: ("BITCOUNT", f"b:{i % 10}")),
        ],
    ),
    Family(
        "scripting",
        ("eval",),
        _setup_nothing,
        [Op("EVAL (INCR)", lambda i: ("EVAL", _SCRIPT, 1, f"e:{i % 10}"))],
    ),
    Family(
        "transactions",
        ("multi", "exec", "incr"),
        _setup_nothing,
        [Op("INCR", lambda i: ("INCR", f"t:{i % 10}"))],
        unit="transactions/s",
        transaction_size=10,
    ),
    Family(
        "keys",
        ("expire", "ttl", "scan"),
        _setup_keys,
        [
            Op("EXPIRE", lambda i: ("EXPIRE", f"k:{i % 1000}", 1000 + i)),
            Op("TTL", lambda i: ("TTL", f"k:{i * 7 % 1000}")),
            Op("SCAN COUNT 100 (cursor loop)", lambda i: ("SCAN",), sequential=True, weight=0.1),
        ],
    ),
    Family(
        "pub/sub",
        ("publish",),
        _setup_nothing,
        [Op("PUBLISH (no subscriber)", lambda i: ("PUBLISH", f"ch:{i % 10}", f"msg-{i}"))],
    ),
    Family(
        "hyperloglog",
        ("pfadd", "pfcount"),
        _setup_nothing,
        [
            Op("PFADD", lambda i: ("PFADD", f"hll:{i % 10}", f"el-{i}")),
            Op("PFCOUNT", lambda i: ("PFCOUNT", f"hll:{i % 10}")),
        ],
    ),
    Family(
        "geo",
        ("geoadd", "geosearch"),
        _setup_geo,
        [
            Op("GEOADD", lambda i: ("GEOADD", "geo", (i % 300) * 0.1, (i % 100) * 0.1, f"q{i}")),
            Op(
                "GEOSEARCH 200 km COUNT 10",
                lambda i: (
                    "GEOSEARCH",
                    "geo",
                    "FROMLONLAT",
                    -5 + i % 10,
                    40,
                    "BYRADIUS",
                    200,
                    "km",
                    "COUNT",
                    10,
                    "ASC",
                ),
            ),
        ],
    ),
    Family(
        "functions",
        ("fcall", "function|load"),
        _setup_function,
        [Op("FCALL (INCR)", lambda i: ("FCALL", "bench_incr", 1, f"f:{i % 10}"))],
    ),
]


def engine_table() -> frozenset[str]:
    """The lowercase names in the engine's command table, as this checkout registers them;
    subcommands as ``container|sub`` (``function|load``)."""
    from streamworker.engine.commands import load_commands

    names: set[str] = set()
    for name, spec in load_commands().items():
        names.add(name.decode())
        for sub in spec.subcommands or {}:
            names.add(f"{name.decode()}|{sub.decode()}")
    return frozenset(names)


def available_families(table: frozenset[str]) -> tuple[list[Family], list[Family]]:
    """(families whose commands are all in ``table``, the others)."""
    have = [f for f in FAMILIES if all(c in table for c in f.commands)]
    return have, [f for f in FAMILIES if f not in have]


# --- running one family on one column ------------------------------------------------------


@dataclass
class Rate:
    """``ops`` operations in ``seconds`` of wall clock and ``cpu_s`` of this process's CPU
    time; ``capped`` when the time budget stopped the loop; ``error`` when the backend refused
    a command."""

    ops: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    capped: bool = False
    error: str | None = None

    @property
    def per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 and self.error is None else 0.0

    @property
    def per_cpu_s(self) -> float:
        """Operations per second of this process's CPU: for the in-process columns, a figure
        that load from other jobs on a shared machine moves much less than the wall clock."""
        return self.ops / self.cpu_s if self.cpu_s > 0 and self.error is None else 0.0


@dataclass
class Limits:
    """How a timed loop is bounded and what counts as its CPU time: this process's alone
    (in-process backends), or this process's plus the server's (``INFO cpu``) for a server."""

    budget_s: float
    cpu: Callable[[], float] = time.process_time


class _Clock:
    """Wall clock and CPU time (``limits.cpu``) since construction."""

    def __init__(self, limits: Limits) -> None:
        self.start = time.perf_counter()
        self.cpu_of = limits.cpu
        self.cpu = limits.cpu()
        self.deadline = self.start + limits.budget_s

    def over(self) -> bool:
        return time.perf_counter() > self.deadline

    def rate(self, done: int, wanted: int) -> Rate:
        return Rate(
            done,
            time.perf_counter() - self.start,
            self.cpu_of() - self.cpu,
            capped=done < wanted,
        )


def _run_op(client: redis.Redis, op: Op, n: int, pipelined: bool, limits: Limits) -> Rate:
    """Up to ``n`` calls of ``op``, stopping at ``budget_s`` (argument tuples are built before
    the clock starts; the budget is checked every call, or every pipeline of 100)."""
    if op.sequential:
        return _scan_loop(client, n, limits)
    argvs = [op.argv(i) for i in range(n)]
    done = 0
    clock = _Clock(limits)
    if not pipelined:
        call = client.execute_command
        for argv in argvs:
            call(*argv)
            done += 1
            if clock.over():
                break
    else:
        for k in range(0, n, PIPELINE):
            pipe = client.pipeline(transaction=False)
            for argv in argvs[k : k + PIPELINE]:
                pipe.execute_command(*argv)
            pipe.execute()
            done = min(n, k + PIPELINE)
            if clock.over():
                break
    return clock.rate(done, n)


def _scan_loop(client: redis.Redis, calls: int, limits: Limits) -> Rate:
    """``calls`` SCAN COUNT 100 calls following the cursor (from 0 again after each end)."""
    cursor: Any = 0
    done = 0
    clock = _Clock(limits)
    while done < calls:
        cursor, _keys = client.execute_command("SCAN", cursor, "COUNT", 100)
        done += 1
        if clock.over():
            break
    return clock.rate(done, calls)


def _run_transactions(
    client: redis.Redis, fam: Family, n: int, pipelined: bool, limits: Limits
) -> Rate:
    """Up to ``n`` MULTI/EXEC transactions of ``fam.transaction_size`` commands.

    Unpipelined: one redis-py transactional pipeline per transaction (MULTI, the commands and
    EXEC go in one round trip, as redis-py always sends them). Pipelined: MULTI ... EXEC
    written out in non-transactional pipelines of about 100 commands (8 transactions of 12)."""
    op = fam.ops[0]
    size = fam.transaction_size
    argvs = [[op.argv(t * size + j) for j in range(size)] for t in range(n)]
    per_batch = max(1, PIPELINE // (size + 2)) if pipelined else 1
    done = 0
    clock = _Clock(limits)
    for k in range(0, n, per_batch):
        if pipelined:
            pipe = client.pipeline(transaction=False)
            for tx in argvs[k : k + per_batch]:
                pipe.execute_command("MULTI")
                for argv in tx:
                    pipe.execute_command(*argv)
                pipe.execute_command("EXEC")
        else:
            pipe = client.pipeline(transaction=True)
            for argv in argvs[k]:
                pipe.execute_command(*argv)
        pipe.execute()
        done = min(n, k + per_batch)
        if clock.over():
            break
    return clock.rate(done, n)


@dataclass
class Measured:
    """One family on one column in one mode: the mix's rate and each op's own rate."""

    total: Rate
    per_op: dict[str, Rate] = field(default_factory=dict)


def mix_rate(fam: Family, per_op: dict[str, Rate]) -> Rate:
    """The family's mix, ``weight`` calls of each op in turn, as a Rate of one operation (its
    wall and CPU seconds per operation)."""
    weights = sum(op.weight for op in fam.ops)
    seconds = sum(op.weight / max(per_op[op.name].per_s, 1e-9) for op in fam.ops)
    cpu_s = sum(op.weight / max(per_op[op.name].per_cpu_s, 1e-9) for op in fam.ops)
    capped = any(r.capped for r in per_op.values())
    return Rate(1, seconds / weights, cpu_s / weights, capped=capped)


def measure(
    client: redis.Redis,
    fam: Family,
    n: int,
    pipelined: bool,
    budget_s: float = 60.0,
    server_cpu: bool = False,
) -> Measured:
    """Set the family up on an empty ``client`` and time up to ``n`` calls of each op (fewer
    for a ``weight`` below 1), each op stopping at ``budget_s``. With ``server_cpu`` (a
    server backend), CPU time is this process's plus the server's ``used_cpu_user`` +
    ``used_cpu_sys`` (``INFO cpu``, asked once before and once after each loop)."""
    limits = Limits(budget_s)
    if server_cpu:
        limits.cpu = lambda: time.process_time() + _server_cpu_s(client)
    try:
        fam.setup(client)
        # A few untimed calls first: script compilation, a Lua interpreter's start and
        # first-use caches then stay out of the figures on every backend alike.
        if fam.transaction_size:
            _run_transactions(client, fam, WARMUP // 10, pipelined, limits)
            return Measured(_run_transactions(client, fam, n, pipelined, limits))
        for op in fam.ops:
            _run_op(client, op, WARMUP, pipelined, limits)
        per_op: dict[str, Rate] = {}
        for op in fam.ops:
            calls = max(1, round(n * op.weight))
            per_op[op.name] = _run_op(client, op, calls, pipelined, limits)
    except redis.RedisError as exc:
        return Measured(Rate(error=f"{type(exc).__name__}: {exc}"))
    return Measured(mix_rate(fam, per_op), per_op)


def _server_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# --- the TCP engine column -----------------------------------------------------------------


def _engine_tcp_column(server: Server) -> Column:
    def open_() -> redis.Redis:
        client = redis.Redis(port=server.port, socket_timeout=60)
        client.flushall()
        return client

    def close(client: redis.Redis) -> None:
        client.flushall()
        client.close()

    return Column("engine-tcp", open_, close)


# --- memory ---------------------------------------------------------------------------------


@dataclass
class MemoryCase:
    """K keys of one kind with N members each."""

    kind: str
    members: int
    keys: int

    def commands(self) -> Iterator[list[bytes]]:
        """The load, every argument a fresh ``bytes`` (as the engine gets them off the wire)."""
        n = self.members
        for k in range(self.keys):
            key = b"mem:%d" % k
            if self.kind == "hash":
                argv = [b"HSET", key]
                for m in range(n):
                    argv += [b"field:%04d" % m, b"val-%06d" % (k * n + m)]
            elif self.kind == "set (int)":
                argv = [b"SADD", key] + [b"%d" % (k * 100_000 + m * 7 + 1) for m in range(n)]
            elif self.kind == "set (string)":
                argv = [b"SADD", key] + [b"member:%06d" % m for m in range(n)]
            else:
                argv = [b"ZADD", key]
                for m in range(n):
                    argv += [b"%d" % (m * 3), b"member:%06d" % m]
            yield argv


MEMORY_KINDS = ("hash", "set (int)", "set (string)", "zset")


def engine_bytes_per_member(case: MemoryCase) -> float:
    """tracemalloc's traced-memory delta over loading ``case`` into a fresh Engine / members."""
    from streamworker.engine import Engine

    engine = Engine()
    state = engine.connect()
    engine.execute(state, [b"SET", b"warmup", b"x"])
    gc.collect()
    # The arguments are made while tracing (the engine keeps the member bytes it is given, so
    # they are part of what it holds); each chunk of commands is dropped once executed.
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        chunk: list[list[bytes]] = []
        for argv in case.commands():
            chunk.append(argv)
            if len(chunk) >= 1000:
                engine.execute_many(state, chunk)
                chunk = []
        engine.execute_many(state, chunk)
        del chunk, argv
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    size = engine.execute(state, [b"DBSIZE"])
    assert size == case.keys + 1, size
    engine.disconnect(state)
    return (after - before) / (case.keys * case.members)


def redis_bytes_per_member(server: RedisServerProcess, case: MemoryCase) -> tuple[float, float]:
    """(``used_memory`` delta / members, mean ``MEMORY USAGE`` per key / N) on redis-server."""
    client = server.client()
    try:
        client.flushall()
        before = int(client.info("memory")["used_memory"])
        cmds = list(case.commands())
        _fill(client, cmds)
        after = int(client.info("memory")["used_memory"])
        usage = [
            int(client.memory_usage(f"mem:{k}", samples=0) or 0)
            for k in range(0, case.keys, max(1, case.keys // 100))
        ]
        return (
            (after - before) / (case.keys * case.members),
            sum(usage) / len(usage) / case.members,
        )
    finally:
        client.flushall()
        client.close()


# --- the run --------------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.engine_families_bench", description=__doc__.split("\n")[0]
    )
    p.add_argument("--ops", type=int, default=1500, help="calls of each op per measurement")
    p.add_argument("--repeat", type=int, default=2, help="rounds; the best one is reported")
    p.add_argument("--budget-s", type=float, default=1.5, help="time cap of each op's timed loop")
    p.add_argument(
        "--members-total",
        type=int,
        default=50_000,
        help="members loaded per memory case (K keys x N members)",
    )
    p.add_argument(
        "--redis-server", default=shutil.which("redis-server"), help="redis-server binary"
    )
    p.add_argument("--no-engine-tcp", action="store_true", help="leave the engine-tcp column out")
    p.add_argument(
        "--families", help="comma-separated family names to run (default: every available one)"
    )
    p.add_argument("--detail", action="store_true", help="also print each command's own rate")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, no RSS column: a smoke run (figures meaningless)",
    )
    args = p.parse_args(list(argv) if argv is not None else None)
    if args.quick:
        args.ops = min(args.ops, 200)
        args.repeat = 1
        args.budget_s = min(args.budget_s, 0.5)
        args.members_total = min(args.members_total, 2000)
    if args.ops < 1 or args.repeat < 1 or args.members_total < 1000:
        p.error("--ops and --repeat must be >= 1, --members-total >= 1000")
    return args


def _fmt(rate: Rate | None) -> str:
    if rate is None:
        return "-"
    if rate.error:
        return "error"
    return f"{rate.per_s:,.0f}" + ("*" if rate.capped else "")


def _ratio(a: Rate | None, b: Rate | None, cpu: bool = False) -> str:
    x = (a.per_cpu_s if cpu else a.per_s) if a is not None else 0.0
    y = (b.per_cpu_s if cpu else b.per_s) if b is not None else 0.0
    return f"{x / y:.2f}x" if x and y else "-"


@dataclass
class Result:
    """Best rates per (family, mode) and column, and the per-op rates of the best rounds."""

    rows: dict[tuple[str, bool], dict[str, Measured]] = field(default_factory=dict)

    def keep(self, fam: str, pipelined: bool, column: str, m: Measured) -> None:
        cells = self.rows.setdefault((fam, pipelined), {})
        old = cells.get(column)
        if old is None or (m.total.error is None and m.total.per_s > old.total.per_s):
            cells[column] = m


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    have, missing = available_families(engine_table())
    if args.families:
        wanted = {w.strip() for w in args.families.split(",")}
        unknown = wanted - {f.name for f in FAMILIES}
        if unknown:
            raise SystemExit(f"unknown families: {', '.join(sorted(unknown))}")
        have = [f for f in have if f.name in wanted]
    workdir = Path(tempfile.mkdtemp(prefix="families-bench-"))
    engine_srv: Server | None = None
    redis_srv: RedisServerProcess | None = None
    try:
        columns: list[Column] = []
        if not args.no_engine_tcp:
            engine_srv = start_engine("memory", workdir)
            columns.append(_engine_tcp_column(engine_srv))
        columns += [_engine_column(), _fakeredis_column()]
        if args.redis_server:
            redis_srv = RedisServerProcess(args.redis_server)
            columns.append(_redis_column(redis_srv))
        return _run(args, have, missing, columns, redis_srv)
    finally:
        if engine_srv is not None:
            engine_srv.stop()
        if redis_srv is not None:
            redis_srv.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _run(
    args: argparse.Namespace,
    have: list[Family],
    missing: list[Family],
    columns: list[Column],
    server: RedisServerProcess | None,
) -> int:
    import fakeredis

    print(
        f"python {sys.version.split()[0]}, redis-py {redis.__version__}, fakeredis "
        f"{fakeredis.__version__}"
        + (f", redis-server {server.version()}" if server else ", no redis-server")
        + f"; {args.ops:,} calls per command, best of {args.repeat}",
        flush=True,
    )
    if missing:
        print(
            "  not in the engine's command table (rows left out): "
            + ", ".join(f"{f.name} ({'/'.join(f.commands).upper()})" for f in missing),
            flush=True,
        )
    result = Result()
    # Columns interleaved within a round, so load from other jobs slows one round of every
    # column rather than all rounds of one.
    for round_no in range(1, args.repeat + 1):
        print(f"  round {round_no} ...", flush=True)
        for fam in have:
            for pipelined in (False, True):
                for col in columns:
                    with _opened(col) as c:
                        result.keep(
                            fam.name,
                            pipelined,
                            col.name,
                            measure(
                                c,
                                fam,
                                args.ops,
                                pipelined,
                                args.budget_s,
                                server_cpu=col.name in SERVER_COLUMNS,
                            ),
                        )

    names = [c.name for c in columns]
    table = [
        [
            "family",
            "pipeline",
            "unit",
            *names,
            "engine/redis-server",
            "engine/redis-server CPU",
            "engine/fakeredis",
            "engine/fakeredis CPU",
            "engine-tcp/redis-server",
            "engine-tcp/redis-server CPU",
        ]
    ]
    errors: list[str] = []
    for fam in have:
        for pipelined in (False, True):
            cells = result.rows[fam.name, pipelined]
            totals = {n: cells[n].total if n in cells else None for n in names}
            for n, r in totals.items():
                if r is not None and r.error:
                    errors.append(f"{fam.name} on {n}: {r.error}")
            table.append(
                [
                    fam.name,
                    str(PIPELINE) if pipelined else "off",
                    fam.unit,
                    *[_fmt(totals[n]) for n in names],
                    _ratio(totals.get("engine"), totals.get("redis-server")),
                    _ratio(totals.get("engine"), totals.get("redis-server"), cpu=True),
                    _ratio(totals.get("engine"), totals.get("fakeredis")),
                    _ratio(totals.get("engine"), totals.get("fakeredis"), cpu=True),
                    _ratio(totals.get("engine-tcp"), totals.get("redis-server")),
                    _ratio(totals.get("engine-tcp"), totals.get("redis-server"), cpu=True),
                ]
            )
    print()
    _print_table(table)
    print("  engine = in-process client; engine-tcp = redis-py over TCP to `engine serve`.")
    print("  SCAN follows its cursor (one round trip per call) in both modes.")
    print("  * = an op was stopped by --budget-s; its rate is over the calls done.")
    for line in errors:
        print(f"  error: {line}")

    slow = _per_op_table(have, result, names, args.detail)
    print()
    # A fresh server per case; the quick run's loads are too small for pages to show.
    _print_memory(args.members_total, server, rss=not (args.no_engine_tcp or args.quick))
    if slow:
        print()
        print("  commands > 10x slower in the engine (in-process) than in fakeredis:")
        for line in slow:
            print(f"    {line}")
    return 0


def _much_slower(engine: Rate, fake: Rate) -> bool:
    """The engine >10x slower than fakeredis, by wall clock and by CPU time (so that a burst
    of load from other jobs during one of the two loops does not count)."""
    return (
        fake.per_s > 10 * engine.per_s
        and fake.per_cpu_s > 10 * engine.per_cpu_s
        and engine.error is None
        and fake.error is None
    )


def _per_op_table(have: list[Family], result: Result, names: list[str], detail: bool) -> list[str]:
    """Print each command's own rate (with ``detail``); return the >10x-slower-than-fakeredis."""
    table = [
        [
            "command",
            "pipeline",
            *names,
            "engine/redis-server",
            "engine/fakeredis",
            "engine/fakeredis CPU",
            "engine-tcp/redis-server CPU",
        ]
    ]
    slow: list[str] = []
    for fam in have:
        if fam.transaction_size:
            continue  # timed as whole transactions only
        for pipelined in (False, True):
            cells = result.rows[fam.name, pipelined]
            for op in fam.ops:
                rates = {n: cells[n].per_op.get(op.name) if n in cells else None for n in names}
                eng, fake = rates.get("engine"), rates.get("fakeredis")
                if eng is not None and fake is not None and _much_slower(eng, fake):
                    mode = "pipelined" if pipelined else "unpipelined"
                    slow.append(
                        f"{fam.name}: {op.name} ({mode}): fakeredis/engine "
                        f"{fake.per_s / max(eng.per_s, 1e-9):.1f}x by wall clock, "
                        f"{fake.per_cpu_s / max(eng.per_cpu_s, 1e-9):.1f}x by CPU"
                    )
                table.append(
                    [
                        f"{fam.name}: {op.name}",
                        str(PIPELINE) if pipelined else "off",
                        *[_fmt(rates[n]) for n in names],
                        _ratio(eng, rates.get("redis-server")),
                        _ratio(eng, fake),
                        _ratio(eng, fake, cpu=True),
                        _ratio(rates.get("engine-tcp"), rates.get("redis-server"), cpu=True),
                    ]
                )
    if detail:
        print()
        print("  per command (calls/s):")
        _print_table(table)
    return slow


def _rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def engine_rss_bytes_per_member(case: MemoryCase) -> float:
    """RSS delta of a fresh ``streamworker engine serve`` over loading ``case`` (through
    redis-py, pipelines of 1000) / members: what the process really takes from the OS,
    allocator overhead included (coarse: pages, and pymalloc arenas are never given back)."""
    workdir = Path(tempfile.mkdtemp(prefix="families-bench-rss-"))
    server = start_engine("memory", workdir)
    try:
        with server.client() as client:
            client.set("warmup", "x")
            before = _rss_bytes(server.proc.pid)
            _fill(client, list(case.commands()))
            after = _rss_bytes(server.proc.pid)
        return (after - before) / (case.keys * case.members)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _print_memory(total: int, server: RedisServerProcess | None, rss: bool) -> None:
    header = ["memory: bytes per member", "N", "keys", "engine tracemalloc"]
    if rss:
        header.append("engine RSS delta")
    if server:
        header += ["redis used_memory delta", "redis MEMORY USAGE", "engine/redis (used_memory)"]
    table = [header]
    for kind in MEMORY_KINDS:
        for n in (10, 100, 1000):
            case = MemoryCase(kind, n, max(1, total // n))
            print(f"  memory: {kind}, N={n} ...", flush=True)
            eng = engine_bytes_per_member(case)
            row = [kind, str(n), f"{case.keys:,}", f"{eng:.0f}"]
            if rss:
                row.append(f"{engine_rss_bytes_per_member(case):.0f}")
            if server:
                used, usage = redis_bytes_per_member(server, case)
                row += [f"{used:.0f}", f"{usage:.0f}", f"{eng / used:.1f}x" if used > 0 else "-"]
            table.append(row)
    _print_table(table)


if __name__ == "__main__":
    sys.exit(main())
