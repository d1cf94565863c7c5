"""HyperLogLog commands side by side with redis-server 7.0.15 (RESP2 and RESP3): the string
value of a key is byte-identical after the same PFADDs (sparse opcodes, their merges, the
promotion to dense at hll-sparse-max-bytes or at a register above 32, the cached cardinality
in the header), PFCOUNT gives the same numbers for one and several keys, PFMERGE builds the
same bytes, PFDEBUG answers the same, values written by redis-server are accepted, and
invalid or corrupted values get Redis's errors without unbounded work; on the engine alone:
PFSELFTEST and the append-only-file replay."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from streamworker.engine.model import hll
from streamworker.engine.replies import OK
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

_HDR_SPARSE = "HYLL\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x80"
_HDR_SPARSE_CACHED = "HYLL\\x01\\x00\\x00\\x00\\x2a\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
_XZERO_ALL = "\\x7f\\xff"

CASES = {
    "pfadd-pfcount": [
        "PFADD h",
        "GET h",
        "PFADD h",
        "PFADD h a b c",
        "PFADD h a b c",
        "GET h",
        "PFCOUNT h",
        "GET h",
        "PFCOUNT h",
        "PFADD h d",
        "PFCOUNT h nokey",
        "PFCOUNT nokey",
        "PFCOUNT nokey nokey2",
        'PFADD h ""',
        "PFCOUNT h",
        "EXPIRE h 100",
        "PFADD h zz",
        "TTL h",
        "RPUSH l x",
        "PFADD l a",
        "PFCOUNT l",
        "PFCOUNT h l",
        "SET s notanhll",
        "PFADD s a",
        "PFCOUNT s",
        "PFCOUNT h s",
        "SET n 12345678901234567",
        "PFADD n a",
    ],
    "pfmerge": [
        "PFADD a 1 2 3 4 5",
        "PFADD b 4 5 6 7",
        "PFMERGE d a b",
        "GET d",
        "PFCOUNT d",
        "PFMERGE d",
        "GET d",
        "PFMERGE e",
        "GET e",
        "PFMERGE a b nokey",
        "GET a",
        "PFDEBUG TODENSE b",
        "PFMERGE f a b",
        "GET f",
        "PFDEBUG ENCODING f",
        "PFMERGE a b",
        "PFDEBUG ENCODING a",
        "RPUSH l x",
        "PFMERGE d l",
        "PFMERGE l a",
        "SET s x",
        "PFMERGE d s",
        "PFMERGE s a",
    ],
    "pfdebug": [
        "PFADD h a b c d e f g",
        "PFDEBUG ENCODING h",
        "PFDEBUG DECODE h",
        "PFDEBUG decode h",
        "PFDEBUG BOGUS h",
        "PFDEBUG GETREG nokey",
        "PFDEBUG BOGUS nokey",
        "PFDEBUG TODENSE h",
        "PFDEBUG TODENSE h",
        "PFDEBUG DECODE h",
        "PFDEBUG ENCODING h",
        "PFCOUNT h",
        "GET h",
        "PFADD g x y",
        "PFDEBUG GETREG g",
        "PFDEBUG ENCODING g",
        "GET g",
        "PFDEBUG GETREG",
        "PFDEBUG GETREG g extra",
        "SET s x",
        "PFDEBUG ENCODING s",
        "RPUSH l x",
        "PFDEBUG ENCODING l",
    ],
    "written-by-redis-and-corrupted": [
        f'SET v "{_HDR_SPARSE}{_XZERO_ALL}"',
        "PFCOUNT v",
        "PFADD v a",
        "GET v",
        f'SET c "{_HDR_SPARSE_CACHED}{_XZERO_ALL}"',
        "PFCOUNT c",
        f'SET over "{_HDR_SPARSE}{_XZERO_ALL}{_XZERO_ALL}"',
        "PFCOUNT over",
        "PFCOUNT over v",
        "PFADD over a b c",
        "GET over",
        "PFMERGE d over",
        "PFDEBUG TODENSE over",
        "PFDEBUG GETREG over",
        "PFDEBUG DECODE over",
        f'SET short "{_HDR_SPARSE}\\x40\\x00"',
        "PFCOUNT short",
        "PFADD short a",
        "PFADD short x y z w",
        "GET short",
        f'SET trunc "{_HDR_SPARSE}\\x7f"',
        "PFCOUNT trunc",
        "PFADD trunc a",
        f'SET vals "{_HDR_SPARSE}\\xff\\xff\\xff\\xff\\xff\\x7f\\xff"',
        "PFCOUNT vals",
        "PFDEBUG GETREG vals",
        'SET enc2 "HYLL\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x80"',
        "PFADD enc2 a",
        'SET dense "HYLL\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x80abc"',
        "PFCOUNT dense",
        "SET tiny HYLL",
        "PFCOUNT tiny",
        "SET magic HYLX\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x80\\x7f\\xff",
        "PFCOUNT magic",
    ],
    "sparse-max-bytes": [
        "CONFIG SET hll-sparse-max-bytes 30",
        "PFADD h a b c d e f g h i j",
        "PFDEBUG ENCODING h",
        "GET h",
        "PFCOUNT h",
        "CONFIG SET hll-sparse-max-bytes 0",
        "PFADD k a",
        "PFDEBUG ENCODING k",
        "PFMERGE m h",
        "PFDEBUG ENCODING m",
        "CONFIG SET hll-sparse-max-bytes 3000",
        "CONFIG GET hll-sparse-max-bytes",
        "CONFIG SET hll-sparse-max-bytes -1",
        "CONFIG SET hll-sparse-max-bytes 1kb",
        "CONFIG GET hll-sparse-max-bytes",
        "CONFIG SET hll-sparse-max-bytes 3000",
    ],
    "object-encoding": [
        "PFADD fresh a b c",
        "OBJECT ENCODING fresh",
        "SET shared 1",
        "OBJECT ENCODING shared",
        "DEL shared",
        "PFADD src x",
        "PFMERGE merged src",
        "OBJECT ENCODING merged",
        "PFCOUNT src",
        "OBJECT ENCODING src",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_hll_commands_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case (GET of each HLL included) equals redis-server 7.0.15's."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def _element(rng: random.Random) -> str:
    return "".join(
        rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(1, 12))
    )


def _random_script(seed: int, max_bytes: int) -> list[str]:
    rng = random.Random(seed)
    lines = [f"CONFIG SET hll-sparse-max-bytes {max_bytes}"]
    for _ in range(60):
        key = rng.choice(["h1", "h2", "h3"])
        batch = rng.choice([1, 1, 3, 10, 40, 150])
        lines.append(f"PFADD {key} " + " ".join(_element(rng) for _ in range(batch)))
        lines.append(f"GET {key}")
        if rng.random() < 0.3:
            lines.append(f"PFCOUNT {key}")
            lines.append(f"GET {key}")
        if rng.random() < 0.15:
            lines.append("PFCOUNT h1 h2 h3")
        if rng.random() < 0.1:
            dest = rng.choice(["m", "h1"])
            lines.append(f"PFMERGE {dest} h2 h3")
            lines.append(f"GET {dest}")
    lines += ["PFCOUNT h1", "PFCOUNT h2", "PFCOUNT h3", "PFDEBUG ENCODING h1"]
    lines.append("CONFIG SET hll-sparse-max-bytes 3000")
    return lines


@pytest.mark.redis
@pytest.mark.parametrize("max_bytes", [3000, 200])
@pytest.mark.parametrize("seed", range(3))
def test_random_pfadds_leave_byte_identical_values(
    both: tuple[RedisBackend, EngineBackend], seed: int, max_bytes: int
) -> None:
    """After random PFADD batches (through the sparse-to-dense promotion), PFCOUNT and
    PFMERGE, every GET returns redis-server's bytes and every count its number."""
    failures = mismatches(*both, _random_script(seed, max_bytes), 0)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures[:3])


