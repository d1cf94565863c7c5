"""LCS, SUBSTR and MOVE side by side with redis-server 7.0.15 (RESP2 and RESP3), with the edge
cases of Redis's ``unit/type/string.tcl`` and ``unit/keyspace.tcl``: LCS's LEN / IDX /
MINMATCHLEN / WITHMATCHLEN and which error wins, its refusal when Redis's table would pass
``proto-max-bulk-len`` (at the exact boundary), MOVE's errors (same db, db out of range, key in
the target) and its TTL; and on the engine: LCS of large strings answers quickly and without
Redis's table, MOVE invalidates WATCH in both databases, wakes a client blocked in the target
and replays from the append-only file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from streamworker.engine import Engine, msgs
from streamworker.engine.aof import open_persistent
from streamworker.engine.context import Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.model.lcs import LcsTable, walk_back
from streamworker.engine.replies import NULL_ARRAY, Map
from tests.engine.aof_support import Session, dump_state
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

_DNA1 = (
    "ccgtaatgcctttccctaacagagtttttcgaactcgtgttgtcgagcgacggaattagatcagttaaatggcagaaaactggcagg"
    "gcttttagtcgtgggatgatcagtgggtaaaggtggcgcggggtaacgcgcgctaaggctcagctgcaacgcggagctggtgtgtta"
    "tccattcatggcagacaactaatacgcataagcgtagccaaccgcattagcgtatgaacaaaataatgcgagttgggcgtacatac"
    "agttatagtgtttaccgatctcagggatatagaatcctaa"
)
_DNA2 = (
    "atcagaaatggaacaaagcacccttggtgtatctcttctccatttccgccgcgtgcgagttccgcgtcttctatatatccacgccgc"
    "cagcagctaaaaggagtgaaggtttacttcgagatatgaggtggagatgagcccgtaacgtgcttgcaactgaggtacatgcggtta"
    "gtacgaaaccttcctccccgggatttggtgtacaactctcccatagcctaaagcataggggcaaagcactctgaatacctttatctg"
    "attttctagggtgtcacgg"
)

CASES = {
    "lcs": [
        "SET a ohmytext",
        "SET b mynewtext",
        "RPUSH l x",
        "SET n 12345",
        "SET m 1234",
        "LCS a b",
        "LCS a b LEN",
        "LCS a b len",
        "LCS a b IDX",
        "LCS a b IDX WITHMATCHLEN",
        "LCS a b IDX MINMATCHLEN 4",
        "LCS a b IDX MINMATCHLEN 4 WITHMATCHLEN",
        "LCS a b idx minmatchlen 2 minmatchlen 5",
        "LCS a b IDX MINMATCHLEN -5",
        "LCS a b IDX MINMATCHLEN 9223372036854775807",
        "LCS a b IDX MINMATCHLEN 9223372036854775808",
        "LCS a b IDX MINMATCHLEN x",
        "LCS a b MINMATCHLEN 3",
        "LCS a b WITHMATCHLEN",
        "LCS a b WITHMATCHLEN LEN",
        "LCS a b LEN IDX",
        "LCS a b IDX LEN",
        "LCS a b LEN LEN",
        "LCS a b FOO",
        "LCS a b MINMATCHLEN",
        "LCS a b LEN FOO",
        "LCS b a IDX WITHMATCHLEN",
        "LCS a a IDX WITHMATCHLEN",
        "LCS a nokey",
        "LCS nokey a IDX",
        "LCS nokey nokey2 IDX",
        "LCS nokey nokey2 LEN",
        "LCS n m IDX WITHMATCHLEN",
        "LCS a l",
        "LCS l a",
        "LCS l nokey FOO",
        "LCS a l LEN IDX",
        "LCS a",
        "MULTI",
        "LCS a b IDX WITHMATCHLEN",
        "LCS a l",
        "SUBSTR a 0 2",
        "EXEC",
        "EVAL \"return redis.call('LCS',KEYS[1],KEYS[2],'IDX','WITHMATCHLEN')\" 2 a b",
        "EVAL \"return redis.call('LCS',KEYS[1],KEYS[2])\" 2 a b",
        "EVAL \"redis.setresp(3); return redis.call('LCS',KEYS[1],KEYS[2],'IDX')\" 2 a b",
        "EVAL \"return redis.call('SUBSTR',KEYS[1],1,3)\" 1 a",
    ],
    "lcs-longer": [
        f"SET d1 {_DNA1}",
        f"SET d2 {_DNA2}",
        "LCS d1 d2",
        "LCS d2 d1",
        "LCS d1 d2 LEN",
        "LCS d1 d2 IDX MINMATCHLEN 5 WITHMATCHLEN",
        "LCS d2 d1 IDX WITHMATCHLEN",
        "SET run1 a",
        f"SET run2 a{'c' * 200}",
        "LCS run1 run2 IDX WITHMATCHLEN",
        "LCS run2 run1 IDX WITHMATCHLEN",
        f"SET run3 {'ab' * 50}",
        f"SET run4 {'b' * 120}x{'a' * 60}",
        "LCS run3 run4",
        "LCS run4 run3 IDX WITHMATCHLEN",
    ],
    "lcs-memory-bound": [
        "CONFIG SET proto-max-bulk-len 1048576",
        "SETRANGE e511 510 x",
        "SETRANGE f511 510 y",
        "SETRANGE e512 511 x",
        "LCS e511 f511 LEN",
        "LCS e511 e512 LEN",
        "LCS e512 e512 LEN",
        "LCS e512 nokey",
        "LCS e512 e512 LEN IDX",
        "LCS e512 e512 FOO",
        "CONFIG SET proto-max-bulk-len 536870912",
    ],
    "substr": [
        "SET s hello",
        "RPUSH l x",
        "SUBSTR s 0 -1",
        "SUBSTR s 1 3",
        "SUBSTR s -3 -1",
        "SUBSTR s -1 -3",
        "SUBSTR s 3 1",
        "SUBSTR s 0 100",
        "SUBSTR s -100 -100",
        "SUBSTR s 9223372036854775807 -9223372036854775808",
        "SUBSTR s x 1",
        "SUBSTR s 0 x",
        "SUBSTR nokey 0 1",
        "SUBSTR l 0 1",
        "SUBSTR l x 1",
        "SUBSTR s 0",
        "SET n 12345",
        "SUBSTR n 1 2",
    ],
    "move": [
        "SET k v",
        "MOVE k 1",
        "EXISTS k",
        "SELECT 1",
        "GET k",
        "MOVE k 0",
        "SELECT 0",
        "GET k",
        "SET t v EX 100",
        "MOVE t 2",
        "SELECT 2",
        "TTL t",
        "SELECT 0",
        "SET dup here",
        "SELECT 3",
        "SET dup there",
        "SELECT 0",
        "MOVE dup 3",
        "GET dup",
        "MOVE dup 0",
        "MOVE dup -1",
        "MOVE dup 16",
        "MOVE dup 2147483647",
        "MOVE dup 2147483648",
        "MOVE dup -2147483649",
        "MOVE dup x",
        "MOVE dup 1.5",
        "MOVE nokey 0",
        "MOVE nokey 1",
        "MOVE nokey 99",
        "RPUSH l a b",
        "ZADD z 1 m",
        "MOVE l 4",
        "MOVE z 4",
        "SELECT 4",
        "LRANGE l 0 -1",
        "ZRANGE z 0 -1 WITHSCORES",
        "SELECT 0",
        "MOVE k",
        "MOVE k 1 2",
        "MULTI",
        "SET mk v",
        "MOVE mk 5",
        "MOVE mk 0",
        "EXEC",
        "EVAL \"return redis.call('MOVE',KEYS[1],'6')\" 1 dup",
        "EVAL \"return redis.call('MOVE',KEYS[1],'0')\" 1 dup",
        "COMMAND GETKEYS MOVE a 1",
        "COMMAND GETKEYS LCS a b LEN",
        "COMMAND GETKEYS SUBSTR a 0 1",
        "FLUSHALL",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_lcs_substr_move_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def _redis_table_walk(a: bytes, b: bytes) -> bytes:
    """Redis's own algorithm: the full table, then the walk back (for the comparison)."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i - 1][j], table[i][j - 1])
    out = bytearray()
    i, j = len(a), len(b)
    while i > 0 and j > 0:
        if a[i - 1] == b[j - 1]:
            out.append(a[i - 1])
            i -= 1
            j -= 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return bytes(reversed(out))


