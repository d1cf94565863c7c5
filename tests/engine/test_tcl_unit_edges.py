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

# The encoding parameters the scripts change, back to redis-server 7.0's defaults.
ENCODING_DEFAULTS = [
    b"CONFIG",
    b"SET",
    b"hash-max-listpack-entries",
    b"128",
    b"hash-max-listpack-value",
    b"64",
    b"set-max-intset-entries",
    b"512",
    b"zset-max-listpack-entries",
    b"128",
    b"zset-max-listpack-value",
    b"64",
]

LONG = "m" * 80  # longer than zset-max-listpack-value / hash-max-listpack-value (64)

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
    "union-reply-keeps-a-negative-zero-weight": [
        "ZADD z 1 a",
        "ZUNION 1 z WEIGHTS -0 WITHSCORES",
        "ZUNIONSTORE d 1 z WEIGHTS -0",
        "ZRANGE d 0 -1 WITHSCORES",
    ],
}

CASES = {f"zset/{name}": script for name, script in ZSET_CASES.items()}


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
