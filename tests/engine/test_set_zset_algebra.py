"""SMOVE, SINTERSTORE, SUNIONSTORE, SDIFFSTORE, ZUNION, ZINTER, ZDIFF and their STORE forms side
by side with redis-server 7.0.15 (RESP2 and RESP3), with the edge cases of Redis's
``unit/type/set.tcl`` and ``unit/type/zset.tcl``: sets as sorted-set inputs (score 1), WEIGHTS
and AGGREGATE, NaN from ``inf * 0`` and ``inf - inf`` (Redis makes a NaN sum 0), numkeys
errors and which error wins, destinations of another type overwritten, empty results deleting
the destination; and on the engine: WATCH, and replay from the append-only file."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from streamworker.engine.replies import NULL_ARRAY
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

CASES = {
    "smove": [
        "SADD a 1 2 3",
        "SADD b x y",
        "SET s str",
        "SMOVE a b 1",
        "SMEMBERS a",
        "SMEMBERS b",
        "SMOVE a b 1",
        "SMOVE a b 9",
        "SMOVE a a 2",
        "SMOVE a a 9",
        "SADD b 2",
        "SMOVE a b 2",
        "SMEMBERS b",
        "SMOVE a c 3",
        "EXISTS a",
        "SMEMBERS c",
        "SMOVE nokey b x",
        "SMOVE nokey s x",
        "SMOVE s b x",
        "SMOVE b s x",
        "SMOVE b s nomember",
        "SMOVE s s x",
        "SMOVE b",
        "SMOVE b c x y",
        "SADD t m",
        "EXPIRE t 100",
        "SMOVE c t 3",
        "TTL t",
    ],
    "set-store": [
        "SADD a 1 2 3 4",
        "SADD b 3 4 5",
        "SADD c x y 4",
        "SET s str",
        "SINTERSTORE d a b",
        "SMEMBERS d",
        "SUNIONSTORE d a b c",
        "SMEMBERS d",
        "SDIFFSTORE d a b c",
        "SMEMBERS d",
        "SINTERSTORE d a b c",
        "SMEMBERS d",
        "SINTERSTORE d a nokey",
        "EXISTS d",
        "SUNIONSTORE d nokey nokey2",
        "SDIFFSTORE d nokey a",
        "SDIFFSTORE d a a",
        "SINTERSTORE a a b",
        "SMEMBERS a",
        "SUNIONSTORE s a",
        "TYPE s",
        "SINTERSTORE d a s",
        "SINTERSTORE d nokey s",
        "SINTERSTORE d s nokey",
        "SUNIONSTORE d a s",
        "SDIFFSTORE d s a",
        "SDIFFSTORE d nokey s",
        "SET str x",
        "EXPIRE str 100",
        "SUNIONSTORE str b",
        "TTL str",
        "SDIFFSTORE d b",
        "SMEMBERS d",
        "SINTERSTORE d",
        "SUNIONSTORE d",
    ],
    "zunion-zinter": [
        "ZADD z1 1 a 2 b 3 c",
        "ZADD z2 10 b 20 c 30 d",
        "SADD s1 a c e",
        "SET str x",
        "ZUNION 2 z1 z2",
        "ZUNION 2 z1 z2 WITHSCORES",
        "ZUNION 3 z1 z2 s1 withscores",
        "ZINTER 2 z1 z2 WITHSCORES",
        "ZINTER 3 z1 z2 s1 WITHSCORES",
        "ZINTER 2 z1 s1 WITHSCORES",
        "ZUNION 2 z1 z2 WEIGHTS 2 0.5 WITHSCORES",
        "ZUNION 2 z1 z2 WEIGHTS 2 0.5 AGGREGATE MIN WITHSCORES",
        "ZUNION 2 z1 z2 AGGREGATE max WEIGHTS -1 1 WITHSCORES",
        "ZINTER 2 z1 z2 AGGREGATE MIN WITHSCORES",
        "ZINTER 2 z1 z2 AGGREGATE MAX WITHSCORES",
        "ZINTER 2 z1 z2 AGGREGATE SUM AGGREGATE MAX WITHSCORES",
        "ZUNION 2 z1 z2 WEIGHTS 1 2 WEIGHTS 3 4 WITHSCORES",
        "ZUNION 2 z1 z2 WITHSCORES WITHSCORES",
        "ZUNION 1 nokey",
        "ZINTER 2 z1 nokey",
        "ZINTER 2 nokey z1 WITHSCORES",
        "ZUNION 2 z1 z1 WITHSCORES",
        "ZINTER 2 z1 z1 WITHSCORES",
        "ZUNION 2 z1 str",
        "ZUNION 2 nokey str",
        "ZINTER 2 str nokey",
        "ZUNION 2 z1 str WEIGHTS x",
        "ZUNION 0 z1",
        "ZUNION -1 z1",
        "ZUNION x z1",
        "ZUNION 3 z1 z2",
        "ZUNION 9223372036854775807 z1",
        "ZUNION 9223372036854775808 z1",
        "ZINTER 0 z1",
        "ZUNION 2 z1 z2 WEIGHTS 1",
        "ZUNION 2 z1 z2 WEIGHTS 1 x",
        "ZUNION 2 z1 z2 WEIGHTS 1 nan",
        "ZUNION 2 z1 z2 WEIGHTS 1 inf WITHSCORES",
        "ZUNION 2 z1 z2 AGGREGATE",
        "ZUNION 2 z1 z2 AGGREGATE AVG",
        "ZUNION 2 z1 z2 FOO",
        "ZUNION 1 z1 LIMIT 1",
        "ZINTER 1 z1 WITHSCORES extra",
        "ZUNION 1",
    ],
    "nan-and-infinity": [
        "ZADD p 1 a +inf b -inf c 0 d",
        "ZADD q 1 a -inf b +inf c +inf d",
        "ZADD r 5 a 5 b 5 c 5 d",
        "ZUNION 2 p q WITHSCORES",
        "ZINTER 2 p q WITHSCORES",
        "ZUNION 2 p q WEIGHTS 0 1 WITHSCORES",
        "ZUNION 2 p q WEIGHTS 0 0 WITHSCORES",
        "ZINTER 2 p q WEIGHTS 0 1 WITHSCORES",
        "ZINTER 2 p q WEIGHTS 1 0 WITHSCORES",
        "ZINTER 2 p q WEIGHTS 1 0 AGGREGATE MIN WITHSCORES",
        "ZINTER 2 p q WEIGHTS 1 0 AGGREGATE MAX WITHSCORES",
        "ZINTER 2 r q WEIGHTS 1 0 AGGREGATE MIN WITHSCORES",
        "ZINTER 2 r q WEIGHTS 1 0 AGGREGATE MAX WITHSCORES",
        "ZINTER 3 r p q WEIGHTS 1 0 0 WITHSCORES",
        "ZUNION 2 p q AGGREGATE MIN WITHSCORES",
        "ZUNION 2 p q AGGREGATE MAX WITHSCORES",
        "ZUNION 2 p q WEIGHTS inf -inf WITHSCORES",
        "ZUNION 2 p q WEIGHTS -0 1 WITHSCORES",
        "ZUNION 1 r WEIGHTS -0 WITHSCORES",
        "ZINTER 2 r p WEIGHTS -0 0 WITHSCORES",
        "ZUNIONSTORE d 1 r WEIGHTS -0",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZUNIONSTORE d 2 p q WEIGHTS 0 0",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZINTERSTORE d 2 p q",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZADD f 0.1 a 0.2 b",
        "ZADD g 0.7 a 1e17 b",
        "ZADD h 0.3 a -1e17 b",
        "ZUNION 3 f g h WITHSCORES",
        "ZUNION 3 h g f WITHSCORES",
        "ZINTER 3 f g h WITHSCORES",
        "ZINTER 3 g f h WITHSCORES",
    ],
    "zdiff": [
        "ZADD z1 1 a 2 b 3 c 4 d",
        "ZADD z2 10 b",
        "SADD s1 c x",
        "SET str x",
        "ZDIFF 1 z1",
        "ZDIFF 2 z1 z2 WITHSCORES",
        "ZDIFF 3 z1 z2 s1 WITHSCORES",
        "ZDIFF 2 s1 z1 WITHSCORES",
        "ZDIFF 2 z1 z1",
        "ZDIFF 2 nokey z1",
        "ZDIFF 2 z1 nokey",
        "ZDIFF 2 z1 str",
        "ZDIFF 2 z1 z2 WEIGHTS 1 1",
        "ZDIFF 2 z1 z2 AGGREGATE MIN",
        "ZDIFF 0 z1",
        "ZDIFF -5 z1",
        "ZDIFF 3 z1 z2",
        "ZDIFF 1 z1 FOO",
        "ZDIFFSTORE d 2 z1 z2",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZDIFFSTORE d 2 z1 z1",
        "EXISTS d",
        "ZDIFFSTORE d 1 z1 WITHSCORES",
        "ZDIFFSTORE d 0 z1",
        "ZDIFFSTORE d 2 z1 str",
        "ZDIFFSTORE z1 2 z1 z2",
        "ZRANGE z1 0 -1 WITHSCORES",
    ],
    "zstore": [
        "ZADD z1 1 a 2 b 3 c",
        "ZADD z2 10 b 20 c 30 d",
        "SADD s1 a c e",
        "SET str x",
        "ZUNIONSTORE d 2 z1 z2",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZINTERSTORE d 3 z1 z2 s1 WEIGHTS 1 2 3",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZUNIONSTORE d 2 z1 s1 AGGREGATE MAX",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZINTERSTORE d 2 z1 nokey",
        "EXISTS d",
        "ZUNIONSTORE str 1 z1",
        "TYPE str",
        "SET str x",
        "EXPIRE str 100",
        "ZINTERSTORE str 2 z1 z2",
        "TTL str",
        "ZUNIONSTORE d 2 z1 z2 WITHSCORES",
        "ZINTERSTORE d 2 z1 z2 WITHSCORES",
        "ZUNIONSTORE z1 2 z1 z2",
        "ZRANGE z1 0 -1 WITHSCORES",
        "ZUNIONSTORE d 0 z1",
        "ZUNIONSTORE d x z1",
        "ZUNIONSTORE d 3 z1 z2",
        "ZUNIONSTORE d 2 z1 str",
        "ZINTERSTORE d 2 str z1 WEIGHTS x",
        "ZUNIONSTORE d 1 nokey",
        "ZUNIONSTORE d 1",
        "COMMAND GETKEYS ZUNIONSTORE d 2 a b WEIGHTS 1 2",
        "COMMAND GETKEYS ZINTERSTORE d 1 a b c",
        "COMMAND GETKEYS ZDIFFSTORE d 5 a",
        "COMMAND GETKEYS ZUNION 2 a b",
        "COMMAND GETKEYS ZINTER 3 a b",
        "COMMAND GETKEYS ZDIFF 0 a",
        "COMMAND GETKEYS SMOVE a b m",
        "COMMAND GETKEYS SINTERSTORE d a b",
    ],
    "in-multi-and-eval": [
        "ZADD z1 1 a 2 b",
        "SADD s1 a b c",
        "MULTI",
        "ZUNIONSTORE d 2 z1 s1 WEIGHTS 2 3",
        "ZRANGE d 0 -1 WITHSCORES",
        "ZUNION 2 z1 s1 WITHSCORES",
        "SMOVE s1 s2 c",
        "SINTERSTORE s3 s1 s2",
        "ZINTER 0 z1",
        "EXEC",
        "EVAL \"return redis.call('ZUNION','2',KEYS[1],KEYS[2],'WITHSCORES')\" 2 z1 s1",
        "EVAL \"return redis.call('ZINTERSTORE','d2','2',KEYS[1],KEYS[2])\" 2 z1 s1",
        "EVAL \"return redis.call('SUNIONSTORE','s4',KEYS[1],KEYS[2])\" 2 s1 s2",
        "EVAL \"return redis.call('ZDIFF','0','z1')\" 0",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_set_algebra_replies_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def _exec_after(engine: Engine, watched: bytes, *write: bytes) -> object:
    watcher, other = engine.connect(), engine.connect()
    engine.execute(watcher, [b"WATCH", watched])
    engine.execute(other, list(write))
    engine.execute(watcher, [b"MULTI"])
    engine.execute(watcher, [b"PING"])
    return engine.execute(watcher, [b"EXEC"])


def _seeded() -> Engine:
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"SADD", b"a", b"1", b"2"])
    engine.execute(client, [b"ZADD", b"z", b"1", b"x"])
    engine.execute(client, [b"SET", b"d", b"old"])
    return engine


@pytest.mark.parametrize(
    "write",
    [
        (b"SMOVE", b"a", b"d2", b"1"),
        (b"SINTERSTORE", b"d", b"a"),
        (b"SUNIONSTORE", b"d", b"a", b"nokey"),
        (b"SDIFFSTORE", b"d", b"nokey"),
        (b"ZUNIONSTORE", b"d", b"1", b"z"),
        (b"ZINTERSTORE", b"d", b"2", b"z", b"a"),
        (b"ZDIFFSTORE", b"d", b"1", b"nokey"),
    ],
    ids=lambda w: w[0].decode().lower(),
)
def test_store_commands_invalidate_a_watch_on_what_they_change(write: tuple[bytes, ...]) -> None:
    watched = b"a" if write[0] == b"SMOVE" else b"d"
    assert _exec_after(_seeded(), watched, *write) is NULL_ARRAY


def test_smove_of_a_missing_member_keeps_a_watch() -> None:
    assert _exec_after(_seeded(), b"a", b"SMOVE", b"a", b"b", b"nope") is not NULL_ARRAY


def test_store_of_an_empty_result_on_a_missing_destination_keeps_a_watch() -> None:
    assert _exec_after(_seeded(), b"d2", b"ZINTERSTORE", b"d2", b"2", b"z", b"no") is not NULL_ARRAY


def test_set_algebra_writes_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """Every write command of the family comes back on replay with the same keys, values and
    TTLs."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    engine = aof.engine
    s = Session(engine)
    s("SADD", "a", "1", "2", "3", "x")
    s("SADD", "b", "2", "3", "y")
    s("ZADD", "z1", "1", "a", "+inf", "b", "2.5", "x")
    s("ZADD", "z2", "-inf", "b", "3", "c")
    s("SET", "ttl", "v", "EX", "1000")
    s("SMOVE", "a", "b", "x")
    s("SMOVE", "b", "c", "y")
    s("SINTERSTORE", "si", "a", "b")
    s("SUNIONSTORE", "su", "a", "b", "c")
    s("SDIFFSTORE", "sd", "a", "b")
    s("SDIFFSTORE", "ttl", "a", "c")
    s("ZUNIONSTORE", "zu", "3", "z1", "z2", "a", "WEIGHTS", "2", "1", "0.5")
    s("ZINTERSTORE", "zi", "2", "z1", "z2", "AGGREGATE", "MAX")
    s("ZDIFFSTORE", "zd", "2", "z1", "b")
    s("ZUNIONSTORE", "gone", "1", "nokey")
    before = dump_state(engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