@pytest.mark.redis
def test_dense_values_after_thousands_of_elements_are_byte_identical(
    both: tuple[RedisBackend, EngineBackend],
) -> None:
    real, engine = both
    real.reset()
    engine.reset()
    rng = random.Random(99)
    for _ in range(10):
        argv = [b"PFADD", b"big"] + [b"%d" % rng.getrandbits(40) for _ in range(1000)]
        assert engine.call(0, argv) == real.call(0, argv)
    assert engine.call(0, [b"PFCOUNT", b"big"]) == real.call(0, [b"PFCOUNT", b"big"])
    assert engine.call(0, [b"GET", b"big"]) == real.call(0, [b"GET", b"big"])


@pytest.mark.redis
@pytest.mark.parametrize("seed", range(2))
def test_pfmerge_of_random_sparse_and_dense_values_is_byte_identical(
    both: tuple[RedisBackend, EngineBackend], seed: int
) -> None:
    """PFMERGE into a new or an existing key, sparse or dense sources, several
    hll-sparse-max-bytes: the destination's bytes and the union's count match."""
    real, engine = both
    rng = random.Random(seed)
    for _ in range(40):
        real.reset()
        engine.reset()
        limit = rng.choice([300, 1000, 3000, 12000])
        script = [[b"CONFIG", b"SET", b"hll-sparse-max-bytes", b"%d" % limit]]
        for key in (b"a", b"b", b"c", b"d"):
            n = rng.choice([0, 1, 5, 50, 300, 1500])
            if n:
                script.append([b"PFADD", key, *[b"%d" % rng.getrandbits(30) for _ in range(n)]])
        sources = rng.sample([b"a", b"b", b"c", b"d", b"nokey"], rng.randint(1, 4))
        script += [
            [b"PFMERGE", rng.choice([b"a", b"m"]), *sources],
            [b"GET", b"a"],
            [b"GET", b"m"],
            [b"PFCOUNT", b"m", b"a"],
            [b"CONFIG", b"SET", b"hll-sparse-max-bytes", b"3000"],
        ]
        for argv in script:
            assert engine.call(0, argv) == real.call(0, argv), argv[:3]


