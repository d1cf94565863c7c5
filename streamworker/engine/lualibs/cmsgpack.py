"""``cmsgpack``: lua-cmsgpack 0.4.0 (MessagePack) as Redis 7.0 bundles it."""

from __future__ import annotations

import math
import struct as _struct
from collections.abc import Sequence
from typing import Any, Final

from streamworker.engine.lualibs.common import (
    LibraryBase,
    LuaError,
    items_by_index,
    lua_type,
    to_float32,
)


class CMsgpack(LibraryBase):
    """The ``cmsgpack`` table."""

    def table(self) -> Any:
        """The ``cmsgpack`` table."""
        return self._lua.table_from(
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
            by_index = items_by_index(items)
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
    elif to_float32(n) == n:
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
