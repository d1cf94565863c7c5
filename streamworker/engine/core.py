"""The engine: executes commands for clients under one lock, with blocking waiter queues.

Redis is single-threaded: commands never interleave. :class:`Engine` reproduces that with one
``threading.RLock``; every public method takes it. Blocking commands return a
:class:`~.context.Blocked` that the transport waits on (see :meth:`Engine.wait`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from streamworker.engine import acl as acl_model
from streamworker.engine import msgs
from streamworker.engine.acl import Commands, User, Users, command_categories
from streamworker.engine.config import EngineConfig
from streamworker.engine.context import RESUME, Blocked, ClientState, Ctx, OnReady
from streamworker.engine.diagnostics import Diagnostics
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import Keyspace, discard_transaction, unwatch_all
from streamworker.engine.keyspecs import acl_keys, command_keys, movable_keys
from streamworker.engine.memory import LRU_CLOCK_MAX as _LRU_CLOCK_MAX
from streamworker.engine.memory import MemoryManager
from streamworker.engine.monitor import monitor_line
from streamworker.engine.notify import NOTIFY_EXPIRED, NOTIFY_NEW
from streamworker.engine.pubsub import PubSub
from streamworker.engine.replication import Replication
from streamworker.engine.replies import NULL_BULK, QUEUED
from streamworker.engine.shebang import parse_shebang, sha1hex
from streamworker.engine.table import HISTOGRAM_BUCKETS, CommandSpec
from streamworker.engine.tracking import Tracker
from streamworker.engine.versions import DEFAULT_REDIS_VERSION, RedisVersion, parse_redis_version

if TYPE_CHECKING:
    from streamworker.engine.keyspace import Database
    from streamworker.engine.replies import Reply

__all__ = [
    "AppendLog",
    "Blocked",
    "ClientState",
    "CommandLayer",
    "Ctx",
    "Engine",
    "OnReady",
    "Propagator",
    "plug_commands",
]

_log = logging.getLogger("streamworker.engine")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_CRON_INTERVAL_S = 0.1  # Redis's default hz 10
_LRU_REFRESH_NS = 100_000_000  # the cached LRU clock's age at most (Redis: 1000 / hz ms)

_ns = time.perf_counter_ns
_LAST_BUCKET = HISTOGRAM_BUCKETS - 1
_NEVER = 1 << 62  # a duration no call reaches: monitoring off
# Commands never refused for memory inside MULTI (they end it or leave it).
_OOM_ALWAYS_IN_MULTI = frozenset({"exec", "discard", "quit", "reset"})
_FCALL_COMMANDS = frozenset({"fcall", "fcall_ro"})
_EVAL_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro"})


# Commands never logged as received: what they run is logged command by command (a script's
# effects, EXEC's queued commands), as Redis 7.0 propagates them.
_EFFECTS_ONLY = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "exec"})


# What a RESP2 client in subscribed mode may still run.
_SUBSCRIBED_OK = frozenset(
    {
        "subscribe",
        "ssubscribe",
        "unsubscribe",
        "sunsubscribe",
        "psubscribe",
        "punsubscribe",
        "ping",
        "quit",
        "reset",
    }
)


def uses_wall_clock(engine: Engine) -> bool:
    """Whether ``engine`` runs on the real clock (no clock was injected)."""
    return engine.clock is _wall_clock_ms


class Propagator(Protocol):
    """What the engine feeds the writes it executes to (the append-only file, :mod:`.aof`).

    The engine appends ``(db index, argv)`` to :attr:`ops` for every write-flagged command
    that did not fail (or what the command chose with ``ctx.propagate`` /
    ``ctx.also_propagate``), calls :meth:`begin_call` before and :meth:`end_call` after each
    top-level command (and after each blocked client it serves), and :meth:`after_execute`
    at the end of every :meth:`Engine.execute` / :meth:`Engine.execute_many`, still under the
    lock, before waking the clients served meanwhile. Everything runs under the engine lock.
    """

    depth: int
    """Nesting of command calls in progress (EXEC's and scripts' commands are nested)."""
    ops: list[tuple[int, Sequence[bytes]]]
    """The writes of the call in progress, in execution order."""
    active: bool
    """False while the file is being loaded: commands need not build what they propagate."""
    write_error: str | None
    """Why the last write to the file failed (write commands are then refused), or None."""

    def begin_call(self) -> None:
        """A top-level command starts (fix the clock for it)."""

    def end_call(self) -> None:
        """A top-level command (or a served blocked client) ends: log :attr:`ops`."""

    def after_execute(self) -> None:
        """An ``execute``/``execute_many`` ends (flush, and fsync if the policy says so)."""

    def tick(self) -> None:
        """Housekeeping is about to run outside a command (advance the clock)."""


class AppendLog(Protocol):
    """What the engine and its commands use of the append-only file attached to it
    (:class:`.aof.AppendOnlyFile`, ``engine.persistence``): the file sits above the engine,
    which knows it only by this shape."""

    def start_rewrite(self) -> bool:
        """Start compacting the file in the background (BGREWRITEAOF); False if one runs."""

    def info_lines(self) -> list[str]:
        """The ``aof_*`` fields of INFO persistence."""

    def close(self) -> None:
        """Flush, fsync and close the file."""


class CommandLayer(Protocol):
    """What the engine takes from the command modules above it (:mod:`.commands.wiring`).

    The command modules import this module, not the other way round: the package
    (``streamworker/engine/__init__.py``) hands them over once with :func:`plug_commands`,
    before any engine can be built.
    """

    def build_table(self, version: RedisVersion) -> dict[bytes, CommandSpec]:
        """A fresh dispatch table for an engine answering as ``version`` (its own counters)."""

    def log_denial(self, ctx: Ctx, reason: int, context: str, obj: bytes, shown: Ctx) -> None:
        """Add an ACL LOG entry for a refused call (``shown``: the connection it names)."""

    def cron(self, engine: Engine) -> None:
        """Periodic work of the command modules (the ``save`` schedule), engine lock held."""


_plugged: list[CommandLayer] = []


def plug_commands(layer: CommandLayer) -> None:
    """Give every engine built from now on ``layer``'s commands (replaces an earlier one)."""
    _plugged[:] = [layer]


