"""Redis 7.0 Functions for the engine: libraries, FUNCTION LOAD's engine part, FCALL's runtime,
and FUNCTION DUMP / RESTORE payloads.

One :class:`FunctionRuntime` per engine (created on first use by :func:`functions_for`) owns a
Lua 5.1 state of its own, apart from EVAL's (as in Redis: SCRIPT FLUSH does not touch functions,
FUNCTION FLUSH starts a fresh state), and the loaded libraries. Every method runs under the
engine lock.

A library is its code (with the ``#!lua name=<lib>`` line). Loading runs the code once with
only ``redis.register_function``, ``redis.log`` and the ``redis`` constants visible (the
sandbox's ``load_library``); each registered function keeps its callback in the Lua state. A
library is persisted as the ``FUNCTION LOAD`` that created it (the AOF logs the command, an AOF
rewrite writes one ``FUNCTION LOAD`` per library, :func:`rewrite_commands`).

The DUMP payload is Redis 7.0's: per library the RDB opcode ``FUNCTION2`` (245) and the code as
an RDB string (LZF-compressed when that saves space, as Redis does with ``rdbcompression yes``),
then the RDB version (10, two bytes little-endian) and the CRC-64 of all that (8 bytes
little-endian).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from streamworker.engine.crc64 import crc64_bytes
from streamworker.engine.errors import CommandError
from streamworker.engine.protocol import parse_inline_args
from streamworker.engine.rdb.primitives import RdbFormatError, Reader, save_string
from streamworker.engine.scripting import Script, ScriptRuntime

if TYPE_CHECKING:
    from collections.abc import Sequence

    from streamworker.engine.context import Ctx
    from streamworker.engine.core import Engine
    from streamworker.engine.replies import Reply

__all__ = [
    "ENGINE_NAME",
    "Function",
    "FunctionRuntime",
    "Library",
    "LibraryCtx",
    "dump_payload",
    "functions_for",
    "rewrite_commands",
]

ENGINE_NAME: Final = "LUA"
"""The one function engine (FUNCTION LIST's ``engine``, FUNCTION STATS's ``engines``)."""

LOAD_TIMEOUT_S: Final = 0.5
"""How long a library's code may run at FUNCTION LOAD (Redis's LOAD_TIMEOUT_MS)."""

_RDB_VERSION: Final = 10
_OPCODE_FUNCTION2: Final = 245
_OPCODE_FUNCTION_PRE_GA: Final = 246

_BAD_NAME: Final = (
    "ERR Library names can only contain letters, numbers, or underscores(_) and must be at "
    "least one character long"
)
_NAME_CHARS: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class Function:
    """A registered function: ``name`` (as registered), ``description`` (None if not given),
    ``flags`` (canonical names in Redis's order) and ``script`` (what the runtime runs: its
    ``sha`` is the name, as errors report it)."""

    __slots__ = ("description", "flags", "library", "name", "script")

    def __init__(
        self,
        name: bytes,
        description: bytes | None,
        flags: tuple[str, ...],
        fn: Any,
        library: Library,
    ) -> None:
        self.name = name
        self.description = description
        self.flags = flags
        self.library = library
        self.script = Script(name.decode("utf-8", "surrogateescape"), b"", frozenset(flags), fn)


class Library:
    """A loaded library: its ``name``, full ``code`` and ``functions`` in registration order."""

    __slots__ = ("code", "functions", "name")

    def __init__(self, name: bytes, code: bytes) -> None:
        self.name = name
        self.code = code
        self.functions: dict[bytes, Function] = {}


class LibraryCtx:
    """A set of libraries and the function index over them (names case-insensitive, as
    Redis's functions dict). FUNCTION RESTORE loads into a fresh one before joining."""

    __slots__ = ("functions", "libraries")

    def __init__(self) -> None:
        self.libraries: dict[bytes, Library] = {}
        self.functions: dict[bytes, Function] = {}

    def link(self, lib: Library) -> None:
        self.libraries[lib.name] = lib
        for f in lib.functions.values():
            self.functions[f.name.lower()] = f

    def unlink(self, lib: Library) -> None:
        del self.libraries[lib.name]
        for f in lib.functions.values():
            self.functions.pop(f.name.lower(), None)

    def function_count(self) -> int:
        return len(self.functions)


def parse_metadata(code: bytes) -> tuple[bytes, bytes, bytes]:
    """``(engine, library name, code after the shebang line)``; CommandError with Redis's
    texts for missing or malformed metadata."""
    if not code.startswith(b"#!"):
        raise CommandError("ERR Missing library metadata")
    # Redis reads the line as a C string: a NUL before the line feed ends it.
    end = code.find(b"\n")
    nul = code.find(b"\0")
    if end < 0 or (0 <= nul < end):
        raise CommandError("ERR Invalid library metadata")
    parts = parse_inline_args(code[:end])
    if not parts:
        raise CommandError("ERR Invalid library metadata")
    engine = parts[0][2:]
    name: bytes | None = None
    for part in parts[1:]:
        if part[:5].lower() == b"name=":
            if name is not None:
                raise CommandError(
                    "ERR Invalid metadata value, name argument was given multiple times"
                )
            name = part[5:]
            continue
        raise CommandError("ERR Invalid metadata value given: " + _text(part))
    if name is None:
        raise CommandError("ERR Library name was not given")
    return engine, name, code[end:]


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _valid_name(name: bytes) -> bool:
    return bool(name) and all(c in _NAME_CHARS for c in name)


class FunctionRuntime(ScriptRuntime):
    """The functions' Lua state, the loaded libraries (:attr:`current`) and FCALL."""

    functions_mode = True

    def __init__(self, engine: Engine) -> None:
        self.current = LibraryCtx()
        self._load_deadline = 0.0
        self.caller_argv: Sequence[bytes] = ()
        super().__init__(engine)

    def _load_expired(self) -> bool:
        return self._load_deadline > 0 and time.monotonic() > self._load_deadline

    # -- libraries ---------------------------------------------------------------------------

    def create(
        self, code: bytes, replace: bool, ctx: LibraryCtx | None = None, timeout_s: float = 0.0
    ) -> bytes:
        """FUNCTION LOAD's work: compile and run ``code``, link the library into ``ctx`` (the
        current libraries by default) and return its name. ``replace`` lets it replace a
        library of the same name. ``timeout_s`` bounds the run (0: no bound, as when the AOF
        loads). Nothing changes on failure (CommandError with Redis's text)."""
        target = self.current if ctx is None else ctx
        engine, name, body = parse_metadata(code)
        if not _valid_name(name):
            raise CommandError(_BAD_NAME)
        if engine.lower() != ENGINE_NAME.lower().encode():
            raise CommandError(f"ERR Engine '{_text(engine)}' not found")
        old = target.libraries.get(name)
        if old is not None and not replace:
            raise CommandError(f"ERR Library '{_text(name)}' already exists")
        lib = Library(name, code)
        if old is not None:
            target.unlink(old)
        try:
            self._run_library(lib, body, timeout_s)
            for lname in lib.functions:
                if lname.lower() in target.functions:
                    raise CommandError(f"ERR Function {_text(lname)} already exists")
        except CommandError:
            if old is not None:
                target.link(old)
            raise
        target.link(lib)
        return name

    def _run_library(self, lib: Library, body: bytes, timeout_s: float) -> None:
        assert self._load_library is not None
        if body[1:2] == b"\x1b":
            # Redis's Lua lexes bytecode as text; the space keeps it from loading as binary.
            body = body[:1] + b" " + body[1:]
        self._load_deadline = time.monotonic() + timeout_s if timeout_s > 0 else 0.0
        try:
            ok, res = self._load_library(body)
        finally:
            self._load_deadline = 0.0
        if not ok:
            raise CommandError("ERR " + _text(res))
        n = len(res)
        if n == 0:
            raise CommandError("ERR No functions registered")
        for i in range(1, n + 1):
            entry = res[i]
            fname: bytes = entry[1]
            flags = tuple(_text(f) for f in entry[3].split(b",")) if entry[3] else ()
            desc = entry[4] if entry[4] is not False else None
            lib.functions[fname] = Function(fname, desc, flags, entry[2], lib)

    def delete(self, name: bytes) -> None:
        """FUNCTION DELETE: remove library ``name``; CommandError if there is none."""
        lib = self.current.libraries.get(name)
        if lib is None:
            raise CommandError("ERR Library not found")
        self.current.unlink(lib)

    def flush_all(self) -> None:
        """FUNCTION FLUSH: forget every library and start a fresh Lua state."""
        self.current = LibraryCtx()
        self._new_state()

    def find(self, name: bytes) -> Function | None:
        """The function called ``name`` (any case), or None."""
        return self.current.functions.get(name.lower())

    # -- DUMP / RESTORE ----------------------------------------------------------------------

    def restore(self, payload: bytes, policy: str) -> None:
        """FUNCTION RESTORE with ``policy`` ``flush``/``append``/``replace``; all or nothing."""
        if not verify_payload(payload):
            raise CommandError("ERR DUMP payload version or checksum are wrong")
        staged = LibraryCtx()
        for code in _payload_codes(payload):
            self.create(code, False, staged)
        if policy == "flush":
            self.current = staged
            return
        self._join(staged, policy == "replace")

    def _join(self, staged: LibraryCtx, replace: bool) -> None:
        current = self.current
        replaced: list[Library] = []
        for name in staged.libraries:
            old = current.libraries.get(name)
            if old is None:
                continue
            if not replace:
                self._relink(replaced)
                raise CommandError(f"ERR Library {_text(name)} already exists")
            current.unlink(old)
            replaced.append(old)
        for f in staged.functions.values():
            if f.name.lower() in current.functions:
                self._relink(replaced)
                raise CommandError(f"ERR Function {_text(f.name)} already exists")
        for lib in staged.libraries.values():
            current.link(lib)

    def _relink(self, libs: list[Library]) -> None:
        for lib in libs:
            self.current.link(lib)

    # -- FCALL -------------------------------------------------------------------------------

    def call(
        self,
        caller: Ctx,
        fn: Function,
        argv: Sequence[bytes],
        keys: Sequence[bytes],
        args: Sequence[bytes],
        ro: bool,
    ) -> Reply:
        """Run ``fn`` with ``keys``/``args`` for ``caller`` (``argv``: the FCALL, for FUNCTION
        STATS); its reply (CommandError on failure)."""
        self.caller_argv = argv
        try:
            return self.run(caller, fn.script, keys, args, ro)
        finally:
            self.caller_argv = ()

    def memory_estimate(self) -> int:
        """Roughly what Redis's ``used_memory_functions`` counts: the libraries' code and
        names and the functions' names and descriptions, plus per-item overhead."""
        total = 184  # what an empty registry reports on Redis 7.0
        for lib in self.current.libraries.values():
            total += 64 + len(lib.code) + len(lib.name)
            for f in lib.functions.values():
                total += 96 + len(f.name) + len(f.description or b"")
        return total

    def lua_memory(self) -> int:
        """The Lua state's heap in bytes (``used_memory_vm_functions``)."""
        kb = self.lua.eval("collectgarbage('count')")
        return int(float(kb) * 1024)


def functions_for(engine: Engine) -> FunctionRuntime:
    """The engine's FunctionRuntime, created on first use (needs the engine lock held)."""
    runtime = engine.functions
    if runtime is None:
        runtime = FunctionRuntime(engine)
        engine.functions = runtime
    return runtime  # type: ignore[no-any-return]


def rewrite_commands(engine: Engine) -> Iterator[list[bytes]]:
    """One ``FUNCTION LOAD <code>`` per library: how an AOF rewrite keeps the functions."""
    runtime = engine.functions
    if runtime is None:
        return
    for lib in runtime.current.libraries.values():
        yield [b"FUNCTION", b"LOAD", lib.code]


# --- the payload -------------------------------------------------------------------------------


def dump_payload(libraries: Sequence[Library]) -> bytes:
    """FUNCTION DUMP's payload for ``libraries`` (see the module doc)."""
    out = bytearray()
    for lib in libraries:
        out.append(_OPCODE_FUNCTION2)
        out += save_string(lib.code)
    out += _RDB_VERSION.to_bytes(2, "little")
    out += crc64_bytes(out)
    return bytes(out)


def verify_payload(payload: bytes) -> bool:
    """Redis's verifyDumpPayload: long enough, an RDB version it reads, a matching CRC-64."""
    if len(payload) < 10:
        return False
    version = int.from_bytes(payload[-10:-8], "little")
    if version > _RDB_VERSION:
        return False
    return crc64_bytes(payload[:-8]) == payload[-8:]


def _payload_codes(payload: bytes) -> Iterator[bytes]:
    # The libraries' codes, up to the 10-byte footer.
    pos = 0
    limit = len(payload) - 10
    while pos < limit:
        kind = payload[pos]
        pos += 1
        if kind == _OPCODE_FUNCTION_PRE_GA:
            code, pos = _pre_ga_library(payload, pos)
            yield code
            continue
        if kind != _OPCODE_FUNCTION2:
            raise CommandError("ERR given type is not a function")
        code, pos = _string_or(payload, pos, "Failed loading library payload")
        yield code


def _string_or(payload: bytes, pos: int, what: str) -> tuple[bytes, int]:
    reader = Reader(payload, pos)
    try:
        return reader.string(), reader.pos
    except RdbFormatError:
        raise CommandError("ERR " + what) from None


def _pre_ga_library(payload: bytes, pos: int) -> tuple[bytes, int]:
    # Redis 7.0 release candidates' format: name, engine, [description], code; 7.0 rebuilds
    # the "#!<engine> name=<name>" line from them (as C strings: a NUL ends each).
    name, pos = _string_or(payload, pos, "Failed loading library name")
    engine, pos = _string_or(payload, pos, "Failed loading engine name")
    reader = Reader(payload, pos)
    try:
        has_desc = reader.length()
    except RdbFormatError:
        raise CommandError("ERR Failed loading library description indicator") from None
    pos = reader.pos
    if has_desc:
        _, pos = _string_or(payload, pos, "Failed loading library description")
    blob, pos = _string_or(payload, pos, "Failed loading library blob")
    parts = [x.split(b"\0", 1)[0] for x in (engine, name, blob)]
    return b"#!%b name=%b\n%b" % tuple(parts), pos
