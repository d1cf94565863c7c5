"""Number parsing and formatting with Redis 7.0's exact rules.

* :func:`parse_int` is ``string2ll`` (no ``+``, no spaces, no leading zeros, int64 range).
* :func:`parse_double` is ``getDoubleFromObject`` (``strtod`` that must consume everything, no
  leading space, no NaN, no overflow/underflow to 0).
* :func:`strtod_prefix` is bare ``strtod`` + "must consume everything" (range bounds).
* :func:`ld_parse` / :func:`ld_format_human` emulate x86-64 ``long double`` (64-bit
  significand) for INCRBYFLOAT/HINCRBYFLOAT, with :class:`fractions.Fraction` as exact carrier.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

__all__ = [
    "LLONG_MAX",
    "LLONG_MIN",
    "ld_add",
    "ld_format_human",
    "ld_parse",
    "parse_double",
    "parse_int",
    "strtod_prefix",
]

LLONG_MAX: Final = 2**63 - 1
LLONG_MIN: Final = -(2**63)


def parse_int(buf: bytes) -> int | None:
    """Redis's ``string2ll``: the int64 value of ``buf`` or None."""
    n = len(buf)
    if n == 0 or n > 20:
        return None
    if n == 1:
        c = buf[0]
        return c - 0x30 if 0x30 <= c <= 0x39 else None
    start = 1 if buf[0] == 0x2D else 0
    if not (0x31 <= buf[start] <= 0x39) if start < n else True:
        return None
    digits = buf[start:]
    if not digits.isdigit():
        return None
    value = int(digits)
    if start:
        value = -value
        return value if value >= LLONG_MIN else None
    return value if value <= LLONG_MAX else None


# strtod's grammar after optional leading whitespace: decimal, hex float, inf/infinity, nan.
_DEC_RE: Final = re.compile(rb"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\Z")
_HEX_RE: Final = re.compile(
    rb"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?\Z"
)
_INF_RE: Final = re.compile(rb"[+-]?(?:inf|infinity)\Z", re.IGNORECASE)
_NAN_RE: Final = re.compile(rb"[+-]?nan(?:\([0-9A-Za-z_]*\))?\Z", re.IGNORECASE)
_WS: Final = b" \t\n\v\f\r"


def _strtod_full(text: bytes) -> tuple[float, bool] | None:
    """(value, erange) when ``text`` is entirely one strtod number, else None."""
    if _DEC_RE.match(text):
        value = float(text)
        if math.isinf(value):
            return value, True
        if value == 0.0 and _has_nonzero_digit(text):
            return value, True
        return value, False
    if _INF_RE.match(text):
        return (-math.inf if text[:1] == b"-" else math.inf), False
    if _HEX_RE.match(text):
        sign = -1.0 if text[:1] == b"-" else 1.0
        body = text.lstrip(b"+-")
        if b"p" not in body.lower():
            body += b"p0"
        try:
            value = float.fromhex(body.decode())
        except OverflowError:
            return sign * math.inf, True
        return sign * value, False
    if _NAN_RE.match(text):
        return math.nan, False
    return None


def _has_nonzero_digit(text: bytes) -> bool:
    mantissa = re.split(rb"[eE]", text, maxsplit=1)[0]
    return any(0x31 <= c <= 0x39 for c in mantissa)


def parse_double(buf: bytes) -> float | None:
    """Redis's ``getDoubleFromObject``: the value or None ("value is not a valid float")."""
    if not buf or buf[0] in _WS:
        return None
    res = _strtod_full(buf)
    if res is None:
        return None
    value, erange = res
    if erange or value != value:
        return None
    return value


def strtod_prefix(buf: bytes) -> float | None:
    """``strtod`` that must consume the whole text (leading spaces allowed, empty = 0.0, NaN
    rejected): how ZRANGEBYSCORE-style bounds are parsed."""
    text = buf.lstrip(_WS)
    if not text:
        # strtod consumes nothing, and Redis only checks that the end pointer is at NUL.
        return 0.0 if not buf else None
    if b"\0" in text:
        text = text.split(b"\0", 1)[0]
    res = _strtod_full(text)
    if res is None:
        return None
    value = res[0]
    return None if value != value else value


