"""Redis 7.0's geohash arithmetic (pure functions, no I/O).

Positions are stored as sorted-set scores: a 52-bit geohash (26 steps) interleaving the
latitude offset (even bits) and the longitude offset (odd bits) within longitude -180..180
and latitude -85.05112878..85.05112878 (the Web Mercator limits). Distances use the haversine
formula on a sphere of radius 6372797.560856 m. Each function performs the same IEEE double
operations in the same order as Redis's geohash.c / geohash_helper.c, so scores, decoded
coordinates, distances and the nine search boxes are identical to redis-server's.
"""

from __future__ import annotations

import math
from typing import Final, NamedTuple

__all__ = [
    "EARTH_RADIUS_M",
    "LAT_MAX",
    "LAT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "STEP_MAX",
    "Area",
    "Shape",
    "decode_area",
    "decode_score",
    "distance",
    "encode",
    "geohash_string",
    "score_of",
    "search_boxes",
    "within",
]

LONG_MIN: Final = -180.0
LONG_MAX: Final = 180.0
LAT_MIN: Final = -85.05112878
LAT_MAX: Final = 85.05112878
STEP_MAX: Final = 26
EARTH_RADIUS_M: Final = 6372797.560856
_MERCATOR_MAX: Final = 20037726.37
_D_R: Final = math.pi / 180.0
_M64: Final = (1 << 64) - 1
_EVEN: Final = 0x5555555555555555
_ODD: Final = 0xAAAAAAAAAAAAAAAA
_ALPHABET: Final = b"0123456789bcdefghjkmnpqrstuvwxyz"


class Area(NamedTuple):
    """A geohash cell's bounds."""

    lon_min: float
    lon_max: float
    lat_min: float
    lat_max: float


class Shape(NamedTuple):
    """A search area: a circle (``radius``) or an axis-aligned box (``width`` x ``height``),
    in ``unit``s (``conversion`` metres each), centred on ``lon``, ``lat``."""

    lon: float
    lat: float
    conversion: float
    radius: float = 0.0
    width: float = 0.0
    height: float = 0.0
    box: bool = False


def _cos(x: float) -> float:
    # C's cos: NaN for an infinite argument (Python raises).
    return math.cos(x) if math.isfinite(x) else math.nan


def _sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) else math.nan


def _asin_sqrt(a: float) -> float:
    # C's asin(sqrt(a)): NaN outside the domain (rounding can put a just above 1).
    if not 0.0 <= a <= 1.0:
        return math.nan
    return math.asin(math.sqrt(a))


def _spread(v: int) -> int:
    # The 32 bits of v moved to the even bit positions of a 64-bit word.
    v &= 0xFFFFFFFF
    v = (v | (v << 16)) & 0x0000FFFF0000FFFF
    v = (v | (v << 8)) & 0x00FF00FF00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F0F0F0F0F
    v = (v | (v << 2)) & 0x3333333333333333
    return (v | (v << 1)) & _EVEN


def _squash(v: int) -> int:
    # Inverse of _spread: the even bits of v packed into 32 bits.
    v &= _EVEN
    v = (v | (v >> 1)) & 0x3333333333333333
    v = (v | (v >> 2)) & 0x0F0F0F0F0F0F0F0F
    v = (v | (v >> 4)) & 0x00FF00FF00FF00FF
    v = (v | (v >> 8)) & 0x0000FFFF0000FFFF
    return (v | (v >> 16)) & 0xFFFFFFFF


def _u32(x: float) -> int:
    # C's (uint32_t) conversion of an in-range non-negative double.
    return int(x) & 0xFFFFFFFF


def encode(
    lon: float,
    lat: float,
    step: int,
    lat_min: float = LAT_MIN,
    lat_max: float = LAT_MAX,
) -> int | None:
    """The geohash bits of a position at ``step`` (1..32), or None outside the limits."""
    if step > 32 or step == 0:
        return None
    if lon > 180 or lon < -180 or lat > 85.05112878 or lat < -85.05112878:
        return None
    if lat < lat_min or lat > lat_max or lon < LONG_MIN or lon > LONG_MAX:
        return None
    lat_offset = (lat - lat_min) / (lat_max - lat_min)
    lon_offset = (lon - LONG_MIN) / (LONG_MAX - LONG_MIN)
    scale = float(1 << step)
    lat_offset *= scale
    lon_offset *= scale
    return _spread(_u32(lat_offset)) | (_spread(_u32(lon_offset)) << 1)


