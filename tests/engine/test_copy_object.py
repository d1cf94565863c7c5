"""COPY and OBJECT, side by side with redis-server 7.0 (byte-identical replies)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamworker.engine.aof import open_persistent
from tests.engine.aof_support import Session, dump_state
from tests.engine.conftest import Differ, cmds, run_script

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("resp", [2, 3])
def test_copy_duplicates_every_type_with_its_ttl(differ: Differ, resp: int) -> None:
    run_script(
        differ,
        cmds(
            """
            SET s hello
            SET n 12345
            RPUSH l a b c
            SADD set 3 1 2
            HSET h f v g w
            ZADD z 1 a 2 b
            XADD st 1-1 f v
            XGROUP CREATE st g 0
            XREADGROUP GROUP g c STREAMS st >
            PEXPIRE s 100000
            COPY s s2
            COPY n n2
            COPY l l2
            COPY set set2
            COPY h h2
            COPY z z2
            COPY st st2
            GET s2
            GET n2
            LRANGE l2 0 -1
            SMEMBERS set2
            HGETALL h2
            ZRANGE z2 0 -1 WITHSCORES
            XRANGE st2 - +
            XPENDING st2 g
            XINFO GROUPS st2
            TYPE st2
            EXISTS s2
            PERSIST s2
            RPUSH l2 d
            LRANGE l a -1
            LRANGE l 0 -1
            XADD st2 2-1 f v
            XLEN st
            XACK st2 g 1-1
            XPENDING st g
            HSET h2 f changed
            HGET h f
            ZADD z2 5 a
            ZSCORE z a
            """
        ),
        resp,
    )


def test_copy_refuses_an_existing_destination_unless_replace(differ: Differ) -> None:
    run_script(
        differ,
        cmds(
            """
            SET a 1
            SET b 2
            COPY a b
            GET b
            COPY a b REPLACE
            GET b
            COPY missing b
            COPY missing b REPLACE
            GET b
            COPY a a
            COPY a a REPLACE
            COPY a a DB 0
            COPY a a DB 1
            COPY a b replace REPLACE
            """
        ),
        2,
    )


def test_copy_to_another_database(differ: Differ) -> None:
    run_script(
        differ,
        cmds(
            """
            SET a 1
            EXPIRE a 1000
            COPY a a DB 1
            COPY a a DB 1
            SELECT 1
            GET a
            TTL a
            COPY a a DB 0 REPLACE
            SELECT 0
            COPY a b DB 15
            COPY a b DB 16
            COPY a b DB -1
            COPY a b DB 2147483648
            COPY a b DB 9223372036854775808
            COPY a b DB x
            COPY a b DB
            COPY a b REPLACE DB
            COPY a b NOSUCH
            COPY a
            FLUSHALL
            """
        ),
        2,
    )


def test_copy_is_replayed_from_the_append_only_file(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    s("XADD", "st", "1-1", "f", "v")
    s("XGROUP", "CREATE", "st", "g", "0")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">")
    s("SET", "a", "1", "EX", "1000")
    s("COPY", "st", "st2", "DB", "3")
    s("COPY", "a", "a", "DB", "1")
    s("COPY", "a", "st", "REPLACE")
    before = dump_state(aof.engine)
    directory = aof.dir
    aof.close()
    replayed = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(replayed.engine) == before
    finally:
        replayed.close()


_ENCODING_DEFAULTS = (
    ("hash-max-listpack-entries", "512"),
    ("hash-max-listpack-value", "64"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("set-max-intset-entries", "512"),
    ("maxmemory-policy", "noeviction"),
)


@pytest.fixture
def od(differ: Differ) -> Iterator[Differ]:
    """A Differ whose encoding parameters are put back to redis-server's defaults after."""
    yield differ
    for name, value in _ENCODING_DEFAULTS:
        differ.both("CONFIG", "SET", name, value)


def _fill(differ: Differ, command: str, key: str, items: list[str]) -> None:
    for start in range(0, len(items), 200):
        differ.check(command, key, *items[start : start + 200])


def _encodings(od: Differ, keys: list[str]) -> None:
    for key in keys:
        od.check("OBJECT", "ENCODING", key)


def test_object_encoding_of_strings_lists_and_streams(od: Differ) -> None:
    values = {
        "i": "12345",
        "neg": "-9223372036854775808",
        "big": "9223372036854775808",
        "lead": "01",
        "plus": "+1",
        "minus0": "-0",
        "e44": "x" * 44,
        "e45": "x" * 45,
        "empty": "",
        "i44": "1" * 20,
    }
    for key, value in values.items():
        od.check("SET", key, value)
    od.check("INCR", "counter")
    od.check("INCRBYFLOAT", "f", "1.5")
    od.check("RPUSH", "l", "a")
    od.check("XADD", "s", "1-1", "f", "v")
    _encodings(od, [*values, "counter", "f", "l", "s", "missing"])


