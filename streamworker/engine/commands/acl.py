"""ACL for the one user the engine has, ``default`` (all commands, all keys, all channels;
its password is ``requirepass``).

Every read-only ACL subcommand answers as redis-server 7.0 with only the default user does.
Of the ones that change users: ACL DELUSER answers as Redis (``default`` cannot be removed,
other names do not exist: 0), ACL LOAD / ACL SAVE give Redis's "not configured to use an ACL
file" error (the engine has none), ACL SETUSER ``default`` without rules is OK and anything
else is refused with :data:`~streamworker.engine.msgs.ENGINE_ACL_DEFAULT_ONLY` (the engine
has no other users and no rules).

ACL categories are derived from the command table (the module that implements a command and
its flags), the way Redis's command tables assign them; see :func:`categories_of`.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_str
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_BULK, OK, Map, SetReply, Status

if TYPE_CHECKING:
    from streamworker.engine.commands import CommandSpec
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

__all__ = ["CATEGORIES", "categories_of"]

_ACL = ("admin", "noscript", "loading", "stale")

# Redis 7.0's categories, in ACL CAT's order.
CATEGORIES = (
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
)

# The data-type (or family) category of each command module.
_MODULE_CATEGORY = {
    "keys": "keyspace",
    "strings": "string",
    "bits": "bitmap",
    "hashes": "hash",
    "sets": "set",
    "zsets": "sortedset",
    "lists": "list",
    "streams": "stream",
    "scripting": "scripting",
    "transactions": "transaction",
    "connection": "connection",
    "hyperloglog": "hyperloglog",
    "geo": "geo",
    "pubsub": "pubsub",
    "functions": "scripting",
}
# Commands whose categories Redis sets apart from their family's rule.
_EXTRA = {
    "sort": ("set", "sortedset", "list", "dangerous"),
    "sort_ro": ("set", "sortedset", "list", "dangerous"),
    "client|list": ("admin", "dangerous"),
    "lastsave": ("admin", "dangerous"),
    "command": ("connection",),
    "function": ("scripting",),
    "keys": ("dangerous",),
    "flushall": ("keyspace", "dangerous"),
    "flushdb": ("keyspace", "dangerous"),
    "swapdb": ("keyspace", "dangerous"),
    "dbsize": ("keyspace",),
    "randomkey": ("keyspace",),
    "scan": ("keyspace",),
    "info": ("dangerous",),
    "role": ("admin", "dangerous"),
    "migrate": ("keyspace", "dangerous"),
    "restore": ("keyspace", "dangerous"),
    "dump": ("keyspace",),
    "lolwut": (),
    "wait": ("connection",),
    "readonly": ("connection",),
    "readwrite": ("connection",),
    "asking": ("connection",),
    "select": ("connection",),
    "debug": ("admin", "dangerous"),
}


# Commands Redis 7.0 leaves out of their module's category.
_OUTSIDE_FAMILY = frozenset({"pubsub|help"})


def categories_of(spec: CommandSpec) -> set[str]:
    """The ACL categories of ``spec`` (a command or a subcommand)."""
    cats: set[str] = set()
    func = spec.func
    module = func.__module__.rsplit(".", 1)[-1] if func is not None else ""
    family = _MODULE_CATEGORY.get(module)
    if family is not None and spec.name not in _OUTSIDE_FAMILY:
        cats.add(family)
    flags = spec.flags
    if "write" in flags:
        cats.add("write")
    if "readonly" in flags and module not in ("scripting", "functions"):
        cats.add("read")
    if "admin" in flags:
        cats.update(("admin", "dangerous"))
    cats.add("fast" if "fast" in flags else "slow")
    if "blocking" in flags:
        cats.add("blocking")
    base = spec.container or spec.name
    cats.update(_EXTRA.get(spec.name, ()) or _EXTRA.get(base, ()))
    return cats


def _user_line(ctx: Ctx) -> str:
    password = ctx.engine.config.get("requirepass") or ""
    auth = "#" + hashlib.sha256(password.encode()).hexdigest() if password else "nopass"
    return f"user default on {auth} ~* &* +@all"


@command("acl|whoami", arity=2, flags=("noscript", "loading", "stale"))
def acl_whoami(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL WHOAMI -> "default"."""
    return b"default"


