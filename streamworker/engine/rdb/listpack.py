"""Redis's packed encodings: listpack (written and read), intset (written and read), and the
older ziplist and zipmap (read only: Redis 7.0 still loads them from old RDB files and DUMPs).

Listpack element encodings, as ``lpAppend`` chooses them: a string that is a canonical int64
decimal (``string2ll``) is stored as an integer of 1 (0..127), 2 (13 bit), 3, 4, 5 or 9 bytes;
any other string takes a 1 (< 64 bytes), 2 (< 4096) or 5 byte header. Each element is followed by
its back-length (the element's size in 1 to 5 bytes of 7 bits, read right to left). The header
is the total size (4 bytes LE) and the element count (2 bytes LE, 65535 when it does not fit),
and the end byte is 0xFF.

Every reader raises :class:`PackedFormatError` for bytes that do not parse, and never indexes
past the buffer it was given.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable

from streamworker.engine.ids import parse_ll

__all__ = [
    "PackedFormatError",
    "intset_decode",
    "intset_encode",
    "listpack_decode",
    "listpack_encode",
    "ziplist_decode",
    "zipmap_decode",
]

_LP_HDR = 6
_LP_EOF = 0xFF


class PackedFormatError(ValueError):
    """Bytes that are not a valid listpack / intset / ziplist / zipmap."""


def _backlen(n: int) -> bytes:
    if n <= 127:
        return bytes((n,))
    if n < 16383:
        return bytes((n >> 7, (n & 127) | 128))
    if n < 2097151:
        return bytes((n >> 14, ((n >> 7) & 127) | 128, (n & 127) | 128))
    if n < 268435455:
        return bytes((n >> 21, ((n >> 14) & 127) | 128, ((n >> 7) & 127) | 128, (n & 127) | 128))
    return bytes(
        (
            n >> 28,
            ((n >> 21) & 127) | 128,
            ((n >> 14) & 127) | 128,
            ((n >> 7) & 127) | 128,
            (n & 127) | 128,
        )
    )


def _lp_int(v: int) -> bytes:
    if 0 <= v <= 127:
        enc = bytes((v,))
    elif -4096 <= v <= 4095:
        u = v & 0x1FFF
        enc = bytes(((u >> 8) | 0xC0, u & 0xFF))
    elif -32768 <= v <= 32767:
        enc = b"\xf1" + (v & 0xFFFF).to_bytes(2, "little")
    elif -8388608 <= v <= 8388607:
        enc = b"\xf2" + (v & 0xFFFFFF).to_bytes(3, "little")
    elif -2147483648 <= v <= 2147483647:
        enc = b"\xf3" + (v & 0xFFFFFFFF).to_bytes(4, "little")
    else:
        enc = b"\xf4" + (v & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    return enc + _backlen(len(enc))


def _lp_str(s: bytes) -> bytes:
    n = len(s)
    if 0 < n < 21:
        v = parse_ll(s)
        if v is not None:
            return _lp_int(v)
    if n < 64:
        enc = bytes((0x80 | n,)) + s
    elif n < 4096:
        enc = bytes((0xE0 | (n >> 8), n & 0xFF)) + s
    else:
        enc = b"\xf0" + n.to_bytes(4, "little") + s
    return enc + _backlen(len(enc))


def listpack_encode(items: Iterable[bytes | int]) -> bytes:
    """A listpack of ``items``: ``bytes`` are appended as ``lpAppend`` does (integer-encoded
    when canonical), ``int`` as ``lpAppendInteger``."""
    parts = []
    count = 0
    for item in items:
        parts.append(_lp_int(item) if isinstance(item, int) else _lp_str(item))
        count += 1
    body = b"".join(parts)
    total = _LP_HDR + len(body) + 1
    return (
        total.to_bytes(4, "little")
        + min(count, 65535).to_bytes(2, "little")
        + body
        + bytes((_LP_EOF,))
    )


def _u(b: bytes, pos: int, size: int) -> int:
    return int.from_bytes(b[pos : pos + size], "little")


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def listpack_decode(lp: bytes, as_int: bool = False) -> list[bytes | int]:
    """The elements of a listpack: integers as ``int`` when ``as_int``, else as their decimal
    ``bytes`` (what Redis's ``lpGet`` gives a reader)."""
    n = len(lp)
    if n < _LP_HDR + 1 or _u(lp, 0, 4) != n or lp[-1] != _LP_EOF:
        raise PackedFormatError("listpack header")
    declared = _u(lp, 4, 2)
    out: list[bytes | int] = []
    p = _LP_HDR
    end = n - 1
    while p < end:
        b = lp[p]
        value: bytes | int
        if b < 0x80:
            value, size = b, 1
        elif b < 0xC0:
            k = b & 0x3F
            value, size = lp[p + 1 : p + 1 + k], 1 + k
        elif b < 0xE0:
            if p + 2 > end:
                raise PackedFormatError("listpack element")
            value, size = _signed(((b & 0x1F) << 8) | lp[p + 1], 13), 2
        elif b < 0xF0:
            if p + 2 > end:
                raise PackedFormatError("listpack element")
            k = ((b & 0x0F) << 8) | lp[p + 1]
            value, size = lp[p + 2 : p + 2 + k], 2 + k
        elif b == 0xF0:
            if p + 5 > end:
                raise PackedFormatError("listpack element")
            k = _u(lp, p + 1, 4)
            value, size = lp[p + 5 : p + 5 + k], 5 + k
        elif 0xF1 <= b <= 0xF4:
            width = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}[b]
            value, size = _signed(_u(lp, p + 1, width), width * 8), 1 + width
        else:
            raise PackedFormatError("listpack element encoding")
        if p + size > end:
            raise PackedFormatError("listpack element past the end")
        blen = _backlen(size)
        if lp[p + size : p + size + len(blen)] != blen:
            raise PackedFormatError("listpack back-length")
        p += size + len(blen)
        if isinstance(value, int) and not as_int:
            value = b"%d" % value
        out.append(value)
    if p != end or (declared != 65535 and declared != len(out)):
        raise PackedFormatError("listpack element count")
    return out


