"""Geo commands side by side with redis-server 7.0.15 (RESP2 and RESP3): scores, GEOPOS
digits, GEOHASH strings, distances with 4 decimals in every unit, radius and box searches over
random points (poles, the antimeridian, the Mercator latitude limits) with every option, and
Redis's error texts and their order. Search replies are compared byte for byte including their
order, ties included: without ASC/DESC both servers return members cell by cell in score
order, with them the engine sorts as glibc's qsort (stable) or, under COUNT, as Redis's partial
quicksort does. On the engine alone: the writes survive an append-only-file reload."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from streamworker.engine.aof import open_persistent
from streamworker.engine.model import geohash
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

_TIES = [
    "GEOADD g " + " ".join(f"1 1 t{i:02d}" for i in range(30)),
    "GEOADD g " + " ".join(f"1.001 1.001 u{i:02d}" for i in range(12)),
    "GEOADD g " + " ".join(f"0.999 1.0005 v{i:02d}" for i in range(50)),
]

CASES = {
    "equal-distances": [
        *_TIES,
        "GEORADIUS g 1 1 10 km",
        "GEORADIUS g 1 1 10 km ASC",
        "GEORADIUS g 1 1 10 km DESC",
        "GEORADIUS g 1 1 10 km COUNT 5",
        "GEORADIUS g 1 1 10 km COUNT 35 DESC",
        "GEORADIUS g 1.0005 1.0005 10 km COUNT 3",
        "GEORADIUS g 1.0005 1.0005 10 km COUNT 41 DESC WITHDIST",
        "GEOSEARCH g FROMMEMBER u03 BYBOX 50 50 km COUNT 60 ASC",
        "GEOSEARCH g FROMMEMBER v07 BYRADIUS 50 km COUNT 7 DESC",
        "GEOSEARCH g FROMMEMBER v07 BYRADIUS 50 km COUNT 7 ANY DESC",
        "GEOSEARCHSTORE dst g FROMMEMBER t00 BYRADIUS 50 km COUNT 13 STOREDIST",
        "ZRANGE dst 0 -1 WITHSCORES",
    ],
    "geoadd": [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOADD g NX 13.361389 38.115556 Palermo 1 1 new",
        "GEOADD g XX CH 1 1 Palermo 2 2 nope",
        "GEOADD g CH XX 1 1 Palermo",
        "GEOADD g NX XX 1 1 a",
        "GEOADD g 1 1",
        "GEOADD g ch ch ch",
        "GEOADD g GT 1 1 a",
        "GEOADD g 181 1 a",
        "GEOADD g -180.5 -85.06 a",
        "GEOADD g 1 85.05112879 a",
        "GEOADD g 180 85.05112878 top -180 -85.05112878 bottom",
        "GEOADD g inf 1 a",
        "GEOADD g nan 1 a",
        "GEOADD g x 1 a",
        "GEOADD g 1 y a",
        "GEOADD g 1 1 a 2 2",
        "GEOADD g 1 1 a 999 2 b",
        "ZRANGE g 0 -1 WITHSCORES",
        "SET s x",
        "GEOADD s 1 1 a",
    ],
    "geopos-geohash-geodist": [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOADD g 180 85.05112878 top -180 -85.05112878 bottom 0 0 zero",
        "GEOPOS g Palermo Catania nope top bottom zero",
        "GEOPOS g",
        "GEOPOS nokey a b",
        "GEOHASH g Palermo Catania nope top bottom zero",
        "GEOHASH g",
        "GEOHASH nokey a",
        "GEODIST g Palermo Catania",
        "GEODIST g Palermo Catania km",
        "GEODIST g Palermo Catania MI",
        "GEODIST g Palermo Catania ft",
        "GEODIST g Palermo Catania m",
        "GEODIST g Palermo Catania yards",
        "GEODIST g Palermo Catania km extra",
        "GEODIST g Palermo nope",
        "GEODIST nokey a b",
        "GEODIST nokey a b furlongs",
        "GEODIST g top bottom",
        "GEODIST g Palermo Palermo",
        "ZADD z -1 a 1e300 b -1e300 c 1e19 d 0 e 4503599627370496 f",
        "GEOPOS z a b c d e f",
        "GEOHASH z a b c d e f",
        "GEODIST z a c",
        "SET s x",
        "GEOPOS s a",
        "GEOHASH s a",
        "GEODIST s a b",
    ],
    "georadius": [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOADD g 13.583333 37.316667 Agrigento 12.758489 38.788135 edge1 17.241510 38.788135 e2",
        "GEORADIUS g 15 37 200 km",
        "GEORADIUS g 15 37 200 km ASC",
        "GEORADIUS g 15 37 200 km DESC",
        "GEORADIUS g 15 37 200 km WITHDIST WITHCOORD WITHHASH",
        "GEORADIUS g 15 37 200 km withhash withcoord",
        "GEORADIUS g 15 37 200 km COUNT 1",
        "GEORADIUS g 15 37 200 km COUNT 2 DESC",
        "GEORADIUS g 15 37 200 km COUNT 2 ANY",
        "GEORADIUS g 15 37 200 km ANY",
        "GEORADIUS g 15 37 200 km COUNT 0",
        "GEORADIUS g 15 37 200 km COUNT -3",
        "GEORADIUS g 15 37 200 km COUNT x",
        "GEORADIUS g 15 37 200 km COUNT",
        "GEORADIUS g 15 37 200 km STORE",
        "GEORADIUS g 15 37 200 km BOGUS",
        "GEORADIUS g 15 37 -1 km",
        "GEORADIUS g 15 37 x km",
        "GEORADIUS g 15 37 1 parsec",
        "GEORADIUS g 200 37 1 km",
        "GEORADIUS g x 37 1 km",
        "GEORADIUS g 15 37 0 km",
        "GEORADIUS g 15 37 20000 km",
        "GEORADIUS g 15 37 200 km STORE dst",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEORADIUS g 15 37 200 km STOREDIST dst COUNT 2",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEORADIUS g 15 37 200 km STORE dst WITHDIST",
        "GEORADIUS g 0 0 1 m STORE dst",
        "EXISTS dst",
        "GEORADIUS nokey 15 37 200 km STORE dst",
        "GEORADIUS nokey 15 37 200 km",
        "GEORADIUS nokey 200 37 200 km",
        "GEORADIUS_RO g 15 37 200 km WITHDIST",
        "GEORADIUS_RO g 15 37 200 km STORE dst",
        "GEORADIUS_RO g 15 37 200 km STOREDIST dst",
        "SET s x",
        "GEORADIUS s 200 37 200 km",
    ],
    "georadiusbymember": [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOADD g 13.583333 37.316667 Agrigento",
        "GEORADIUSBYMEMBER g Agrigento 100 km",
        "GEORADIUSBYMEMBER g Agrigento 100 km WITHDIST DESC",
        "GEORADIUSBYMEMBER g Agrigento 100000 m WITHCOORD COUNT 1",
        "GEORADIUSBYMEMBER g nope 100 km",
        "GEORADIUSBYMEMBER g Agrigento -1 km",
        "GEORADIUSBYMEMBER g Agrigento 1 lightyear",
        "GEORADIUSBYMEMBER nokey nope x y",
        "GEORADIUSBYMEMBER nokey nope x y STORE dst",
        "GEORADIUSBYMEMBER nokey nope x y BOGUS",
        "GEORADIUSBYMEMBER g Agrigento 200 km STORE dst",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEORADIUSBYMEMBER g Agrigento 200 km STOREDIST dst",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEORADIUSBYMEMBER_RO g Agrigento 200 km WITHHASH",
        "GEORADIUSBYMEMBER_RO g Agrigento 200 km STORE dst",
    ],
    # Search areas at their limits: near the poles the neighbour cells are wide, diagonal
    # neighbours matter, a radius can cross the pole, a box can be long and narrow.
    "area-edges": [
        "GEOADD k1 -0.15307903289794921875 85 n1 0.3515625 85.00019260486917005437 n2",
        "GEORADIUSBYMEMBER k1 n1 4891.94 m",
        "GEOADD k2 -4.95211958885192871094 85 n3 11.25 85.0511 n4",
        "GEORADIUSBYMEMBER k2 n3 156544 m WITHDIST",
        "GEOADD k3 -45 65.50900022111811438208 n5 90 85.0511 n6",
        "GEORADIUSBYMEMBER k3 n5 5009431 m WITHCOORD",
        "GEOADD k4 45 65 n1 -135 85.05 n2",
        "GEORADIUSBYMEMBER k4 n1 5009431 m",
        "GEOADD users -47.271613776683807 -54.534504198047678 user_000000",
        "GEORADIUS users 0 0 50000 km WITHCOORD",
        "GEORADIUS users 0 0 50000000 km WITHHASH",
        "GEOADD s 12.75 36.995 t1 12.75 36.50 t2 13.00 36.50 t3 -1 37.00 t4",
        "GEOSEARCH s FROMLONLAT 15 37 BYBOX 400 2 km",
        "GEOSEARCH s FROMLONLAT 15 37 BYBOX 3000 2 km ASC WITHDIST",
        "GEOADD c 12.758489 38.788135 e1 17.241510 38.788135 e2 17.25 35.202 e3 12.75 35.202 e4",
        "GEOADD c 12.748489955781654 37 e5 15 38.798135872540925 e6 17.251510044218346 37 e7",
        "GEOADD c 15 35.201864127459075 e8 12.692799634687903 38.798135872540925 c1",
        "GEOADD c 17.200560937451133 35.201864127459075 c3 12.799439062548865 35.201864127459075 c4",
        "GEOSEARCH c FROMLONLAT 15 37 BYBOX 400 400 km ASC WITHDIST",
        "GEOSEARCH c FROMLONLAT 15 37 BYBOX 400 400 km",
        "GEOADD w 179.9 0 east -179.9 0 west 180 10 e180 -180 10 w180",
        "GEOSEARCH w FROMLONLAT 180 0 BYBOX 100 3000 km WITHCOORD",
        "GEOSEARCH w FROMLONLAT -180 0 BYRADIUS 2000 km DESC WITHDIST",
        "GEORADIUSBYMEMBER w east 50 km WITHDIST",
        "GEOHASH w east west e180 w180",
        "GEOADD p -5.6 42.6 wiki 0 85.05112878 north 0 -85.05112878 south",
        "GEOHASH p wiki north south",
        "GEORADIUS p 0 85.05112878 1 km WITHCOORD",
        "GEORADIUS p 90 85 500 km WITHCOORD WITHDIST",
        "GEODIST p north south km",
    ],
    "from-scripts": [
        "GEOADD g 13.361389 38.115556 Palermo 0.0000001 0.0000002 tiny",
        "EVAL \"return redis.call('GEOPOS', KEYS[1], 'Palermo', 'tiny', 'nope')\" 1 g",
        "EVAL \"redis.setresp(3); return redis.call('GEOPOS', KEYS[1], 'Palermo', 'tiny')\" 1 g",
        "EVAL \"redis.setresp(3); local p = redis.call('GEOPOS', KEYS[1], 'tiny'); "
        "return tostring(p[1][1]['double'])\" 1 g",
        "EVAL \"return redis.call('GEOSEARCH', KEYS[1], 'FROMLONLAT', 13, 38, 'BYRADIUS', 200, "
        "'km', 'WITHCOORD', 'WITHDIST', 'WITHHASH')\" 1 g",
        "EVAL \"return redis.call('GEODIST', KEYS[1], 'Palermo', 'tiny', 'km')\" 1 g",
        "EVAL_RO \"return redis.call('GEORADIUS', KEYS[1], 13, 38, 1, 'km')\" 1 g",
        "EVAL_RO \"return redis.call('GEORADIUS_RO', KEYS[1], 13, 38, 100, 'km')\" 1 g",
        "EVAL \"redis.call('PFADD', KEYS[2], 'a', 'b'); return redis.call('PFCOUNT', KEYS[2])\" "
        "2 g h",
        "EVAL_RO \"return redis.call('PFCOUNT', KEYS[1])\" 1 h",
        "EVAL_RO \"return redis.call('PFADD', KEYS[1], 'c')\" 1 h",
        "GET h",
    ],
    "command-getkeys": [
        "COMMAND GETKEYS GEORADIUS g 1 1 1 km STORE d",
        "COMMAND GETKEYS GEORADIUS g 1 1 1 km STOREDIST d2 STORE d",
        "COMMAND GETKEYS GEORADIUS g 1 1 1 km store STORE x",
        "COMMAND GETKEYS GEORADIUS g 1 1 1 km WITHDIST STORE",
        "COMMAND GETKEYS GEORADIUS g 1 1 1 km",
        "COMMAND GETKEYS GEORADIUSBYMEMBER g m 1 km STORE store d",
        "COMMAND GETKEYS GEORADIUSBYMEMBER g m 1 km STOREDIST d",
        "COMMAND GETKEYS GEORADIUS_RO g 1 1 1 km STORE d",
        "COMMAND GETKEYS GEOSEARCHSTORE d g FROMMEMBER m BYRADIUS 1 km",
        "COMMAND GETKEYS GEOSEARCH g FROMMEMBER m BYRADIUS 1 km",
        "COMMAND GETKEYS GEOADD g 1 1 m",
        "COMMAND GETKEYS PFMERGE d a b",
        "COMMAND GETKEYS PFCOUNT a b",
        "COMMAND GETKEYS PFDEBUG GETREG h",
        "COMMAND GETKEYS PFSELFTEST",
    ],
    "geosearch": [
        "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOADD g 12.758489 38.788135 edge1 17.241510 38.788135 edge2",
        "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 200 km ASC",
        "GEOSEARCH g FROMLONLAT 15 37 BYBOX 400 400 km ASC WITHCOORD WITHDIST WITHHASH",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX 500 300 km DESC WITHDIST",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 50 mi",
        "GEOSEARCH g FROMMEMBER Palermo FROMMEMBER Catania BYRADIUS 50 mi",
        "GEOSEARCH g FROMMEMBER Palermo FROMLONLAT 1 1 BYRADIUS 50 mi",
        "GEOSEARCH g FROMLONLAT 1 1 FROMMEMBER Palermo BYRADIUS 50 mi",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 50 mi BYBOX 1 1 km",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX 1 1 km BYRADIUS 50 mi",
        "GEOSEARCH g BYRADIUS 50 mi ASC",
        "GEOSEARCH g FROMMEMBER Palermo ASC COUNT 1",
        "geosearch g FROMMEMBER Palermo ASC COUNT 1",
        "GEOSEARCH g FROMMEMBER nope BYRADIUS 50 mi",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX -1 1 km",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX x 1 km",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX 1 y km",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX 1 1 acre",
        "GEOSEARCH g FROMMEMBER Palermo BYBOX 1 1",
        "GEOSEARCH g FROMLONLAT 1 BYRADIUS 1 km",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 500 km COUNT 2 ANY",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 500 km ANY",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 500 km STORE dst",
        "GEOSEARCH g FROMMEMBER Palermo BYRADIUS 500 km STOREDIST",
        "GEOSEARCH nokey FROMMEMBER Palermo BYRADIUS 500 km",
        "GEOSEARCH nokey FROMMEMBER Palermo",
        "GEOSEARCH nokey FROMLONLAT 500 1 BYRADIUS 1 km",
        "GEOSEARCHSTORE dst g FROMMEMBER Palermo BYRADIUS 500 km",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEOSEARCHSTORE dst g FROMMEMBER Palermo BYRADIUS 500 km STOREDIST COUNT 2 DESC",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEOSEARCHSTORE dst g FROMMEMBER Palermo BYRADIUS 500 km WITHDIST",
        "GEOSEARCHSTORE dst g FROMMEMBER Palermo BYRADIUS 500 km STORE x",
        "geosearchstore dst g BYRADIUS 500 km",
        "GEOSEARCHSTORE dst g FROMLONLAT 0 0 BYBOX 1 1 m",
        "EXISTS dst",
        "GEOSEARCHSTORE dst nokey FROMLONLAT 0 0 BYBOX 1 1 m",
        "SET s x",
        "GEOSEARCH s FROMMEMBER Palermo BYRADIUS 1 km",
        "GEOSEARCHSTORE dst s FROMMEMBER Palermo BYRADIUS 1 km",
        "GEOSEARCHSTORE s g FROMMEMBER Palermo BYRADIUS 500 km",
        "TYPE s",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_geo_commands_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def _coord(rng: random.Random, lo: float, hi: float, edges: tuple[float, ...]) -> float:
    # Mostly uniform, sometimes exactly at or just inside a limit of the supported area.
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(edges)
    if roll < 0.3:
        edge = rng.choice(edges)
        return edge - rng.uniform(0, 2) if edge > 0 else edge + rng.uniform(0, 2)
    return rng.uniform(lo, hi)


# Radii (km) and centres where Redis's search areas once missed members (from the regression
# list of Redis's geo tests).
_PAST_BUG_CENTRES = [
    (7083, 81.634948934258375, 30.561509253718668),
    (5416, -70.863281847379767, -46.347003465679947),
    (6064, -89.818768962202014, -40.463868561416803),
    (156, 149.29737817929004, 15.95807862745508),
    (143, 59.235461856813856, 66.269555127373678),
    (154, -90.187939661642517, 66.615930412251487),
    (149, 84.062063109158544, -65.685403922426232),
    (16751, -1.8175081637769495, 20.665668878082954),
]
_LON_EDGES = (-180.0, 180.0, -179.999999, 179.999999)
_LAT_EDGES = (-85.05112878, 85.05112878, -85.0, 85.0, 0.0)
_UNITS = ("m", "km", "mi", "ft", "KM")


def _random_script(seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    names: list[str] = []
    placed: list[tuple[float, float]] = []
    # A cluster to make searches dense, plus points spread over the globe and its edges.
    clon, clat = rng.uniform(-180, 180), rng.uniform(-80, 80)
    for i in range(60):
        if i % 3 == 0:
            lon = min(180.0, max(-180.0, clon + rng.uniform(-3, 3)))
            lat = min(85.0, max(-85.0, clat + rng.uniform(-3, 3)))
        else:
            lon = _coord(rng, -180, 180, _LON_EDGES)
            lat = _coord(rng, -85.05112878, 85.05112878, _LAT_EDGES)
        if names and rng.random() < 0.1:
            # Another member at an existing position: equal distances from any centre.
            lon, lat = placed[rng.randrange(len(placed))]
        placed.append((lon, lat))
        name = f"p{i}"
        names.append(name)
        lines.append(f"GEOADD g {lon!r} {lat!r} {name}")
    lines.append("GEOPOS g " + " ".join(names))
    lines.append("GEOHASH g " + " ".join(names))
    for _ in range(15):
        a, b = rng.sample(names, 2)
        lines.append(f"GEODIST g {a} {b} {rng.choice(_UNITS)}")
    for km, lon, lat in _PAST_BUG_CENTRES:
        lines.append(f"GEORADIUS g {lon} {lat} {km} km ASC WITHDIST")
    for _ in range(40):
        unit = rng.choice(_UNITS)
        scale = {"m": 1.0, "km": 1000.0, "mi": 1609.34, "ft": 0.3048, "KM": 1000.0}[unit]
        radius_m = 10 ** rng.uniform(2, 7.2)
        size = f"{radius_m / scale!r}"
        if rng.random() < 0.5:
            lon, lat = clon + rng.uniform(-2, 2), clat + rng.uniform(-2, 2)
        else:
            lon = _coord(rng, -180, 180, _LON_EDGES)
            lat = _coord(rng, -85.05112878, 85.05112878, _LAT_EDGES)
        lon = min(180.0, max(-180.0, lon))
        lat = min(85.05112878, max(-85.05112878, lat))
        opts = []
        for word in ("WITHDIST", "WITHCOORD", "WITHHASH"):
            if rng.random() < 0.4:
                opts.append(word)
        if rng.random() < 0.5:
            opts.append(rng.choice(["ASC", "DESC"]))
        if rng.random() < 0.3:
            opts.append(f"COUNT {rng.randint(1, 8)}")
            if rng.random() < 0.3:
                opts.append("ANY")
        tail = " ".join(opts)
        kind = rng.randrange(4)
        if kind == 0:
            lines.append(f"GEORADIUS g {lon!r} {lat!r} {size} {unit} {tail}")
        elif kind == 1:
            lines.append(f"GEORADIUSBYMEMBER g {rng.choice(names)} {size} {unit} {tail}")
        elif kind == 2:
            lines.append(f"GEOSEARCH g FROMLONLAT {lon!r} {lat!r} BYRADIUS {size} {unit} {tail}")
        else:
            w = radius_m * rng.uniform(0.5, 3) / scale
            h = radius_m * rng.uniform(0.5, 3) / scale
            center = (
                f"FROMMEMBER {rng.choice(names)}"
                if rng.random() < 0.5
                else f"FROMLONLAT {lon!r} {lat!r}"
            )
            lines.append(f"GEOSEARCH g {center} BYBOX {w!r} {h!r} {unit} {tail}")
    for _ in range(5):
        member = rng.choice(names)
        lines.append(f"GEOSEARCHSTORE dst g FROMMEMBER {member} BYRADIUS 3000 km STOREDIST")
        lines.append("ZRANGE dst 0 -1 WITHSCORES")
        lines.append(f"GEORADIUSBYMEMBER g {member} 1500 km STORE dst2 COUNT 5")
        lines.append("ZRANGE dst2 0 -1 WITHSCORES")
    return lines


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("seed", range(6))
def test_random_points_and_searches_match_redis(
    both: tuple[RedisBackend, EngineBackend], seed: int, conn: int
) -> None:
    """Scores, positions, hashes, distances and search results over random points (with
    poles, antimeridian and latitude limits) equal redis-server's, in the same order."""
    failures = mismatches(*both, _random_script(seed), conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures[:5])


def test_geoadd_scores_are_52_bit_geohashes_interleaving_latitude_and_longitude() -> None:
    assert geohash.score_of(-180.0, -85.05112878) == 0
    assert geohash.score_of(180.0, 85.05112878) >> 52 == 3  # both offsets reach 2**26
    assert geohash.score_of(0.0, 0.0) == 0b11 << 50


def test_geo_writes_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """GEOADD, GEORADIUS ... STORE/STOREDIST and GEOSEARCHSTORE come back on replay."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    s("GEOADD", "g", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania")
    s("GEOADD", "g", "CH", "XX", "13.4", "38.1", "Palermo")
    s("GEORADIUS", "g", "15", "37", "200", "km", "STORE", "r1")
    s("GEORADIUSBYMEMBER", "g", "Palermo", "300", "km", "STOREDIST", "r2")
    s("GEOSEARCHSTORE", "r3", "g", "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km")
    s("GEOSEARCHSTORE", "r4", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "m")
    before = dump_state(aof.engine)
    assert set(before) == {(0, b"g"), (0, b"r1"), (0, b"r2"), (0, b"r3")}
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
