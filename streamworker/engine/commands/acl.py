"""The ACL command (users, rules, log, dry runs) over the user table of
:mod:`streamworker.engine.acl`, as redis-server 7.0 answers it.

ACL LOAD / ACL SAVE give Redis's "not configured to use an ACL file" error (the engine has
none). ACL categories are derived from the command table (the module that implements a
command and its flags), the way Redis's command tables assign them; see
:func:`streamworker.engine.acl.categories_of`.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from streamworker.engine import acl as model
from streamworker.engine import msgs
from streamworker.engine.acl import CATEGORIES, AclRuleError, categories_of, command_categories
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_str
from streamworker.engine.commands.connection import kill_client, log_denial
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_BULK, OK, Double, Map, SetReply, Status

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

__all__ = ["CATEGORIES", "categories_of", "command_categories", "log_denial"]

_ACL = ("admin", "noscript", "loading", "stale")

_REASONS = {
    model.DENIED_CMD: b"command",
    model.DENIED_KEY: b"key",
    model.DENIED_CHANNEL: b"channel",
    model.DENIED_AUTH: b"auth",
}


@command("acl|whoami", arity=2, flags=("noscript", "loading", "stale"))
def acl_whoami(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL WHOAMI -> the connection's user name."""
    name: bytes = ctx.client.user.name
    return name


