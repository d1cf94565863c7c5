"""HyperLogLog values in Redis 7.0's exact byte layout (pure functions, no I/O).

A HyperLogLog is a plain string: a 16-byte header (``HYLL``, encoding byte 0 = dense or
1 = sparse, three zero bytes, the cached cardinality as 8 little-endian bytes whose top bit
set means "stale") followed by 16384 six-bit registers, either packed (dense, 12288 bytes)
or run-length coded (sparse: ``ZERO`` 00xxxxxx, ``XZERO`` 01xxxxxx yyyyyyyy, ``VAL``
1vvvvvxx). Elements are hashed with MurmurHash64A (seed ``0xadc83b19``); the low 14 bits pick
the register, the run of zeros above them (plus one) is the candidate value.

Every function here reproduces the bytes Redis produces, including where a sparse update
splits or merges opcodes and when it promotes to dense, so that the value of a key is
byte-identical to redis-server's after the same commands. Work is bounded by the length of the
value: a run never makes a loop iterate more than its opcode's 1..4 registers, and walks stop
at the end of the string.

A sparse value is valid only if its opcodes cover exactly 16384 registers with no opcode
running past the last one: Debian's redis-server 7.0.15 carries the fix for CVE-2025-32023,
which rejects such an overflow wherever a sparse value is decoded (count, merge, conversion).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Final

__all__ = [
    "DENSE",
    "DENSE_SIZE",
    "HDR_SIZE",
    "REGISTERS",
    "SPARSE",
    "cached_cardinality",
    "cardinality",
    "decode_sparse",
    "dense_get",
    "dense_put",
    "dense_registers",
    "dense_set",
    "estimate",
    "final_value",
    "invalidate_cache",
    "is_hll",
    "merge_max",
    "murmurhash64a",
    "new_sparse",
    "pattern",
    "raw_histogram",
    "sparse_set",
    "sparse_to_dense",
    "store_cardinality",
    "work_buffer",
]

HDR_SIZE: Final = 16
REGISTERS: Final = 16384
_P: Final = 14
_Q: Final = 64 - _P
_REGISTER_MAX: Final = 63
DENSE_SIZE: Final = HDR_SIZE + (REGISTERS * 6 + 7) // 8
DENSE: Final = 0
SPARSE: Final = 1
_SPARSE_VAL_MAX_VALUE: Final = 32
_SPARSE_VAL_MAX_LEN: Final = 4
_SPARSE_ZERO_MAX_LEN: Final = 64
_SPARSE_XZERO_MAX_LEN: Final = 16384
_ALPHA_INF: Final = 0.721347520444481703680
_SEED: Final = 0xADC83B19
_M64: Final = (1 << 64) - 1
_MURMUR_M: Final = 0xC6A4A7935BD1E995


def murmurhash64a(data: bytes, seed: int = _SEED) -> int:
    """MurmurHash2-64A of ``data`` as Redis computes it (little-endian words)."""
    m = _MURMUR_M
    n = len(data)
    h = (seed ^ (n * m)) & _M64
    full = n - (n & 7)
    for i in range(0, full, 8):
        k = int.from_bytes(data[i : i + 8], "little")
        k = (k * m) & _M64
        k ^= k >> 47
        k = (k * m) & _M64
        h ^= k
        h = (h * m) & _M64
    rest = n & 7
    if rest:
        h ^= int.from_bytes(data[full:], "little")
        h = (h * m) & _M64
    h ^= h >> 47
    h = (h * m) & _M64
    h ^= h >> 47
    return h


def pattern(element: bytes) -> tuple[int, int]:
    """(register index, run length of the ``000...1`` pattern) of ``element``."""
    h = murmurhash64a(element)
    index = h & (REGISTERS - 1)
    h >>= _P
    h |= 1 << _Q  # the loop below ends by bit Q: counts are 1..Q+1
    # Position of the lowest set bit, plus one.
    count = (h & -h).bit_length()
    return index, count


def is_hll(value: bytes) -> bool:
    """Redis's isHLLObjectOrReply test: magic, known encoding, exact dense length."""
    if len(value) < HDR_SIZE or value[:4] != b"HYLL":
        return False
    enc = value[4]
    if enc > SPARSE:
        return False
    return not (enc == DENSE and len(value) != DENSE_SIZE)


