"""LZF, the compression of Redis's RDB strings (liblzf 3.6 as Redis builds it), in pure Python.

:func:`compress` makes the same bytes as Redis's ``lzf_compress`` (``HLOG`` 16, ``VERY_FAST``,
``STRICT_ALIGN``, a hash table that starts empty), so a payload the engine writes (FUNCTION
DUMP) is byte-for-byte what redis-server writes for the same input. :func:`decompress` reads
what any LZF compressor wrote.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LzfError", "compress", "decompress"]

_HLOG: Final = 16
_HSIZE: Final = 1 << _HLOG
_MAX_LIT: Final = 1 << 5
_MAX_OFF: Final = 1 << 13
_MAX_REF: Final = (1 << 8) + (1 << 3)


class LzfError(ValueError):
    """Compressed data that does not decompress to the announced length."""


def _idx(h: int) -> int:
    # liblzf's VERY_FAST hash of the next three bytes (h holds them in its low 24 bits).
    return ((h >> (3 * 8 - _HLOG)) - h * 5) & (_HSIZE - 1)


def compress(data: bytes, out_len: int) -> bytes | None:
    """``data`` compressed, or None when the result would not fit in ``out_len`` bytes
    (liblzf returns 0 then; Redis passes ``len(data) - 4`` and stores the string raw)."""
    n = len(data)
    if n == 0 or out_len <= 0:
        return None
    # Positions stand for liblzf's pointers: 0 is both "empty slot" and the input's first byte,
    # which a match may never start at (the `ref > in_data` test), so an empty slot never
    # matches, as with the zeroed table.
    htab = [0] * _HSIZE
    out = bytearray(out_len + 3 + _MAX_LIT + 2)
    op = 1  # the first literal run's length byte is at 0
    lit = 0
    ip = 0
    end = n
    hval = (data[0] << 8) | data[1] if n >= 2 else 0
    while ip < end - 2:
        hval = ((hval << 8) | data[ip + 2]) & 0xFFFFFF
        slot = _idx(hval)
        ref = htab[slot]
        htab[slot] = ip
        off = ip - ref - 1
        if (
            0 <= off < _MAX_OFF
            and ip + 4 < end
            and ref > 0
            and data[ref] == data[ip]
            and data[ref + 1] == data[ip + 1]
            and data[ref + 2] == data[ip + 2]
        ):
            length = 2
            maxlen = min(end - ip - length, _MAX_REF)
            out[op - lit - 1] = lit - 1 & 0xFF  # close the literal run
            op -= 1 if lit == 0 else 0  # an empty run takes no byte
            if op + 3 + 1 >= out_len:
                return None
            stopped = False
            if maxlen > 16:
                # liblzf compares 16 bytes unchecked before its bounded loop; kept so that
                # the match lengths (and so the bytes) are the same.
                for _ in range(16):
                    length += 1
                    if data[ref + length] != data[ip + length]:
                        stopped = True
                        break
            if not stopped:
                while True:
                    length += 1
                    if not (length < maxlen and data[ref + length] == data[ip + length]):
                        break
            length -= 2
            ip += 1
            if length < 7:
                out[op] = ((off >> 8) + (length << 5)) & 0xFF
                op += 1
            else:
                out[op] = ((off >> 8) + (7 << 5)) & 0xFF
                out[op + 1] = (length - 7) & 0xFF
                op += 2
            out[op] = off & 0xFF
            op += 1
            lit = 0
            op += 1  # a new literal run
            ip += length + 1
            if ip >= end - 2:
                break
            ip -= 2
            hval = (data[ip] << 8) | data[ip + 1]
            hval = ((hval << 8) | data[ip + 2]) & 0xFFFFFF
            htab[_idx(hval)] = ip
            ip += 1
            hval = ((hval << 8) | data[ip + 2]) & 0xFFFFFF
            htab[_idx(hval)] = ip
            ip += 1
        else:
            if op >= out_len:
                return None
            lit += 1
            out[op] = data[ip]
            op += 1
            ip += 1
            if lit == _MAX_LIT:
                out[op - lit - 1] = lit - 1
                lit = 0
                op += 1
    if op + 3 > out_len:
        return None
    while ip < end:
        lit += 1
        out[op] = data[ip]
        op += 1
        ip += 1
        if lit == _MAX_LIT:
            out[op - lit - 1] = lit - 1
            lit = 0
            op += 1
    out[op - lit - 1] = lit - 1 & 0xFF
    op -= 1 if lit == 0 else 0
    return bytes(out[:op])


def decompress(data: bytes, out_len: int) -> bytes:
    """``data`` decompressed to exactly ``out_len`` bytes; LzfError if it does not."""
    out = bytearray()
    ip = 0
    n = len(data)
    while ip < n:
        ctrl = data[ip]
        ip += 1
        if ctrl < 32:
            run = ctrl + 1
            if ip + run > n or len(out) + run > out_len:
                raise LzfError("literal run past the end")
            out += data[ip : ip + run]
            ip += run
            continue
        length = ctrl >> 5
        if length == 7:
            if ip >= n:
                raise LzfError("truncated back reference")
            length += data[ip]
            ip += 1
        if ip >= n:
            raise LzfError("truncated back reference")
        ref = len(out) - ((ctrl & 0x1F) << 8) - data[ip] - 1
        ip += 1
        length += 2
        if ref < 0 or len(out) + length > out_len:
            raise LzfError("back reference out of range")
        for i in range(length):  # may overlap its own output (a run)
            out.append(out[ref + i])
    if len(out) != out_len:
        raise LzfError("decompressed length differs")
    return bytes(out)