@command("acl|users", arity=2, flags=_ACL)
def acl_users(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL USERS -> the user names, bytewise sorted."""
    return list(ctx.engine.acl.names())


@command("acl|list", arity=2, flags=_ACL)
def acl_list(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL LIST -> one ``user <name> <rules>`` line per user (Redis's config-file form)."""
    users = ctx.engine.acl
    out: list[Reply] = []
    for name in users.names():
        user = users.users[name]
        out.append(b"user " + name + b" " + user.describe(users.commands))
    return out


def _selector_fields(commands: model.Commands, sel: model.Selector) -> list[tuple[Reply, Reply]]:
    return [
        (b"commands", sel.describe_commands(commands).encode()),
        (b"keys", sel.describe_keys()),
        (b"channels", sel.describe_channels()),
    ]


@command("acl|getuser", arity=3, flags=_ACL)
def acl_getuser(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL GETUSER name -> map of flags, passwords, commands, keys, channels, selectors
    (Redis 7.0's shape); nil for an unknown name."""
    users = ctx.engine.acl
    user = users.get(args[0])
    if user is None:
        return NULL_BULK
    commands = users.commands
    fields: list[tuple[Reply, Reply]] = [
        (b"flags", SetReply([f.encode() for f in user.flag_names()])),
        (b"passwords", [p.encode() for p in user.passwords]),
    ]
    fields.extend(_selector_fields(commands, user.root))
    selectors: list[Reply] = [Map(_selector_fields(commands, s)) for s in user.selectors[1:]]
    fields.append((b"selectors", selectors))
    return Map(fields)


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
        raise CommandError(msgs.acl_unknown_category(to_str(args[0][:128])))
    commands = ctx.engine.acl.commands
    return [name.encode() for name in commands.order if name in commands.members[cat]]


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
    """ACL LOG [count|RESET] -> the newest ``count`` (default 10) denials, each a map of
    count, reason, context, object, username, age-seconds, client-info; RESET -> OK."""
    if len(args) > 1:
        raise CommandError(msgs.unknown_subcommand_or_arity(to_str(ctx.argv[1]), "ACL"))
    log = ctx.engine.acl.log
    count = 10
    if args:
        if args[0].lower() == b"reset":
            log.clear()
            return OK
        count = max(0, to_int(args[0]))
    now = int(time.time() * 1000)
    out: list[Reply] = []
    for entry in log[:count]:
        out.append(
            Map(
                [
                    (b"count", entry["count"]),
                    (b"reason", _REASONS[entry["reason"]]),
                    (b"context", entry["context"].encode()),
                    (b"object", entry["object"]),
                    (b"username", entry["username"]),
                    (b"age-seconds", Double((now - entry["ctime"]) / 1000)),
                    (b"client-info", entry["cinfo"].encode("utf-8", "surrogateescape")),
                ]
            )
        )
    return out


@command("acl|dryrun", arity=-4, flags=_ACL)
def acl_dryrun(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL DRYRUN user command [arg ...] -> OK when the user may run it, else a bulk string
    saying why; Redis's errors for an unknown user, command or arity."""
    engine = ctx.engine
    user = engine.acl.get(args[0])
    if user is None:
        raise CommandError(msgs.acl_user_not_found(to_str(args[0])))
    argv = args[1:]
    spec = engine.table.get(argv[0].lower())
    if spec is not None and spec.subcommands is not None and len(argv) >= 2:
        spec = spec.subcommands.get(argv[1].lower())
    if spec is None:
        raise CommandError(msgs.acl_command_not_found(to_str(argv[0])))
    n = len(argv)
    if n != spec.arity and (spec.arity > 0 or n < -spec.arity):
        raise CommandError(msgs.wrong_arity(spec.name))
    result, idx = engine.acl_check(user, spec, argv)
    if result == model.DENIED_CMD:
        return msgs.dryrun_denied_command(spec.name).encode()
    if result == model.DENIED_KEY:
        return msgs.dryrun_denied_key(to_str(argv[idx])).encode()
    if result == model.DENIED_CHANNEL:
        return msgs.dryrun_denied_channel(to_str(argv[idx])).encode()
    return OK


@command("acl|setuser", arity=-3, flags=_ACL)
def acl_setuser(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL SETUSER name [rule ...] -> OK; creates the user when missing. The rules apply all
    or nothing (Redis's errors name the first bad one). Subscribed clients of the user
    whose channels are no longer allowed are disconnected."""
    name = args[0]
    if model.has_spaces(name):
        raise CommandError(msgs.ACL_USERNAME_SPACES)
    engine = ctx.engine
    try:
        user, before = engine.acl.setuser(name, args[1:])
    except AclRuleError as exc:
        raise CommandError(msgs.acl_setuser_error(exc.reason)) from None
    if before is not None:
        _kill_pubsub_clients(ctx, user, before)
    engine.acl_changed()
    return OK


def _kill_pubsub_clients(ctx: Ctx, user: model.User, before: model.User) -> None:
    # Redis's ACLKillPubsubClientsIfNeeded: when the new channel rules are not a superset
    # of the old ones, the user's subscribers to a channel now refused are disconnected.
    if user.allows_all_channels():
        return
    upcoming = [c for s in user.selectors for c in s.channels]
    if not before.allows_all_channels() and all(
        c in upcoming for s in before.selectors for c in s.channels
    ):
        return

    engine = ctx.engine
    for client in list(engine.clients.values()):
        if client.user is not user or not client.pubsub:
            continue
        if any(not model.channel_in(upcoming, p, True) for p in client.sub_patterns) or any(
            not model.channel_in(upcoming, c, False)
            for c in (*client.sub_channels, *client.sub_shard)
        ):
            kill_client(engine, client, ctx.client)


@command("acl|deluser", arity=-3, flags=_ACL)
def acl_deluser(ctx: Ctx, args: list[bytes]) -> Reply:
    """ACL DELUSER name ... -> how many users were deleted (``default`` cannot be). The
    connections authenticated as a deleted user are closed (the caller's after its reply)."""
    if b"default" in args:
        raise CommandError(msgs.ACL_DEFAULT_NOT_REMOVABLE)

    engine = ctx.engine
    users = engine.acl
    deleted = 0
    for name in args:
        user = users.users.pop(name, None)
        if user is None:
            continue
        deleted += 1
        for client in list(engine.clients.values()):
            if client.user is user:
                client.user = users.default
                client.authenticated = False
                kill_client(engine, client, ctx.client)
    engine.acl_changed()
    return deleted


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
