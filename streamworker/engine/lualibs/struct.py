"""``struct``: Roberto Ierusalimschy's struct library (pack, unpack, size) as Redis 7.0
bundles it.
"""

from __future__ import annotations

import struct as _struct
from typing import Any

from streamworker.engine.lualibs.common import (
    LibraryBase,
    c_long,
    lua_tonumber,
    to_float32,
)


class Struct(LibraryBase):
    """The ``struct`` table."""

    def table(self) -> Any:
        """The ``struct`` table."""
        return self._lua.table_from(
            {b"pack": self._struct_pack, b"unpack": self._struct_unpack, b"size": self._struct_size}
        )

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
                    n = to_float32(n)
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


def _pack_int(n: float, size: int, little: bool) -> bytes:
    if n < 0:
        value = c_long(n) & 0xFFFFFFFFFFFFFFFF
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
