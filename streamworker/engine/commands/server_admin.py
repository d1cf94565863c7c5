"""Server administration: MONITOR, SHUTDOWN, WAIT, ROLE, the replication and cluster commands
of a standalone server, MODULE, LOLWUT and MIGRATE.

The engine is a master that replicas may attach to (SYNC, PSYNC and REPLCONF: see
:mod:`streamworker.engine.replication`), and becomes a replica with REPLICAOF host port when
it runs as a server (the link to the master is :mod:`streamworker.engine.replica_link`; an
in-process engine refuses with :data:`~streamworker.engine.msgs.ENGINE_REPLICA_NEEDS_SERVER`).
Where redis-server 7.0 standing alone answers without a peer (WAIT, FAILOVER, CLUSTER's
"support disabled", MODULE LIST, MIGRATE of missing keys) the engine answers the same; MIGRATE
of a key is refused (:data:`~streamworker.engine.msgs.ENGINE_NO_MIGRATE`).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_timeout_ms
from streamworker.engine.commands.rdb import save_now
from streamworker.engine.context import NO_REPLY, Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.monitor import monitor_line, quote_arg
from streamworker.engine.numbers import parse_int
from streamworker.engine.rdb.files import build_rdb
from streamworker.engine.replies import OK, Status, Verbatim

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

__all__ = ["REDIS_VERSION", "monitor_line", "quote_arg"]

_log = logging.getLogger("streamworker.engine")

REDIS_VERSION = "7.0.15"

# --- MONITOR ---------------------------------------------------------------------------------


@command("monitor", arity=1, flags=("admin", "noscript", "loading", "stale"))
def monitor(ctx: Ctx, args: list[bytes]) -> Reply:
    """MONITOR -> OK; from then on the connection receives a line for every command the server
    runs (see :func:`monitor_line`) and may not run commands that read or write keys.

    In-process connections have nowhere to receive the lines: the command is refused there."""
    client = ctx.client
    if client.push is None:
        raise CommandError(msgs.ENGINE_NEEDS_CONNECTION.format("MONITOR"))
    if not client.monitor:
        client.monitor = True
        ctx.engine.monitors.append(client)
        ctx.engine.admin_changed()
    return OK


# --- SHUTDOWN --------------------------------------------------------------------------------


@command(
    "shutdown",
    arity=-1,
    flags=("admin", "noscript", "loading", "stale", "no-multi", "sentinel", "allow-busy"),
)
def shutdown(ctx: Ctx, args: list[bytes]) -> Reply:
    """SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: the server stops accepting, flushes and
    fsyncs its append-only file and closes every connection (no reply on success, as Redis).

    SAVE writes the RDB file (``dir``/``dbfilename``) first, as Redis does, and so does a
    SHUTDOWN without NOSAVE while ``save`` points are set; if that fails the server stays up
    with Redis's "Errors trying to SHUTDOWN" unless FORCE is given. Otherwise no snapshot is
    written (the append-only file, when there is one, is what persists). NOW changes nothing (there are no replicas to wait for). ABORT
    answers Redis's "No shutdown in progress." (a shutdown here never waits). Without a server
    (in-process) the command is refused."""
    words = set()
    for arg in args:
        word = arg.lower()
        if word not in (b"nosave", b"save", b"now", b"force", b"abort"):
            raise CommandError(msgs.SYNTAX)
        words.add(word.decode())
    if ("abort" in words and len(words) > 1) or {"save", "nosave"} <= words:
        raise CommandError(msgs.SYNTAX)
    if "abort" in words:
        raise CommandError(msgs.NO_SHUTDOWN_IN_PROGRESS)
    if ctx.client.kill is None:
        raise CommandError(msgs.ENGINE_NEEDS_CONNECTION.format("SHUTDOWN"))
    if "save" in words or ("nosave" not in words and ctx.engine.config.get("save")):
        try:
            save_now(ctx.engine, "SHUTDOWN SAVE")
        except OSError:
            if "force" not in words:
                raise CommandError(msgs.SHUTDOWN_ERRORS) from None
    ctx.engine.shutdown_request = tuple(sorted(words))
    return NO_REPLY


# --- replication (a master without replicas) -------------------------------------------------


def _never(ctx: Ctx) -> Reply | None:
    return None


@command("wait", arity=3, flags=("noscript",))
def wait(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """WAIT numreplicas timeout -> how many replicas acknowledged this client's writes.

    As Redis 7.0: refused on a replica; the count at once when it reaches ``numreplicas``
    or inside MULTI; else the client blocks (the replicas are asked for an ACK) until
    enough replicas acknowledged, or ``timeout`` ms (0: no limit) passed, when it gets the
    count then."""
    repl = ctx.engine.replication
    if repl.master_host is not None:
        raise CommandError(msgs.WAIT_ON_REPLICA)
    numreplicas = to_int(args[0])
    timeout_ms = to_timeout_ms(args[1], seconds=False)
    offset = ctx.client.woff
    acked = repl.count_acks(offset)
    if acked >= numreplicas or ctx.in_multi:
        return acked
    blocked = ctx.block([], timeout_ms, on_ready=_never, on_timeout_reply=acked)
    if isinstance(blocked, Blocked):
        repl.wait_for(blocked, offset, numreplicas)
    return blocked


@command("role", arity=1, flags=("noscript", "loading", "stale", "fast", "sentinel"))
def role(ctx: Ctx, args: list[bytes]) -> Reply:
    """ROLE -> ["master", replication offset, [[ip, port, acked offset] per replica]], or as
    a replica ["slave", master host, master port, link state, offset applied (-1: link down)]."""
    return ctx.engine.replication.role_reply()


def _replicaof(ctx: Ctx, args: list[bytes]) -> Reply:
    # Redis 7.0's replicaofCommand, check for check.
    host, port = args
    repl = ctx.engine.replication
    if host.lower() == b"no" and port.lower() == b"one":
        if repl.master_host is not None:
            repl.become_master()
            _log.info("MASTER MODE enabled (user request from %s)", ctx.client.addr)
        return OK
    if ctx.client.replica:
        raise CommandError(msgs.REPLICAOF_FROM_REPLICA)
    value = parse_int(port)
    if value is None or not 0 <= value <= 65535:
        raise CommandError(msgs.INVALID_MASTER_PORT)
    name = host.decode("utf-8", "surrogateescape")
    if (
        repl.master_host is not None
        and repl.master_host.lower() == name.lower()
        and repl.master_port == value
    ):
        return Status(msgs.ALREADY_CONNECTED_TO_MASTER)
    repl.become_replica(name, value)
    _log.info("REPLICAOF %s:%d enabled (user request from %s)", name, value, ctx.client.addr)
    return OK


_REPL_FLAGS = ("admin", "noscript", "stale", "no-async-loading")


@command("replicaof", arity=3, flags=_REPL_FLAGS)
def replicaof(ctx: Ctx, args: list[bytes]) -> Reply:
    """REPLICAOF host port -> OK (the link starts in the background; "OK Already connected
    to specified master" if it is the current one); REPLICAOF NO ONE -> OK (a master again,
    with the data and a new replication ID)."""
    return _replicaof(ctx, args)


@command("slaveof", arity=3, flags=_REPL_FLAGS)
def slaveof(ctx: Ctx, args: list[bytes]) -> Reply:
    """SLAVEOF: the old name of REPLICAOF."""
    return _replicaof(ctx, args)


def _full_sync(ctx: Ctx, fullresync: bool) -> Reply:
    client = ctx.client
    if client.replica:
        return NO_REPLY  # Redis ignores a second SYNC from a replica
    if client.push is None:
        raise CommandError(msgs.SYNC_NEEDS_CONNECTION)
    engine = ctx.engine
    repl = engine.replication
    if repl.master_host is not None and repl.master_client is None:
        # A replica serves its data only while its own master's link is up (Redis).
        raise CommandError(msgs.NOMASTERLINK)
    engine.replication.attach(client, build_rdb(engine), fullresync)
    # A replica gets no replies from now on (Redis writes nothing to a replica but the stream).
    client.reply_off = True
    engine.admin_changed()
    return NO_REPLY


@command("sync", arity=1, flags=("admin", "noscript", "no-async-loading", "no-multi"))
def sync(ctx: Ctx, args: list[bytes]) -> Reply:
    """SYNC: the connection becomes a replica. It gets the RDB of the data (a bulk without
    its final CRLF), then every write as Redis propagates it (engine/replication.py)."""
    return _full_sync(ctx, fullresync=False)


@command("psync", arity=-3, flags=("admin", "noscript", "no-async-loading", "no-multi"))
def psync(ctx: Ctx, args: list[bytes]) -> Reply:
    """PSYNC replid offset: always a full resynchronization (the engine keeps no backlog):
    ``+FULLRESYNC <replid> <offset>``, then as SYNC."""
    return _full_sync(ctx, fullresync=True)


@command("replconf", arity=-1, flags=("admin", "noscript", "loading", "stale", "allow-busy"))
def replconf(ctx: Ctx, args: list[bytes]) -> Reply:
    """REPLCONF option value ... -> OK; ``ACK offset`` (from a replica) and ``GETACK`` get no
    reply, as in Redis (ACK records the replica's offset)."""
    if len(args) % 2:
        raise CommandError(msgs.SYNTAX)
    for i in range(0, len(args), 2):
        option = args[i].lower()
        value = args[i + 1]
        if option == b"listening-port":
            ctx.engine.replication.listening_ports[ctx.client.id] = to_int(value)
        elif option == b"ip-address":
            if len(value) >= 256:
                raise CommandError(
                    "ERR REPLCONF ip-address provided by replica instance is too long: "
                    f"{len(value)} bytes"
                )
        elif option == b"capa":
            pass
        elif option == b"ack":
            offset = parse_int(value)
            if ctx.client.replica and offset is not None:
                ctx.engine.replication.ack(ctx.client, offset)
            return NO_REPLY
        elif option == b"getack":
            return NO_REPLY
        elif option == b"rdb-only":
            number = parse_int(value)
            if number is None:
                raise CommandError(msgs.NOT_INTEGER)
            if not 0 <= number <= 1:
                raise CommandError("ERR value is out of range, value must between 0 and 1")
        else:
            raise CommandError(
                "ERR Unrecognized REPLCONF option: " + option.decode("utf-8", "replace")
            )
    return OK


@command("failover", arity=-1, flags=("admin", "noscript", "stale"))
def failover(ctx: Ctx, args: list[bytes]) -> Reply:
    """FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms]: Redis's argument checks, then
    "requires connected replicas" (there never are any)."""
    if len(args) == 1 and args[0].lower() == b"abort":
        raise CommandError(msgs.NO_FAILOVER_IN_PROGRESS)
    timeout = 0
    force = False
    host = False
    j = 0
    n = len(args)
    while j < n:
        word = args[j].lower()
        if word == b"timeout" and j + 1 < n and timeout == 0:
            timeout = to_int(args[j + 1])
            if timeout <= 0:
                raise CommandError(msgs.FAILOVER_TIMEOUT_NOT_POSITIVE)
            j += 2
        elif word == b"to" and j + 2 < n and not host:
            to_int(args[j + 2])
            host = True
            j += 3
        elif word == b"force" and not force:
            force = True
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
    raise CommandError(msgs.FAILOVER_NO_REPLICAS)


# --- cluster (support disabled) --------------------------------------------------------------


def _cluster_disabled(ctx: Ctx, args: list[bytes]) -> Reply:
    raise CommandError(msgs.CLUSTER_DISABLED)


@command("readonly", arity=1, flags=("fast", "loading", "stale"))
def readonly(ctx: Ctx, args: list[bytes]) -> Reply:
    """READONLY -> cluster support disabled."""
    return _cluster_disabled(ctx, args)


@command("readwrite", arity=1, flags=("fast", "loading", "stale"))
def readwrite(ctx: Ctx, args: list[bytes]) -> Reply:
    """READWRITE -> cluster support disabled."""
    return _cluster_disabled(ctx, args)


@command("asking", arity=1, flags=("fast",))
def asking(ctx: Ctx, args: list[bytes]) -> Reply:
    """ASKING -> cluster support disabled."""
    return _cluster_disabled(ctx, args)


# Redis 7.0's CLUSTER subcommands with their arities: each answers "cluster support disabled"
# once its arity is right (the arity error comes first, as in Redis).
_CLUSTER_SUBCOMMANDS = {
    "addslots": -3,
    "addslotsrange": -4,
    "bumpepoch": 2,
    "count-failure-reports": 3,
    "countkeysinslot": 3,
    "delslots": -3,
    "delslotsrange": -4,
    "failover": -2,
    "flushslots": 2,
    "forget": 3,
    "getkeysinslot": 4,
    "help": 2,
    "info": 2,
    "keyslot": 3,
    "links": 2,
    "meet": -4,
    "myid": 2,
    "nodes": 2,
    "replicas": 3,
    "replicate": 3,
    "reset": -2,
    "saveconfig": 2,
    "set-config-epoch": 3,
    "setslot": -4,
    "shards": 2,
    "slaves": 3,
    "slots": 2,
}
# The subcommands that change the cluster are admin commands (ACL @admin @dangerous).
_CLUSTER_ADMIN = frozenset(
    {
        "addslots",
        "addslotsrange",
        "bumpepoch",
        "count-failure-reports",
        "delslots",
        "delslotsrange",
        "failover",
        "flushslots",
        "forget",
        "meet",
        "replicas",
        "replicate",
        "reset",
        "saveconfig",
        "set-config-epoch",
        "setslot",
        "slaves",
    }
)
for _sub, _arity in _CLUSTER_SUBCOMMANDS.items():
    _flags: tuple[str, ...] = ("admin", "stale") if _sub in _CLUSTER_ADMIN else ("stale",)
    if _sub == "reset":
        # The one CLUSTER subcommand Redis 7.0 refuses from scripts.
        _flags += ("noscript",)
    command(f"cluster|{_sub}", arity=_arity, flags=_flags)(_cluster_disabled)


# --- MODULE ----------------------------------------------------------------------------------


@command("module|list", arity=2, flags=("admin", "noscript"))
def module_list(ctx: Ctx, args: list[bytes]) -> Reply:
    """MODULE LIST -> [] (the engine loads no modules)."""
    return []


def _module_refused(ctx: Ctx, args: list[bytes]) -> Reply:
    # Redis 7.0's answer with enable-module-command no (its default), word for word.
    raise CommandError(msgs.MODULE_NOT_ALLOWED)


command("module|load", arity=-3, flags=("admin", "noscript", "no-async-loading"))(_module_refused)
command("module|loadex", arity=-3, flags=("admin", "noscript", "no-async-loading"))(_module_refused)
command("module|unload", arity=3, flags=("admin", "noscript", "no-async-loading"))(_module_refused)

_MODULE_HELP = [
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and "
    "optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Prints this help.",
]


@command("module|help", arity=2, flags=("loading", "stale"))
def module_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """MODULE HELP -> help lines."""
    return [Status(line) for line in _MODULE_HELP]


# --- LOLWUT ----------------------------------------------------------------------------------

_LOLWUT5_CAPTION = "Georg Nees - schotter, plotter on paper, 1968. Redis ver. "
_LOLWUT6_CAPTION = (
    "Dedicated to the 8 bit game developers of past and present.\n"
    "Original 8 bit image from Plaguemon by hikikomori. Redis ver. "
)


def _bounded_arg(args: list[bytes], i: int, default: int, lo: int, hi: int) -> int:
    if len(args) <= i:
        return default
    return max(lo, min(hi, to_int(args[i])))


@command("lolwut", arity=-1, flags=("readonly", "fast"))
def lolwut(ctx: Ctx, args: list[bytes]) -> Reply:
    """LOLWUT [VERSION v] [...] -> some art and ``Redis ver. <the engine's version>``.

    VERSION 5 and 6 draw (the engine's own art; sizes are bounded as in Redis) and end with
    the captions of Redis's pieces; other versions print the version line alone."""
    version = 0
    if len(args) >= 2 and args[0].lower() == b"version":
        version = to_int(args[1])
        args = args[2:]
    if version == 5:
        cols = _bounded_arg(args, 0, 66, 1, 1000)
        per_row = _bounded_arg(args, 1, 8, 1, 200)
        per_col = _bounded_arg(args, 2, 12, 1, 200)
        rng = random.Random()
        rows = max(1, (cols * per_col) // (per_row * 2))
        rows = min(rows, 1000)
        art = "\n".join(
            "".join(chr(0x2800 + rng.randrange(256)) for _ in range(cols)) for _ in range(rows)
        )
        return Verbatim(art + "\n\n" + _LOLWUT5_CAPTION + ctx.engine.redis_version + "\n")
    if version == 6:
        cols = _bounded_arg(args, 0, 80, 1, 1000)
        rows = _bounded_arg(args, 1, 20, 1, 1000)
        rng = random.Random()
        lines = []
        for _ in range(rows):
            lines.append(
                "".join(
                    "\x1b[0;37;47m \x1b[0m" if rng.random() < 0.3 else "\x1b[0;30;40m \x1b[0m"
                    for _ in range(cols)
                )
            )
        return Verbatim(
            "\n".join(lines) + "\n" + _LOLWUT6_CAPTION + ctx.engine.redis_version + "\n"
        )
    return Verbatim(f"Redis ver. {ctx.engine.redis_version}\n")


# --- MIGRATE ---------------------------------------------------------------------------------


@command("migrate", arity=-6, flags=("write", "movablekeys"), first_key=3, last_key=3, step=1)
def migrate(ctx: Ctx, args: list[bytes]) -> Reply:
    """MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw]
    [KEYS key...]: Redis's argument checks, then NOKEY when none of the keys exists; a key
    to move gets an error (the engine does not connect to other servers)."""
    keys = [args[2]]
    j = 5
    n = len(args)
    while j < n:
        word = args[j].lower()
        more = n - 1 - j
        if word in (b"copy", b"replace"):
            j += 1
        elif word == b"auth":
            if not more:
                raise CommandError(msgs.SYNTAX)
            j += 2
        elif word == b"auth2":
            if more < 2:
                raise CommandError(msgs.SYNTAX)
            j += 3
        elif word == b"keys":
            if args[2]:
                raise CommandError(msgs.MIGRATE_KEYS_NEEDS_EMPTY_KEY)
            keys = args[j + 1 :]
            break
        else:
            raise CommandError(msgs.SYNTAX)
    to_int(args[4])
    to_int(args[3])
    if not any(ctx.db.exists(key) for key in keys):
        ctx.no_propagate()
        return Status("NOKEY")
    raise CommandError(msgs.ENGINE_NO_MIGRATE)
