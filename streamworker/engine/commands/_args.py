"""Argument helpers shared by the command modules (Redis's getXFromObjectOrReply family)."""

from __future__ import annotations

import math

from streamworker.engine import msgs
from streamworker.engine.errors import CommandError
from streamworker.engine.numbers import ld_mul_int, ld_parse, parse_double, parse_int

__all__ = ["to_double", "to_int", "to_long_in", "to_long_nonneg", "to_str"]


def to_int(arg: bytes, text: str = msgs.NOT_INTEGER) -> int:
    """int64 value of ``arg`` or CommandError(``text``)."""
    value = parse_int(arg)
    if value is None:
        raise CommandError(text)
    return value


def to_long_in(arg: bytes, lo: int, hi: int, text: str | None = None) -> int:
    """Redis's getRangeLongFromObjectOrReply: ``text`` (when given) for a non-integer too,
    else ``value is out of range, value must between LO and HI``."""
    value = parse_int(arg)
    if value is None:
        raise CommandError(text if text is not None else msgs.NOT_INTEGER)
    if not lo <= value <= hi:
        if text is not None:
            raise CommandError(text)
        raise CommandError(f"ERR value is out of range, value must between {lo} and {hi}")
    return value


def to_long_nonneg(arg: bytes, what: str = "value") -> int:
    """Redis's ``getPositiveLongFromObjectOrReply``: ``ERR value is out of range, must be
    positive`` for negatives."""
    value = to_int(arg)
    if value < 0:
        raise CommandError(msgs.not_positive(what))
    return value


def to_double(arg: bytes, text: str = msgs.NOT_FLOAT) -> float:
    """Double value of ``arg`` or CommandError(``text``)."""
    value = parse_double(arg)
    if value is None:
        raise CommandError(text)
    return value


def to_str(arg: bytes) -> str:
    """``arg`` as text for error messages, byte-preserving."""
    return arg.decode("utf-8", "surrogateescape")


def to_timeout_ms(arg: bytes, seconds: bool, now_ms: int = 0) -> int:
    """A blocking timeout as relative ms (0 = forever), as Redis 7.0's
    getTimeoutFromObjectOrReply: seconds as a long double for BLPOP & co (``ceill(s * 1000)``,
    so -0.0001 is 0 = forever), integer ms for XREAD BLOCK."""
    if seconds:
        ld = ld_parse(arg)
        if ld is None:
            raise CommandError(msgs.TIMEOUT_NOT_FLOAT)
        product = ld_mul_int(ld, 1000)
        # C's (long long) cast of an out-of-range value yields LLONG_MIN on x86-64.
        value = -(2**63) if not product.is_finite() else math.ceil(product.value)
        if not -(2**63) <= value < 2**63:
            value = -(2**63)
    else:
        value = to_int(arg, msgs.TIMEOUT_NOT_INTEGER)
    if value < 0:
        raise CommandError(msgs.TIMEOUT_NEGATIVE)
    return value
