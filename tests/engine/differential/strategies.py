"""Hypothesis strategies for command programs over a small alphabet.

A program is a list of steps; a step is one or more commands sent in order on one connection
(0 = RESP2, 1 = RESP3): a single command, or a whole MULTI ... EXEC/DISCARD block. Commands are
mostly well-formed, with a share of mutated ones (a token dropped, replaced, duplicated or
inserted) so that argument errors and their precedence are compared too.

Clock rules the strategies keep (see normalize.py): explicit ids are tiny, ``*`` is rare;
min-idle times, IDLE filters and XCLAIM IDLE/TIME are either 0 or far from "now" (hours, or
in the future), never a few milliseconds that a slow step could cross; EXPIRE uses 100 s+.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

Command = tuple[bytes, ...]
Step = tuple[int, tuple[Command, ...]]
Draw = st.DrawFn

MAX_ID = "18446744073709551615-18446744073709551615"
MAX_MS = "18446744073709551615"

STREAM_KEYS = ["s", "s", "s", "t"]
ANY_KEYS = ["s", "k", "t", "h"]
GROUPS = ["g1", "g2"]
CONSUMERS = ["c1", "c2", "c3"]
FIELDS = ["f1", "f2", "f3"]
VALUES = ["v1", "v2", "10"]
# Listpack-relevant values: integers (stored as ints by Redis), non-canonical numbers, empty,
# binary, and long ones (wide lengths; node byte limits).
EDGE_VALUES = [
    "",
    "0",
    "-1",
    "127",
    "4096",
    "9223372036854775807",
    "9223372036854775808",
    "007",
    "1.5",
    "\x00\xff",
    "x" * 64,
    "y" * 300,
    "z" * 5000,
    "-9223372036854775808",
    "+1",
    " 1",
]

# Alphabets: valid values first and repeated (they weigh more, and shrinking goes to the
# front), then the edge cases and the junk.
PRELUDE_IDS = ["1-1", "1-2", "2-0", "2-1", "3-0", "4-0"]
XADD_IDS = [
    "5-0",
    "5-*",
    "6-1",
    "7",
    "8-*",
    "9-9",
    "5-5",
    "6-*",
    "*",
    "1-1",
    "2-*",
    "3",
    "1-*",
    "4-0",
    "3-*",
]
XADD_EDGE_IDS = [
    "0-1",
    "0-*",
    "0-0",
    MAX_ID,
    f"{MAX_MS}-*",
    "abc",
    "-1",
    "1-x",
    "01-1",
    "1-2-3",
    "",
    "5-18446744073709551615",
    "18446744073709551615-0",
    "18446744073709551616-0",
    "+5-1",
    "5-+1",
    " 5-1",
    "5 -1",
    "-5-1",
    "5--1",
    "0x5-1",
    "5-01",
]
RANGE_STARTS = ["-", "-", "0", "1", "1-2", "2", "2-1", "(1-1", "(2", "5", "+", "0-0"]
RANGE_ENDS = ["+", "+", "5", "2", "2-0", "(3-0", "(2", "4", "-", "0", MAX_ID]
RANGE_EDGES = ["(-", "(+", f"({MAX_ID}", "(0-0", "abc", "3-*", "", "1-1-1"]
COUNTS = [
    "1",
    "2",
    "3",
    "10",
    "1",
    "2",
    "0",
    "-1",
    "x",
    "100",
    "9999999999999999999999",
    "+1",
    "01",
    "1.0",
    " 1",
    "9223372036854775807",
    "-9223372036854775808",
]
READ_IDS = ["0", "0-0", "1-1", "$", "2", "1-2", "0", "3-0", "9-9", MAX_ID]
GROUP_READ_IDS = [">", ">", ">", "0", "0-0", "1-1", "2", "0", "9-9"]
READ_EDGE_IDS = [">", "$", "+", "abc", "(1", "-", ""]
CREATE_IDS = ["0", "$", "1-1", "0", "2", "0-0", "-", "+", "abc", "9-9", MAX_ID]
SETID_IDS = ["0", "$", "1-1", "2-0", "0", "-", "+", "abc", "9-9", "0-0"]
PEL_IDS = ["1-1", "1-2", "2-0", "2-1", "3-0", "4-0", "1-1", "1-2", "0-1", "9-9", "1"]
PEL_EDGE_IDS = ["abc", "-1", "-", "1-x"]
TRIM_LEN = [
    "0",
    "1",
    "2",
    "3",
    "2",
    "-1",
    "x",
    "100",
    "9223372036854775807",
    "9223372036854775808",
    "01",
]
TRIM_MINID = ["1-2", "2", "0", "3-0", "2-1", "-", "9-9", "abc", "-1"]
LIMITS = ["0", "1", "2", "100", "1", "-1", "x", "9223372036854775807"]
# Far from "now" on purpose: 0 = anything pending, hours = nothing freshly delivered.
MIN_IDLE = ["0", "0", "0", "3600000", "3600000", "-1", "x", "9223372036854775807", "+0"]
IDLE_OPT = ["0", "5000000", "-5", "x", "9223372036854775807", "-9223372036854775808"]
TIME_OPT = ["0", "1", "99999999999999", "-1", "9223372036854775807"]
ENTRIES_READ = ["0", "1", "2", "3", "-1", "-2", "10", "x"]
JUNK = ["", "x", "0", "-1", "COUNT", "LIMIT", "~", "=", "STREAMS", "$", ">", "FOO", "1-1", "JUSTID"]


def _b(tokens: Sequence[str]) -> Command:
    return tuple(t.encode() for t in tokens)


def _pick(
    draw: Draw, values: Sequence[str], edges: Sequence[str] = (), edge_percent: int = 12
) -> str:
    """A value; with ``edges``, one of them ``edge_percent`` % of the time."""
    if edges and _chance(draw, edge_percent):
        return str(draw(st.sampled_from(edges)))
    return str(draw(st.sampled_from(values)))


def _ids(draw: Draw, values: Sequence[str], edges: Sequence[str], max_size: int = 3) -> list[str]:
    n = int(draw(st.integers(1, max_size)))
    return [_pick(draw, values, edges, 6) for _ in range(n)]


def _chance(draw: Draw, percent: int) -> bool:
    # Shrinking moves integers towards 0, so 0 means "no": minimal programs lose options.
    return bool(draw(st.integers(0, 99)) >= 100 - percent)


def _shuffled(draw: Draw, groups: list[list[str]]) -> list[str]:
    order = list(draw(st.permutations(range(len(groups)))))
    return [tok for i in order for tok in groups[i]]


def _pairs(draw: Draw) -> list[str]:
    n = int(draw(st.integers(1, 3)))
    out: list[str] = []
    for _ in range(n):
        out += [_pick(draw, FIELDS, EDGE_VALUES, 5), _pick(draw, VALUES, EDGE_VALUES, 15)]
    if _chance(draw, 4):
        out.pop()  # an odd number of field/value tokens
    return out


def _trim_spec(draw: Draw, *, allow_limit: bool = True) -> list[str]:
    kind = _pick(draw, ["MAXLEN", "MINID", "maxlen"])
    spec = [kind]
    op = _pick(draw, ["", "=", "~", "~"])
    if op:
        spec.append(op)
    spec.append(_pick(draw, TRIM_MINID if kind == "MINID" else TRIM_LEN))
    if allow_limit and _chance(draw, 30):
        spec += ["LIMIT", _pick(draw, LIMITS)]
    return spec


# --- stream commands ------------------------------------------------------------------------


@st.composite
def xadd(draw: Draw) -> Command:
    opts: list[list[str]] = []
    if _chance(draw, 15):
        opts.append(["NOMKSTREAM"])
    if _chance(draw, 30):
        opts.append(_trim_spec(draw))
    if _chance(draw, 3):
        opts.append(_trim_spec(draw))  # MAXLEN twice, or MAXLEN with MINID
    return _b(
        [
            "XADD",
            _pick(draw, STREAM_KEYS),
            *_shuffled(draw, opts),
            _pick(draw, XADD_IDS, XADD_EDGE_IDS, 20),
            *_pairs(draw),
        ]
    )


@st.composite
def xadd_plain(draw: Draw) -> Command:
    """A well-formed XADD with a small id, usually after the prelude's."""
    return _b(
        [
            "XADD",
            _pick(draw, ["s", "s", "t"]),
            _pick(draw, ["5-0", "5-*", "6-1", "7-*", "3-*", "8", "1-2"]),
            *_pairs(draw),
        ]
    )