# -- intset -------------------------------------------------------------------------------


def intset_encode(values: Iterable[int]) -> bytes:
    """An intset of ``values`` (sorted, with the narrowest width that holds them all)."""
    vals = sorted(values)
    width = 2
    if vals and (vals[0] < -(1 << 31) or vals[-1] >= 1 << 31):
        width = 8
    elif vals and (vals[0] < -(1 << 15) or vals[-1] >= 1 << 15):
        width = 4
    fmt = {2: "h", 4: "i", 8: "q"}[width]
    return struct.pack(f"<II{len(vals)}{fmt}", width, len(vals), *vals)


def intset_decode(blob: bytes) -> list[int]:
    """The integers of an intset (checked sorted and unique, as Redis's validation does)."""
    if len(blob) < 8:
        raise PackedFormatError("intset header")
    width, count = struct.unpack_from("<II", blob)
    if width not in (2, 4, 8) or len(blob) != 8 + width * count:
        raise PackedFormatError("intset size")
    fmt = {2: "h", 4: "i", 8: "q"}[width]
    vals = list(struct.unpack_from(f"<{count}{fmt}", blob, 8))
    for a, b in itertools.pairwise(vals):
        if a >= b:
            raise PackedFormatError("intset order")
    return vals


# -- ziplist (Redis < 7.0) ----------------------------------------------------------------


def ziplist_decode(zl: bytes) -> list[bytes]:
    """The elements of a ziplist, integers as decimal ``bytes``."""
    n = len(zl)
    if n < 11 or _u(zl, 0, 4) != n or zl[-1] != 0xFF:
        raise PackedFormatError("ziplist header")
    declared = _u(zl, 8, 2)
    out: list[bytes] = []
    p = 10
    end = n - 1
    while p < end:
        p += 5 if zl[p] == 0xFE else 1  # previous entry length
        if p >= end:
            raise PackedFormatError("ziplist entry")
        b = zl[p]
        top = b >> 6
        if top == 0:
            k, p = b & 0x3F, p + 1
        elif top == 1:
            if p + 2 > end:
                raise PackedFormatError("ziplist entry")
            k, p = ((b & 0x3F) << 8) | zl[p + 1], p + 2
        elif b == 0x80:
            if p + 5 > end:
                raise PackedFormatError("ziplist entry")
            k, p = int.from_bytes(zl[p + 1 : p + 5], "big"), p + 5
        else:
            if b == 0xC0:
                w = 2
            elif b == 0xD0:
                w = 4
            elif b == 0xE0:
                w = 8
            elif b == 0xF0:
                w = 3
            elif b == 0xFE:
                w = 1
            elif 0xF1 <= b <= 0xFD:
                out.append(b"%d" % ((b & 0x0F) - 1))
                p += 1
                continue
            else:
                raise PackedFormatError("ziplist entry encoding")
            if p + 1 + w > end:
                raise PackedFormatError("ziplist entry past the end")
            out.append(b"%d" % _signed(_u(zl, p + 1, w), w * 8))
            p += 1 + w
            continue
        if p + k > end:
            raise PackedFormatError("ziplist entry past the end")
        out.append(zl[p : p + k])
        p += k
    if p != end or (declared != 65535 and declared != len(out)):
        raise PackedFormatError("ziplist entry count")
    return out


# -- zipmap (Redis < 2.6) -----------------------------------------------------------------


def zipmap_decode(zm: bytes) -> list[bytes]:
    """The ``[field, value, ...]`` of a zipmap."""
    n = len(zm)
    if n < 2:
        raise PackedFormatError("zipmap header")
    out: list[bytes] = []
    p = 1
    while True:
        if p >= n:
            raise PackedFormatError("zipmap without end")
        b = zm[p]
        if b == 0xFF:
            break
        for is_value in (False, True):
            if p >= n:
                raise PackedFormatError("zipmap entry past the end")
            b = zm[p]
            if b < 254:
                k, p = b, p + 1
            elif b == 254:
                k, p = _u(zm, p + 1, 4), p + 5
            else:
                raise PackedFormatError("zipmap length")
            free = 0
            if is_value:
                if p >= n:
                    raise PackedFormatError("zipmap entry")
                free, p = zm[p], p + 1
            if p + k + free > n:
                raise PackedFormatError("zipmap entry past the end")
            out.append(zm[p : p + k])
            p += k + free
    if len(out) % 2:
        raise PackedFormatError("zipmap entry count")
    return out
