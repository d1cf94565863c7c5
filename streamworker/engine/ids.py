"""Stream IDs as packed integers, and Redis 7.0's ID parsers.

A stream ID ``<ms>-<seq>`` (two unsigned 64-bit numbers) is held as one Python ``int``,
``(ms << 64) | seq``: ordering of the ints is the ordering of the IDs, comparison is one C-level
operation, and the value is small. Every parser here mirrors the corresponding Redis 7.0
function bit for bit, including its quirks (``strtoull`` accepts leading blanks, a ``+`` sign,
leading zeros, and a ``-`` that wraps; C string functions stop at a NUL byte), because the
differential tests compare replies to malformed input too.

Parsers return ``None`` for an invalid ID; the caller raises the error text of its command.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MASK64",
    "MAX_ID",
    "MAX_U64",
    "MIN_ID",
    "decr",
    "format_id",
    "incr",
    "make_id",
    "ms_of",
    "parse_id",
    "parse_interval_id",
    "parse_ll",
    "parse_strict_id",
    "parse_u64",
    "parse_xadd_id",
    "seq_of",
]

MAX_U64: Final = (1 << 64) - 1
MASK64: Final = MAX_U64
MIN_ID: Final = 0
"""``0-0``."""
MAX_ID: Final = (MAX_U64 << 64) | MAX_U64
"""``18446744073709551615-18446744073709551615``."""

_LLONG_MIN: Final = -(1 << 63)
_LLONG_MAX: Final = (1 << 63) - 1
# C isspace() in the "C" locale, which strtoull skips before the number.
_C_SPACE: Final = b" \t\n\v\f\r"


def make_id(ms: int, seq: int) -> int:
    """Pack ``ms-seq`` (each 0..2**64-1)."""
    return (ms << 64) | seq


def ms_of(sid: int) -> int:
    """The millisecond part."""
    return sid >> 64


def seq_of(sid: int) -> int:
    """The sequence part."""
    return sid & MASK64


def format_id(sid: int) -> bytes:
    """``b"<ms>-<seq>"``, as Redis writes IDs in replies."""
    return b"%d-%d" % (sid >> 64, sid & MASK64)


def incr(sid: int) -> int | None:
    """The next ID (``streamIncrID``); None past ``MAX_ID``."""
    return None if sid >= MAX_ID else sid + 1


def decr(sid: int) -> int | None:
    """The previous ID (``streamDecrID``); None before ``0-0``."""
    return None if sid <= 0 else sid - 1


def parse_ll(s: bytes) -> int | None:
    """Redis's ``string2ll``: a strict signed 64-bit decimal (no blanks, no ``+``, no leading
    zeros, no ``-0``); None if ``s`` is not one."""
    n = len(s)
    if n == 0 or n > 20:
        return None
    if s.isdigit():
        if s[0] == 0x30 and n > 1:
            return None
        v = int(s)
        return v if v <= _LLONG_MAX else None
    if s[0] == 0x2D and n > 1 and 0x31 <= s[1] <= 0x39 and s[1:].isdigit():
        v = int(s)
        return v if v >= _LLONG_MIN else None
    return None


def _strtoull(s: bytes) -> int | None:
    # glibc strtoull(s, &end, 10) with Redis's checks: the whole string must be consumed,
    # ERANGE is an error, and a leading '-' negates modulo 2**64 without error.
    i = 0
    n = len(s)
    while i < n and s[i] in _C_SPACE:
        i += 1
    neg = False
    if i < n and s[i] in b"+-":
        neg = s[i] == 0x2D
        i += 1
    digits = s[i:]
    if not digits or not digits.isdigit():
        return None
    v = int(digits)
    if v > MAX_U64:
        return None
    return (-v) & MAX_U64 if neg else v


def parse_u64(s: bytes) -> int | None:
    """Redis's ``string2ull`` on a C string: an unsigned 64-bit decimal, or None."""
    if s.isdigit():
        if len(s) < 20:
            return int(s)
        v = int(s)
        return v if v <= MAX_U64 else None
    if b"\0" in s:
        s = s.split(b"\0", 1)[0]
    v2 = parse_ll(s)
    if v2 is not None:
        return v2 if v2 >= 0 else None
    return _strtoull(s)


def _parse(s: bytes, missing_seq: int, strict: bool, xadd: bool) -> tuple[int, bool] | None:
    # streamGenericParseIDOrReply. Returns (id, seq_given); seq_given is False only for the
    # XADD "<ms>-*" form.
    if len(s) > 127:
        return None
    if b"\0" in s:
        s = s.split(b"\0", 1)[0]
    if len(s) == 1:
        c = s[0]
        if c == 0x2D:  # '-'
            return None if strict else (MIN_ID, True)
        if c == 0x2B:  # '+'
            return None if strict else (MAX_ID, True)
    dash = s.find(b"-")
    if dash < 0:
        ms = parse_u64(s)
        if ms is None:
            return None
        return (ms << 64) | missing_seq, True
    ms = parse_u64(s[:dash])
    if ms is None:
        return None
    tail = s[dash + 1 :]
    if xadd and tail == b"*":
        return ms << 64, False
    seq = parse_u64(tail)
    if seq is None:
        return None
    return (ms << 64) | seq, True


def parse_id(s: bytes, missing_seq: int = 0) -> int | None:
    """``streamParseIDOrReply``: accepts ``-`` (0-0) and ``+`` (max); a bare ``ms`` gets
    ``missing_seq``."""
    r = _parse(s, missing_seq, False, False)
    return None if r is None else r[0]


def parse_strict_id(s: bytes, missing_seq: int = 0) -> int | None:
    """``streamParseStrictIDOrReply``: like :func:`parse_id` but ``-`` and ``+`` are invalid."""
    # Fast path for the canonical "<ms>-<seq>" (both parts plain digits, below 2**64).
    dash = s.find(b"-")
    if dash > 0:
        ms = s[:dash]
        seq = s[dash + 1 :]
        if ms.isdigit() and seq.isdigit() and len(ms) < 20 and len(seq) < 20:
            return (int(ms) << 64) | int(seq)
    r = _parse(s, missing_seq, True, False)
    return None if r is None else r[0]


def parse_xadd_id(s: bytes) -> tuple[int, bool] | None:
    """The XADD form: strict, plus ``<ms>-*``. Returns ``(id, seq_given)``; for ``<ms>-*`` the
    id is ``ms-0`` and ``seq_given`` is False."""
    return _parse(s, 0, True, True)


def parse_interval_id(s: bytes, missing_seq: int) -> tuple[int, bool] | None:
    """``streamParseIntervalIDOrReply``: ``(id, exclusive)``. A leading ``(`` (with more after
    it) makes the bound exclusive and the rest is parsed strictly (so ``(-``/``(+`` fail)."""
    if len(s) > 1 and s[0] == 0x28:  # '('
        sid = parse_strict_id(s[1:], missing_seq)
        return None if sid is None else (sid, True)
    sid = parse_id(s, missing_seq)
    return None if sid is None else (sid, False)
