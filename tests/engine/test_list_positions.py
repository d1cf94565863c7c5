"""LPOS, LSET, LINSERT, LMPOP and BLMPOP side by side with redis-server 7.0.15 (RESP2 and
RESP3), with the edge cases of Redis's ``unit/type/list.tcl``: RANK/COUNT/MAXLEN combinations,
7.0's ``RANK -9223372036854775808`` (accepted, every match counts), which error wins, numkeys
past the arguments; and on the engine: BLMPOP wakes and times out like BLPOP, does not block
inside MULTI, and a BLMPOP served later is logged to the append-only file as the LPOP/RPOP it
amounted to."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import iter_records, open_persistent
from streamworker.engine.context import Blocked
from streamworker.engine.replies import NULL_ARRAY
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

CASES = {
    "lpos": [
        "RPUSH l a b c 1 2 3 c c",
        "SET s x",
        "RPUSH m c a c b c",
        "LPOS l c",
        "LPOS l c RANK 2",
        "LPOS l c RANK -1",
        "LPOS l c RANK -2",
        "LPOS l c COUNT 0",
        "LPOS l c COUNT 2",
        "LPOS l c RANK 2 COUNT 0",
        "LPOS l c RANK -1 COUNT 0",
        "LPOS l c RANK -1 COUNT 2 MAXLEN 2",
        "LPOS l c MAXLEN 3",
        "LPOS l c MAXLEN 3 COUNT 0",
        "LPOS l c RANK 10",
        "LPOS l c RANK 10 COUNT 1",
        "LPOS l x",
        "LPOS l x COUNT 0",
        "LPOS l c RANK 0",
        "LPOS l c RANK -9223372036854775808",
        "LPOS l c RANK -9223372036854775807",
        "LPOS l c RANK 9223372036854775807",
        "LPOS l c RANK x",
        "LPOS l c COUNT -1",
        "LPOS l c COUNT x",
        "LPOS l c MAXLEN -1",
        "LPOS l c MAXLEN x",
        "LPOS l c RANK",
        "LPOS l c FOO 1",
        "LPOS l c rank 1 rank 2",
        "LPOS nokey c",
        "LPOS nokey c COUNT 1",
        "LPOS nokey c RANK 0",
        "LPOS s c",
        "LPOS s c RANK 0",
        "LPOS m c RANK -9223372036854775808",
        "LPOS m c RANK -9223372036854775808 COUNT 1",
        "LPOS m c RANK -9223372036854775808 COUNT 0 MAXLEN 4",
        "LPOS m c RANK -9223372036854775807 COUNT 0",
    ],
    "lset-linsert": [
        "RPUSH l a b c 1 2 3 c c",
        "SET s x",
        "LSET l 0 A",
        "LSET l -1 Z",
        "LSET l 100 Z",
        "LSET l -100 Z",
        "LSET l x Z",
        "LSET nokey 0 a",
        "LSET nokey x a",
        "LSET s 0 a",
        "LSET s x a",
        "LRANGE l 0 -1",
        "LINSERT l BEFORE c X",
        "LINSERT l after c Y",
        "LINSERT l AFTER nope Y",
        "LINSERT l MIDDLE c Y",
        "LINSERT nokey BEFORE a b",
        "LINSERT s BEFORE a b",
        "LINSERT nokey FOO a b",
        "LRANGE l 0 -1",
    ],
    "lmpop": [
        "RPUSH l a b c 1 2 3 c c",
        "SET s x",
        "RPUSH l2 a",
        "RPUSH l3 a b c",
        "LPUSH l4 x y z",
        "LMPOP 1 l LEFT",
        "LMPOP 1 l RIGHT COUNT 2",
        "LMPOP 2 nokey l LEFT COUNT 100",
        "LMPOP 2 nokey l LEFT",
        "LMPOP 0 l LEFT",
        "LMPOP -1 l LEFT",
        "LMPOP x l LEFT",
        "LMPOP 9223372036854775807 l LEFT",
        "LMPOP 9223372036854775806 l LEFT",
        "LMPOP 2 l LEFT",
        "LMPOP 1 l MIDDLE",
        "LMPOP 1 l LEFT COUNT 0",
        "LMPOP 1 l LEFT COUNT -1",
        "LMPOP 1 l LEFT COUNT x",
        "LMPOP 1 l LEFT COUNT 1 COUNT 1",
        "LMPOP 1 l LEFT COUNT",
        "LMPOP 1 l LEFT FOO",
        "LMPOP 1 s LEFT",
        "LMPOP 2 l2 s LEFT",
        "LMPOP 2 nokey s LEFT",
        "LMPOP 1 nokey RIGHT",
    ],
    "blmpop-at-once": [
        "RPUSH l a b c 1 2 3 c c",
        "SET s x",
        "RPUSH l2 a",
        "RPUSH l3 a b c",
        "LPUSH l4 x y z",
        "BLMPOP 0 1 l3 LEFT COUNT 2",
        "BLMPOP 0.1 2 nokey l3 RIGHT",
        "BLMPOP 0.01 1 nokey LEFT",
        "BLMPOP -1 1 nokey LEFT",
        "BLMPOP x 1 nokey LEFT",
        "BLMPOP x 0 nokey LEFT",
        "BLMPOP x 1 nokey MIDDLE",
        "BLMPOP 0 1 s LEFT",
        "BLMPOP 0 x",
        "MULTI",
        "BLMPOP 0 1 nokey LEFT",
        "BLMPOP 0 1 s LEFT",
        "EXEC",
        "EVAL \"return redis.call('BLMPOP','0','1','nokey','LEFT')\" 0",
        "EVAL \"return redis.call('BLMPOP','0','1','l4','RIGHT')\" 0",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_list_commands_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def test_blmpop_wakes_when_another_client_pushes() -> None:
    engine = Engine()
    a, b = engine.connect(), engine.connect()
    blocked = engine.execute(a, [b"BLMPOP", b"5", b"2", b"x", b"l", b"RIGHT", b"COUNT", b"2"])
    assert isinstance(blocked, Blocked)
    threading.Timer(0.05, engine.execute, (b, [b"RPUSH", b"l", b"p", b"q", b"r"])).start()
    assert engine.wait(blocked) == [b"l", [b"r", b"q"]]
    assert engine.execute(b, [b"LRANGE", b"l", b"0", b"-1"]) == [b"p"]


def test_blmpop_serves_blocked_clients_first_come_first_served() -> None:
    engine = Engine()
    first, second, pusher = engine.connect(), engine.connect(), engine.connect()
    one = engine.execute(first, [b"BLMPOP", b"0", b"1", b"l", b"LEFT"])
    two = engine.execute(second, [b"BLMPOP", b"0", b"1", b"l", b"LEFT"])
    assert isinstance(one, Blocked)
    assert isinstance(two, Blocked)
    engine.execute(pusher, [b"RPUSH", b"l", b"a", b"b"])
    assert engine.wait(one, 1) == [b"l", [b"a"]]
    assert engine.wait(two, 1) == [b"l", [b"b"]]


def test_blmpop_times_out_with_a_null_array() -> None:
    engine = Engine()
    blocked = engine.execute(engine.connect(), [b"BLMPOP", b"0.05", b"1", b"l", b"LEFT"])
    start = time.monotonic()
    assert engine.wait(blocked) is NULL_ARRAY  # type: ignore[arg-type]
    assert time.monotonic() - start >= 0.05


def test_blmpop_inside_multi_does_not_block() -> None:
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"MULTI"])
    engine.execute(client, [b"BLMPOP", b"0", b"1", b"l", b"LEFT"])
    assert engine.execute(client, [b"EXEC"]) == [NULL_ARRAY]


def test_list_writes_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """LSET, LINSERT, LMPOP and a BLMPOP served later come back on replay; the pops are logged
    as LPOP/RPOP with the number of elements they took."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    engine = aof.engine
    waiter = engine.connect()
    blocked = engine.execute(waiter, [b"BLMPOP", b"0", b"1", b"w", b"LEFT", b"COUNT", b"5"])
    assert isinstance(blocked, Blocked)
    s = Session(engine)
    s("RPUSH", "l", "a", "b", "c", "d")
    s("LSET", "l", "-1", "D")
    s("LINSERT", "l", "BEFORE", "b", "ab")
    s("LMPOP", "2", "none", "l", "RIGHT", "COUNT", "2")
    s("RPUSH", "w", "x", "y")
    assert engine.wait(blocked, 5) == [b"w", [b"x", b"y"]]
    logged = [
        item
        for _, _, item in iter_records(aof.path.read_bytes(), aof.path)
        if isinstance(item, list)
    ]
    assert [b"RPOP", b"l", b"2"] in logged
    assert [b"LPOP", b"w", b"2"] in logged
    before = dump_state(engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
