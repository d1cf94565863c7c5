"""DUMP and RESTORE side by side with redis-server 7.0.15: byte-identical payloads for every
type and encoding at the threshold edges, RESTORE of each other's payloads (streams with
groups included), Redis's old encodings, and the error replies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamworker.engine.aof import open_persistent
from streamworker.engine.crc64 import crc64_bytes
from streamworker.engine.rdb.primitives import save_len, save_string
from tests.engine.aof_support import Session, dump_state
from tests.engine.conftest import Differ, cmds, run_script

pytestmark = pytest.mark.redis


def payload(kind: int, body: bytes, version: int = 10) -> bytes:
    """A DUMP payload around an object body, with a correct CRC-64."""
    data = bytes((kind,)) + body + version.to_bytes(2, "little")
    return data + crc64_bytes(data)


def both(differ: Differ, script: str) -> None:
    for cmd in cmds(script):
        differ.both(*cmd)


def check_dumps(differ: Differ, *keys: str) -> None:
    for key in keys:
        differ.check("DUMP", key)


# --- byte-identical DUMP ---------------------------------------------------------------------

STRING_EDGES = [
    "0",
    "-1",
    "127",
    "128",
    "-128",
    "-129",
    "32767",
    "32768",
    "-32768",
    "-32769",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "12345678901",
    "9223372036854775807",
    "007",
    "1.5",
    "",
    "a" * 20,
    "a" * 21,
    "ab" * 11,
    "abcdefghijklmnopqrstuvwxyz",
    "hello world " * 40,
    "x" * 300,
    "abcabd" * 4 + "q",
]


def test_dump_of_strings_matches_redis_at_every_integer_and_lzf_edge(differ: Differ) -> None:
    import random

    rnd = random.Random(7)
    values = [v.encode() for v in STRING_EDGES]
    for n in (21, 24, 25, 40, 100, 1000, 9000):
        for alphabet in (b"ab", b"abcdefgh", bytes(range(256))):
            values.append(bytes(rnd.choice(alphabet) for _ in range(n)))
    for i, v in enumerate(values):
        differ.both("SET", f"s{i}", v)
        differ.check("DUMP", f"s{i}")


@pytest.mark.parametrize("fill", ["-2", "-1", "-5", "4", "1", "0"])
def test_dump_of_a_list_matches_redis_at_the_node_size_limits(differ: Differ, fill: str) -> None:
    import random

    rnd = random.Random(int(fill) + 11)
    differ.both("CONFIG", "SET", "list-max-listpack-size", fill)
    for size in (1, 5, 13, 63, 64, 253, 254, 300, 4000, 9000):
        items = []
        for _ in range(max(3, 6000 // (size + 4))):
            if rnd.random() < 0.3:
                items.append(str(rnd.randint(-(10**15), 10**15)).encode())
            else:
                items.append(bytes(rnd.choice(b"abcdefghij") for _ in range(size)))
        differ.both("RPUSH", f"l{size}", *items)
        differ.check("DUMP", f"l{size}")
    differ.both("CONFIG", "SET", "list-max-listpack-size", "-2")


def test_dump_of_an_intset_matches_redis_at_each_integer_width(differ: Differ) -> None:
    both(
        differ,
        """
        SADD i16 1 -5 32767 -32768 0
        SADD i32 1 32768 -2147483648 2147483647
        SADD i64 1 2147483648 -9223372036854775808 9223372036854775807
        SADD one 7
        """,
    )
    check_dumps(differ, "i16", "i32", "i64", "one")


def test_a_set_past_the_intset_limits_round_trips_through_redis(differ: Differ) -> None:
    """A hashtable set's order is redis-server's hash seed: compare contents, not bytes."""
    differ.both("CONFIG", "SET", "set-max-intset-entries", "4")
    both(differ, "SADD four 1 2 3 4\nSADD five 1 2 3 4 5\nSADD word 1 a")
    differ.check("DUMP", "four")
    for key in ("five", "word"):
        mine = differ.fake.call("DUMP", key)
        theirs = differ.real.call("DUMP", key)
        assert len(mine) == len(theirs)
        differ.real.call("RESTORE", key + "-from-engine", "0", _bulk(mine))
        differ.fake.call("RESTORE", key + "-from-redis", "0", _bulk(theirs))
        members = differ.check("SORT", key, "ALPHA")
        assert differ.real.call("SORT", key + "-from-engine", "ALPHA") == members
        assert differ.fake.call("SORT", key + "-from-redis", "ALPHA") == members
    differ.both("CONFIG", "SET", "set-max-intset-entries", "512")


def _bulk(reply: bytes) -> bytes:
    head, _, rest = reply.partition(b"\r\n")
    assert head.startswith(b"$")
    return rest[: int(head[1:])]


def test_dump_of_a_listpack_hash_matches_redis_at_the_entries_and_value_limits(
    differ: Differ,
) -> None:
    differ.both("CONFIG", "SET", "hash-max-listpack-entries", "4")
    differ.both("CONFIG", "SET", "hash-max-listpack-value", "20")
    both(
        differ,
        """
        HSET h4 a 1 b -4096 c 4095 d 12345678901234
        HSET long a 01234567890123456789
        HSET ints 1 2 -3 4
        HSET upd a 1 b 2 c 3
        HSET upd a xyz
        HDEL upd b
        """,
    )
    check_dumps(differ, "h4", "long", "ints", "upd")
    differ.both("HSET", "h5", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5")
    differ.both("HSET", "big", "a", "012345678901234567890")
    for key in ("h5", "big"):
        differ.real.call("RESTORE", key + "-e", "0", _bulk(differ.fake.call("DUMP", key)))
        differ.fake.call("RESTORE", key + "-r", "0", _bulk(differ.real.call("DUMP", key)))
        values = differ.check("HMGET", key, "a", "b", "c", "d", "e")
        assert differ.real.call("HMGET", key + "-e", "a", "b", "c", "d", "e") == values
        assert differ.fake.call("HMGET", key + "-r", "a", "b", "c", "d", "e") == values
    differ.both("CONFIG", "SET", "hash-max-listpack-entries", "512")
    differ.both("CONFIG", "SET", "hash-max-listpack-value", "64")


def test_dump_of_a_zset_matches_redis_in_both_encodings(differ: Differ) -> None:
    scores = [
        "0",
        "-0",
        "1",
        "-1",
        "1.5",
        "0.1",
        "1e20",
        "-1e-20",
        "4503599627370495",
        "4503599627370496",
        "-4503599627370495",
        "-4503599627370496",
        "123456789.123",
        "inf",
        "-inf",
        "3.0000000000000004",
    ]
    args: list[str] = []
    for i, sc in enumerate(scores):
        args += [sc, f"m{i}"]
    differ.both("ZADD", "small", *args)
    differ.both("ZADD", "longmember", "1", "x" * 65, "2", "y")
    differ.both("ZADD", "many", *[x for i in range(129) for x in (str(i * 0.5), f"m{i}")])
    differ.both("ZADD", "edge", *[x for i in range(128) for x in (str(i), "n" * 61 + f"{i:03d}")])
    check_dumps(differ, "small", "longmember", "many", "edge")


def test_dump_of_a_zset_that_shrank_back_is_still_a_skiplist_as_in_redis(differ: Differ) -> None:
    differ.both("ZADD", "z", *[x for i in range(130) for x in (str(i), f"m{i}")])
    differ.both("ZREMRANGEBYRANK", "z", "2", "-1")
    differ.both("ZADD", "z", "-0", "neg")  # a skiplist keeps the sign of a zero
    check_dumps(differ, "z")


def test_dump_of_a_hash_and_a_set_that_shrank_back_keep_their_big_type_as_in_redis(
    differ: Differ,
) -> None:
    # Hashtable order is Redis's per-process seed: compare the RDB type byte, then the
    # contents through a RESTORE on each side.
    differ.both("HSET", "h", *[x for i in range(600) for x in (f"f{i}", "v")])
    differ.both("HDEL", "h", *[f"f{i}" for i in range(2, 600)])
    differ.both("SADD", "s", *[str(i) for i in range(600)])
    differ.both("SREM", "s", *[str(i) for i in range(2, 600)])
    for key, big_type in (("h", 4), ("s", 2)):
        # Raw RESP replies: "$<len>\r\n" then the payload, whose first byte is the type.
        real = differ.real.call("DUMP", key).split(b"\r\n", 1)[1]
        fake = differ.fake.call("DUMP", key).split(b"\r\n", 1)[1]
        assert real[0] == fake[0] == big_type, (key, real[:1], fake[:1])
    differ.check("OBJECT", "ENCODING", "h")
    differ.check("OBJECT", "ENCODING", "s")


def test_dump_of_a_stream_without_groups_matches_redis(differ: Differ) -> None:
    differ.both("CONFIG", "SET", "stream-node-max-entries", "4")
    both(
        differ,
        """
        XADD s 1-1 f v
        XADD s 1-2 f 12
        XADD s 5-0 f -700 g w
        XADD s 5-1 other 1
        XADD s 9-9 f v
        XADD s 10-1 f 9223372036854775807
        XADD s 18446744073709551615-0 f v
        XDEL s 5-0
        XDEL s 9-9
        XADD t 1-1 a 1 b 2
        XADD t 2-1 a 3 b 4
        XTRIM t MAXLEN 1
        XADD u 3-3 k v
        XDEL u 3-3
        """,
    )
    check_dumps(differ, "s", "t", "u")
    differ.both("CONFIG", "SET", "stream-node-max-entries", "100")


# --- RESTORE across --------------------------------------------------------------------------

_STREAM_WITH_GROUPS = """
    XADD st 1-1 f v
    XADD st 2-1 f v g w
    XADD st 3-1 f 3
    XADD st 4-1 f 4
    XDEL st 3-1
    XGROUP CREATE st g1 0
    XGROUP CREATE st g2 $
    XGROUP CREATE st g3 1-1 ENTRIESREAD 1
    XREADGROUP GROUP g1 alice COUNT 2 STREAMS st >
    XREADGROUP GROUP g1 bob STREAMS st >
    XGROUP CREATECONSUMER st g2 carol
    XCLAIM st g1 carol 0 1-1
    XACK st g1 4-1
