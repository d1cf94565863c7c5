"""What the Lua libraries share: Lua 5.1's value conversions and luaL's argument checks.

:class:`LibraryBase` holds the Lua state and the two error callbacks every library raises
through: ``lua_error(msg)`` (``luaL_error``: the caller's position is prepended) and
``arg_error(n, extra)`` (``luaL_argerror``).
"""

from __future__ import annotations

import math
import re
import struct as _struct
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

try:
    from lupa import lua51 as _lua51
except ImportError:  # pragma: no cover - scripting checks availability first
    _lua51 = None

LuaError = Callable[[str], NoReturn]
ArgError = Callable[[int, str], NoReturn]


# --- Lua value helpers -------------------------------------------------------------------------

_DEC_RE = re.compile(
    rb"[ \t\n\v\f\r]*[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
    rb"|inf(?:inity)?|nan)[ \t\n\v\f\r]*\Z",
    re.IGNORECASE,
)
_HEX_RE = re.compile(rb"[ \t\n\v\f\r]*0[xX]([0-9a-fA-F]+)[ \t\n\v\f\r]*\Z")


def lua_tonumber(v: Any) -> float | int | None:
    """Lua 5.1's ``lua_tonumber``: numbers, and strings ``strtod`` reads whole (hex too)."""
    t = type(v)
    if t is int or t is float:
        return v  # type: ignore[no-any-return]
    if t is bytes:
        if _DEC_RE.match(v):
            return float(v)
        m = _HEX_RE.match(v)
        if m:
            return int(m.group(1), 16)
    return None


def lua_tostring(v: Any) -> bytes | None:
    """Lua 5.1's ``lua_tolstring``: strings, and numbers as ``%.14g``; None otherwise."""
    t = type(v)
    if t is bytes:
        return v  # type: ignore[no-any-return]
    if t is int or t is float:
        return number_text(v)
    return None


def number_text(v: float) -> bytes:
    """A Lua number as Lua 5.1 prints it (``%.14g``; glibc's inf/-inf/nan/-nan)."""
    if v != v:
        return b"-nan" if math.copysign(1.0, v) < 0 else b"nan"
    return b"%.14g" % v


def lua_type(v: Any) -> str:
    """The Lua type name of a value lupa handed to Python."""
    t = type(v)
    if t is bytes:
        return "string"
    if t is bool:
        return "boolean"
    if t is int or t is float:
        return "number"
    if v is None:
        return "nil"
    if _lua51 is not None:
        name = _lua51.lua_type(v)
        if name is not None:
            return str(name)
    # A Python object (redis.call, cjson.null...): a userdata to Lua.
    return "userdata"


def lua_typename(args: Sequence[Any], n: int) -> str:
    """The type of argument ``n`` (1-based) as luaL_typerror names it ("no value" if absent)."""
    if n > len(args):
        return "no value"
    return lua_type(args[n - 1])


def c_long(n: float) -> int:
    """C's ``(long)`` cast of a double on x86-64 (out of range: LONG_MIN)."""
    if n != n or n in (math.inf, -math.inf):
        return -(2**63)
    v = int(n)
    return v if -(2**63) <= v < 2**63 else -(2**63)


def items_by_index(items: list[Any]) -> dict[Any, Any]:
    """A Lua table's ``(key, value)`` pairs by key, for reading it as an array (boolean keys
    dropped: ``True == 1`` in Python, not in Lua)."""
    return {key: value for key, value in items if type(key) is not bool}


def to_float32(n: float) -> float:
    """``n`` rounded to a C float (out of range: +-inf, as the C cast gives)."""
    try:
        return float(_struct.unpack("<f", _struct.pack("<f", n))[0])
    except OverflowError:
        return math.copysign(math.inf, n)


class LibraryBase:
    """One library of one Lua state: the state, the error callbacks and luaL's checks."""

    def __init__(self, lua: Any, lua_error: LuaError, arg_error: ArgError) -> None:
        self._lua = lua
        self._error = lua_error
        self._argerror = arg_error

    # -- shared argument checks --------------------------------------------------------------

    def _checknumber(self, args: Sequence[Any], n: int, name_nil: bool = False) -> float:
        v = lua_tonumber(args[n - 1]) if n <= len(args) else None
        if v is None:
            got = "nil" if name_nil and n == len(args) + 1 else lua_typename(args, n)
            self._argerror(n, f"number expected, got {got}")
        return v

    def _checkinteger(self, args: Sequence[Any], n: int) -> int:
        return c_long(self._checknumber(args, n))

    def _checkstring(self, args: Sequence[Any], n: int, name_nil: bool = False) -> bytes:
        s = lua_tostring(args[n - 1]) if n <= len(args) else None
        if s is None:
            got = "nil" if name_nil and n == len(args) + 1 else lua_typename(args, n)
            self._argerror(n, f"string expected, got {got}")
        return s

    def _optinteger(self, args: Sequence[Any], n: int, default: int) -> int:
        if n > len(args) or args[n - 1] is None:
            return default
        return self._checkinteger(args, n)
