"""Bit operations on strings: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD, BITFIELD_RO.

Ported from Redis 7.0's ``bitops.c``, quirks included: BITCOUNT and BITPOS look the key up
before they parse the range (a missing key answers 0 / -1 whatever the range says), BITFIELD
parses every operation before it touches the key, and its signed overflow check computes its
limits in wrapping int64 arithmetic as C does.

A write never builds more than the final string once: the bytes it changes are collected in
a small overlay and the result is joined from views of the old value, the changed bytes and a
zero gap (``bytes(n)``), as SETRANGE does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.errors import CommandError
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_STRING
from streamworker.engine.numbers import parse_int
from streamworker.engine.replies import NULL_BULK

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_U64 = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1
_I64_MIN = -(1 << 63)


def _i64(value: int) -> int:
    """``value`` wrapped to int64, as C's signed arithmetic wraps on x86-64."""
    value &= _U64
    return value - (1 << 64) if value >> 63 else value


def _max_bulk_len(ctx: Ctx) -> int:
    return int(ctx.engine.config.get("proto-max-bulk-len") or 512 * 1024 * 1024)


def _bit_offset(ctx: Ctx, arg: bytes, hash_ok: bool = False, bits: int = 0) -> int:
    """Redis's getBitOffsetFromArgument: a bit offset below proto-max-bulk-len bytes; with
    ``hash_ok`` (BITFIELD) ``#N`` means N * bits."""
    use_hash = hash_ok and bits > 0 and arg[:1] == b"#"
    value = parse_int(arg[1:] if use_hash else arg)
    if value is None:
        raise CommandError(msgs.BIT_OFFSET_OUT_OF_RANGE)
    if use_hash:
        value = _i64(value * bits)
    if value < 0 or (value >> 3) >= _max_bulk_len(ctx):
        raise CommandError(msgs.BIT_OFFSET_OUT_OF_RANGE)
    return value


def _string(ctx: Ctx, key: bytes) -> bytes | None:
    value = ctx.db.get(key)
    if value is not None and type(value) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    return value


class _Overlay:
    """A string being changed: the old value, the length it grows to, and the changed bytes."""

    __slots__ = ("base", "changed", "length")

    def __init__(self, base: bytes, length: int) -> None:
        self.base = base
        self.length = max(length, len(base))
        self.changed: dict[int, int] = {}

    def byte(self, i: int) -> int:
        got = self.changed.get(i)
        if got is not None:
            return got
        return self.base[i] if i < len(self.base) else 0

    def set_byte(self, i: int, value: int) -> None:
        self.changed[i] = value

    def get_bits(self, offset: int, bits: int) -> int:
        first = offset >> 3
        last = (offset + bits - 1) >> 3
        window = 0
        for i in range(first, last + 1):
            window = (window << 8) | self.byte(i)
        shift = (last + 1) * 8 - (offset + bits)
        return (window >> shift) & ((1 << bits) - 1)

    def set_bits(self, offset: int, bits: int, value: int) -> None:
        first = offset >> 3
        last = (offset + bits - 1) >> 3
        window = 0
        for i in range(first, last + 1):
            window = (window << 8) | self.byte(i)
        shift = (last + 1) * 8 - (offset + bits)
        mask = ((1 << bits) - 1) << shift
        window = (window & ~mask) | ((value << shift) & mask)
        for i in range(last, first - 1, -1):
            self.set_byte(i, window & 0xFF)
            window >>= 8

    def build(self) -> bytes:
        """The final value: one join of views of the old bytes, the changed bytes and zeros."""
        base = self.base
        changed = {i: v for i, v in self.changed.items() if i >= len(base) or base[i] != v}
        if not changed and self.length == len(base):
            return base
        view = memoryview(base)
        pieces: list[bytes | memoryview] = []
        pos = 0
        for i in sorted(changed):
            if i > pos:
                if pos < len(base):
                    pieces.append(view[pos : min(i, len(base))])
                if i > len(base) and pos < i:
                    pieces.append(bytes(i - max(pos, len(base))))
            pieces.append(bytes((changed[i],)))
            pos = i + 1
        if pos < len(base):
            pieces.append(view[pos:])
        if self.length > max(pos, len(base)):
            pieces.append(bytes(self.length - max(pos, len(base))))
        out = b"".join(pieces)
        view.release()
        return out


def _store(ctx: Ctx, key: bytes, existed: bool, overlay: _Overlay) -> bool:
    """Write the overlay back; True if the key changed (created, grown or a byte changed)."""
    new = overlay.build()
    # Redis writes bits into a private raw copy of the string, changed or not.
    if existed and new is overlay.base:
        ctx.db.mark_big(key)
        return False
    ctx.db.set(key, new, keep_ttl=True)
    ctx.db.mark_big(key)
    return True