@pytest.mark.redis
@pytest.mark.parametrize("size", [5, 300, 5000])
def test_a_value_written_by_redis_server_is_used_as_is(
    both: tuple[RedisBackend, EngineBackend], size: int
) -> None:
    """GET from redis-server, SET into the engine: counts, further PFADDs and merges give
    redis-server's replies and bytes (sparse and dense values)."""
    real, engine = both
    real.reset()
    engine.reset()
    real.call(0, [b"PFADD", b"h", *[b"r%d" % i for i in range(size)]])
    value = real.call(0, [b"GET", b"h"]).split(b"\r\n", 1)[1][:-2]
    engine.call(0, [b"SET", b"h", value])
    script = [
        [b"PFCOUNT", b"h"],
        [b"GET", b"h"],
        [b"PFADD", b"h", *[b"s%d" % i for i in range(50)]],
        [b"GET", b"h"],
        [b"PFADD", b"o", b"x", b"y"],
        [b"PFCOUNT", b"h", b"o"],
        [b"PFMERGE", b"o", b"h"],
        [b"GET", b"o"],
        [b"PFDEBUG", b"ENCODING", b"h"],
    ]
    for argv in script:
        assert engine.call(0, argv) == real.call(0, argv), argv[:2]


@pytest.mark.redis
def test_a_sparse_value_claiming_huge_runs_is_rejected_quickly(
    both: tuple[RedisBackend, EngineBackend],
) -> None:
    """200 KB of XZERO opcodes (3 billion registers claimed): every command errors like
    redis-server's, in time bounded by the length of the value."""
    real, engine = both
    real.reset()
    engine.reset()
    header = b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80"
    value = header + b"\x7f\xff" * 100_000
    script = [
        [b"SET", b"huge", value],
        [b"PFCOUNT", b"huge"],
        [b"PFCOUNT", b"huge", b"other"],
        [b"PFADD", b"huge", b"a", b"b"],
        [b"PFMERGE", b"dst", b"huge"],
        [b"PFDEBUG", b"TODENSE", b"huge"],
        [b"PFDEBUG", b"GETREG", b"huge"],
        [b"EXISTS", b"dst"],
    ]
    started = time.monotonic()
    got = [engine.call(0, argv) for argv in script]
    elapsed = time.monotonic() - started
    assert got == [real.call(0, argv) for argv in script]
    assert elapsed < 10, f"took {elapsed:.1f}s"