def test_lcs_picks_the_same_subsequence_as_redis_table_walk() -> None:
    """On random strings with long runs (where the walk jumps), the bit-parallel table and its
    walk pick the subsequence Redis's full table picks."""
    rng = random.Random(17)
    for _ in range(300):
        a = bytes(rng.choice(b"ab") for _ in range(rng.randint(0, 60)))
        b = b"c" * rng.randint(0, 80) + bytes(rng.choice(b"abc") for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.5:
            a, b = b, a
        assert walk_back(a, b, LcsTable(a, b), 0).text == _redis_table_walk(a, b)


@pytest.mark.timeout(30)
def test_lcs_of_a_long_run_is_walked_in_jumps() -> None:
    """A byte against 10 MB whose only match is at the start: a walk of 10 million single
    steps in Redis (about a minute in Python), a few jumps in the engine (the timeout guards
    against a walk that steps)."""
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"SET", b"one", b"a"])
    engine.execute(client, [b"SET", b"long", b"a" + b"c" * 10_000_000])
    reply = engine.execute(client, [b"LCS", b"long", b"one", b"IDX", b"WITHMATCHLEN"])
    assert reply == Map([(b"matches", [[[0, 0], [0, 0], 1]]), (b"len", 1)])
    assert engine.execute(client, [b"LCS", b"one", b"long"]) == b"a"


