"""Edge cases met by running the command sequences of Redis's own Tcl units (``unit/type/*.tcl``,
``unit/expire.tcl``, ``unit/keyspace.tcl``, ...) against redis-server 7.0.15 and the engine's
RESP server side by side, where the two differed. Each case is one behaviour; every reply of
its script must equal redis-server's byte for byte on a RESP2 and a RESP3 connection.

Most of them are about encoding history: Redis converts a value to its big encoding once
(a listpack sorted set to a skiplist, ...) and never back, and a skiplist keeps a -0 score
that a listpack stores as 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.differential.backends import RedisBackend
from tests.engine.differential.scripts import mismatches
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

# The encoding parameters the scripts change, back to redis-server 7.0.15's built-in defaults.
ENCODING_DEFAULTS = [
    b"CONFIG",
    b"SET",
    b"hash-max-listpack-entries",
    b"512",
    b"hash-max-listpack-value",
    b"64",
    b"set-max-intset-entries",
    b"512",
    b"zset-max-listpack-entries",
    b"128",
    b"zset-max-listpack-value",
    b"64",
    b"list-compress-depth",
    b"0",
]

LONG = "m" * 80  # longer than zset-max-listpack-value / hash-max-listpack-value (64)

STRING_CASES = {
    "append-makes-an-int-string-raw": [
        "SET foo 1",
        "APPEND foo 2",
        "OBJECT ENCODING foo",
        "SET bar 12",
        "OBJECT ENCODING bar",
        "SET e abc",
        'APPEND e ""',
        "OBJECT ENCODING e",
        "APPEND n 123",
        "OBJECT ENCODING n",
    ],
    "setrange-makes-a-string-raw-unless-it-writes-nothing": [
        "SET mykey 1234",
        'SETRANGE mykey 0 ""',
        "OBJECT ENCODING mykey",
        "SETRANGE mykey 0 2",
        "OBJECT ENCODING mykey",
        "SET mykey foo",
        "SETRANGE mykey 5 2",
        "OBJECT ENCODING mykey",
        "SETRANGE new 0 12",
        "OBJECT ENCODING new",
    ],
    "bit-writes-make-a-string-raw": [
        "SET b 1",
        "SETBIT b 0 0",
        "OBJECT ENCODING b",
        "SETBIT nb 3 1",
        "OBJECT ENCODING nb",
        "SET bf 1",
        "BITFIELD bf GET u8 0",
        "OBJECT ENCODING bf",
        "BITFIELD bf SET u8 0 49",
        "OBJECT ENCODING bf",
        "SET x 1",
        "SET y 2",
        "BITOP AND d x y",
        "OBJECT ENCODING d",
    ],
    "a-raw-string-moves-with-its-key-and-a-new-value-resets-it": [
        "SET foo 1",
        "APPEND foo 2",
        "RENAME foo foo2",
        "OBJECT ENCODING foo2",
        "COPY foo2 foo3",
        "OBJECT ENCODING foo3",
        "MOVE foo3 1",
        "SWAPDB 0 1",
        "OBJECT ENCODING foo3",
        "SWAPDB 0 1",
        "GETEX foo2 PX 100000",
        "OBJECT ENCODING foo2",
        "INCR foo2",
        "OBJECT ENCODING foo2",
        "APPEND foo2 1",
        "GETSET foo2 7",
        "OBJECT ENCODING foo2",
        "APPEND foo2 1",
        "DEL foo2",
        "SET foo2 1",
        "OBJECT ENCODING foo2",
        "SELECT 1",
        "FLUSHDB",
        "SELECT 0",
    ],
}

HASH_CASES = {
    "a-hashtable-stays-after-shrinking": [
        "CONFIG SET hash-max-listpack-entries 2",
        "HSET h a 1 b 2 c 3",
        "HDEL h c",
        "OBJECT ENCODING h",
        "HMSET h6 a 1 b 2 c 3",
        "HDEL h6 a b",
        "OBJECT ENCODING h6",
        "HSCAN h6 0",
        "CONFIG SET hash-max-listpack-entries 128",
        "HSET h z 1",
        "OBJECT ENCODING h",
        "RENAME h hh",
        "OBJECT ENCODING hh",
        "COPY hh hc",
        "OBJECT ENCODING hc",
        "DEL hh",
        "HSET hh a 1",
        "OBJECT ENCODING hh",
    ],
    "a-long-field-or-value-converts-for-good": [
        f"HSET h2 a {LONG}",
        "HSET h2 a 1",
        "OBJECT ENCODING h2",
        "HSET h3 a 1",
        f"HSETNX h3 a {LONG}",
        "OBJECT ENCODING h3",
        "HSET h4 a 1",
        f"HINCRBY h4 {LONG} 1",
        f"HDEL h4 {LONG}",
        "OBJECT ENCODING h4",
        "HSET h5 a 1",
        f"HINCRBYFLOAT h5 {LONG} 1",
        f"HDEL h5 {LONG}",
        "OBJECT ENCODING h5",
    ],
}

SET_CASES = {
    "a-hashtable-stays-after-removing-the-non-integer": [
        "SADD s 1 2 a",
        "SREM s a",
        "OBJECT ENCODING s",
        "SADD s 3",
        "OBJECT ENCODING s",
        "SADD k 9223372036854775808",
        "SREM k 9223372036854775808",
        "SADD k 1",
        "OBJECT ENCODING k",
    ],
    "a-hashtable-stays-after-shrinking-below-the-intset-limit": [
        "CONFIG SET set-max-intset-entries 2",
        "SADD t 1 2 3",
        "SREM t 3",
        "OBJECT ENCODING t",
        "SADD u 1",
        "SADD u 2",
        "SADD u 3",
        "SREM u 3",
        "OBJECT ENCODING u",
    ],
    "smove-and-stores-convert-the-destination-for-good": [
        "SADD a{t} 1 2",
        "SADD b{t} x",
        "SMOVE b{t} a{t} x",
        "SREM a{t} x",
        "OBJECT ENCODING a{t}",
        "SADD c{t} 1 2 z",
        "SINTERSTORE d{t} c{t} c{t}",
        "SREM d{t} z",
        "OBJECT ENCODING d{t}",
        "SUNIONSTORE e{t} c{t}",
        "SREM e{t} z",
        "OBJECT ENCODING e{t}",
        "SDIFFSTORE f{t} c{t} a{t}",
        "OBJECT ENCODING f{t}",
        "SADD g{t} 1 x",
        "SMOVE g{t} h{t} x",
        "SADD h{t} 1",
        "SREM h{t} x",
        "OBJECT ENCODING h{t}",
        "SSCAN h{t} 0",
    ],
}

LIST_CASES = {
    # list.tcl runs its tests once per list-compress-depth (2, 1, 0).
    "list-compress-depth-is-a-parameter": [
        "CONFIG GET list-compress-depth",
        "CONFIG SET list-compress-depth 2",
        "CONFIG GET list-compress*",
        "CONFIG SET list-compress-depth -1",
        "CONFIG SET list-compress-depth 2147483648",
        "CONFIG SET list-compress-depth x",
        "RPUSH l a b c d e",
        "LRANGE l 1 -2",
    ],
}

ZSET_CASES = {
    "negative-zero-kept-by-a-skiplist": [
        "CONFIG SET zset-max-listpack-entries 0",
        "ZADD z -0 a 0 b",
        "OBJECT ENCODING z",
        "ZSCORE z a",
        "ZMSCORE z a b",
        "ZRANGE z 0 -1 WITHSCORES",
        "ZRANGEBYSCORE z -0 0 WITHSCORES",
        "ZPOPMIN z",
    ],
    "negative-zero-stored-as-zero-by-a-listpack": [
        "ZADD z -0 a",
        "ZSCORE z a",
        "ZINCRBY z -0 b",
        "ZRANGE z 0 -1 WITHSCORES",
    ],
    "a-member-that-outgrows-the-listpack-keeps-its-negative-zero": [
        "CONFIG SET zset-max-listpack-entries 2",
        "ZADD z -0 a -0 b -0 c",
        "ZRANGE z 0 -1 WITHSCORES",
        "ZADD z -0 d 5 e",
        "ZADD z -0 e",
        "ZRANGE z 0 -1 WITHSCORES",
    ],
    "a-long-first-member-creates-a-skiplist": [
        f"ZADD z -0 {LONG}",
        "OBJECT ENCODING z",
        "ZADD z -0 x",
        "ZINCRBY z -0 y",
        "ZADD z INCR -0 q",
        "ZRANGE z 0 -1 WITHSCORES",
    ],
    "skiplist-stays-after-shrinking": [
        "CONFIG SET zset-max-listpack-entries 2",
        "ZADD z 1 a 2 b 3 c",
        "OBJECT ENCODING z",
        "ZREM z c",
        "OBJECT ENCODING z",
        f"ZADD y 1 {LONG} 2 b",
        f"ZREM y {LONG}",
        "OBJECT ENCODING y",
        "COPY z z2",
        "OBJECT ENCODING z2",
        "RENAME z z3",
        "OBJECT ENCODING z3",
        "MOVE z3 1",
        "SELECT 1",
        "OBJECT ENCODING z3",
        "FLUSHDB",
        "SELECT 0",
    ],
    "stored-results-take-their-encoding-from-their-size": [
        "CONFIG SET zset-max-listpack-entries 3",
        f"ZADD z -0 {LONG} -0 b -0 c 1 d 2 e",
        "ZRANGESTORE d1 z 1 2",
        "OBJECT ENCODING d1",
        "ZRANGE d1 0 -1 WITHSCORES",
        "ZRANGESTORE d2 z -0 0 BYSCORE",
        "OBJECT ENCODING d2",
        "ZRANGE d2 0 -1 WITHSCORES",
        "ZUNIONSTORE d3 1 z",
        "OBJECT ENCODING d3",
        "ZRANGE d3 0 -1 WITHSCORES",
        "ZINTERSTORE d4 2 z d1",
        "OBJECT ENCODING d4",
        "ZRANGE d4 0 -1 WITHSCORES",
        "ZDIFFSTORE d5 1 z",
        "ZRANGE d5 0 -1 WITHSCORES",
    ],
    "zrangestore-by-rank-past-the-listpack-starts-a-skiplist": [
        "CONFIG SET zset-max-listpack-entries 0",
        "ZADD z -0 a -0 b -0 c -0 d -0 e 1 f",
        "CONFIG SET zset-max-listpack-entries 3",
        "ZRANGESTORE d1 z 0 -1",
        "ZRANGE d1 0 -1 WITHSCORES",
        "ZRANGESTORE d2 z 0 -1 REV",
        "ZRANGE d2 0 -1 WITHSCORES",
        "ZRANGESTORE d3 z 0 1",
        "ZRANGE d3 0 -1 WITHSCORES",
        "OBJECT ENCODING d3",
    ],
    "zrangestore-by-score-or-lex-converts-as-it-grows": [
        "CONFIG SET zset-max-listpack-entries 0",
        "ZADD z -0 a -0 b -0 c -0 d -0 e 1 f",
        "CONFIG SET zset-max-listpack-entries 3",
        "ZRANGESTORE d1 z -0 0 BYSCORE",
        "ZRANGE d1 0 -1 WITHSCORES",
        "ZRANGESTORE d2 z [a [z BYLEX",
        "ZRANGE d2 0 -1 WITHSCORES",
        "ZRANGESTORE d3 z +inf -inf BYSCORE REV",
        "ZRANGE d3 0 -1 WITHSCORES",
    ],
    "sort-converts-a-listpack-for-good": [
        "ZADD q 1 a",
        "SORT_RO q ALPHA",
        "OBJECT ENCODING q",
        "ZADD q -0 b",
        "ZRANGE q 0 -1 WITHSCORES",
    ],
    "union-reply-keeps-a-negative-zero-weight": [
        "ZADD z 1 a",
        "ZUNION 1 z WEIGHTS -0 WITHSCORES",
        "ZUNIONSTORE d 1 z WEIGHTS -0",
        "ZRANGE d 0 -1 WITHSCORES",
    ],
}

CASES = {
    f"{unit}/{name}": script
    for unit, cases in (
        ("string", STRING_CASES),
        ("hash", HASH_CASES),
        ("set", SET_CASES),
        ("list", LIST_CASES),
        ("zset", ZSET_CASES),
    )
    for name, script in cases.items()
}


class _Side(RedisBackend):
    """A server driven over two raw sockets, reset to the default encoding parameters."""

    def reset(self) -> None:
        super().reset()
        self.conns[0].call(ENCODING_DEFAULTS)


@pytest.fixture(scope="module")
def servers(redis_server: RedisServer) -> Iterator[tuple[_Side, _Side]]:
    """redis-server 7.0.15 (the reference) and the engine's RESP server, both over TCP."""
    server = ThreadedServer()
    real = _Side(redis_server.port)
    engine = _Side(server.port)
    yield real, engine
    real.reset()
    real.close()
    engine.close()
    server.close()


@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tcl_unit_edge_replies_as_redis_does(
    servers: tuple[_Side, _Side], case: str, conn: int
) -> None:
    """Every reply of the case's script equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*servers, CASES[case], conn)  # type: ignore[arg-type]
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)
