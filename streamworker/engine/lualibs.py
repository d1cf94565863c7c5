"""The C libraries Redis 7.0 bundles into its Lua, reimplemented for :mod:`.scripting`.

``cjson`` (lua-cjson 2.1.0), ``bit`` (LuaBitOp), ``struct`` (Roberto Ierusalimschy's struct)
and ``cmsgpack`` (lua-cmsgpack 0.4.0), plus Redis's ``math.random`` generator and the Lua value
helpers the scripting runtime shares. Each library function is a Python function that lupa
exposes to Lua; it follows the C original's results and error texts (checked against
redis-server 7.0.15 by the differential tests). Errors are raised through the two callbacks a
:class:`Libraries` gets: ``lua_error(msg)`` (``luaL_error``: the caller's position is
prepended) and ``arg_error(n, extra)`` (``luaL_argerror``).
"""

from __future__ import annotations

import math
import re
import struct as _struct
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

try:
    from lupa import lua51 as _lua51
except ImportError:  # pragma: no cover - scripting checks availability first
    _lua51 = None

__all__ = [
    "CJSON_NULL",
    "Libraries",
    "Rand48",
    "lua_tonumber",
    "lua_tostring",
    "lua_typename",
]

LuaError = Callable[[str], NoReturn]
ArgError = Callable[[int, str], NoReturn]


class _CJsonNull:
    """``cjson.null``: a userdata to Lua that prints as Redis's NULL lightuserdata does."""

    __slots__ = ()

    def __str__(self) -> str:
        return "userdata: (nil)"

    def __repr__(self) -> str:
        return "cjson.null"


CJSON_NULL: Final = _CJsonNull()


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


# --- math.random ------------------------------------------------------------------------------


class Rand48:
    """Redis's ``redisLrand48``: the 48-bit linear congruential generator of ``lrand48``, with
    its state shared by every script (and seeded only by ``math.randomseed``)."""

    __slots__ = ("x",)

    def __init__(self) -> None:
        self.x = 0x1234ABCD330E

    def seed(self, value: int) -> None:
        """``srand48``: the seed's low 32 bits become the state's high bits."""
        self.x = ((value & 0xFFFFFFFF) << 16) | 0x330E

    def next(self) -> int:
        """The next 31-bit value."""
        self.x = (0x5DEECE66D * self.x + 0xB) & 0xFFFFFFFFFFFF
        return self.x >> 17


# --- the libraries ----------------------------------------------------------------------------


