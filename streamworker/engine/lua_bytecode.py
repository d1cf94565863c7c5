"""Lua 5.1 bytecode: turn a chunk's tail calls into plain calls.

``redis.call`` is a Lua function in the engine's sandbox (it packs long argument lists before
crossing into Python); Redis's is a C function. A Lua tail call (``return redis.call(...)``)
to a Lua function drops the caller's frame, so an error raised by the call would lose the
script line Redis reports. The sandbox therefore loads scripts with every ``OP_TAILCALL`` made
an ``OP_CALL`` taking all results: the compiler always follows a tail call with
``OP_RETURN A 0``, which then returns those results, so the same instruction count, jumps and
line information stay valid and only the frame is kept.
"""

from __future__ import annotations

import struct

__all__ = ["BytecodeError", "without_tail_calls"]

_OP_CALL = 28
_OP_TAILCALL = 29
_HEADER = b"\x1bLua\x51\x00\x01\x04\x08\x04\x08\x00"


class BytecodeError(ValueError):
    """The dump is not a Lua 5.1 chunk of this build's layout."""


def without_tail_calls(dump: bytes) -> bytes:
    """``string.dump``'s output with each tail call made a call returning all its results.

    Raises :class:`BytecodeError` if the dump is not a little-endian, 64-bit-size_t Lua 5.1
    chunk (the layout lupa's bundled Lua 5.1 writes).
    """
    if not dump.startswith(_HEADER):
        raise BytecodeError("not a Lua 5.1 little-endian 64-bit chunk")
    out = bytearray(dump)
    end = _function(out, len(_HEADER))
    if end != len(out):
        raise BytecodeError("trailing bytes after the main function")
    return bytes(out)


def _string(buf: bytearray, pos: int) -> int:
    (n,) = struct.unpack_from("<Q", buf, pos)
    return pos + 8 + int(n)


def _int(buf: bytearray, pos: int) -> tuple[int, int]:
    (n,) = struct.unpack_from("<i", buf, pos)
    if n < 0:
        raise BytecodeError("negative count")
    return int(n), pos + 4


def _function(buf: bytearray, pos: int) -> int:
    # source, linedefined, lastlinedefined, nups/numparams/is_vararg/maxstacksize
    pos = _string(buf, pos) + 4 + 4 + 4
    ncode, pos = _int(buf, pos)
    for i in range(ncode):
        at = pos + 4 * i
        (ins,) = struct.unpack_from("<I", buf, at)
        if ins & 0x3F == _OP_TAILCALL:
            struct.pack_into("<I", buf, at, (ins & ~0x3F) | _OP_CALL)
    pos += 4 * ncode
    nconst, pos = _int(buf, pos)
    for _ in range(nconst):
        tag = buf[pos]
        pos += 1
        if tag == 1:  # boolean
            pos += 1
        elif tag == 3:  # number
            pos += 8
        elif tag == 4:  # string
            pos = _string(buf, pos)
        elif tag != 0:
            raise BytecodeError(f"unknown constant type {tag}")
    nprotos, pos = _int(buf, pos)
    for _ in range(nprotos):
        pos = _function(buf, pos)
    nlines, pos = _int(buf, pos)
    pos += 4 * nlines
    nlocals, pos = _int(buf, pos)
    for _ in range(nlocals):
        pos = _string(buf, pos) + 8
    nupvals, pos = _int(buf, pos)
    for _ in range(nupvals):
        pos = _string(buf, pos)
    if pos > len(buf):
        raise BytecodeError("truncated chunk")
    return pos
