"""Redis 7.0 Functions: FUNCTION (LOAD, DELETE, LIST, FLUSH, STATS, KILL, DUMP, RESTORE, HELP),
FCALL and FCALL_RO. The libraries and the Lua state are :mod:`streamworker.engine.functions`.

Registered only when Lua 5.1 is available, as the scripting commands are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands.scripting import script_reply
from streamworker.engine.errors import CommandError
from streamworker.engine.functions import (
    ENGINE_NAME,
    LOAD_TIMEOUT_S,
    FunctionRuntime,
    dump_payload,
    functions_for,
)
from streamworker.engine.keyspace import glob_match
from streamworker.engine.numbers import parse_int
from streamworker.engine.replies import NULL_BULK, OK, Map, SetReply, Status
from streamworker.engine.scripting import lua_available

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_FCALL_FLAGS = (
    "noscript",
    "skip-monitor",
    "may-replicate",
    "no-mandatory-keys",
    "stale",
    "movablekeys",
)
_FCALL_RO_FLAGS = (
    "noscript",
    "skip-monitor",
    "no-mandatory-keys",
    "stale",
    "readonly",
    "movablekeys",
)

_FUNCTION_HELP = (
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _syntax_error(ctx: Ctx) -> CommandError:
    # addReplySubcommandSyntaxError: the subcommand as typed, the container in upper case.
    argv = ctx.argv
    return CommandError(
        msgs.unknown_subcommand_or_arity(_text(argv[1][:128]), _text(argv[0]).upper())
    )


def stats_reply(runtime: FunctionRuntime | None) -> Reply:
    """FUNCTION STATS: the running function (name, command, duration_ms) or null, and the
    engines with their library and function counts."""
    running: Reply = NULL_BULK
    libs = funcs = 0
    if runtime is not None:
        if runtime.running:
            running = Map(
                [
                    (b"name", runtime.running_name.encode("utf-8", "surrogateescape")),
                    (b"command", list(runtime.caller_argv)),
                    (b"duration_ms", int(runtime.running_for_s * 1000)),
                ]
            )
        libs = len(runtime.current.libraries)
        funcs = runtime.current.function_count()
    engines = Map(
        [
            (
                ENGINE_NAME.encode(),
                Map([(b"libraries_count", libs), (b"functions_count", funcs)]),
            )
        ]
    )
    return Map([(b"running_script", running), (b"engines", engines)])


def _fcall(ctx: Ctx, args: list[bytes], read_only: bool) -> Reply:
    runtime = functions_for(ctx.engine)
    fn = runtime.find(args[0])
    if fn is None:
        raise CommandError("ERR Function not found")
    numkeys = parse_int(args[1])
    if numkeys is None:
        raise CommandError("ERR Bad number of keys provided")
    if numkeys > len(args) - 2:
        raise CommandError("ERR Number of keys can't be greater than number of args")
    if numkeys < 0:
        raise CommandError("ERR Number of keys can't be negative")
    split = 2 + numkeys
    engine = ctx.engine
    errors_before = engine.stats_errors + engine.stats_rejected
    reply = runtime.call(ctx, fn, ctx.argv, args[2:split], args[split:], read_only)
    return script_reply(ctx, errors_before, reply)  # counted as EVAL's


if lua_available():

    @command("fcall", arity=-3, flags=_FCALL_FLAGS)
    def fcall(ctx: Ctx, args: list[bytes]) -> Reply:
        """FCALL function numkeys [key ...] [arg ...] -> the function's reply."""
        return _fcall(ctx, args, read_only=False)

    @command("fcall_ro", arity=-3, flags=_FCALL_RO_FLAGS)
    def fcall_ro(ctx: Ctx, args: list[bytes]) -> Reply:
        """FCALL_RO: FCALL of a ``no-writes`` function; write commands are refused."""
        return _fcall(ctx, args, read_only=True)

    @command("function|load", arity=-3, flags=("write", "denyoom", "noscript"))
    def function_load(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION LOAD [REPLACE] code -> the library's name."""
        replace = False
        for word in args[:-1]:
            if word.lower() == b"replace":
                replace = True
                continue
            raise CommandError("ERR Unknown option given: " + _text(word))
        # Redis lifts the time limit for what it must obey (the AOF it loads).
        prop = ctx.engine.propagator
        timeout = 0.0 if prop is not None and not prop.active else LOAD_TIMEOUT_S
        return functions_for(ctx.engine).create(args[-1], replace, timeout_s=timeout)

    @command("function|delete", arity=3, flags=("write", "noscript"))
    def function_delete(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION DELETE library -> OK; ``Library not found``."""
        functions_for(ctx.engine).delete(args[0])
        return OK

    @command("function|list", arity=-2, flags=("noscript",))
    def function_list(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE] -> one map per library."""
        with_code = False
        pattern: bytes | None = None
        i = 0
        while i < len(args):
            word = args[i].lower()
            if not with_code and word == b"withcode":
                with_code = True
            elif pattern is None and word == b"libraryname":
                if i >= len(args) - 1:
                    raise CommandError("ERR library name argument was not given")
                i += 1
                pattern = args[i]
            else:
                raise CommandError("ERR Unknown argument " + _text(args[i]))
            i += 1
        runtime = ctx.engine.functions
        if runtime is None:
            return []
        out: list[Reply] = []
        for lib in runtime.current.libraries.values():
            if pattern is not None and not glob_match(pattern, lib.name, nocase=True):
                continue
            functions: list[Reply] = [
                Map(
                    [
                        (b"name", f.name),
                        (b"description", f.description if f.description is not None else NULL_BULK),
                        (b"flags", SetReply([Status(flag) for flag in f.flags])),
                    ]
                )
                for f in lib.functions.values()
            ]
            items: list[tuple[Reply, Reply]] = [
                (b"library_name", lib.name),
                (b"engine", ENGINE_NAME.encode()),
                (b"functions", functions),
            ]
            if with_code:
                items.append((b"library_code", lib.code))
            out.append(Map(items))
        return out

    @command("function|flush", arity=-2, flags=("write", "noscript"))
    def function_flush(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION FLUSH [ASYNC|SYNC] -> OK; every library is deleted."""
        if len(args) > 1:
            raise _syntax_error(ctx)
        if args and args[0].lower() not in (b"sync", b"async"):
            raise CommandError("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
        functions_for(ctx.engine).flush_all()
        return OK

    @command("function|stats", arity=2, flags=("noscript", "allow-busy"))
    def function_stats(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION STATS -> running_script (null: a command runs only when no function does)
        and the engines' counts. The RESP server answers it itself while a function runs."""
        return stats_reply(ctx.engine.functions)

    @command("function|kill", arity=2, flags=("noscript", "allow-busy"))
    def function_kill(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION KILL -> NOTBUSY here; the RESP server answers it while a function runs
        (``engine.functions.request_kill()``)."""
        raise CommandError(msgs.NOTBUSY)

    @command("function|dump", arity=2, flags=("noscript",))
    def function_dump(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION DUMP -> the payload of every library (Redis 7.0's format)."""
        runtime = ctx.engine.functions
        libs = list(runtime.current.libraries.values()) if runtime is not None else []
        return dump_payload(libs)

    @command("function|restore", arity=-3, flags=("write", "denyoom", "noscript"))
    def function_restore(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE] -> OK; all libraries or none."""
        if len(args) > 2:
            raise _syntax_error(ctx)
        policy = "append"
        if len(args) == 2:
            policy = args[1].lower().decode("latin-1")
            if policy not in ("append", "replace", "flush"):
                raise CommandError(
                    "ERR Wrong restore policy given, value should be either FLUSH, APPEND or "
                    "REPLACE."
                )
        functions_for(ctx.engine).restore(args[0], policy)
        return OK

    @command("function|help", arity=2, flags=("loading", "stale"))
    def function_help(ctx: Ctx, args: list[bytes]) -> Reply:
        """FUNCTION HELP -> the help lines."""
        return [Status(line) for line in _FUNCTION_HELP]