class Libraries:
    """The four library tables for one Lua state (``cjson``'s configuration lives here)."""

    def __init__(self, lua: Any, lua_error: LuaError, arg_error: ArgError) -> None:
        self._lua = lua
        self._error = lua_error
        self._argerror = arg_error
        self.cjson = self._cjson_table(_CJsonConfig())
        self.bit = lua.table_from(
            {
                b"tobit": self._tobit,
                b"tohex": self._tohex,
                b"bnot": self._bnot,
                b"band": self._bitop(lambda a, b: a & b),
                b"bor": self._bitop(lambda a, b: a | b),
                b"bxor": self._bitop(lambda a, b: a ^ b),
                b"lshift": self._shift(lambda b, n: b << n),
                b"rshift": self._shift(lambda b, n: b >> n),
                b"arshift": self._shift(lambda b, n: _signed32(b) >> n),
                b"rol": self._shift(lambda b, n: (b << n) | (b >> ((32 - n) & 31)) if n else b),
                b"ror": self._shift(lambda b, n: (b >> n) | (b << ((32 - n) & 31)) if n else b),
                b"bswap": self._bswap,
            }
        )
        self.struct = lua.table_from(
            {b"pack": self._struct_pack, b"unpack": self._struct_unpack, b"size": self._struct_size}
        )
        self.cmsgpack = lua.table_from(
            {
                b"pack": self._mp_pack,
                b"unpack": self._mp_unpack,
                b"unpack_one": self._mp_unpack_one,
                b"unpack_limit": self._mp_unpack_limit,
                b"_NAME": b"cmsgpack",
                b"_VERSION": b"lua-cmsgpack 0.4.0",
                b"_COPYRIGHT": b"Copyright (C) 2012, Salvatore Sanfilippo",
                b"_DESCRIPTION": b"MessagePack C implementation for Lua",
            }
        )

    # -- shared argument checks --------------------------------------------------------------

    def _checknumber(self, args: Sequence[Any], n: int, name_nil: bool = False) -> float:
        v = lua_tonumber(args[n - 1]) if n <= len(args) else None
        if v is None:
            got = "nil" if name_nil and n == len(args) + 1 else lua_typename(args, n)
            self._argerror(n, f"number expected, got {got}")
        return v

    def _checkinteger(self, args: Sequence[Any], n: int) -> int:
        return _c_long(self._checknumber(args, n))

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

    # -- cjson -------------------------------------------------------------------------------

    def _cjson_table(self, cfg: _CJsonConfig) -> Any:
        return self._lua.table_from(
            {
                b"encode": lambda *a: self._json_encode(cfg, a),
                b"decode": lambda *a: self._json_decode(cfg, a),
                b"encode_sparse_array": lambda *a: self._cfg_sparse(cfg, a),
                b"encode_max_depth": lambda *a: self._cfg_int(cfg, a, "encode_max_depth", 1),
                b"decode_max_depth": lambda *a: self._cfg_int(cfg, a, "decode_max_depth", 1),
                b"encode_number_precision": lambda *a: self._cfg_int(
                    cfg, a, "encode_number_precision", 1, 14
                ),
                b"encode_keep_buffer": lambda *a: self._cfg_enum(cfg, a, "encode_keep_buffer"),
                b"encode_invalid_numbers": lambda *a: self._cfg_enum(
                    cfg, a, "encode_invalid_numbers", (b"off", b"on", b"null")
                ),
                b"decode_invalid_numbers": lambda *a: self._cfg_enum(
                    cfg, a, "decode_invalid_numbers"
                ),
                b"new": lambda *a: self._cjson_table(_CJsonConfig()),
                b"null": CJSON_NULL,
                b"_NAME": b"cjson",
                b"_VERSION": b"2.1.0",
            }
        )

    def _cfg_args(self, args: Sequence[Any], most: int) -> list[Any]:
        if len(args) > most:
            self._argerror(most + 1, "found too many arguments")
        return list(args) + [None] * (most - len(args))

    def _cfg_int(
        self, cfg: _CJsonConfig, args: Sequence[Any], name: str, lo: int, hi: int = 2**31 - 1
    ) -> int:
        a = self._cfg_args(args, 1)
        if a[0] is not None:
            value = self._checkinteger(a, 1)
            if not lo <= value <= hi:
                self._argerror(1, f"expected integer between {lo} and {hi}")
            setattr(cfg, name, value)
        return int(getattr(cfg, name))

    def _enum(self, args: Sequence[Any], n: int, current: int, options: Sequence[bytes]) -> int:
        v = args[n - 1]
        if v is None:
            return current
        if type(v) is bool:
            return int(v)
        s = lua_tostring(v)
        if s is None:
            self._argerror(n, f"string expected, got {lua_type(v)}")
        if s not in options:
            self._argerror(n, f"invalid option '{s.decode('utf-8', 'replace')}'")
        return options.index(s)

    def _cfg_enum(
        self,
        cfg: _CJsonConfig,
        args: Sequence[Any],
        name: str,
        options: Sequence[bytes] = (b"off", b"on"),
    ) -> Any:
        a = self._cfg_args(args, 1)
        value = self._enum(a, 1, int(getattr(cfg, name)), options)
        setattr(cfg, name, value)
        return bool(value) if value in (0, 1) else options[value]

    def _cfg_sparse(self, cfg: _CJsonConfig, args: Sequence[Any]) -> tuple[Any, ...]:
        a = self._cfg_args(args, 3)
        cfg.encode_sparse_convert = self._enum(a, 1, cfg.encode_sparse_convert, (b"off", b"on"))
        for n, name in ((2, "encode_sparse_ratio"), (3, "encode_sparse_safe")):
            if a[n - 1] is not None:
                value = self._checkinteger(a, n)
                if not 0 <= value <= 2**31 - 1:
                    self._argerror(n, f"expected integer between 0 and {2**31 - 1}")
                setattr(cfg, name, value)
        return (bool(cfg.encode_sparse_convert), cfg.encode_sparse_ratio, cfg.encode_sparse_safe)

    def _json_encode(self, cfg: _CJsonConfig, args: Sequence[Any]) -> bytes:
        if len(args) != 1:
            self._argerror(1, "expected 1 argument")
        out: list[bytes] = []
        # Depth-first with an explicit stack (deep tables must not hit Python's recursion
        # limit); the work items run in the order the C encoder visits values, so the first
        # error raised is the same. An item is bytes (output), (value, depth) or, for an
        # object key checked when reached, (key, None).
        work: list[Any] = [(args[0], 0)]
        while work:
            item = work.pop()
            if type(item) is bytes:
                out.append(item)
                continue
            v, depth = item
            if depth is None:
                self._json_key(cfg, v, out)
                continue
            t = type(v)
            if t is bytes:
                out.append(_json_string(v))
            elif t is int or t is float:
                self._json_number(cfg, v, out)
            elif t is bool:
                out.append(b"true" if v else b"false")
            elif v is None or v is CJSON_NULL:
                out.append(b"null")
            elif lua_type(v) == "table":
                depth += 1
                if depth > cfg.encode_max_depth:
                    self._error(f"Cannot serialise, excessive nesting ({depth})")
                items = list(v.items())
                length = self._json_array_length(cfg, v, items)
                todo: list[Any] = []
                if length > 0:
                    by_index = _by_index(items)
                    out.append(b"[")
                    for i in range(1, length + 1):
                        if i > 1:
                            todo.append(b",")
                        todo.append((by_index.get(i), depth))
                    todo.append(b"]")
                else:
                    out.append(b"{")
                    for n, (key, value) in enumerate(items):
                        if n:
                            todo.append(b",")
                        todo.append((key, None))
                        todo.append((value, depth))
                    todo.append(b"}")
                todo.reverse()
                work.extend(todo)
            else:
                self._json_fail(v, "type not supported")
        return b"".join(out)

    def _json_key(self, cfg: _CJsonConfig, key: Any, out: list[bytes]) -> None:
        tk = type(key)
        if tk is int or tk is float:
            out.append(b'"')
            self._json_number(cfg, key, out)
            out.append(b'":')
        elif tk is bytes:
            out.append(_json_string(key))
            out.append(b":")
        else:
            self._json_fail(key, "table key must be a number or string")

    def _json_fail(self, v: Any, reason: str) -> NoReturn:
        self._error(f"Cannot serialise {_json_typename(v)}: {reason}")

    def _json_number(self, cfg: _CJsonConfig, v: float, out: list[bytes]) -> None:
        if v != v or v in (math.inf, -math.inf):
            if cfg.encode_invalid_numbers == 0:
                self._json_fail(v, "must not be NaN or Inf")
            if cfg.encode_invalid_numbers == 2:
                out.append(b"null")
                return
            if v != v:
                out.append(b"nan")
                return
        out.append(b"%.*g" % (cfg.encode_number_precision, v))

    def _json_array_length(self, cfg: _CJsonConfig, v: Any, items: list[Any]) -> int:
        biggest = 0
        count = 0
        for key, _value in items:
            tk = type(key)
            if (tk is int or tk is float) and key >= 1 and math.floor(key) == key:
                biggest = max(biggest, int(key))
                count += 1
            else:
                return -1
        if (
            cfg.encode_sparse_ratio > 0
            and biggest > count * cfg.encode_sparse_ratio
            and biggest > cfg.encode_sparse_safe
        ):
            if not cfg.encode_sparse_convert:
                self._json_fail(v, "excessively sparse array")
            return -1
        return biggest

    def _json_decode(self, cfg: _CJsonConfig, args: Sequence[Any]) -> Any:
        if len(args) != 1:
            self._argerror(1, "expected 1 argument")
        data = self._checkstring(args, 1)
        if len(data) >= 2 and (data[0] == 0 or data[1] == 0):
            self._error("JSON parser does not support UTF-16 or UTF-32")
        parser = _JsonParser(data.split(b"\0", 1)[0], cfg, self._error)
        value = parser.value(parser.token())
        end = parser.token()
        if end[0] != _T_END:
            parser.fail("the end", end)
        return self._to_lua(value)

    def _to_lua(self, v: Any) -> Any:
        if type(v) is list or type(v) is dict:
            return self._lua.table_from(v, recursive=True)
        return v

    # -- bit ---------------------------------------------------------------------------------

    def _barg(self, args: Sequence[Any], n: int) -> int:
        v = lua_tonumber(args[n - 1]) if n <= len(args) else None
        b = _tobit_bits(v if v is not None else 0.0)
        if b == 0 and v is None:
            self._argerror(n, f"number expected, got {lua_typename(args, n)}")
        return b

    def _tobit(self, *args: Any) -> int:
        return _signed32(self._barg(args, 1))

    def _bnot(self, *args: Any) -> int:
        return _signed32(~self._barg(args, 1) & 0xFFFFFFFF)

    def _bswap(self, *args: Any) -> int:
        b = self._barg(args, 1)
        return _signed32(int.from_bytes(b.to_bytes(4, "little"), "big"))

    def _bitop(self, op: Callable[[int, int], int]) -> Callable[..., int]:
        def fn(*args: Any) -> int:
            b = self._barg(args, 1)
            for i in range(len(args), 1, -1):
                b = op(b, self._barg(args, i))
            return _signed32(b & 0xFFFFFFFF)

        return fn

    def _shift(self, op: Callable[[int, int], int]) -> Callable[..., int]:
        def fn(*args: Any) -> int:
            b = self._barg(args, 1)
            n = self._barg(args, 2) & 31
            return _signed32(op(b, n) & 0xFFFFFFFF)

        return fn

    def _tohex(self, *args: Any) -> bytes:
        b = self._barg(args, 1)
        n = 8 if len(args) < 2 else _signed32(self._barg(args, 2))
        digits = b"0123456789abcdef"
        if n < 0:
            n = -n
            digits = b"0123456789ABCDEF"
        n = min(n, 8)
        out = bytearray(n)
        for i in range(n - 1, -1, -1):
            out[i] = digits[b & 15]
            b >>= 4
        return bytes(out)

    # -- struct ------------------------------------------------------------------------------

    def _struct_pack(self, *args: Any) -> bytes:
        fmt = self._checkstring(args, 1)
        h = _Header()
        arg = 2
        out = bytearray()
        i = 0
        while i < len(fmt) and fmt[i] != 0:
            opt = chr(fmt[i])
            i += 1
            size, i = self._optsize(opt, fmt, i)
            toalign = _gettoalign(len(out), h, opt, size)
            out += b"\0" * toalign
            if opt in "bBhHlLTiI":
                n = self._checknumber(args, arg, name_nil=True)
                arg += 1
                out += _pack_int(n, size, h.little)
            elif opt == "x":
                out += b"\0"
            elif opt in "fd":
                n = self._checknumber(args, arg, name_nil=True)
                arg += 1
                code = ("<" if h.little else ">") + opt
                if opt == "f":
                    n = _to_float32(n)
                out += _struct.pack(code, n)
            elif opt in "cs":
                s = self._checkstring(args, arg, name_nil=True)
                arg += 1
                if size == 0:
                    size = len(s)
                if len(s) < size:
                    self._argerror(arg, "string too short")
                out += s[:size]
                if opt == "s":
                    out += b"\0"
            else:
                i = self._controloptions(opt, fmt, i, h)
        return bytes(out)

    def _struct_unpack(self, *args: Any) -> tuple[Any, ...]:
        fmt = self._checkstring(args, 1)
        data = self._checkstring(args, 2)
        pos = self._optinteger(args, 3, 1)
        if pos <= 0:
            self._argerror(3, "offset must be 1 or greater")
        pos -= 1
        ld = len(data)
        h = _Header()
        results: list[Any] = []
        i = 0
        while i < len(fmt) and fmt[i] != 0:
            opt = chr(fmt[i])
            i += 1
            size, i = self._optsize(opt, fmt, i)
            pos += _gettoalign(pos, h, opt, size)
            if not (size <= ld and pos <= ld - size):
                self._argerror(2, "data string too short")
            if opt in "bBhHlLTiI":
                results.append(_unpack_int(data[pos : pos + size], h.little, opt.islower()))
            elif opt == "x":
                pass
            elif opt in "fd":
                code = ("<" if h.little else ">") + opt
                results.append(_struct.unpack(code, data[pos : pos + size])[0])
            elif opt == "c":
                if size == 0:
                    if not results or lua_tonumber(results[-1]) is None:
                        self._error("format 'c0' needs a previous size")
                    size = int(lua_tonumber(results.pop()) or 0)
                    if not (size <= ld and pos <= ld - size):
                        self._argerror(2, "data string too short")
                results.append(data[pos : pos + size])
            elif opt == "s":
                e = data.find(b"\0", pos)
                if e < 0:
                    self._error("unfinished string in data")
                size = e - pos + 1
                results.append(data[pos:e])
            else:
                i = self._controloptions(opt, fmt, i, h)
            pos += size
        results.append(pos + 1)
        return tuple(results)

    def _struct_size(self, *args: Any) -> int:
        fmt = self._checkstring(args, 1)
        h = _Header()
        pos = 0
        i = 0
        while i < len(fmt) and fmt[i] != 0:
            opt = chr(fmt[i])
            i += 1
            size, i = self._optsize(opt, fmt, i)
            pos += _gettoalign(pos, h, opt, size)
            if opt == "s":
                self._argerror(1, "option 's' has no fixed size")
            elif opt == "c" and size == 0:
                self._argerror(1, "option 'c0' has no fixed size")
            if not opt.isalnum():
                i = self._controloptions(opt, fmt, i, h)
            pos += size
        return pos

    def _getnum(self, fmt: bytes, i: int, default: int) -> tuple[int, int]:
        if i >= len(fmt) or not 0x30 <= fmt[i] <= 0x39:
            return default, i
        a = 0
        while i < len(fmt) and 0x30 <= fmt[i] <= 0x39:
            if a > (2**31 - 1) // 10 or a * 10 > (2**31 - 1) - (fmt[i] - 0x30):
                self._error("integral size overflow")
            a = a * 10 + fmt[i] - 0x30
            i += 1
        return a, i

    def _optsize(self, opt: str, fmt: bytes, i: int) -> tuple[int, int]:
        if opt in "Bb":
            return 1, i
        if opt in "Hh":
            return 2, i
        if opt in "LlT":
            return 8, i
        if opt == "f":
            return 4, i
        if opt == "d":
            return 8, i
        if opt == "x":
            return 1, i
        if opt == "c":
            return self._getnum(fmt, i, 1)
        if opt in "iI":
            size, i = self._getnum(fmt, i, 4)
            if size > 32:
                self._error(f"integral size {size} is larger than limit of 32")
            return size, i
        return 0, i

    def _controloptions(self, opt: str, fmt: bytes, i: int, h: _Header) -> int:
        if opt == " ":
            return i
        if opt == ">":
            h.little = False
            return i
        if opt == "<":
            h.little = True
            return i
        if opt == "!":
            a, i = self._getnum(fmt, i, 8)
            if a == 0 or a & (a - 1):
                self._error(f"alignment {a} is not a power of 2")
            h.align = a
            return i
        self._argerror(1, f"invalid format option '{opt}'")
        raise AssertionError("unreachable")

    # -- cmsgpack ----------------------------------------------------------------------------

    def _mp_pack(self, *args: Any) -> bytes:
        if not args:
            self._argerror(0, "MessagePack pack needs input.")
        out = bytearray()
        for v in args:
            _mp_encode(v, out, 0)
        return bytes(out)

    def _mp_unpack_full(self, args: Sequence[Any], limit: int, offset: int) -> tuple[Any, ...]:
        data = self._checkstring(args, 1)
        decode_all = not limit and not offset
        if offset < 0 or limit < 0:
            self._error(
                f"Invalid request to unpack with offset of {offset} and limit of {len(data)}."
            )
        if offset > len(data):
            self._error(f"Start offset {offset} greater than input length {len(data)}.")
        if decode_all:
            limit = 2**31 - 1
        cur = _MpCursor(data, offset, self._error)
        values: list[Any] = []
        while cur.pos < len(data) and len(values) < limit:
            values.append(cur.decode(self._lua))
        if decode_all:
            return tuple(values)
        left = len(data) - cur.pos
        return (-1 if left == 0 else cur.pos, *values)

    def _mp_unpack(self, *args: Any) -> tuple[Any, ...]:
        return self._mp_unpack_full(args, 0, 0)

    def _mp_unpack_one(self, *args: Any) -> tuple[Any, ...]:
        offset = self._optinteger(args, 2, 0)
        return self._mp_unpack_full(args[:1], 1, offset)

    def _mp_unpack_limit(self, *args: Any) -> tuple[Any, ...]:
        limit = self._checkinteger(args, 2)
        offset = self._optinteger(args, 3, 0)
        return self._mp_unpack_full(args[:1], limit, offset)


