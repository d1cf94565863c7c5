"""Server commands: INFO, CONFIG, COMMAND, DBSIZE, FLUSHDB, FLUSHALL, TIME, LASTSAVE, SWAPDB."""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import resource
import sys
import time
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import CommandSpec, command
from streamworker.engine.commands._args import to_str
from streamworker.engine.commands.acl import categories_of
from streamworker.engine.commands.rdb import save_now
from streamworker.engine.commands.streams_r8 import docs_arguments
from streamworker.engine.config import parse_percentiles
from streamworker.engine.core import uses_wall_clock
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import glob_match
from streamworker.engine.keyspecs import (
    NOT_KEYS,
    keys_by_specs,
    proc_flags,
    proc_keys,
    specs_complete,
)
from streamworker.engine.keyspecs_data import KEY_SPECS
from streamworker.engine.memory import STARTUP_BYTES
from streamworker.engine.numbers import parse_int
from streamworker.engine.rdb.files import snapshot_state
from streamworker.engine.replies import NULL_BULK, OK, Map, Status, Verbatim

_log = logging.getLogger("streamworker.engine")

if TYPE_CHECKING:
    from collections.abc import Callable

    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply


@command("dbsize", arity=1, flags=("readonly", "fast"))
def dbsize(ctx: Ctx, args: list[bytes]) -> Reply:
    """DBSIZE -> number of keys in the current db."""
    return len(ctx.db)


def _flush_mode(args: list[bytes]) -> None:
    if len(args) > 1:
        raise CommandError(msgs.SYNTAX)
    if args and args[0].lower() not in (b"sync", b"async"):
        raise CommandError(msgs.SYNTAX)


@command("flushdb", arity=-1, flags=("write",))
def flushdb(ctx: Ctx, args: list[bytes]) -> Reply:
    """FLUSHDB [ASYNC|SYNC] -> OK."""
    _flush_mode(args)
    ctx.changed(ctx.db.flush())
    return OK


@command("flushall", arity=-1, flags=("write",))
def flushall(ctx: Ctx, args: list[bytes]) -> Reply:
    """FLUSHALL [ASYNC|SYNC] -> OK."""
    _flush_mode(args)
    ctx.changed(ctx.keyspace.flush_all())
    if ctx.engine.config.get("save"):
        # Redis 7.0 saves the empty dataset at once when save points are configured (the
        # counter starts again from zero); a failed save is only logged, as there.

        with contextlib.suppress(OSError):
            save_now(ctx.engine, "FLUSHALL")
    return OK


@command("swapdb", arity=3, flags=("write", "fast"))
def swapdb(ctx: Ctx, args: list[bytes]) -> Reply:
    """SWAPDB index1 index2 -> OK."""

    a = parse_int(args[0])
    if a is None or not -(2**31) <= a < 2**31:
        raise CommandError(msgs.INVALID_FIRST_DB)
    b = parse_int(args[1])
    if b is None or not -(2**31) <= b < 2**31:
        raise CommandError(msgs.INVALID_SECOND_DB)
    dbs = ctx.keyspace.dbs
    if not (0 <= a < len(dbs) and 0 <= b < len(dbs)):
        raise CommandError(msgs.DB_INDEX_OUT_OF_RANGE)
    if a != b:
        da, db_ = dbs[a], dbs[b]
        # Redis touches a watched key if it exists on either side of the swap.
        for d in (da, db_):
            for key in list(d.watchers):
                if key in da.data or key in db_.data:
                    d.touch(key)
        da.data, db_.data = db_.data, da.data
        da.expires, db_.expires = db_.expires, da.expires
        da.big_keys, db_.big_keys = db_.big_keys, da.big_keys
        da._heap, db_._heap = db_._heap, da._heap
        da.sizes, db_.sizes = db_.sizes, da.sizes
        da.access, db_.access = db_.access, da.access
        da.scan_cache = db_.scan_cache = None
        ctx.engine.signal_db_ready(a)
        ctx.engine.signal_db_ready(b)
    return OK