# --- long double emulation -----------------------------------------------------------------

_LD_MANT_BITS: Final = 64
_LD_MAX_EXP: Final = 16384  # values must be < 2**16384
_LD_MIN_EXP: Final = -16382 - 63  # smallest denormal exponent


class LongDouble:
    """An x87 80-bit long double value: exact rational, or +-inf."""

    __slots__ = ("inf", "value")

    def __init__(self, value: Fraction, inf: int = 0) -> None:
        self.value = value
        self.inf = inf  # 0 finite, 1 +inf, -1 -inf

    def is_finite(self) -> bool:
        return self.inf == 0


def _round_ld(x: Fraction) -> LongDouble:
    """Round ``x`` to the nearest long double (ties to even)."""
    if x == 0:
        return LongDouble(Fraction(0))
    sign = -1 if x < 0 else 1
    a = -x if x < 0 else x
    num, den = a.numerator, a.denominator
    e = num.bit_length() - den.bit_length()
    if (num << max(0, -e)) < (den << max(0, e)):
        e -= 1
    # Now 2**e <= a < 2**(e+1); keep 64 significant bits (fewer for denormals).
    shift = min(_LD_MANT_BITS - 1 - e, -_LD_MIN_EXP)
    scaled_num = num << shift if shift >= 0 else num
    scaled_den = den if shift >= 0 else den << (-shift)
    q, r = divmod(scaled_num, scaled_den)
    twice = 2 * r
    if twice > scaled_den or (twice == scaled_den and q & 1):
        q += 1
    result = Fraction(q, 1 << shift) if shift >= 0 else Fraction(q << (-shift))
    if result >= Fraction(2) ** _LD_MAX_EXP:
        return LongDouble(Fraction(0), sign)
    return LongDouble(sign * result)


def ld_parse(buf: bytes) -> LongDouble | None:
    """Redis's ``getLongDoubleFromObject`` (strtold with the same checks as doubles)."""
    if not buf or buf[0] in _WS:
        return None
    if _DEC_RE.match(buf):
        exact = Fraction(buf.decode())
        ld = _round_ld(exact)
        if not ld.is_finite():
            return None  # ERANGE overflow
        if ld.value == 0 and exact != 0:
            return None  # ERANGE underflow to zero
        return ld
    if _INF_RE.match(buf):
        return LongDouble(Fraction(0), -1 if buf[:1] == b"-" else 1)
    if _HEX_RE.match(buf):
        res = _strtod_full(buf)
        if res is None or res[1]:
            return None
        return _round_ld(Fraction(res[0]))
    return None


def ld_add(a: LongDouble, b: LongDouble) -> LongDouble | None:
    """``a + b`` in long double; None when the result is NaN or infinite."""
    if a.inf or b.inf:
        return None
    res = _round_ld(a.value + b.value)
    return res if res.is_finite() else None


def ld_mul_int(a: LongDouble, n: int) -> LongDouble:
    """``a * n`` rounded to long double (may be infinite)."""
    if a.inf:
        return LongDouble(Fraction(0), a.inf if n > 0 else -a.inf)
    return _round_ld(a.value * n)


def ld_format_human(x: LongDouble) -> bytes:
    """``%.17Lf`` with trailing zeros (and a bare ``.``) removed; ``-0`` becomes ``0``."""
    v = x.value
    neg = v < 0
    a = -v if neg else v
    scaled = a * 10**17
    q, r = divmod(scaled.numerator, scaled.denominator)
    if 2 * r > scaled.denominator or (2 * r == scaled.denominator and q & 1):
        q += 1
    int_part, frac = divmod(q, 10**17)
    text = f"{int_part}.{frac:017d}".rstrip("0").rstrip(".")
    if neg:
        text = "-" + text
    if text == "-0":
        text = "0"
    return text.encode()