# --- cjson internals ---------------------------------------------------------------------------


class _CJsonConfig:
    __slots__ = (
        "decode_invalid_numbers",
        "decode_max_depth",
        "encode_invalid_numbers",
        "encode_keep_buffer",
        "encode_max_depth",
        "encode_number_precision",
        "encode_sparse_convert",
        "encode_sparse_ratio",
        "encode_sparse_safe",
    )

    def __init__(self) -> None:
        self.encode_sparse_convert = 0
        self.encode_sparse_ratio = 2
        self.encode_sparse_safe = 10
        self.encode_max_depth = 1000
        self.decode_max_depth = 1000
        self.encode_invalid_numbers = 0
        self.decode_invalid_numbers = 1
        self.encode_keep_buffer = 1
        self.encode_number_precision = 14


def _json_typename(v: Any) -> str:
    name = lua_type(v)
    if name == "userdata" and callable(v):
        return "function"  # the API functions are Python functions, C functions in Redis
    return name


_JSON_ESCAPES: Final = {
    **{i: b"\\u%04x" % i for i in range(32)},
    8: b"\\b",
    9: b"\\t",
    10: b"\\n",
    12: b"\\f",
    13: b"\\r",
    0x22: b'\\"',
    0x5C: b"\\\\",
    0x2F: b"\\/",
    0x7F: b"\\u007f",
}
_JSON_ESCAPE_RE = re.compile(rb'[\x00-\x1f"\\/\x7f]')