@st.composite
def prelude(draw: Draw, groups: bool = False) -> list[Command]:
    """Data to act on: entries with increasing ids in ``s`` (and maybe ``t``); with ``groups``,
    consumer groups and a first delivery. Every part is optional, so shrinking drops what a
    failure does not need."""
    out: list[Command] = []
    # Small stream nodes, so that ~ trimming, LIMIT and radix-tree-keys see node boundaries.
    if _chance(draw, 30):
        out.append(_b(["CONFIG", "SET", "stream-node-max-entries", _pick(draw, ["2", "3", "5"])]))
    if _chance(draw, 12):
        out.append(_b(["CONFIG", "SET", "stream-node-max-bytes", _pick(draw, ["40", "80", "200"])]))
    for key, pct in (("s", 90), ("t", 35)):
        if _chance(draw, pct):
            ids = sorted(
                draw(st.lists(st.sampled_from(PRELUDE_IDS), min_size=1, max_size=6, unique=True))
            )
            out += [_b(["XADD", key, str(i), *_pairs(draw)]) for i in ids]
    if groups:
        for cmd, pct in (
            ("XGROUP CREATE s g1 0", 90),
            ("XGROUP CREATE s g2 $ MKSTREAM", 50),
            ("XGROUP CREATE t g1 0 MKSTREAM", 30),
            ("XREADGROUP GROUP g1 c1 COUNT 2 STREAMS s >", 60),
            ("XREADGROUP GROUP g1 c2 STREAMS s t > >", 30),
        ):
            if _chance(draw, pct):
                out.append(_b(cmd.split()))
    return out


@st.composite
def xrange(draw: Draw) -> Command:
    name = _pick(draw, ["XRANGE", "XREVRANGE"])
    a, b = _pick(draw, RANGE_STARTS, RANGE_EDGES, 8), _pick(draw, RANGE_ENDS, RANGE_EDGES, 8)
    if name == "XREVRANGE":
        a, b = b, a
    tail = ["COUNT", _pick(draw, COUNTS)] if _chance(draw, 35) else []
    return _b([name, _pick(draw, STREAM_KEYS), a, b, *tail])


@st.composite
def xlen(draw: Draw) -> Command:
    return _b(["XLEN", _pick(draw, ANY_KEYS)])


@st.composite
def xdel(draw: Draw) -> Command:
    return _b(["XDEL", _pick(draw, STREAM_KEYS), *_ids(draw, PEL_IDS, PEL_EDGE_IDS)])


@st.composite
def xtrim(draw: Draw) -> Command:
    return _b(["XTRIM", _pick(draw, STREAM_KEYS), *_trim_spec(draw)])


def _streams_tail(draw: Draw, ids: Sequence[str]) -> list[str]:
    n = 2 if _chance(draw, 25) else 1
    keys = [_pick(draw, ["s", "s", "t", "s", "k"]) for _ in range(n)]
    id_list = [_pick(draw, ids, READ_EDGE_IDS, 10) for _ in range(n)]
    if _chance(draw, 4):
        id_list.pop()  # unbalanced STREAMS
    return ["STREAMS", *keys, *id_list]


@st.composite
def xread(draw: Draw, in_multi: bool = False) -> Command:
    opts: list[list[str]] = []
    if _chance(draw, 40):
        opts.append(["COUNT", _pick(draw, COUNTS)])
    if in_multi and _chance(draw, 40):
        opts.append(["BLOCK", _pick(draw, ["0", "100"])])
    return _b(["XREAD", *_shuffled(draw, opts), *_streams_tail(draw, READ_IDS)])


@st.composite
def xreadgroup(draw: Draw, in_multi: bool = False) -> Command:
    opts: list[list[str]] = [["GROUP", _pick(draw, GROUPS), _pick(draw, CONSUMERS)]]
    if _chance(draw, 40):
        opts.append(["COUNT", _pick(draw, COUNTS)])
    if _chance(draw, 20):
        opts.append(["NOACK"])
    if in_multi and _chance(draw, 40):
        opts.append(["BLOCK", _pick(draw, ["0", "100"])])
    if _chance(draw, 3):
        opts.pop(0)  # no GROUP at all
    return _b(["XREADGROUP", *_shuffled(draw, opts), *_streams_tail(draw, GROUP_READ_IDS)])