def test_lcs_past_the_table_bound_is_refused_before_any_work() -> None:
    """Two 20,000-byte strings need a 1.6 GB table in Redis: refused, as Redis refuses it."""
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"SETRANGE", b"x", b"19999", b"x"])
    engine.execute(client, [b"SETRANGE", b"y", b"19999", b"y"])
    reply = engine.execute(client, [b"LCS", b"x", b"y", b"LEN"])
    assert isinstance(reply, CommandError)
    assert reply.text == msgs.LCS_TOO_MUCH_MEMORY


def test_move_invalidates_a_watch_in_both_databases() -> None:
    engine = Engine()
    mover = engine.connect()
    engine.execute(mover, [b"SET", b"k", b"v"])
    for db in (b"0", b"1"):
        watcher = engine.connect()
        engine.execute(watcher, [b"SELECT", db])
        engine.execute(watcher, [b"WATCH", b"k"])
        target = b"1" if db == b"0" else b"0"
        engine.execute(mover, [b"SELECT", db])
        assert engine.execute(mover, [b"MOVE", b"k", target]) == 1
        engine.execute(watcher, [b"MULTI"])
        engine.execute(watcher, [b"PING"])
        assert engine.execute(watcher, [b"EXEC"]) is NULL_ARRAY


def test_move_wakes_a_client_blocked_on_the_key_in_the_target_database() -> None:
    engine = Engine()
    waiter, mover = engine.connect(), engine.connect()
    engine.execute(waiter, [b"SELECT", b"1"])
    blocked = engine.execute(waiter, [b"BLPOP", b"l", b"0"])
    assert isinstance(blocked, Blocked)
    engine.execute(mover, [b"RPUSH", b"l", b"a"])
    assert engine.execute(mover, [b"MOVE", b"l", b"1"]) == 1
    assert engine.wait(blocked, 1) == [b"l", b"a"]


def test_move_replays_from_the_append_only_file(tmp_path: Path) -> None:
    """Keys moved (with a TTL, into several databases) are where MOVE put them after replay."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    engine = aof.engine
    s = Session(engine)
    s("SET", "a", "1")
    s("SET", "t", "2", "EX", "1000")
    s("RPUSH", "l", "x", "y")
    s("MOVE", "a", "1")
    s("MOVE", "t", "2")
    s("MOVE", "l", "3")
    s("SELECT", "3")
    s("MOVE", "l", "0")
    before = dump_state(engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()