@command("acl|users", arity=2, flags=_ACL)
def acl_users(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL USERS -> ["default"]."""
    return [b"default"]


@command("acl|list", arity=2, flags=_ACL)
def acl_list(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL LIST -> the default user's rules (``nopass``, or the SHA-256 of requirepass)."""
    return [_user_line(ctx).encode()]


@command("acl|getuser", arity=3, flags=_ACL)
def acl_getuser(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL GETUSER name -> the default user's description; nil for any other name."""
    if args[0] != b"default":
        return NULL_BULK
    password = ctx.engine.config.get("requirepass") or ""
    flags = [b"on"] if password else [b"on", b"nopass"]
    passwords = [hashlib.sha256(password.encode()).hexdigest().encode()] if password else []
    return Map(
        [
            (b"flags", SetReply(flags)),
            (b"passwords", passwords),
            (b"commands", b"+@all"),
            (b"keys", b"~*"),
            (b"channels", b"&*"),
            (b"selectors", []),
        ]
    )


@command("acl|cat", arity=-2, flags=("noscript", "loading", "stale"))
def acl_cat(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL CAT -> the categories; ACL CAT category -> the commands in it (subcommands as
    ``container|sub``)."""
    if len(args) > 1:
        raise CommandError(msgs.unknown_subcommand_or_arity(to_str(ctx.argv[1]), "ACL"))
    if not args:
        return [c.encode() for c in CATEGORIES]
    cat = args[0].lower().decode("utf-8", "surrogateescape")
    if cat not in CATEGORIES:
        raise CommandError(msgs.acl_unknown_category(to_str(args[0])))
    out: list[Reply] = []
    for spec in ctx.engine.table.values():
        if spec.subcommands:
            out.extend(
                sub.name.encode() for sub in spec.subcommands.values() if cat in categories_of(sub)
            )
        elif spec.func is not None and cat in categories_of(spec):
            out.append(spec.name.encode())
    return out


@command("acl|genpass", arity=-2, flags=("noscript", "loading", "stale"))
def acl_genpass(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL GENPASS [bits] -> a random password of ``bits`` (default 256) bits, in hex."""
    if len(args) > 1:
        raise CommandError(msgs.unknown_subcommand_or_arity(to_str(ctx.argv[1]), "ACL"))
    bits = 256
    if args:
        bits = to_int(args[0])
        if not 0 < bits <= 4096:
            raise CommandError(msgs.ACL_GENPASS_BITS)
    chars = (bits + 3) // 4
    return os.urandom((chars + 1) // 2).hex()[:chars].encode()


@command("acl|log", arity=-2, flags=_ACL)
def acl_log(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL LOG [count|RESET] -> the denials logged (the default user is never denied, so
    none); RESET -> OK."""
    if len(args) > 1:
        raise CommandError(msgs.unknown_subcommand_or_arity(to_str(ctx.argv[1]), "ACL"))
    if args:
        if args[0].lower() == b"reset":
            ctx.engine.acl_log.clear()
            return OK
        to_int(args[0])
    return []


@command("acl|dryrun", arity=-4, flags=_ACL)
def acl_dryrun(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL DRYRUN user command [arg ...] -> OK when the user may run it (the default user
    may run everything); Redis's errors for an unknown user, command or arity."""
    if args[0] != b"default":
        raise CommandError(msgs.acl_user_not_found(to_str(args[0])))
    argv = args[1:]
    spec = ctx.engine.table.get(argv[0].lower())
    if spec is not None and spec.subcommands is not None and len(argv) >= 2:
        spec = spec.subcommands.get(argv[1].lower())
    if spec is None:
        raise CommandError(msgs.acl_command_not_found(to_str(argv[0])))
    n = len(argv)
    if n != spec.arity and (spec.arity > 0 or n < -spec.arity):
        raise CommandError(msgs.wrong_arity(spec.name))
    return OK


@command("acl|setuser", arity=-3, flags=_ACL)
def acl_setuser(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL SETUSER default -> OK (no rules: nothing changes); anything else is refused (the
    engine has no other users and no rules)."""
    if args[0] == b"default":
        same = _NO_CHANGE | (set() if ctx.engine.config.get("requirepass") else {b"nopass"})
        if all(rule.lower() in same for rule in args[1:]):
            return OK
    raise CommandError(msgs.ENGINE_ACL_DEFAULT_ONLY)


# Rules that leave the default user as it is (on, every key, channel and command).
_NO_CHANGE = frozenset({b"on", b"allkeys", b"allchannels", b"allcommands", b"+@all", b"~*", b"&*"})


@command("acl|deluser", arity=-3, flags=_ACL)
def acl_deluser(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL DELUSER name ... -> how many users were deleted (no user but default exists, and
    default cannot be removed)."""
    if b"default" in args:
        raise CommandError(msgs.ACL_DEFAULT_NOT_REMOVABLE)
    return 0


@command("acl|load", arity=2, flags=_ACL)
def acl_load(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL LOAD -> Redis's "not configured to use an ACL file" error."""
    raise CommandError(msgs.ACL_NO_FILE)


@command("acl|save", arity=2, flags=_ACL)
def acl_save(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL SAVE -> Redis's "not configured to use an ACL file" error."""
    raise CommandError(msgs.ACL_NO_FILE)


_ACL_HELP = [
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
]


@command("acl|help", arity=2, flags=("loading", "stale"))
def acl_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL HELP -> help lines."""
    return [Status(line) for line in _ACL_HELP]
