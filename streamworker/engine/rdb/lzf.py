"""LZF, as Redis's bundled liblzf 3.6 compresses and decompresses it (pure Python).

Why not a PyPI binding: the engine imports only the standard library (import-linter), and a DUMP
payload is byte-identical to redis-server's only if the compressor makes the same choices as the
liblzf *configuration* Redis builds (``HLOG`` 16, ``VERY_FAST``, no table initialisation, no
match at offset 0 of the input), so the algorithm is reproduced step by step here:

* a 65536-slot hash table of the last position where each 3-byte prefix (hashed as liblzf's
  ``IDX`` with ``VERY_FAST``) was seen; a match needs the same 3 bytes, a distance below 8192,
  at least 5 bytes left after the current position, and a reference position above 0;
* literals run up to 32 bytes (``000LLLLL`` + bytes), back-references are ``LLLooooo oooooooo``
  or ``111ooooo LLLLLLLL oooooooo`` for lengths of 3 to 264 bytes;
* after a match the two positions before the new one are hashed (``VERY_FAST``);
* compression fails (``None``) exactly where liblzf returns 0 for the output room it is given.

Decompression checks every reference and length against the buffers and raises
:class:`LzfError` for a damaged input (never reads or allocates past the declared size).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LzfError", "compress", "decompress"]

_HSIZE_MASK = 0xFFFF
_MAX_LIT = 32
_MAX_OFF = 1 << 13
_MAX_REF = (1 << 8) + (1 << 3)


class LzfError(ValueError):
    """A compressed blob that does not decompress to its declared length."""


def compress(data: bytes, out_len: int) -> bytes | None:
    """``data`` compressed in at most ``out_len`` bytes, or None where liblzf gives up.

    Redis calls it with ``out_len = len(data) - 4`` for strings longer than 20 bytes."""
    in_len = len(data)
    if not in_len or out_len <= 0:
        return None
    # The hash table: a list for big inputs (indexing beats dict lookups), a dict for the
    # many short strings (no 64K-slot list to build each time). -1: an empty slot.
    htab: Any = [-1] * (_HSIZE_MASK + 1) if in_len > 4096 else _Slots()
    # Room for the few bytes liblzf may write past its checks before it notices.
    out = bytearray(out_len + 8)
    out_end = out_len
    ip = 0
    op = 1  # byte 0 is the first literal run's control byte
    lit = 0
    lit_start = 0  # where the open literal run starts in data (copied when it closes)
    in_end = in_len
    limit = in_end - 2
    hval = (data[0] << 8) | data[1] if in_len > 1 else data[0] << 8
    while ip < limit:
        hval = ((hval << 8) | data[ip + 2]) & 0xFFFFFF  # IDX reads only the low 24 bits
        slot = ((hval >> 8) - hval * 5) & _HSIZE_MASK
        ref = htab[slot]
        htab[slot] = ip
        if (
            ref > 0
            and ip - ref <= _MAX_OFF
            and data[ref] == data[ip]
            and data[ref + 1] == data[ip + 1]
            and data[ref + 2] == data[ip + 2]
        ):
            off = ip - ref - 1
            length = 2
            maxlen = in_end - ip - length
            if maxlen > _MAX_REF:
                maxlen = _MAX_REF
            # liblzf 3.6's room check: conservative first, exact when the run is empty.
            if op + 3 + 1 >= out_end and op - (0 if lit else 1) + 3 + 1 >= out_end:
                return None
            if lit:
                out[op - lit - 1] = lit - 1  # close the literal run
                out[op - lit : op] = data[lit_start:ip]
            else:
                op -= 1  # an empty run is dropped
            # liblzf compares 16 bytes unconditionally when more than 16 may match, then
            # one by one up to maxlen: the same lengths come out of this loop.
            mismatch = False
            if maxlen > 16:
                for _ in range(16):
                    length += 1
                    if data[ref + length] != data[ip + length]:
                        mismatch = True
                        break
            if not mismatch:
                length += 1
                while length < maxlen and data[ref + length] == data[ip + length]:
                    length += 1
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
            op += 2  # the byte after is the next literal run's control byte
            lit = 0
            ip += length + 1
            lit_start = ip
            if ip >= limit:
                break
            ip -= 2
            hval = (data[ip] << 8) | data[ip + 1]
            hval = ((hval << 8) | data[ip + 2]) & 0xFFFFFF
            htab[((hval >> 8) - hval * 5) & _HSIZE_MASK] = ip
            ip += 1
            hval = ((hval << 8) | data[ip + 2]) & 0xFFFFFF
            htab[((hval >> 8) - hval * 5) & _HSIZE_MASK] = ip
            ip += 1
        else:
            if op >= out_end:
                return None
            lit += 1
            op += 1
            ip += 1
            if lit == _MAX_LIT:
                out[op - lit - 1] = lit - 1
                out[op - lit : op] = data[lit_start:ip]
                lit = 0
                op += 1
                lit_start = ip
    if op + 3 > out_end:
        return None
    while ip < in_end:
        lit += 1
        op += 1
        ip += 1
        if lit == _MAX_LIT:
            out[op - lit - 1] = lit - 1
            out[op - lit : op] = data[lit_start:ip]
            lit = 0
            op += 1
            lit_start = ip
    if lit:
        out[op - lit - 1] = lit - 1
        out[op - lit : op] = data[lit_start:ip]
    else:
        op -= 1
    return bytes(out[:op])


class _Slots(dict[int, int]):
    """A sparse hash table whose empty slots read as -1."""

    def __missing__(self, key: int) -> int:
        return -1


def decompress(data: bytes | memoryview, out_len: int) -> bytes:
    """Decompress ``data`` to exactly ``out_len`` bytes; :class:`LzfError` otherwise."""
    src = bytes(data)
    n = len(src)
    # Every input byte yields at most 264 / 2 output bytes: a larger claim is damage, and
    # checking it first keeps a hostile length from reserving memory.
    if out_len < 0 or out_len > n * 133 + 1:
        raise LzfError("LZF length out of range")
    out = bytearray()
    ip = 0
    while ip < n:
        ctrl = src[ip]
        ip += 1
        if ctrl < 32:
            run = ctrl + 1
            if ip + run > n or len(out) + run > out_len:
                raise LzfError("LZF literal run past the end")
            out += src[ip : ip + run]
            ip += run
            continue
        length = ctrl >> 5
        if length == 7:
            if ip >= n:
                raise LzfError("LZF truncated back-reference")
            length += src[ip]
            ip += 1
        if ip >= n:
            raise LzfError("LZF truncated back-reference")
        ref = len(out) - ((ctrl & 0x1F) << 8) - 1 - src[ip]
        ip += 1
        length += 2
        if ref < 0 or len(out) + length > out_len:
            raise LzfError("LZF back-reference out of range")
        if ref + length <= len(out):
            out += out[ref : ref + length]
        else:
            for k in range(length):  # overlapping copy repeats the pattern
                out.append(out[ref + k])
    if len(out) != out_len:
        raise LzfError("LZF length mismatch")
    return bytes(out)