def _json_string(s: bytes) -> bytes:
    return b'"' + _JSON_ESCAPE_RE.sub(lambda m: _JSON_ESCAPES[m.group()[0]], s) + b'"'


def _by_index(items: list[Any]) -> dict[Any, Any]:
    return {key: value for key, value in items if type(key) is not bool}


(
    _T_OBJ_BEGIN,
    _T_OBJ_END,
    _T_ARR_BEGIN,
    _T_ARR_END,
    _T_STRING,
    _T_NUMBER,
    _T_BOOLEAN,
    _T_NULL,
    _T_COLON,
    _T_COMMA,
    _T_END,
    _T_WHITESPACE,
    _T_ERROR,
    _T_UNKNOWN,
) = range(14)
_TOKEN_NAMES: Final = (
    "T_OBJ_BEGIN",
    "T_OBJ_END",
    "T_ARR_BEGIN",
    "T_ARR_END",
    "T_STRING",
    "T_NUMBER",
    "T_BOOLEAN",
    "T_NULL",
    "T_COLON",
    "T_COMMA",
    "T_END",
    "T_WHITESPACE",
    "T_ERROR",
    "T_UNKNOWN",
)
_CH2TOKEN: list[int] = [_T_ERROR] * 256
for _c, _tok in (
    (b"{", _T_OBJ_BEGIN),
    (b"}", _T_OBJ_END),
    (b"[", _T_ARR_BEGIN),
    (b"]", _T_ARR_END),
    (b",", _T_COMMA),
    (b":", _T_COLON),
    (b"\0", _T_END),
    (b" ", _T_WHITESPACE),
    (b"\t", _T_WHITESPACE),
    (b"\n", _T_WHITESPACE),
    (b"\r", _T_WHITESPACE),
):
    _CH2TOKEN[_c[0]] = _tok