def new_sparse() -> bytearray:
    """An empty HyperLogLog as PFADD/PFMERGE create it (sparse: one XZERO of 16384)."""
    buf = bytearray(HDR_SIZE)
    buf[0:4] = b"HYLL"
    buf[4] = SPARSE
    n = _SPARSE_XZERO_MAX_LEN - 1
    buf += bytes(((n >> 8) | 0x40, n & 0xFF))
    return buf


def invalidate_cache(buf: bytearray) -> None:
    """Mark the cached cardinality stale (top bit of its last byte)."""
    buf[15] |= 0x80


def cached_cardinality(value: bytes) -> int | None:
    """The cached cardinality, or None when it is marked stale."""
    if value[15] & 0x80:
        return None
    return int.from_bytes(value[8:16], "little")


def store_cardinality(buf: bytearray, card: int) -> None:
    """Write ``card`` (as a uint64) to the cache bytes."""
    buf[8:16] = (card & _M64).to_bytes(8, "little")


# --- dense ----------------------------------------------------------------------------------


def dense_get(buf: bytes | bytearray, index: int) -> int:
    """Register ``index`` of a dense value (header included in ``buf``)."""
    bit = index * 6
    byte = HDR_SIZE + (bit >> 3)
    fb = bit & 7
    b0 = buf[byte]
    # The last register reads one byte past the data: Redis reads the string's terminator.
    b1 = buf[byte + 1] if byte + 1 < len(buf) else 0
    return ((b0 >> fb) | (b1 << (8 - fb))) & _REGISTER_MAX


def dense_put(buf: bytearray, index: int, value: int) -> None:
    """Write ``value`` (0..63) to register ``index`` of a dense value."""
    bit = index * 6
    byte = HDR_SIZE + (bit >> 3)
    fb = bit & 7
    buf[byte] = (buf[byte] & ~(_REGISTER_MAX << fb) & 0xFF) | ((value << fb) & 0xFF)
    if byte + 1 < len(buf):
        fb8 = 8 - fb
        buf[byte + 1] = (buf[byte + 1] & ~(_REGISTER_MAX >> fb8) & 0xFF) | (value >> fb8)


def dense_set(buf: bytearray, index: int, count: int) -> bool:
    """Raise register ``index`` to ``count``; True if it changed."""
    if count > dense_get(buf, index):
        dense_put(buf, index, count)
        return True
    return False


def dense_registers(buf: bytes | bytearray) -> list[int]:
    """All 16384 registers of a dense value."""
    out: list[int] = []
    append = out.extend
    data = buf[HDR_SIZE:DENSE_SIZE]
    for i in range(0, len(data) - 2, 3):
        v = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16)
        append((v & 63, (v >> 6) & 63, (v >> 12) & 63, v >> 18))
    return out


# --- sparse ---------------------------------------------------------------------------------


def _xzero_len(buf: bytes | bytearray, p: int) -> int:
    # A truncated XZERO reads the byte after the string as its second byte, as Redis does:
    # the terminator (0) of a stored value, or a work buffer's tail byte (see sparse_set).
    low = buf[p + 1] if p + 1 < len(buf) else 0
    return (((buf[p] & 0x3F) << 8) | low) + 1


def _val(value: int, length: int) -> int:
    return ((value - 1) << 2) | (length - 1) | 0x80


def _zero_seq(length: int) -> bytes:
    if length > _SPARSE_ZERO_MAX_LEN:
        n = length - 1
        return bytes(((n >> 8) | 0x40, n & 0xFF))
    return bytes((length - 1,))


