"""Geo commands: GEOADD, GEOPOS, GEODIST, GEOHASH, GEORADIUS(_RO), GEORADIUSBYMEMBER(_RO),
GEOSEARCH, GEOSEARCHSTORE.

Positions live in sorted sets whose scores are Redis's 52-bit geohashes
(:mod:`streamworker.engine.model.geohash`). Searches query the same nine cells as Redis, in the
same order, and return members in that order unless sorted by distance (a stable sort, as
glibc's qsort is for these sizes), so replies match redis-server 7.0's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_double, to_int
from streamworker.engine.commands.zsets import zadd_generic
from streamworker.engine.errors import CommandError
from streamworker.engine.model import geohash
from streamworker.engine.model.geohash import Shape
from streamworker.engine.model.zset import ZSet
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_ZSET
from streamworker.engine.numbers import parse_double
from streamworker.engine.replies import EMPTY_ARRAY, NULL_ARRAY, NULL_BULK, Double, format_human

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_UNITS = {b"m": 1.0, b"km": 1000.0, b"ft": 0.3048, b"mi": 1609.34}


def _unit(arg: bytes) -> float:
    factor = _UNITS.get(arg.lower())
    if factor is None:
        raise CommandError(msgs.GEO_UNIT)
    return factor


def _lonlat(lon_arg: bytes, lat_arg: bytes) -> tuple[float, float]:
    lon = to_double(lon_arg)
    lat = to_double(lat_arg)
    if (
        lon < geohash.LONG_MIN
        or lon > geohash.LONG_MAX
        or lat < geohash.LAT_MIN
        or lat > geohash.LAT_MAX
    ):
        raise CommandError(msgs.geo_invalid_pair(lon, lat))
    return lon, lat


def _distance_arg(arg: bytes, text: str) -> float:
    value = parse_double(arg)
    if value is None:
        raise CommandError(text)
    return value


def _radius(value_arg: bytes, unit_arg: bytes) -> tuple[float, float]:
    radius = _distance_arg(value_arg, msgs.GEO_NEED_RADIUS)
    if radius < 0:
        raise CommandError(msgs.GEO_NEGATIVE_RADIUS)
    return radius, _unit(unit_arg)


def _box(w_arg: bytes, h_arg: bytes, unit_arg: bytes) -> tuple[float, float, float]:
    width = _distance_arg(w_arg, msgs.GEO_NEED_WIDTH)
    height = _distance_arg(h_arg, msgs.GEO_NEED_HEIGHT)
    if height < 0 or width < 0:
        raise CommandError(msgs.GEO_NEGATIVE_BOX)
    return width, height, _unit(unit_arg)


def _member_pos(zs: ZSet, member: bytes) -> tuple[float, float]:
    score = zs.scores.get(member)
    if score is None:
        raise CommandError(msgs.GEO_NO_MEMBER)
    return geohash.decode_score(score)


def _distance_text(meters: float) -> bytes:
    return b"%.4f" % meters


def _coord(value: float) -> Double:
    return Double(value, format_human(value))


# --- GEOADD / GEOPOS / GEODIST / GEOHASH ----------------------------------------------------


@command("geoadd", arity=-5, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def geoadd(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEOADD key [NX|XX] [CH] longitude latitude member [...] -> members added (changed
    with CH); the score of each member is its 52-bit geohash."""
    i = 1
    nx = xx = False
    while i < len(args):
        opt = args[i].lower()
        if opt == b"nx":
            nx = True
        elif opt == b"xx":
            xx = True
        elif opt != b"ch":
            break
        i += 1
    if (len(args) - i) % 3 or (nx and xx):
        raise CommandError(msgs.SYNTAX)
    zargs = list(args[:i])
    for j in range(i, len(args), 3):
        lon, lat = _lonlat(args[j], args[j + 1])
        zargs.append(b"%d" % geohash.score_of(lon, lat))
        zargs.append(args[j + 2])
    return zadd_generic(ctx, zargs, False)


def _per_member(
    ctx: Ctx, args: list[bytes], missing: Reply, render: Callable[[float, float], Reply]
) -> Reply:
    """GEOPOS / GEOHASH: for each member after the key, ``render(lon, lat)`` of its position,
    or ``missing`` when it (or the key) is not there."""
    zs = ctx.db.get_typed(args[0], ZSet)
    out: list[Reply] = []
    for member in args[1:]:
        score = zs.scores.get(member) if zs is not None else None
        if score is None:
            out.append(missing)
            continue
        out.append(render(*geohash.decode_score(score)))
    return out