for _byte in b'"-+0123456789ftniIN':
    _CH2TOKEN[_byte] = _T_UNKNOWN
_ESCAPE2CHAR: Final = {
    0x22: 0x22,
    0x5C: 0x5C,
    0x2F: 0x2F,
    0x62: 0x08,
    0x66: 0x0C,
    0x6E: 0x0A,
    0x72: 0x0D,
    0x74: 0x09,
    0x75: 0x75,
}
# What strtod reads from a JSON number token (decimal, hex, inf/infinity, nan).
_STRTOD_RE = re.compile(
    rb"[+-]?(?:0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?"
    rb"|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)",
    re.IGNORECASE,
)

_Token = tuple[int, Any, int]  # (type, value, index)


class _JsonParser:
    __slots__ = ("cfg", "data", "depth", "error", "index")

    def __init__(self, data: bytes, cfg: _CJsonConfig, error: LuaError) -> None:
        self.data = data
        self.index = 0
        self.cfg = cfg
        self.error = error
        self.depth = 0

    def fail(self, expected: str, token: _Token) -> NoReturn:
        found = token[1] if token[0] == _T_ERROR else _TOKEN_NAMES[token[0]]
        self.error(f"Expected {expected} but found {found} at character {token[2] + 1}")

    def _char(self, i: int) -> int:
        return self.data[i] if i < len(self.data) else 0

    def token(self) -> _Token:
        data = self.data
        i = self.index
        t = _CH2TOKEN[self._char(i)]
        while t == _T_WHITESPACE:
            i += 1
            t = _CH2TOKEN[self._char(i)]
        self.index = i
        if t == _T_ERROR:
            return (_T_ERROR, "invalid token", i)
        if t == _T_END:
            return (_T_END, None, i)
        if t != _T_UNKNOWN:
            self.index = i + 1
            return (t, None, i)
        ch = data[i]
        if ch == 0x22:
            return self._string(i)
        if ch == 0x2D or 0x30 <= ch <= 0x39:
            if not self.cfg.decode_invalid_numbers and self._invalid_number(i):
                return (_T_ERROR, "invalid number", i)
            return self._number(i)
        if data.startswith(b"true", i):
            self.index = i + 4
            return (_T_BOOLEAN, True, i)
        if data.startswith(b"false", i):
            self.index = i + 5
            return (_T_BOOLEAN, False, i)
        if data.startswith(b"null", i):
            self.index = i + 4
            return (_T_NULL, None, i)
        if self.cfg.decode_invalid_numbers and self._invalid_number(i):
            return self._number(i)
        return (_T_ERROR, "invalid token", i)

    def _invalid_number(self, i: int) -> bool:
        c = self._char(i)
        if c == 0x2B:
            return True
        if c == 0x2D:
            i += 1
            c = self._char(i)
        if c == 0x30:
            c2 = self._char(i + 1)
            return (c2 | 0x20) == 0x78 or 0x30 <= c2 <= 0x39
        if c <= 0x39:
            return False
        head = self.data[i : i + 3].lower()
        return head in (b"inf", b"nan")

    def _number(self, i: int) -> _Token:
        m = _STRTOD_RE.match(self.data, i)
        if m is None:
            return (_T_ERROR, "invalid number", i)
        text = m.group()
        self.index = m.end()
        body = text.lstrip(b"+-").lower()
        if body.startswith(b"0x"):
            value = float.fromhex(text.decode())
        elif body.startswith(b"nan"):
            value = math.nan
        else:
            value = float(text)
        return (_T_NUMBER, value, i)

    def _string(self, start: int) -> _Token:
        i = start + 1
        out = bytearray()
        while True:
            ch = self._char(i)
            if ch == 0x22:
                break
            if ch == 0:
                self.index = i
                return (_T_ERROR, "unexpected end of string", i)
            if ch == 0x5C:
                esc = _ESCAPE2CHAR.get(self._char(i + 1), 0)
                if esc == 0x75:
                    n = self._unicode_escape(i, out)
                    if n < 0:
                        self.index = i
                        return (_T_ERROR, "invalid unicode escape code", i)
                    i += n
                    continue
                if not esc:
                    self.index = i
                    return (_T_ERROR, "invalid escape code", i)
                out.append(esc)
                i += 2
                continue
            out.append(ch)
            i += 1
        self.index = i + 1
        return (_T_STRING, bytes(out), start)

    def _hex4(self, i: int) -> int:
        digits = self.data[i : i + 4]
        if len(digits) < 4 or not all(c in b"0123456789abcdefABCDEF" for c in digits):
            return -1
        return int(digits, 16)

    def _unicode_escape(self, i: int, out: bytearray) -> int:
        cp = self._hex4(i + 2)
        if cp < 0:
            return -1
        length = 6
        if (cp & 0xF800) == 0xD800:
            if cp & 0x400:
                return -1
            if self._char(i + 6) != 0x5C or self._char(i + 7) != 0x75:
                return -1
            low = self._hex4(i + 8)
            if low < 0 or (low & 0xFC00) != 0xDC00:
                return -1
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000
            length = 12
        out += chr(cp).encode("utf-8", "surrogatepass")
        return length

    def value(self, token: _Token) -> Any:
        """Parse one value starting at ``token``; containers with an explicit stack, so that
        deep documents do not hit Python's recursion limit (the C parser recurses)."""
        # Frames: [container, key] (key is None for arrays).
        stack: list[list[Any]] = []
        while True:
            t = token[0]
            if t in (_T_STRING, _T_NUMBER, _T_BOOLEAN):
                v = token[1]
            elif t == _T_NULL:
                v = CJSON_NULL
            elif t == _T_OBJ_BEGIN:
                self._descend()
                token = self.token()
                if token[0] == _T_OBJ_END:
                    self.depth -= 1
                    v = {}
                else:
                    frame: list[Any] = [{}, self._key(token)]
                    stack.append(frame)
                    token = self.token()
                    continue
            elif t == _T_ARR_BEGIN:
                self._descend()
                token = self.token()
                if token[0] == _T_ARR_END:
                    self.depth -= 1
                    v = []
                else:
                    stack.append([[], None])
                    continue
            else:
                self.fail("value", token)
            # Attach v to the open containers, closing those that end here.
            while stack:
                container, key = stack[-1]
                token = self.token()
                if key is None:
                    container.append(v)
                    if token[0] == _T_ARR_END:
                        stack.pop()
                        self.depth -= 1
                        v = container
                        continue
                    if token[0] != _T_COMMA:
                        self.fail("comma or array end", token)
                    token = self.token()
                else:
                    container[key] = v
                    if token[0] == _T_OBJ_END:
                        stack.pop()
                        self.depth -= 1
                        v = container
                        continue
                    if token[0] != _T_COMMA:
                        self.fail("comma or object end", token)
                    stack[-1][1] = self._key(self.token())
                    token = self.token()
                break
            else:
                return v

    def _key(self, token: _Token) -> Any:
        # An object key and its colon.
        if token[0] != _T_STRING:
            self.fail("object key string", token)
        key = token[1]
        colon = self.token()
        if colon[0] != _T_COLON:
            self.fail("colon", colon)
        return key

    def _descend(self) -> None:
        self.depth += 1
        if self.depth > self.cfg.decode_max_depth:
            self.error(
                f"Found too many nested data structures ({self.depth}) at character {self.index}"
            )