def score_of(lon: float, lat: float) -> int:
    """The sorted-set score GEOADD stores for a valid position (52-bit geohash)."""
    bits = encode(lon, lat, STEP_MAX)
    assert bits is not None
    return bits


def decode_area(bits: int, step: int) -> Area:
    """The cell of ``bits`` at ``step`` in the WGS84 ranges."""
    lat_scale = LAT_MAX - LAT_MIN
    lon_scale = LONG_MAX - LONG_MIN
    ilat = _squash(bits)
    ilon = _squash(bits >> 1)
    div = float(1 << step)
    return Area(
        LONG_MIN + (ilon * 1.0 / div) * lon_scale,
        LONG_MIN + (((ilon + 1) & 0xFFFFFFFF) * 1.0 / div) * lon_scale,
        LAT_MIN + (ilat * 1.0 / div) * lat_scale,
        LAT_MIN + (((ilat + 1) & 0xFFFFFFFF) * 1.0 / div) * lat_scale,
    )


def _score_bits(score: float) -> int:
    # C's (uint64_t) conversion of a double as gcc compiles it on x86-64 (SSE2): values below
    # 2**63 go through a signed conversion (negatives wrap, out of range gives 2**63), the
    # others are offset by 2**63 first (out of range, inf and NaN give 0).
    two63 = 9223372036854775808.0
    if score < two63:
        if score >= -two63:
            return int(score) & _M64
        return 1 << 63
    y = score - two63
    if y < two63 and math.isfinite(y):
        return (int(y) ^ (1 << 63)) & _M64
    return 0


def decode_score(score: float) -> tuple[float, float]:
    """(longitude, latitude) of a score, as GEOPOS prints it (cell centre, clamped)."""
    area = decode_area(_score_bits(score), STEP_MAX)
    lon = (area.lon_min + area.lon_max) / 2
    lon = min(max(lon, LONG_MIN), LONG_MAX)
    lat = (area.lat_min + area.lat_max) / 2
    lat = min(max(lat, LAT_MIN), LAT_MAX)
    return lon, lat


def geohash_string(lon: float, lat: float) -> bytes:
    """GEOHASH's 11-character standard geohash of a decoded position (last char ``0``)."""
    bits = encode(lon, lat, STEP_MAX, -90.0, 90.0)
    if bits is None:
        bits = 0
    out = bytearray()
    for i in range(10):
        out.append(_ALPHABET[(bits >> (52 - (i + 1) * 5)) & 0x1F])
    out.append(_ALPHABET[0])
    return bytes(out)