@command("geopos", arity=-2, flags=("readonly",), first_key=1, last_key=1, step=1)
def geopos(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEOPOS key [member ...] -> [longitude, latitude] per member, null array if missing."""
    return _per_member(ctx, args, NULL_ARRAY, lambda lon, lat: [_coord(lon), _coord(lat)])


@command("geodist", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def geodist(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEODIST key member1 member2 [M|KM|FT|MI] -> distance with 4 decimals, or nil."""
    to_meter = 1.0
    if len(args) == 4:
        to_meter = _unit(args[3])
    elif len(args) > 4:
        raise CommandError(msgs.SYNTAX)
    zs = ctx.db.get_typed(args[0], ZSet)
    if zs is None:
        return NULL_BULK
    s1 = zs.scores.get(args[1])
    s2 = zs.scores.get(args[2])
    if s1 is None or s2 is None:
        return NULL_BULK
    lon1, lat1 = geohash.decode_score(s1)
    lon2, lat2 = geohash.decode_score(s2)
    return _distance_text(geohash.distance(lon1, lat1, lon2, lat2) / to_meter)


@command("geohash", arity=-2, flags=("readonly",), first_key=1, last_key=1, step=1)
def geohash_cmd(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEOHASH key [member ...] -> 11-character standard geohash per member, nil if missing."""
    return _per_member(ctx, args, NULL_BULK, geohash.geohash_string)


# --- searches -------------------------------------------------------------------------------

_COORDS = 1  # GEORADIUS: centre from arguments
_MEMBER = 2  # GEORADIUSBYMEMBER: centre from a member
_NOSTORE = 4  # the _RO variants
_SEARCH = 8  # GEOSEARCH syntax
_SEARCHSTORE = 16  # GEOSEARCHSTORE


class _Point:
    """A member found by a search: its score, decoded position and distance to the centre
    (metres, then the reply's unit)."""

    __slots__ = ("dist", "lat", "lon", "member", "score")

    def __init__(self, member: bytes, score: float, dist: float, lon: float, lat: float) -> None:
        self.member = member
        self.score = score
        self.dist = dist
        self.lon = lon
        self.lat = lat


def _collect(zs: ZSet, shape: Shape, limit: int) -> list[_Point]:
    """Members inside ``shape`` in Redis's order (cell by cell, score order within a cell),
    stopping once ``limit`` (COUNT ... ANY) were found."""
    found: list[_Point] = []
    order = zs.order
    for lo, hi in geohash.search_boxes(shape):
        if found and limit and len(found) >= limit:
            break
        start = order.bisect_left((float(lo),))
        for score, member in order.islice(start):
            if score >= hi:
                break
            lon, lat = geohash.decode_score(score)
            d = geohash.within(shape, lon, lat)
            if d is not None:
                found.append(_Point(member, score, d, lon, lat))
            if found and limit and len(found) >= limit:
                break
    return found


def _search(ctx: Ctx, args: list[bytes], src_index: int, flags: int) -> Reply:
    """Redis's georadiusGeneric: the source key's type first, then the centre and radius of
    the GEORADIUS forms, the options in order (each error as soon as its argument is read),
    the checks across options, and only then the search (a missing source gives an empty
    array, or deletes the STORE destination and gives 0)."""
    argv0 = ctx.argv[0] if ctx.argv else b"geosearch"
    # args excludes the command name: argv position n is args[n - 1].
    zs = ctx.db.get_typed(args[src_index - 1], ZSet)
    storekey: bytes | None = None
    storedist = False
    lon = lat = 0.0
    conversion = 0.0
    radius = width = height = 0.0
    box = False
    if flags & _COORDS:
        base = 6
        lon, lat = _lonlat(args[1], args[2])
        radius, conversion = _radius(args[3], args[4])
    elif flags & _MEMBER and zs is None:
        base = 5
    elif flags & _MEMBER:
        base = 5
        assert zs is not None
        lon, lat = _member_pos(zs, args[1])
        radius, conversion = _radius(args[2], args[3])
    else:
        base = 2
        if flags & _SEARCHSTORE:
            base = 3
            storekey = args[0]
    withdist = withhash = withcoord = False
    frommember = fromloc = byradius = bybox = False
    sort = 0  # 1 ASC, 2 DESC
    any_ = False
    count = 0
    opts = args[base - 1 :]
    remaining = len(opts)
    i = 0
    while i < remaining:
        arg = opts[i].lower()
        if arg == b"withdist":
            withdist = True
        elif arg == b"withhash":
            withhash = True
        elif arg == b"withcoord":
            withcoord = True
        elif arg == b"any":
            any_ = True
        elif arg == b"asc":
            sort = 1
        elif arg == b"desc":
            sort = 2
        elif arg == b"count" and i + 1 < remaining:
            count = to_int(opts[i + 1])
            if count <= 0:
                raise CommandError(msgs.GEO_COUNT)
            i += 1
        elif (
            arg in (b"store", b"storedist")
            and i + 1 < remaining
            and not flags & (_NOSTORE | _SEARCH)
        ):
            storekey = opts[i + 1]
            storedist = arg == b"storedist"
            i += 1
        elif arg == b"storedist" and flags & _SEARCH and flags & _SEARCHSTORE:
            storedist = True
        elif arg == b"frommember" and i + 1 < remaining and flags & _SEARCH and not fromloc:
            if zs is not None:
                lon, lat = _member_pos(zs, opts[i + 1])
            frommember = True
            i += 1
        elif arg == b"fromlonlat" and i + 2 < remaining and flags & _SEARCH and not frommember:
            lon, lat = _lonlat(opts[i + 1], opts[i + 2])
            fromloc = True
            i += 2
        elif arg == b"byradius" and i + 2 < remaining and flags & _SEARCH and not bybox:
            radius, conversion = _radius(opts[i + 1], opts[i + 2])
            box = False
            byradius = True
            i += 2
        elif arg == b"bybox" and i + 3 < remaining and flags & _SEARCH and not byradius:
            width, height, conversion = _box(opts[i + 1], opts[i + 2], opts[i + 3])
            box = True
            bybox = True
            i += 3
        else:
            raise CommandError(msgs.SYNTAX)
        i += 1

    if storekey is not None and (withdist or withhash or withcoord):
        raise CommandError(msgs.geo_store_with(bool(flags & _SEARCHSTORE)))
    if flags & _SEARCH and not (frommember or fromloc):
        raise CommandError(msgs.geo_need_from(argv0))
    if flags & _SEARCH and not (byradius or bybox):
        raise CommandError(msgs.geo_need_by(argv0))
    if any_ and not count:
        raise CommandError(msgs.GEO_ANY_NEEDS_COUNT)

    if zs is None:
        if storekey is not None:
            if ctx.db.discard(storekey):
                ctx.notify(NOTIFY_GENERIC, b"del", storekey)
            else:
                ctx.no_propagate()
                ctx.changed(0)
            return 0
        ctx.no_propagate()
        ctx.changed(0)
        return EMPTY_ARRAY

    if count and not sort and not any_:
        sort = 1
    shape = Shape(lon, lat, conversion, radius, width, height, box)
    points = _collect(zs, shape, count if any_ else 0)
    if not points and storekey is None:
        ctx.no_propagate()
        ctx.changed(0)
        return EMPTY_ARRAY
    returned = len(points) if not count or len(points) < count else count
    if sort:
        if returned == len(points):
            # glibc's qsort is a merge sort: stable, so equal distances keep the order they
            # were found in (reverse=True keeps it too, as the negated comparator does).
            points.sort(key=lambda p: p.dist, reverse=sort == 2)
        else:
            # Redis sorts only the first `returned` places with its partial quicksort; its
            # order among equal distances is reproduced by running the same algorithm.
            cmp = _cmp_asc if sort == 1 else _cmp_desc
            _pqsort(points, 0, len(points), cmp, returned - 1)
    points = points[:returned]
    for p in points:
        p.dist /= conversion

    if storekey is None:
        ctx.no_propagate()
        ctx.changed(0)
        out: list[Reply] = []
        plain = not (withdist or withhash or withcoord)
        for p in points:
            if plain:
                out.append(p.member)
                continue
            item: list[Reply] = [p.member]
            if withdist:
                item.append(_distance_text(p.dist))
            if withhash:
                item.append(_score_int(p.score))
            if withcoord:
                item.append([_coord(p.lon), _coord(p.lat)])
            out.append(item)
        return out

    if points:
        ctx.changed(returned)
        result = ZSet()
        for p in points:
            result.add(p.member, p.dist if storedist else p.score)
        ctx.db.set_key(storekey, result)
        ctx.signal_key_ready(storekey)
        event = b"geosearchstore" if flags & _SEARCH else b"georadiusstore"
        ctx.notify(NOTIFY_ZSET, event, storekey)
    elif ctx.db.discard(storekey):
        ctx.notify(NOTIFY_GENERIC, b"del", storekey)
    else:
        ctx.no_propagate()
        ctx.changed(0)
    return returned


def _cmp_asc(a: _Point, b: _Point) -> int:
    if a.dist > b.dist:
        return 1
    if a.dist == b.dist:
        return 0
    return -1


def _cmp_desc(a: _Point, b: _Point) -> int:
    return -_cmp_asc(a, b)


def _insertion_sort(
    v: list[_Point], base: int, n: int, cmp: Callable[[_Point, _Point], int]
) -> None:
    for m in range(base + 1, base + n):
        i = m
        while i > base and cmp(v[i - 1], v[i]) > 0:
            v[i - 1], v[i] = v[i], v[i - 1]
            i -= 1


def _med3(v: list[_Point], a: int, b: int, c: int, cmp: Callable[[_Point, _Point], int]) -> int:
    if cmp(v[a], v[b]) < 0:
        if cmp(v[b], v[c]) < 0:
            return b
        return c if cmp(v[a], v[c]) < 0 else a
    if cmp(v[b], v[c]) > 0:
        return b
    return a if cmp(v[a], v[c]) < 0 else c


def _vecswap(v: list[_Point], a: int, b: int, n: int) -> None:
    for i in range(n):
        v[a + i], v[b + i] = v[b + i], v[a + i]


def _pqsort(
    v: list[_Point], base: int, n: int, cmp: Callable[[_Point, _Point], int], last: int
) -> None:
    """Redis's pqsort (Bentley-McIlroy quicksort that only recurses into partitions that
    overlap places ``0..last``): the same swaps, so the same order among equal keys."""
    while True:
        if n < 7:
            _insertion_sort(v, base, n, cmp)
            return
        pm = base + n // 2
        if n > 7:
            pl = base
            pn = base + n - 1
            if n > 40:
                d = n // 8
                pl = _med3(v, pl, pl + d, pl + 2 * d, cmp)
                pm = _med3(v, pm - d, pm, pm + d, cmp)
                pn = _med3(v, pn - 2 * d, pn - d, pn, cmp)
            pm = _med3(v, pl, pm, pn, cmp)
        v[base], v[pm] = v[pm], v[base]
        pa = pb = base + 1
        pc = pd = base + n - 1
        swapped = False
        while True:
            while pb <= pc:
                r = cmp(v[pb], v[base])
                if r > 0:
                    break
                if r == 0:
                    swapped = True
                    v[pa], v[pb] = v[pb], v[pa]
                    pa += 1
                pb += 1
            while pb <= pc:
                r = cmp(v[pc], v[base])
                if r < 0:
                    break
                if r == 0:
                    swapped = True
                    v[pc], v[pd] = v[pd], v[pc]
                    pd -= 1
                pc -= 1
            if pb > pc:
                break
            v[pb], v[pc] = v[pc], v[pb]
            swapped = True
            pb += 1
            pc -= 1
        if not swapped:
            _insertion_sort(v, base, n, cmp)
            return
        pn = base + n
        r = min(pa - base, pb - pa)
        _vecswap(v, base, pb - r, r)
        r = min(pd - pc, pn - pd - 1)
        _vecswap(v, pb, pn - r, r)
        r = pb - pa
        if r > 1 and _overlaps(base, r, last):
            _pqsort(v, base, r, cmp, last)
        r = pd - pc
        if r > 1:
            base = pn - r
            n = r
            if _overlaps(base, n, last):
                continue
        return


def _overlaps(start: int, n: int, last: int) -> bool:
    # Places start..start+n-1 meet 0..last (Redis compares the byte addresses; n >= 2).
    return start <= last


def _score_int(score: float) -> int:
    # addReplyLongLong of a double score: C truncates toward zero.
    return int(score)


@command(
    "georadius",
    arity=-6,
    flags=("write", "denyoom", "movablekeys"),
    first_key=1,
    last_key=1,
    step=1,
)
def georadius(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEORADIUS key lon lat radius unit [WITH...] [COUNT n [ANY]] [ASC|DESC]
    [STORE key|STOREDIST key]."""
    return _search(ctx, args, 1, _COORDS)


@command("georadius_ro", arity=-6, flags=("readonly",), first_key=1, last_key=1, step=1)
def georadius_ro(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEORADIUS_RO: GEORADIUS without STORE/STOREDIST."""
    return _search(ctx, args, 1, _COORDS | _NOSTORE)


@command(
    "georadiusbymember",
    arity=-5,
    flags=("write", "denyoom", "movablekeys"),
    first_key=1,
    last_key=1,
    step=1,
)
def georadiusbymember(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEORADIUSBYMEMBER key member radius unit [options as GEORADIUS]."""
    return _search(ctx, args, 1, _MEMBER)


@command("georadiusbymember_ro", arity=-5, flags=("readonly",), first_key=1, last_key=1, step=1)
def georadiusbymember_ro(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEORADIUSBYMEMBER_RO: GEORADIUSBYMEMBER without STORE/STOREDIST."""
    return _search(ctx, args, 1, _MEMBER | _NOSTORE)


@command("geosearch", arity=-7, flags=("readonly",), first_key=1, last_key=1, step=1)
def geosearch(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEOSEARCH key FROMMEMBER m|FROMLONLAT lon lat BYRADIUS r unit|BYBOX w h unit
    [ASC|DESC] [COUNT n [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]."""
    return _search(ctx, args, 1, _SEARCH)


@command("geosearchstore", arity=-8, flags=("write", "denyoom"), first_key=1, last_key=2, step=1)
def geosearchstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """GEOSEARCHSTORE dest src (GEOSEARCH's options) [STOREDIST] -> members stored."""
    return _search(ctx, args, 2, _SEARCH | _SEARCHSTORE)