def _sparse_runs(buf: bytes | bytearray, end: int | None = None) -> Iterator[tuple[int, int]]:
    """The runs of a sparse value's opcodes in register order, as (length, register value)
    pairs: value 0 for ZERO and XZERO runs, 1..32 for VAL runs. ``end`` is the value's
    length when ``buf`` is a work buffer with a tail byte. Nothing is checked: the callers
    refuse a value whose runs pass register 16383 or stop short of it (:func:`_covered`)."""
    p = HDR_SIZE
    if end is None:
        end = len(buf)
    while p < end:
        b = buf[p]
        if b & 0xC0 == 0:
            yield (b & 0x3F) + 1, 0
            p += 1
        elif b & 0x80 == 0:
            yield _xzero_len(buf, p), 0
            p += 2
        else:
            yield (b & 3) + 1, ((b >> 2) & 0x1F) + 1
            p += 1


def _covered(
    buf: bytes | bytearray, end: int | None = None
) -> Iterator[tuple[int, int, int]] | None:
    """The runs of a sparse value as (first register, length, value), or None when they do
    not cover exactly the 16384 registers (a corrupted value, which every reader refuses
    before using any of it)."""
    runs: list[tuple[int, int, int]] = []
    idx = 0
    for run, value in _sparse_runs(buf, end):
        if idx + run > REGISTERS:
            return None
        runs.append((idx, run, value))
        idx += run
    return iter(runs) if idx == REGISTERS else None


def sparse_to_dense(buf: bytes | bytearray, end: int | None = None) -> bytearray | None:
    """The dense form of a sparse value (header copied, encoding set to dense), or None when
    the opcodes do not cover exactly 16384 registers. ``end`` is the value's length when
    ``buf`` is a work buffer with a tail byte."""
    runs = _covered(buf, end)
    if runs is None:
        return None
    dense = bytearray(DENSE_SIZE)
    dense[0:HDR_SIZE] = buf[0:HDR_SIZE]
    dense[4] = DENSE
    for first, run, value in runs:
        if value:
            for i in range(first, first + run):
                dense_put(dense, i, value)
    return dense


def work_buffer(value: bytes | bytearray) -> bytearray:
    """A mutable copy of an HLL value for :func:`sparse_set`: a sparse value gets one tail
    byte, the string terminator Redis's in-place updates read and may overwrite."""
    buf = bytearray(value)
    if buf[4] == SPARSE:
        buf.append(0)
    return buf


def final_value(buf: bytearray) -> bytes:
    """The stored value of a work buffer (without the tail byte of a sparse one)."""
    if buf[4] == SPARSE:
        return bytes(buf[:-1])
    return bytes(buf)