def test_object_encoding_of_sets_hashes_and_zsets_at_their_thresholds(od: Differ) -> None:
    _fill(od, "SADD", "ints", [str(i) for i in range(512)])
    _fill(od, "SADD", "ints513", [str(i) for i in range(513)])
    od.check("SADD", "mixed", "1", "a")
    od.check("SADD", "neg", "-9223372036854775808", "9223372036854775807")
    od.check("SADD", "wide", "9223372036854775808")
    _fill(od, "HSET", "h512", [x for i in range(512) for x in (f"f{i}", "v")])
    _fill(od, "HSET", "h513", [x for i in range(513) for x in (f"f{i}", "v")])
    od.check("HSET", "hv64", "f", "v" * 64)
    od.check("HSET", "hv65", "f", "v" * 65)
    od.check("HSET", "hf65", "f" * 65, "v")
    _fill(od, "ZADD", "z128", [x for i in range(128) for x in (str(i), f"m{i}")])
    _fill(od, "ZADD", "z129", [x for i in range(129) for x in (str(i), f"m{i}")])
    od.check("ZADD", "zm64", "1", "m" * 64)
    od.check("ZADD", "zm65", "1", "m" * 65)
    keys = "ints ints513 mixed neg wide h512 h513 hv64 hv65 hf65 z128 z129 zm64 zm65"
    _encodings(od, keys.split())


def test_encoding_thresholds_follow_config_set_under_both_names(od: Differ) -> None:
    for name, value in (
        ("hash-max-ziplist-entries", "2"),
        ("hash-max-ziplist-value", "3"),
        ("zset-max-ziplist-entries", "1"),
        ("zset-max-ziplist-value", "2"),
        ("set-max-intset-entries", "2"),
    ):
        od.check("CONFIG", "SET", name, value)
    for pattern in ("hash-max-*", "zset-max-*", "set-max-intset-entries", "list-max-*"):
        real, fake = od.both("CONFIG", "GET", pattern)
        assert sorted(fake.split(b"\r\n")) == sorted(real.split(b"\r\n")), pattern
    od.check("HSET", "h2", "a", "1", "b", "2")
    od.check("HSET", "h3", "a", "1", "b", "2", "c", "3")
    od.check("HSET", "hv", "abcd", "1")
    od.check("ZADD", "z1", "1", "ab")
    od.check("ZADD", "z2", "1", "a", "2", "b")
    od.check("ZADD", "zv", "1", "abc")
    od.check("SADD", "s2", "1", "2")
    od.check("SADD", "s3", "1", "2", "3")
    _encodings(od, ["h2", "h3", "hv", "z1", "z2", "zv", "s2", "s3"])
    od.check("CONFIG", "SET", "hash-max-listpack-entries", "-1")
    od.check("CONFIG", "SET", "zset-max-ziplist-value", "1k")
    od.check("CONFIG", "GET", "zset-max-listpack-value")


def test_object_refcount_idletime_freq_and_help(od: Differ) -> None:
    for key, value in (("shared", "100"), ("edge", "9999"), ("notshared", "10000"), ("t", "x")):
        od.check("SET", key, value)
    od.check("RPUSH", "l", "a")
    for key in ("shared", "edge", "notshared", "t", "l", "missing"):
        od.check("OBJECT", "REFCOUNT", key)
    for key in ("notshared", "t", "l", "missing"):
        od.check("OBJECT", "IDLETIME", key)
    od.check("OBJECT", "FREQ", "t")
    od.check("OBJECT", "FREQ", "missing")
    od.check("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    od.check("SET", "fresh", "v")
    od.check("OBJECT", "FREQ", "fresh")
    od.check("OBJECT", "IDLETIME", "fresh")
    od.check("OBJECT", "IDLETIME", "missing")
    od.check("CONFIG", "SET", "maxmemory-policy", "noeviction")
    for cmd in (
        ("OBJECT", "HELP"),
        ("OBJECT", "help"),
        ("OBJECT",),
        ("OBJECT", "ENCODING"),
        ("OBJECT", "ENCODING", "t", "x"),
        ("OBJECT", "NOSUCH", "t"),
        ("OBJECT", "HELP", "x"),
    ):
        od.check(*cmd)