@st.composite
def xgroup(draw: Draw) -> Command:
    key, group = _pick(draw, STREAM_KEYS), _pick(draw, GROUPS)
    sub = _pick(
        draw,
        ["CREATE", "CREATE", "SETID", "CREATECONSUMER", "DELCONSUMER", "DESTROY", "HELP", "create"],
    )
    if sub.upper() == "CREATE":
        opts: list[list[str]] = []
        if _chance(draw, 40):
            opts.append(["MKSTREAM"])
        if _chance(draw, 25):
            opts.append(["ENTRIESREAD", _pick(draw, ENTRIES_READ)])
        return _b(["XGROUP", sub, key, group, _pick(draw, CREATE_IDS), *_shuffled(draw, opts)])
    if sub == "SETID":
        tail = ["ENTRIESREAD", _pick(draw, ENTRIES_READ)] if _chance(draw, 35) else []
        return _b(["XGROUP", sub, key, group, _pick(draw, SETID_IDS), *tail])
    if sub in ("CREATECONSUMER", "DELCONSUMER"):
        return _b(["XGROUP", sub, key, group, _pick(draw, CONSUMERS)])
    if sub == "DESTROY":
        return _b(["XGROUP", sub, key, group])
    return _b(["XGROUP", sub])


@st.composite
def xack(draw: Draw) -> Command:
    return _b(
        ["XACK", _pick(draw, STREAM_KEYS), _pick(draw, GROUPS), *_ids(draw, PEL_IDS, PEL_EDGE_IDS)]
    )


@st.composite
def xpending(draw: Draw) -> Command:
    head = ["XPENDING", _pick(draw, STREAM_KEYS), _pick(draw, GROUPS)]
    if _chance(draw, 30):
        return _b(head)
    ext: list[str] = []
    if _chance(draw, 30):
        ext += ["IDLE", _pick(draw, MIN_IDLE)]
    ext += [
        _pick(draw, RANGE_STARTS, RANGE_EDGES, 8),
        _pick(draw, RANGE_ENDS, RANGE_EDGES, 8),
        _pick(draw, COUNTS),
    ]
    if _chance(draw, 40):
        ext.append(_pick(draw, CONSUMERS))
    return _b(head + ext)


@st.composite
def xclaim(draw: Draw) -> Command:
    ids = _ids(draw, PEL_IDS, PEL_EDGE_IDS)
    opts: list[list[str]] = []
    for name, values, pct in (
        ("IDLE", IDLE_OPT, 15),
        ("TIME", TIME_OPT, 10),
        ("RETRYCOUNT", ["0", "3", "-1", "x"], 20),
        ("LASTID", ["5-5", "1-1", "0-0", "abc"], 10),
    ):
        if _chance(draw, pct):
            opts.append([name, _pick(draw, values)])
    for flag, pct in (("FORCE", 25), ("JUSTID", 30)):
        if _chance(draw, pct):
            opts.append([flag])
    if _chance(draw, 3):
        opts.append(["BOGUS"])
    return _b(
        [
            "XCLAIM",
            _pick(draw, STREAM_KEYS),
            _pick(draw, GROUPS),
            _pick(draw, CONSUMERS),
            _pick(draw, MIN_IDLE),
            *ids,
            *_shuffled(draw, opts),
        ]
    )


@st.composite
def xautoclaim(draw: Draw) -> Command:
    opts: list[list[str]] = []
    if _chance(draw, 50):
        opts.append(["COUNT", _pick(draw, ["1", "2", "3", "100", "1", "2", "0", "-1", "x"])])
    if _chance(draw, 30):
        opts.append(["JUSTID"])
    return _b(
        [
            "XAUTOCLAIM",
            _pick(draw, STREAM_KEYS),
            _pick(draw, GROUPS),
            _pick(draw, CONSUMERS),
            _pick(draw, MIN_IDLE),
            _pick(draw, ["0", "0-0", "-", "+", "(1-1", "1-2", "2", "abc"]),
            *_shuffled(draw, opts),
        ]
    )


@st.composite
def xinfo(draw: Draw) -> Command:
    sub = _pick(draw, ["STREAM", "STREAM", "GROUPS", "CONSUMERS", "HELP", "stream"])
    key = _pick(draw, ["s", "s", "s", "t", "k"])
    if sub.upper() == "STREAM":
        tail: list[str] = []
        if _chance(draw, 50):
            tail = ["FULL"]
            if _chance(draw, 40):
                tail += ["COUNT", _pick(draw, ["0", "1", "2", "-1", "x"])]
        return _b(["XINFO", sub, key, *tail])
    if sub == "GROUPS":
        return _b(["XINFO", sub, key])
    if sub == "CONSUMERS":
        return _b(["XINFO", sub, key, _pick(draw, GROUPS)])
    return _b(["XINFO", sub])


@st.composite
def xsetid(draw: Draw) -> Command:
    opts: list[list[str]] = []
    if _chance(draw, 35):
        opts.append(["ENTRIESADDED", _pick(draw, ["0", "1", "3", "10", "-1", "x"])])
    if _chance(draw, 35):
        opts.append(["MAXDELETEDID", _pick(draw, ["0-0", "1-1", "2-0", "9-9", "abc"])])
    return _b(
        [
            "XSETID",
            _pick(draw, STREAM_KEYS),
            _pick(draw, ["5-5", "9-0", "2-0", "1-1", "0-0", "0-1", "abc", "3"]),
            *_shuffled(draw, opts),
        ]
    )


# --- other types ----------------------------------------------------------------------------


@st.composite
def strings(draw: Draw) -> Command:
    k = _pick(draw, ANY_KEYS)
    v = _pick(draw, ["v1", "10", "-3", "1.5", ""])
    which = int(draw(st.integers(0, 9)))
    if which == 0:
        opts: list[list[str]] = []
        if _chance(draw, 25):
            opts.append([_pick(draw, ["NX", "XX"])])
        if _chance(draw, 20):
            opts.append(["GET"])
        if _chance(draw, 20):
            opts.append(_pick(draw, ["EX 100", "KEEPTTL", "EX 0", "PX 100000"]).split())
        return _b(["SET", k, v, *_shuffled(draw, opts)])
    if which == 1:
        return _b(["GET", k])
    if which == 2:
        return _b([_pick(draw, ["INCR", "DECR"]), k])
    if which == 3:
        return _b(["INCRBY", k, _pick(draw, ["5", "-2", "x", "9223372036854775807"])])
    if which == 4:
        return _b(["APPEND", k, v])
    if which == 5:
        return _b(["STRLEN", k])
    if which == 6:
        return _b(["GETDEL", k])
    if which == 7:
        return _b(["MGET", k, _pick(draw, ANY_KEYS)])
    if which == 8:
        return _b(["MSET", k, v, _pick(draw, ANY_KEYS), "v2"])
    return _b(["SETNX", k, v])