def sparse_set(
    buf: bytearray, index: int, count: int, max_bytes: int, hint: list[int] | None = None
) -> tuple[int, bytearray]:
    """Raise register ``index`` of a sparse :func:`work_buffer` to ``count``, as Redis's
    hllSparseSet: returns (1 changed / 0 unchanged / -1 corrupted, the buffer), the buffer
    being ``buf`` updated in place or a new dense value after a promotion (a count above 32,
    or a sparse form that would grow past ``max_bytes``).

    The tail byte reproduces Redis's memory past the string: a corrupted value ending in half
    an XZERO is read with that byte, and replacing it writes one byte past the new end.

    ``hint`` (``[position, first register, previous position]`` of an opcode, initially
    ``[HDR_SIZE, 0, -1]``) lets calls with increasing indexes (PFMERGE) resume the walk where
    the previous one left it: an update changes nothing before the opcode preceding the
    updated one, and that opcode keeps its position and first register, so the walk reaches
    the same opcode with the same ``prev`` as a walk from the start."""
    if count > _SPARSE_VAL_MAX_VALUE:
        return _promote(buf, index, count)
    end = len(buf) - 1
    if hint is not None and index >= hint[1]:
        p, first, prev = hint
    else:
        p, first, prev = HDR_SIZE, 0, -1
    prev_first = prev_prev = -1
    span = 0
    while p < end:
        b = buf[p]
        oplen = 1
        if b & 0xC0 == 0:
            span = (b & 0x3F) + 1
        elif b & 0x80:
            span = (b & 3) + 1
        else:
            span = _xzero_len(buf, p)
            oplen = 2
        if index <= first + span - 1:
            break
        prev_prev = prev
        prev = p
        prev_first = first
        p += oplen
        first += span
    if span == 0 or p >= end:
        return -1, buf
    if hint is not None:
        # Next time, resume at this call's `prev` (its position and first register survive
        # the update below). When the walk did not move, that opcode's own predecessor is
        # unknown: start over from the beginning then.
        hint[:] = [prev, prev_first, prev_prev] if prev_first >= 0 else [HDR_SIZE, 0, -1]

    b = buf[p]
    is_xzero = b & 0xC0 == 0x40
    is_zero = b & 0xC0 == 0
    is_val = bool(b & 0x80)
    nxt = p + (2 if is_xzero else 1)
    if is_zero:
        runlen = (b & 0x3F) + 1
    elif is_xzero:
        runlen = _xzero_len(buf, p)
    else:
        runlen = (b & 3) + 1

    done = False
    if is_val:
        old = ((b >> 2) & 0x1F) + 1
        if old >= count:
            return 0, buf
        if runlen == 1:
            buf[p] = _val(count, 1)
            done = True
    if not done and is_zero and runlen == 1:
        buf[p] = _val(count, 1)
        done = True
    if not done:
        last = first + span - 1
        seq = bytearray()
        if is_zero or is_xzero:
            if index != first:
                seq += _zero_seq(index - first)
            seq.append(_val(count, 1))
            if index != last:
                seq += _zero_seq(last - index)
        else:
            cur = ((b >> 2) & 0x1F) + 1
            if index != first:
                seq.append(_val(cur, index - first))
            seq.append(_val(count, 1))
            if index != last:
                seq.append(_val(cur, last - index))
        oldlen = 2 if is_xzero else 1
        delta = len(seq) - oldlen
        if delta > 0 and end + delta > max_bytes:
            return _promote(buf, index, count)
        # Redis: memmove the rest by delta (when an opcode follows), set the new length
        # (terminator at the new end), then copy the sequence over the old opcode.
        if delta and nxt < end:
            rest = bytes(buf[nxt:end])
            grow = nxt + delta + len(rest) - len(buf)
            if grow > 0:
                buf.extend(bytes(grow))
            buf[nxt + delta : nxt + delta + len(rest)] = rest
        end += delta
        if len(buf) < end + 1:
            buf.extend(bytes(end + 1 - len(buf)))
        buf[end] = 0
        if len(buf) < p + len(seq):
            buf.extend(bytes(p + len(seq) - len(buf)))
        buf[p : p + len(seq)] = seq
        del buf[end + 1 :]
    _merge_adjacent(buf, prev if prev >= 0 else HDR_SIZE, end)
    invalidate_cache(buf)
    return 1, buf


def _merge_adjacent(buf: bytearray, p: int, end: int) -> None:
    # Redis scans up to five opcodes from the one before the update and merges equal
    # neighbouring VALs whose total run fits one opcode.
    scan = 5
    while p < end and scan:
        scan -= 1
        b = buf[p]
        if b & 0xC0 == 0x40:
            p += 2
            continue
        if b & 0xC0 == 0:
            p += 1
            continue
        if p + 1 < end and buf[p + 1] & 0x80:
            nb = buf[p + 1]
            v1 = ((b >> 2) & 0x1F) + 1
            if v1 == ((nb >> 2) & 0x1F) + 1:
                length = (b & 3) + (nb & 3) + 2
                if length <= _SPARSE_VAL_MAX_LEN:
                    buf[p + 1] = _val(v1, length)
                    # memmove(p, p + 1, end - p) moves the tail byte down too; the shorter
                    # string then gets its terminator.
                    del buf[p]
                    end -= 1
                    buf[end] = 0
                    continue
        p += 1