@command("time", arity=1, flags=("loading", "stale", "fast"))
def time_(ctx: Ctx, args: list[bytes]) -> Reply:
    """TIME -> [unix seconds, microseconds] as bulk strings."""
    # An injected test clock drives TIME too (at millisecond resolution).
    us = time.time_ns() // 1000 if uses_wall_clock(ctx.engine) else ctx.now_ms() * 1000
    return [str(us // 1_000_000).encode(), str(us % 1_000_000).encode()]


@command("lastsave", arity=1, flags=("loading", "stale", "fast"))
def lastsave(ctx: Ctx, args: list[bytes]) -> Reply:
    """LASTSAVE -> Unix time of the last successful SAVE/BGSAVE (or RDB load), else of the
    engine's start."""
    return snapshot_state(ctx.engine).last_save_s


# --- INFO ----------------------------------------------------------------------------------


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if value < 1024 or unit == "P":
            return f"{int(value)}B" if unit == "B" else f"{value:.2f}{unit}"
        value /= 1024
    return f"{n}B"


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _section_server(ctx: Ctx) -> list[str]:
    engine = ctx.engine
    uptime = int(time.monotonic() - engine.started_monotonic)
    uname = platform.uname()
    return [
        f"redis_version:{engine.redis_version}",
        "redis_git_sha1:00000000",
        "redis_git_dirty:0",
        "redis_build_id:0",
        "redis_mode:standalone",
        f"os:{uname.system} {uname.release} {uname.machine}",
        f"arch_bits:{64 if sys.maxsize > 2**32 else 32}",
        "monotonic_clock:POSIX clock_gettime",
        "multiplexing_api:epoll",
        "atomicvar_api:c11-builtin",
        "gcc_version:0.0.0",
        f"process_id:{os.getpid()}",
        "process_supervised:no",
        f"run_id:{engine.run_id}",
        f"tcp_port:{engine.tcp_port}",
        f"server_time_usec:{time.time_ns() // 1000}",
        f"uptime_in_seconds:{uptime}",
        f"uptime_in_days:{uptime // 86400}",
        f"hz:{engine.config.get('hz')}",
        f"configured_hz:{engine.config.get('hz')}",
        f"lru_clock:{int(time.time()) & ((1 << 24) - 1)}",
        f"executable:{sys.executable}",
        "config_file:",
        "io_threads_active:0",
        "engine:streamworker",
    ]


def _section_clients(ctx: Ctx) -> list[str]:
    engine = ctx.engine
    blocked = sum(1 for c in engine.clients.values() if c.blocked is not None)
    timeouts = sum(
        1 for c in engine.clients.values() if c.blocked is not None and c.blocked.deadline
    )
    return [
        f"connected_clients:{len(engine.clients)}",
        "cluster_connections:0",
        f"maxclients:{engine.config.get('maxclients')}",
        "client_recent_max_input_buffer:0",
        "client_recent_max_output_buffer:0",
        f"blocked_clients:{blocked}",
        f"tracking_clients:{len(engine.tracking_clients)}",
        f"clients_in_timeout_table:{timeouts}",
    ]


def _memory_scripts(ctx: Ctx) -> list[str]:
    # Redis 7.0's scripting lines: EVAL's Lua state and cache, then the functions' ones.
    scripts = ctx.engine.scripting
    functions = ctx.engine.functions
    cached = len(scripts.scripts) if scripts is not None else 0
    vm_functions = functions.lua_memory() if functions is not None else 0
    n_functions = functions.current.function_count() if functions is not None else 0
    mem_functions = functions.memory_estimate() if functions is not None else 184
    return [
        "used_memory_lua:0",
        "used_memory_vm_eval:0",
        "used_memory_lua_human:0B",
        "used_memory_scripts_eval:0",
        f"number_of_cached_scripts:{cached}",
        f"number_of_functions:{n_functions}",
        f"used_memory_vm_functions:{vm_functions}",
        f"used_memory_vm_total:{vm_functions}",
        f"used_memory_vm_total_human:{_human_bytes(vm_functions)}",
        f"used_memory_functions:{mem_functions}",
        f"used_memory_scripts:{mem_functions}",
        f"used_memory_scripts_human:{_human_bytes(mem_functions)}",
    ]


def _section_memory(ctx: Ctx) -> list[str]:
    # used_memory is the engine's estimate of what Redis would allocate (memory.py), which
    # maxmemory is compared with; used_memory_rss is the process's real resident size.
    rss = _rss_bytes()
    memory = ctx.engine.memory
    used = memory.used_memory()
    peak = memory.peak
    dataset = used - STARTUP_BYTES
    maxmemory = memory.maxmemory
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return [
        f"used_memory:{used}",
        f"used_memory_human:{_human_bytes(used)}",
        f"used_memory_rss:{rss}",
        f"used_memory_rss_human:{_human_bytes(rss)}",
        f"used_memory_peak:{peak}",
        f"used_memory_peak_human:{_human_bytes(peak)}",
        f"used_memory_peak_perc:{100.0 * used / peak:.2f}%",
        f"used_memory_overhead:{STARTUP_BYTES}",
        f"used_memory_startup:{STARTUP_BYTES}",
        f"used_memory_dataset:{dataset}",
        f"used_memory_dataset_perc:{100.0 if dataset else 0.0:.2f}%",
        f"total_system_memory:{total}",
        f"total_system_memory_human:{_human_bytes(total)}",
        *_memory_scripts(ctx),
        f"maxmemory:{maxmemory}",
        f"maxmemory_human:{_human_bytes(maxmemory)}",
        f"maxmemory_policy:{memory.policy}",
        f"mem_fragmentation_ratio:{rss / used:.2f}",
        "mem_allocator:libc",
        "lazyfree_pending_objects:0",
    ]


def _rdb_lines(ctx: Ctx) -> list[str]:
    st = snapshot_state(ctx.engine)
    running = st.bgsave_started is not None
    current = int(time.monotonic() - st.bgsave_started) if st.bgsave_started is not None else -1
    return [
        f"rdb_changes_since_last_save:{ctx.engine.dirty}",
        f"rdb_bgsave_in_progress:{1 if running else 0}",
        f"rdb_last_save_time:{st.last_save_s}",
        f"rdb_last_bgsave_status:{'ok' if st.last_status_ok else 'err'}",
        f"rdb_last_bgsave_time_sec:{st.last_bgsave_time_s}",
        f"rdb_current_bgsave_time_sec:{current}",
        f"rdb_saves:{st.saves}",
    ]


def _rdb_load_lines(ctx: Ctx) -> list[str]:
    st = snapshot_state(ctx.engine)
    return [
        f"rdb_last_load_keys_expired:{st.keys_expired}",
        f"rdb_last_load_keys_loaded:{st.keys_loaded}",
    ]


def _section_persistence(ctx: Ctx) -> list[str]:
    aof = ctx.engine.persistence
    if aof is not None:
        return [
            "loading:0",
            "async_loading:0",
            "current_cow_peak:0",
            "current_cow_size:0",
            "current_cow_size_age:0",
            "current_fork_perc:0.00",
            "current_save_keys_processed:0",
            "current_save_keys_total:0",
            *_rdb_lines(ctx),
            "rdb_last_cow_size:0",
            *_rdb_load_lines(ctx),
            *aof.info_lines(),
        ]
    return [
        "loading:0",
        "async_loading:0",
        *_rdb_lines(ctx),
        "rdb_last_cow_size:0",
        *_rdb_load_lines(ctx),
        f"aof_enabled:{1 if ctx.engine.config.get('appendonly') == 'yes' else 0}",
        "aof_rewrite_in_progress:0",
        "aof_rewrite_scheduled:0",
        "aof_last_rewrite_time_sec:-1",
        "aof_current_rewrite_time_sec:-1",
        "aof_last_bgrewrite_status:ok",
        "aof_rewrites:0",
        "aof_last_write_status:ok",
    ]


def _section_stats(ctx: Ctx) -> list[str]:
    engine = ctx.engine
    expired = sum(db.expired_count for db in ctx.keyspace.dbs)
    return [
        f"total_connections_received:{engine.stats_connections}",
        f"total_commands_processed:{engine.stats_commands}",
        "instantaneous_ops_per_sec:0",
        "total_net_input_bytes:0",
        "total_net_output_bytes:0",
        f"rejected_connections:{engine.stats_rejected_connections}",
        f"expired_keys:{expired}",
        f"evicted_keys:{engine.memory.evicted_keys}",
        "keyspace_hits:0",
        "keyspace_misses:0",
        f"pubsub_channels:{len(engine.pubsub.channels)}",
        f"pubsub_patterns:{len(engine.pubsub.patterns)}",
        f"pubsubshard_channels:{len(engine.pubsub.shard)}",
        "latest_fork_usec:0",
        "total_forks:0",
        f"total_error_replies:{engine.stats_errors + engine.stats_rejected}",
    ]


def _section_errorstats(ctx: Ctx) -> list[str]:
    # Redis keeps the prefixes in a rax: byte order.
    counts = ctx.engine.error_counts
    return [f"errorstat_{prefix}:count={counts[prefix]}" for prefix in sorted(counts, key=_utf8)]


def _called_specs(ctx: Ctx) -> list[CommandSpec]:
    """Every command and subcommand with a call, a rejection or a failure counted."""
    out = []
    for spec in ctx.engine.table.values():
        if spec.calls or spec.rejected_calls or spec.failed_calls:
            out.append(spec)
        for sub in (spec.subcommands or {}).values():
            if sub.calls or sub.rejected_calls or sub.failed_calls:
                out.append(sub)
    return out


def _section_commandstats(ctx: Ctx) -> list[str]:
    lines = []
    for spec in _called_specs(ctx):
        usec = spec.duration_ns // 1000
        per_call = usec / spec.calls if spec.calls else 0.0
        lines.append(
            f"cmdstat_{spec.name}:calls={spec.calls},usec={usec},usec_per_call={per_call:.2f},"
            f"rejected_calls={spec.rejected_calls},failed_calls={spec.failed_calls}"
        )
    return lines


def histogram_percentile(histogram: list[int], calls: int, percentile: float) -> float:
    """The call duration (us) at ``percentile`` of a spec's power-of-two histogram: the upper
    bound of the bucket where the cumulative count reaches it (a bucket-wide approximation of
    Redis's HDR histogram)."""
    wanted = max(1, -(-calls * percentile // 100))
    seen = 0
    for i, count in enumerate(histogram):
        seen += count
        if seen >= wanted:
            return ((1024 << i) - 1) / 1000
    return ((1024 << (len(histogram) - 1)) - 1) / 1000


def _section_latencystats(ctx: Ctx) -> list[str]:
    percentiles = parse_percentiles(
        ctx.engine.config.get("latency-tracking-info-percentiles") or ""
    )
    lines = []
    for spec in _called_specs(ctx):
        if not spec.calls:
            continue
        values = ",".join(
            f"p{p:g}={histogram_percentile(spec.histogram, spec.calls, p):.3f}" for p in percentiles
        )
        lines.append(f"latency_percentiles_usec_{spec.name}:{values}")
    return lines


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _section_replication(ctx: Ctx) -> list[str]:
    repl = ctx.engine.replication
    head = ["role:master"]
    if repl.master_host is not None:
        head = ["role:slave", *repl.replica_info_lines()]
    return [
        *head,
        *repl.info_lines(),
        "master_failover_state:no-failover",
        f"master_replid:{repl.replid}",
        f"master_replid2:{repl.replid2}",
        f"master_repl_offset:{repl.offset}",
        f"second_repl_offset:{repl.second_offset}",
        "repl_backlog_active:0",
        "repl_backlog_size:1048576",
        "repl_backlog_first_byte_offset:0",
        "repl_backlog_histlen:0",
    ]


def _section_cpu(ctx: Ctx) -> list[str]:
    self_ = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [
        f"used_cpu_sys:{self_.ru_stime:.6f}",
        f"used_cpu_user:{self_.ru_utime:.6f}",
        f"used_cpu_sys_children:{children.ru_stime:.6f}",
        f"used_cpu_user_children:{children.ru_utime:.6f}",
    ]


def _section_cluster(ctx: Ctx) -> list[str]:
    return ["cluster_enabled:0"]


def _section_keyspace(ctx: Ctx) -> list[str]:
    lines = []
    now = ctx.now_ms()
    for db in ctx.keyspace.dbs:
        if not db.data:
            continue
        ttls = [w - now for w in db.expires.values() if w > now]
        avg = sum(ttls) // len(ttls) if ttls else 0
        lines.append(f"db{db.index}:keys={len(db.data)},expires={len(db.expires)},avg_ttl={avg}")
    return lines


_SECTIONS = {
    "server": ("Server", _section_server),
    "clients": ("Clients", _section_clients),
    "memory": ("Memory", _section_memory),
    "persistence": ("Persistence", _section_persistence),
    "stats": ("Stats", _section_stats),
    "replication": ("Replication", _section_replication),
    "cpu": ("CPU", _section_cpu),
    "modules": ("Modules", None),
    "commandstats": ("Commandstats", _section_commandstats),
    "errorstats": ("Errorstats", _section_errorstats),
    "latencystats": ("Latencystats", _section_latencystats),
    "cluster": ("Cluster", _section_cluster),
    "keyspace": ("Keyspace", _section_keyspace),
}
_DEFAULT = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
)
# Every section in Redis's order (INFO ALL / EVERYTHING); the default set leaves out the
# per-command ones.
_ALL = (*_DEFAULT[:8], "commandstats", "errorstats", "latencystats", *_DEFAULT[9:])


@command("info", arity=-1, flags=("loading", "stale", "sentinel"))
def info(ctx: Ctx, args: list[bytes]) -> Reply:
    """INFO [section ...] -> the sections as ``# Name`` blocks (verbatim text in RESP3)."""
    wanted: list[str] = []
    if not args:
        wanted = list(_DEFAULT)
    for a in args:
        name = a.decode("latin-1").lower()
        if name in ("all", "everything"):
            wanted.extend(s for s in _ALL if s not in wanted)
        elif name == "default":
            wanted.extend(s for s in _DEFAULT if s not in wanted)
        elif name in _SECTIONS and name not in wanted:
            wanted.append(name)
    blocks = []
    for name in _ALL:
        if name not in wanted:
            continue
        title, fn = _SECTIONS[name]
        lines = [f"# {title}"] + (fn(ctx) if fn is not None else [])
        blocks.append("".join(line + "\r\n" for line in lines))
    return Verbatim("\r\n".join(blocks))


# --- CONFIG --------------------------------------------------------------------------------


@command("config|get", arity=-3, flags=("admin", "noscript", "loading", "stale"))
def config_get(ctx: Ctx, args: list[bytes]) -> Reply:
    """CONFIG GET pattern [pattern ...] -> map of matching parameters."""
    cfg = ctx.engine.config
    out: dict[str, str] = {}
    for pat in args:
        text = pat.decode("utf-8", "surrogateescape").lower()
        if not any(c in text for c in "*?[") and cfg.is_known(text):
            # An exact name is echoed as the client spelled it.
            out.setdefault(pat.decode("utf-8", "surrogateescape"), cfg.get(text) or "")
            continue
        for name in cfg.names():
            if glob_match(pat, name.encode(), nocase=True):
                out.setdefault(name, cfg.get(name) or "")
    return Map((k.encode(), v.encode()) for k, v in out.items())


@command("config|set", arity=-4, flags=("admin", "noscript", "loading", "stale"))
def config_set(ctx: Ctx, args: list[bytes]) -> Reply:
    """CONFIG SET parameter value [parameter value ...] -> OK (all or nothing)."""
    if len(args) % 2:
        raise CommandError(msgs.wrong_arity("config|set"))
    cfg = ctx.engine.config
    pending: dict[str, str] = {}
    for i in range(0, len(args), 2):
        name = args[i].decode("utf-8", "surrogateescape").lower()
        if not cfg.is_known(name):
            raise CommandError(msgs.config_unknown_param(to_str(args[i])))
        if name in pending:
            raise CommandError(msgs.config_set_failed(name, "duplicate parameter"))
        pending[name] = args[i + 1].decode("utf-8", "surrogateescape")
    checked = {name: cfg.validate(name, value) for name, value in pending.items()}
    for name, value in checked.items():
        cfg.set(name, value)
    ctx.engine.config_changed()
    return OK


@command("config|resetstat", arity=2, flags=("admin", "noscript", "loading", "stale"))
def config_resetstat(ctx: Ctx, args: list[bytes]) -> Reply:
    """CONFIG RESETSTAT -> OK."""
    ctx.engine.reset_stats()
    return OK


@command("config|rewrite", arity=2, flags=("admin", "noscript", "loading", "stale"))
def config_rewrite(ctx: Ctx, args: list[bytes]) -> Reply:
    """CONFIG REWRITE -> error: there is no config file."""
    raise CommandError(msgs.NO_CONFIG_FILE)


_CONFIG_HELP = [
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
]


@command("config|help", arity=2, flags=("loading", "stale"))
def config_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """CONFIG HELP -> help lines."""
    return [Status(line) for line in _CONFIG_HELP]


# --- COMMAND -------------------------------------------------------------------------------


_UNLISTED_FLAGS = frozenset({"may-replicate", "sentinel", "only-sentinel"})


def _command_info(spec: CommandSpec) -> Reply:
    subs: list[Reply] = []
    if spec.subcommands:
        subs = [_command_info(s) for s in spec.subcommands.values()]
    return [
        spec.name.encode(),
        spec.arity,
        # As Redis 7.0 names them (no_auth, allow_busy...); it does not list may-replicate
        # nor the sentinel flags.
        [Status(f.replace("-", "_")) for f in sorted(spec.flags) if f not in _UNLISTED_FLAGS],
        spec.first_key,
        spec.last_key,
        spec.step,
        [],
        [],
        [],
        subs,
    ]


def _lookup(ctx: Ctx, name: bytes) -> CommandSpec | None:
    table = ctx.engine.table
    if b"|" in name:
        parent, _, sub = name.lower().partition(b"|")
        spec = table.get(parent)
        return spec.subcommands.get(sub) if spec and spec.subcommands else None
    return table.get(name.lower())


@command("command", arity=-1, flags=("loading", "stale", "sentinel"))
def command_(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND -> info for every command."""
    return [_command_info(spec) for spec in ctx.engine.table.values()]


@command("command|count", arity=2, flags=("loading", "stale", "sentinel"))
def command_count(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND COUNT -> number of top-level commands."""
    return len(ctx.engine.table)


@command("command|list", arity=-2, flags=("loading", "stale", "sentinel"))
def command_list(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern] -> the names
    of the commands and of their subcommands (``client|list``) that pass the filter."""
    keep: Callable[[CommandSpec], bool]
    if not args:
        keep = _keep_all
    elif len(args) == 3 and args[0].lower() == b"filterby":
        kind, value = args[1].lower(), args[2]
        if kind == b"module":
            keep = _keep_none  # the engine loads no modules
        elif kind == b"aclcat":
            cat = value.lower().decode("utf-8", "surrogateescape")
            keep = lambda spec: cat in _categories(spec)  # noqa: E731
        elif kind == b"pattern":
            keep = lambda spec: glob_match(value, spec.name.encode(), nocase=True)  # noqa: E731
        else:
            raise CommandError(msgs.SYNTAX)
    else:
        raise CommandError(msgs.SYNTAX)
    out: list[Reply] = []
    for spec in ctx.engine.table.values():
        if keep(spec):
            out.append(spec.name.encode())
        if spec.subcommands:
            out.extend(sub.name.encode() for sub in spec.subcommands.values() if keep(sub))
    return out


def _keep_all(spec: CommandSpec) -> bool:
    return True


def _keep_none(spec: CommandSpec) -> bool:
    return False


def _categories(spec: CommandSpec) -> set[str]:
    # A container (CONFIG, CLIENT...) has no category of its own but Redis's implicit "slow".
    if spec.func is None and spec.subcommands:
        return {"slow"}
    return categories_of(spec)


@command("command|info", arity=-2, flags=("loading", "stale", "sentinel"))
def command_info(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND INFO [name ...] -> info arrays (nil for unknown names)."""
    if not args:
        return command_(ctx, args)
    out: list[Reply] = []
    for name in args:
        spec = _lookup(ctx, name)
        out.append(_command_info(spec) if spec is not None else NULL_BULK)
    return out


@command("command|docs", arity=-2, flags=("loading", "stale", "sentinel"))
def command_docs(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND DOCS [name ...] -> map name -> docs (minimal: summary and group)."""
    names = args or list(ctx.engine.table)
    items: list[tuple[Reply, Reply]] = []
    for name in names:
        spec = _lookup(ctx, name)
        if spec is None:
            continue
        doc = (spec.func.__doc__ or "").strip().splitlines() if spec.func else []
        fields: list[tuple[Reply, Reply]] = [
            (b"summary", (doc[0] if doc else spec.name).encode()),
            (b"since", b"1.0.0"),
        ]
        if ctx.engine.version.is_redis8:
            # An 8.x engine lists the options of the stream commands it extends.
            arguments = docs_arguments(spec.name, ctx.engine.version)
            if arguments is not None:
                fields.append((b"arguments", list(arguments)))
        items.append((spec.name.encode(), Map(fields)))
    return Map(items)


@command("command|getkeys", arity=-4, flags=("loading", "stale", "sentinel"))
def command_getkeys(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND GETKEYS command [arg ...] -> the key arguments (legacy key specs)."""
    return _getkeys(ctx, args)[1]


@command("command|getkeysandflags", arity=-4, flags=("loading", "stale", "sentinel"))
def command_getkeysandflags(ctx: Ctx, args: list[bytes]) -> Reply:
    """COMMAND GETKEYSANDFLAGS command [arg ...] -> [key, [flag ...]] pairs: each key with the
    flags of the Redis key spec that finds it (:mod:`streamworker.engine.keyspecs_data`)."""
    spec, keys = _getkeys(ctx, args)
    specs = KEY_SPECS.get(spec.name, ())
    pairs = keys_by_specs(specs, args) if specs_complete(specs) else None
    if pairs is None:
        # Redis's getkeys procs: the commands whose specs cannot say it alone.
        pairs = [(key, proc_flags(spec.name, specs, args, i)) for i, key in enumerate(keys)]
    return [[key, [Status(f) for f in flags]] for key, flags in pairs]


def _getkeys(ctx: Ctx, args: list[bytes]) -> tuple[CommandSpec, list[bytes]]:
    # COMMAND GETKEYS's checks and keys: the command's spec and the key arguments.
    spec = ctx.engine.table.get(args[0].lower())
    if spec is None:
        raise CommandError(msgs.GETKEYS_INVALID_COMMAND)
    if spec.subcommands and len(args) >= 2:
        spec = spec.subcommands.get(args[1].lower(), spec)
    if (spec.first_key <= 0 and "movablekeys" not in spec.flags) or spec.name in NOT_KEYS:
        raise CommandError(msgs.GETKEYS_NO_KEYS)
    n = len(args)
    if (spec.arity > 0 and spec.arity != n) or n < -spec.arity:
        raise CommandError(msgs.GETKEYS_WRONG_ARITY)
    movable = proc_keys(spec.name, args)
    if movable is None and spec.first_key <= 0:
        # No legacy key positions (XREAD, XREADGROUP): Redis's key specs find the keys.
        specs = KEY_SPECS.get(spec.name, ())
        pairs = keys_by_specs(specs, args) if specs_complete(specs) else None
        movable = [key for key, _ in pairs] if pairs else []
    if movable is not None:
        if not movable and "no-mandatory-keys" not in spec.flags:
            raise CommandError(msgs.GETKEYS_INVALID_ARGUMENTS)
        return spec, movable
    return spec, [args[p] for p in spec.key_positions(n)]


@command("debug", arity=-2, flags=("admin", "noscript", "loading", "stale"))
def debug(ctx: Ctx, args: list[bytes]) -> Reply:
    """DEBUG LOG message -> OK (writes the message to the engine's log, as test suites and
    tools use it); any other DEBUG subcommand is refused, as Redis 7.0 does by default."""
    if args[0].lower() == b"log" and len(args) == 2:
        _log.warning("DEBUG LOG: %s", args[1].decode("utf-8", "replace"))
        return OK
    raise CommandError(msgs.DEBUG_NOT_ALLOWED)


# --- persistence ------------------------------------------------------------------------------


@command("bgrewriteaof", arity=1, flags=("admin", "noscript"))
def bgrewriteaof(ctx: Ctx, args: list[bytes]) -> Reply:
    """BGREWRITEAOF -> starts compacting the append-only file from the current state, in the
    background (INFO ``aof_rewrite_in_progress`` is 1 until it is done)."""
    aof = ctx.engine.persistence
    if aof is None:
        raise CommandError(msgs.BGREWRITEAOF_IN_MEMORY)
    try:
        started = aof.start_rewrite()
    except OSError as exc:
        raise CommandError(msgs.bgrewriteaof_failed(exc)) from None
    if not started:
        raise CommandError(msgs.BGREWRITEAOF_IN_PROGRESS)
    return Status("Background append only file rewriting started")