# --- bit internals -----------------------------------------------------------------------------


def _tobit_bits(n: float) -> int:
    # LuaBitOp: add 2^52+2^51 and take the low 32 bits of the double (round-half-even).
    if isinstance(n, int) and not -(2**51) <= n < 2**51:
        n = float(n)
    bits = _struct.unpack("<Q", _struct.pack("<d", float(n) + 6755399441055744.0))[0]
    return int(bits & 0xFFFFFFFF)


def _signed32(b: int) -> int:
    b &= 0xFFFFFFFF
    return b - (1 << 32) if b >= 1 << 31 else b


# --- struct internals --------------------------------------------------------------------------


class _Header:
    __slots__ = ("align", "little")

    def __init__(self) -> None:
        self.little = True  # native (x86-64)
        self.align = 1


def _gettoalign(length: int, h: _Header, opt: str, size: int) -> int:
    if size == 0 or opt == "c":
        return 0
    size = min(size, h.align)
    return (size - (length & (size - 1))) & (size - 1)


def _c_long(n: float) -> int:
    """C's ``(long)`` cast of a double on x86-64 (out of range: LONG_MIN)."""
    if n != n or n in (math.inf, -math.inf):
        return -(2**63)
    v = int(n)
    return v if -(2**63) <= v < 2**63 else -(2**63)