def distance(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    """Haversine distance in metres (Redis 7.0's geohashGetDistance)."""
    lat1r = lat1 * _D_R
    lon1r = lon1 * _D_R
    lat2r = lat2 * _D_R
    lon2r = lon2 * _D_R
    u = _sin((lat2r - lat1r) / 2)
    v = _sin((lon2r - lon1r) / 2)
    return 2.0 * EARTH_RADIUS_M * _asin_sqrt(u * u + _cos(lat1r) * _cos(lat2r) * v * v)


def within(shape: Shape, lon: float, lat: float) -> float | None:
    """The distance in metres from the shape's centre to a point inside it, else None."""
    if not shape.box:
        d = distance(shape.lon, shape.lat, lon, lat)
        return None if d > shape.radius * shape.conversion else d
    width_m = shape.width * shape.conversion
    height_m = shape.height * shape.conversion
    lon_d = distance(lon, lat, shape.lon, lat)
    lat_d = distance(lon, lat, lon, shape.lat)
    if lon_d > width_m / 2 or lat_d > height_m / 2:
        return None
    return distance(shape.lon, shape.lat, lon, lat)


def _estimate_steps(range_m: float, lat: float) -> int:
    if range_m == 0:
        return 26
    step = 1
    while range_m < _MERCATOR_MAX:
        range_m *= 2
        step += 1
    step -= 2
    if lat > 66 or lat < -66:
        step -= 1
        if lat > 80 or lat < -80:
            step -= 1
    return min(max(step, 1), 26)


def _move_x(bits: int, step: int, d: int) -> int:
    x = bits & _ODD
    y = bits & _EVEN
    zz = _EVEN >> (64 - step * 2)
    x = (x + (zz + 1)) & _M64 if d > 0 else ((x | zz) - (zz + 1)) & _M64
    x &= _ODD >> (64 - step * 2)
    return x | y


def _move_y(bits: int, step: int, d: int) -> int:
    x = bits & _ODD
    y = bits & _EVEN
    zz = _ODD >> (64 - step * 2)
    y = (y + (zz + 1)) & _M64 if d > 0 else ((y | zz) - (zz + 1)) & _M64
    y &= _EVEN >> (64 - step * 2)
    return x | y


def _neighbours(bits: int, step: int) -> list[int]:
    # north, south, east, west, north-east, north-west, south-east, south-west
    return [
        _move_y(bits, step, 1),
        _move_y(bits, step, -1),
        _move_x(bits, step, 1),
        _move_x(bits, step, -1),
        _move_y(_move_x(bits, step, 1), step, 1),
        _move_y(_move_x(bits, step, -1), step, 1),
        _move_y(_move_x(bits, step, 1), step, -1),
        _move_y(_move_x(bits, step, -1), step, -1),
    ]


def _bounding_box(shape: Shape) -> tuple[float, float, float, float]:
    if shape.box:
        height = shape.conversion * (shape.height / 2)
        width = shape.conversion * (shape.width / 2)
    else:
        height = shape.conversion * shape.radius
        width = shape.conversion * shape.radius
    lat_delta = (height / EARTH_RADIUS_M) / _D_R
    long_delta_top = (width / EARTH_RADIUS_M / _cos((shape.lat + lat_delta) * _D_R)) / _D_R
    long_delta_bottom = (width / EARTH_RADIUS_M / _cos((shape.lat - lat_delta) * _D_R)) / _D_R
    delta = long_delta_bottom if shape.lat < 0 else long_delta_top
    return shape.lon - delta, shape.lat - lat_delta, shape.lon + delta, shape.lat + lat_delta


def search_boxes(shape: Shape) -> list[tuple[int, int]]:
    """The (min, max) score ranges (max excluded) Redis queries for ``shape``, in its order:
    the centre cell, then north, south, east, west, NE, NW, SE, SW, leaving out cells the
    search area cannot reach and a cell equal to the one queried just before it."""
    min_lon, min_lat, max_lon, max_lat = _bounding_box(shape)
    if shape.box:
        half_w = shape.width / 2
        half_h = shape.height / 2
        radius_m = math.sqrt(half_w * half_w + half_h * half_h)
    else:
        radius_m = shape.radius
    radius_m *= shape.conversion
    steps = _estimate_steps(radius_m, shape.lat)
    bits = encode(shape.lon, shape.lat, steps)
    assert bits is not None
    near = _neighbours(bits, steps)
    north, south, east, west = (decode_area(b, steps) for b in near[:4])
    if steps > 1 and (
        north.lat_max < max_lat
        or south.lat_min > min_lat
        or east.lon_max < max_lon
        or west.lon_min > min_lon
    ):
        steps -= 1
        bits = encode(shape.lon, shape.lat, steps)
        assert bits is not None
        near = _neighbours(bits, steps)
    area = decode_area(bits, steps)
    cells: list[int | None] = [bits, *near]
    if steps >= 2:
        # Indexes in `cells`: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW.
        if area.lat_min < min_lat:
            cells[2] = cells[8] = cells[7] = None
        if area.lat_max > max_lat:
            cells[1] = cells[5] = cells[6] = None
        if area.lon_min < min_lon:
            cells[4] = cells[8] = cells[6] = None
        if area.lon_max > max_lon:
            cells[3] = cells[7] = cells[5] = None
    shift = 52 - steps * 2
    out: list[tuple[int, int]] = []
    last: int | None = None
    for i, cell in enumerate(cells):
        if cell is None:
            continue
        # Redis skips a cell equal to the last one queried, except right after the centre.
        if last is not None and last != 0 and cell == cells[last]:
            continue
        out.append((cell << shift, (cell + 1) << shift))
        last = i
    return out
