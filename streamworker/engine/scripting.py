"""Lua scripting for the engine (EVAL and friends): Redis 7.0's Lua 5.1 sandbox, on lupa.

One :class:`ScriptRuntime` per :class:`~streamworker.engine.core.Engine` (created on first use
by :func:`runtime_for`) owns a Lua 5.1 state (``lupa.lua51``), the script cache (sha1 ->
compiled chunk) and the client the scripts' commands run as. A script runs entirely under the
engine lock: nothing interleaves with it, as in Redis.

**Runaway scripts.** A count hook runs every 100,000 Lua instructions (a few ms). It calls the
engine's ``script_tick`` (the RESP server's busy mode, :mod:`.server`) and fails the script
once SCRIPT KILL was accepted. The script runs on the thread that received EVAL (the server's
event loop): the hook, not a second thread, is what answers other clients while it runs, so
no command ever runs beside a script and no lock is shared with another thread. Once the
script has run ``lua-time-limit`` ms the server's hook reads every other client's input and
answers ``-BUSY`` to each command, except SCRIPT KILL (:meth:`ScriptRuntime.request_kill`:
accepted before the script's first write, ``-UNKILLABLE`` after it, decided under one lock
with that first write) and SHUTDOWN NOSAVE, which ends the process without the script's
writes. A script stuck inside one command (not in Lua code) does not tick until the command
returns.

What a script sees is what Redis 7.0.15 sets up, checked against redis-server by the
differential tests:

* Globals: exactly Redis's 35 names (``redis``, ``KEYS``, ``ARGV``, ``string``, ``math``,
  ``table``, ``coroutine``, ``cjson``, ``bit``, ``struct``, ``cmsgpack``, the base functions Redis
  keeps, ``__redis__err__handler``); no ``os``/``io``/``debug``/``require``/``loadfile``/
  ``dofile``/``getfenv``. The global table and the library tables are read-only: assigning a
  global or a library field fails with ``Attempt to modify a readonly table``, reading an
  unknown global with ``Script attempted to access nonexistent global variable 'x'``. Lua 5.1
  has no read-only tables, so they are empty proxies (``__index`` to the real table, a failing
  ``__newindex``) and ``rawset``/``rawget``/``setmetatable``/``getmetatable``/``next``/
  ``pairs``/``ipairs`` see through them.
* ``redis.call``/``redis.pcall`` and the other API functions, ``math.random`` (Redis's own
  48-bit generator, its state kept across scripts), ``cjson``, ``bit``, ``struct`` and
  ``cmsgpack`` (:mod:`.lualibs`) are Python functions: to Lua they are C functions (so an error
  in ``return redis.call(...)`` still reports the caller's line), but ``type()`` says
  ``userdata`` where Redis says ``function``.
* Replies: Redis's conversion rules both ways, for ``redis.setresp(2)`` and ``(3)``; errors
  carry `` script: <sha1>, on @user_script:<line>.`` as Redis 7.0 appends them.

Redis Functions (:mod:`.functions`) run on a second runtime of this class in functions mode
(:attr:`ScriptRuntime.functions_mode`): its own Lua state, no KEYS/ARGV globals, a function
called as ``fn(keys, args)``, errors reported as ``script: <function>, on @user_function:<n>.``.

Every command a script runs goes through :meth:`Engine.call_from_script
<streamworker.engine.core.Engine.call_from_script>`.

Known differences from Redis 7.0.15 (each has a strict xfail in the differential tests): the API
and library functions are userdata to ``type()`` and to C functions that check for a function
(``table.foreach(t, redis.call)``); an error raised by a sandbox wrapper (``rawset`` on a
read-only table...) that the script tail-calls (``return rawset(...)``) reports no line; ``-0``
passed to Lua functions arrives as ``0``; RESP3 big numbers go out as bulk strings and verbatim
strings always as ``txt``; a NaN double prints ``nan`` where glibc prints ``-nan``; a reply
nested deeper than 200 levels is cut there (Redis: ~8000); SCRIPT DEBUG YES/SYNC (the Lua
debugger) is refused.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, NoReturn

from streamworker.engine import lualibs, msgs
from streamworker.engine.context import ClientState, Ctx
from streamworker.engine.errors import CommandError
from streamworker.engine.lua_bytecode import without_tail_calls
from streamworker.engine.replies import (
    NULL_BULK,
    OK,
    Double,
    Map,
    NullArray,
    NullBulk,
    SetReply,
    Status,
    Verbatim,
    format_double,
)
from streamworker.engine.shebang import parse_shebang, sha1hex

try:  # Redis embeds Lua 5.1: other versions differ in ways scripts notice (integers, goto...).
    from lupa import lua51 as _lua51
except ImportError:  # pragma: no cover - lupa always ships lua51 in the supported versions
    _lua51 = None

if TYPE_CHECKING:
    from streamworker.engine.core import Engine
    from streamworker.engine.replies import Reply

__all__ = [
    "LUA_UNAVAILABLE",
    "Script",
    "ScriptRuntime",
    "lua_available",
    "runtime_for",
    "sha1hex",
]

LUA_UNAVAILABLE: Final = (
    "Lua scripting needs lupa with Lua 5.1 (the lupa.lua51 module): pip install 'lupa>=2.0'"
)
"""Why scripting is unavailable when :func:`lua_available` is False."""

_log = logging.getLogger("streamworker.engine.scripting")

# Redis's LL_DEBUG .. LL_WARNING, as redis.log levels.
_LOG_LEVELS: Final = (logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING)

_LLONG_MIN: Final = -(2**63)

# Values unpacked onto the Lua stack at once when a script's reply is handed to Python; a
# bigger reply is read from its table (Lua 5.1 refuses to unpack ~8000 values).
_MAX_UNPACK: Final = 4000


def lua_available() -> bool:
    """Whether Lua 5.1 (``lupa.lua51``) can be loaded; without it EVAL & co are not registered."""
    return _lua51 is not None


class ScriptCallError(Exception):
    """Raised by a Python function called from Lua to raise a Lua error.

    ``value`` is what the Lua code catches: a Lua table (``{err=...}``, as ``redis.call`` raises)
    or a byte string (as ``luaL_error`` raises). lupa hands the exception object to Lua as a
    userdata; the sandbox turns it back into ``value`` wherever Lua code can see an error
    (the error handler, ``pcall``, ``xpcall``, ``coroutine.resume``).
    """

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


class Script:
    """A compiled script in the cache: its ``sha`` (lowercase hex), ``body``, the shebang
    ``flags`` (``None`` without a shebang: the "eval compatibility mode") and the Lua chunk."""

    __slots__ = ("body", "flags", "fn", "sha")

    def __init__(self, sha: str, body: bytes, flags: frozenset[str] | None, fn: Any) -> None:
        self.sha = sha
        self.body = body
        self.flags = flags
        self.fn = fn

    def __repr__(self) -> str:
        return f"Script({self.sha!r}, flags={self.flags!r})"


class _RunState:
    """The script being run (mutable: ``redis.setresp`` / ``redis.set_repl`` change it)."""

    __slots__ = ("allow_oom", "propagate", "read_only", "running", "sha", "started", "wrote")

    def __init__(self) -> None:
        self.sha = ""
        # Declared allow-oom: its writes run even when it started over maxmemory.
        self.allow_oom = False
        self.started = 0.0  # time.monotonic() when the script started
        self.read_only = False
        self.propagate = True
        self.running = False
        # A write command ran: SCRIPT KILL refuses from then on (UNKILLABLE), as Redis does.
        self.wrote = False


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _to_long_long(x: Any) -> int:
    """C's ``(long long)`` cast of a Lua number, as x86-64 does it (out of range: LLONG_MIN)."""
    if type(x) is int:
        return x if -(2**63) <= x < 2**63 else _LLONG_MIN
    if x != x or x in (math.inf, -math.inf):
        return _LLONG_MIN
    v = int(x)
    return v if -(2**63) <= v < 2**63 else _LLONG_MIN