def _pack_int(n: float, size: int, little: bool) -> bytes:
    if n < 0:
        value = _c_long(n) & 0xFFFFFFFFFFFFFFFF
    else:
        value = int(n) & 0xFFFFFFFFFFFFFFFF if n < 2**64 else 0x8000000000000000
    out = bytearray(size)
    for k in range(size):
        byte = value & 0xFF
        value >>= 8
        out[k if little else size - 1 - k] = byte
    return bytes(out)


def _unpack_int(buf: bytes, little: bool, signed: bool) -> float:
    size = len(buf)
    order = range(size - 1, -1, -1) if little else range(size)
    value = 0
    for k in order:
        value = ((value << 8) | buf[k]) & 0xFFFFFFFFFFFFFFFF
    if not signed:
        return float(value) if value >= 2**53 else value
    mask = (0xFFFFFFFFFFFFFFFF << ((size * 8 - 1) & 63)) & 0xFFFFFFFFFFFFFFFF
    if value & mask:
        value |= mask
    if value >= 2**63:
        value -= 2**64
    return value


def _to_float32(n: float) -> float:
    try:
        return float(_struct.unpack("<f", _struct.pack("<f", n))[0])
    except OverflowError:
        return math.copysign(math.inf, n)


# --- cmsgpack internals ------------------------------------------------------------------------

_MP_MAX_NESTING: Final = 16


