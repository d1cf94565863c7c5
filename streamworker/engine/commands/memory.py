"""MEMORY USAGE / STATS / DOCTOR / MALLOC-STATS / PURGE / HELP.

Sizes are the engine's estimates of what Redis 7.0 would allocate (see
:mod:`streamworker.engine.memory`), not Python's own memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.errors import CommandError
from streamworker.engine.memory import STARTUP_BYTES, key_size
from streamworker.engine.numbers import parse_int
from streamworker.engine.replies import NULL_BULK, OK, Double, Map, Status, Verbatim

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_HELP = (
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
)

# Redis charges 8 bytes per bucket of a database's dicts (MEMORY STATS overhead.hashtable.*).
_BUCKET = 8
_DICT_ENTRY = 24


@command("memory|usage", arity=-3, flags=("readonly",), first_key=2, last_key=2, step=1)
def memory_usage(ctx: Ctx, args: list[bytes]) -> Reply:
    """MEMORY USAGE key [SAMPLES count] -> estimated bytes of the key and its value; nil
    for a missing key. ``SAMPLES 0`` looks at every element."""
    samples = 5
    i = 1
    while i < len(args):
        if args[i].lower() == b"samples" and i + 1 < len(args):
            n = parse_int(args[i + 1])
            if n is None:
                raise CommandError(msgs.NOT_INTEGER)
            if n < 0:
                raise CommandError(msgs.SYNTAX)
            samples = n
            i += 2
        else:
            raise CommandError(msgs.SYNTAX)
    value = ctx.db.get(args[0])
    if value is None:
        return NULL_BULK
    return key_size(ctx.engine, args[0], value, samples)


def _overhead(size: int) -> int:
    # A dict of `size` entries: a power-of-two bucket table plus an entry per key.
    if not size:
        return 0
    return (1 << max(2, (size - 1).bit_length())) * _BUCKET + size * _DICT_ENTRY


@command("memory|stats", arity=2)
def memory_stats(ctx: Ctx, args: list[bytes]) -> Reply:
    """MEMORY STATS -> Redis 7.0's map of memory figures (the engine's estimates; the
    allocator and RSS figures equal the estimate, ratios 1)."""
    memory = ctx.engine.memory
    used = memory.used_memory()
    dataset = used - STARTUP_BYTES
    keys = 0
    per_db: list[tuple[bytes, Map]] = []
    overhead = STARTUP_BYTES
    for db in ctx.keyspace.dbs:
        n = len(db.data)
        if not n:
            continue
        keys += n
        main, expires = _overhead(n), _overhead(len(db.expires))
        overhead += main + expires
        per_db.append(
            (
                b"db.%d" % db.index,
                Map(
                    [
                        (b"overhead.hashtable.main", main),
                        (b"overhead.hashtable.expires", expires),
                        (b"overhead.hashtable.slot-to-keys", 0),
                    ]
                ),
            )
        )
    items: list[tuple[Reply, Reply]] = [
        (b"peak.allocated", memory.peak),
        (b"total.allocated", used),
        (b"startup.allocated", STARTUP_BYTES),
        (b"replication.backlog", 0),
        (b"clients.slaves", 0),
        (b"clients.normal", 0),
        (b"cluster.links", 0),
        (b"aof.buffer", 0),
        (b"lua.caches", 0),
        (b"functions.caches", 0),
        *per_db,
        (b"overhead.total", overhead),
        (b"keys.count", keys),
        (b"keys.bytes-per-key", (used - STARTUP_BYTES) // keys if keys else 0),
        (b"dataset.bytes", dataset),
        (b"dataset.percentage", Double(100.0 * dataset / max(1, used - STARTUP_BYTES))),
        (b"peak.percentage", Double(100.0 * used / max(1, memory.peak))),
        (b"allocator.allocated", used),
        (b"allocator.active", used),
        (b"allocator.resident", used),
        (b"allocator-fragmentation.ratio", Double(1.0)),
        (b"allocator-fragmentation.bytes", 0),
        (b"allocator-rss.ratio", Double(1.0)),
        (b"allocator-rss.bytes", 0),
        (b"rss-overhead.ratio", Double(1.0)),
        (b"rss-overhead.bytes", 0),
        (b"fragmentation", Double(1.0)),
        (b"fragmentation.bytes", 0),
    ]
    return Map(items)


@command("memory|doctor", arity=2)
def memory_doctor(ctx: Ctx, args: list[bytes]) -> Reply:
    """MEMORY DOCTOR -> a short report (verbatim text) on the memory figures."""
    memory = ctx.engine.memory
    used = memory.used_memory()
    lines = [
        f"The embedded engine estimates {used} bytes in use "
        f"({used - STARTUP_BYTES} for keys, peak {memory.peak})."
    ]
    if memory.maxmemory:
        lines.append(
            f"maxmemory is {memory.maxmemory} bytes with policy {memory.policy}; "
            f"{memory.evicted_keys} keys evicted so far."
        )
        if used > memory.maxmemory:
            lines.append(
                "Used memory is over maxmemory: commands that add data are refused."
                if memory.policy == "noeviction"
                else "Used memory is over maxmemory: keys are being evicted."
            )
    else:
        lines.append("No maxmemory is set: nothing limits the dataset.")
    lines.append("Allocator fragmentation and RSS do not apply (sizes are estimates).")
    return Verbatim("\n".join(lines) + "\n")


@command("memory|malloc-stats", arity=2)
def memory_malloc_stats(ctx: Ctx, args: list[bytes]) -> Reply:
    """MEMORY MALLOC-STATS -> the text Redis sends without jemalloc."""
    return Verbatim("Stats not supported for the current allocator")


@command("memory|purge", arity=2)
def memory_purge(ctx: Ctx, args: list[bytes]) -> Reply:
    """MEMORY PURGE -> OK (nothing to purge)."""
    return OK


@command("memory|help", arity=2, flags=("loading", "stale"))
def memory_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """MEMORY HELP -> help lines."""
    return [Status(line) for line in _HELP]
