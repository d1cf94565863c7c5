"""Bit operations (SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD, BITFIELD_RO) side by side
with redis-server 7.0.15, in RESP2 and RESP3: the edge cases of Redis's ``unit/bitops.tcl`` and
``unit/bitfield.tcl`` (ranges in BYTE and BIT units, negative and out-of-range indexes, the
zero padding BITPOS assumes without an end, overflow modes at the int64 / u63 limits, ``#``
offsets, the order in which errors win), plus the engine-only promises: the largest offsets
allocate what Redis allocates and no more, and the writes replay from the append-only file."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import last_replies, mismatches
from tests.support.servers import RedisServer

CASES = {
    "setbit-getbit": [
        "SETBIT b 7 1",
        "SETBIT b 7 1",
        "SETBIT b 100 1",
        "GET b",
        "SETBIT b 100 0",
        "STRLEN b",
        "SETBIT b -1 1",
        "SETBIT b 4294967296 1",
        "SETBIT b 4294967295 x",
        "SETBIT b 1 2",
        "SETBIT b 1 -1",
        "SETBIT b x 1",
        "SETBIT b 1 x",
        "SET s foobar",
        "GETBIT s 1",
        "GETBIT s 1000",
        "GETBIT nokey 5",
        "GETBIT s -1",
        "GETBIT s 4294967296",
        "SET num 12345",
        "SETBIT num 0 1",
        "GET num",
        "LPUSH l x",
        "GETBIT l 0",
        "SETBIT l 0 1",
        "SETBIT l -1 1",
        "SET e 1 EX 100",
        "SETBIT e 3 1",
        "TTL e",
    ],
    "bitcount": [
        "SET s foobar",
        "BITCOUNT s",
        "BITCOUNT s 0 0",
        "BITCOUNT s 1 1",
        "BITCOUNT s 1 1 BYTE",
        "BITCOUNT s 5 30 BIT",
        "BITCOUNT s -5 -1 BIT",
        "BITCOUNT s -1 -5",
        "BITCOUNT s -1 -5 FOO",
        "BITCOUNT s 0",
        "BITCOUNT nokey 0",
        "BITCOUNT nokey a b",
        "BITCOUNT s a b",
        "BITCOUNT s 0 1 FOO",
        "BITCOUNT s 0 1 BIT x",
        "BITCOUNT s 0 -100",
        "BITCOUNT s -100 -1",
        "BITCOUNT s 9223372036854775807 -9223372036854775808 BIT",
        "BITCOUNT s -9223372036854775808 9223372036854775807 BIT",
        "BITCOUNT s 3 3 bit",
        'SET z ""',
        "BITCOUNT z",
        "BITCOUNT z 0 -1 BIT",
        "LPUSH l x",
        "BITCOUNT l",
        "BITCOUNT l x y",
    ],
    "bitpos": [
        'SET z ""',
        "BITPOS z 0",
        "BITPOS z 1",
        'SET p "\\xff\\xf0\\x00"',
        "BITPOS p 0",
        "BITPOS p 1",
        "BITPOS p 0 0 -1",
        "BITPOS p 0 1",
        "BITPOS p 1 2",
        "BITPOS p 1 2 -1",
        "BITPOS p 0 2 -1",
        "BITPOS p 0 12 -1 BIT",
        "BITPOS p 1 7 15 BIT",
        "BITPOS p 0 7 11 BIT",
        "BITPOS p 1 13 23 BIT",
        "BITPOS p 0 0 11 BIT",
        "BITPOS p 0 0 -1 BIT",
        "BITPOS p 0 5 BIT",
        "BITPOS p 2",
        "BITPOS p x",
        "BITPOS nokey 1",
        "BITPOS nokey 0",
        "BITPOS nokey 0 x",
        "BITPOS p 1 x",
        "BITPOS p 1 0 x",
        "BITPOS p 1 0 1 FOO",
        "BITPOS p 1 0 1 BIT x",
        "BITPOS p 1 0 1 BIT x y",
        'SET f "\\xff\\xff\\xff"',
        "BITPOS f 0",
        "BITPOS f 0 0",
        "BITPOS f 0 0 -1",
        "BITPOS f 0 1 BIT",
        "BITPOS f 0 0 -1 BIT",
        "BITPOS f 0 3 BIT",
        "BITPOS f 0 -1 -2",
        "BITPOS f 1 -9223372036854775808 9223372036854775807 BIT",
        'SET zz "\\x00\\x00\\x00"',
        "BITPOS zz 1",
        "BITPOS zz 1 0 -1 BIT",
        "BITPOS zz 0 3 -1 BIT",
        "LPUSH l x",
        "BITPOS l 1",
        "BITPOS l 2",
    ],
    "bitop": [
        'SET a "\\x0f\\x0f"',
        'SET c "\\xf0"',
        "BITOP AND d a c",
        "GET d",
        "BITOP OR d a c nokey",
        "GET d",
        "BITOP XOR d a c",
        "GET d",
        "BITOP NOT d a",
        "GET d",
        "BITOP not d a",
        "BITOP NOT d a c",
        "BITOP FOO d a",
        "SET d x EX 100",
        "BITOP AND d nokey nokey2",
        "EXISTS d",
        "SET d x EX 100",
        "BITOP OR d a",
        "TTL d",
        "LPUSH l x",
        "BITOP AND d a l",
        "BITOP AND l a",
        "TYPE l",
        "BITOP NOT a a",
        "GET a",
    ],
    "bitfield": [
        "BITFIELD bf SET u8 0 255 GET u8 0 INCRBY u8 0 1",
        "BITFIELD bf OVERFLOW SAT INCRBY u8 0 300 OVERFLOW FAIL INCRBY u8 0 1 OVERFLOW WRAP "
        "INCRBY u8 0 1",
        "BITFIELD bf SET i8 #1 -128 GET i8 #1 INCRBY i8 #1 -1 GET u4 8 GET i4 8",
        "BITFIELD bf OVERFLOW SAT SET i8 0 -9223372036854775808 GET i8 0",
        "BITFIELD bf OVERFLOW SAT SET i8 0 -9223372036854775700 GET i8 0",
        "BITFIELD bf OVERFLOW SAT SET u8 0 -1 GET u8 0",
        "BITFIELD bf OVERFLOW WRAP SET u8 0 -1 GET u8 0",
        "BITFIELD bf OVERFLOW FAIL SET u8 0 256 GET u8 0",
        "BITFIELD bf SET i64 0 -1 GET i64 0 GET u63 0 INCRBY i64 0 1 OVERFLOW SAT INCRBY i64 0 "
        "9223372036854775807 INCRBY i64 0 1",
        "BITFIELD bf SET i64 0 9223372036854775807 OVERFLOW WRAP INCRBY i64 0 1 OVERFLOW SAT "
        "INCRBY i64 0 -9223372036854775808 INCRBY i64 0 -1",
        "BITFIELD bf SET u63 0 9223372036854775807 OVERFLOW WRAP INCRBY u63 0 1 GET u63 0",
        "BITFIELD bf SET u63 0 -1 INCRBY u63 0 -9223372036854775808",
        "BITFIELD ovf SET i5 100 -16 INCRBY i5 100 -1 OVERFLOW SAT INCRBY i5 100 -1 INCRBY i5 "
        "100 100 INCRBY i5 100 -9223372036854775808",
        "BITFIELD ovf INCRBY u2 3 5 OVERFLOW FAIL INCRBY u2 3 5 INCRBY u2 3 -1",
        "GET ovf",
        "BITFIELD bf GET u64 0",
        "BITFIELD bf GET i65 0",
        "BITFIELD bf GET i0 0",
        "BITFIELD bf GET I8 0",
        "BITFIELD bf GET i08 0",
        "BITFIELD bf GET i8 -1",
        "BITFIELD bf GET i8 #-1",
        "BITFIELD bf GET i8 ##1",
        "BITFIELD bf GET i8 4294967296",
        "BITFIELD bf GET i8 4294967288",
        "BITFIELD bf GET i64 #67108863",
        "BITFIELD bf GET i64 #67108864",
        "BITFIELD bf GET i64 #9223372036854775807",
        "BITFIELD bf GET i8 #1152921504606846975",
        "BITFIELD bf OVERFLOW FOO GET i8 0",
        "BITFIELD bf OVERFLOW",
        "BITFIELD bf GET i8",
        "BITFIELD bf FOO",
        "BITFIELD bf SET i8 0 x",
        "BITFIELD bf SET i8 0",
        "BITFIELD bf INCRBY i8 0 1 GET i8 x",
        "BITFIELD bf",
        "BITFIELD nokey",
        "BITFIELD nokey GET u8 100",
        "EXISTS nokey",
        "LPUSH l x",
        "BITFIELD l GET u8 0",
        "BITFIELD l SET u8 0 1",
        "SET num 12345",
        "BITFIELD num GET u8 0 SET u8 0 50",
        "GET num",
    ],
    "bitfield-ro": [
        "BITFIELD bf SET u8 0 200",
        "BITFIELD_RO bf GET u8 0 GET i16 4",
        "BITFIELD_RO bf SET u8 0 1",
        "BITFIELD_RO bf SET u8 0 x",
        "BITFIELD_RO bf OVERFLOW FAIL INCRBY u8 0 1",
        "BITFIELD_RO bf",
        "BITFIELD_RO nokey GET u8 0",
        "LPUSH l x",
        "BITFIELD_RO l GET u8 0",
        "BITFIELD_RO l SET u8 0 1",
    ],
    "in-multi": [
        "MULTI",
        "SETBIT m 3 1",
        "BITFIELD m INCRBY u4 0 1 GET u8 0",
        "BITCOUNT m",
        "BITPOS m 1",
        "BITOP NOT m2 m",
        "EXEC",
        "GET m2",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bit_commands_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def test_the_largest_setbit_offset_allocates_the_string_redis_allocates() -> None:
    """SETBIT at bit 2^32-1 builds the 512 MB string Redis builds, once (no second copy);
    bit 2^32 is refused at once."""
    engine = Engine()
    client = engine.connect()
    before = _peak_rss_bytes()
    assert engine.execute(client, [b"SETBIT", b"k", b"4294967295", b"1"]) == 0
    assert engine.execute(client, [b"STRLEN", b"k"]) == 512 * 1024 * 1024
    assert engine.execute(client, [b"GETBIT", b"k", b"4294967295"]) == 1
    assert engine.execute(client, [b"BITCOUNT", b"k"]) == 1
    assert engine.execute(client, [b"BITPOS", b"k", b"1"]) == 4294967295
    engine.execute(client, [b"DEL", b"k"])
    assert _peak_rss_bytes() - before < 600 * 1024 * 1024
    reply = engine.execute(client, [b"SETBIT", b"k", b"4294967296", b"1"])
    assert str(reply) == "ERR bit offset is not an integer or out of range"


@pytest.mark.redis
def test_object_encoding_after_setbit_is_raw(redis_server: RedisServer) -> None:
    """SETBIT leaves a raw string, as Redis's in-place write does."""
    script = [
        [b"DEL", b"enc:b"],
        [b"SETBIT", b"enc:b", b"1", b"1"],
        [b"OBJECT", b"ENCODING", b"enc:b"],
    ]
    expected, got = last_replies(redis_server.port, script, [b"enc:b"])
    assert got == expected


def test_bit_writes_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """SETBIT, BITOP and BITFIELD (OVERFLOW FAIL refusals included) come back on replay."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    s("SETBIT", "a", "9", "1")
    s("SETBIT", "a", "9", "1")
    s("BITOP", "NOT", "b", "a")
    s("BITFIELD", "c", "SET", "i8", "#2", "-5", "OVERFLOW", "FAIL", "INCRBY", "u4", "0", "99")
    s("BITFIELD", "c", "OVERFLOW", "SAT", "INCRBY", "i8", "#2", "-1000")
    s("BITOP", "AND", "d", "a", "b", "c")
    before = dump_state(aof.engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