@st.composite
def bits(draw: Draw) -> Command:
    """SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD(_RO) on small strings and other types."""
    k = _pick(draw, ["b", "b", "c", "k", "s"])
    offsets = ["0", "7", "8", "15", "23", "100", "-1", "x", "#1", "#2"]
    ranges = ["0", "1", "-1", "-2", "2", "-100", "100", "x"]
    which = int(draw(st.integers(0, 7)))
    if which == 0:
        return _b(["SETBIT", k, _pick(draw, offsets[:7]), _pick(draw, ["1", "0", "2"])])
    if which == 1:
        return _b(["GETBIT", k, _pick(draw, offsets[:7])])
    if which == 2:
        unit = [_pick(draw, ["BIT", "BYTE", "bit", "FOO"])] if _chance(draw, 50) else []
        pair = [_pick(draw, ranges), _pick(draw, ranges)] if _chance(draw, 70) else []
        return _b(["BITCOUNT", k, *pair, *(unit if pair else [])])
    if which == 3:
        tail = draw(st.lists(st.sampled_from(ranges), max_size=2))
        if len(tail) == 2 and _chance(draw, 50):
            tail.append(_pick(draw, ["BIT", "BYTE", "FOO"]))
        return _b(["BITPOS", k, _pick(draw, ["0", "1", "1", "2"]), *tail])
    if which == 4:
        op = _pick(draw, ["AND", "OR", "XOR", "NOT", "and", "FOO"])
        srcs = draw(
            st.lists(st.sampled_from(["b", "c", "k", "s", "nokey"]), min_size=1, max_size=3)
        )
        return _b(["BITOP", op, _pick(draw, ["b", "c", "d"]), *srcs])
    ops: list[str] = []
    for _ in range(int(draw(st.integers(1, 3)))):
        kind = _pick(draw, ["GET", "GET", "SET", "INCRBY", "OVERFLOW"])
        if kind == "OVERFLOW":
            ops += ["OVERFLOW", _pick(draw, ["WRAP", "SAT", "FAIL", "FOO"])]
            continue
        t = _pick(draw, ["u8", "i8", "u1", "i5", "u63", "i64", "u64", "i0"])
        ops += [kind, t, _pick(draw, offsets)]
        if kind != "GET":
            ops.append(_pick(draw, ["1", "-1", "100", "-300", "9223372036854775807", "x"]))
    name = "BITFIELD_RO" if which == 7 and _chance(draw, 50) else "BITFIELD"
    return _b([name, k, *ops])


GEO_LONS = ["13.361389", "15.087269", "-180", "180", "0", "179.99", "-0.5", "181", "x", "inf"]
GEO_LATS = ["38.115556", "37.502669", "85.05112878", "-85.05112878", "0", "85.06", "-1", "y"]
GEO_MEMBERS = ["a", "b", "c", "d"]
GEO_UNITS = ["m", "km", "mi", "ft", "KM", "yd"]
GEO_SIZES = ["0", "1", "200", "500", "5000", "20000", "-1", "x", "1e9"]


@st.composite
def geo(draw: Draw) -> Command:
    """GEOADD, GEOPOS, GEODIST, GEOHASH, GEORADIUS(BYMEMBER)(_RO), GEOSEARCH(STORE)."""
    g = _pick(draw, ["g", "g", "g", "d", "k", "s"])
    which = int(draw(st.integers(0, 7)))
    if which <= 1:
        opts = draw(st.lists(st.sampled_from(["NX", "XX", "CH"]), max_size=2))
        triples: list[str] = []
        for _ in range(int(draw(st.integers(1, 3)))):
            triples += [_pick(draw, GEO_LONS), _pick(draw, GEO_LATS), _pick(draw, GEO_MEMBERS)]
        return _b(["GEOADD", g, *opts, *triples])
    if which == 2:
        name = _pick(draw, ["GEOPOS", "GEOHASH"])
        return _b([name, g, *draw(st.lists(st.sampled_from(GEO_MEMBERS), max_size=3))])
    if which == 3:
        unit = [_pick(draw, GEO_UNITS)] if _chance(draw, 60) else []
        return _b(["GEODIST", g, _pick(draw, GEO_MEMBERS), _pick(draw, GEO_MEMBERS), *unit])
    tail: list[str] = []
    for word in ("WITHDIST", "WITHCOORD", "WITHHASH", "ASC", "DESC", "ANY"):
        if _chance(draw, 20):
            tail.append(word)
    if _chance(draw, 30):
        tail += ["COUNT", _pick(draw, ["1", "2", "0", "-1", "x"])]
    size = [_pick(draw, GEO_SIZES), _pick(draw, GEO_UNITS)]
    if which == 4:
        if _chance(draw, 20):
            tail += [_pick(draw, ["STORE", "STOREDIST"]), "dst"]
        name = _pick(draw, ["GEORADIUS", "GEORADIUS", "GEORADIUS_RO"])
        return _b([name, g, _pick(draw, GEO_LONS), _pick(draw, GEO_LATS), *size, *tail])
    if which == 5:
        if _chance(draw, 20):
            tail += [_pick(draw, ["STORE", "STOREDIST"]), "dst"]
        name = _pick(draw, ["GEORADIUSBYMEMBER", "GEORADIUSBYMEMBER_RO"])
        return _b([name, g, _pick(draw, GEO_MEMBERS), *size, *tail])
    parts: list[list[str]] = []
    if _chance(draw, 50):
        parts.append(["FROMMEMBER", _pick(draw, GEO_MEMBERS)])
    if _chance(draw, 50):
        parts.append(["FROMLONLAT", _pick(draw, GEO_LONS), _pick(draw, GEO_LATS)])
    if _chance(draw, 50):
        parts.append(["BYRADIUS", *size])
    if _chance(draw, 50):
        parts.append(["BYBOX", _pick(draw, GEO_SIZES), _pick(draw, GEO_SIZES), size[1]])
    parts.append(tail)
    words = _shuffled(draw, parts)
    if which == 6:
        return _b(["GEOSEARCH", g, *words])
    if _chance(draw, 30):
        words.append("STOREDIST")
    return _b(["GEOSEARCHSTORE", "dst", g, *words])


@st.composite
def hll(draw: Draw) -> Command:
    """PFADD, PFCOUNT, PFMERGE and PFDEBUG on small HyperLogLogs and other types."""
    h = _pick(draw, ["h", "h", "h2", "k", "s"])
    elements = draw(st.lists(st.sampled_from(["a", "b", "c", "x", "", "1", "foo"]), max_size=4))
    which = int(draw(st.integers(0, 5)))
    if which <= 1:
        return _b(["PFADD", h, *elements])
    if which == 2:
        keys = draw(
            st.lists(st.sampled_from(["h", "h2", "k", "s", "nokey"]), min_size=1, max_size=3)
        )
        return _b(["PFCOUNT", *keys])
    if which == 3:
        keys = draw(st.lists(st.sampled_from(["h", "h2", "k", "nokey"]), max_size=3))
        return _b(["PFMERGE", _pick(draw, ["h", "h3", "s"]), *keys])
    if which == 4:
        sub = _pick(draw, ["ENCODING", "DECODE", "TODENSE", "GETREG", "FOO"])
        return _b(["PFDEBUG", sub, h])
    return _b(["GET", h])


