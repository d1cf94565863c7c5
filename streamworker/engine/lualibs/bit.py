"""``bit``: LuaBitOp's 32-bit operations as Redis 7.0 bundles them."""

from __future__ import annotations

import struct as _struct
from collections.abc import Callable, Sequence
from typing import Any

from streamworker.engine.lualibs.common import (
    LibraryBase,
    lua_tonumber,
    lua_typename,
)


class Bit(LibraryBase):
    """The ``bit`` table."""

    def table(self) -> Any:
        """The ``bit`` table."""
        return self._lua.table_from(
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


def _tobit_bits(n: float) -> int:
    # LuaBitOp: add 2^52+2^51 and take the low 32 bits of the double (round-half-even).
    if isinstance(n, int) and not -(2**51) <= n < 2**51:
        n = float(n)
    bits = _struct.unpack("<Q", _struct.pack("<d", float(n) + 6755399441055744.0))[0]
    return int(bits & 0xFFFFFFFF)


def _signed32(b: int) -> int:
    b &= 0xFFFFFFFF
    return b - (1 << 32) if b >= 1 << 31 else b
