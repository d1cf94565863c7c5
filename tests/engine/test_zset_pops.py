"""ZMPOP, BZMPOP, BZPOPMIN, BZPOPMAX, ZINTERCARD, SINTERCARD and ZRANGESTORE side by side with
redis-server 7.0.15 (RESP2 and RESP3), with the edge cases of Redis's ``unit/type/zset.tcl``
and ``unit/type/set.tcl``: numkeys past the arguments, LIMIT and COUNT bounds, which error
wins (a wrong type before a bad option), ZRANGESTORE deleting its destination for an empty
range; and on the engine: the blocking pops wake (ZADD signals them) and time out like BLPOP,
do not block inside MULTI, and are logged to the append-only file as ZPOPMIN/ZPOPMAX."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import iter_records, open_persistent
from streamworker.engine.context import Blocked
from streamworker.engine.replies import NULL_ARRAY, Double
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

CASES = {
    "zintercard": [
        "ZADD z 1 a 2 b 3 c 4 d",
        "ZADD z2 2 b 3 c 9 x",
        "SADD s b c q",
        "SET str x",
        "ZINTERCARD 2 z z2",
        "ZINTERCARD 3 z z2 s",
        "ZINTERCARD 3 z z2 s LIMIT 1",
        "ZINTERCARD 2 z z2 LIMIT 0",
        "ZINTERCARD 2 z z2 LIMIT -1",
        "ZINTERCARD 2 z z2 LIMIT x",
        "ZINTERCARD 2 z z2 LIMIT",
        "ZINTERCARD 2 z z2 FOO 1",
        "ZINTERCARD 2 z z2 WITHSCORES",
        "ZINTERCARD 0 z",
        "ZINTERCARD -1 z",
        "ZINTERCARD x z",
        "ZINTERCARD 3 z z2",
        "ZINTERCARD 9223372036854775807 z",
        "ZINTERCARD 2 z str",
        "ZINTERCARD 2 z str LIMIT x",
        "ZINTERCARD 2 nokey str",
        "ZINTERCARD 2 z nokey",
        "ZINTERCARD 1 z",
    ],
    "sintercard": [
        "ZADD z 1 a 2 b 3 c 4 d",
        "ZADD z2 2 b 3 c 9 x",
        "SADD s b c q",
        "SET str x",
        "SINTERCARD 1 s",
        "SADD s2 c q r",
        "SINTERCARD 2 s s2",
        "SINTERCARD 2 s s2 LIMIT 1",
        "SINTERCARD 2 s s2 LIMIT -1",
        "SINTERCARD 2 s s2 LIMIT x",
        "SINTERCARD 2 s s2 LIMIT",
        "SINTERCARD 2 s s2 FOO",
        "SINTERCARD 0 s",
        "SINTERCARD -1 s",
        "SINTERCARD x s",
        "SINTERCARD 3 s s2",
        "SINTERCARD 9223372036854775807 s",
        "SINTERCARD 2 s z",
        "SINTERCARD 2 nokey z",
        "SINTERCARD 2 nokey s",
    ],
    "zrangestore": [
        "ZADD z 1 a 2 b 3 c 4 d",
        "ZADD z2 2 b 3 c 9 x",
        "SADD s b c q",
        "SET str x",
        "ZRANGESTORE dst z 0 -1",
        "ZRANGE dst 0 -1 WITHSCORES",
        "ZRANGESTORE dst z 1 2 REV",
        "ZRANGE dst 0 -1 WITHSCORES",
        "ZRANGESTORE dst z (1 +inf BYSCORE LIMIT 1 1",
        "ZRANGE dst 0 -1 WITHSCORES",
        "ZRANGESTORE dst z [b [c BYLEX",
        "ZRANGESTORE dst z 0 -1 WITHSCORES",
        "ZRANGESTORE dst z 0 -1 LIMIT 0 1",
        "ZRANGESTORE dst z 5 10",
        "EXISTS dst",
        "ZRANGESTORE dst nokey 0 -1",
        "ZRANGESTORE dst str 0 -1",
        "ZRANGESTORE str z 0 0",
        "TYPE str",
        "SET str x",
        "ZRANGESTORE dst z x 1",
    ],
    "zmpop": [
        "ZADD z 1 a 2 b 3 c 4 d",
        "ZADD z2 2 b 3 c 9 x",
        "SADD s b c q",
        "SET str x",
        "ZMPOP 1 z MIN",
        "ZMPOP 2 nokey z MAX COUNT 2",
        "ZMPOP 1 z MIN COUNT 10",
        "EXISTS z",
        "ZMPOP 1 z MIN",
        "ZMPOP 0 z MIN",
        "ZMPOP -1 z MIN",
        "ZMPOP x z MIN",
        "ZMPOP 1 z MID",
        "ZMPOP 2 z MIN",
        "ZMPOP 9223372036854775807 z MIN",
        "ZMPOP 1 z2 MIN COUNT 0",
        "ZMPOP 1 z2 MIN COUNT x",
        "ZMPOP 1 z2 MIN COUNT 1 COUNT 1",
        "ZMPOP 1 z2 MIN FOO",
        "ZMPOP 2 str z2 MIN",
        "ZMPOP 2 z2 str max",
        "ZMPOP 1 nokey MAX",
    ],
    "bzpop-at-once": [
        "ZADD z 1 a 2 b 3 c 4 d",
        "ZADD z2 2 b 3 c 9 x",
        "SADD s b c q",
        "SET str x",
        "ZADD bz 1 a 2 b 3 c",
        "BZPOPMIN bz 0",
        "BZPOPMAX bz 0",
        "BZPOPMIN nokey bz 0",
        "BZPOPMIN bz x",
        "BZPOPMIN bz -1",
        "BZPOPMIN str 0",
        "BZPOPMIN nokey 0.01",
        "ZADD bz 5 e",
        "BZMPOP 0 1 bz MIN",
        "BZMPOP 0.01 1 bz MIN",
        "BZMPOP x 1 bz MIN",
        "BZMPOP 0 0 bz MIN",
        "BZMPOP x 1 bz FOO",
        "BZMPOP 0 1 str MIN",
        "ZADD bz 1 a 2 b 3 c",
        "BZMPOP 0 2 nokey bz MAX COUNT 5",
        "MULTI",
        "BZPOPMIN nokey 0",
        "BZMPOP 0 1 nokey MIN",
        "ZMPOP 1 nokey MAX",
        "EXEC",
        "EVAL \"return redis.call('BZMPOP','0','1','nokey','MIN')\" 0",
        "EVAL \"return redis.call('BZPOPMIN','nokey','0')\" 0",
        "EVAL \"return redis.call('BZMPOP','0','1','z2','MAX')\" 0",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_zset_commands_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def test_bzpopmin_wakes_when_another_client_adds() -> None:
    engine = Engine()
    a, b = engine.connect(), engine.connect()
    blocked = engine.execute(a, [b"BZPOPMIN", b"x", b"z", b"5"])
    assert isinstance(blocked, Blocked)
    threading.Timer(0.05, engine.execute, (b, [b"ZADD", b"z", b"2", b"m", b"1", b"n"])).start()
    reply = engine.wait(blocked)
    assert reply == [b"z", b"n", Double(1.0)]


def test_bzmpop_serves_blocked_clients_first_come_first_served() -> None:
    engine = Engine()
    first, second, adder = engine.connect(), engine.connect(), engine.connect()
    one = engine.execute(first, [b"BZMPOP", b"0", b"1", b"z", b"MAX", b"COUNT", b"2"])
    two = engine.execute(second, [b"BZMPOP", b"0", b"1", b"z", b"MAX"])
    assert isinstance(one, Blocked)
    assert isinstance(two, Blocked)
    engine.execute(adder, [b"ZADD", b"z", b"1", b"a", b"2", b"b", b"3", b"c"])
    assert engine.wait(one, 1) == [b"z", [[b"c", Double(3.0)], [b"b", Double(2.0)]]]
    assert engine.wait(two, 1) == [b"z", [[b"a", Double(1.0)]]]


@pytest.mark.parametrize(
    "argv",
    [
        [b"BZPOPMAX", b"z", b"0.05"],
        [b"BZMPOP", b"0.05", b"1", b"z", b"MIN"],
    ],
)
def test_blocking_zset_pops_time_out_with_a_null_array(argv: list[bytes]) -> None:
    engine = Engine()
    blocked = engine.execute(engine.connect(), argv)
    assert isinstance(blocked, Blocked)
    assert engine.wait(blocked) is NULL_ARRAY  # type: ignore[arg-type]


def test_blocking_zset_pops_inside_multi_do_not_block() -> None:
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"MULTI"])
    engine.execute(client, [b"BZPOPMIN", b"z", b"0"])
    engine.execute(client, [b"BZMPOP", b"0", b"1", b"z", b"MIN"])
    assert engine.execute(client, [b"EXEC"]) == [NULL_ARRAY, NULL_ARRAY]


def test_zset_writes_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """ZRANGESTORE, ZMPOP and blocking pops served later come back on replay; the pops are
    logged as ZPOPMIN/ZPOPMAX with the number of members they took."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    engine = aof.engine
    waiter, waiter2 = engine.connect(), engine.connect()
    blocked = engine.execute(waiter, [b"BZPOPMAX", b"w", b"0"])
    blocked2 = engine.execute(waiter2, [b"BZMPOP", b"0", b"1", b"w", b"MIN", b"COUNT", b"9"])
    assert isinstance(blocked, Blocked)
    assert isinstance(blocked2, Blocked)
    s = Session(engine)
    s("ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d")
    s("ZRANGESTORE", "r", "z", "1", "-1")
    s("ZMPOP", "2", "none", "z", "MAX", "COUNT", "2")
    s("ZADD", "w", "1", "x", "2", "y", "3", "q")
    assert engine.wait(blocked, 5) == [b"w", b"q", Double(3.0)]
    assert engine.wait(blocked2, 5) == [b"w", [[b"x", Double(1.0)], [b"y", Double(2.0)]]]
    logged = [
        item
        for _, _, item in iter_records(aof.path.read_bytes(), aof.path)
        if isinstance(item, list)
    ]
    assert [b"ZPOPMAX", b"z", b"2"] in logged
    assert [b"ZPOPMAX", b"w"] in logged
    assert [b"ZPOPMIN", b"w", b"2"] in logged
    before = dump_state(engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