@st.composite
def hashes(draw: Draw) -> Command:
    h = _pick(draw, ["h", "h", "k", "s"])
    which = int(draw(st.integers(0, 8)))
    if which == 0:
        return _b(["HSET", h, *_pairs(draw)])
    if which == 1:
        return _b(["HGET", h, _pick(draw, FIELDS)])
    if which == 2:
        return _b(["HDEL", h, _pick(draw, FIELDS), _pick(draw, FIELDS)])
    if which == 3:
        return _b(["HGETALL", h])
    if which == 4:
        return _b(["HLEN", h])
    if which == 5:
        return _b(["HEXISTS", h, _pick(draw, FIELDS)])
    if which == 6:
        return _b(["HINCRBY", h, _pick(draw, FIELDS), _pick(draw, ["1", "-5", "x"])])
    if which == 7:
        return _b(["HMGET", h, _pick(draw, FIELDS), _pick(draw, FIELDS)])
    return _b([_pick(draw, ["HKEYS", "HVALS"]), h])


@st.composite
def sets(draw: Draw) -> Command:
    k = _pick(draw, ["k", "k", "h", "s"])
    members = ["a", "b", "1", "c"]
    which = int(draw(st.integers(0, 6)))
    if which == 0:
        ms = draw(st.lists(st.sampled_from(members), min_size=1, max_size=3))
        return _b(["SADD", k, *ms])
    if which == 1:
        return _b(["SREM", k, _pick(draw, members)])
    if which == 2:
        return _b(["SMEMBERS", k])
    if which == 3:
        return _b(["SISMEMBER", k, _pick(draw, members)])
    if which == 4:
        return _b(["SCARD", k])
    if which == 5:
        return _b([_pick(draw, ["SINTER", "SUNION", "SDIFF"]), k, _pick(draw, ANY_KEYS)])
    return _b(["SMISMEMBER", k, _pick(draw, members), _pick(draw, members)])


@st.composite
def zsets(draw: Draw) -> Command:
    k = _pick(draw, ["k", "k", "h", "s"])
    members = ["a", "b", "c"]
    scores = ["1", "2", "1.5", "-inf", "+inf", "x", "0"]
    which = int(draw(st.integers(0, 7)))
    if which == 0:
        opts = [
            f
            for f, pct in (("NX", 10), ("XX", 10), ("GT", 10), ("LT", 5), ("CH", 20))
            if _chance(draw, pct)
        ]
        if _chance(draw, 10):
            opts.append("INCR")
        n = int(draw(st.integers(1, 2)))
        pairs = [t for _ in range(n) for t in (_pick(draw, scores), _pick(draw, members))]
        return _b(["ZADD", k, *opts, *pairs])
    if which == 1:
        opts2: list[list[str]] = []
        by = _pick(draw, ["", "", "BYSCORE"])
        if by:
            opts2.append([by])
            if _chance(draw, 30):
                opts2.append(["LIMIT", "0", _pick(draw, ["1", "-1", "2"])])
        if _chance(draw, 30):
            opts2.append(["REV"])
        if _chance(draw, 50):
            opts2.append(["WITHSCORES"])
        start, stop = (
            ("-inf", "+inf")
            if by
            else (_pick(draw, ["0", "1", "-1"]), _pick(draw, ["-1", "0", "5"]))
        )
        if by and "REV" in [g[0] for g in opts2]:
            start, stop = stop, start
        return _b(["ZRANGE", k, start, stop, *_shuffled(draw, opts2)])
    if which == 2:
        return _b(["ZSCORE", k, _pick(draw, members)])
    if which == 3:
        return _b(["ZINCRBY", k, _pick(draw, ["1", "-2.5", "x"]), _pick(draw, members)])
    if which == 4:
        return _b(["ZREM", k, _pick(draw, members)])
    if which == 5:
        return _b(["ZCARD", k])
    if which == 6:
        return _b([_pick(draw, ["ZRANK", "ZREVRANK"]), k, _pick(draw, members)])
    return _b(["ZCOUNT", k, _pick(draw, ["-inf", "1", "(1"]), _pick(draw, ["+inf", "2", "(2"])])


@st.composite
def lists(draw: Draw) -> Command:
    k = _pick(draw, ["k", "k", "h", "s"])
    which = int(draw(st.integers(0, 5)))
    if which == 0:
        vs = draw(st.lists(st.sampled_from(["a", "b", "1"]), min_size=1, max_size=3))
        return _b([_pick(draw, ["LPUSH", "RPUSH"]), k, *vs])
    if which == 1:
        tail = [_pick(draw, ["1", "2", "0", "-1", "x"])] if _chance(draw, 30) else []
        return _b([_pick(draw, ["LPOP", "RPOP"]), k, *tail])
    if which == 2:
        return _b(["LRANGE", k, _pick(draw, ["0", "1", "-2"]), _pick(draw, ["-1", "0", "10"])])
    if which == 3:
        return _b(["LLEN", k])
    if which == 4:
        return _b(["LINDEX", k, _pick(draw, ["0", "-1", "5", "x"])])
    return _b(["LPUSHX", k, "z"])


@st.composite
def list_positions(draw: Draw) -> Command:
    """LPOS, LSET, LINSERT, LMPOP, and BLMPOP that never waits (a timeout of 0.01 s at most)."""
    k = _pick(draw, ["k", "k", "l", "h", "s"])
    vals = ["a", "b", "1", "z"]
    which = int(draw(st.integers(0, 4)))
    if which == 0:
        opts: list[list[str]] = []
        if _chance(draw, 40):
            opts.append(
                ["RANK", _pick(draw, ["1", "2", "-1", "-2", "0", "x", "-9223372036854775808"])]
            )
        if _chance(draw, 40):
            opts.append(["COUNT", _pick(draw, ["0", "1", "2", "-1", "x"])])
        if _chance(draw, 30):
            opts.append(["MAXLEN", _pick(draw, ["0", "1", "3", "-1"])])
        return _b(["LPOS", k, _pick(draw, vals), *_shuffled(draw, opts)])
    if which == 1:
        return _b(["LSET", k, _pick(draw, ["0", "-1", "2", "10", "x"]), _pick(draw, vals)])
    if which == 2:
        where = _pick(draw, ["BEFORE", "AFTER", "after", "FOO"])
        return _b(["LINSERT", k, where, _pick(draw, vals), _pick(draw, vals)])
    keys = draw(st.lists(st.sampled_from(["k", "l", "h", "s", "nokey"]), min_size=1, max_size=3))
    numkeys = str(len(keys)) if _chance(draw, 85) else _pick(draw, ["0", "-1", "x", "9"])
    tail = [_pick(draw, ["LEFT", "RIGHT", "left", "MID"])]
    if _chance(draw, 40):
        tail += ["COUNT", _pick(draw, ["1", "2", "5", "0", "-1", "x"])]
    if which == 3:
        return _b(["LMPOP", numkeys, *keys, *tail])
    return _b(["BLMPOP", _pick(draw, ["0.01", "x", "-1"]), numkeys, *keys, *tail])