class Engine:
    """An in-memory Redis 7.0-compatible engine.

    ``clock`` returns Unix milliseconds (default: the wall clock); tests inject a fake one.
    ``redis_version`` is the version it answers as: ``"7.0.15"`` (the default) or an 8.x
    version, which adds the stream commands and options of that version (see
    :mod:`.versions`); ValueError for a version it does not speak. Every method is
    thread-safe. Command replies are :mod:`.replies` values or a :class:`~.context.Blocked`.
    """

    def __init__(
        self,
        clock: Callable[[], int] | None = None,
        *,
        databases: int = 16,
        redis_version: str = DEFAULT_REDIS_VERSION,
    ) -> None:
        self.version = parse_redis_version(redis_version)
        # What INFO, HELLO and scripts report (redis_version, version, REDIS_VERSION).
        self.redis_version = self.version.text
        self.lock = threading.RLock()
        self.clock: Callable[[], int] = clock if clock is not None else _wall_clock_ms
        self.keyspace = Keyspace(self.clock, self.signal_key_ready, databases)
        for db in self.keyspace.dbs:
            db.flush_event = self.signal_db_ready
        self.config = EngineConfig(databases=databases)
        self.pubsub = PubSub(self.config)
        for db in self.keyspace.dbs:
            db.expired_event = self._key_expired
            db.new_event = self._key_new
        if not _plugged:
            raise RuntimeError(
                "no command modules plugged in: import streamworker.engine (its __init__ "
                "plugs them), not streamworker.engine.core alone"
            )
        self._commands = _plugged[0]
        self.table: dict[bytes, CommandSpec] = self._commands.build_table(self.version)
        self.diagnostics = Diagnostics()
        # Memory accounting and eviction; ``memory_upkeep`` mirrors memory.upkeep for the hot
        # path (per-key size estimates and LRU/LFU fields kept up after every command, while
        # maxmemory is set or an LRU/LFU policy chosen). Not CLIENT TRACKING (``tracker``).
        self.memory_upkeep = False
        self.memory = MemoryManager(self)
        self.clients: dict[int, ClientState] = {}
        self._next_client_id = 1
        self._waiters: dict[tuple[int, bytes], dict[Blocked, None]] = {}
        self._ready: dict[tuple[int, bytes], None] = {}
        self._next_cron = time.monotonic() + _CRON_INTERVAL_S
        self.started_monotonic = time.monotonic()
        self.started_ms = _wall_clock_ms()
        self.run_id = os.urandom(20).hex()
        # Redis's server.dirty: changes to the dataset since the last successful SAVE/BGSAVE
        # (INFO rdb_changes_since_last_save; the ``save`` schedule reads it). Write commands
        # add what they changed (Ctx.changed), one by default.
        self.dirty = 0
        # The LRU clock (Unix seconds mod 2**24) stamped on the keys each command looks up
        # (OBJECT IDLETIME), cached like Redis's server.lruclock: re-read from the engine
        # clock once the perf counter passes _lru_next_ns (every 100 ms on the wall clock,
        # every command on an injected clock).
        self.lru_now = 0
        self._lru_next_ns = 0
        # Redis's writeCommandsDeniedByDiskError for RDB: save points are set, the last save
        # failed and stop-writes-on-bgsave-error is on (see rdb_status_changed).
        self.rdb_refuses_writes = False
        self.stats_commands = 0
        self.stats_connections = 0
        self.stats_errors = 0
        self.stats_rejected = 0
        # stats_errors when the last call was accounted: a call whose run moved it failed.
        self._errors_seen = 0
        # Calls at least this long (ns) go to monitor() (slow log, latency monitor).
        self.monitor_ns = _NEVER
        # Connections refused at maxclients (INFO rejected_connections; no error reply counted).
        self.stats_rejected_connections = 0
        # INFO errorstats: error replies by prefix (Redis's server.errors rax).
        self.error_counts: dict[str, int] = {}
        self.last_error_text = ""
        self.tcp_port = 0
        # The append-only file (or any Propagator) fed with every write; None = in memory only.
        self.propagator: Propagator | None = None
        # Blocked clients served during an execute() while a propagator is attached: they are
        # woken only after the propagator has flushed the writes that served them.
        self._wakeups: list[tuple[Blocked, Reply]] = []
        # The append-only file (for INFO and BGREWRITEAOF); None in memory.
        self.persistence: AppendLog | None = None
        # SAVE/BGSAVE bookkeeping (an rdb.files.SnapshotState), created by the first use.
        self.rdb_state: Any = None
        # Lua scripting (a scripting.ScriptRuntime), created by the first EVAL/SCRIPT command.
        self.scripting: Any = None
        # Redis Functions (a functions.FunctionRuntime), created by the first FUNCTION/FCALL.
        self.functions: Any = None
        # math.random's generator (a lualibs.Rand48), shared by EVAL and functions.
        self.lua_rand: Any = None
        # Called from a running script's count hook (every 100,000 Lua instructions, engine
        # lock held) with the seconds the script has run: the server answers other clients
        # BUSY from there once lua-time-limit has passed. None: nothing to do.
        self.script_tick: Callable[[float], None] | None = None
        # MONITOR: the connections that receive every command (commands/server_admin.py).
        self.monitors: list[ClientState] = []
        # CLIENT PAUSE: until when (monotonic seconds; 0 = not paused), whether every command
        # or only writes wait, and the commands waiting meanwhile (oldest first).
        self.pause_until = 0.0
        self.pause_all = False
        self._postponed: list[Blocked] = []
        # SHUTDOWN: set by the command for the server, which stops after the reply round.
        # (nosave/save, now, force) words as given; None while no shutdown is asked for.
        self.shutdown_request: tuple[str, ...] | None = None
        # CLIENT TRACKING: the connections with tracking on, by id, and the tracking table
        # (created with the first CLIENT TRACKING ON).
        self.tracking_clients: dict[int, ClientState] = {}
        self.tracker: Tracker | None = None
        # True while CLIENT PAUSE, MONITOR or CLIENT TRACKING is in use: the one flag the
        # command path checks for all three (see admin_changed).
        self.admin_hooks = False
        # SYNC/PSYNC clients and the stream they get (engine/replication.py).
        self.replication = Replication(self)
        # ACL users and log; requirepass as last applied to the default user.
        self.acl = Users(Commands(self.table, command_categories))
        self._acl_keys = acl_keys
        self._requirepass = ""
        self._acl_config_version = -1
        # True while commands are checked against the replication state (admin_changed).
        self.replica_checks = False
        self.config_changed()

    def set_clock(self, clock: Callable[[], int]) -> None:
        """Replace the engine clock (commands and key expiry both use it)."""
        self.clock = clock
        self._lru_next_ns = 0
        self.keyspace.clock = clock
        for db in self.keyspace.dbs:
            db._clock = clock

    # -- clients -----------------------------------------------------------------------------

    def connect(self) -> ClientState:
        """A new client (connection) with a unique id, RESP2, db 0."""
        with self.lock:
            client = ClientState(self._next_client_id, _wall_clock_ms())
            self._next_client_id += 1
            client.ctx = Ctx(self, client)
            self.acl_sync()
            client.user = self.acl.default
            self.clients[client.id] = client
            self.stats_connections += 1
            return client

    def disconnect(self, client: ClientState) -> None:
        """Forget ``client``: drop its waiters, WATCHes and queued transaction."""
        with self.lock:
            client.closed = True
            self.replication.listening_ports.pop(client.id, None)
            if client.replica:
                client.replica = False
                self.replication.detach(client)
                self.admin_changed()
            if client.monitor or client.tracking is not None:
                client.monitor = False
                self.monitors = [c for c in self.monitors if c is not client]
                self.tracking_clients.pop(client.id, None)
                self.admin_changed()
            if client.blocked is not None and not client.blocked.resolved:
                if client.blocked.postponed is not None:
                    self._postponed = [b for b in self._postponed if b is not client.blocked]
                self._unblock(client.blocked)
            client.blocked = None
            unwatch_all(client)
            if client.pubsub:
                self.pubsub.drop_client(client)
            client.push_out = None
            client.in_multi = False
            client.multi_queue = []
            self.clients.pop(client.id, None)

    # -- execution ---------------------------------------------------------------------------

    def execute(self, client: ClientState, argv: Sequence[bytes]) -> Reply | Blocked:
        """Run one command (``argv[0]`` is its name). Returns its reply or a Blocked."""
        with self.lock:
            reply = self._dispatch(client, argv)
            if self._ready:
                self._serve_ready()
            if time.monotonic() >= self._next_cron:
                self._cron()
            if self.propagator is not None:
                self._after_execute()
            return reply

    def execute_many(
        self, client: ClientState, commands: Iterable[Sequence[bytes]]
    ) -> list[Reply | Blocked]:
        """Run a pipeline under one lock acquisition.

        Stops after a command that blocks: the last element is then a :class:`Blocked` and
        the commands after it were **not** run (resubmit them once it resolves), as Redis
        stops reading a client's pipeline while it is blocked.
        """
        out: list[Reply | Blocked] = []
        with self.lock:
            dispatch = self._dispatch
            for argv in commands:
                reply = dispatch(client, argv)
                out.append(reply)
                if self._ready:
                    self._serve_ready()
                if type(reply) is Blocked:
                    break
            if time.monotonic() >= self._next_cron:
                self._cron()
            if self.propagator is not None:
                self._after_execute()
        return out

    def execute_each(
        self,
        client: ClientState,
        commands: Sequence[Sequence[bytes]],
        sink: Callable[[Reply | Blocked], bool],
    ) -> int:
        """Run a pipeline under one lock acquisition, handing each reply to ``sink`` as soon
        as its command has run (so no reply waits in memory for the others, as in Redis,
        which writes each reply to the client's output buffer before it runs the next).

        ``sink`` returns False to stop (the client went over its output limit, or quit).
        Stops after a command that blocks too (the sink gets the :class:`Blocked`). Returns
        how many commands ran; the caller keeps the rest.
        """
        done = 0
        with self.lock:
            dispatch = self._dispatch
            try:
                for argv in commands:
                    reply = dispatch(client, argv)
                    done += 1
                    if self._ready:
                        self._serve_ready()
                    if not sink(reply) or type(reply) is Blocked:
                        break
            finally:
                if time.monotonic() >= self._next_cron:
                    self._cron()
                if self.propagator is not None:
                    self._after_execute()
        return done

    def _key_expired(self, db_index: int, key: bytes) -> None:
        # A key reclaimed by expiry (lazily or by the cron): Redis's "expired" event, and a
        # DEL for the replicas.
        feed = self.replication.feed
        if feed is not None and self.propagator is feed:
            feed.expired(db_index, key)
        if self.config.notify_flags & NOTIFY_EXPIRED:
            self.pubsub.notify(NOTIFY_EXPIRED, b"expired", key, db_index)

    def _key_new(self, db_index: int, key: bytes) -> None:
        # A key created (Redis's dbAdd): the "new" event, asked for with the 'n' class.
        if self.config.notify_flags & NOTIFY_NEW:
            self.pubsub.notify(NOTIFY_NEW, b"new", key, db_index)

    def _after_execute(self) -> None:
        assert self.propagator is not None
        self.propagator.after_execute()
        if self._wakeups:
            wakeups, self._wakeups = self._wakeups, []
            for blocked, reply in wakeups:
                blocked.resolve(reply)

    def allows_busy(self, argv: Sequence[bytes]) -> bool:
        """True when ``argv`` names a command (or subcommand) flagged ``allow-busy`` in Redis's
        command table: one Redis 7.0 runs while a script or function is busy (HELLO, AUTH,
        WATCH, SCRIPT KILL, SHUTDOWN...)."""
        spec = self.table.get(argv[0].lower()) if argv else None
        if spec is not None and spec.subcommands is not None and len(argv) >= 2:
            spec = spec.subcommands.get(argv[1].lower())
        return spec is not None and "allow-busy" in spec.flags

    def execute_while_busy(self, client: ClientState, argv: Sequence[bytes]) -> Reply | Blocked:
        """Run an ``allow-busy`` command (:meth:`allows_busy`) of another client while a script
        runs: the dispatch alone, with no cron, no wake-ups and no propagation round, which
        belong to the script's command and run when it ends. The caller holds the lock (it is
        the script's count hook). No allow-busy command blocks; only a CLIENT PAUSE begun
        before the script can make one wait (a Blocked)."""
        with self.lock:
            return self._dispatch(client, argv)

    def _dispatch(self, client: ClientState, argv: Sequence[bytes]) -> Reply | Blocked:
        # The hot path (a few hundred ns): no per-call dict building, one args slice.
        try:
            spec = self.table[argv[0].lower()]
        except (KeyError, IndexError):
            return self._reject(client, _unknown_command_text(argv))
        if spec.subcommands is not None and len(argv) >= 2:
            sub = spec.subcommands.get(argv[1].lower())
            if sub is None:
                return self._reject(
                    client,
                    msgs.unknown_subcommand(
                        _printable(argv[1], 128), argv[0].decode("utf-8", "replace").upper()
                    ),
                )
            spec = sub
        arity = spec.arity
        n = len(argv)
        if n != arity and (arity > 0 or n < -arity):
            if spec.name == "exec":
                spec.rejected_calls += 1
                return self._exec_abort(client, msgs.wrong_arity("exec"))
            return self._reject(client, msgs.wrong_arity(spec.name), spec)
        if not client.authenticated and "no-auth" not in spec.flags and self._auth_required():
            return self._reject(client, msgs.NOAUTH, spec)
        if not client.user.unrestricted and not (client.in_multi and spec.no_multi):
            # ACL users: a user allowed everything never gets here (one attribute test).
            denied = self._acl_deny(client, spec, argv)
            if denied is not None:
                return denied
        if self.memory_upkeep and self.memory.maxmemory:
            refused = self._check_oom(client, spec, argv)
            if refused is not None:
                return refused
        if client.pubsub and client.resp == 2 and spec.name not in _SUBSCRIBED_OK:
            # RESP2 has no way to tell a reply from a message: Redis refuses the rest.
            return self._reject(client, msgs.subscribed_context(spec.name), spec)
        admin = self.admin_hooks
        if admin:
            # CLIENT PAUSE, MONITOR or CLIENT TRACKING in use (one check on the hot path).
            if (client.monitor or client.replica) and spec.flags & _KEYSPACE_FLAGS:
                return self._reject(client, msgs.REPLICA_KEYSPACE, spec)
            if self.rdb_refuses_writes and (spec.write or spec.name == "ping"):
                return self._reject(client, msgs.MISCONF_RDB, spec)
            repl = self.replication
            if self.replica_checks and client is not repl.master_client:
                refusal = self._replica_refusal(client, spec, argv)
                if refusal is not None:
                    if spec.name == "exec" and client.in_multi:
                        spec.rejected_calls += 1
                        return self._exec_abort(client, refusal)
                    return self._reject(client, refusal, spec)
            if (
                self.pause_until
                and client.push is not None
                and not client.monitor
                and self._paused(client, spec, argv)
            ):
                return self._postpone(client, argv)
        ctx = client.ctx
        if client.in_multi:
            if spec.no_multi:
                return self._reject(client, msgs.NOT_ALLOWED_IN_MULTI, spec)
            if spec.queueable:
                client.multi_queue.append((spec, argv))
                client.last_cmd = spec.name  # CLIENT LIST's cmd= is the queued command
                return QUEUED
        elif ctx.in_script and spec.noscript:
            return CommandError(msgs.SCRIPT_COMMAND_NOT_ALLOWED)
        self.stats_commands += 1
        client.last_cmd = spec.name
        func = spec.func
        if func is None:  # a container called without a subcommand is caught by arity
            return self._reject(client, msgs.wrong_arity(spec.name), spec)
        if self.propagator is not None and spec.write and self.propagator.write_error:
            # MISCONF: refused before running, like Redis's processCommand.
            return self._reject(client, msgs.misconf_aof(self.propagator.write_error), spec)
        args = argv[spec.skip :]
        ctx.argv = argv
        if admin:
            self._before_call(client, spec, argv)
        start = _ns()
        if self.propagator is not None:
            reply = self._call_propagating(
                spec, ctx, argv, args if type(args) is list else list(args)
            )
        else:
            write = spec.write
            if write:
                ctx.counted = False
            try:
                reply = func(ctx, args if type(args) is list else list(args))
            except CommandError as exc:
                self.count_error(exc.text)
                reply = exc
            except Exception as exc:
                reply = self._internal_error(spec, exc)
            if write and not ctx.counted:
                self._count_write(spec, reply)
        if self.memory_upkeep:
            self.memory.after_call(spec, ctx.db, argv)
        else:
            at = spec.touch_at
            if at:
                # The access time of the command's key (the hot path: one dict store; a
                # key that is not there is not stamped, or reads of missing keys would grow
                # the table).
                if start >= self._lru_next_ns:
                    self._lru_tick(start)
                if at < n:
                    key = argv[at]
                    db = ctx.db
                    if key in db.data:
                        db.access[key] = self.lru_now
            elif spec.touch_keys:
                self.stamp_keys(spec, ctx.db, argv)
        if type(reply) is Blocked:
            # Redis counts a blocked command when it is served or times out.
            reply.spec = spec
            reply.argv = argv
            reply.run_ns = _ns() - start
            self._register(reply)
            if admin:
                self._after_call(client, spec, argv)
            return reply
        elapsed = _ns() - start
        spec.duration_ns += elapsed
        spec.histogram[(elapsed >> 10).bit_length()] += 1
        errors = self.stats_errors
        if errors != self._errors_seen:
            # Redis 7.0: a call failed if it added an error reply (its nested calls, run
            # before, already took theirs).
            self._errors_seen = errors
            spec.failed_calls += 1
        if elapsed >= self.monitor_ns:
            self.monitor(spec, ctx, argv, elapsed)
        if admin:
            self._after_call(client, spec, argv)
        return reply

    def _call_propagating(
        self, spec: CommandSpec, ctx: Ctx, argv: Sequence[bytes], args: list[bytes]
    ) -> Reply | Blocked:
        # The persistent path: the command's writes go to the propagator. A write-flagged
        # command that succeeds is logged as received unless it chose its own propagation
        # (ctx.propagate / ctx.no_propagate), e.g. XADD * logs the ID it generated.
        prop = self.propagator
        assert prop is not None
        assert spec.func is not None
        if prop.write_error is not None and "write" in spec.flags:
            error = CommandError(msgs.misconf_aof(prop.write_error))
            self.count_error(error.text, rejected=True)
            return error
        top = prop.depth == 0
        if top:
            prop.begin_call()
        prop.depth += 1
        db_index = ctx.db.index
        outer = ctx.prop_custom
        ctx.prop_custom = False
        ctx.counted = False
        try:
            reply: Reply | Blocked = spec.func(ctx, args)
        except CommandError as exc:
            self.count_error(exc.text)
            reply = exc
        except Exception as exc:
            reply = self._internal_error(spec, exc)
        finally:
            prop.depth -= 1
        if spec.write and not ctx.counted:
            self._count_write(spec, reply)
        rtype = type(reply)
        if (
            not ctx.prop_custom
            and rtype is not CommandError
            and rtype is not Blocked
            and "write" in spec.flags
            and spec.name not in _EFFECTS_ONLY
        ):
            prop.ops.append((db_index, argv))
        ctx.prop_custom = outer
        if top:
            wrote = bool(prop.ops)
            prop.end_call()
            feed = self.replication.feed
            if wrote and feed is not None and prop is feed:
                # Where the replicas' stream will be once this call's records are sent.
                ctx.client.woff = self.replication.offset + len(feed.buf)
        return reply

    def _lru_tick(self, now_ns: int) -> None:
        self.lru_now = (self.clock() // 1000) & _LRU_CLOCK_MAX
        self._lru_next_ns = now_ns + _LRU_REFRESH_NS if self.clock is _wall_clock_ms else 0

    def stamp_key(self, db: Database, key: bytes) -> None:
        """Record an access to ``key`` of ``db`` now (a command that stores a key in another
        database than the one its keys are named in: MOVE, COPY ... DB)."""
        if self.memory_upkeep:
            self.memory.touch(db, key)
        else:
            self._lru_tick(_ns())
            db.access[key] = self.lru_now

    def stamp_keys(self, spec: CommandSpec, db: Database, argv: Sequence[bytes]) -> None:
        """Record now as the last access of the keys a call of ``spec`` named that exist
        (memory upkeep off: Redis's LRU field, for OBJECT IDLETIME). Nothing for LOOKUP_NOTOUCH
        commands (TYPE, TTL, EXISTS, OBJECT...). The nested calls' path (EXEC's, scripts'):
        the top-level dispatch inlines the one-key case."""
        at = spec.touch_at
        if not at and not spec.touch_keys:
            return
        now_ns = _ns()
        if now_ns >= self._lru_next_ns:
            self._lru_tick(now_ns)
        now = self.lru_now
        data = db.data
        access = db.access
        if at:
            if at < len(argv) and argv[at] in data:
                access[argv[at]] = now
            return
        for key in command_keys(spec, argv) if not spec.movable else movable_keys(spec, argv):
            if key in data:
                access[key] = now

    def _count_write(self, spec: CommandSpec, reply: Reply | Blocked) -> None:
        # A write command that did not count its changes itself: its integer reply for the
        # commands whose reply is that count, else one change if it succeeded (a command that
        # blocked counts when it is served).
        rtype = type(reply)
        if rtype is CommandError or rtype is Blocked:
            return
        if spec.dirty_reply and rtype is int:
            self.dirty += reply  # type: ignore[operator]
        else:
            self.dirty += 1

    def run_queued(self, ctx: Ctx, spec: CommandSpec, argv: Sequence[bytes]) -> Reply:
        """Run one command queued by MULTI (EXEC's loop). Blocking commands don't block.
        The ACL rules are checked again (they may have changed since the command was
        queued)."""
        user = ctx.client.user
        if not user.unrestricted:
            result, idx = self.acl_check(user, spec, argv)
            if result:
                self._acl_log(ctx, spec, argv, result, idx, "multi")
                error = CommandError(msgs.exec_acl_changed(msgs.EXEC_ACL_DENIED[result]))
                self.count_error(error.text)
                return error
        self.stats_commands += 1
        ctx.client.last_cmd = spec.name
        func = spec.func
        assert func is not None
        ctx.argv = argv
        start = _ns()
        if self.propagator is not None:
            reply = self._call_propagating(spec, ctx, argv, list(argv[spec.skip :]))
        else:
            ctx.counted = False
            try:
                reply = func(ctx, list(argv[spec.skip :]))
            except CommandError as exc:
                self.count_error(exc.text)
                reply = exc
            except Exception as exc:
                reply = self._internal_error(spec, exc)
            if spec.write and not ctx.counted:
                self._count_write(spec, reply)
        self.account(spec, ctx, argv, _ns() - start)
        if self.memory_upkeep:
            self.memory.after_call(spec, ctx.db, argv)
        else:
            self.stamp_keys(spec, ctx.db, argv)
        if self.monitors:
            self.feed_monitors(ctx.client, spec, argv, ctx.client.db_index)
        if self.tracker is not None and ctx.client.tracking is not None:
            self.tracker.after_command(ctx.client, spec, argv)
        if type(reply) is Blocked:  # ctx.block returns the timeout reply in MULTI
            return reply.on_timeout_reply
        return reply  # type: ignore[return-value]

    def account(self, spec: CommandSpec, ctx: Ctx, argv: Sequence[bytes], elapsed: int) -> None:
        """Count one finished call of ``spec`` that took ``elapsed`` ns (INFO commandstats,
        LATENCY HISTOGRAM, the slow log and the latency monitor). The inlined copy of this in
        :meth:`_dispatch` is the hot path; nested calls (EXEC's, scripts') come here."""
        spec.duration_ns += elapsed
        spec.histogram[min((elapsed >> 10).bit_length(), _LAST_BUCKET)] += 1
        errors = self.stats_errors
        if errors != self._errors_seen:
            self._errors_seen = errors
            spec.failed_calls += 1
        if elapsed >= self.monitor_ns:
            self.monitor(spec, ctx, argv, elapsed)

    def call_from_script(
        self, ctx: Ctx, argv: list[bytes], read_only: bool = False, propagate: bool = True
    ) -> Reply:
        """Run one command for a script's ``redis.call`` / ``redis.pcall``: the one entry point
        of every command a Lua script runs (``ctx`` is the script client's, ``in_script`` set;
        the engine lock is held by the EVAL that runs the script).

        What Redis refuses from scripts is refused with its texts, as CommandError replies:
        unknown commands and subcommands, wrong arity, ``noscript`` commands, and writes when
        ``read_only`` (EVAL_RO, or a ``#!lua flags=no-writes`` script). The command's own
        errors come back the same way. Blocking commands do not block (``ctx.block`` returns
        the timeout reply in scripts).
        """
        spec = self.table.get(argv[0].lower())
        if spec is not None and spec.subcommands is not None and len(argv) >= 2:
            spec = spec.subcommands.get(argv[1].lower())
        if spec is None:
            return CommandError(msgs.SCRIPT_UNKNOWN_COMMAND)
        arity = spec.arity
        n = len(argv)
        if n != arity and (arity > 0 or n < -arity):
            return self._script_reject(spec, msgs.SCRIPT_WRONG_ARITY)
        if spec.noscript or spec.func is None:
            return self._script_reject(spec, msgs.SCRIPT_COMMAND_NOT_ALLOWED)
        user = ctx.client.user
        if not user.unrestricted:
            result, idx = self.acl_check(user, spec, argv)
            if result:
                self._acl_log(ctx, spec, argv, result, idx, "lua")
                return self._script_reject(spec, "ERR " + msgs.SCRIPT_ACL_DENIED[result])
        repl = self.replication
        if self.replica_checks and not repl.applying:
            # Redis's scriptVerifyAllowStale, then the replication part of
            # scriptVerifyWriteCommandAllow (a script that already wrote goes on).
            if repl.stale and "stale" not in spec.flags:
                return self._script_reject(spec, msgs.SCRIPT_ON_STALE_REPLICA)
            if (
                spec.write
                and not read_only
                and (repl.read_only or repl.too_few_replicas)
                and (runtime := self._running_runtime()) is not None
                and not runtime.written
            ):
                if repl.read_only:
                    return self._script_reject(spec, msgs.READONLY_REPLICA)
                return self._script_reject(spec, msgs.NOREPLICAS)
        if read_only and ("write" in spec.flags or "may-replicate" in spec.flags):
            # Redis counts may-replicate commands (PFCOUNT) as writes in read-only scripts.
            return self._script_reject(spec, msgs.SCRIPT_WRITE_IN_READ_ONLY)
        if self.rdb_refuses_writes and spec.write:
            return self._script_reject(spec, msgs.MISCONF_RDB)
        if (
            spec.denyoom
            and self.memory.pre_command_oom
            # The state is only refreshed while maxmemory is set (as Redis's): a stale one
            # after CONFIG SET maxmemory 0 must not refuse.
            and self.memory.maxmemory
            and (runtime := self._running_runtime()) is not None
            and runtime.oom_refuses_writes()
        ):
            # Redis 7.0's scriptVerifyOOM: maxmemory is set, the script started over it, has
            # not written yet and did not declare allow-oom.
            return self._script_reject(spec, msgs.OOM)
        self.stats_commands += 1
        ctx.client.last_cmd = spec.name
        ctx.argv = argv
        start = _ns()
        # Persistence hook: with a propagator attached, each write a script runs is logged as
        # its own effect (Redis 7.0 replicates a script's effects, not the EVAL) and the
        # propagator's end_call for the EVAL logs them together; redis.set_repl(REPL_NONE)
        # passes propagate=False.
        prop = self.propagator
        if prop is not None and propagate:
            reply = self._call_propagating(spec, ctx, argv, argv[spec.skip :])
        else:
            # Not propagated: also drop what the command chose to log itself.
            mark = len(prop.ops) if prop is not None else 0
            ctx.counted = False
            try:
                reply = spec.func(ctx, argv[spec.skip :])
            except CommandError as exc:
                self.count_error(exc.text)
                reply = exc
            except Exception as exc:
                reply = self._internal_error(spec, exc)
            if spec.write and not ctx.counted:
                # _count_write, inlined for scripts.
                rtype = type(reply)
                if rtype is not CommandError and rtype is not Blocked:
                    self.dirty += reply if spec.dirty_reply and rtype is int else 1  # type: ignore[operator]
            if prop is not None:
                del prop.ops[mark:]
                feed = self.replication.feed
                if feed is not None and prop is feed:
                    feed.forget_from(mark)
        self.account(spec, ctx, argv, _ns() - start)
        if self.memory_upkeep:
            self.memory.after_call(spec, ctx.db, argv)
        elif at := spec.touch_at:
            # Inlined stamp_keys for one key (scripts call many commands; the clock read
            # at the start of the call serves).
            if start >= self._lru_next_ns:
                self._lru_tick(start)
            if at < n:
                key = argv[at]
                db = ctx.db
                if key in db.data:
                    db.access[key] = self.lru_now
        elif spec.touch_keys:
            self.stamp_keys(spec, ctx.db, argv)
        if self.monitors:
            self.feed_monitors(ctx.client, spec, argv, ctx.client.db_index, lua=True)
        if type(reply) is Blocked:
            return reply.on_timeout_reply
        return reply  # type: ignore[return-value]

    # -- ACL -------------------------------------------------------------------------------

    def _auth_required(self) -> bool:
        self.acl_sync()
        return self.acl.auth_required()

    def acl_check(self, user: User, spec: CommandSpec, argv: Sequence[bytes]) -> tuple[int, int]:
        """Whether ``user`` may run ``argv`` (``spec`` its command or subcommand): (acl.OK or
        the acl.DENIED_* reason, argv index of the refused key or channel)."""
        return user.check(spec, argv, lambda: self._acl_keys(spec, argv))

    def acl_key_list(self, spec: CommandSpec, argv: Sequence[bytes]) -> list[Any]:
        """The keys ACL checks for ``argv``: [(argv index, key, needed permission)]."""
        keys: list[Any] = self._acl_keys(spec, argv)
        return keys

    def _acl_deny(
        self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]
    ) -> CommandError | None:
        # Redis's processCommand ACL step: NOPERM, logged, the MULTI flagged for EXECABORT.
        result, idx = self.acl_check(client.user, spec, argv)
        if not result:
            return None
        ctx = client.ctx
        ctx.argv = argv
        client.last_cmd = spec.name
        self._acl_log(ctx, spec, argv, result, idx, "multi" if client.in_multi else "toplevel")
        if result == acl_model.DENIED_CMD:
            text = msgs.noperm_command(spec.name)
        elif result == acl_model.DENIED_KEY:
            text = msgs.NOPERM_KEYS
        else:
            text = msgs.NOPERM_CHANNELS
        return self._reject(client, text, spec)

    def _acl_log(
        self,
        ctx: Ctx,
        spec: CommandSpec,
        argv: Sequence[bytes],
        result: int,
        idx: int,
        context: str,
    ) -> None:
        obj = spec.name.encode() if result == acl_model.DENIED_CMD else argv[idx]
        shown = ctx
        if ctx.in_script:
            # Redis logs the client that called the script, not the script's own.
            runtime = self._running_runtime()
            if runtime is not None and runtime.caller is not None:
                shown = runtime.caller
        self._commands.log_denial(ctx, result, context, obj, shown)

    def acl_sync(self) -> None:
        """Apply the ACL-related parameters when the configuration changed (also when it
        was set directly through ``engine.config``): requirepass is the default user's
        password (Redis's ACLUpdateDefaultUserPassword), applied when it changes."""
        cfg = self.config
        if cfg.version == self._acl_config_version:
            return
        self._acl_config_version = cfg.version
        requirepass = cfg.get("requirepass") or ""
        if requirepass != self._requirepass:
            self._requirepass = requirepass
            self.acl.set_default_password(requirepass)
            self.acl_changed()
        self.acl.all_channels_default = cfg.get("acl-pubsub-default") == "allchannels"

    def acl_changed(self) -> None:
        """Users changed (ACL SETUSER / DELUSER): refresh what the fast path reads."""
        for user in self.acl.users.values():
            user.refresh()

    def _replica_refusal(
        self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]
    ) -> str | None:
        # Redis's processCommand on a replica: a write (a script that declares writes, an
        # EXEC holding one) is READONLY on a read-only replica; a command without the stale
        # flag (EXEC holding one) is MASTERDOWN while the link is down, if stale data is not
        # served. The flags are the ones at EXEC time: a transaction queued before the
        # engine became a replica is refused whole.
        write = False
        deny_stale = False
        if spec.name == "exec" and client.in_multi:
            for queued, qargv in client.multi_queue:
                flags = self.command_flags(queued, qargv)
                write = write or "write" in flags
                deny_stale = deny_stale or "stale" not in flags
        else:
            flags = self.command_flags(spec, argv)
            write = "write" in flags
            deny_stale = "stale" not in flags
        return self.replication.refusal(write, deny_stale)

    def command_flags(self, spec: CommandSpec, argv: Sequence[bytes]) -> frozenset[str]:
        """The flags a call of ``spec`` with ``argv`` has, as Redis's getCommandFlags: a
        script that declares flags (shebang, or a function's) gets ``write`` unless
        ``no-writes``, ``stale`` only with ``allow-stale`` and ``denyoom`` unless ``allow-oom``
        or ``no-writes``; other calls have their command's flags."""
        declared = self._script_flags(spec, argv)
        if declared is None:
            return spec.flags
        out = set(spec.flags) - {"stale", "denyoom", "write", "may-replicate"}
        if "no-writes" not in declared:
            out.add("write")
            if "allow-oom" not in declared:
                out.add("denyoom")
        if "allow-stale" in declared:
            out.add("stale")
        return frozenset(out)

    def _check_oom(
        self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]
    ) -> CommandError | None:
        # Redis's processCommand with maxmemory set: evict first (any command), then refuse
        # a denyoom command if still over the limit; inside MULTI everything but
        # EXEC/DISCARD/QUIT/RESET is refused (queueing takes memory too), and EXEC is refused
        # when it holds a denyoom command.
        memory = self.memory
        out_of_memory = memory.perform_evictions()
        memory.pre_command_oom = out_of_memory
        if not out_of_memory:
            return None
        name = spec.name
        if name == "exec":
            if client.in_multi and any(
                self._denies_oom(queued, qargv) for queued, qargv in client.multi_queue
            ):
                spec.rejected_calls += 1
                return self._exec_abort(client, msgs.OOM)
            return None
        if client.in_multi and name not in _OOM_ALWAYS_IN_MULTI:
            return self._reject(client, msgs.OOM, spec)
        if self._denies_oom(spec, argv):
            return self._reject(client, msgs.OOM, spec)
        return None

    def _script_reject(self, spec: CommandSpec, text: str) -> CommandError:
        # Redis's scriptCall error path: the error reply is counted now (errorstats; not
        # again when the script passes it on) and the command counts a rejected call; as
        # for a nested call that failed, the EVAL itself is not failed by it.
        spec.rejected_calls += 1
        self.count_error(text)
        self._errors_seen = self.stats_errors
        return CommandError(text)

    def _running_runtime(self) -> Any:
        # The Lua runtime whose script or function is running (EVAL's or FCALL's), if any.
        for runtime in (self.functions, self.scripting):
            if runtime is not None and runtime.running:
                return runtime
        return None

    def _denies_oom(self, spec: CommandSpec, argv: Sequence[bytes]) -> bool:
        # EVAL/EVALSHA take their flags from the script's shebang (Redis's
        # evalGetCommandFlags): a declared script is denyoom unless allow-oom or no-writes;
        # one without a shebang is not (its first write is checked when it runs).
        if (spec.name in _EVAL_COMMANDS or spec.name in _FCALL_COMMANDS) and len(argv) > 1:
            body_flags = self._script_flags(spec, argv)
            return body_flags is not None and not (
                "allow-oom" in body_flags or "no-writes" in body_flags
            )
        return spec.denyoom

    def _script_flags(self, spec: CommandSpec, argv: Sequence[bytes]) -> frozenset[str] | None:
        # The flags an EVAL's script declares in its shebang, or an FCALL's function has
        # (Redis's evalGetCommandFlags / fcallGetCommandFlags); None: not a script command,
        # no shebang, or an unknown script or function (it fails by itself later).
        if len(argv) < 2:
            return None
        if spec.name in _EVAL_COMMANDS:
            if spec.name.startswith("evalsha"):
                script = self.scripting.get(argv[1]) if self.scripting is not None else None
                return script.flags if script is not None else None
            cached = self.scripting.get(sha1hex(argv[1])) if self.scripting is not None else None
            if cached is not None:
                flags: frozenset[str] | None = cached.flags
                return flags
            try:
                return parse_shebang(argv[1])[1]
            except CommandError:
                return None
        if spec.name in _FCALL_COMMANDS:
            fn = self.functions.find(argv[1]) if self.functions is not None else None
            return frozenset(fn.flags) if fn is not None else None
        return None

    def _account_unblocked(self, blocked: Blocked, reply: Reply) -> None:
        # A blocked command is counted once, when it is served or times out (Redis's
        # updateStatsOnUnblock), with the time it ran, not the time it waited.
        spec = blocked.spec
        if spec is None:
            return
        blocked.spec = None
        elapsed = blocked.run_ns
        spec.duration_ns += elapsed
        spec.histogram[min((elapsed >> 10).bit_length(), _LAST_BUCKET)] += 1
        if type(reply) is CommandError:
            spec.failed_calls += 1
        self._errors_seen = self.stats_errors
        if elapsed >= self.monitor_ns:
            self.monitor(spec, blocked.ctx, blocked.argv, elapsed)
        if self.memory_upkeep:
            # Served: it popped or read its keys now (sizes and access data follow).
            self.memory.after_call(spec, blocked.ctx.db, blocked.argv)
        else:
            self.stamp_keys(spec, blocked.ctx.db, blocked.argv)

    def monitor(self, spec: CommandSpec, ctx: Ctx, argv: Sequence[bytes], elapsed: int) -> None:
        """A call that took ``elapsed`` ns, at least :attr:`monitor_ns`: into the slow log
        and the latency monitor (each applies its own threshold)."""
        client = ctx.client
        self.diagnostics.record_call(
            name=spec.name,
            fast="fast" in spec.flags,
            skip_slowlog="skip-slowlog" in spec.flags,
            argv=argv,
            elapsed_ns=elapsed,
            now_ms=_wall_clock_ms(),
            addr=client.addr,
            client_name=client.name or b"",
        )

    def rdb_status_changed(self) -> None:
        """Recompute :attr:`rdb_refuses_writes` after a save ended or CONFIG SET (engine lock
        held): writes and PING are refused with MISCONF while save points are set, the last
        save failed and ``stop-writes-on-bgsave-error`` is yes, as in Redis 7.0."""
        cfg = self.config
        state = self.rdb_state
        refuses = bool(
            state is not None
            and not state.last_status_ok
            and cfg.get("save")
            and cfg.get("stop-writes-on-bgsave-error") == "yes"
        )
        if refuses != self.rdb_refuses_writes:
            self.rdb_refuses_writes = refuses
            self.admin_changed()

    def config_changed(self) -> None:
        """Re-read the parameters the engine caches (after CONFIG SET)."""
        self.admin_changed()
        cfg = self.config
        self.acl_sync()
        self.rdb_status_changed()
        self.memory.configure()
        self.monitor_ns = self.diagnostics.configure(
            int(cfg.get("slowlog-log-slower-than") or 0),
            int(cfg.get("slowlog-max-len") or 0),
            int(cfg.get("latency-monitor-threshold") or 0),
        )

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT: zero the counters of INFO stats, errorstats, commandstats and
        latencystats (the slow log and latency events stay, as in Redis)."""
        self.stats_commands = self.stats_errors = self.stats_rejected = 0
        self.stats_rejected_connections = 0
        self.error_counts.clear()
        self._errors_seen = 0
        self.memory.evicted_keys = 0
        self.memory.peak = self.memory.used_memory()
        for spec in self.table.values():
            spec.reset_stats()
            for sub in (spec.subcommands or {}).values():
                sub.reset_stats()

    def count_error(self, text: str, rejected: bool = False) -> None:
        """Count one error reply for INFO (``total_error_replies``, ``errorstat_<PREFIX>``).

        The prefix is Redis's (afterErrorReply): the first word when a space ends it within
        the reply's first 32 bytes (the ``-`` included), else ``ERR``. ``rejected`` marks a
        command refused before it ran (unknown, wrong arity, EXECABORT, MISCONF).
        """
        if rejected:
            self.stats_rejected += 1
        else:
            self.stats_errors += 1
        space = text.find(" ", 0, 31)
        prefix = text[:space] if space >= 0 else "ERR"
        self.error_counts[prefix] = self.error_counts.get(prefix, 0) + 1
        self.last_error_text = text

    def _internal_error(self, spec: CommandSpec, exc: Exception) -> CommandError:
        # An engine bug must not take the caller (or the client that served a waiter) down with
        # it: it becomes an error reply naming the command. The exception and its traceback go
        # to the log, never to the client (its text is not a Redis reply and may leak data).
        _log.error("command %r failed with an engine bug", spec.name, exc_info=exc)
        error = CommandError(msgs.internal_error(spec.name))
        self.count_error(error.text)
        return error

    def _exec_abort(self, client: ClientState, text: str) -> CommandError:
        # A rejected EXEC discards the transaction and says why (Redis's execCommandAbort).
        discard_transaction(client)
        reason = text[4:] if text.startswith("ERR ") else text
        error = CommandError(msgs.execabort_because(reason))
        self.count_error(error.text, rejected=True)
        return error

    def _reject(
        self, client: ClientState, text: str, spec: CommandSpec | None = None
    ) -> CommandError:
        # Rejections inside MULTI abort the transaction at EXEC (Redis's flagTransaction).
        if client.in_multi:
            client.multi_error = True
        if spec is not None:
            spec.rejected_calls += 1
        self.count_error(text, rejected=True)
        return CommandError(text)

    # -- blocking ----------------------------------------------------------------------------

    def signal_key_ready(self, db_index: int, key: bytes) -> None:
        """Queue clients blocked on ``key`` for a retry after the current command."""
        k = (db_index, key)
        if k in self._waiters:
            self._ready[k] = None

    def signal_db_ready(self, db_index: int) -> None:
        """Queue every client blocked on a key of database ``db_index`` (after FLUSHDB)."""
        for k in self._waiters:
            if k[0] == db_index:
                self._ready[k] = None

    def _register(self, blocked: Blocked) -> None:
        blocked.ctx.client.blocked = blocked
        for key in blocked.keys:
            self._waiters.setdefault((blocked.db_index, key), {})[blocked] = None

    def _unblock(self, blocked: Blocked) -> None:
        for key in blocked.keys:
            k = (blocked.db_index, key)
            queue = self._waiters.get(k)
            if queue is not None:
                queue.pop(blocked, None)
                if not queue:
                    del self._waiters[k]
        if blocked.ctx.client.blocked is blocked:
            blocked.ctx.client.blocked = None

    def _serve_ready(self) -> None:
        # Served clients may signal more keys (or the same key again); loop until quiet.
        while self._ready:
            ready = list(self._ready)
            self._ready.clear()
            for k in ready:
                queue = self._waiters.get(k)
                if not queue:
                    continue
                # Only the clients queued now: one that blocks again goes to the back.
                for blocked in list(queue):
                    if blocked.resolved or blocked not in queue:
                        continue
                    prop = self.propagator
                    if prop is not None:
                        prop.depth += 1
                    blocked.ctx.counted = False
                    try:
                        reply = blocked.on_ready(blocked.ctx)
                    except CommandError as exc:
                        reply = exc
                    except Exception as exc:
                        _log.error("serving a blocked client failed", exc_info=exc)
                        reply = CommandError(msgs.internal_error("unblock"))
                    if prop is not None:
                        # A served client is a call of its own (Redis re-runs its command):
                        # its writes are logged as one unit.
                        prop.depth -= 1
                        prop.end_call()
                    if reply is None:
                        continue
                    if type(reply) is CommandError:
                        self.count_error(reply.text)
                    elif (
                        not blocked.ctx.counted and blocked.spec is not None and blocked.spec.write
                    ):
                        self.dirty += 1
                    self._unblock(blocked)
                    self._account_unblocked(blocked, reply)
                    if prop is not None:
                        self._wakeups.append((blocked, reply))
                    else:
                        blocked.resolve(reply)

    def unblock(self, blocked: Blocked, reply: Reply) -> bool:
        """Serve ``blocked`` with ``reply`` now (CLIENT UNBLOCK); False if already served."""
        with self.lock:
            if blocked.resolved:
                return False
            self._unblock(blocked)
            if type(reply) is CommandError:
                self.count_error(reply.text)
            self._account_unblocked(blocked, reply)
            return blocked.resolve(reply)

    def timeout_blocked(self, blocked: Blocked) -> Reply:
        """Resolve ``blocked`` with its timeout reply unless it was served already; returns
        its final reply. Transports call this when its deadline passes."""
        with self.lock:
            if not blocked.resolved:
                self._unblock(blocked)
                self._account_unblocked(blocked, blocked.on_timeout_reply)
                blocked.resolve(blocked.on_timeout_reply)
            assert blocked.reply is not None
            return blocked.reply

    def wait(self, blocked: Blocked, timeout_s: float | None = None) -> Reply | None:
        """Block the calling thread until ``blocked`` is served or reaches its own deadline
        (then it is resolved with its timeout reply); returns the reply.

        ``timeout_s`` caps the wait: if it passes first, the command stays blocked and None is
        returned (a socket read timeout; the caller usually disconnects the client).
        """
        with self.lock:
            if blocked.resolved:
                return blocked.reply
            event = blocked._event_obj()
        remaining = blocked.remaining_s()
        capped = timeout_s is not None and (remaining is None or timeout_s < remaining)
        if event.wait(timeout_s if capped else remaining):
            return blocked.reply
        if capped:
            return None
        return self.timeout_blocked(blocked)

    # -- CLIENT TRACKING ---------------------------------------------------------------------

    def tracker_for(self) -> Tracker:
        """The tracking table, created and hooked into the databases on first use."""
        if self.tracker is None:
            self.tracker = Tracker(self)
            self.tracker.install()
        return self.tracker

    def admin_changed(self) -> None:
        """Recompute :attr:`admin_hooks` after a pause, a MONITOR or a tracking client came or
        went; hook the databases for tracking while a client tracks, unhook them after."""
        with self.lock:
            # A replica, or a master with min-replicas-to-write: commands are checked
            # against the replication state (READONLY, MASTERDOWN, NOREPLICAS).
            self.replica_checks = (
                self.replication.master_host is not None
                or self.config.get_int("min-replicas-to-write") > 0
            )
            self.admin_hooks = bool(
                self.pause_until
                or self.monitors
                or self.tracking_clients
                or self.replication.replicas
                or self.replica_checks
                or self.rdb_refuses_writes
            )
            if self.tracking_clients:
                self.tracker_for()
            elif self.tracker is not None:
                for db in self.keyspace.dbs:
                    db.track_hook = None
                self.tracker = None

    def _before_call(self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]) -> None:
        tracker = self.tracker
        if tracker is not None:
            tracker.current = client
        if self.monitors and spec.name in _MONITOR_BEFORE:
            # Redis shows a script's EVAL before the commands the script runs.
            self.feed_monitors(client, spec, argv, client.db_index)

    def _after_call(self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]) -> None:
        if self.monitors and spec.name not in _MONITOR_BEFORE:
            self.feed_monitors(client, spec, argv, client.db_index)
        tracker = self.tracker
        if tracker is not None:
            if client.tracking is not None:
                tracker.after_command(client, spec, argv)
            if tracker.pending:
                tracker.flush_pending()
            tracker.current = None

    # -- MONITOR -----------------------------------------------------------------------------

    def feed_monitors(
        self,
        client: ClientState,
        spec: CommandSpec,
        argv: Sequence[bytes],
        db_index: int,
        lua: bool = False,
    ) -> None:
        """Send ``argv`` (run by ``client`` in ``db_index``) to every MONITOR connection, as
        Redis's replicationFeedMonitors does: admin commands are not shown, secrets are
        redacted. ``lua`` marks a command run by a script (shown as ``[db lua]``)."""
        if "admin" in spec.flags:
            return
        line = monitor_line(spec, argv, db_index, "lua" if lua else client.addr)
        for mon in self.monitors:
            if mon.push is not None:
                mon.push(line)

    # -- CLIENT PAUSE --------------------------------------------------------------------------

    def pause(self, seconds: float, pause_all: bool) -> None:
        """Pause clients (CLIENT PAUSE): the longer end time and the stricter kind win, as
        Redis keeps the most restrictive of overlapping pauses."""
        with self.lock:
            until = time.monotonic() + seconds
            if self.pause_until and time.monotonic() < self.pause_until:
                self.pause_all = self.pause_all or pause_all
                self.pause_until = max(self.pause_until, until)
            else:
                self.pause_all = pause_all
                self.pause_until = until
            self.admin_changed()

    def unpause(self) -> None:
        """End the pause (CLIENT UNPAUSE, or its time is up): the postponed commands are
        handed back to their transports to run, oldest first."""
        with self.lock:
            self.pause_until = 0.0
            self.pause_all = False
            self.admin_changed()
            postponed, self._postponed = self._postponed, []
            for blocked in postponed:
                client = blocked.ctx.client
                if client.blocked is blocked:
                    client.blocked = None
                blocked.resolve(RESUME)

    def _paused(self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]) -> bool:
        if time.monotonic() >= self.pause_until:
            self.unpause()
            return False
        if client.ctx.in_script or client.ctx.in_multi:
            return False
        if self.pause_all:
            return True
        return _pause_write_affects(client, spec, argv)

    def _postpone(self, client: ClientState, argv: Sequence[bytes]) -> Blocked:
        blocked = Blocked(client.ctx, [], 0, _never_ready, NULL_BULK)
        blocked.postponed = argv
        client.blocked = blocked
        self._postponed.append(blocked)
        return blocked

    # -- housekeeping ------------------------------------------------------------------------

    def _cron(self) -> None:
        self._next_cron = time.monotonic() + _CRON_INTERVAL_S
        if self.pause_until and time.monotonic() >= self.pause_until:
            self.unpause()
        if self.propagator is not None:
            self.propagator.tick()
        start = _ns()
        self.keyspace.active_expire()
        self.diagnostics.add_latency("expire-cycle", _wall_clock_ms(), _ns() - start)
        self._commands.cron(self)
        if not self.memory_upkeep:
            for db in self.keyspace.dbs:
                access = db.access
                if len(access) > 2 * len(db.data) + 1024:
                    # Stamps of keys that went by a path that does not drop them: pruned
                    # once they outnumber the keys (amortized O(1) per stamp).
                    data = db.data
                    db.access = {k: v for k, v in access.items() if k in data}
        if self._ready:
            self._serve_ready()

    def run_cron(self) -> None:
        """Run one housekeeping pass now (active expiry)."""
        with self.lock:
            self._cron()
            if self.propagator is not None:
                self._after_execute()


# Commands a MONITOR connection may not run (Redis's "Replica can't interact with the
# keyspace" for replicas, which monitors are).
_KEYSPACE_FLAGS = frozenset({"write", "readonly", "may-replicate"})
# Commands Redis shows on MONITOR before they run (what a script runs comes after it).
_MONITOR_BEFORE = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
# Under CLIENT PAUSE WRITE: scripts wait unless they are read-only (EVAL_RO & co, or a
# no-writes shebang).
_SCRIPT_CALLS = frozenset({"eval", "evalsha", "fcall"})


def _never_ready(ctx: Ctx) -> Reply | None:
    return None


def _pause_write_affects(client: ClientState, spec: CommandSpec, argv: Sequence[bytes]) -> bool:
    # Redis 7.0 postpones commands that write or may replicate (PUBLISH, PFCOUNT), scripts
    # that may write, and an EXEC whose queue holds one of those.
    if spec.flags & _WRITE_FLAGS:
        return True
    name = spec.name
    if name in _SCRIPT_CALLS:
        if name == "eval" and len(argv) > 1:
            body = argv[1]
            if body.startswith(b"#!"):
                first = body.split(b"\n", 1)[0]
                return b"no-writes" not in first
        return True
    if name == "exec" and client.in_multi:
        return any(
            queued.flags & _WRITE_FLAGS or queued.name in _SCRIPT_CALLS
            for queued, _ in client.multi_queue
        )
    return False


_WRITE_FLAGS = frozenset({"write", "may-replicate"})


def _printable(arg: bytes, limit: int) -> str:
    # printf("%.*s") stops at a NUL; Redis turns CR/LF into spaces in error texts. Bytes that
    # are not UTF-8 survive as surrogates (the encoder writes them back verbatim).
    raw = arg.split(b"\0", 1)[0][:limit].replace(b"\r", b" ").replace(b"\n", b" ")
    return raw.decode("utf-8", "surrogateescape")


def _unknown_command_text(argv: Sequence[bytes]) -> str:
    if not argv:
        return msgs.unknown_command("", "")
    out = bytearray()
    for arg in argv[1:]:
        if len(out) >= 128:
            break
        out += b"'" + arg.split(b"\0", 1)[0][: 128 - len(out)] + b"' "
    args_text = bytes(out).replace(b"\r", b" ").replace(b"\n", b" ")
    return msgs.unknown_command(
        _printable(argv[0], 128), args_text.decode("utf-8", "surrogateescape")
    )