def error_table_text(buf: bytes) -> bytes:
    """Redis's ``luaPushErrorBuff``: ``-CODE msg`` keeps its code, anything else gets ``ERR``;
    the message loses surrounding CR/LF. Returns the ``err`` field's text."""
    buf = buf.split(b"\0", 1)[0]
    if buf.startswith(b"-"):
        code, sep, msg = buf[1:].partition(b" ")
        if not sep:
            code, msg = b"ERR", buf[1:]
    else:
        code, msg = b"ERR", buf
    return code + b" " + msg.strip(b"\r\n")


# --- the Lua side ----------------------------------------------------------------------------


# The Lua side lives in lua/*.lua (package data), read once per process. sandbox.lua runs once
# per Lua state as chunk "=streamworker" (the error handler recognises its frames): it receives a
# table of Python functions and returns the functions Python calls. builders.lua builds reply
# tables in one call from Python (cheaper than a lupa table_from per level).
@functools.cache
def _lua_source(name: str) -> bytes:
    """The text of the engine's ``lua/<name>.lua``, read once."""
    return (
        resources.files("streamworker.engine").joinpath("lua").joinpath(f"{name}.lua").read_bytes()
    )


class ScriptRuntime:
    """The Lua state, script cache and script client of one engine.

    Not thread-safe by itself: every method runs under the engine lock (commands do).
    """

    functions_mode: bool = False
    """True for the Redis Functions state (:mod:`.functions`): the sandbox then has no
    KEYS/ARGV globals, runs ``fn(keys, args)`` and offers ``load_library``."""

    def __init__(self, engine: Engine) -> None:
        if _lua51 is None:
            raise RuntimeError(LUA_UNAVAILABLE)
        self.engine = engine
        # The client scripts' commands run as (Redis's lua_client): its own db and protocol.
        self.client = ClientState(0, engine.clock())
        # Redis's fake clients have no peer: the slow log shows their commands as from "?:0".
        self.client.addr = "?:0"
        self.ctx = Ctx(engine, self.client)
        self.client.ctx = self.ctx
        self.ctx.in_script = True
        # The context of the EVAL/FCALL running (or that ran last) a script.
        self.caller: Ctx | None = None
        self.scripts: dict[str, Script] = {}
        # math.random's generator lives outside the Lua state (SCRIPT FLUSH keeps it), one
        # per engine, shared by EVAL and functions, as Redis's is one per process.
        if engine.lua_rand is None:
            engine.lua_rand = lualibs.Rand48()
        self.rand: lualibs.Rand48 = engine.lua_rand
        self._st = _RunState()
        self._kill = False
        # Held by request_kill and by a script's redis.call until its first write: "has the
        # script written?" and "is a kill accepted?" are decided in one order, so an accepted
        # kill never follows a write and a write never follows an accepted kill.
        self._kill_lock = threading.Lock()
        self._run: Callable[..., Any]
        self._compile: Callable[..., Any]
        self._callsite: Callable[..., Any]
        self._clear_hook: Callable[[], None]
        self._load_library: Callable[..., Any] | None = None
        self._register_or_error: Callable[..., Any] | None = None
        self._lua_array: Callable[..., Any]
        self._lua_row: Callable[..., Any]
        self._lua_rows: Callable[..., Any]
        self.lua: Any = None
        self._new_state()

    # -- the Lua state -----------------------------------------------------------------------

    def _new_state(self) -> None:
        assert _lua51 is not None
        lua = _lua51.LuaRuntime(
            encoding=None,
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            attribute_filter=_deny_attributes,
        )
        self.lua = lua
        self._lua_array, self._lua_row, self._lua_rows = lua.execute(
            _lua_source("builders"), name="=streamworker"
        )
        libs = lualibs.Libraries(lua, self._lua_error, self._arg_error)
        api = {
            b"call": self._make_call(raise_errors=True),
            b"pcall": self._make_call(raise_errors=False),
            b"call_packed": _packed(self._make_call(raise_errors=True)),
            b"pcall_packed": _packed(self._make_call(raise_errors=False)),
            b"setresp": self._setresp,
            b"log": self._log,
            b"sha1hex": self._sha1hex,
            b"set_repl": self._set_repl,
            b"acl_check_cmd": self._acl_check_cmd,
            b"random": self._random,
            b"randomseed": self._randomseed,
            b"unwrap": _unwrap,
            b"tick": self._tick,
            b"untail": without_tail_calls,
            b"version": self.engine.redis_version.encode(),
            b"version_num": _version_num(self.engine.redis_version),
            b"cjson": libs.cjson,
            b"bit": libs.bit,
            b"struct": libs.struct,
            b"cmsgpack": libs.cmsgpack,
            b"functions": self.functions_mode,
            b"load_expired": self._load_expired,
            b"register_function": self._register_function,
        }
        returned = lua.execute(_lua_source("sandbox"), lua.table_from(api), name="=streamworker")
        self._run, self._compile, self._callsite, self._clear_hook = returned[:4]
        if self.functions_mode:
            self._load_library, self._register_or_error = returned[4:6]
        # Recompile the cached scripts in the new state (SCRIPT FLUSH clears the cache first).
        for script in self.scripts.values():
            script.fn = self._compile_chunk(script)

    def _register_function(self, *args: Any) -> None:
        # redis.register_function (functions state only): the sandbox does the work and
        # returns an error text, raised here so that the error comes from a "C function".
        assert self._register_or_error is not None
        err = self._register_or_error(*args)
        if err is not False:
            raise ScriptCallError(self._err_table(err))

    def _load_expired(self) -> bool:
        # FUNCTION LOAD's time limit (only the functions state loads libraries).
        return False

    # -- cache -------------------------------------------------------------------------------

    def load(self, body: bytes) -> Script:
        """Compile ``body`` (if not cached) and return it; CommandError for a bad shebang or
        a syntax error, with Redis's texts."""
        sha = sha1hex(body)
        script = self.scripts.get(sha)
        if script is not None:
            return script
        offset, flags = parse_shebang(body)
        script = Script(sha, body, flags, None)
        script.fn = self._compile_chunk(script, offset)
        self.scripts[sha] = script
        return script

    def _compile_chunk(self, script: Script, offset: int | None = None) -> Any:
        if offset is None:
            offset = parse_shebang(script.body)[0]
        code = script.body[offset:]
        if code[:1] == b"\x1b":
            # Redis's Lua lexes bytecode as text; the space keeps it from loading as binary.
            code = b" " + code
        fn = self._compile(code)
        if type(fn) is tuple:
            raise CommandError(msgs.script_compile_error(_text(fn[1])))
        return fn

    def get(self, sha: bytes | str) -> Script | None:
        """The cached script named ``sha`` (any case), or None."""
        key = sha.decode("latin-1") if isinstance(sha, bytes) else sha
        return self.scripts.get(key.lower())

    def flush(self) -> None:
        """SCRIPT FLUSH: forget every script and start a fresh Lua state."""
        self.scripts.clear()
        self._new_state()

    # -- running -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a script is running now (always False outside the engine lock)."""
        return self._st.running

    @property
    def running_name(self) -> str:
        """The running script's sha1 (a function's name for FCALL); "" when none runs."""
        return self._st.sha if self._st.running else ""

    @property
    def written(self) -> bool:
        """Whether the running script has written (SCRIPT KILL is refused from then on)."""
        return self._st.wrote

    def oom_refuses_writes(self) -> bool:
        """Whether the running script's next denyoom command is refused when the command
        that started it found the engine over maxmemory: not once it has written, nor when
        it declared ``allow-oom`` (Redis 7.0's scriptVerifyOOM)."""
        st = self._st
        return not st.wrote and not st.allow_oom

    def request_kill(self) -> Reply:
        """SCRIPT KILL from outside the engine lock (thread-safe, lock-free): a transport that
        receives SCRIPT KILL while a script holds the lock calls this and sends the reply.

        OK: the running script stops within ~100,000 Lua instructions and fails with Redis's
        ``Script killed by user with SCRIPT KILL...``. NOTBUSY when no script runs;
        UNKILLABLE once the script has written (stopping it would leave half its writes).
        """
        st = self._st
        with self._kill_lock:
            if not st.running:
                return CommandError(msgs.NOTBUSY)
            if st.wrote:
                return CommandError(msgs.UNKILLABLE)
            self._kill = True
        return OK

    def run(
        self, caller: Ctx, script: Script, keys: Sequence[bytes], args: Sequence[bytes], ro: bool
    ) -> Reply:
        """Run ``script`` for ``caller`` with KEYS/ARGV; its reply (CommandError on failure).

        ``ro``: called as EVAL_RO/EVALSHA_RO. A script with a shebang and without
        ``no-writes`` is refused there; write commands are refused in read-only runs.
        """
        flags = script.flags
        repl = caller.engine.replication
        if repl.master_host is not None and not repl.applying:
            # Redis's scriptPrepareForRun on a replica: a script without a shebang is refused
            # whole while stale data is not served; one with flags as they say.
            if flags is None:
                if repl.stale:
                    return CommandError(msgs.MASTERDOWN)
            else:
                if repl.stale and "allow-stale" not in flags:
                    return CommandError(msgs.MASTERDOWN_SCRIPT)
                if "no-writes" not in flags and repl.read_only:
                    return CommandError(msgs.SCRIPT_WRITE_FLAG_ON_READONLY_REPLICA)
        if flags is not None and ro and "no-writes" not in flags:
            return CommandError(msgs.SCRIPT_RO_WITH_WRITE_FLAG)
        st = self._st
        st.sha = script.sha
        st.read_only = ro or (flags is not None and "no-writes" in flags)
        st.allow_oom = flags is not None and "allow-oom" in flags
        st.propagate = True
        st.wrote = False
        sctx = self.ctx
        sclient = self.client
        if sctx.db is not caller.db:
            sctx.select(caller.db.index)
        sclient.resp = 2
        # The script's commands run as the caller's ACL user (Redis's scriptCall); ACL LOG
        # describes the caller's connection.
        sclient.user = caller.client.user
        self.caller = caller
        sctx.in_multi = caller.in_multi or caller.client.in_multi
        new_array = self._new_array
        self._kill = False
        st.started = time.monotonic()
        st.running = True
        try:
            res = self._run(script.fn, new_array(keys), new_array(args), 100_000)
        except Exception as exc:  # a lupa-level failure (out of memory, an engine bug)
            self._clear_hook()
            return CommandError(msgs.script_run_failed(script.sha, exc))
        finally:
            st.running = False
            self._kill = False
            sctx.in_multi = False
        return self._reply(res, script.sha, sclient.resp == 3)

    def _new_array(self, items: Sequence[bytes]) -> Any:
        if len(items) <= _MAX_UNPACK:
            return self._lua_array(*items)
        return self.lua.table_from(items)

    def _tick(self) -> bool:
        # The count hook, every 100,000 instructions: the transport's busy work, then "was
        # SCRIPT KILL accepted?" (it may have been, by the busy work).
        tick = self.engine.script_tick
        if tick is not None and not self._kill:
            tick(time.monotonic() - self._st.started)
        return self._kill

    @property
    def running_for_s(self) -> float:
        """How long the running script has run (0.0 when none runs)."""
        st = self._st
        return time.monotonic() - st.started if st.running else 0.0

    def _reply(self, res: Any, sha: str, resp3: bool) -> Reply:
        tags: bytes = res[0]
        n: int = res[1]
        if tags == b"E":
            msg, src, line = res[2], res[3], res[4]
            text = msg
            if src is not False and line is not False:
                text += b" script: " + sha.encode() + b", on " + src + b":" + line + b"."
            return CommandError(_text(text))
        if tags == b"X":
            return CommandError(msgs.script_bad_reply(sha, _text(res[2])[:100]))
        if tags == b"s":
            return res[2]  # type: ignore[no-any-return]
        if tags == b"n":
            return _to_long_long(res[2])
        if tags == b"A":
            return [_flat_item(v, resp3) for v in res[2:]]
        if n > _MAX_UNPACK:
            table = res[2]
            vals: Sequence[Any] = [table[i] for i in range(1, n + 1)]
        else:
            vals = res[2:]
        if tags[0] == _A and not tags.translate(None, b"sn")[1:]:
            # A flat array of strings and numbers (the usual script reply): no tree to walk.
            items = vals[1:]
            return [
                v if t == _S else _to_long_long(v) for t, v in zip(tags[1:], items, strict=True)
            ]
        return _build_reply(tags, vals, resp3)

    # -- redis.* -----------------------------------------------------------------------------

    def _make_call(self, raise_errors: bool) -> Callable[..., Any]:
        call_from_script = self.engine.call_from_script
        sctx = self.ctx
        sclient = self.client
        st = self._st
        err_table = self._err_table
        conv2, conv3 = self._converters()
        writes = _write_commands(self.engine)
        no_args = msgs.SCRIPT_NO_ARGS.encode()
        bad_arg = msgs.SCRIPT_BAD_ARG_TYPE.encode()
        killed = msgs.SCRIPT_KILLED.encode()
        kill_lock = self._kill_lock
        runtime = self

        def call(*args: Any) -> Any:
            if not args:
                return _fail(err_table(no_args), raise_errors)
            argv = list(args)
            for a in argv:
                if type(a) is not bytes:
                    if not _convert_argv(argv):
                        return _fail(err_table(bad_arg), raise_errors)
                    break
            if st.wrote:
                reply = call_from_script(sctx, argv, st.read_only, st.propagate)
            else:
                with kill_lock:
                    if runtime._kill:
                        # Killed before its first write: nothing more runs (the count hook
                        # fails the script at its next instruction).
                        return _fail(err_table(killed), raise_errors)
                    reply = call_from_script(sctx, argv, st.read_only, st.propagate)
                    if sclient.last_cmd in writes:
                        st.wrote = True
            t = type(reply)
            if t is bytes or t is int:
                return reply
            if isinstance(reply, CommandError):
                text = reply.text.encode("utf-8", "surrogateescape")
                return _fail(err_table(error_table_text(b"-" + text), True), raise_errors)
            return conv3(reply) if sclient.resp == 3 else conv2(reply)

        return call

    def _err_table(self, text: bytes, stats_flag: bool = False) -> Any:
        fields: dict[bytes, Any] = {b"err": text}
        if stats_flag:
            fields[b"ignore_error_stats_update"] = True
        return self.lua.table_from(fields)

    def _converters(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """Reply -> Lua value, as Redis parses a command's RESP2 / RESP3 reply for Lua."""
        table_from = self.lua.table_from
        err_table = self._err_table
        lua_array = self._lua_array
        lua_row = self._lua_row
        lua_rows = self._lua_rows

        def array(v: Any, conv: Callable[[Any], Any]) -> Any:
            # Lists of strings/integers (most replies) and lists of such lists (XPENDING,
            # XINFO...) are built by one Lua call: far cheaper than a lupa table per level.
            if not v:
                return lua_array()
            t0 = type(v[0])
            if t0 is list or t0 is tuple:
                if len(v) == 1:
                    row = v[0]
                    for y in row:
                        ty = type(y)
                        if ty is not bytes and ty is not int:
                            return table_from([conv(row)])
                    if len(row) <= _MAX_UNPACK:
                        return lua_row(*row)
                    return table_from([conv(row)])
                head: list[Any] = [len(v)]
                vals: list[Any] = []
                for x in v:
                    tx = type(x)
                    if tx is not list and tx is not tuple:
                        return table_from([conv(x) for x in v])
                    for y in x:
                        ty = type(y)
                        if ty is not bytes and ty is not int:
                            return table_from([conv(x) for x in v])
                    head.append(len(x))
                    vals += x
                if len(head) + len(vals) <= _MAX_UNPACK:
                    return lua_rows(*head, *vals)
                return table_from([conv(x) for x in v])
            for x in v:
                tx = type(x)
                if tx is not bytes and tx is not int:
                    return table_from([conv(x) for x in v])
            return lua_array(*v) if len(v) <= _MAX_UNPACK else table_from(v)

        def status(v: Status) -> Any:
            return table_from({b"ok": v.text.encode("utf-8", "surrogateescape")})

        def error(v: CommandError) -> Any:
            text = v.text.encode("utf-8", "surrogateescape")
            return err_table(error_table_text(b"-" + text), True)

        def conv2(v: Any) -> Any:
            t = type(v)
            if t is bytes or t is int:
                return v
            if t is list or t is tuple:
                return array(v, conv2)
            if t is NullBulk or t is NullArray or v is None:
                return False
            if t is Status:
                return status(v)
            if t is Map:
                flat: list[Any] = []
                for k, x in v.items:
                    flat.append(conv2(k))
                    flat.append(conv2(x))
                return table_from(flat)
            if t is Double:
                return v.text if v.text is not None else format_double(v.value)
            if t is SetReply:
                return table_from([conv2(x) for x in v.items])
            if t is Verbatim:
                return v.text
            if t is bool:
                return int(v)
            if t is str:
                return v.encode("utf-8", "surrogateescape")
            if isinstance(v, CommandError):
                return error(v)
            if isinstance(v, int):
                return int(v)
            raise TypeError(f"cannot convert {t.__name__} reply for Lua")

        def conv3(v: Any) -> Any:
            t = type(v)
            if t is bytes or t is int:
                return v
            if t is list or t is tuple:
                return array(v, conv3)
            if t is NullBulk or t is NullArray or v is None:
                return None
            if t is Status:
                return status(v)
            if t is Map:
                return table_from({b"map": table_from({conv3(k): conv3(x) for k, x in v.items})})
            if t is Double:
                value = v.value if v.text is None else float(v.text)
                return table_from({b"double": value})
            if t is SetReply:
                return table_from({b"set": table_from({conv3(x): True for x in v.items})})
            if t is Verbatim:
                inner = table_from({b"format": b"txt", b"string": v.text})
                return table_from({b"verbatim_string": inner})
            if t is bool:
                return v
            if t is str:
                return v.encode("utf-8", "surrogateescape")
            if isinstance(v, CommandError):
                return error(v)
            if isinstance(v, int):
                return int(v)
            raise TypeError(f"cannot convert {t.__name__} reply for Lua")

        return conv2, conv3

    def _raise_table(self, text: str) -> NoReturn:
        raise ScriptCallError(self._err_table(text.encode()))

    def _setresp(self, *args: Any) -> None:
        if len(args) != 1:
            self._raise_table(msgs.SCRIPT_SETRESP_ARGS)
        resp = lualibs.lua_tonumber(args[0])
        if resp is None or resp not in (2, 3):
            self._raise_table(msgs.SCRIPT_SETRESP_VERSION)
        self.client.resp = int(resp)

    def _log(self, *args: Any) -> None:
        if len(args) < 2:
            self._raise_table(msgs.SCRIPT_LOG_ARGS)
        level = lualibs.lua_tonumber(args[0])
        if level is None:
            self._raise_table(msgs.SCRIPT_LOG_LEVEL_NOT_NUMBER)
        assert level is not None
        lvl = _to_long_long(level)
        if not 0 <= lvl <= 3:
            self._raise_table(msgs.SCRIPT_LOG_INVALID_LEVEL)
        parts = [p for p in (lualibs.lua_tostring(a) for a in args[1:]) if p is not None]
        _log.log(_LOG_LEVELS[lvl], "%s", _text(b" ".join(parts)))

    def _sha1hex(self, *args: Any) -> bytes:
        if len(args) != 1:
            self._raise_table(msgs.SCRIPT_SHA1HEX_ARGS)
        data = lualibs.lua_tostring(args[0]) or b""
        return sha1hex(data).encode()

    def _set_repl(self, *args: Any) -> None:
        if len(args) != 1:
            self._raise_table(msgs.SCRIPT_SET_REPL_ARGS)
        flags = _to_long_long(lualibs.lua_tonumber(args[0]) or 0)
        if flags & ~3:
            self._raise_table(msgs.SCRIPT_SET_REPL_FLAGS)
        # Only the append-only file is a propagation target here (no replicas).
        self._st.propagate = bool(flags & 1)

    def _acl_check_cmd(self, *args: Any) -> bool:
        if not args:
            self._raise_table(msgs.SCRIPT_NO_ARGS)
        argv = _redis_argv(args)
        if argv is None:
            self._raise_table(msgs.SCRIPT_BAD_ARG_TYPE)
        assert argv is not None
        table = self.engine.table
        spec = table.get(argv[0].lower())
        if spec is not None and len(argv) > 1 and spec.subcommands is not None:
            spec = spec.subcommands.get(argv[1].lower())
        if spec is None:
            self._raise_table(msgs.SCRIPT_ACL_INVALID_COMMAND)
        assert spec is not None
        user = self.client.user
        if user is None or user.unrestricted:
            return True
        return not self.engine.acl_check(user, spec, argv)[0]

    def _random(self, *args: Any) -> Any:
        # Redis's math.random: lua's own, with rand() replaced by its redisLrand48().
        r = (self.rand.next() % 2147483647) / 2147483647.0
        if not args:
            return r
        if len(args) == 1:
            u = self._check_int(args, 1)
            if u < 1:
                self._arg_error(1, "interval is empty")
            return math.floor(r * u) + 1
        if len(args) == 2:
            lo = self._check_int(args, 1)
            hi = self._check_int(args, 2)
            if lo > hi:
                self._arg_error(2, "interval is empty")
            return math.floor(r * (hi - lo + 1)) + lo
        return self._lua_error("wrong number of arguments")

    def _randomseed(self, *args: Any) -> None:
        self.rand.seed(self._check_int(args, 1))

    def _check_int(self, args: Sequence[Any], n: int) -> int:
        """luaL_checkint: a number (or numeric string), truncated to a C int."""
        value = lualibs.lua_tonumber(args[n - 1]) if len(args) >= n else None
        if value is None:
            got = lualibs.lua_typename(args, n)
            self._arg_error(n, f"number expected, got {got}")
        assert value is not None
        v = _to_long_long(value) & 0xFFFFFFFF
        return v - (1 << 32) if v >= 1 << 31 else v

    # -- raising Lua errors from Python -----------------------------------------------------

    def _lua_error(self, msg: str) -> NoReturn:
        """Raise ``msg`` as luaL_error does: prefixed with the calling Lua line."""
        where, _name, _what = self._callsite()
        raise ScriptCallError(where + msg.encode("utf-8", "surrogateescape"))

    def _arg_error(self, n: int, extra: str) -> NoReturn:
        """Raise luaL_argerror's ``bad argument #n to 'name' (extra)``."""
        where, name, what = self._callsite()
        fname = _text(name) if isinstance(name, bytes) else "?"
        if what == b"method":
            n -= 1
            if n == 0:
                msg = f"calling '{fname}' on bad self ({extra})"
                raise ScriptCallError(where + msg.encode("utf-8", "surrogateescape"))
        msg = f"bad argument #{n} to '{fname}' ({extra})"
        raise ScriptCallError(where + msg.encode("utf-8", "surrogateescape"))


def _write_commands(engine: Engine) -> frozenset[str]:
    names = set()
    for spec in engine.table.values():
        if "write" in spec.flags:
            names.add(spec.name)
        for sub in (spec.subcommands or {}).values():
            if "write" in sub.flags:
                names.add(sub.name)
    return frozenset(names)


def _deny_attributes(obj: Any, name: Any, is_setting: bool) -> Any:
    # Scripts must not reach Python objects' attributes (a function's __globals__...).
    raise AttributeError("access denied")


def _unwrap(obj: Any) -> Any:
    return obj.value if isinstance(obj, ScriptCallError) else None


def _packed(call: Callable[..., Any]) -> Callable[[Any, int], Any]:
    """redis.call taking its ``n`` arguments as one Lua table (the sandbox passes them so when
    there are more than lupa's call can take); nil holes stay None, rejected as Redis does."""

    def packed(table: Any, n: int) -> Any:
        get = table.__getitem__
        return call(*[get(i) for i in range(1, n + 1)])

    return packed


def _fail(table: Any, raise_errors: bool) -> Any:
    if raise_errors:
        raise ScriptCallError(table)
    return table


def _version_num(version: str) -> int:
    major, minor, patch = (int(p) for p in version.split("."))
    return (major << 16) | (minor << 8) | patch


def _convert_argv(argv: list[Any]) -> bool:
    """Turn redis.call's arguments into a command in place: strings as they are, numbers as
    ``%.17g`` (Redis's luaArgsToRedisArgv); False if another type is there."""
    for i, a in enumerate(argv):
        t = type(a)
        if t is bytes:
            continue
        if t is int and -(10**17) < a < 10**17:
            argv[i] = b"%d" % a  # what %.17g prints for these, faster
        elif t is int or t is float:
            argv[i] = b"%.17g" % a
        else:
            return False
    return True


def _redis_argv(args: tuple[Any, ...]) -> list[bytes] | None:
    """redis.call's arguments as a command (see :func:`_convert_argv`), None if invalid."""
    argv = list(args)
    return argv if _convert_argv(argv) else None


def _flat_item(v: Any, resp3: bool) -> Reply:
    t = type(v)
    if t is bytes:
        return v  # type: ignore[no-any-return]
    if t is bool:
        if resp3:
            return v  # type: ignore[no-any-return]
        return 1 if v else NULL_BULK
    return _to_long_long(v)


_S, _N, _T, _F, _NIL = b"s"[0], b"n"[0], b"T"[0], b"F"[0], b"N"[0]
_E, _O, _D, _B, _V = b"e"[0], b"o"[0], b"d"[0], b"b"[0], b"v"[0]
_A, _M, _SET = b"a"[0], b"m"[0], b"S"[0]


def _build_reply(tags: bytes, vals: Sequence[Any], resp3: bool) -> Reply:
    """Rebuild a script's reply from the Lua walk (Redis's luaReplyToRedisReply): one tag per
    value in depth-first order, containers followed by their items. Iterative: a container
    is finished when its last item arrives."""
    vi = 0
    # Open containers: [kind, items, remaining items]; maps count keys and values.
    stack: list[list[Any]] = []
    root: Reply = NULL_BULK
    for t in tags:
        value: Reply
        if t == _S:
            value = vals[vi]
            vi += 1
        elif t == _N:
            value = _to_long_long(vals[vi])
            vi += 1
        elif t in (_A, _M, _SET):
            n = vals[vi]
            vi += 1
            stack.append([t, [], 2 * n if t == _M else n])
            if n:
                continue
            value = _close(stack.pop())
        elif t == _T:
            value = True if resp3 else 1
        elif t == _F:
            value = False if resp3 else NULL_BULK
        elif t == _NIL:
            value = NULL_BULK
        elif t == _E:
            value = CommandError(_text(vals[vi]))
            vi += 1
        elif t == _O:
            value = Status(_text(vals[vi].replace(b"\r", b" ").replace(b"\n", b" ")))
            vi += 1
        elif t == _D:
            value = Double(float(vals[vi]))
            vi += 1
        elif t == _B:
            # RESP3 has a big-number type the engine's encoder lacks: a bulk string meanwhile.
            value = vals[vi].replace(b"\r", b" ").replace(b"\n", b" ")
            vi += 1
        elif t == _V:
            # Verbatim replies carry "txt" here whatever the script's format (encoder limit).
            value = Verbatim(vals[vi + 1])
            vi += 2
        else:
            raise ValueError(f"bad reply tag {chr(t)!r}")
        while True:
            if not stack:
                root = value
                break
            top = stack[-1]
            top[1].append(value)
            top[2] -= 1
            if top[2]:
                break
            value = _close(stack.pop())
    return root


def _close(container: list[Any]) -> Reply:
    kind, items, _ = container
    if kind == _A:
        return items  # type: ignore[no-any-return]
    if kind == _SET:
        return SetReply(items)
    return Map(list(zip(items[::2], items[1::2], strict=True)))


def runtime_for(engine: Engine) -> ScriptRuntime:
    """The engine's ScriptRuntime, created on first use (needs the engine lock held)."""
    runtime = engine.scripting
    if runtime is None:
        runtime = ScriptRuntime(engine)
        engine.scripting = runtime
    return runtime  # type: ignore[no-any-return]