def _promote(buf: bytearray, index: int, count: int) -> tuple[int, bytearray]:
    dense = sparse_to_dense(buf, len(buf) - 1)
    if dense is None:
        return -1, buf
    dense_set(dense, index, count)
    return 1, dense


def decode_sparse(buf: bytes) -> bytes:
    """PFDEBUG DECODE's text: ``z:N`` / ``Z:N`` / ``v:VALUE,N`` opcodes separated by spaces."""
    parts: list[bytes] = []
    p = HDR_SIZE
    end = len(buf)
    while p < end:
        b = buf[p]
        if b & 0xC0 == 0:
            parts.append(b"z:%d" % ((b & 0x3F) + 1))
            p += 1
        elif b & 0x80 == 0:
            parts.append(b"Z:%d" % _xzero_len(buf, p))
            p += 2
        else:
            parts.append(b"v:%d,%d" % (((b >> 2) & 0x1F) + 1, (b & 3) + 1))
            p += 1
    return b" ".join(parts)


# --- counting and merging -------------------------------------------------------------------


def _histogram(buf: bytes | bytearray) -> list[int] | None:
    """Register histogram (64 buckets) of a value; None for a sparse value that does not
    cover exactly 16384 registers."""
    histo = [0] * 64
    if buf[4] == DENSE:
        for r in dense_registers(buf):
            histo[r] += 1
        return histo
    runs = _covered(buf)
    if runs is None:
        return None
    for _, run, value in runs:
        histo[value] += run
    return histo


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y = 1.0
    z = x
    while True:
        x *= x
        z_prev = z
        z += x * y
        y += y
        if z_prev == z:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y = 1.0
    z = 1 - x
    while True:
        x = math.sqrt(x)
        z_prev = z
        y *= 0.5
        z -= math.pow(1 - x, 2) * y
        if z_prev == z:
            return z / 3


def estimate(histo: list[int]) -> int:
    """Ertl's estimator as Redis computes it, as a signed int64 (what PFCOUNT replies)."""
    m = float(REGISTERS)
    z = m * _tau((m - histo[_Q + 1]) / m)
    for j in range(_Q, 0, -1):
        z += histo[j]
        z *= 0.5
    z += m * _sigma(histo[0] / m)
    try:
        e = _ALPHA_INF * m * m / z
    except ZeroDivisionError:
        e = math.inf
    if not math.isfinite(e) or abs(e) >= 2.0**63:
        # llroundl of an out-of-range value is LLONG_MIN on x86-64.
        return -(2**63)
    fl = math.floor(e)
    return int(fl + 1 if e - fl >= 0.5 else fl)


def cardinality(buf: bytes | bytearray) -> int | None:
    """The estimate for one value (signed int64), None if its sparse form is corrupted."""
    histo = _histogram(buf)
    return None if histo is None else estimate(histo)


def merge_max(registers: bytearray, buf: bytes | bytearray) -> bool:
    """``registers[i] = max(registers[i], register i of buf)``; False if ``buf`` is a
    corrupted sparse value."""
    if buf[4] == DENSE:
        for i, r in enumerate(dense_registers(buf)):
            if r > registers[i]:
                registers[i] = r
        return True
    runs = _covered(buf)
    if runs is None:
        return False
    for first, run, value in runs:
        if value:
            for j in range(first, first + run):
                if value > registers[j]:
                    registers[j] = value
    return True


def raw_histogram(registers: bytearray) -> list[int]:
    """Histogram of plain byte registers (PFCOUNT of several keys)."""
    histo = [0] * 64
    for r in registers:
        histo[r] += 1
    return histo
