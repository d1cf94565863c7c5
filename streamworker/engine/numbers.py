"""Number parsing and formatting with Redis 7.0's exact rules.

* :func:`parse_int` is ``string2ll`` (no ``+``, no spaces, no leading zeros, int64 range).
* :func:`parse_double` is ``getDoubleFromObject`` (``strtod`` that must consume everything, no
  leading space, no NaN, no overflow/underflow to 0).
* :func:`strtod_prefix` is bare ``strtod`` + "must consume everything" (range bounds).
* :func:`ld_parse` / :func:`ld_format_human` emulate x86-64 ``long double`` (64-bit
  significand) for INCRBYFLOAT/HINCRBYFLOAT, with :class:`fractions.Fraction` as exact carrier.

**Bounded work.** Every function here does work bounded by a constant plus the length of its
input, whatever the input says: an exponent like ``1e999999999`` is judged by its order of
magnitude (overflow or underflow) before any power of ten is built, a mantissa longer than
:data:`_LD_SIG_DIGITS` significant digits is cut to that many plus a sticky digit (which
rounds exactly as the whole would), and no integer is converted to or from text through
Python's 4300-digit-limited ``int``/``str`` (it raises ValueError past that limit).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

__all__ = [
    "LLONG_MAX",
    "LLONG_MIN",
    "digits_to_int",
    "int_to_text",
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


# Significant decimal digits kept when parsing a long double. The exact decimal expansion of
# a point halfway between two long doubles has at most ~11,500 significant digits (the
# smallest denormal is 2**-16445), so cutting after 12,000 plus a sticky nonzero digit rounds
# every input exactly as its full text would.
_LD_SIG_DIGITS: Final = 12_000
# Decimal orders of magnitude outside which a long double overflows (max ~1.19e4932) or
# underflows to zero (half the smallest denormal ~1.8e-4951), with a margin of one.
_LD_MAX_DEC_ORDER: Final = 4934
_LD_MIN_DEC_ORDER: Final = -4952
# Significant hex digits kept (a 64-bit significand needs 17; the rest is a sticky digit).
_LD_SIG_HEX_DIGITS: Final = 40
_DEC_PARTS_RE: Final = re.compile(rb"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?\Z")
_HEX_PARTS_RE: Final = re.compile(
    rb"([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?[0-9]+))?\Z"
)
# Exponents are clamped to this many digits before int(): anything longer is far outside
# every range checked here, and int() of a long text is not free.
_EXP_DIGITS_MAX: Final = 12


def _exponent(text: bytes | None) -> int:
    if not text:
        return 0
    neg = text[:1] == b"-"
    digits = text.lstrip(b"+-").lstrip(b"0")
    value = 10**_EXP_DIGITS_MAX if len(digits) > _EXP_DIGITS_MAX else int(digits or b"0")
    return -value if neg else value


def digits_to_int(digits: bytes, base: int = 10) -> int:
    """``int(digits, base)`` for any length: chunked below CPython's 4300-digit limit."""
    chunk = 4000
    if len(digits) <= chunk:
        return int(digits, base) if digits else 0
    value = 0
    step = base**chunk
    for i in range(0, len(digits), chunk):
        part = digits[i : i + chunk]
        value = value * (step if len(part) == chunk else base ** len(part)) + int(part, base)
    return value


def int_to_text(value: int) -> str:
    """``str(value)`` for any size: split below CPython's 4300-digit limit."""
    if -(10**4000) < value < 10**4000:
        return str(value)
    if value < 0:
        return "-" + int_to_text(-value)
    high, low = divmod(value, 10**4000)
    return int_to_text(high) + str(low).rjust(4000, "0")


def _ld_from_decimal(sign: bytes, ip: bytes, fp: bytes, ex: bytes | None) -> LongDouble:
    # Exact value: int(ip + fp) * 10**(exponent - len(fp)), sign apart.
    neg = sign == b"-"
    digits = (ip + fp).lstrip(b"0")
    if not digits:
        return LongDouble(Fraction(0))
    scale = _exponent(ex) - len(fp)
    stripped = digits.rstrip(b"0")
    scale += len(digits) - len(stripped)
    digits = stripped
    order = len(digits) + scale  # 10**(order-1) <= |value| < 10**order
    if order > _LD_MAX_DEC_ORDER:
        return LongDouble(Fraction(0), -1 if neg else 1)
    if order < _LD_MIN_DEC_ORDER:
        return LongDouble(Fraction(0))
    if len(digits) > _LD_SIG_DIGITS:
        scale += len(digits) - _LD_SIG_DIGITS - 1
        digits = digits[:_LD_SIG_DIGITS] + b"1"  # sticky: the cut part was nonzero
    mantissa = digits_to_int(digits)
    exact = Fraction(mantissa * 10**scale) if scale >= 0 else Fraction(mantissa, 10**-scale)
    return _round_ld(-exact if neg else exact)


def _ld_from_hex(sign: bytes, ip: bytes, fp: bytes, ex: bytes | None) -> LongDouble:
    neg = sign == b"-"
    digits = (ip + fp).lstrip(b"0")
    if not digits:
        return LongDouble(Fraction(0))
    scale = _exponent(ex) - 4 * len(fp)
    stripped = digits.rstrip(b"0")
    scale += 4 * (len(digits) - len(stripped))
    digits = stripped
    order = 4 * len(digits) + scale  # |value| < 2**order
    if order > _LD_MAX_EXP + 4:
        return LongDouble(Fraction(0), -1 if neg else 1)
    if order < _LD_MIN_EXP - 8:
        return LongDouble(Fraction(0))
    if len(digits) > _LD_SIG_HEX_DIGITS:
        scale += 4 * (len(digits) - _LD_SIG_HEX_DIGITS - 1)
        digits = digits[:_LD_SIG_HEX_DIGITS] + b"1"
    mantissa = int(digits, 16)
    exact = Fraction(mantissa << scale) if scale >= 0 else Fraction(mantissa, 1 << -scale)
    return _round_ld(-exact if neg else exact)


def ld_parse(buf: bytes) -> LongDouble | None:
    """Redis's ``getLongDoubleFromObject`` (strtold with the same checks as doubles): the
    value, or None for text strtold does not consume whole, overflow, underflow to zero, NaN.
    Work is bounded whatever the exponent (see the module docstring)."""
    if not buf or buf[0] in _WS:
        return None
    m = _DEC_PARTS_RE.match(buf)
    if m is not None and _DEC_RE.match(buf):
        sign, ip, fp, ex = m.groups()
        ld = _ld_from_decimal(sign, ip, fp or b"", ex)
        if not ld.is_finite():
            return None  # ERANGE overflow
        if ld.value == 0 and (ip + (fp or b"")).strip(b"0"):
            return None  # ERANGE underflow to zero
        return ld
    if _INF_RE.match(buf):
        return LongDouble(Fraction(0), -1 if buf[:1] == b"-" else 1)
    m = _HEX_PARTS_RE.match(buf)
    if m is not None and _HEX_RE.match(buf):
        sign, ip, fp, ex = m.groups()
        ld = _ld_from_hex(sign, ip, fp or b"", ex)
        if not ld.is_finite():
            return None
        if ld.value == 0 and (ip + (fp or b"")).strip(b"0"):
            return None
        return ld
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
    text = f"{int_to_text(int_part)}.{frac:017d}".rstrip("0").rstrip(".")
    if neg:
        text = "-" + text
    if text == "-0":
        text = "0"
    return text.encode()
