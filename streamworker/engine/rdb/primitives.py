"""The RDB format's building blocks: lengths, strings (integer, raw and LZF encodings), times
and doubles, written as Redis 7.0's ``rdbSave*`` functions write them and read back by a bounded
:class:`Reader`.

Bounds (why a hostile payload cannot make the reader allocate): every length is checked against
the bytes that are left before anything is sliced or built, and :meth:`Reader.count` refuses an
element count larger than the remaining bytes could hold (every element takes at least one
byte), so a payload claiming 2**60 elements fails at once.
"""

from __future__ import annotations

import math
import struct

from streamworker.engine.ids import parse_ll
from streamworker.engine.rdb import lzf

__all__ = [
    "RdbFormatError",
    "Reader",
    "d2string",
    "save_binary_double",
    "save_len",
    "save_ms_time",
    "save_string",
]

# Strings longer than this are written uncompressed: pure-Python LZF costs about 1-2 us per
# byte, and a DUMP or SAVE must not hold the engine for seconds per value. Below it (every
# listpack node, stream node and ordinary value), the bytes are redis-server's.
LZF_MAX_INPUT = 1 << 20

_ENC_INT8 = 0
_ENC_INT16 = 1
_ENC_INT32 = 2
_ENC_LZF = 3


class RdbFormatError(ValueError):
    """Bytes that are not valid RDB data; ``offset`` is where reading failed."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} (at offset {offset})")
        self.reason = message
        self.offset = offset


def save_len(n: int) -> bytes:
    """``rdbSaveLen``: 6-bit, 14-bit, 32-bit or 64-bit big-endian length."""
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF  # Redis passes signed counters (entries-read -1) as uint64
    if n < 64:
        return bytes((n,))
    if n < 16384:
        return bytes((0x40 | (n >> 8), n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def _int_encoding(s: bytes) -> bytes | None:
    # rdbTryIntegerEncoding: only strings that round-trip through string2ll and fit int32.
    v = parse_ll(s)
    if v is None:
        return None
    if -128 <= v <= 127:
        return bytes((0xC0 | _ENC_INT8,)) + (v & 0xFF).to_bytes(1, "little")
    if -32768 <= v <= 32767:
        return bytes((0xC0 | _ENC_INT16,)) + (v & 0xFFFF).to_bytes(2, "little")
    if -(2**31) <= v <= 2**31 - 1:
        return bytes((0xC0 | _ENC_INT32,)) + (v & 0xFFFFFFFF).to_bytes(4, "little")
    return None


def save_string(s: bytes, compress: bool = True) -> bytes:
    """``rdbSaveRawString``: an int8/16/32 encoding for short canonical integers, LZF for
    strings over 20 bytes that shrink by at least 4 bytes (when ``compress``, Redis's
    ``rdbcompression``; not past :data:`LZF_MAX_INPUT`), else the length and the bytes."""
    n = len(s)
    if n <= 11:
        enc = _int_encoding(s)
        if enc is not None:
            return enc
    if compress and 20 < n <= LZF_MAX_INPUT:
        packed = lzf.compress(s, n - 4)
        if packed is not None:
            return b"\xc3" + save_len(len(packed)) + save_len(n) + packed
    return save_len(n) + s


def save_ms_time(ms: int) -> bytes:
    """``rdbSaveMillisecondTime``: int64 little-endian."""
    return struct.pack("<q", ms)


def save_binary_double(x: float) -> bytes:
    """``rdbSaveBinaryDoubleValue``: IEEE 754 little-endian."""
    return struct.pack("<d", x)


def d2string(x: float) -> bytes:
    """Redis 7.0's ``d2string`` (how zset listpacks store scores): integers in (-2**52, 2**52)
    as integers, otherwise ``%.17g``; ``inf``/``-inf``/``nan``; ``0`` and ``-0``."""
    if math.isnan(x):
        return b"nan"
    if math.isinf(x):
        return b"inf" if x > 0 else b"-inf"
    if x == 0:
        return b"-0" if math.copysign(1.0, x) < 0 else b"0"
    if -4503599627370495.0 < x < 4503599627370496.0 and x == int(x):
        return b"%d" % int(x)
    return b"%.17g" % x


class Reader:
    """Reads RDB primitives from ``buf`` starting at ``pos``; errors carry the absolute offset
    (``base`` + position), so a file loader can name where the damage is."""

    __slots__ = ("base", "buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None, base: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.base = base

    def error(self, message: str) -> RdbFormatError:
        """An :class:`RdbFormatError` at the current position."""
        return RdbFormatError(message, self.base + self.pos)

    @property
    def remaining(self) -> int:
        """Bytes left to read."""
        return self.end - self.pos

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes (fails if fewer are left)."""
        if n < 0 or n > self.end - self.pos:
            raise self.error("unexpected end of data")
        p = self.pos
        self.pos = p + n
        return self.buf[p : p + n]

    def byte(self) -> int:
        """The next byte."""
        if self.pos >= self.end:
            raise self.error("unexpected end of data")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def length_or_encoding(self) -> tuple[int, bool]:
        """``rdbLoadLenByRef``: ``(length, False)`` or ``(special encoding, True)``."""
        b = self.byte()
        kind = b >> 6
        if kind == 0:
            return b & 0x3F, False
        if kind == 1:
            return ((b & 0x3F) << 8) | self.byte(), False
        if kind == 3:
            return b & 0x3F, True
        if b == 0x80:
            return int.from_bytes(self.read(4), "big"), False
        if b == 0x81:
            return int.from_bytes(self.read(8), "big"), False
        raise self.error(f"unknown length encoding 0x{b:02x}")

    def length(self) -> int:
        """A plain length (a special encoding here is damage)."""
        n, encoded = self.length_or_encoding()
        if encoded:
            raise self.error("string encoding where a length was expected")
        return n

    def count(self, min_item_bytes: int = 1) -> int:
        """An element count, refused when the bytes left cannot hold that many elements."""
        n = self.length()
        if n > self.remaining // min_item_bytes:
            raise self.error(f"element count {n} larger than the data")
        return n

    def string(self) -> bytes:
        """``rdbGenericLoadStringObject``: integer-encoded, LZF or raw."""
        n, encoded = self.length_or_encoding()
        if not encoded:
            return self.read(n)
        if n == _ENC_INT8:
            return b"%d" % int.from_bytes(self.read(1), "little", signed=True)
        if n == _ENC_INT16:
            return b"%d" % int.from_bytes(self.read(2), "little", signed=True)
        if n == _ENC_INT32:
            return b"%d" % int.from_bytes(self.read(4), "little", signed=True)
        if n == _ENC_LZF:
            clen = self.length()
            ulen = self.length()
            at = self.pos
            data = self.read(clen)
            try:
                return lzf.decompress(data, ulen)
            except lzf.LzfError as exc:
                raise RdbFormatError(str(exc), self.base + at) from None
        raise self.error(f"unknown string encoding {n}")

    def ms_time(self) -> int:
        """``rdbLoadMillisecondTime``: int64 little-endian."""
        return int.from_bytes(self.read(8), "little", signed=True)

    def u64_len(self) -> int:
        """A length read as Redis's signed counters are stored (uint64, -1 for 2**64 - 1)."""
        n = self.length()
        return n - (1 << 64) if n >= 1 << 63 else n

    def binary_double(self) -> float:
        """``rdbLoadBinaryDoubleValue``."""
        x: float = struct.unpack("<d", self.read(8))[0]
        return x

    def string_double(self) -> float:
        """``rdbLoadDoubleValue`` (the old ZSET type): 253 nan, 254 +inf, 255 -inf, else a
        length-prefixed decimal."""
        n = self.byte()
        if n == 253:
            return math.nan
        if n == 254:
            return math.inf
        if n == 255:
            return -math.inf
        text = self.read(n)
        try:
            return float(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise self.error("bad double value") from None