"""


def _stream_view(differ: Differ, side: str, key: str) -> bytes:
    call = differ.real.call if side == "redis" else differ.fake.call
    full = call("XINFO", "STREAM", key, "FULL")
    # radix-tree-nodes is the rax's internal node count (the engine estimates it).
    return re.sub(rb"radix-tree-nodes\r\n:\d+", b"radix-tree-nodes\r\n:_", full)


def test_redis_restores_engine_payloads_of_every_type(differ: Differ) -> None:
    script = (
        """
        SET s hello
        SET n 123
        SET big """
        + "abc" * 30
        + """
        RPUSH l a b 3 c
        SADD si 1 2 3
        SADD ss a b c
        HSET h f v g 1
        ZADD z 1 a 2.5 b
        """
        + _STREAM_WITH_GROUPS
    )
    differ.fake.call("CONFIG", "SET", "stream-node-max-entries", "2")
    for cmd in cmds(script):
        differ.fake.call(*cmd)
    for key in ("s", "n", "big", "l", "si", "ss", "h", "z", "st"):
        reply = differ.real.call("RESTORE", key, "0", _bulk(differ.fake.call("DUMP", key)))
        assert reply == b"+OK\r\n", (key, reply)
    for cmd in (
        ("GET", "s"),
        ("GET", "n"),
        ("GET", "big"),
        ("LRANGE", "l", "0", "-1"),
        ("SORT", "si"),
        ("SORT", "ss", "ALPHA"),
        ("HMGET", "h", "f", "g"),
        ("ZRANGE", "z", "0", "-1", "WITHSCORES"),
        ("XRANGE", "st", "-", "+"),
        ("XINFO", "GROUPS", "st"),
    ):
        differ.check(*cmd)
    assert _stream_view(differ, "redis", "st") == _stream_view(differ, "engine", "st")


def test_engine_restores_redis_payloads_of_every_type(differ: Differ) -> None:
    script = (
        """
        SET s hello
        SET big """
        + "xyz" * 40
        + """
        RPUSH l a b 3 c
        SADD si 1 2 3
        SADD ss a b c
        HSET h f v g 1
        ZADD z 1 a 2.5 b
        ZADD zbig """
        + " ".join(f"{i} m{i}" for i in range(200))
        + "\n"
        + _STREAM_WITH_GROUPS
    )
    differ.real.call("CONFIG", "SET", "stream-node-max-entries", "2")
    for cmd in cmds(script):
        differ.real.call(*cmd)
    differ.real.call("CONFIG", "SET", "stream-node-max-entries", "100")
    for key in ("s", "big", "l", "si", "ss", "h", "z", "zbig", "st"):
        reply = differ.fake.call("RESTORE", key, "0", _bulk(differ.real.call("DUMP", key)))
        assert reply == b"+OK\r\n", (key, reply)
    for cmd in (
        ("GET", "s"),
        ("GET", "big"),
        ("LRANGE", "l", "0", "-1"),
        ("SORT", "si"),
        ("SORT", "ss", "ALPHA"),
        ("HMGET", "h", "f", "g"),
        ("ZRANGE", "z", "0", "-1", "WITHSCORES"),
        ("ZRANGE", "zbig", "0", "-1", "WITHSCORES"),
        ("XRANGE", "st", "-", "+"),
        ("XINFO", "GROUPS", "st"),
    ):
        differ.check(*cmd)
    assert _stream_view(differ, "redis", "st") == _stream_view(differ, "engine", "st")
    # And the restored stream dumps back to redis-server's bytes.
    differ.check("DUMP", "st")


def _ziplist(items: list[bytes | int]) -> bytes:
    entries = []
    prev = 0
    for it in items:
        if isinstance(it, int):
            enc = (
                bytes((0xF1 + it,))
                if 0 <= it <= 12
                else b"\xfe" + (it & 0xFF).to_bytes(1, "little")
            )
        else:
            enc = bytes((len(it),)) + it
        entry = bytes((prev,)) + enc
        entries.append(entry)
        prev = len(entry)
    body = b"".join(entries)
    total = 10 + len(body) + 1
    tail = 10 + len(body) - prev if entries else 10
    return (
        total.to_bytes(4, "little")
        + tail.to_bytes(4, "little")
        + len(items).to_bytes(2, "little")
        + body
        + b"\xff"
    )


def _zipmap(pairs: list[tuple[bytes, bytes]]) -> bytes:
    out = bytes((len(pairs),))
    for f, v in pairs:
        out += bytes((len(f),)) + f + bytes((len(v),)) + b"\x00" + v
    return out + b"\xff"


def test_restore_accepts_the_old_encodings_as_redis_does(differ: Differ) -> None:
    old = {
        "zl": payload(10, save_string(_ziplist([b"a", 3, b"bc", -7]), False)),
        "ql": payload(14, save_len(2) + save_string(_ziplist([b"x", 1]), False) * 2),
        "hz": payload(13, save_string(_ziplist([b"f", b"v", b"g", 5]), False)),
        "zz": payload(12, save_string(_ziplist([b"m", 2, b"n", b"2.5"]), False)),
        "zm": payload(9, save_string(_zipmap([(b"f", b"v"), (b"k", b"12")]), False)),
        "list": payload(1, save_len(2) + save_string(b"a") + save_string(b"b")),
        "set": payload(2, save_len(2) + save_string(b"a") + save_string(b"7")),
        "zset": payload(
            3, save_len(2) + save_string(b"a") + b"\x031.5" + save_string(b"b") + b"\xfe"
        ),
        "hash": payload(4, save_len(1) + save_string(b"f") + save_string(b"v")),
        "v9": payload(0, save_string(b"old"), version=9),
    }
    for key, blob in old.items():
        differ.check("RESTORE", key, "0", blob)
    for cmd in (
        ("LRANGE", "zl", "0", "-1"),
        ("LRANGE", "ql", "0", "-1"),
        ("HGETALL", "hz"),
        ("ZRANGE", "zz", "0", "-1", "WITHSCORES"),
        ("HGETALL", "zm"),
        ("LRANGE", "list", "0", "-1"),
        ("SORT", "set", "ALPHA"),
        ("ZRANGE", "zset", "0", "-1", "WITHSCORES"),
        ("HGETALL", "hash"),
        ("GET", "v9"),
    ):
        differ.check(*cmd)


# --- errors and options ------------------------------------------------------------------------


def test_restore_errors_match_redis(differ: Differ) -> None:
    good = payload(0, save_string(b"v"))
    bad_crc = good[:-1] + bytes((good[-1] ^ 1,))
    newer = payload(0, save_string(b"v"), version=11)
    garbage = payload(0, b"\x80\x00\x00\x10\x00xx")
    wrong_type = payload(8, save_string(b"v"))
    module = payload(7, save_string(b"v"))
    newer_type = payload(21, save_len(0))
    empty_list = payload(18, save_len(0))
    differ.both("SET", "k", "1")
    for args in (
        ("RESTORE", "k", "0", good),
        ("RESTORE", "new", "-1", good),
        ("RESTORE", "new", "x", good),
        ("RESTORE", "new", "0", bad_crc),
        ("RESTORE", "new", "0", b"short"),
        ("RESTORE", "new", "0", newer),
        ("RESTORE", "new", "0", garbage),
        ("RESTORE", "new", "0", wrong_type),
        ("RESTORE", "new", "0", module),
        ("RESTORE", "new", "0", newer_type),
        ("RESTORE", "new", "0", empty_list),
        ("RESTORE", "new", "0", good, "IDLETIME", "-1"),
        ("RESTORE", "new", "0", good, "FREQ", "256"),
        ("RESTORE", "new", "0", good, "FREQ", "1", "IDLETIME", "1"),
        ("RESTORE", "new", "0", good, "BOGUS"),
        ("RESTORE", "k", "0", bad_crc, "REPLACE"),
        ("EXISTS", "new"),
        ("GET", "k"),
        ("RESTORE", "k", "0", good, "REPLACE", "IDLETIME", "5"),
        ("GET", "k"),
    ):
        differ.check(*args)


def test_restore_of_a_payload_claiming_2_60_elements_fails_without_allocating(
    differ: Differ,
) -> None:
    huge = save_len(1 << 60)
    for kind in (1, 2, 3, 4, 5, 14, 18):
        differ.check("RESTORE", f"k{kind}", "0", payload(kind, huge + save_string(b"a")))
    differ.check("RESTORE", "lzf", "0", payload(0, b"\xc3" + save_len(2) + huge + b"\x01a"))
    differ.check("RESTORE", "str", "0", payload(0, huge + b"a"))


def test_restore_ttl_replace_and_absttl_behave_as_redis(differ: Differ) -> None:
    good = payload(0, save_string(b"v"))
    far = "4102444800000"  # 2100-01-01
    for args in (
        ("RESTORE", "a", far, good, "ABSTTL"),
        ("PEXPIRETIME", "a"),
        ("RESTORE", "b", "100000", good),
        ("TTL", "b"),
        ("RESTORE", "c", "1", good, "ABSTTL"),
        ("EXISTS", "c"),
        ("SET", "d", "old"),
        ("RESTORE", "d", "1", good, "ABSTTL", "REPLACE"),
        ("EXISTS", "d"),
        ("RESTORE", "e", "9223372036854775807", good),
        ("EXISTS", "e"),
        ("RESTORE", "f", "0", good, "FREQ", "255"),
        ("GET", "f"),
    ):
        differ.check(*args)


@pytest.mark.parametrize("resp", [2, 3])
def test_dump_of_a_missing_key_is_nil_as_in_redis(differ: Differ, resp: int) -> None:
    run_script(differ, cmds("DUMP nothing\nSET k v\nDUMP k"), resp)


def test_restore_survives_an_aof_reload(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    s("RPUSH", "l", "a", "b")
    s("XADD", "st", "1-1", "f", "v")
    s("XGROUP", "CREATE", "st", "g", "0")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">")
    for key in ("l", "st"):
        s("RESTORE", key + "2", "100000", s("DUMP", key))
    s("RESTORE", "l", "0", s("DUMP", "st"), "REPLACE")
    before = dump_state(aof.engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()


_INT_EDGES = (0, 1, -1, 127, 128, -4096, 4095, 4096, 32767, 32768, 2**31, -(2**31) - 1)
_INT_EDGES += (2**63 - 1, -(2**63))


@pytest.mark.parametrize(
    ("seed", "writes"), [(1, 100), pytest.param(2, 400, marks=pytest.mark.slow)]
)
def test_dump_matches_redis_after_random_writes_of_every_type(
    differ: Differ, seed: int, writes: int
) -> None:
    """Random RPUSH/RPOP, HSET/HDEL/HINCRBY, ZADD/ZREM/ZINCRBY, SADD/SREM, SET/APPEND/INCR and
    XADD/XDEL/XTRIM (explicit IDs) with values at the encoding edges; after every few writes
    each key's DUMP must be redis-server's bytes, except hashtable sets and hashes (Redis's
    hash-seed order). LSET/LINSERT/LPOP are left out: they give redis-server node layouts that
    depend on the list's history, which the engine does not keep."""
    import random

    rnd = random.Random(seed)

    def val() -> str:
        c = rnd.random()
        if c < 0.3:
            return str(rnd.choice([*_INT_EDGES, rnd.randint(-(10**6), 10**6)]))
        if c < 0.4:
            return rnd.choice(["", "007", "-0", "1.5", " 1", "+1"])
        n = rnd.choice([1, 5, 20, 63, 64, 65, 200, 4095, 4096, 5000])
        return "".join(rnd.choice("ab") for _ in range(n))

    for it in range(writes):
        kind = rnd.choice(["l", "h", "z", "s", "x", "str"])
        choices: list[list[str]]
        if kind == "l":
            choices = [["RPUSH", "l", val(), val()], ["RPUSH", "l", *[val() for _ in range(20)]]]
            choices.append(["RPOP", "l"])
        elif kind == "h":
            choices = [["HSET", "h", val()[:30], val()], ["HDEL", "h", val()[:30]]]
            choices.append(["HINCRBY", "h", "n", "5"])
        elif kind == "z":
            score = str(rnd.choice([0, 1.5, -2, 1e300, 0.1, rnd.random()]))
            choices = [["ZADD", "z", score, val()[:70]], ["ZREM", "z", val()]]
            choices.append(["ZINCRBY", "z", "0.3", "m"])
        elif kind == "s":
            choices = [["SADD", "s", str(rnd.randint(-(2**40), 2**40))], ["SREM", "s", "1"]]
        elif kind == "str":
            choices = [["SET", "str", val()], ["APPEND", "str", val()], ["INCR", "str"]]
        else:
            sid = f"{it + 1}-{rnd.randint(0, 3)}"
            choices = [["XADD", "x", sid, "f", val()], ["XADD", "x", sid, val()[:10], val()]]
            choices += [["XDEL", "x", "0-1"], ["XTRIM", "x", "MAXLEN", str(rnd.randint(0, 50))]]
            choices.append(["XTRIM", "x", "MAXLEN", "~", "10"])
        differ.both(*rnd.choice(choices))
        if rnd.random() < 0.2:
            for key in ("l", "h", "z", "s", "str", "x"):
                if b"hashtable" in differ.real.call("OBJECT", "ENCODING", key):
                    continue
                differ.check("DUMP", key)