@st.composite
def list_moves(draw: Draw) -> Command:
    """LREM, LMOVE, RPOPLPUSH, and BLMOVE / BRPOPLPUSH that never wait long (0.01 s)."""
    keys = ["k", "k", "l", "h", "s", "nokey"]
    vals = ["a", "b", "1"]
    which = int(draw(st.integers(0, 5)))
    if which == 0:
        vs = draw(st.lists(st.sampled_from(vals), min_size=1, max_size=4))
        return _b([_pick(draw, ["RPUSH", "LPUSH"]), _pick(draw, ["k", "l"]), *vs])
    if which == 1:
        count = _pick(draw, ["0", "1", "-1", "2", "-2", "x", "-9223372036854775808"])
        return _b(["LREM", _pick(draw, keys), count, _pick(draw, vals)])
    src, dst = _pick(draw, keys), _pick(draw, keys)
    ends = [_pick(draw, ["LEFT", "RIGHT", "left", "MID"]) for _ in range(2)]
    if which == 2:
        return _b(["LMOVE", src, dst, *ends])
    if which == 3:
        return _b(["RPOPLPUSH", src, dst])
    timeout = _pick(draw, ["0.01", "0.01", "x", "-1"])
    if which == 4:
        return _b(["BLMOVE", src, dst, *ends, timeout])
    return _b(["BRPOPLPUSH", src, dst, timeout])


@st.composite
def set_algebra(draw: Draw) -> Command:
    """SMOVE, SINTERSTORE / SUNIONSTORE / SDIFFSTORE, ZUNION / ZINTER / ZDIFF and their STORE
    forms over sets, sorted sets (infinite scores too) and other types."""
    keys = ["s", "s2", "z", "z2", "k", "nokey"]
    which = int(draw(st.integers(0, 5)))
    if which == 0:
        ms = draw(st.lists(st.sampled_from(["a", "b", "1", "2"]), min_size=1, max_size=3))
        return _b(["SADD", _pick(draw, ["s", "s2"]), *ms])
    if which == 1:
        n = int(draw(st.integers(1, 2)))
        scores = ["1", "2", "-1", "0", "+inf", "-inf", "0.5"]
        pairs = [t for _ in range(n) for t in (_pick(draw, scores), _pick(draw, ["a", "b", "c"]))]
        return _b(["ZADD", _pick(draw, ["z", "z2"]), *pairs])
    if which == 2:
        return _b(["SMOVE", _pick(draw, keys), _pick(draw, keys), _pick(draw, ["a", "b", "1"])])
    ks = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3))
    dst = _pick(draw, ["d", "s", "z", "k"])
    if which == 3:
        name = _pick(draw, ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"])
        return _b([name, dst, *ks])
    numkeys = str(len(ks)) if _chance(draw, 85) else _pick(draw, ["0", "-1", "x", "9"])
    op = _pick(draw, ["UNION", "INTER", "DIFF"])
    opts: list[list[str]] = []
    if op != "DIFF" or _chance(draw, 10):
        if _chance(draw, 40):
            ws = [_pick(draw, ["1", "2", "0", "-1", "inf", "x"]) for _ in ks]
            opts.append(["WEIGHTS", *ws])
        if _chance(draw, 40):
            opts.append(["AGGREGATE", _pick(draw, ["SUM", "MIN", "MAX", "max", "AVG"])])
    if which == 4:
        if _chance(draw, 60):
            opts.append(["WITHSCORES"])
        return _b([f"Z{op}", numkeys, *ks, *_shuffled(draw, opts)])
    return _b([f"Z{op}STORE", dst, numkeys, *ks, *_shuffled(draw, opts)])


@st.composite
def random_and_scans(draw: Draw) -> Command:
    """SSCAN/HSCAN/ZSCAN (COUNT large enough to see small collections whole) and
    ZRANDMEMBER/HRANDFIELD with counts whose reply chance does not decide (0, past the size,
    errors, missing keys)."""
    which = int(draw(st.integers(0, 4)))
    k = _pick(draw, ["k", "h", "s", "z", "nokey"])
    if which <= 2:
        name = ["SSCAN", "HSCAN", "ZSCAN"][which]
        opts: list[list[str]] = []
        if _chance(draw, 40):
            opts.append(["MATCH", _pick(draw, ["*", "a*", "f?", "[ab]", "1*"])])
        if _chance(draw, 40):
            opts.append(["COUNT", _pick(draw, ["10", "100", "0", "-1", "x"])])
        if _chance(draw, 10):
            opts.append(["TYPE", "set"])
        return _b([name, k, _pick(draw, ["0", "0", "x", "-1"]), *_shuffled(draw, opts)])
    name, word = ("ZRANDMEMBER", "WITHSCORES") if which == 3 else ("HRANDFIELD", "WITHVALUES")
    if k == "nokey" or _chance(draw, 30):
        count = _pick(draw, ["0", "-3", "5", "x", "-9223372036854775808", "4611686018427387904"])
    else:
        count = _pick(draw, ["0", "100", "x"])
    tail = [_pick(draw, [word, word.lower(), "FOO"])] if _chance(draw, 50) else []
    return _b([name, k, count, *tail])


@st.composite
def small_collections(draw: Draw) -> Command:
    """Writes that keep sets, hashes and sorted sets small (intset/listpack, or a few strings)."""
    which = int(draw(st.integers(0, 3)))
    if which == 0:
        ms = draw(st.lists(st.sampled_from(["1", "2", "10", "-5", "a"]), min_size=1, max_size=3))
        return _b(["SADD", _pick(draw, ["s", "s", "k"]), *ms])
    if which == 1:
        return _b(["HSET", _pick(draw, ["h", "h", "k"]), *_pairs(draw)])
    if which == 2:
        n = int(draw(st.integers(1, 2)))
        pairs = [
            t
            for _ in range(n)
            for t in (_pick(draw, ["1", "2.5", "-inf", "0.1", "-0"]), _pick(draw, ["a", "b", "c"]))
        ]
        return _b(["ZADD", _pick(draw, ["z", "z", "k"]), *pairs])
    return _b([_pick(draw, ["SREM", "HDEL", "ZREM"]), _pick(draw, ["s", "h", "z"]), "a"])


@st.composite
def zset_pops(draw: Draw) -> Command:
    """ZMPOP, BZMPOP / BZPOPMIN / BZPOPMAX that never wait long (0.01 s), ZINTERCARD,
    SINTERCARD, ZRANGESTORE."""
    keys = ["z", "z2", "k", "s", "nokey"]
    which = int(draw(st.integers(0, 5)))
    if which == 0:
        ks = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3))
        numkeys = str(len(ks)) if _chance(draw, 85) else _pick(draw, ["0", "-1", "x", "9"])
        tail = [_pick(draw, ["MIN", "MAX", "max", "MID"])]
        if _chance(draw, 40):
            tail += ["COUNT", _pick(draw, ["1", "2", "10", "0", "-1", "x"])]
        if _chance(draw, 50):
            return _b(["ZMPOP", numkeys, *ks, *tail])
        return _b(["BZMPOP", _pick(draw, ["0.01", "x", "-1"]), numkeys, *ks, *tail])
    if which == 1:
        ks = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2))
        name = _pick(draw, ["BZPOPMIN", "BZPOPMAX"])
        return _b([name, *ks, _pick(draw, ["0.01", "0.01", "x", "-1"])])
    if which in (2, 3):
        name = "ZINTERCARD" if which == 2 else "SINTERCARD"
        ks = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3))
        numkeys = str(len(ks)) if _chance(draw, 85) else _pick(draw, ["0", "-1", "x", "9"])
        tail = ["LIMIT", _pick(draw, ["0", "1", "2", "-1", "x"])] if _chance(draw, 40) else []
        return _b([name, numkeys, *ks, *tail])
    if which == 4:
        opts: list[list[str]] = []
        by = _pick(draw, ["", "", "BYSCORE", "BYLEX"])
        if by == "BYSCORE":
            lo, hi = _pick(draw, ["-inf", "(1", "2"]), _pick(draw, ["+inf", "3", "(2"])
        elif by == "BYLEX":
            lo, hi = _pick(draw, ["-", "[b", "(a"]), _pick(draw, ["+", "[c", "(c"])
        else:
            lo, hi = _pick(draw, ["0", "1", "-2", "5"]), _pick(draw, ["-1", "0", "2"])
        if by:
            opts.append([by])
            if _chance(draw, 30):
                opts.append(["LIMIT", _pick(draw, ["0", "1"]), _pick(draw, ["1", "-1"])])
        if _chance(draw, 30):
            opts.append(["REV"])
            if by:
                lo, hi = hi, lo
        if _chance(draw, 10):
            opts.append(["WITHSCORES"])
        src = _pick(draw, keys)
        return _b(
            ["ZRANGESTORE", _pick(draw, ["d", "z2", "k"]), src, lo, hi, *_shuffled(draw, opts)]
        )
    n = int(draw(st.integers(1, 3)))
    pairs = [
        t for _ in range(n) for t in (_pick(draw, ["1", "2", "3"]), _pick(draw, ["a", "b", "c"]))
    ]
    if _chance(draw, 30):
        return _b(["SADD", _pick(draw, ["s", "k"]), _pick(draw, ["a", "b", "q"])])
    return _b(["ZADD", _pick(draw, ["z", "z", "z2", "k"]), *pairs])