def _corrupt(rng: random.Random, value: bytes) -> bytes:
    v = bytearray(value)
    for _ in range(rng.randint(1, 5)):
        pos = rng.randrange(16, len(v))
        roll = rng.random()
        if roll < 0.5:
            v[pos] = rng.randrange(256)
        elif roll < 0.75:
            v.insert(pos, rng.randrange(256))
        else:
            del v[pos]
    if rng.random() < 0.2:
        v[15] = rng.randrange(256)
    return bytes(v)


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.parametrize("seed", range(2))
def test_randomly_corrupted_values_get_the_same_replies(
    both: tuple[RedisBackend, EngineBackend], seed: int
) -> None:
    """Real sparse and dense values with bytes changed, inserted or deleted: PFCOUNT (one
    and several keys), PFADD, PFMERGE, PFDEBUG GETREG and the resulting bytes all match.

    Not covered: a value that ends in half an XZERO opcode is read by Redis with the byte
    in memory after the string, which an earlier in-place update may have left there; the
    engine reads the terminator's 0 (docs/engine.md lists this)."""
    real, engine = both
    rng = random.Random(seed)
    for _ in range(60):
        real.reset()
        engine.reset()
        elements = [b"%d" % rng.getrandbits(32) for _ in range(rng.choice([1, 10, 100, 1000]))]
        setup = [[b"PFADD", b"h", *elements]]
        if rng.random() < 0.3:
            setup.append([b"PFDEBUG", b"TODENSE", b"h"])
        for argv in setup:
            assert engine.call(0, argv) == real.call(0, argv)
        value = engine.call(0, [b"GET", b"h"]).split(b"\r\n", 1)[1][:-2]
        script = [
            [b"SET", b"h", _corrupt(rng, value)],
            [b"PFCOUNT", b"h"],
            [b"PFCOUNT", b"h", b"other"],
            [b"PFADD", b"h", *elements[:20], b"zz", b"yy"],
            [b"GET", b"h"],
            [b"PFMERGE", b"d", b"h"],
            [b"GET", b"d"],
            [b"PFDEBUG", b"GETREG", b"h"],
            [b"PFCOUNT", b"h"],
            [b"GET", b"h"],
        ]
        for argv in script:
            assert engine.call(0, argv) == real.call(0, argv), argv[:2]


@pytest.mark.parametrize(
    ("element", "index", "count"),
    [
        # Read from redis-server 7.0.15: PFADD t <element>, then PFDEBUG DECODE t gives
        # "Z:<index> v:<count>,1 Z:...".
        (b"hello", 9216, 1),
        (b"", 5938, 2),
        (b"a", 12711, 2),
        (b"foobar123", 638, 1),
        (b"the quick brown fox", 15795, 1),
    ],
)
def test_an_element_hashes_to_redis_register_and_run_length(
    element: bytes, index: int, count: int
) -> None:
    assert hll.pattern(element) == (index, count)


def test_pfselftest_checks_the_implementation_and_replies_ok() -> None:
    engine = Engine()
    assert engine.execute(engine.connect(), [b"PFSELFTEST"]) == OK


def test_hll_writes_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """PFADD, PFCOUNT's refreshed cache, PFMERGE and PFDEBUG TODENSE/GETREG come back on
    replay with the same bytes."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    s("PFADD", "a", *[f"x{i}" for i in range(50)])
    s("PFADD", "b", *[f"y{i}" for i in range(3000)])
    s("PFADD", "c", "one", "two")
    s("PFCOUNT", "a")
    s("PFMERGE", "m", "a", "b")
    s("PFCOUNT", "m")
    s("PFDEBUG", "TODENSE", "c")
    s("PFADD", "d", "q")
    s("PFDEBUG", "GETREG", "d")
    before = dump_state(aof.engine)
    assert s("PFDEBUG", "ENCODING", "c").text == "dense"
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