def _mp_encode(v: Any, out: bytearray, level: int) -> None:
    t = type(v)
    if t is bytes:
        n = len(v)
        if n < 32:
            out.append(0xA0 | n)
        elif n <= 0xFF:
            out += b"\xd9" + bytes((n,))
        elif n <= 0xFFFF:
            out += b"\xda" + n.to_bytes(2, "big")
        else:
            out += b"\xdb" + n.to_bytes(4, "big")
        out += v
    elif t is bool:
        out.append(0xC3 if v else 0xC2)
    elif t is int or t is float:
        _mp_number(v, out)
    elif lua_type(v) == "table" and level < _MP_MAX_NESTING:
        items = list(v.items())
        if _mp_is_array(items):
            n = len(items)
            by_index = _by_index(items)
            _mp_header(out, n, 0x90, 0xDC, 0xDD)
            for i in range(1, n + 1):
                _mp_encode(by_index.get(i), out, level + 1)
        else:
            _mp_header(out, len(items), 0x80, 0xDE, 0xDF)
            for key, value in items:
                _mp_encode(key, out, level + 1)
                _mp_encode(value, out, level + 1)
    else:
        out.append(0xC0)


def _mp_header(out: bytearray, n: int, fix: int, h16: int, h32: int) -> None:
    if n <= 15:
        out.append(fix | n)
    elif n <= 0xFFFF:
        out.append(h16)
        out += n.to_bytes(2, "big")
    else:
        out.append(h32)
        out += n.to_bytes(4, "big")


def _mp_is_array(items: list[Any]) -> bool:
    biggest = 0
    for key, _value in items:
        tk = type(key)
        if (tk is int or tk is float) and key > 0 and key == int(key):
            biggest = max(biggest, int(key))
        else:
            return False
    return biggest == len(items)


def _mp_number(n: float, out: bytearray) -> None:
    if n == n and n not in (math.inf, -math.inf) and -(2**63) <= n < 2**63 and n == int(n):
        _mp_int(int(n), out)
    elif _to_float32(n) == n:
        out.append(0xCA)
        out += _struct.pack(">f", n)
    else:
        out.append(0xCB)
        out += _struct.pack(">d", n)


def _mp_int(n: int, out: bytearray) -> None:
    if n >= 0:
        if n <= 127:
            out.append(n)
        elif n <= 0xFF:
            out += b"\xcc" + n.to_bytes(1, "big")
        elif n <= 0xFFFF:
            out += b"\xcd" + n.to_bytes(2, "big")
        elif n <= 0xFFFFFFFF:
            out += b"\xce" + n.to_bytes(4, "big")
        else:
            out += b"\xcf" + n.to_bytes(8, "big")
    elif n >= -32:
        out.append(n & 0xFF)
    elif n >= -128:
        out += b"\xd0" + n.to_bytes(1, "big", signed=True)
    elif n >= -32768:
        out += b"\xd1" + n.to_bytes(2, "big", signed=True)
    elif n >= -(2**31):
        out += b"\xd2" + n.to_bytes(4, "big", signed=True)
    else:
        out += b"\xd3" + n.to_bytes(8, "big", signed=True)


class _MpCursor:
    __slots__ = ("data", "error", "pos")

    def __init__(self, data: bytes, pos: int, error: LuaError) -> None:
        self.data = data
        self.pos = pos
        self.error = error

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            self.error("Missing bytes in input.")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def _uint(self, n: int) -> int:
        return int.from_bytes(self._take(n), "big")

    def decode(self, lua: Any) -> Any:
        c = self._take(1)[0]
        if c <= 0x7F:
            return c
        if c >= 0xE0:
            return c - 0x100
        if 0xA0 <= c <= 0xBF:
            return self._take(c & 0x1F)
        if 0x90 <= c <= 0x9F:
            return self._array(lua, c & 0x0F)
        if 0x80 <= c <= 0x8F:
            return self._map(lua, c & 0x0F)
        if c == 0xC0:
            return None
        if c == 0xC2:
            return False
        if c == 0xC3:
            return True
        if c == 0xCA:
            return _struct.unpack(">f", self._take(4))[0]
        if c == 0xCB:
            return _struct.unpack(">d", self._take(8))[0]
        if c in (0xCC, 0xCD, 0xCE, 0xCF):
            v = self._uint(1 << (c - 0xCC))
            return float(v) if v >= 2**53 else v
        if c in (0xD0, 0xD1, 0xD2, 0xD3):
            return int.from_bytes(self._take(1 << (c - 0xD0)), "big", signed=True)
        if c in (0xD9, 0xDA, 0xDB):
            return self._take(self._uint(1 << (c - 0xD9)))
        if c in (0xDC, 0xDD):
            return self._array(lua, self._uint(2 if c == 0xDC else 4))
        if c in (0xDE, 0xDF):
            return self._map(lua, self._uint(2 if c == 0xDE else 4))
        self.error("Bad data format in input.")
        raise AssertionError("unreachable")

    def _array(self, lua: Any, n: int) -> Any:
        return lua.table_from([self.decode(lua) for _ in range(n)])

    def _map(self, lua: Any, n: int) -> Any:
        result: dict[Any, Any] = {}
        for _ in range(n):
            key = self.decode(lua)
            value = self.decode(lua)
            if key is not None and value is not None:
                result[key] = value
        return lua.table_from(result)
