"""Scripting commands: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT (LOAD, EXISTS, FLUSH,
KILL, DEBUG, HELP). The Lua runtime is :mod:`streamworker.engine.scripting`.

Registered only when Lua 5.1 is available (``lupa.lua51``): without it these commands are
unknown, as on a server built without scripting, and clients that probe with SCRIPT EXISTS
(streamworker's worker does) turn their Lua features off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import OK, Status
from streamworker.engine.scripting import lua_available, runtime_for

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.core import Engine
    from streamworker.engine.replies import Reply

_EVAL_FLAGS = ("noscript", "stale", "skip-monitor", "no-mandatory-keys", "movablekeys")
_EVAL_RO_FLAGS = ("readonly", *_EVAL_FLAGS)

_SCRIPT_HELP = (
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
)


def _eval_generic(ctx: Ctx, args: list[bytes], by_sha: bool, read_only: bool) -> Reply:
    # Redis's evalGenericCommand: the sha's length, then numkeys, then the cache.
    if by_sha and len(args[0]) != 40:
        raise CommandError(msgs.NOSCRIPT)
    numkeys = to_int(args[1])
    if numkeys > len(args) - 2:
        raise CommandError(msgs.EVAL_NUMKEYS_TOO_BIG)
    if numkeys < 0:
        raise CommandError(msgs.EVAL_NUMKEYS_NEGATIVE)
    runtime = runtime_for(ctx.engine)
    if by_sha:
        script = runtime.get(args[0])
        if script is None:
            raise CommandError(msgs.NOSCRIPT)
    else:
        script = runtime.load(args[0])
    split = 2 + numkeys
    engine = ctx.engine
    errors_before = engine.stats_errors + engine.stats_rejected
    reply = runtime.run(ctx, script, args[2:split], args[split:], read_only)
    return script_reply(ctx, errors_before, reply)


def script_reply(ctx: Ctx, errors_before: int, reply: Reply) -> Reply:
    """The reply of an EVAL or FCALL whose script ran (``errors_before``: the engine's error
    and rejection counts before it). An error the script made itself is raised, for the core to
    count as the call's; one passed on from ``redis.call`` was counted when that command failed:
    Redis replies it without counting it again, yet the call failed (commandstats)."""
    if type(reply) is not CommandError:
        return reply
    if not _counted_in_script(ctx.engine, errors_before, reply):
        raise reply
    spec = ctx.engine.table.get(ctx.argv[0].lower())
    if spec is not None:
        spec.failed_calls += 1
    return reply


def _counted_in_script(engine: Engine, errors_before: int, reply: CommandError) -> bool:
    # An error the script got from redis.call/pcall was counted when that command failed;
    # Redis does not count it again when the script passes it on (pcall's result returned, or
    # redis.call's error with the script's " script: ..." suffix). Errors the script made
    # itself (redis.error_reply, {err=...}, a Lua runtime error) are counted as the EVAL's.
    if engine.stats_errors + engine.stats_rejected == errors_before:
        return False
    inner = engine.last_error_text
    return reply.text == inner or reply.text.startswith(inner + " script: ")


if lua_available():

    @command("eval", arity=-3, flags=_EVAL_FLAGS)
    def eval_(ctx: Ctx, args: list[bytes]) -> Reply:
        """EVAL script numkeys [key ...] [arg ...] -> the script's reply (cached by sha1)."""
        return _eval_generic(ctx, args, by_sha=False, read_only=False)

    @command("evalsha", arity=-3, flags=_EVAL_FLAGS)
    def evalsha(ctx: Ctx, args: list[bytes]) -> Reply:
        """EVALSHA sha1 numkeys [key ...] [arg ...] -> the cached script's reply; NOSCRIPT."""
        return _eval_generic(ctx, args, by_sha=True, read_only=False)

    @command("eval_ro", arity=-3, flags=_EVAL_RO_FLAGS)
    def eval_ro(ctx: Ctx, args: list[bytes]) -> Reply:
        """EVAL_RO: EVAL where write commands are refused."""
        return _eval_generic(ctx, args, by_sha=False, read_only=True)

    @command("evalsha_ro", arity=-3, flags=_EVAL_RO_FLAGS)
    def evalsha_ro(ctx: Ctx, args: list[bytes]) -> Reply:
        """EVALSHA_RO: EVALSHA where write commands are refused."""
        return _eval_generic(ctx, args, by_sha=True, read_only=True)

    @command("script|load", arity=3, flags=("noscript", "stale"))
    def script_load(ctx: Ctx, args: list[bytes]) -> Reply:
        """SCRIPT LOAD script -> its sha1 (compiled and cached, not run)."""
        return runtime_for(ctx.engine).load(args[0]).sha.encode()

    @command("script|exists", arity=-3, flags=("noscript",))
    def script_exists(ctx: Ctx, args: list[bytes]) -> Reply:
        """SCRIPT EXISTS sha1 [sha1 ...] -> 1/0 per sha1 (any case)."""
        runtime = ctx.engine.scripting
        if runtime is None:
            return [0] * len(args)
        return [1 if runtime.get(sha) is not None else 0 for sha in args]

    @command("script|flush", arity=-2, flags=("noscript",))
    def script_flush(ctx: Ctx, args: list[bytes]) -> Reply:
        """SCRIPT FLUSH [ASYNC|SYNC] -> OK; forgets every script (a fresh Lua state)."""
        if len(args) > 1 or (args and args[0].lower() not in (b"sync", b"async")):
            raise CommandError(msgs.SCRIPT_FLUSH_OPTION)
        runtime = ctx.engine.scripting
        if runtime is not None:
            runtime.flush()
        return OK

    @command("script|kill", arity=2, flags=("noscript", "allow-busy"))
    def script_kill(ctx: Ctx, args: list[bytes]) -> Reply:
        """SCRIPT KILL -> NOTBUSY: a command runs only when no script does (one lock).

        A transport that receives SCRIPT KILL while a script holds the engine lock can stop
        it with ``engine.scripting.request_kill()``."""
        raise CommandError(msgs.NOTBUSY)

    @command("script|debug", arity=3, flags=("noscript",))
    def script_debug(ctx: Ctx, args: list[bytes]) -> Reply:
        """SCRIPT DEBUG NO -> OK; YES/SYNC (the Lua debugger) are not supported."""
        mode = args[0].lower()
        if mode == b"no":
            return OK
        if mode in (b"yes", b"sync"):
            raise CommandError(msgs.SCRIPT_DEBUG_UNSUPPORTED)
        raise CommandError(msgs.SCRIPT_DEBUG_OPTION)

    @command("script|help", arity=2, flags=("loading", "stale"))
    def script_help(ctx: Ctx, args: list[bytes]) -> Reply:
        """SCRIPT HELP -> the help lines."""
        return [Status(line) for line in _SCRIPT_HELP]