def test_a_restored_stream_goes_on_exactly_as_on_redis(differ: Differ) -> None:
    """The nodes a payload rebuilds behave as Redis's: later appends fill and split nodes at
    the same places, reads skip the same tombstones, groups continue their counters."""
    differ.real.call("CONFIG", "SET", "stream-node-max-entries", "3")
    for cmd in cmds(_STREAM_WITH_GROUPS):
        differ.real.call(*cmd)
    blob = _bulk(differ.real.call("DUMP", "st"))
    differ.real.call("DEL", "st")
    differ.check("RESTORE", "st", "0", blob)
    differ.both("CONFIG", "SET", "stream-node-max-entries", "3")
    run_script(
        differ,
        cmds(
            """
            XADD st 5-1 f v
            XADD st 6-1 f v h 1
            XADD st 7-1 f 70
            XREADGROUP GROUP g1 dave STREAMS st >
            XREADGROUP GROUP g3 erin COUNT 2 STREAMS st >
            XACK st g1 1-1 2-1
            XPENDING st g1 - + 10 alice
            XINFO GROUPS st
            XDEL st 5-1
            XTRIM st MAXLEN ~ 2
            XRANGE st - +
            XREVRANGE st + - COUNT 2
            XGROUP DELCONSUMER st g1 bob
            XINFO GROUPS st
            """
        ),
        2,
    )
    # Deliveries made here carry each server's clock: mask millisecond timestamps.
    views = [
        re.sub(rb":\d{13}\r\n", b":_\r\n", _stream_view(differ, side, "st"))
        for side in ("redis", "engine")
    ]
    assert views[0] == views[1]
    differ.both("CONFIG", "SET", "stream-node-max-entries", "100")


