"""Connection commands: PING, ECHO, SELECT, HELLO, AUTH, CLIENT, QUIT, RESET."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_str
from streamworker.engine.commands.transactions import discard_transaction
from streamworker.engine.errors import CommandError
from streamworker.engine.numbers import parse_int
from streamworker.engine.replies import NULL_BULK, OK, PONG, Map, Status, Verbatim

if TYPE_CHECKING:
    from streamworker.engine.context import ClientState, Ctx
    from streamworker.engine.replies import Reply

REDIS_VERSION = "7.0.15"


@command("ping", arity=-1, flags=("fast", "sentinel"))
def ping(ctx: Ctx, args: list[bytes]) -> Reply:
    """PING [message] -> PONG or the message."""
    if len(args) > 1:
        raise CommandError(msgs.wrong_arity("ping"))
    if ctx.client.pubsub and ctx.client.resp == 2:
        # Subscribed RESP2 clients read every frame as a message: PING answers in that shape.
        return [b"pong", args[0] if args else b""]
    return args[0] if args else PONG


@command("echo", arity=2, flags=("fast",))
def echo(ctx: Ctx, args: list[bytes]) -> Reply:
    """ECHO message -> message."""
    return args[0]


@command("select", arity=2, flags=("loading", "stale", "fast"))
def select(ctx: Ctx, args: list[bytes]) -> Reply:
    """SELECT index -> OK; ERR DB index is out of range."""
    index = to_int(args[0])
    if not -(2**31) <= index < 2**31:
        raise CommandError(msgs.INT_OUT_OF_RANGE)
    if not 0 <= index < len(ctx.keyspace.dbs):
        raise CommandError(msgs.DB_INDEX_OUT_OF_RANGE)
    ctx.select(index)
    return OK


def _valid_client_name(name: bytes) -> bool:
    return all(0x21 <= c <= 0x7E for c in name)


def _hello_map(ctx: Ctx) -> Map:
    return Map(
        [
            (b"server", b"redis"),
            (b"version", REDIS_VERSION.encode()),
            (b"proto", ctx.client.resp),
            (b"id", ctx.client.id),
            (b"mode", b"standalone"),
            (b"role", b"master"),
            (b"modules", []),
        ]
    )


def _check_auth(ctx: Ctx, user: bytes, password: bytes) -> bool:
    required = ctx.engine.config.get("requirepass") or ""
    if user != b"default":
        return False
    return not required or password.decode("utf-8", "surrogateescape") == required


@command("hello", arity=-1, flags=("noscript", "loading", "stale", "fast", "no-auth", "sentinel"))
def hello(ctx: Ctx, args: list[bytes]) -> Reply:
    """HELLO [protover [AUTH user pass] [SETNAME name]] -> server info map; switches RESP."""
    ver = 0
    j = 0
    if args:
        parsed = parse_int(args[0])
        if parsed is None:
            raise CommandError(msgs.PROTOCOL_VERSION_NOT_INTEGER)
        ver = parsed
        if ver < 2 or ver > 3:
            raise CommandError(msgs.NOPROTO)
        j = 1
    user = password = name = None
    n = len(args)
    while j < n:
        opt = args[j].lower()
        more = n - 1 - j
        if opt == b"auth" and more >= 2:
            user, password = args[j + 1], args[j + 2]
            j += 2
        elif opt == b"setname" and more:
            name = args[j + 1]
            if not _valid_client_name(name):
                raise CommandError(msgs.CLIENT_NAME_SPACES)
            j += 1
        else:
            raise CommandError(msgs.hello_syntax(to_str(args[j])))
        j += 1
    client = ctx.client
    if user is not None and password is not None:
        if not _check_auth(ctx, user, password):
            raise CommandError(msgs.NOAUTH_HELLO)
        client.authenticated = True
    if not client.authenticated:
        raise CommandError(msgs.NOAUTH_HELLO_FIRST)
    if name is not None:
        client.name = name or None
    if ver:
        client.resp = ver
    return _hello_map(ctx)


@command("auth", arity=-2, flags=("noscript", "loading", "stale", "fast", "no-auth", "sentinel"))
def auth(ctx: Ctx, args: list[bytes]) -> Reply:
    """AUTH [username] password -> OK or WRONGPASS."""
    if len(args) > 2:
        raise CommandError(msgs.SYNTAX)
    if len(args) == 1:
        if not ctx.engine.config.get("requirepass"):
            raise CommandError(msgs.AUTH_NOT_CONFIGURED)
        user, password = b"default", args[0]
    else:
        user, password = args
    if not _check_auth(ctx, user, password):
        raise CommandError(msgs.NOAUTH_HELLO)
    ctx.client.authenticated = True
    return OK


@command("quit", arity=-1, flags=("allow-busy", "noscript", "loading", "stale", "fast", "no-auth"))
def quit_(ctx: Ctx, args: list[bytes]) -> Reply:
    """QUIT -> OK; the transport closes the connection after the reply."""
    ctx.client.closed = True
    return OK


@command("reset", arity=1, flags=("noscript", "loading", "stale", "fast", "no-auth", "allow-busy"))
def reset(ctx: Ctx, args: list[bytes]) -> Reply:
    """RESET -> +RESET; drops MULTI, WATCHes, the name, selects db 0, back to RESP2."""
    client = ctx.client
    discard_transaction(client)
    if client.pubsub:
        # Redis's clearClientConnectionState: every subscription goes, without frames.
        ctx.engine.pubsub.drop_client(client)
    ctx.select(0)
    client.resp = 2
    client.name = None
    # Back to the default user: authenticated only if it needs no password.
    client.authenticated = not ctx.engine.config.get("requirepass")
    return Status("RESET")


# --- CLIENT --------------------------------------------------------------------------------

_CLIENT = ("noscript", "loading", "stale")


def client_info_line(ctx: Ctx, client: ClientState) -> str:
    """One CLIENT LIST line (Redis 7.0's field set)."""
    now_ms = int(time.time() * 1000)
    age = max(0, (now_ms - client.created_ms) // 1000)
    idle = max(0, (now_ms - client.last_interaction_ms) // 1000)
    flags = ""
    if client.pubsub:
        flags += "P"
    if client.in_multi:
        flags += "x"
    if client.blocked is not None:
        flags += "b"
    if client.dirty_cas:
        flags += "d"
    name = (client.name or b"").decode("utf-8", "surrogateescape")
    multi = len(client.multi_queue) if client.in_multi else -1
    qbuf = omem = 0
    if client.io is not None:
        qbuf = client.io.query_buffer_bytes()
        omem = client.io.output_buffer_bytes()
    # Redis's reply buffer is 16 KB; what does not fit goes to the reply list (oll/omem).
    obl = min(omem, 16384)
    oll = 1 if omem > 16384 else 0
    qbuf_free = max(0, 16384 - qbuf) if qbuf < 16384 else 0
    tot_mem = 1024 + qbuf + qbuf_free + omem
    return (
        f"id={client.id} addr={client.addr} laddr={client.laddr} fd={client.fd} name={name} "
        f"age={age} idle={idle} flags={flags or 'N'} db={client.db_index} sub={len(client.sub_channels)} "
        f"psub={len(client.sub_patterns)} ssub={len(client.sub_shard)} "
        f"multi={multi} qbuf={qbuf} qbuf-free={qbuf_free} argv-mem=0 multi-mem=0 rbs=16384 "
        f"rbp=0 obl={obl} oll={oll} omem={omem if oll else 0} tot-mem={tot_mem} events=r "
        f"cmd={client.last_cmd} user=default redir=-1 resp={client.resp}"
    )


@command("client|id", arity=2, flags=_CLIENT)
def client_id(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT ID -> this connection's id."""
    return ctx.client.id


@command("client|setname", arity=3, flags=_CLIENT)
def client_setname(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT SETNAME name -> OK (empty name clears it)."""
    name = args[0]
    if not _valid_client_name(name):
        raise CommandError(msgs.CLIENT_NAME_SPACES)
    ctx.client.name = name or None
    return OK


@command("client|getname", arity=2, flags=_CLIENT)
def client_getname(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT GETNAME -> name or nil."""
    return ctx.client.name if ctx.client.name else NULL_BULK


@command("client|info", arity=2, flags=_CLIENT)
def client_info(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT INFO -> this connection's CLIENT LIST line."""
    ctx.client.last_cmd = "client|info"
    return Verbatim(client_info_line(ctx, ctx.client) + "\n")


@command("client|list", arity=-2, flags=_CLIENT)
def client_list(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT LIST [TYPE normal|...] [ID id ...] -> one line per connection."""
    clients = list(ctx.engine.clients.values())
    i = 0
    while i < len(args):
        opt = args[i].lower()
        if opt == b"type" and i + 1 < len(args):
            kind = args[i + 1].lower()
            if kind not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                raise CommandError(msgs.unknown_client_type(to_str(args[i + 1])))
            if kind == b"normal":
                clients = [c for c in clients if not c.pubsub]
            elif kind == b"pubsub":
                clients = [c for c in clients if c.pubsub]
            else:
                clients = []
            i += 2
        elif opt == b"id" and i + 1 < len(args):
            ids = set()
            for a in args[i + 1 :]:
                n = parse_int(a)
                if n is None:
                    raise CommandError(msgs.INVALID_CLIENT_ID)
                ids.add(n)
            clients = [c for c in clients if c.id in ids]
            break
        else:
            raise CommandError(msgs.SYNTAX)
    ctx.client.last_cmd = "client|list"
    return Verbatim("".join(client_info_line(ctx, c) + "\n" for c in clients))


@command("client|unblock", arity=-3, flags=("admin", "noscript", "loading", "stale"))
def client_unblock(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT UNBLOCK id [TIMEOUT|ERROR] -> 1 if the client was blocked and is now freed."""
    target_id = to_int(args[0])
    error = False
    if len(args) == 2:
        mode = args[1].lower()
        if mode == b"error":
            error = True
        elif mode != b"timeout":
            raise CommandError(msgs.CLIENT_UNBLOCK_REASON)
    elif len(args) > 2:
        raise CommandError(msgs.SYNTAX)
    target = ctx.engine.clients.get(target_id)
    if target is None or target.blocked is None or target.blocked.resolved:
        return 0
    blocked = target.blocked
    ctx.engine.unblock(
        blocked,
        CommandError(msgs.UNBLOCKED_BY_CLIENT) if error else blocked.on_timeout_reply,
    )
    return 1


@command("client|no-evict", arity=3, flags=("admin", "noscript", "loading", "stale"))
def client_no_evict(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT NO-EVICT on|off -> OK."""
    if args[0].lower() not in (b"on", b"off"):
        raise CommandError(msgs.SYNTAX)
    return OK


# Redis 7.0's CLIENT HELP text, verbatim (it lists subcommands the engine lacks, too).
_CLIENT_HELP = [
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "HELP",
    "    Prints this help.",
]


@command("client|help", arity=2, flags=("loading", "stale"))
def client_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT HELP -> help lines."""
    return [Status(line) for line in _CLIENT_HELP]
