"""Connection commands: PING, ECHO, SELECT, HELLO, AUTH, CLIENT, QUIT, RESET."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from streamworker.engine import msgs
from streamworker.engine.acl import DENIED_AUTH
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_str, to_timeout_ms
from streamworker.engine.context import NO_REPLY
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import discard_transaction
from streamworker.engine.numbers import parse_int
from streamworker.engine.replies import NULL_BULK, OK, PONG, Map, SetReply, Status, Verbatim

if TYPE_CHECKING:
    from streamworker.engine.core import Engine

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


@command("echo", arity=2, flags=("loading", "stale", "fast"))
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
            (b"version", ctx.engine.redis_version.encode()),
            (b"proto", ctx.client.resp),
            (b"id", ctx.client.id),
            (b"mode", b"standalone"),
            (b"role", b"master" if ctx.engine.replication.master_host is None else b"replica"),
            (b"modules", []),
        ]
    )


_LOG_GROUPING_MS = 60000


def log_denial(
    ctx: Ctx,
    reason: int,
    context: str,
    obj: bytes,
    username: bytes | None = None,
    shown: Ctx | None = None,
) -> None:
    """Add an ACL LOG entry (Redis's addACLLogEntry): an entry like one of the 10 newest
    (same reason, context, object and user, within 60 s) is counted again and moved to the
    front instead; the log keeps ``acllog-max-len`` entries. ``shown``: the connection the
    entry describes (default: ``ctx``'s). Here, not in :mod:`.acl`, because the entry carries
    the CLIENT LIST line of the connection (:func:`client_info_line`)."""
    engine = ctx.engine
    users = engine.acl
    client = ctx.client
    name = username if username is not None else client.user.name
    now = int(time.time() * 1000)
    shown = shown or ctx
    cinfo = client_info_line(shown, shown.client)
    log = users.log
    for i, entry in enumerate(log[:10]):
        if (
            entry["reason"] == reason
            and entry["context"] == context
            and abs(entry["ctime"] - now) <= _LOG_GROUPING_MS
            and entry["object"] == obj
            and entry["username"] == name
        ):
            del log[i]
            entry["count"] += 1
            entry["ctime"] = now
            entry["cinfo"] = cinfo
            log.insert(0, entry)
            return
    entry = {
        "count": 1,
        "reason": reason,
        "context": context,
        "object": obj,
        "username": name,
        "ctime": now,
        "cinfo": cinfo,
    }
    log.insert(0, entry)
    limit = int(engine.config.get("acllog-max-len") or 0)
    del log[limit:]


def _authenticate(ctx: Ctx, username: bytes, password: bytes) -> None:
    """Redis's ACLAuthenticateUser: switch the connection to ``username`` when the password
    fits (and the user is on); otherwise log the failure and raise WRONGPASS."""
    ctx.engine.acl_sync()
    user = ctx.engine.acl.get(username)
    client = ctx.client
    if user is None or not user.check_password(password):
        context = "multi" if client.in_multi or ctx.in_multi else "toplevel"
        log_denial(ctx, DENIED_AUTH, context, bytes(ctx.argv[0]), username)
        raise CommandError(msgs.NOAUTH_HELLO)
    client.user = user
    client.authenticated = True


@command(
    "hello",
    arity=-1,
    flags=("noscript", "loading", "stale", "fast", "no-auth", "sentinel", "allow-busy"),
)
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
        _authenticate(ctx, user, password)
    if not client.authenticated and ctx.engine.acl.auth_required():
        raise CommandError(msgs.NOAUTH_HELLO_FIRST)
    if name is not None:
        client.name = name or None
    if ver:
        client.resp = ver
    return _hello_map(ctx)


@command(
    "auth",
    arity=-2,
    flags=("noscript", "loading", "stale", "fast", "no-auth", "sentinel", "allow-busy"),
)
def auth(ctx: Ctx, args: list[bytes]) -> Reply:
    """AUTH [username] password -> OK or WRONGPASS."""
    if len(args) > 2:
        raise CommandError(msgs.SYNTAX)
    if len(args) == 1:
        ctx.engine.acl_sync()
        if ctx.engine.acl.default.nopass:
            raise CommandError(msgs.AUTH_NOT_CONFIGURED)
        user, password = b"default", args[0]
    else:
        user, password = args
    _authenticate(ctx, user, password)
    return OK


@command("quit", arity=-1, flags=("allow-busy", "noscript", "loading", "stale", "fast", "no-auth"))
def quit_(ctx: Ctx, args: list[bytes]) -> Reply:
    """QUIT -> OK; the transport closes the connection after the reply."""
    ctx.client.closed = True
    return OK


@command("reset", arity=1, flags=("noscript", "loading", "stale", "fast", "no-auth", "allow-busy"))
def reset(ctx: Ctx, args: list[bytes]) -> Reply:
    """RESET -> +RESET; drops MULTI, WATCHes, the name, MONITOR mode, CLIENT TRACKING and
    CLIENT REPLY OFF/SKIP, selects db 0, back to RESP2."""
    client = ctx.client
    discard_transaction(client)
    if client.pubsub:
        # Redis's clearClientConnectionState: every subscription goes, without frames.
        ctx.engine.pubsub.drop_client(client)
    engine = ctx.engine
    if client.monitor:
        client.monitor = False
        engine.monitors = [c for c in engine.monitors if c is not client]
    client.tracking = None
    engine.tracking_clients.pop(client.id, None)
    engine.admin_changed()
    client.reply_off = client.reply_skip = client.reply_skip_next = False
    ctx.select(0)
    client.resp = 2
    client.name = None
    # Back to the default user: authenticated only if it needs no password.
    default = ctx.engine.acl.default
    client.user = default
    client.authenticated = default.nopass and default.enabled
    return Status("RESET")


# --- CLIENT --------------------------------------------------------------------------------

_CLIENT = ("noscript", "loading", "stale")


def client_info_line(ctx: Ctx, client: ClientState) -> str:
    """One CLIENT LIST line (Redis 7.0's field set)."""
    now_ms = int(time.time() * 1000)
    age = max(0, (now_ms - client.created_ms) // 1000)
    idle = max(0, (now_ms - client.last_interaction_ms) // 1000)
    # Redis's order of the letters (getClientInfoString).
    flags = ""
    if client.replica:
        flags += "S"
    if client.monitor:
        flags += "O"
    if client is ctx.engine.replication.master_client:
        flags += "M"
    if client.pubsub:
        flags += "P"
    if client.in_multi:
        flags += "x"
    if client.blocked is not None:
        flags += "b"
    tracking = client.tracking
    if tracking is not None:
        flags += "t"
        if tracking.broken_redirect:
            flags += "R"
        if tracking.bcast:
            flags += "B"
    if client.dirty_cas:
        flags += "d"
    name = (client.name or b"").decode("utf-8", "surrogateescape")
    multi = len(client.multi_queue) if client.in_multi else -1
    qbuf = omem = 0
    argv_mem = 0
    if client.io is not None:
        qbuf = client.io.query_buffer_bytes()
        omem = client.io.output_buffer_bytes()
    if client is ctx.client:
        # The command being run is still in Redis's query buffer (and its argv in memory).
        argv = ctx.argv
        argv_mem = sum(len(a) for a in argv)
        if client.io is not None:
            qbuf += len(b"*%d\r\n" % len(argv)) + sum(
                len(b"$%d\r\n" % len(a)) + len(a) + 2 for a in argv
            )
    redir = -1 if tracking is None else tracking.redirect
    user = client.user.name.decode("utf-8", "surrogateescape") if client.user else "default"
    # Redis counts each queued command's argument bytes and its argv pointers.
    multi_mem = sum(sum(len(a) for a in argv) + 8 * len(argv) for _, argv in client.multi_queue)
    # Redis's reply buffer is 16 KB; what does not fit goes to the reply list (oll/omem).
    obl = min(omem, 16384)
    oll = 1 if omem > 16384 else 0
    qbuf_free = max(0, 16384 - qbuf) if qbuf < 16384 else 0
    tot_mem = 1024 + qbuf + qbuf_free + omem
    return (
        f"id={client.id} addr={client.addr} laddr={client.laddr} fd={client.fd} name={name} "
        f"age={age} idle={idle} flags={flags or 'N'} db={client.db_index} "
        f"sub={len(client.sub_channels)} psub={len(client.sub_patterns)} "
        f"ssub={len(client.sub_shard)} "
        f"multi={multi} qbuf={qbuf} qbuf-free={qbuf_free} argv-mem={argv_mem} multi-mem={multi_mem} "
        f"rbs=16384 rbp=16384 obl={obl} oll={oll} omem={omem if oll else 0} "
        f"tot-mem={tot_mem} events=r cmd={client.last_cmd} user={user} redir={redir} "
        f"resp={client.resp}"
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
            want = b"replica" if kind == b"slave" else kind
            clients = [c for c in clients if _client_type(ctx.engine, c) == want]
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
    if target.blocked.postponed is not None:
        # Waiting for CLIENT PAUSE to end is not a blocking command (as in Redis > 7.0.15,
        # which crashes here).
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


# --- CLIENT KILL -----------------------------------------------------------------------------

_CLIENT_TYPES = (b"normal", b"master", b"replica", b"slave", b"pubsub")


def _client_type(engine: Engine, client: ClientState) -> bytes:
    # Redis's getClientType: the master's client (a replica's link), then replicas (a
    # MONITOR connection counts as normal), then a client with a subscription (pubsub).
    if client is engine.replication.master_client:
        return b"master"
    if client.replica and not client.monitor:
        return b"replica"
    return b"pubsub" if client.pubsub else b"normal"


def kill_client(engine: Engine, target: ClientState, current: ClientState) -> None:
    """Close ``target``'s connection: at once, or after this reply when it is ``current``."""
    if target.kill is not None:
        target.kill()
    if target is not current:
        engine.disconnect(target)


@command("client|kill", arity=-3, flags=("admin", "noscript", "loading", "stale"))
def client_kill(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT KILL ip:port -> OK or ``No such client``;
    CLIENT KILL <filter> <value> ... (ID, TYPE, USER, ADDR, LADDR, SKIPME) -> how many
    connections were closed. The calling connection is closed after its reply (and is
    spared by default in the filter form: SKIPME yes)."""
    engine = ctx.engine
    me = ctx.client
    if len(args) == 1:
        addr = to_str(args[0])
        for client in list(engine.clients.values()):
            if client.addr == addr:
                kill_client(engine, client, me)
                return OK
        raise CommandError(msgs.NO_SUCH_CLIENT)
    want_id = 0
    want_type: bytes | None = None
    want_addr: str | None = None
    want_user: Any = None
    want_laddr: str | None = None
    skipme = True
    i = 0
    n = len(args)
    while i < n:
        opt = args[i].lower()
        if i + 1 >= n:
            raise CommandError(msgs.SYNTAX)
        value = args[i + 1]
        if opt == b"id":
            parsed = parse_int(value)
            if parsed is None or parsed <= 0:
                raise CommandError(msgs.CLIENT_ID_NOT_POSITIVE)
            want_id = parsed
        elif opt == b"type":
            kind = value.lower()
            if kind not in _CLIENT_TYPES:
                raise CommandError(msgs.unknown_client_type(to_str(value)))
            want_type = b"replica" if kind == b"slave" else kind
        elif opt == b"user":
            want_user = engine.acl.get(value)
            if want_user is None:
                raise CommandError(msgs.no_such_user(to_str(value)))
        elif opt == b"addr":
            want_addr = to_str(value)
        elif opt == b"laddr":
            want_laddr = to_str(value)
        elif opt == b"skipme":
            word = value.lower()
            if word == b"yes":
                skipme = True
            elif word == b"no":
                skipme = False
            else:
                raise CommandError(msgs.SYNTAX)
        else:
            raise CommandError(msgs.SYNTAX)
        i += 2
    killed = 0
    for client in list(engine.clients.values()):
        if want_id and client.id != want_id:
            continue
        if want_type is not None and _client_type(engine, client) != want_type:
            continue
        if want_user is not None and client.user is not want_user:
            continue
        if want_addr is not None and client.addr != want_addr:
            continue
        if want_laddr is not None and client.laddr != want_laddr:
            continue
        if skipme and client is me:
            continue
        kill_client(engine, client, me)
        killed += 1
    return killed


# --- CLIENT PAUSE / UNPAUSE / REPLY ----------------------------------------------------------


@command("client|pause", arity=-3, flags=("admin", "noscript", "loading", "stale"))
def client_pause(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT PAUSE timeout-ms [WRITE|ALL] -> OK. Until the time is up (or CLIENT UNPAUSE)
    other commands wait — all of them, or with WRITE only those that may write — and then
    run in the order they came. A pause asked for inside MULTI starts after EXEC."""
    if len(args) > 2:
        raise CommandError(msgs.unknown_subcommand_or_arity(to_str(ctx.argv[1]), "CLIENT"))
    pause_all = True
    if len(args) == 2:
        mode = args[1].lower()
        if mode == b"write":
            pause_all = False
        elif mode != b"all":
            raise CommandError(msgs.CLIENT_PAUSE_MODE)
    timeout_ms = to_timeout_ms(args[0], seconds=False)
    ctx.engine.pause(timeout_ms / 1000.0, pause_all)
    return OK


@command("client|unpause", arity=2, flags=("admin", "noscript", "loading", "stale"))
def client_unpause(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT UNPAUSE -> OK; the commands that waited run now."""
    ctx.engine.unpause()
    return OK


@command("client|reply", arity=3, flags=_CLIENT)
def client_reply(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT REPLY ON|OFF|SKIP: ON answers OK; OFF sends no reply from now on (this one
    included); SKIP drops the reply of the next command. Needs a network connection (an
    in-process caller always waits for a reply)."""
    client = ctx.client
    mode = args[0].lower()
    if mode not in (b"on", b"off", b"skip"):
        raise CommandError(msgs.SYNTAX)
    if client.push is None:
        raise CommandError(msgs.ENGINE_NEEDS_CONNECTION.format("CLIENT REPLY"))
    if mode == b"on":
        client.reply_off = False
        client.reply_skip = client.reply_skip_next = False
        return OK
    if mode == b"off":
        client.reply_off = True
    elif not client.reply_off:
        client.reply_skip_next = True
    return NO_REPLY


# --- CLIENT TRACKING -------------------------------------------------------------------------


class Tracking:
    """A connection's CLIENT TRACKING options."""

    __slots__ = (
        "bcast",
        "broken_redirect",
        "caching",
        "noloop",
        "optin",
        "optout",
        "prefixes",
        "redirect",
    )

    def __init__(self) -> None:
        self.redirect = 0
        self.bcast = False
        self.optin = False
        self.optout = False
        self.noloop = False
        self.prefixes: list[bytes] = []
        # CLIENT CACHING yes/no given for the next command (OPTIN / OPTOUT).
        self.caching = False
        # An invalidation found the redirect client gone (Redis's broken_redirect).
        self.broken_redirect = False


@command("client|tracking", arity=-3, flags=_CLIENT)
def client_tracking(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN] [OPTOUT]
    [NOLOOP] -> OK, with Redis's checks and error texts."""
    client = ctx.client
    redirect = 0
    bcast = optin = optout = noloop = False
    prefixes: list[bytes] = []
    j = 1
    n = len(args)
    while j < n:
        word = args[j].lower()
        more = n - 1 - j
        if word == b"redirect" and more:
            j += 1
            if redirect:
                raise CommandError("ERR A client can only redirect to a single other client")
            redirect = to_int(args[j])
            if redirect not in ctx.engine.clients:
                raise CommandError(msgs.TRACKING_REDIRECT_MISSING)
        elif word == b"bcast":
            bcast = True
        elif word == b"optin":
            optin = True
        elif word == b"optout":
            optout = True
        elif word == b"noloop":
            noloop = True
        elif word == b"prefix" and more:
            j += 1
            prefixes.append(args[j])
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    mode = args[0].lower()
    current = client.tracking
    if mode == b"on":
        if not bcast and prefixes:
            raise CommandError(msgs.TRACKING_PREFIX_NEEDS_BCAST)
        if current is not None and current.bcast != bcast:
            raise CommandError(
                "ERR You can't switch BCAST mode on/off before disabling tracking for this "
                "client, and then re-enabling it with a different mode."
            )
        if bcast and (optin or optout):
            raise CommandError(msgs.TRACKING_OPT_WITH_BCAST)
        if optin and optout:
            raise CommandError(msgs.TRACKING_OPTIN_AND_OPTOUT)
        if current is not None and ((optin and current.optout) or (optout and current.optin)):
            raise CommandError(
                "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this "
                "client, and then re-enabling it with a different mode."
            )
        if bcast:
            _check_prefix_collisions(current.prefixes if current else [], prefixes)
        tracking = current if current is not None else Tracking()
        tracking.redirect = redirect
        tracking.bcast = bcast
        tracking.optin = tracking.optin or optin
        tracking.optout = tracking.optout or optout
        tracking.noloop = tracking.noloop or noloop
        if bcast and not prefixes and not tracking.prefixes:
            prefixes = [b""]
        for prefix in prefixes:
            if prefix not in tracking.prefixes:
                tracking.prefixes.append(prefix)
        client.tracking = tracking
        ctx.engine.tracking_clients[client.id] = client
        ctx.engine.admin_changed()
    elif mode == b"off":
        client.tracking = None
        ctx.engine.tracking_clients.pop(client.id, None)
        ctx.engine.admin_changed()
    else:
        raise CommandError(msgs.SYNTAX)
    return OK


def _check_prefix_collisions(existing: list[bytes], new: list[bytes]) -> None:
    # Redis's checkPrefixCollisionsOrReply: no prefix may be a prefix of another, nor be
    # given twice.
    for i, prefix in enumerate(new):
        for other in existing:
            if other.startswith(prefix) or prefix.startswith(other):
                raise CommandError(_overlap(prefix, other, existing=True))
        for other in new[i + 1 :]:
            if other.startswith(prefix) or prefix.startswith(other):
                raise CommandError(_overlap(prefix, other, existing=False))


def _overlap(prefix: bytes, other: bytes, existing: bool) -> str:
    where = "an existing prefix" if existing else "another provided prefix"
    return (
        f"ERR Prefix '{to_str(prefix)}' overlaps with {where} '{to_str(other)}'. "
        "Prefixes for a single client must not overlap."
    )


@command("client|trackinginfo", arity=2, flags=_CLIENT)
def client_trackinginfo(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT TRACKINGINFO -> {flags, redirect, prefixes}."""
    tracking = ctx.client.tracking
    if tracking is None:
        return Map([(b"flags", SetReply([b"off"])), (b"redirect", -1), (b"prefixes", [])])
    flags: list[bytes] = [b"on"]
    if tracking.bcast:
        flags.append(b"bcast")
    if tracking.optin:
        flags.append(b"optin")
        if tracking.caching:
            flags.append(b"caching-yes")
    if tracking.optout:
        flags.append(b"optout")
        if tracking.caching:
            flags.append(b"caching-no")
    if tracking.noloop:
        flags.append(b"noloop")
    if tracking.broken_redirect:
        flags.append(b"broken_redirect")
    prefixes = list(tracking.prefixes) if tracking.bcast else []
    return Map(
        [(b"flags", SetReply(flags)), (b"redirect", tracking.redirect), (b"prefixes", prefixes)]
    )


@command("client|getredir", arity=2, flags=_CLIENT)
def client_getredir(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT GETREDIR -> the redirect client id, 0 without one, -1 when not tracking."""
    tracking = ctx.client.tracking
    return -1 if tracking is None else tracking.redirect


@command("client|caching", arity=3, flags=_CLIENT)
def client_caching(ctx: Ctx, args: list[bytes]) -> Reply:
    """CLIENT CACHING YES|NO -> OK: in OPTIN mode YES tracks the next command's keys, in
    OPTOUT mode NO skips them."""
    tracking = ctx.client.tracking
    if tracking is None:
        raise CommandError(msgs.TRACKING_CACHING_NEEDS_OPT)
    word = args[0].lower()
    if word == b"yes":
        if not tracking.optin:
            raise CommandError(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
            )
    elif word == b"no":
        if not tracking.optout:
            raise CommandError(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
            )
    else:
        raise CommandError(msgs.SYNTAX)
    tracking.caching = True
    return OK