@command("setbit", arity=4, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def setbit(ctx: Ctx, args: list[bytes]) -> Reply:
    """SETBIT key offset 0|1 -> the bit's previous value."""
    offset = _bit_offset(ctx, args[1])
    on = to_int(args[2], msgs.BIT_VALUE_OUT_OF_RANGE)
    if on & ~1:
        raise CommandError(msgs.BIT_VALUE_OUT_OF_RANGE)
    key = args[0]
    old = _string(ctx, key)
    overlay = _Overlay(old if old is not None else b"", (offset >> 3) + 1)
    before = overlay.get_bits(offset, 1)
    overlay.set_bits(offset, 1, on)
    if _store(ctx, key, old is not None, overlay):
        ctx.notify(NOTIFY_STRING, b"setbit", key)
    else:
        # Redis 7.0 counts a change only for a new bit value or a longer string.
        ctx.no_propagate()
        ctx.changed(0)
    return before


@command("getbit", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def getbit(ctx: Ctx, args: list[bytes]) -> Reply:
    """GETBIT key offset -> 0|1 (0 past the end or for a missing key)."""
    offset = _bit_offset(ctx, args[1])
    value = _string(ctx, args[0])
    if value is None:
        return 0
    byte = offset >> 3
    if byte >= len(value):
        return 0
    return (value[byte] >> (7 - (offset & 7))) & 1


def _range_unit(arg: bytes) -> bool:
    low = arg.lower()
    if low == b"bit":
        return True
    if low == b"byte":
        return False
    raise CommandError(msgs.SYNTAX)


def _bit_range(start: int, end: int, total_bytes: int, is_bit: bool) -> tuple[int, int]:
    """Clamp ``start``/``end`` as Redis does; the result is an inclusive bit range (empty when
    start > end)."""
    total = total_bytes * 8 if is_bit else total_bytes
    if start < 0:
        start += total
    if end < 0:
        end += total
    start = max(start, 0)
    end = max(end, 0)
    end = min(end, total - 1)
    if is_bit:
        return start, end
    return start * 8, end * 8 + 7


@command("bitcount", arity=-2, flags=("readonly",), first_key=1, last_key=1, step=1)
def bitcount(ctx: Ctx, args: list[bytes]) -> Reply:
    """BITCOUNT key [start end [BYTE|BIT]] -> number of set bits."""
    value = _string(ctx, args[0])
    if value is None:
        return 0
    n = len(args)
    if n == 1:
        return _popcount(value, 0, len(value) * 8 - 1) if value else 0
    if n not in (3, 4):
        raise CommandError(msgs.SYNTAX)
    start = to_int(args[1])
    end = to_int(args[2])
    if start < 0 and end < 0 and start > end:
        return 0
    is_bit = _range_unit(args[3]) if n == 4 else False
    lo, hi = _bit_range(start, end, len(value), is_bit)
    if lo > hi:
        return 0
    return _popcount(value, lo, hi)


def _find_bit(value: bytes, lo: int, hi: int, bit: int) -> int:
    """First position in the inclusive bit range [lo, hi] holding ``bit``, or -1 (a regex
    search skips whole bytes without copying the string)."""
    first, last = lo >> 3, hi >> 3
    pattern = _NOT_ZERO if bit else _NOT_ONES
    pos = first
    while True:
        m = pattern.search(value, pos, last + 1)
        if m is None:
            return -1
        i = m.start()
        b = value[i] if bit else value[i] ^ 0xFF
        if i == first:
            b &= 0xFF >> (lo & 7)
        if i == last:
            b &= (0xFF << (7 - (hi & 7))) & 0xFF
        if b:
            return i * 8 + 8 - b.bit_length()
        pos = i + 1


def _popcount(value: bytes, lo: int, hi: int) -> int:
    """Set bits in the inclusive bit range [lo, hi], counted a chunk at a time."""
    first, last = lo >> 3, hi >> 3
    view = memoryview(value)
    total = 0
    for at in range(first, last + 1, _CHUNK):
        total += int.from_bytes(view[at : min(at + _CHUNK, last + 1)], "big").bit_count()
    view.release()
    total -= (value[first] & ~(0xFF >> (lo & 7)) & 0xFF).bit_count()
    total -= (value[last] & ((1 << (7 - (hi & 7))) - 1)).bit_count()
    return total


def _invert(chunk: bytes) -> bytes:
    return chunk.translate(_INVERT)


_INVERT = bytes(255 - i for i in range(256))
_NOT_ZERO = re.compile(rb"[^\x00]")
_NOT_ONES = re.compile(rb"[^\xff]")
_CHUNK = 1 << 20


@command("bitpos", arity=-3, flags=("readonly",), first_key=1, last_key=1, step=1)
def bitpos(ctx: Ctx, args: list[bytes]) -> Reply:
    """BITPOS key bit [start [end [BYTE|BIT]]] -> first position of ``bit``, or -1."""
    bit = to_int(args[1])
    if bit not in (0, 1):
        raise CommandError(msgs.BITPOS_BIT_NOT_0_OR_1)
    value = _string(ctx, args[0])
    if value is None:
        return -1 if bit else 0
    n = len(args)
    end_given = False
    if n == 2:
        lo, hi = 0, len(value) * 8 - 1
    elif n in (3, 4, 5):
        start = to_int(args[2])
        is_bit = _range_unit(args[4]) if n == 5 else False
        if n >= 4:
            end = to_int(args[3])
            end_given = True
        else:
            end = len(value) * 8 - 1 if is_bit else len(value) - 1
        lo, hi = _bit_range(start, end, len(value), is_bit)
    else:
        raise CommandError(msgs.SYNTAX)
    if lo > hi:
        return -1
    pos = _find_bit(value, lo, hi, bit)
    if pos == -1 and bit == 0 and not end_given:
        # No end given: the string counts as padded with zeros on the right.
        return ((hi >> 3) + 1) * 8
    return pos


@command("bitop", arity=-4, flags=("write", "denyoom"), first_key=2, last_key=-1, step=1)
def bitop(ctx: Ctx, args: list[bytes]) -> Reply:
    """BITOP AND|OR|XOR|NOT destkey key [key ...] -> the length of the result."""
    op = args[0].lower()
    if op not in (b"and", b"or", b"xor", b"not"):
        raise CommandError(msgs.SYNTAX)
    if op == b"not" and len(args) != 3:
        raise CommandError(msgs.BITOP_NOT_SINGLE_KEY)
    dest = args[1]
    sources = [_string(ctx, key) or b"" for key in args[2:]]
    maxlen = max(len(s) for s in sources)
    if not maxlen:
        if ctx.db.discard(dest):
            ctx.notify(NOTIFY_GENERIC, b"del", dest)
        else:
            ctx.changed(0)
        return 0
    if op == b"not":
        result = _invert(sources[0])
    else:
        # A chunk at a time; shorter strings count as padded with zero bytes on the right.
        pieces = []
        for at in range(0, maxlen, _CHUNK):
            size = min(_CHUNK, maxlen - at)
            acc = int.from_bytes(sources[0][at : at + size].ljust(size, b"\0"), "big")
            for src in sources[1:]:
                other = int.from_bytes(src[at : at + size].ljust(size, b"\0"), "big")
                if op == b"and":
                    acc &= other
                elif op == b"or":
                    acc |= other
                else:
                    acc ^= other
            pieces.append(acc.to_bytes(size, "big"))
        result = b"".join(pieces)
    ctx.db.set_key(dest, result)
    ctx.notify(NOTIFY_STRING, b"set", dest)
    ctx.db.mark_big(dest)  # Redis stores the result as a raw string
    return maxlen


_GET, _SET, _INCRBY = 0, 1, 2
_WRAP, _SAT, _FAIL = 0, 1, 2


def _bitfield_type(arg: bytes) -> tuple[bool, int]:
    """Redis's getBitfieldTypeFromArgument: (signed, bits), i1..i64 or u1..u63."""
    kind = arg[:1]
    if kind not in (b"i", b"u"):
        raise CommandError(msgs.BITFIELD_BAD_TYPE)
    signed = kind == b"i"
    # strlen(): the width ends at the first NUL byte, as in C.
    bits = parse_int(arg[1:].split(b"\0", 1)[0])
    if bits is None or bits < 1 or bits > (64 if signed else 63):
        raise CommandError(msgs.BITFIELD_BAD_TYPE)
    return signed, bits


def _unsigned_overflow(value: int, incr: int, bits: int, owtype: int) -> tuple[bool, int]:
    """checkUnsignedBitfieldOverflow: (overflowed, the value to store instead)."""
    top = (1 << bits) - 1
    value &= _U64
    maxincr = _i64(top - value)
    minincr = _i64(-value)
    if value > top or (incr > 0 and incr > maxincr):
        limit = top
    elif incr < 0 and incr < minincr:
        limit = 0
    else:
        return False, 0
    if owtype == _WRAP:
        limit = (value + incr) & top
    return True, limit


def _signed_overflow(value: int, incr: int, bits: int, owtype: int) -> tuple[bool, int]:
    """checkSignedBitfieldOverflow, with its int64 wrap-around in maxincr/minincr."""
    top = _I64_MAX if bits == 64 else (1 << (bits - 1)) - 1
    bottom = -top - 1
    maxincr = _i64(top - value)
    minincr = _i64(bottom - value)
    if (
        value > top
        or (bits != 64 and incr > maxincr)
        or (value >= 0 and incr > 0 and incr > maxincr)
    ):
        limit = top
    elif (
        value < bottom
        or (bits != 64 and incr < minincr)
        or (value < 0 and incr < 0 and incr < minincr)
    ):
        limit = bottom
    else:
        return False, 0
    if owtype == _WRAP:
        c = (value + incr) & _U64
        if bits < 64:
            c &= (1 << bits) - 1
            if c >> (bits - 1):
                c -= 1 << bits
        limit = _i64(c)
    return True, limit


def _to_signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) else value


def _bitfield(ctx: Ctx, args: list[bytes], readonly_cmd: bool) -> Reply:
    key = args[0]
    ops: list[tuple[int, int, bool, int, int, int]] = []
    owtype = _WRAP
    readonly = True
    highest = 0
    j = 1
    n = len(args)
    while j < n:
        remargs = n - j - 1
        sub = args[j].lower()
        if sub == b"get" and remargs >= 2:
            opcode = _GET
        elif sub == b"set" and remargs >= 3:
            opcode = _SET
        elif sub == b"incrby" and remargs >= 3:
            opcode = _INCRBY
        elif sub == b"overflow" and remargs >= 1:
            kind = args[j + 1].lower()
            if kind == b"wrap":
                owtype = _WRAP
            elif kind == b"sat":
                owtype = _SAT
            elif kind == b"fail":
                owtype = _FAIL
            else:
                raise CommandError(msgs.BITFIELD_BAD_OVERFLOW)
            j += 2
            continue
        else:
            raise CommandError(msgs.SYNTAX)
        signed, bits = _bitfield_type(args[j + 1])
        offset = _bit_offset(ctx, args[j + 2], True, bits)
        i64 = 0
        if opcode != _GET:
            readonly = False
            highest = max(highest, offset + bits - 1)
            i64 = to_int(args[j + 3])
        ops.append((opcode, offset, signed, bits, i64, owtype))
        j += 3 if opcode == _GET else 4
    if not readonly and readonly_cmd:
        raise CommandError(msgs.BITFIELD_RO_GET_ONLY)
    value = _string(ctx, key)
    if readonly:
        overlay = _Overlay(value if value is not None else b"", 0)
    else:
        overlay = _Overlay(value if value is not None else b"", (highest >> 3) + 1)
    out: list[Reply] = []
    # Redis 7.0 counts each SET/INCRBY that changed its field, or all of them when the
    # string had to be created or grown for them.
    grew = not readonly and (value is None or len(value) <= highest >> 3)
    changes = 0
    for opcode, offset, signed, bits, i64, ow in ops:
        if opcode == _GET:
            # Reads past the end (of a read-only lookup too) see zero bytes.
            raw = overlay.get_bits(offset, bits)
            out.append(_to_signed(raw, bits) if signed else raw)
            continue
        raw_old = overlay.get_bits(offset, bits)
        if signed:
            old = _to_signed(raw_old, bits)
            if opcode == _INCRBY:
                overflow, limit = _signed_overflow(old, i64, bits, ow)
                new = limit if overflow else old + i64
                ret = new
            else:
                overflow, limit = _signed_overflow(i64, 0, bits, ow)
                new = limit if overflow else i64
                ret = old
        else:
            old = raw_old
            if opcode == _INCRBY:
                overflow, limit = _unsigned_overflow(old, i64, bits, ow)
                new = limit if overflow else old + i64
                ret = new
            else:
                overflow, limit = _unsigned_overflow(i64, 0, bits, ow)
                new = limit if overflow else i64 & _U64
                ret = old
        if overflow and ow == _FAIL:
            out.append(NULL_BULK)
            continue
        out.append(ret)
        stored = new & ((1 << bits) - 1)
        if grew or stored != raw_old:
            changes += 1
        overlay.set_bits(offset, bits, stored)
    ctx.changed(changes)
    if not readonly and _store(ctx, key, value is not None, overlay):
        # As SETBIT: the event only when the string changed.
        ctx.notify(NOTIFY_STRING, b"setbit", key)
    else:
        ctx.no_propagate()
    return out


@command("bitfield", arity=-2, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def bitfield(ctx: Ctx, args: list[bytes]) -> Reply:
    """BITFIELD key [GET type offset | SET type offset value | INCRBY type offset increment |
    OVERFLOW WRAP|SAT|FAIL] ... -> one reply per GET/SET/INCRBY (nil when FAIL refused it)."""
    return _bitfield(ctx, args, False)


@command("bitfield_ro", arity=-2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def bitfield_ro(ctx: Ctx, args: list[bytes]) -> Reply:
    """BITFIELD_RO key [GET type offset ...] -> the values read."""
    return _bitfield(ctx, args, True)