@st.composite
def sorts(draw: Draw) -> Command:
    """SORT / SORT_RO where Redis's result does not depend on its hash-table order: BY and
    GET patterns on lists, numeric or ALPHA order of sets, ``BY nosort`` on lists and sorted
    sets (sets only with STORE), no score past the double range (Redis keeps a stale ERANGE)."""
    which = int(draw(st.integers(0, 9)))
    if which == 0:
        vs = draw(
            st.lists(st.sampled_from(["1", "2", "10", "-3", "1.5", "a", "b", ""]), max_size=3)
        )
        return _b(["RPUSH", _pick(draw, ["k", "k", "l"]), *(vs or ["1"])])
    if which == 1:
        return _b(["MSET", "w_1", _pick(draw, ["3", "b", "1"]), "w_2", _pick(draw, ["1", "a"])])
    if which == 2:
        return _b(["HSET", _pick(draw, ["h_1", "h_2", "h_10"]), "f", _pick(draw, ["x", "2", "y"])])
    if which == 3:
        vs = draw(st.lists(st.sampled_from(["1", "2", "10", "x", "y"]), min_size=1, max_size=3))
        return _b(["SADD", "s", *vs]) if _chance(draw, 50) else _b(["ZADD", "z", "1", *vs[:1]])
    key = _pick(draw, ["k", "k", "l", "s", "z", "h", "nokey"])
    opts: list[list[str]] = []
    nosort = False
    if key in ("k", "l", "nokey") and _chance(draw, 50):
        opts.append(["BY", _pick(draw, ["w_*", "h_*->f", "nosort", "w_*->f", "h_*->"])])
        nosort = opts[-1][1] == "nosort"
    elif key == "z" and _chance(draw, 30):
        opts.append(["BY", "nosort"])
        nosort = True
    if key in ("k", "l", "nokey") and _chance(draw, 40):
        for _ in range(int(draw(st.integers(1, 2)))):
            opts.append(["GET", _pick(draw, ["#", "w_*", "h_*->f", "nokey_*", "nopattern"])])
    if _chance(draw, 30):
        opts.append(
            ["LIMIT", _pick(draw, ["0", "1", "-1", "5", "x"]), _pick(draw, ["1", "2", "-1", "0"])]
        )
    if _chance(draw, 40):
        opts.append([_pick(draw, ["ASC", "DESC", "desc"])])
    if _chance(draw, 40) and not nosort:
        opts.append(["ALPHA"])
    name = "SORT"
    if _chance(draw, 25):
        opts.append(["STORE", _pick(draw, ["dst", "dst", "k", "s"])])
    elif _chance(draw, 20):
        name = "SORT_RO"
    if _chance(draw, 8):
        opts.append([_pick(draw, ["FOO", "LIMIT", "BY", "GET"])])
    return _b([name, key, *_shuffled(draw, opts)])