def test_engine_restores_a_redis_list_with_compressed_nodes(differ: Differ) -> None:
    """With list-compress-depth, redis-server writes inner quicklist nodes as its own LZF
    blobs; the engine reads them (its own lists are never compressed in memory)."""
    differ.real.call("CONFIG", "SET", "list-compress-depth", "1")
    try:
        items = [f"item{i}" * 5 for i in range(3000)]
        differ.real.call("RPUSH", "l", *items)
        blob = _bulk(differ.real.call("DUMP", "l"))
    finally:
        differ.real.call("CONFIG", "SET", "list-compress-depth", "0")
    assert differ.fake.call("RESTORE", "l", "0", blob) == b"+OK\r\n"
    differ.check("LRANGE", "l", "0", "-1")


def test_dump_without_rdbcompression_matches_redis(differ: Differ) -> None:
    differ.both("CONFIG", "SET", "rdbcompression", "no")
    try:
        differ.both("SET", "s", "abc" * 30)
        differ.both("RPUSH", "l", *["abc" * 10] * 20)
        check_dumps(differ, "s", "l")
        differ.check("CONFIG", "SET", "rdbchecksum", "no")
    finally:
        differ.both("CONFIG", "SET", "rdbcompression", "yes")


def test_dump_and_restore_inside_multi_and_scripts_behave_as_redis(differ: Differ) -> None:
    good = payload(0, save_string(b"v"))
    for args in (
        ("MULTI",),
        ("RESTORE", "m", "0", good),
        ("DUMP", "m"),
        ("RESTORE", "m", "0", good),
        ("EXEC",),
        ("EVAL", "return redis.call('RESTORE', KEYS[1], 0, ARGV[1])", "1", "e", good),
        ("EVAL", "return redis.pcall('RESTORE', KEYS[1], 0, ARGV[1])", "1", "e", good),
        ("EVAL", "return redis.call('DUMP', KEYS[1])", "1", "e"),
        ("GET", "e"),
    ):
        differ.check(*args)