@st.composite
def keyspace(draw: Draw) -> Command:
    k = _pick(draw, ANY_KEYS)
    which = int(draw(st.integers(0, 9)))
    if which == 0:
        return _b(["TYPE", k])
    if which == 1:
        return _b(["EXISTS", k, _pick(draw, ANY_KEYS)])
    if which == 2:
        return _b([_pick(draw, ["DEL", "UNLINK"]), k])
    if which == 3:
        opt = [_pick(draw, ["NX", "XX", "GT", "LT"])] if _chance(draw, 30) else []
        return _b(["EXPIRE", k, _pick(draw, ["100", "1000", "0", "-1", "x"]), *opt])
    if which == 4:
        return _b(["TTL", k])
    if which == 5:
        return _b(["PERSIST", k])
    if which == 6:
        return _b(["DBSIZE"])
    if which == 7:
        return _b(["KEYS", _pick(draw, ["*", "s*", "?", "[hk]"])])
    if which == 8:
        return _b([_pick(draw, ["RENAME", "RENAMENX"]), k, _pick(draw, ANY_KEYS)])
    return _b(["EXISTS", k])


@st.composite
def oddities(draw: Draw) -> Command:
    """Unknown commands and subcommands, arity errors, empty tokens."""
    return _b(
        draw(
            st.sampled_from(
                [
                    ["XFOO", "s"],
                    ["XADD", "s"],
                    ["XADD", "s", "1-1"],
                    ["XRANGE", "s", "-"],
                    ["XGROUP"],
                    ["XGROUP", "FOO", "s"],
                    ["XINFO"],
                    ["XINFO", "FOO"],
                    ["XINFO", "STREAM"],
                    ["XREAD"],
                    ["XREADGROUP", "GROUP", "g1"],
                    ["XACK", "s", "g1"],
                    ["XPENDING", "s"],
                    ["XCLAIM", "s", "g1", "c1", "0"],
                    ["XAUTOCLAIM", "s", "g1", "c1", "0"],
                    ["XSETID", "s"],
                    ["XLEN"],
                    ["XDEL", "s"],
                    ["XTRIM", "s"],
                    ["XTRIM", "s", "MAXLEN"],
                    ["GET"],
                    ["SET", "k"],
                    ["foo"],
                    ["foo", "a", "b"],
                    ["TYPE"],
                    ["XGROUP", "CREATE", "s", "g1"],
                    ["XINFO", "CONSUMERS", "s"],
                    ["XINFO", "STREAM", "s", "FULL", "COUNT"],
                    ["XINFO", "STREAM", "s", "BOGUS"],
                    ["xadd", "s", "*"],
                    ["Xadd", "S", "1-1", "f", "v"],
                    ["XREAD", "STREAMS"],
                    ["XREAD", "COUNT", "1"],
                    ["XREADGROUP", "STREAMS", "s", ">"],
                    ["DEL"],
                    ["EXPIRE", "k"],
                    ["HSET", "h", "f"],
                    ["ZADD", "k", "1"],
                    ["LPUSH", "k"],
                ]
            )
        )
    )


@st.composite
def mutated(draw: Draw, base: st.SearchStrategy[Command]) -> Command:
    """A command from ``base``, with one token dropped, replaced, duplicated or inserted."""
    cmd = list(draw(base))
    if len(cmd) < 2:
        return tuple(cmd)
    i = int(draw(st.integers(1, len(cmd) - 1)))
    how = _pick(draw, ["drop", "replace", "dup", "insert", "truncate"])
    junk = _pick(draw, JUNK).encode()
    if how == "drop":
        del cmd[i]
    elif how == "replace":
        cmd[i] = junk
    elif how == "dup":
        cmd.insert(i, cmd[i])
    elif how == "insert":
        cmd.insert(i, junk)
    else:
        del cmd[i:]
    if len(cmd) == 2 and cmd[0].upper() in _CHANCE_WITHOUT_COUNT:
        # Without its count the command picks one member by chance on both sides: not
        # comparable. A count of 0 keeps the mutation's other effects (key, type errors).
        cmd.append(b"0")
    return tuple(cmd)


# Commands whose reply chance decides when the count is left out.
_CHANCE_WITHOUT_COUNT = frozenset({b"HRANDFIELD", b"ZRANDMEMBER", b"SRANDMEMBER", b"SPOP"})


def commands(
    parts: Sequence[st.SearchStrategy[Command]], mutate_percent: int = 12
) -> st.SearchStrategy[Command]:
    """One command from ``parts`` (listed by weight: repeat a strategy to weight it)."""
    base = st.one_of(*parts)

    @st.composite
    def pick(draw: Draw) -> Command:
        if _chance(draw, mutate_percent):
            return draw(mutated(base))
        return draw(base)

    return pick()


@st.composite
def multi_block(draw: Draw, inner: st.SearchStrategy[Command]) -> tuple[Command, ...]:
    """MULTI, 1-4 commands (sometimes a queue-time error or a nested MULTI/WATCH), EXEC or
    DISCARD."""
    body = list(draw(st.lists(inner, min_size=1, max_size=4)))
    if _chance(draw, 12):
        odd = _b(
            draw(st.sampled_from([["foo"], ["XADD", "s"], ["MULTI"], ["WATCH", "s"], ["GET"]]))
        )
        body.insert(int(draw(st.integers(0, len(body)))), odd)
    end = _b([_pick(draw, ["EXEC", "EXEC", "EXEC", "DISCARD"])])
    return (_b(["MULTI"]), *body, end)


@st.composite
def programs(
    draw: Draw,
    parts: Sequence[st.SearchStrategy[Command]],
    *,
    setup: st.SearchStrategy[list[Command]] | None = None,
    multi_parts: Sequence[st.SearchStrategy[Command]] | None = None,
    multi_percent: int = 0,
    watch_percent: int = 0,
    mutate_percent: int = 12,
    max_steps: int = 25,
) -> list[Step]:
    """A program: optional setup commands (plain data), then random steps on either connection."""
    single = commands(parts, mutate_percent)
    in_multi = commands(multi_parts or parts, mutate_percent)
    steps: list[Step] = []
    if setup is not None:
        for cmd in draw(setup):
            steps.append((0, (cmd,)))
    n = int(draw(st.integers(1, max_steps)))
    for _ in range(n):
        conn = int(draw(st.integers(0, 1)))
        roll = int(draw(st.integers(0, 99)))
        if roll >= 100 - multi_percent:
            steps.append((conn, draw(multi_block(in_multi))))
        elif roll >= 100 - multi_percent - watch_percent:
            cmd = _b(
                _pick(
                    draw, ["WATCH s", "WATCH k", "WATCH s t", "UNWATCH", "EXEC", "DISCARD"]
                ).split()
            )
            steps.append((conn, (cmd,)))
        else:
            steps.append((conn, (draw(single),)))
    return steps
